"""torch tensors in and out (coiter/interop/torch_interop.py) and DLPack producers as dense
operands: values against torch's own densified tensors, shared memory where no copy is
claimed. torch is in the bench extra, not the test extra (its wheel is too large for CI):
these tests run where it is installed."""
from __future__ import annotations

import numpy as np
import pytest

import coiter
from coiter.errors import FormatError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(21)


def _dense(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.standard_normal(shape) * (RNG.random(shape) < 0.3)


@pytest.mark.parametrize("layout, fmt", [("csr", coiter.csr), ("csc", coiter.csc)])
def test_compressed_matrices_share_their_arrays(layout: str, fmt: coiter.Format) -> None:
    a = torch.from_numpy(_dense((12, 9)))
    s = a.to_sparse_csr() if layout == "csr" else a.to_sparse_csc()
    t = coiter.from_torch(s)
    assert t.format == fmt
    assert np.shares_memory(t.storage.vals, s.values().numpy())
    np.testing.assert_array_equal(t.to_numpy(), a.numpy())
    back = coiter.to_torch(t)
    assert str(back.layout) == f"torch.sparse_{layout}"
    assert np.shares_memory(back.values().numpy(), t.storage.vals)
    np.testing.assert_array_equal(back.to_dense().numpy(), a.numpy())


@pytest.mark.parametrize("shape", [(7,), (5, 6), (3, 4, 5)])
def test_coo_tensors_and_dense_tensors(shape: tuple[int, ...]) -> None:
    a = torch.from_numpy(_dense(shape))
    coo = a.to_sparse()
    t = coiter.from_torch(coo)
    assert t.format == coiter.coo(len(shape))
    np.testing.assert_array_equal(t.to_numpy(), a.numpy())
    np.testing.assert_array_equal(coiter.to_torch(t).to_dense().numpy(), a.numpy())
    d = coiter.from_torch(a)
    assert d.format.is_dense and np.shares_memory(d.storage.vals, a.numpy())
    assert np.shares_memory(coiter.to_torch(d).numpy(), d.storage.vals)
    # entries given out of order: coalesced first
    order = torch.from_numpy(RNG.permutation(coo._nnz()))
    messy = torch.sparse_coo_tensor(coo.indices()[:, order], coo.values()[order], coo.shape)
    np.testing.assert_array_equal(coiter.from_torch(messy).to_numpy(), a.numpy())


def test_torch_operands_in_expressions() -> None:
    a = torch.from_numpy(_dense((10, 8))).to_sparse_csr()
    x = torch.from_numpy(RNG.random(8))
    want = a.to_dense().numpy() @ x.numpy()
    np.testing.assert_allclose(coiter.einsum("ij,j->i", a, x).to_numpy(), want)
    np.testing.assert_allclose(coiter.evaluate("y(i) = A(i,j) * x(j)", A=a, x=x).to_numpy(), want)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    np.testing.assert_allclose(k(A=a, x=x).to_numpy(), want)


def test_unsupported_torch_tensors_are_named() -> None:
    hybrid = torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.ones(2, 3), (4, 3))
    with pytest.raises(FormatError, match="hybrid"):
        coiter.from_torch(hybrid)
    g = coiter.Tensor.from_numpy(np.abs(_dense((4, 4))), format="csr").with_fill(np.inf)
    with pytest.raises(FormatError, match="no fill value"):
        coiter.to_torch(g)
