"""Reductions other than sum (prod, min, max, any, all) against NumPy on the densified operands."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter.errors import ArgumentError, ParseError

REFERENCES = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max, "any": np.any, "all": np.all}


def _matrix(seed: int, shape: tuple[int, int] = (9, 7)) -> sp.csr_array:
    return sp.random_array(shape, density=0.4, format="csr", random_state=seed)


@pytest.mark.parametrize("op", list(REFERENCES))
@pytest.mark.parametrize("fmt", ["csr", "csc", "dcsr", "dense"])
def test_row_reduction_sees_implicit_zeros(op: str, fmt: str) -> None:
    """``op`` over a row counts its implicit zeros, as NumPy does on the dense matrix."""
    D = _matrix(1).toarray()
    D[2] = 0  # an empty row
    A = sp.csr_array(D)
    body = "A(i,j) > 0.5" if op in ("any", "all") else "A(i,j)"
    dense = D > 0.5 if op in ("any", "all") else D
    y = coiter.evaluate(f"y(i) = {op}(j, {body})", A=coiter.Tensor.from_scipy(A).asformat(fmt))
    np.testing.assert_allclose(y.to_numpy(), REFERENCES[op](dense, axis=1))


@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.complex128, np.float32])
def test_any_and_all_of_numbers_are_bools(op: str, dtype) -> None:
    """As np.any / np.all: a value is true when nonzero, and the result is bool, also
    inside arithmetic (bool times float is float)."""
    D = (_matrix(5).toarray() * 3).astype(dtype)
    D[4] = 0
    D[6] = 2  # a full row
    A = coiter.Tensor.from_numpy(D, format="csr")
    y = coiter.evaluate(f"y(i) = {op}(j, A(i,j))", A=A)
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y.to_numpy(), REFERENCES[op](D, axis=1))
    x = np.arange(9.0)
    z = coiter.evaluate(f"z = sum(i, {op}(j, A(i,j)) * x(i))", A=A, x=x)
    assert z.dtype == np.float64
    np.testing.assert_allclose(z.to_numpy(), REFERENCES[op](D, axis=1) @ x)


@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.parametrize("body, make", [
    # the body computed in bool: (bool)2 - (bool)1 is 0, where NumPy's 2 - 1 is true
    ("B(i,j) - 1", lambda B, C: B - 1),
    # 0 / 0 is NaN, true for np.any; in bool it was C's integer division by zero
    ("C(i,j) / C(j,i)", lambda B, C: C / C.T),
    # a float body of an int8 result: 0.5 * B was computed in int8, 0.5 truncated to 0
    ("B(i,j) * 0.5", lambda B, C: B * 0.5),
    # a sum inside: computed in bool it was an "or" of its terms
    ("sum(k, B(i,k) * C(k,j)) - 1", lambda B, C: B @ C - 1),
])
@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_any_and_all_compute_their_body_in_its_own_type(op: str, body: str, make, fmt: str) -> None:
    """any/all test the body's value as NumPy computes it (fuzz seed 60 case 566): not the
    result's type (bool, or int8 below), in which quotients divided bools."""
    B = np.array([[2, 1, 1], [1, 1, 1], [2, 3, 0]], dtype=np.int8)
    C = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [2.0, 0.0, 3.0]])
    operands = {n: coiter.Tensor.from_numpy(a, format=fmt) for n, a in (("B", B), ("C", C))
                if f"{n}(" in body}
    with np.errstate(all="ignore"):
        want = REFERENCES[op](make(B.astype(np.int64), C), axis=1)
    y = coiter.evaluate(f"y(i) = {op}(j, {body})", **operands)
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y.to_numpy(), want)
    w = np.array([1, -2, 3], dtype=np.int8)  # an int8 result (bool * int8)
    z = coiter.evaluate(f"z(i) = {op}(j, {body}) * w(i)", w=w, **operands)
    assert z.dtype == np.int8
    np.testing.assert_array_equal(z.to_numpy(), want * w)


@pytest.mark.parametrize("fmt", ["csr", "dense"])
def test_a_power_of_any_plus_a_sparse_operand(fmt: str) -> None:
    """Where the sparse ``D`` is absent, ``any(...) + 2 + D(j,l)`` folds into ``any + 2``,
    an integer, and the power became an integer power: 0 for 1/3 (fuzz seed 61 case
    1903); NumPy's sum is a float there."""
    C = np.zeros((3, 2, 2))
    C[0, 1, 0] = C[2, 1, 1] = C[1, 0, 0] = 1.5
    D = np.array([[1.0, 0.0], [0.0, 2.0]])  # D(j,l)
    got = coiter.evaluate("A(l,j) = pow(any(i, C(i,l,j)) + 2 + D(j,l), -1)", out_format="dd",
                          C=C, D=coiter.Tensor.from_numpy(D, format=fmt))
    np.testing.assert_allclose(got.to_numpy(), 1 / (np.any(C, axis=0) + 2 + D.T))


@pytest.mark.parametrize("op", ["min", "max"])
def test_column_reduction(op: str) -> None:
    A = _matrix(2)
    y = coiter.evaluate(f"y(j) = {op}(i, A(i,j))", A=A)
    np.testing.assert_allclose(y.to_numpy(), REFERENCES[op](A.toarray(), axis=0))


def test_min_plus_with_a_dense_vector() -> None:
    """A min-plus product over the dense semantics (implicit zeros are zeros)."""
    A = _matrix(3)
    x = np.random.default_rng(3).random(7)
    y = coiter.evaluate("y(i) = min(j, A(i,j) + x(j))", A=A, x=x)
    np.testing.assert_allclose(y.to_numpy(), (A.toarray() + x).min(axis=1))


def test_nested_and_mixed_reductions() -> None:
    rng = np.random.default_rng(4)
    B = rng.random((4, 5, 3))
    B[B < 0.3] = 0
    c = rng.random(4)
    got = coiter.evaluate("a(i) = max(j, sum(k, B(i,j,k))) + c(i)",
                          B=coiter.Tensor.from_numpy(B, format="csf"), c=c)
    np.testing.assert_allclose(got.to_numpy(), B.sum(axis=2).max(axis=1) + c)
    got = coiter.evaluate("a = prod(i, max(j, B(i,j,k)) + 1)", B=B)
    # the implicit sum over k sits innermost, inside the max: prod(i, max(j, sum(k, B)) + 1)
    np.testing.assert_allclose(got.to_numpy(), (B.sum(axis=2).max(axis=1) + 1).prod())


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("dtype", [np.uint64, np.int64, np.uint32, np.int8])
def test_min_and_max_of_every_integer_width(op: str, dtype) -> None:
    """Their identities are the type's extremes (uint64's max, 2**64 - 1, above int64's
    range: README run's seed 4225571808 of tests/test_operator_chains.py), and the
    result is NumPy's, implicit zeros included."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    D = rng.integers(info.min, info.max, size=(9, 7), dtype=dtype, endpoint=True)
    D[rng.random(D.shape) < 0.4] = 0
    D[3] = 0
    D[5] = info.max
    y = coiter.evaluate(f"y(i) = {op}(j, A(i,j))", A=coiter.Tensor.from_numpy(D, format="csr"))
    np.testing.assert_array_equal(y.to_numpy(), REFERENCES[op](D, axis=1))
    assert y.to_numpy().dtype == dtype


def test_product_is_not_hoisted_out_of_a_min() -> None:
    """min(j, B(i,j)) * d(i) with negative d is no min of the products."""
    A = _matrix(5)
    d = -np.arange(1, 10, dtype=np.float64)
    y = coiter.evaluate("y(i) = min(j, A(i,j)) * d(i)", A=A, d=d)
    np.testing.assert_allclose(y.to_numpy(), A.toarray().min(axis=1) * d)


def test_dsl_reduce() -> None:
    i, j = coiter.index_vars("i j")
    A = coiter.Tensor.from_scipy(_matrix(6))
    y = coiter.Tensor((9,))
    y[i] = coiter.reduce("max", j, A[i, j] * 2)
    np.testing.assert_allclose(y.to_numpy(), 2 * A.to_numpy().max(axis=1))
    with pytest.raises(ArgumentError, match="unknown reduction"):
        coiter.reduce("median", j, A[i, j])


def test_elementwise_min_and_max_stay_elementwise() -> None:
    """min(b(i), c(i)) and max(i, b(i)) (i a result index) are intrinsics, not reductions."""
    b, c = np.array([1.0, -2.0, 3.0]), np.array([0.5, 0.0, 4.0])
    np.testing.assert_allclose(coiter.evaluate("a(i) = min(b(i), c(i))", b=b, c=c).to_numpy(),
                               np.minimum(b, c))
    np.testing.assert_allclose(coiter.evaluate("a(i) = max(i, b(i))", b=b).to_numpy(),
                               np.maximum(np.arange(3), b))


@pytest.mark.parametrize("text, message", [
    ("y(i) = sum(i, b(i))", "index variable of the result"),
    ("y(i) = min(j, b(i))", "no tensor in its body"),
    ("y = max(B, B)", r"element-wise max of a tensor B of order 0, write B\(\)"),
    ("y(i) = prod(2, b(i))", "the index variable prod reduces over"),
])
def test_bad_reductions_are_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        coiter.parse(text)


def test_pos_over_a_min_reduction_is_refused() -> None:
    """Walking only A's positions would skip the implicit zeros a min must see; the
    unscheduled kernel visits them."""
    from coiter.errors import ScheduleError

    A = _matrix(7)
    with pytest.raises(ScheduleError, match="does not vanish"):
        coiter.compile("y(i) = min(j, A(i,j))", formats={"A": "csr"}, schedule="pos(j,jpos,A(i,j))")
    np.testing.assert_allclose(coiter.evaluate("y(i) = min(j, A(i,j))", A=A).to_numpy(),
                               A.toarray().min(axis=1))
