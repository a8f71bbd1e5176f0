"""What a scipy.sparse user reaches for on coiter Tensors and expressions (coiter/array_methods.py,
coiter/lazy.py): element-wise ``==`` and ``!=``, SciPy's method names, ``diagonal``/``trace``,
``real``/``imag``/``conj``, ``nonzero``/``count_nonzero``, ``copy``, and coiter matrices
handed to scipy.sparse.linalg's solvers. Values are compared with NumPy/SciPy on the same data."""
from __future__ import annotations

import gc

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import coiter
from coiter.lazy import Lazy

# CI (COITER_TEST_PROFILE=ci) leaves out the formats marked slow: csr, coo and dense cover
# the compressed, singleton and dense levels; plain pytest runs all five
FORMATS = ["csr", "coo", "dense", pytest.param("csc", marks=pytest.mark.slow),
           pytest.param("dcsr", marks=pytest.mark.slow)]


def _matrix(fmt: str, dtype: str = "float64", shape: tuple[int, int] = (7, 5), seed: int = 0,
            ) -> tuple[coiter.Tensor, np.ndarray]:
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random(shape) < 0.4, rng.integers(-3, 4, shape), 0).astype(dtype)
    if dense.dtype.kind == "c":
        dense = (dense + 1j * np.where(dense != 0, rng.integers(-2, 3, shape), 0)).astype(dtype)
    formats = {"csr": coiter.csr, "csc": coiter.csc, "coo": coiter.coo(2), "dcsr": coiter.dcsr,
               "dense": coiter.dense(2)}
    return coiter.Tensor.from_numpy(dense, format=formats[fmt]), dense


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["float64", "int32", "bool", "complex128"])
def test_equality_compares_element_wise(fmt: str, dtype: str) -> None:
    A, a = _matrix(fmt, dtype, seed=1)
    B, b = _matrix(fmt, dtype, seed=2)
    for got, ref in [(A == B, a == b), (A != B, a != b), (A == 0, a == 0), (A != 0, a != 0),
                     (0 != A, 0 != a), (A == b, a == b), (b != A, b != a), (A + B == B, a + b == b)]:
        assert isinstance(got, Lazy)
        out = got.to_numpy()
        assert out.dtype == np.bool_
        np.testing.assert_array_equal(out, ref)


def test_not_equal_to_zero_stays_sparse_and_equal_is_dense() -> None:
    A, a = _matrix("csr")
    ne = (A != 0).evaluate()
    assert ne.format == coiter.csr and ne.nnz <= int(np.count_nonzero(a)) + A.nnz
    eq = (A == 0).evaluate()
    assert eq.format.is_dense
    np.testing.assert_array_equal(ne.to_numpy(), a != 0)
    np.testing.assert_array_equal(eq.to_numpy(), a == 0)


def test_nan_is_unequal_to_itself() -> None:
    a = np.array([[np.nan, 0.0, 1.0], [0.0, np.inf, np.nan]])
    A = coiter.Tensor.from_numpy(a, format=coiter.csr)
    np.testing.assert_array_equal((A == A).to_numpy(), a == a)
    np.testing.assert_array_equal((A != A).to_numpy(), a != a)


def test_equality_with_other_objects_is_identity() -> None:
    A, _ = _matrix("csr")
    assert (A == None) is False  # noqa: E711 (the operator is what is tested)
    assert (A != None) is True  # noqa: E711
    assert (A == "A") is False
    assert ((A + 1) == None) is False  # noqa: E711
    with pytest.raises(ValueError, match="ambiguous"):
        if A == A:
            pass


def test_tensors_still_key_dictionaries_and_sets() -> None:
    A, _ = _matrix("csr")
    B, _ = _matrix("csr", seed=3)
    d = {A: "a", B: "b"}
    assert d[A] == "a" and d[B] == "b" and A in d
    assert A in {A, B} and len({A, B, A}) == 2
    e = A + B  # expressions hash too (by identity)
    assert {e: 1}[e] == 1


def test_a_tensor_read_by_two_pending_assignments_of_one_reader() -> None:
    """Regression: the readers of a DSL tensor were a WeakSet, which compares tensors with ==
    (now element-wise) when one reader is added twice."""
    i, j = coiter.index_vars("i j")
    b_vals = np.arange(12.0).reshape(3, 4)
    B = coiter.Tensor.from_numpy(b_vals, format=coiter.csr, name="B")
    A = coiter.Tensor((3, 4), format=coiter.csr, name="A")
    A[i, j] = B[i, j] * 2
    A[i, j] = B[i, j] * 3
    B[i, j] = B[i, j] + 1  # computes A's pending assignment first, with the old B
    np.testing.assert_array_equal(A.to_numpy(), b_vals * 3)
    np.testing.assert_array_equal(B.to_numpy(), b_vals + 1)
    del A
    gc.collect()


@pytest.mark.parametrize("fmt", FORMATS)
def test_scipy_method_names(fmt: str) -> None:
    A, a = _matrix(fmt, seed=4)
    B, b = _matrix(fmt, seed=5)
    S = sp.csr_array(a)
    np.testing.assert_array_equal(A.toarray(), a)
    np.testing.assert_array_equal(A.todense(), a)
    assert isinstance(A.todense(), np.ndarray)
    np.testing.assert_array_equal(A.multiply(B).to_numpy(), S.multiply(b).toarray())
    np.testing.assert_array_equal(A.multiply(2).to_numpy(), a * 2)
    np.testing.assert_array_equal(A.power(2).to_numpy(), S.power(2).toarray())
    np.testing.assert_array_equal((A + B).multiply(A).toarray(), (a + b) * a)
    assert A.count_nonzero() == S.count_nonzero()
    assert (A - A).count_nonzero() == 0  # stored zeros do not count
    assert (A + B).count_nonzero() == np.count_nonzero(a + b)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(6, 6), (7, 4), (3, 8), (0, 3)])
@pytest.mark.parametrize("offset", [0, 1, -1, 3, -5, 9])
def test_diagonal_and_trace(fmt: str, shape: tuple[int, int], offset: int) -> None:
    A, a = _matrix(fmt, shape=shape, seed=6)
    np.testing.assert_array_equal(A.diagonal(offset).to_numpy(), a.diagonal(offset))
    np.testing.assert_array_equal((2 * A).diagonal(offset).to_numpy(), (2 * a).diagonal(offset))
    assert float(A.trace(offset)) == np.trace(a, offset)
    if shape[0] == shape[1]:
        S = sp.csr_array(a)
        np.testing.assert_array_equal(A.diagonal(offset).to_numpy(), S.diagonal(offset))
        B, b = _matrix(fmt, shape=shape, seed=7)
        # the main diagonal of a square expression is part of its kernel
        np.testing.assert_allclose((A @ B).diagonal().to_numpy(), (a @ b).diagonal())


def test_diagonal_needs_a_matrix_and_an_integer() -> None:
    A, _ = _matrix("csr")
    with pytest.raises(coiter.ShapeError, match="matrices"):
        A.sum(axis=0).diagonal()
    with pytest.raises(coiter.ArgumentError, match="integer"):
        A.diagonal(1.5)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["complex128", "complex64", "float64", "int32", "bool"])
def test_real_imag_and_conjugate(fmt: str, dtype: str) -> None:
    A, a = _matrix(fmt, dtype, seed=8)
    for got, ref in [(A.real, a.real), (A.imag, a.imag), (A.conj(), a.conj()),
                     (A.conjugate(), a.conjugate()), ((A * 2).real, (a * 2).real),
                     ((A * 2).imag, (a * 2).imag), ((A * 2).conj(), (a * 2).conj())]:
        out = got.to_numpy()
        assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
        np.testing.assert_array_equal(out, ref)
    assert A.real.format == A.format and A.imag.format == A.format


def test_conj_is_an_intrinsic_in_index_notation() -> None:
    z = np.array([1 + 2j, 0, -3j, np.inf - 1j])
    a = coiter.evaluate("a(i) = conj(z(i)) * z(i)", z=coiter.Tensor.from_numpy(z, format="s"))
    with np.errstate(invalid="ignore"):  # inf * 0 in the reference, as in the kernel
        np.testing.assert_array_equal(a.to_numpy(), np.conjugate(z) * z)


@pytest.mark.parametrize("fmt", FORMATS + ["sss"])
def test_nonzero_in_row_major_order(fmt: str) -> None:
    rng = np.random.default_rng(9)
    if fmt == "sss":
        a = np.where(rng.random((3, 4, 5)) < 0.3, rng.integers(-2, 3, (3, 4, 5)), 0).astype(float)
        A = coiter.Tensor.from_numpy(a, format="sss")
    else:
        A, a = _matrix(fmt, seed=10)
    got = A.nonzero()
    assert len(got) == a.ndim
    for g, r in zip(got, np.nonzero(a)):
        np.testing.assert_array_equal(g, r)
    for g, r in zip((A - A).nonzero(), np.nonzero(a - a)):  # stored zeros are no entries
        np.testing.assert_array_equal(g, r)
    for g, r in zip((A + 1).nonzero(), np.nonzero(a + 1)):  # a dense expression
        np.testing.assert_array_equal(g, r)


def test_copy_owns_its_arrays() -> None:
    A, a = _matrix("csr")
    C = A.copy()
    np.testing.assert_array_equal(C.to_numpy(), a)
    assert C.format == A.format
    assert not np.shares_memory(C.storage.vals, A.storage.vals)
    assert not np.shares_memory(C.storage.levels[1]["crd"], A.storage.levels[1]["crd"])
    C.storage.vals[:] = 0
    np.testing.assert_array_equal(A.to_numpy(), a)


def _spd(n: int, dtype: str = "float64") -> sp.csr_array:
    m = sp.random_array((n, n), density=0.05, random_state=11, format="csr", dtype=dtype)
    return sp.csr_array(m @ m.conj().T + 4 * sp.eye_array(n))


def test_scipy_solvers_take_coiter_matrices() -> None:
    S = _spd(120)
    A = coiter.Tensor.from_scipy(S)
    b = np.arange(120.0) / 120
    x, info = sla.cg(A, b, rtol=1e-12)
    assert info == 0
    np.testing.assert_allclose(S @ x, b, atol=1e-9)
    x, info = sla.gmres(A + 0.5 * A, b, rtol=1e-12)  # an expression is an operator too
    assert info == 0
    np.testing.assert_allclose(1.5 * (S @ x), b, atol=1e-9)
    got = np.sort(sla.eigsh(A, k=3, return_eigenvectors=False))
    ref = np.sort(sla.eigsh(S, k=3, return_eigenvectors=False))
    np.testing.assert_allclose(got, ref, rtol=1e-10)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_linear_operator_products_and_adjoints(dtype: str) -> None:
    rng = np.random.default_rng(12)
    S = sp.random_array((9, 6), density=0.4, random_state=13, format="csr", dtype=dtype)
    if dtype == "complex128":
        S = sp.csr_array(S + 1j * S.power(2))
    A = coiter.Tensor.from_scipy(S)
    op = sla.aslinearoperator(A)
    assert op.shape == (9, 6) and op.dtype == S.dtype
    x, y = rng.random(6), rng.random(9)
    X, Y = rng.random((6, 3)), rng.random((9, 2))
    np.testing.assert_allclose(op.matvec(x), S @ x)
    np.testing.assert_allclose(op.rmatvec(y), S.conj().T @ y)
    np.testing.assert_allclose(op.matmat(X), S @ X)
    np.testing.assert_allclose(op.rmatmat(Y), S.conj().T @ Y)
    np.testing.assert_allclose(op.matvec(x[:, None]), (S @ x)[:, None])
    got = sla.svds(A, k=2, return_singular_vectors=False, random_state=0)
    ref = sla.svds(S, k=2, return_singular_vectors=False, random_state=0)
    np.testing.assert_allclose(np.sort(got), np.sort(ref), rtol=1e-10)


def test_operands_of_python_operators_are_named_in_errors() -> None:
    """Regression: the message said "operand None" for an operand of a Python operator."""
    A, _ = _matrix("csr")
    with pytest.raises(coiter.ArgumentError, match="^an operand of type str is not a tensor"):
        A.power("x")
    with pytest.raises(coiter.DTypeError, match="^an operand holds Python objects"):
        A.multiply(np.array([[object()] * 5] * 7))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "complex128", "bool"])
def test_numpy_norms_without_densifying(fmt: str, dtype: str) -> None:
    A, a = _matrix(fmt, dtype, seed=14)
    for ord in [None, "fro", 1, -1, np.inf, -np.inf, 2, "nuc"]:
        got, ref = np.linalg.norm(A, ord), np.linalg.norm(a, ord)
        assert type(got) is type(ref), ord
        np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == "float32" else 1e-12)
    np.testing.assert_allclose(np.linalg.norm(A + A), np.linalg.norm(a + a), rtol=1e-5)
    v = a[:, 1].copy()
    V = coiter.Tensor.from_numpy(v, format="s" if fmt != "dense" else "d")
    for ord in [None, 2, 1, 0, 3, 0.5, -2, np.inf, -np.inf]:
        with np.errstate(divide="ignore"):
            got, ref = np.linalg.norm(V, ord), np.linalg.norm(v, ord)
        assert type(got) is type(ref), ord
        np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == "float32" else 1e-12)
    np.testing.assert_allclose(np.linalg.norm(A, axis=1), np.linalg.norm(a, axis=1))  # dense path


def test_norms_of_large_sparse_matrices_do_not_densify(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COITER_DENSIFY_LIMIT", "1000")
    S = sp.random_array((3000, 2000), density=0.001, random_state=15, format="csr")
    A = coiter.Tensor.from_scipy(S)
    np.testing.assert_allclose(np.linalg.norm(A), sla.norm(S), rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(A, 1), sla.norm(S, 1), rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(A, np.inf), sla.norm(S, np.inf), rtol=1e-12)
    with pytest.raises(coiter.DensifyError, match="COITER_DENSIFY_LIMIT"):
        np.linalg.norm(A, 2)  # the spectral norm needs the dense array


@pytest.mark.parametrize("fmt", FORMATS)
def test_numpy_functions_that_are_methods(fmt: str) -> None:
    A, a = _matrix(fmt, "complex128", seed=16)
    np.testing.assert_array_equal(np.diagonal(A, 1).to_numpy(), np.diagonal(a, 1))
    np.testing.assert_array_equal(np.diagonal(A, offset=-2).to_numpy(), np.diagonal(a, offset=-2))
    assert complex(np.trace(A)) == np.trace(a)
    np.testing.assert_array_equal(np.real(A).to_numpy(), np.real(a))
    np.testing.assert_array_equal(np.imag(A + A).to_numpy(), np.imag(a + a))
    assert np.count_nonzero(A) == np.count_nonzero(a)
    for g, r in zip(np.nonzero(A), np.nonzero(a)):
        np.testing.assert_array_equal(g, r)
    # arguments the methods do not take: NumPy on the dense array
    np.testing.assert_array_equal(np.diagonal(A, 0, 1, 0), np.diagonal(a, 0, 1, 0))
    np.testing.assert_array_equal(np.count_nonzero(A, axis=0), np.count_nonzero(a, axis=0))
