"""Runs of up to SHORT_RUN positions summed without a loop (coiter/lower/short_runs.py).

The helper must add a run's products one by one in position order, as the loop does: every
result equals, bit for bit, a Python sum in that order, for double and float values
(``coiter_run_dot_*``, ``coiter_run_dotf_*``), both index widths, both settings of the
single-runs flag (runs averaging under 1.5 positions or not), 1 and 2 threads, and both
helpers: the one that gathers (fast gathers) and the one that reads four positions whole with
plain loads. Values span 16 orders of magnitude so that another order would show."""
from __future__ import annotations

import ctypes
from collections.abc import Iterator

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings, strategies as st

import coiter
from coiter.codegen.c import preamble
from coiter.lower.short_runs import SHORT_RUN
from coiter.runtime.compiler import load_library
from helpers import cflags, csr_with_lengths, row_sums_as_coiter, row_sums_in_order, spread_values


@pytest.fixture(scope="module", autouse=True, params=["native", "plain-loads"])
def helper(request: pytest.FixtureRequest) -> Iterator[str]:
    """Kernels built meanwhile take the gathering helper (on any processor) or the one with
    plain loads (COITER_FAST_GATHER=0)."""
    with cflags(request.param):
        yield request.param


SPMV = "y(i) = A(i,j) * x(j)"
# run lengths drawn per kind of operand: nearly all single (under 2.25 a run: rows go eight
# at a time, coiter/lower/tiny_runs.py), short (2.8), and a mix with runs past SHORT_RUN
# (6 on average; a few rows may average 7.5 or more and take the eight lanes instead,
# coiter/lower/vector_runs.py)
LENGTHS = {"single": [0, 1, 1, 1, 1, 1, 1, 1, 2, 5], "short": [1, 2, 3, 4, 4],
           "mixed": list(range(0, 13))}


def _source(kernel: coiter.Kernel) -> str:
    return "".join(v.source for v in kernel.core.variants())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(sorted(LENGTHS)),
       rows=st.integers(0, 60), index=st.sampled_from([np.int32, np.int64]),
       threads=st.sampled_from([1, 2]), dtype=st.sampled_from([np.float64, np.float32]))
# one "mixed" row of 11: the lanes' order, which a one-by-one reference took for a wrong sum
@example(seed=0, kind="mixed", rows=1, index=np.int32, threads=1, dtype=np.float64)
def test_short_runs_add_in_the_loops_order(seed: int, kind: str, rows: int, index: type,
                                           threads: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    a = csr_with_lengths(rng, rng.choice(LENGTHS[kind], rows).tolist(), n, index).astype(dtype)
    x = spread_values(rng, n).astype(dtype)
    k = coiter.compile(SPMV, formats={"A": "csr"}, dtype=dtype)
    got = k(A=coiter.Tensor.from_scipy(a), x=x, threads=threads).to_numpy()
    assert got.dtype == dtype and np.array_equal(got, row_sums_as_coiter(a, x))
    value = "f" if dtype == np.float32 else ""
    assert f"coiter_run_dot{value}_{'i32' if index == np.int32 else 'i64'}(" in _source(k)


def test_lanes_past_a_run_add_nothing() -> None:
    """Lanes past a run add nothing, whether masked (the gathering helper, whose masked lanes'
    coordinates point at x[0]) or read from the next run (plain loads): an infinite or NaN
    x[0] reaches only the rows that store column 0, and a row summing to -0.0 keeps its sign
    as the loop's does (the loop starts from +0.0)."""
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


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_the_next_runs_values_stay_out(bad: float) -> None:
    """Plain loads read up to three positions past a short run: an infinite or NaN value,
    or a coordinate at an infinite x, stored in the next rows changes only those rows."""
    lengths = [1, 2, 3, 1, 1, 4, 2, 1, 3, 2, 1, 2]
    a = csr_with_lengths(np.random.default_rng(7), lengths, 8, np.int32)
    x = np.arange(1.0, 9.0)
    k = coiter.compile(SPMV, formats={"A": "csr"})
    bad_values = a.copy()
    bad_values.data[a.indptr[3]:a.indptr[5]] = bad  # rows 3 and 4
    got = k(A=bad_values, x=x).to_numpy()
    assert np.array_equal(got, row_sums_in_order(bad_values, x), equal_nan=True)
    assert np.isfinite(np.delete(got, [3, 4])).all()
    column = a.indices[a.indptr[6]]  # x bad at a column of row 6: only rows storing it change
    x[column] = bad
    storing = [r for r in range(len(lengths)) if column in a.indices[a.indptr[r]:a.indptr[r + 1]]]
    got = k(A=a, x=x).to_numpy()
    assert np.array_equal(got, row_sums_in_order(a, x), equal_nan=True)
    assert np.isfinite(np.delete(got, storing)).all()


@pytest.mark.parametrize("last", [1, 2, 3, 4])
def test_runs_ending_near_the_last_position(last: int) -> None:
    """Runs whose four positions would pass the last stored one take the loop: the helper
    never reads past the coordinates and values (also checked under the sanitizers), and
    rows ending at the last position sum in order."""
    rng = np.random.default_rng(last)
    x = spread_values(rng, 12)
    k = coiter.compile(SPMV, formats={"A": "csr"})
    for lengths in ([4, last], [3, 2, 2, last], [3, 4, 0, last, 0]):  # 1.5 to 6 a row
        a = csr_with_lengths(rng, lengths, 12, np.int32)
        assert np.array_equal(k(A=a, x=x).to_numpy(), row_sums_in_order(a, x))
    assert "coiter_run_dot_i32(" in _source(k)


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


def test_only_products_of_a_run_and_a_gather_take_the_helper() -> None:
    """Integer values, and a product whose dense factor is not indexed by the run's
    coordinate, keep the loop; their values still match SciPy."""
    rng = np.random.default_rng(5)
    a = csr_with_lengths(rng, [SHORT_RUN, 1, 0, 3], 6, np.int32)
    k64 = coiter.compile(SPMV, formats={"A": "csr"}, dtype=np.int64)
    a64 = sp.csr_array((np.arange(1, a.nnz + 1), a.indices, a.indptr), shape=a.shape)
    x64 = np.arange(1, 7)
    np.testing.assert_array_equal(k64(A=a64, x=x64).to_numpy(), a64 @ x64)
    assert "coiter_run_dot" not in _source(k64)
    scaled = coiter.compile("y(i) = A(i,j) * b(i)", formats={"A": "csr"})
    b = rng.standard_normal(4)
    np.testing.assert_allclose(scaled(A=a, b=b).to_numpy(), (a.sum(axis=1)) * b, rtol=1e-12)
    assert "coiter_run_dot" not in _source(scaled)


@pytest.mark.parametrize("flags, fast_gather, tiny_runs, short_runs, unlearned_bits", [
    ("-march=x86-64-v4", 1, 1, 1, 0),  # AVX-512, no AMD Zen named
    ("-march=x86-64-v4 -D__znver4__", 0, 1, 1, 80000),  # AVX-512 on a Zen processor: slow gathers
    ("-march=x86-64-v3", 0, 0, 1, 80000),  # no AVX-512: AVX2's plain loads
    ("-march=x86-64-v2", 0, 0, 0, 80000),  # no AVX2: the loop
    ("-march=x86-64-v4 -D__znver3__ -DCOITER_FAST_GATHER=1", 1, 1, 1, 0),  # the user decides
    ("-march=x86-64-v4 -DCOITER_FAST_GATHER=0", 0, 1, 1, 80000),
    ("-march=x86-64-v4 -DCOITER_TINY_RUNS=0", 1, 0, 1, 0),
    ("-march=x86-64-v3 -DCOITER_SHORT_RUNS=0", 0, 0, 0, 80000),
    ("-march=x86-64-v3 -DCOITER_SHORT_RUNS_BITS=100", 0, 0, 1, 100),
])
def test_the_helpers_run_where_they_pay(monkeypatch: pytest.MonkeyPatch, flags: str,
                                        fast_gather: int, tiny_runs: int, short_runs: int,
                                        unlearned_bits: int) -> None:
    """The C prelude's COITER_FAST_GATHER (how the helpers read x), COITER_TINY_RUNS, which the
    tiny-run flag requires, and COITER_SHORT_RUNS and COITER_SHORT_RUNS_BITS, which the
    short-run flag requires, by the processor the kernel is built for (functions returning
    them; nothing else runs)."""
    monkeypatch.setenv("COITER_CFLAGS", f"-O1 -fPIC -std=c11 {flags}")
    source = preamble("INT32_MAX") + ("int fast_gather(void) { return COITER_FAST_GATHER; }\n"
                                      "int tiny_runs(void) { return COITER_TINY_RUNS; }\n"
                                      "int short_runs(void) { return COITER_SHORT_RUNS; }\n"
                                      "int unlearned_bits(void) { return COITER_SHORT_RUNS_BITS; }\n")
    lib = load_library(source)
    assert (lib.fast_gather(), lib.tiny_runs(), lib.short_runs(), lib.unlearned_bits()) == \
        (fast_gather, tiny_runs, short_runs, unlearned_bits)


@pytest.mark.parametrize("runs, stored, threads, bits, unlearned", [
    (20296, 33858, 1, 80000, 0),  # TTV collegemsg-day's fibers: ~33k bits, the loop learns them
    (15563, 34544, 1, 80000, 0),  # jf17k-3ary's: ~34k
    (66166, 93003, 1, 80000, 1),  # wn18rr's: ~81k
    (66166, 93003, 2, 80000, 0),  # ~41k on each of two cores
    (102188, 310116, 2, 80000, 1),  # fb15k-237's: ~142k a core
    (100000, 100000, 1, 80000, 0),  # every run single: nothing to learn
    (0, 0, 1, 80000, 0),
    (10, 30, 1, 0, 1),  # no minimum (gathering helpers)
])
def test_the_short_run_helper_waits_for_runs_the_loop_cannot_learn(
        runs: int, stored: int, threads: int, bits: int, unlearned: int) -> None:
    """coiter_runs_unlearned: the runs times the entropy of a geometric length of their mean,
    per core, against COITER_SHORT_RUNS_BITS."""
    source = (f"#define COITER_SHORT_RUNS_BITS {bits}\n" + preamble("INT32_MAX", "coiter_runs_unlearned")
              + "int unlearned(int64_t r, int64_t s, int64_t t) { return coiter_runs_unlearned(r, s, t); }\n")
    lib = load_library(source)
    lib.unlearned.argtypes = [ctypes.c_int64] * 3
    assert lib.unlearned(runs, stored, threads) == unlearned


def test_the_run_flags_require_their_helpers() -> None:
    """Each flag that sends a statement to a helper is false where that helper does not pay,
    so the C compiler drops that version; the eight lanes, whose order every machine shares,
    are not. The helper's bound, the positions the runs cover, is read once before the loops."""
    k = coiter.compile(SPMV, formats={"A": "csr"})
    a = csr_with_lengths(np.random.default_rng(0), [1, 2, 3, 2], 40, np.int32)
    x = np.arange(40.0)
    np.testing.assert_array_equal(k(A=coiter.Tensor.from_scipy(a), x=x).to_numpy(), a @ x)
    src = _source(k)
    assert "int64_t A2_stored = A2_pos[A1_dimension];" in src
    assert "bool A2_short_runs = COITER_SHORT_RUNS && " in src
    assert "coiter_runs_unlearned(A1_dimension, A2_pos[A1_dimension] - A2_pos[0], COITER_THREADS())" in src
    assert "bool A2_tiny_runs = COITER_TINY_RUNS && " in src
    tiny = next(line for line in src.splitlines() if "bool A2_tiny_runs" in line)
    assert "coiter_runs_unlearned" not in tiny  # the eight-row helpers beat even a learned loop
    assert "bool A2_vector_runs = A2_pos" in src
    assert "A2_pos[i + 1] - A2_pos[i], A2_stored);" in src
