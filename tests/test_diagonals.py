"""Diagonal accesses: an operand that repeats an index variable (``A(i,i)``: a trace, a
diagonal, a diagonal scaling) in the string syntax, the Python DSL and einsum, for every
storage of the operand, against NumPy. A sparse level is walked at the repeated index
only over a window of one coordinate (found by binary search where the level allows)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import coiter
from coiter import ArgumentError, ParseError, ShapeError
from helpers import generated_functions, random_array, tensor

MATRIX_FORMATS: list[Any] = [
    "dd", "ds", "sd", "ss", "ds:1,0", "ss:1,0", "dd:1,0", "uq", "uq:1,0",
    coiter.dia(), coiter.ell(), coiter.bcsr((2, 2)), coiter.hash_matrix(), coiter.csb((2, 2)),
]
ORDER3_FORMATS = ["ddd", "sss", "dsd", "sss:2,0,1", "ucq", "dds:1,2,0"]

# (string expression, einsum subscripts of the same, reference)
MATRIX_CASES = [
    ("t = A(i,i)", "ii->", lambda a, c: np.trace(a)),
    ("d(i) = A(i,i)", "ii->i", lambda a, c: np.diag(a).copy()),
    ("B(i,j) = A(i,i) * C(i,j)", "ii,ij->ij", lambda a, c: np.diag(a)[:, None] * c),
    ("t = A(i,i) * A(i,i)", "ii,ii->", lambda a, c: (np.diag(a) ** 2).sum()),
    ("y(j) = A(i,i) * C(i,j)", "ii,ij->j", lambda a, c: np.diag(a) @ c),
]


def _fid(f: Any) -> str:
    return f if isinstance(f, str) else f.to_string()


@pytest.mark.parametrize("fmt", MATRIX_FORMATS, ids=_fid)
@pytest.mark.parametrize("expr,spec,reference", MATRIX_CASES, ids=[c[1] for c in MATRIX_CASES])
def test_matrix_diagonals_in_the_string_syntax_and_einsum(fmt: Any, expr: str, spec: str, reference) -> None:
    rng = np.random.default_rng(abs(hash((expr, _fid(fmt)))) % 2**32)
    a, c = random_array(rng, (8, 8), 0.4), rng.standard_normal((8, 3))
    a[3, 3] = 0.0  # a missing diagonal entry
    A = tensor(a, fmt)
    expected = reference(a, c)
    ops = {"A": A, "C": c} if "C(" in expr else {"A": A}
    np.testing.assert_allclose(coiter.evaluate(expr, **ops).to_numpy(), expected, rtol=1e-12, atol=1e-12)
    operands = [A, A] if spec.count("ii") == 2 else ([A, c] if "ij" in spec else [A])
    np.testing.assert_allclose(coiter.einsum(spec, *operands).to_numpy(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fmt", ["dd", "ds", "ss", "ds:1,0", "uq"])
@pytest.mark.parametrize("out", ["d", "s"])
def test_a_diagonal_into_a_dense_or_sparse_vector_with_the_python_dsl(fmt: str, out: str) -> None:
    rng = np.random.default_rng(5)
    a = random_array(rng, (9, 9), 0.5)
    i = coiter.IndexVar("i")
    A = coiter.Tensor.from_numpy(a, format=fmt, name="A")
    d = coiter.Tensor((9,), format=out, name="d")
    d[i] = A[i, i] * 2
    np.testing.assert_allclose(d.to_numpy(), 2 * np.diag(a), rtol=1e-12)


@pytest.mark.parametrize("fmt", ORDER3_FORMATS)
def test_diagonals_of_order_3_tensors(fmt: str) -> None:
    rng = np.random.default_rng(9)
    t = random_array(rng, (5, 5, 4), 0.4)
    T = tensor(t, fmt)
    np.testing.assert_allclose(coiter.evaluate("m(k) = T(i,i,k)", T=T).to_numpy(),
                               np.einsum("iik->k", t), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(coiter.einsum("kii->k", tensor(t.transpose(2, 0, 1).copy(), fmt)).to_numpy(),
                               np.einsum("iik->k", t), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fa", ["ds", "ds:1,0", "ss:1,0", "uq"])
@pytest.mark.parametrize("fb", ["ss", "ds:1,0", "dd"])
def test_diagonals_of_two_operands_stored_in_different_orders(fa: str, fb: str) -> None:
    """Each operand's diagonal is solved against its own storage order (a shared variable
    made column-first B conflict with row-first A)."""
    rng = np.random.default_rng(13)
    a, b = random_array(rng, (7, 7), 0.5), random_array(rng, (7, 7), 0.5)
    got = coiter.evaluate("d(i) = A(i,i) * B(i,i)", A=tensor(a, fa), B=tensor(b, fb)).to_numpy()
    np.testing.assert_allclose(got, np.diag(a) * np.diag(b), rtol=1e-12)
    got = coiter.evaluate("d(i) = A(i,i) + B(i,i)", A=tensor(a, fa), B=tensor(b, fb)).to_numpy()
    np.testing.assert_allclose(got, np.diag(a) + np.diag(b), rtol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_diagonal_scaling_of_a_large_csr_matrix_in_parallel(threads: int) -> None:
    rng = np.random.default_rng(2)
    a = random_array(rng, (3000, 3000), 0.01)
    a[np.arange(0, 3000, 2), np.arange(0, 3000, 2)] = 1.5
    k = coiter.compile("B(i,j) = A(i,i) * A(i,j)", formats={"A": "csr", "B": "csr"})
    got = k(A=tensor(a, "csr"), threads=threads).to_numpy()
    np.testing.assert_allclose(got, np.diag(a)[:, None] * a, rtol=1e-12)


def test_a_sparse_row_is_searched_for_its_diagonal_entry() -> None:
    source = coiter.compile("d(i) = A(i,i)", formats={"A": "csr"}).source
    body = generated_functions(source)
    assert "_mid" in body  # binary search for the row's first coordinate at i


def test_bad_diagonals() -> None:
    with pytest.raises(ShapeError, match="A.i,i. reads a diagonal of modes of sizes 3 and 4"):
        coiter.evaluate("t = A(i,i)", A=tensor(np.ones((3, 4)), "ds"))
    with pytest.raises(ParseError, match="repeated index variable i in the result D"):
        coiter.compile("D(i,i) = a(i)")
    with pytest.raises(ParseError, match="output subscript 'i' is repeated"):
        coiter.einsum("i->ii", np.ones(3))
    i = coiter.IndexVar("i")
    d = coiter.Tensor((3, 3), name="D")
    d[i, i] = coiter.Tensor.from_numpy(np.ones(3), name="x")[i]
    with pytest.raises(ArgumentError, match="the result D.i,i. repeats index i"):
        d.to_numpy()
