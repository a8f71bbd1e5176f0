"""Sums of sparse terms into a dense result, added one term at a time instead of merged
(coiter.concrete.concretize.SCATTERED_SUM_CASES): values against NumPy, and which sums
take that plan."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import coiter
from coiter.concrete.stmt import Sequence
from helpers import random_array, tensor

DTYPES = ["float64", "float32", "int32", "uint8", "complex128"]


def _operands(rng: np.random.Generator, shapes: dict[str, tuple[int, ...]], dtype: str,
              density: float = 0.3) -> dict[str, np.ndarray]:
    # through int64: a negative float cast to an unsigned type is the platform's choice
    return {n: (random_array(rng, s, density) * 4).round().astype(np.int64).astype(dtype)
            for n, s in shapes.items()}


def _sequenced(k: coiter.Kernel) -> bool:
    return isinstance(k.concrete.stmt, Sequence)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_three_sparse_vectors_add_into_a_dense_one_term_by_term(dtype: str, threads: int) -> None:
    rng = np.random.default_rng(1)
    ops = _operands(rng, {"B": (40,), "C": (40,), "D": (40,)}, dtype)
    k = coiter.compile("a(i) = B(i) - C(i) + D(i) * 2 + B(i)",
                       formats={"B": "s", "C": "s", "D": "s", "a": "d"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the plan of choice, not a fallback: no warning
        got = k(**{n: tensor(a, "s") for n, a in ops.items()}, threads=threads).to_numpy()
    want = ops["B"] - ops["C"] + ops["D"] * 2 + ops["B"]
    assert _sequenced(k) and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fills", [(1.5, 0, 0), (0, -2, 0), (1, 2, 3)])
def test_terms_with_fill_values_each_walk_the_dense_loop(fills: tuple[float, ...]) -> None:
    # each term's loop over a sparse operand with a nonzero fill declared the dense loop's
    # variable i in the function's scope: the second term's declaration did not compile
    rng = np.random.default_rng(2)
    ops = _operands(rng, {"B": (30,), "C": (30,), "D": (30,)}, "float64")
    filled = {n: np.where(a == 0, f, a) for (n, a), f in zip(ops.items(), fills)}
    k = coiter.compile("a(i) = B(i) - C(i) + D(i)", formats={"B": "s", "C": "s", "D": "s", "a": "d"},
                       fill_values=dict(zip(ops, fills)))
    got = k(**{n: coiter.Tensor.from_numpy(a, "s", fill_value=f)
               for (n, a), f in zip(filled.items(), fills)}).to_numpy()
    assert _sequenced(k)
    np.testing.assert_array_equal(got, filled["B"] - filled["C"] + filled["D"])


def test_matrix_terms_of_any_format_and_broadcast_terms() -> None:
    rng = np.random.default_rng(3)
    ops = _operands(rng, {"B": (6, 7), "C": (6,), "D": (7,), "E": (6, 7)}, "float64")
    formats = {"B": "dcsr", "C": "s", "D": "s", "E": "csr"}
    k = coiter.compile("a(i,j) = B(i,j) + C(i) + D(j) - E(i,j)", formats={**formats, "a": "dd"})
    got = k(**{n: tensor(a, formats[n]) for n, a in ops.items()}).to_numpy()
    assert _sequenced(k)
    np.testing.assert_array_equal(got, ops["B"] + ops["C"][:, None] + ops["D"][None, :] - ops["E"])


def test_large_sums_run_their_terms_in_parallel() -> None:
    rng = np.random.default_rng(4)
    ops = _operands(rng, {n: (300, 400) for n in "BCD"}, "float64", density=0.4)
    k = coiter.compile("a(i,j) = B(i,j) + C(i,j) + D(i,j)",
                       formats={"B": "csr", "C": "csr", "D": "csr", "a": "dd"})
    operands = {n: tensor(a, "csr") for n, a in ops.items()}
    for threads in (1, 2):
        np.testing.assert_array_equal(k(**operands, threads=threads).to_numpy(),
                                      ops["B"] + ops["C"] + ops["D"])
    assert _sequenced(k)


def test_a_scalar_sum_of_sums_adds_them_one_at_a_time() -> None:
    rng = np.random.default_rng(5)
    ops = _operands(rng, {"B": (50,), "C": (50,), "D": (50,)}, "float64")
    k = coiter.compile("a = B(i) + C(i) + D(i)", formats={"B": "s", "C": "s", "D": "s"})
    got = k(**{n: tensor(a, "s") for n, a in ops.items()}).to_numpy()
    assert _sequenced(k)
    np.testing.assert_allclose(got, sum(a.sum() for a in ops.values()), rtol=1e-12)


@pytest.mark.parametrize("expr, formats", [
    # a two-way union merges in one pass over the result
    ("a(i) = B(i) + C(i)", {"B": "s", "C": "s", "a": "d"}),
    # sparse results merge (adding one at a time would need a dense copy)
    ("a(i) = B(i) + C(i) + D(i)", {"B": "s", "C": "s", "D": "s", "a": "s"}),
    # terms over a dense operand merge no sparse ones
    ("a(i) = B(i,j) * D(j) + C(i)", {"B": "csr", "C": "d", "D": "d", "a": "d"}),
])
def test_sums_that_stay_merged(expr: str, formats: dict[str, str]) -> None:
    rng = np.random.default_rng(6)
    shapes = {"B": (8, 9) if "B(i,j)" in expr else (8,), "C": (8,), "D": (9,) if "D(j)" in expr else (8,)}
    ops = _operands(rng, {n: shapes[n] for n in formats if n != "a"}, "float64")
    k = coiter.compile(expr, formats=formats)
    got = k(**{n: tensor(a, formats[n]) for n, a in ops.items()}).to_numpy()
    want = ops["B"] @ ops["D"] + ops["C"] if "D(j)" in expr else sum(ops.values())
    assert not _sequenced(k)
    np.testing.assert_array_equal(got, want)


def test_a_scheduled_sum_keeps_the_loops_its_schedule_names() -> None:
    rng = np.random.default_rng(7)
    ops = _operands(rng, {"B": (30,), "C": (30,), "D": (30,)}, "float64")
    k = coiter.compile("a(i) = B(i) + C(i) + D(i)", formats={"B": "s", "C": "s", "D": "s", "a": "d"},
                       schedule="split(i,i0,i1,4)")
    got = k(**{n: tensor(a, "s") for n, a in ops.items()}).to_numpy()
    assert not _sequenced(k)
    np.testing.assert_array_equal(got, sum(ops.values()))


def test_a_dense_result_in_another_mode_order_keeps_it() -> None:
    # fuzz seed 77 case 954: the terms added into a dense result in row-major order, so a
    # 'ddd:2,1,0' result came back as 'ddd' (values right)
    rng = np.random.default_rng(8)
    ops = _operands(rng, {"B": (4, 5), "C": (5, 3), "D": (4, 5)}, "float64")
    formats = {"B": "dcsr", "C": "csr", "D": "ds", "A": "ddd:2,1,0"}
    k = coiter.compile("A(j,l,i) = B(j,l) + C(l,i) - D(j,l)", formats=formats)
    got = k(B=tensor(ops["B"], "dcsr"), C=tensor(ops["C"], "csr"), D=tensor(ops["D"], "ds"))
    assert _sequenced(k) and got.format == coiter.parse_format("ddd:2,1,0")
    np.testing.assert_array_equal(got.to_numpy(), ops["B"][:, :, None] + ops["C"][None] - ops["D"][:, :, None])
