"""Runs summed in eight lanes (coiter/lower/vector_runs.py).

The helper changes the order of a run's additions, so the tests pin the order itself: every
result equals, bit for bit, a Python sum in the documented order (lane j adds positions j,
j + 8, ... from 0.0; the lanes added as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)))
where the operand's runs take the helper, and the one-by-one sum where they do not, for
double values (``coiter_run_vdot_*``) and float ones (``coiter_run_vdotf_*``). Both helpers
give the same bits: the vector loop (fast gathers) and the scalar one (kernels built
without AVX-512, or with COITER_FAST_GATHER=0). Values span 16 orders of magnitude so that
another order would show."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import coiter
from helpers import (
    cflags, csr_with_lengths, generated_functions, row_sums_as_coiter, row_sums_in_lanes,
    row_sums_in_order, takes_lanes,
)

SPMV = "y(i) = A(i,j) * x(j)"


@pytest.fixture(scope="module", autouse=True, params=["native", "no-avx512", "plain-loads"])
def helper(request: pytest.FixtureRequest) -> Iterator[str]:
    """Kernels built meanwhile take the vector helper or its scalar twin."""
    with cflags(request.param):
        yield request.param


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), average=st.sampled_from([4, 7, 8, 12, 16, 40]),
       rows=st.sampled_from([5, 24, 300]), index=st.sampled_from([np.int32, np.int64]),
       threads=st.sampled_from([1, 2]), special=st.sampled_from([0.0, 0.05]),
       dtype=st.sampled_from([np.float64, np.float32]))
def test_spmv_rows_in_the_documented_order(seed: int, average: int, rows: int, index: type,
                                           threads: int, special: float, dtype: type) -> None:
    """Row lengths spread around the average (empty rows, rows shorter than a lane group and
    rows of several groups and a tail), both value types and index widths, inf, NaN and
    signed zeros."""
    rng = np.random.default_rng(seed)
    n = 200
    lengths = np.minimum(rng.integers(0, 2 * average + 1, rows), n)
    a = csr_with_lengths(rng, lengths.tolist(), n, index, special).astype(dtype)
    x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 4, n)).astype(dtype)
    k = coiter.compile(SPMV, formats={"A": "csr"}, dtype=dtype)
    got = k(A=coiter.Tensor.from_scipy(a), x=x, threads=threads).to_numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, row_sums_as_coiter(a, x))


@pytest.mark.parametrize("lengths, lanes", [
    ([9] * 40, False),                    # even runs under 16 keep the loop (a band matrix)
    ([9] * 38 + [2, 30], False),          # a few uneven ones among them too
    ([9] * 20 + [5, 13] * 10, True),      # uneven: the helper, where gathers are fast
    ([7] * 30 + [8] * 10, False),         # uneven, but under 7.5 on average
    ([20] * 40, True),                    # from 16 on average even runs take it too, anywhere
    ([8, 9], True),                       # too few runs to judge: the helper, gathers fast
])
def test_which_operands_take_the_lanes(helper: str, lengths: list[int], lanes: bool) -> None:
    """The flag follows the average and the evenness of the runs, and under 16 a run the
    speed of gathers (on AMD's Zen 4 the eight scalar lanes took twice the loop's time on
    runs of 8 to 12, docs/performance.md), and the data tell the two orders apart."""
    rng = np.random.default_rng(len(lengths) + sum(lengths))
    a = csr_with_lengths(rng, lengths, 64, np.int32)
    x = rng.standard_normal(64)
    if helper == "plain-loads" and sum(lengths) < 16 * len(lengths):
        lanes = False
    assert takes_lanes(np.array(lengths)) == lanes
    assert not np.array_equal(row_sums_in_lanes(a, x), row_sums_in_order(a, x))
    k = coiter.compile(SPMV, formats={"A": "csr"})
    want = row_sums_in_lanes(a, x) if lanes else row_sums_in_order(a, x)
    for threads in (1, 2):
        got = k(A=coiter.Tensor.from_scipy(a), x=x, threads=threads).to_numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fmt", ["csc", "dcsr"])
def test_column_sums_and_runs_below_a_compressed_level(fmt: str) -> None:
    """x^T A sums CSC's columns; DCSR's runs sit below a compressed level (runs of 13 and 14
    on average: in lanes where gathers are fast, else one by one)."""
    rng = np.random.default_rng(3)
    a = csr_with_lengths(rng, rng.integers(4, 24, 60).tolist(), 80, np.int32)
    if fmt == "csc":
        expr, m, x = "y(j) = A(i,j) * x(i)", a.T.tocsr(), rng.standard_normal(60)
        operand = coiter.Tensor.from_scipy(sp.csc_array(a))
    else:
        expr, m, x = SPMV, a, rng.standard_normal(80)
        operand = coiter.Tensor.from_scipy(a, format="dcsr")
    k = coiter.compile(expr, formats={"A": fmt})
    assert "coiter_run_vdot_i" in generated_functions(k.source)
    for threads in (1, 2):
        got = k(A=operand, x=x, threads=threads).to_numpy()
        np.testing.assert_array_equal(got, row_sums_as_coiter(m, x))


@pytest.mark.parametrize("dtype, helper", [(np.float64, "coiter_run_vdot_i"),
                                           (np.float32, "coiter_run_vdotf_i")])
@pytest.mark.parametrize("formats", [{"B": "sss", "A": "ss"}, {"B": "sss", "A": "ds"}])
def test_ttv_fibers(formats: dict[str, str], dtype: type, helper: str) -> None:
    """TTV sums each fiber of a CSF tensor: the same helper, also where the result is
    assembled in a parallel region with labels (each loop tests the flag itself)."""
    rng = np.random.default_rng(4)
    # fibers of 22 on average: the lanes whatever the gathers
    dense = (rng.standard_normal((12, 10, 90)) * (rng.random((12, 10, 90)) < 0.25)).astype(dtype)
    b = coiter.Tensor.from_numpy(dense, format=formats["B"])
    c = rng.standard_normal(90).astype(dtype)
    fibers = sp.csr_array(dense.reshape(120, 90))
    fibers = fibers[np.diff(fibers.indptr) > 0]
    assert takes_lanes(np.diff(fibers.indptr))
    want = row_sums_in_lanes(fibers, c)
    k = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats=formats, dtype=dtype)
    assert helper in generated_functions(k.source)
    for threads in (1, 2):
        coords, vals = k(B=b, c=c, threads=threads).storage.to_coords()
        nonempty = np.abs(dense).sum(axis=2) > 0
        got = np.zeros((12, 10), dtype)
        got[tuple(coords)] = vals
        np.testing.assert_array_equal(got[nonempty], want)
