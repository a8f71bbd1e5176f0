"""Runs of up to SHORT_RUN positions summed without a loop (coiter/lower/short_runs.py).

The helper must add a run's products one by one in position order, as the loop does: every
result equals, bit for bit, a Python sum in that order, for both index widths, both settings
of the single-runs flag (runs averaging under 1.5 positions or not), 1 and 2 threads. Values
span 16 orders of magnitude so that another order would show."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import coiter
from coiter.codegen.c import preamble
from coiter.lower.short_runs import SHORT_RUN
from coiter.runtime.compiler import load_library
from helpers import csr_with_lengths, row_sums_in_order, spread_values

pytestmark = pytest.mark.usefixtures("gather_helpers")  # the helper on any processor

SPMV = "y(i) = A(i,j) * x(j)"
# run lengths drawn per kind of operand: nearly all single (under 2.25 a run: rows go eight
# at a time, coiter/lower/tiny_runs.py), short (2.8), and a mix with runs past SHORT_RUN
# (averages stay under the long-run split's 16)
LENGTHS = {"single": [0, 1, 1, 1, 1, 1, 1, 1, 2, 5], "short": [1, 2, 3, 4, 4],
           "mixed": list(range(0, 13))}


def _source(kernel: coiter.Kernel) -> str:
    return "".join(v.source for v in kernel.core.variants())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(sorted(LENGTHS)),
       rows=st.integers(0, 60), index=st.sampled_from([np.int32, np.int64]),
       threads=st.sampled_from([1, 2]))
def test_short_runs_add_in_the_loops_order(seed: int, kind: str, rows: int, index: type,
                                           threads: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    a = csr_with_lengths(rng, rng.choice(LENGTHS[kind], rows).tolist(), n, index)
    x = spread_values(rng, n)
    k = coiter.compile(SPMV, formats={"A": "csr"})
    got = k(A=coiter.Tensor.from_scipy(a), x=x, threads=threads).to_numpy()
    assert np.array_equal(got, row_sums_in_order(a, x))
    assert f"coiter_run_dot_{'i32' if index == np.int32 else 'i64'}(" in _source(k)


def test_lanes_past_a_run_read_nothing() -> None:
    """Lanes past a run are masked: an infinite or NaN x[0] (where masked lanes' coordinates
    would point) reaches only the rows that store column 0, and a row summing to -0.0 keeps
    its sign as the loop's does (the loop starts from +0.0)."""
    # 2.31 entries a row on average: the short-runs flag is set
    a = sp.csr_array(np.array([[0.0, 2.0, 0.0, 3.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, -1.0, 0.0],
                               [0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 4.0, 5.0]]
                              + [[0.0, 1.0, 1.0, 1.0]] * 7))
    k = coiter.compile(SPMV, formats={"A": "csr"})
    for first in (np.inf, np.nan):
        x = np.array([first, 1.0, 0.0, -2.0])
        got = k(A=a, x=x).to_numpy()
        np.testing.assert_array_equal(got, row_sums_in_order(a, x))
        assert np.isfinite(np.delete(got, 1)).all()
    got = k(A=a, x=np.array([1.0, 1.0, 0.0, 1.0])).to_numpy()
    assert np.signbit(got[2]) == np.signbit(np.float64(0.0) + -1.0 * 0.0)


def test_ttv_fibers_sum_in_order_at_any_thread_count() -> None:
    """TTV over a CSF tensor: the fibers are the runs; the result equals the one-by-one sums
    at 1 and 2 threads, single-heavy and mixed fibers alike."""
    rng = np.random.default_rng(3)
    for density in (0.004, 0.05):
        dense = np.where(rng.random((30, 40, 50)) < density,
                         spread_values(rng, 30 * 40 * 50).reshape(30, 40, 50), 0.0)
        c = spread_values(rng, 50)
        coords = np.array(np.nonzero(dense))
        fibers = sp.csr_array(dense.reshape(-1, 50))
        fibers = sp.csr_array(fibers[np.diff(fibers.indptr) > 0])
        ref = row_sums_in_order(fibers, c)
        k = coiter.compile("A(i,j) = B(i,j,k) * c(k)",
                           formats={"B": coiter.csf(3), "A": coiter.csf(2)})
        b = coiter.Tensor.from_coo(coords, dense[tuple(coords)], dense.shape, format=coiter.csf(3))
        for threads in (1, 2):
            got = k(B=b, c=c, threads=threads)
            assert np.array_equal(got.storage.vals, ref)
            np.testing.assert_allclose(got.to_numpy(), np.einsum("ijk,k->ij", dense, c),
                                       rtol=1e-12, atol=1e-300)
    assert "coiter_run_dot_i32(" in _source(k)


def test_only_double_products_of_a_run_and_a_gather_take_the_helper() -> None:
    """float32 values, and a product whose dense factor is not indexed by the run's
    coordinate, keep the loop; their values still match SciPy."""
    rng = np.random.default_rng(5)
    a = csr_with_lengths(rng, [SHORT_RUN, 1, 0, 3], 6, np.int32)
    k32 = coiter.compile(SPMV, formats={"A": "csr"})
    a32 = a.astype(np.float32)
    x32 = np.arange(1.0, 7.0, dtype=np.float32)
    np.testing.assert_allclose(k32(A=a32, x=x32).to_numpy(), a32 @ x32, rtol=1e-5)
    assert "coiter_run_dot" not in _source(k32)
    scaled = coiter.compile("y(i) = A(i,j) * b(i)", formats={"A": "csr"})
    b = rng.standard_normal(4)
    np.testing.assert_allclose(scaled(A=a, b=b).to_numpy(), (a.sum(axis=1)) * b, rtol=1e-12)
    assert "coiter_run_dot" not in _source(scaled)


@pytest.mark.parametrize("flags, taken", [
    ("-march=x86-64-v4", 1),  # AVX-512, no AMD Zen named
    ("-march=x86-64-v4 -D__znver4__", 0),  # AVX-512 on a Zen processor: slow gathers
    ("-march=x86-64-v3", 0),  # no AVX-512: the helpers would be the loop
    ("-march=x86-64-v4 -D__znver3__ -DCOITER_FAST_GATHER=1", 1),  # the user decides
    ("-march=x86-64-v4 -DCOITER_FAST_GATHER=0", 0),
])
def test_the_helpers_run_where_gathers_are_fast(monkeypatch: pytest.MonkeyPatch, flags: str,
                                                taken: int) -> None:
    """The C prelude's COITER_FAST_GATHER, which the short- and tiny-run flags require, by the
    processor the kernel is built for (a function returning it; nothing else runs)."""
    monkeypatch.setenv("COITER_CFLAGS", f"-O1 -fPIC -std=c11 {flags}")
    source = preamble("INT32_MAX") + "int fast_gather(void) { return COITER_FAST_GATHER; }\n"
    lib = load_library(source)
    assert lib.fast_gather() == taken


def test_the_run_flags_require_fast_gathers() -> None:
    """Each flag that sends a statement to a helper is false where gathers are slow, so the C
    compiler drops that version; the long-run split, which gathers nothing, is not."""
    k = coiter.compile(SPMV, formats={"A": "csr"})
    a = csr_with_lengths(np.random.default_rng(0), [1, 2, 3, 2], 40, np.int32)
    x = np.arange(40.0)
    np.testing.assert_array_equal(k(A=coiter.Tensor.from_scipy(a), x=x).to_numpy(), a @ x)
    src = _source(k)
    assert "bool A2_short_runs = COITER_FAST_GATHER && " in src
    assert "bool A2_tiny_runs = COITER_FAST_GATHER && " in src
    assert "bool A2_long_runs = A2_pos" in src
