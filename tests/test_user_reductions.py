"""Reductions by operators the user defines with an identity (coiter.define): values against
a fold of the operator's own NumPy semantics over the densified operands."""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import coiter
from coiter import ArgumentError, ScheduleError
from helpers import random_array, tensor

XOR = coiter.define("r_xor(a, b)", "(a != 0) != (b != 0)", identity=0)
POR = coiter.define("r_por(a, b)", "a + b + a*b", identity=0)  # 1 - prod(1 - x), mirrored
MAX = coiter.define("r_max(a, b)", "max(a, b)", identity=-np.inf)
OR_ABS = coiter.define("r_bigger(a, b)", "max(abs(a), abs(b))")  # no identity: a plain operator
OPS = {"r_xor": XOR, "r_por": POR, "r_max": MAX}


def fold(op: coiter.Operator, values: np.ndarray, axis: int) -> np.ndarray:
    """``op`` folded along ``axis`` from its identity, with NumPy's values (the reference)."""
    moved = np.moveaxis(values, axis, -1)
    out = [functools.reduce(lambda acc, v: op.value(acc, v), row, op.identity)
           for row in moved.reshape(-1, moved.shape[-1])]
    return np.asarray(out).reshape(moved.shape[:-1])


def check_close(got: coiter.Tensor, want: np.ndarray) -> None:
    np.testing.assert_allclose(np.asarray(got.to_numpy(), dtype=float),
                               np.asarray(want, dtype=float), rtol=1e-12, atol=1e-12)


@given(name=st.sampled_from(sorted(OPS)), fmt=st.sampled_from(["dense", "csr", "csc", "dcsr", "coo"]),
       rows=st.integers(1, 7), cols=st.integers(1, 7), density=st.sampled_from([0.0, 0.3, 0.9]),
       body=st.sampled_from(["A(i,j)", "A(i,j) * x(j)", "A(i,j) + x(j)", "A(i,j) - 2 * x(j)"]),
       around=st.sampled_from(["{}", "{} * 2", "{} + c(i)", "{} / 4"]), seed=st.integers(0, 999))
def test_row_reductions(name, fmt, rows, cols, density, body, around, seed) -> None:
    """Rows of a sparse matrix in any format reduced by the user's operator, mixed with
    arithmetic inside and around, against a fold over the dense rows."""
    op = OPS[name]
    rng = np.random.default_rng(seed)
    a = random_array(rng, (rows, cols), density)
    x, c = rng.standard_normal(cols), rng.standard_normal(rows)
    text = "y(i) = " + around.format(f"{name}(j, {body})")
    values = {"A(i,j)": a, "A(i,j) * x(j)": a * x, "A(i,j) + x(j)": a + x,
              "A(i,j) - 2 * x(j)": a - 2 * x}[body]
    reduced = fold(op, values, axis=1)
    want = {"{}": reduced, "{} * 2": reduced * 2, "{} + c(i)": reduced + c, "{} / 4": reduced / 4}[around]
    operands = {"A": tensor(a, fmt), "x": x, "c": c}
    used = {k: v for k, v in operands.items() if re.search(rf"\b{k}\(", text)}
    check_close(coiter.evaluate(text, **used), want)


@pytest.mark.parametrize("fmt", ["sss", "dss", "ddd"])
def test_nested_scalar_and_python_reductions(fmt) -> None:
    rng = np.random.default_rng(1)
    b = random_array(rng, (4, 5, 6), 0.3)
    B = tensor(b, fmt)
    check_close(coiter.evaluate("y(i) = r_por(j, r_por(k, B(i,j,k)))", B=B),
                fold(POR, b.reshape(4, 30), axis=1))
    check_close(coiter.evaluate("s = r_xor(i, r_xor(j, r_xor(k, B(i,j,k))))", B=B),
                fold(XOR, b.reshape(-1), axis=0))
    i, j, k = coiter.index_vars("i j k")
    y = coiter.Tensor((4, 5))
    y[i, j] = coiter.reduce(MAX, k, B[i, j, k]) + coiter.reduce("r_por", k, B[i, j, k])
    check_close(y, fold(MAX, b, axis=2) + fold(POR, b, axis=2))


def test_integer_and_column_reductions() -> None:
    a = sp.random(8, 6, density=0.4, format="csc", random_state=2, dtype=np.float64)
    m = (a * 10).astype(np.int64)
    got = coiter.evaluate("y(j) = r_por(i, A(i,j))", A=coiter.Tensor.from_scipy(m))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.to_numpy(), fold(POR, m.toarray(), axis=0))


def test_only_stored_entries_are_visited_when_the_fill_is_the_identity() -> None:
    """r_por(acc, 0) = acc: a row's implicit zeros change nothing, so the loop walks the
    stored entries; r_max's identity is -inf, so its loop walks every column."""
    a = random_array(np.random.default_rng(3), (5, 4000), 0.001)
    A = tensor(a, "csr")
    por = coiter.compile("y(i) = r_por(j, A(i,j))", {"A": "csr"}, count_iterations=True)
    check_close(por(A=A, threads=1), fold(POR, a, axis=1))
    assert por.iterations <= 5 * 2 + np.count_nonzero(a) + 16
    mx = coiter.compile("y(i) = r_max(j, A(i,j))", {"A": "csr"}, count_iterations=True)
    check_close(mx(A=A, threads=1), a.max(axis=1))
    assert mx.iterations >= 5 * 4000


@pytest.mark.parametrize("threads", [1, 2])
def test_an_outer_parallel_loop_is_fine(threads) -> None:
    a = random_array(np.random.default_rng(4), (300, 50), 0.2)
    k = coiter.compile("y(i) = r_por(j, A(i,j))", {"A": "csr"},
                       schedule="parallelize(i,CPUThread,NoRaces)")
    check_close(k(A=tensor(a, "csr"), threads=threads), fold(POR, a, axis=1))


def test_what_is_no_reduction() -> None:
    """An operator without an identity, or not associative, stays an elementwise call;
    reducing by it is an ArgumentError; OpenMP cannot combine a user's reduction."""
    a = np.array([[1.0, -3.0], [2.0, 0.5]])
    got = coiter.evaluate("y(i) = r_bigger(j, A(i,j))", A=a)  # the coordinate j, summed over j
    np.testing.assert_allclose(got.to_numpy(), np.maximum(np.arange(2), np.abs(a)).sum(axis=1))
    sat = coiter.define("r_sat(a, b)", "min(a + b, 10)", identity=0)  # not associative
    j = coiter.IndexVar("j")
    for op in (OR_ABS, sat, "r_nothing"):
        with pytest.raises(ArgumentError, match="unknown reduction"):
            coiter.reduce(op, j, coiter.Tensor.from_numpy(a)[coiter.IndexVar("i"), j])
    k = coiter.compile("s = r_por(i, b(i))", {"b": "s"},
                       schedule="parallelize(i,CPUThread,ParallelReduction)")
    with pytest.raises(ScheduleError, match="r_por is the user's"):
        k(b=tensor(np.ones(4), "s"))


def test_a_redefinition_reaches_the_next_evaluate() -> None:
    a = np.array([[1.0, 2.0, 3.0]])
    coiter.define("r_redef(x, y)", "x + y", identity=0)
    check_close(coiter.evaluate("y(i) = r_redef(j, A(i,j))", A=a), [6.0])
    coiter.define("r_redef(x, y)", "x + y + x*y", identity=0)
    check_close(coiter.evaluate("y(i) = r_redef(j, A(i,j))", A=a), [23.0])
