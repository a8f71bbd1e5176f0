"""Public API behaviour: DSL, einsum, kernels' modes, dtypes, index widths and errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from helpers import random_array


def test_python_dsl_evaluates_on_demand() -> None:
    rng = np.random.default_rng(3)
    A_np, x_np = random_array(rng, (7, 5), 0.4), rng.standard_normal(5)
    A, x = coiter.Tensor.from_numpy(A_np, format=coiter.csr), coiter.Tensor.from_numpy(x_np)
    y = coiter.Tensor((7,), format="d")
    i, j = coiter.index_vars("i j")
    y[i] = A[i, j] * x[j]
    np.testing.assert_allclose(y.to_numpy(), A_np @ x_np)
    C = coiter.Tensor((7, 5), format=coiter.csr)
    C[i, j] = A[i, j] + A[i, j] * 2
    np.testing.assert_allclose(C.to_numpy(), 3 * A_np)


def test_einsum_matches_numpy() -> None:
    rng = np.random.default_rng(4)
    B, C = random_array(rng, (6, 4), 0.5), random_array(rng, (4, 3), 0.5)
    S = sp.csr_array(B)
    np.testing.assert_allclose(coiter.einsum("ij,jk->ik", S, C).to_numpy(), B @ C)
    np.testing.assert_allclose(coiter.einsum("ij,jk", S, sp.csr_array(C), out_format="ds").to_numpy(), B @ C)
    np.testing.assert_allclose(coiter.einsum("ij,ij->", S, B).to_numpy(), np.sum(B * B))


def test_assemble_then_compute_reuses_pattern() -> None:
    rng = np.random.default_rng(5)
    B, C = random_array(rng, (8, 6), 0.3), random_array(rng, (6, 7), 0.3)
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": "ds", "B": "ds", "C": "ds"})
    Bt, Ct = coiter.Tensor.from_numpy(B, format="ds"), coiter.Tensor.from_numpy(C, format="ds")
    pattern = k.assemble(B=Bt, C=Ct)
    fused = k(B=Bt, C=Ct)
    for key in ("pos", "crd"):
        np.testing.assert_array_equal(pattern.storage.levels[1][key], fused.storage.levels[1][key])
    assert not pattern.storage.vals.any()
    B2 = coiter.Tensor.from_numpy(B * 3, format="ds")  # same pattern, new values
    np.testing.assert_allclose(k.compute(pattern, B=B2, C=Ct).to_numpy(), (3 * B) @ C)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.complex128, np.bool_])
def test_value_types(dtype) -> None:
    rng = np.random.default_rng(6)
    A = (random_array(rng, (6, 5), 0.5) * 3).astype(dtype)
    x = (rng.standard_normal(5) * 3).astype(dtype)
    if dtype == np.complex128:
        A = A + 1j * A[::-1]
    y = coiter.evaluate("y(i) = A(i,j) * x(j)", A=sp.csr_array(A), x=x)
    assert y.dtype == np.result_type(A, x)
    ref = np.einsum("ij,j->i", A, x)
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-5)


def test_int64_index_arrays() -> None:
    rng = np.random.default_rng(7)
    A = sp.csr_array(random_array(rng, (9, 8), 0.3))
    A64 = sp.csr_array((A.data, A.indices.astype(np.int64), A.indptr.astype(np.int64)), shape=A.shape)
    x = rng.standard_normal(8)
    t = coiter.Tensor.from_scipy(A64)
    assert t.storage.index_dtype == np.int64
    np.testing.assert_allclose(coiter.evaluate("y(i) = A(i,j) * x(j)", A=t, x=x).to_numpy(), A @ x)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr})
    k(A=t, x=x)
    k(A=coiter.Tensor.from_scipy(A), x=x)
    assert "const int64_t* restrict A2_pos" in "".join(v.source for v in k.core.variants())


def test_shape_error_names_variable_and_sizes() -> None:
    with pytest.raises(coiter.ShapeError, match=r"index variable j .*5.*4"):
        coiter.evaluate("y(i) = A(i,j) * x(j)", A=np.ones((3, 5)), x=np.ones(4))


def test_parse_error_names_column() -> None:
    with pytest.raises(coiter.ParseError) as err:
        coiter.evaluate("y(i) = A(i,j) *", A=np.ones((2, 2)))
    assert err.value.column == 16


def test_bad_operand_data_raises_not_crashes() -> None:
    A = sp.csr_array(np.eye(4))
    A.indices[1] = 99
    with pytest.raises(coiter.FormatError):
        coiter.evaluate("y(i) = A(i,j) * x(j)", A=A, x=np.ones(4))


def test_user_names_are_sanitised_in_c() -> None:
    k = coiter.compile("y(i) = for(i,j) * x(j)", formats={"for": coiter.csr})
    assert "for_" in k.source
    rng = np.random.default_rng(8)
    A = random_array(rng, (4, 3), 0.5)
    x = rng.standard_normal(3)
    np.testing.assert_allclose(k(**{"for": A, "x": x}).to_numpy(), A @ x)


def test_concrete_notation_is_printed() -> None:
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr})
    assert str(k.concrete) == "forall(i, where(y(i) = t0(), forall(j, t0() += A(i,j) * x(j))))"
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": "ds", "B": "ds", "C": "ds"})
    assert "w0(j) += B(i,k) * C(k,j)" in str(k.concrete)


def test_the_kernel_table_is_bounded(monkeypatch) -> None:
    """Regression: every fresh DSL result name added a kernel that was never dropped."""
    monkeypatch.setattr(coiter.api, "_KERNELS_MAX", 4)
    monkeypatch.setattr(coiter.api, "_kernels", {})
    i = coiter.IndexVar("i")
    x = coiter.Tensor.from_numpy(np.arange(5.0))
    for n in range(10):
        y = coiter.Tensor((5,))
        y[i] = x[i] * n
        np.testing.assert_array_equal(y.to_numpy(), np.arange(5.0) * n)
    assert len(coiter.api._kernels) == 4


def test_a_kernel_densifying_a_sparse_operand_says_so_once() -> None:
    # compile without formats makes A dense: each call with a sparse A converted it silently
    # (300 us for a 10 x 10 CSR matrix, a MemoryError for a large one)
    import warnings

    a = sp.random_array((10, 8), density=0.3, format="csr", rng=np.random.default_rng(1))
    x = np.arange(8.0)
    k = coiter.compile("y(i) = A(i,j) * x(j)")
    with pytest.warns(coiter.PerformanceWarning, match=r"operand A is sparse \(format ds\).*dense A \(dd\)"):
        first = k(A=a, x=x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", coiter.PerformanceWarning)
        again = k(A=coiter.Tensor.from_scipy(a), x=x)  # said once per kernel and operand
        np.testing.assert_allclose(k(A=a.toarray(), x=x).to_numpy(), a @ x)  # dense: nothing to say
        csr = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr})
        np.testing.assert_allclose(csr(A=a, x=x).to_numpy(), a @ x)
    for out in (first, again):
        np.testing.assert_allclose(out.to_numpy(), a @ x)
    with pytest.warns(coiter.PerformanceWarning, match="operand x is sparse"):
        out = k(A=a.toarray(), x=coiter.Tensor.from_numpy(x, format="sparse_vector"))
    np.testing.assert_allclose(out.to_numpy(), a @ x)
