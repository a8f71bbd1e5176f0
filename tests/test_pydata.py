"""pydata/sparse arrays in and out (coiter/interop/pydata.py): values against pydata's own
densified arrays, and shared memory where the conversion claims no copy."""
from __future__ import annotations

import numpy as np
import pytest
import sparse

import coiter

RNG = np.random.default_rng(12)


def _coo(shape: tuple[int, ...], density: float = 0.3, seed: int = 0) -> sparse.COO:
    return sparse.random(shape, density=density, random_state=seed)


@pytest.mark.parametrize("shape", [(9,), (6, 7), (4, 5, 6), (3, 4, 2, 5)])
def test_coo_shares_its_arrays_both_ways(shape: tuple[int, ...]) -> None:
    x = _coo(shape)
    t = coiter.from_pydata(x)
    np.testing.assert_array_equal(t.to_numpy(), x.todense())
    assert t.format == coiter.coo(len(shape))
    assert np.shares_memory(t.storage.vals, x.data)
    assert np.shares_memory(t.storage.levels[-1]["crd"], x.coords)
    back = coiter.to_pydata(t)
    assert isinstance(back, sparse.COO)
    np.testing.assert_array_equal(back.todense(), x.todense())


def test_entries_out_of_order_are_sorted_not_trusted() -> None:
    x = _coo((8, 9), seed=1)
    order = RNG.permutation(x.nnz)
    # pydata told the entries are in order when they are not: coiter checks and sorts
    shuffled = sparse.COO(x.coords[:, order], x.data[order], shape=x.shape, sorted=True, has_duplicates=False)
    t = coiter.from_pydata(shuffled)
    np.testing.assert_array_equal(t.to_numpy(), x.todense())


@pytest.mark.parametrize("axis, fmt", [((0,), coiter.csr), ((1,), coiter.csc)])
def test_gcxs_matrices_are_csr_or_csc_without_copies(axis: tuple[int], fmt: coiter.Format) -> None:
    g = sparse.GCXS(_coo((30, 20), seed=2), compressed_axes=axis)
    t = coiter.from_pydata(g)
    assert t.format == fmt
    assert np.shares_memory(t.storage.vals, g.data) and np.shares_memory(t.storage.levels[1]["crd"], g.indices)
    np.testing.assert_array_equal(t.to_numpy(), g.todense())
    back = coiter.to_pydata(t)
    assert isinstance(back, sparse.GCXS) and back.compressed_axes == axis
    assert np.shares_memory(back.data, t.storage.vals)
    np.testing.assert_array_equal(back.todense(), g.todense())


def test_higher_order_gcxs_and_fill_values() -> None:
    g = sparse.GCXS(_coo((4, 5, 6), seed=3), compressed_axes=(0, 1))
    np.testing.assert_array_equal(coiter.from_pydata(g).to_numpy(), g.todense())
    x = sparse.COO(_coo((5, 5), seed=4).coords, np.arange(1.0, 1.0 + _coo((5, 5), seed=4).nnz),
                   shape=(5, 5), fill_value=np.inf)
    t = coiter.from_pydata(x)
    assert t.fill_value == np.inf
    np.testing.assert_array_equal(t.to_numpy(), x.todense())
    assert coiter.to_pydata(t).fill_value == np.inf


def test_pydata_operands_in_expressions() -> None:
    a = sparse.GCXS(_coo((12, 10), seed=5), compressed_axes=(0,))
    b = _coo((10, 8), seed=6)
    x = RNG.random(10)
    ad, bd = a.todense(), b.todense()
    np.testing.assert_allclose(coiter.einsum("ij,j->i", a, x).to_numpy(), ad @ x)
    np.testing.assert_allclose(coiter.einsum("ij,jk->ik", a, b).to_numpy(), ad @ bd)
    np.testing.assert_allclose(coiter.evaluate("y(i) = A(i,j) * x(j)", A=a, x=x).to_numpy(), ad @ x)
    k = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr", "B": "csr", "C": "csr"})
    np.testing.assert_allclose(k(A=a, B=b).to_numpy(), ad @ bd)
