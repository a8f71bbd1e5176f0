"""Rows of one or two positions summed eight at a time (``coiter_rows_dot_i32``/``_i64`` in the
C prelude for double values, ``coiter_rows_dotf_*`` for float; coiter/lower/tiny_runs.py).

Each lane must add its row's products one by one from 0.0 in position order, as the row loop
does: every result equals, bit for bit, a Python sum in that order. Row lengths put groups of
eight rows on both sides of the helper's windows (16 positions; 32 for double values where
gathers are slow) and past its eight vector steps, row counts leave tails of 0 to 7 rows; both
value types and index widths, 1 and 2 threads, with and without AVX-512 (``-mno-avx512f``: the
helper's plain loop). Values span 16 orders of magnitude and include inf, NaN and -0.0, so
another order or a lane added twice would show."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import coiter
from coiter.lower.tiny_runs import TINY_AVERAGE, UNCHUNKED_ROWS
from helpers import (
    CFLAGS, cflags, csr_with_lengths, generated_functions, row_sums_in_order, spread_values,
)

pytestmark = pytest.mark.usefixtures("gather_helpers")  # the helper on any processor

SPMV = "y(i) = A(i,j) * x(j)"
# row lengths: mostly one or two, some past the window (16 positions for 8 rows) and the
# vector steps (8)
LENGTHS = [0, 1, 1, 1, 1, 2, 2, 3, 4, 9, 20]


def _tiny_lengths(rng: np.random.Generator, rows: int) -> list[int]:
    """``rows`` lengths drawn from LENGTHS, then empty rows added until they average under
    TINY_AVERAGE (the helper's flag)."""
    lengths = rng.choice(LENGTHS, rows).tolist()
    while len(lengths) and sum(lengths) >= TINY_AVERAGE * len(lengths):
        lengths.insert(int(rng.integers(0, len(lengths) + 1)), 0)
    return lengths


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = f"i{want.itemsize}"
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))


def _takes_helper(k: coiter.Kernel, suffix: str, dtype: type = np.float64) -> bool:
    name = f"coiter_rows_dot{'f' if dtype == np.float32 else ''}_{suffix}("
    return all(name in generated_functions(v.source) for v in k.core.variants())


@pytest.mark.parametrize("flags", list(CFLAGS))
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(0, 90),
       index=st.sampled_from([np.int32, np.int64]), threads=st.sampled_from([1, 2]),
       dtype=st.sampled_from([np.float64, np.float32]))
def test_rows_add_in_the_loops_order(flags: str, seed: int, rows: int, index: type,
                                     threads: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    a = csr_with_lengths(rng, _tiny_lengths(rng, rows), n, index, special=0.05).astype(dtype)
    x = spread_values(rng, n, special=0.05).astype(dtype)
    with cflags(flags):
        k = coiter.compile(SPMV, formats={"A": "csr"}, dtype=dtype)
        got = k(A=coiter.Tensor.from_scipy(a), x=x, threads=threads).to_numpy()
    _same_bits(got, row_sums_in_order(a, x))
    assert _takes_helper(k, "i32" if index == np.int32 else "i64", dtype)


@pytest.mark.parametrize("flags", list(CFLAGS))
@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_groups_on_both_sides_of_each_window(flags: str, index: type, dtype: type) -> None:
    """Groups of eight rows holding 8, 16, 17, 20, 24, 25, 32 and 40 positions (the windows:
    16 positions gathered or, where gathers are slow, 32 for double and 16 for float, read
    by scalar loads; past them the row loop), among empty groups that keep the average under
    TINY_AVERAGE: every row its one-by-one sum."""
    groups = [[1] * 8, [2] * 8, [2] * 7 + [3], [3, 3, 3, 3, 2, 2, 2, 2], [3] * 8,
              [4, 3, 3, 3, 3, 3, 3, 3], [4] * 8, [5] * 8, [0, 9, 0, 7, 1, 0, 0, 0]]
    lengths = [n for g in groups for n in g + [0] * 80]
    rng = np.random.default_rng(11)
    a = csr_with_lengths(rng, lengths, 60, index, special=0.05).astype(dtype)
    x = spread_values(rng, 60, special=0.05).astype(dtype)
    assert a.nnz < TINY_AVERAGE * a.shape[0]
    with cflags(flags):
        k = coiter.compile(SPMV, formats={"A": "csr"}, dtype=dtype)
        for threads in (1, 2):
            _same_bits(k(A=coiter.Tensor.from_scipy(a), x=x, threads=threads).to_numpy(),
                       row_sums_in_order(a, x))
    assert _takes_helper(k, "i32" if index == np.int32 else "i64", dtype)


@pytest.mark.parametrize("flags", ["native", "plain-loads"])
@pytest.mark.parametrize("rows", [128 + 3, 128 + 8 * 9, 2048 + 7, 2048 + 512 * 3 + 5, 9000])
def test_streams_fetched_ahead_within_the_range(flags: str, rows: int) -> None:
    """Every 512 rows the helper fetches its streams COITER_PAGES_AHEAD rows and positions
    ahead, and the plain-load helper in every group of eight rows COITER_GROUP_AHEAD ahead,
    while those lie within its range: row counts just past either distance, on one thread
    (the helper takes all rows) and two (chunks of rows), every row its own sum."""
    rng = np.random.default_rng(rows)
    a = csr_with_lengths(rng, _tiny_lengths(rng, rows), 500, np.int32)
    x = spread_values(rng, 500)
    with cflags(flags):
        k = coiter.compile(SPMV, formats={"A": "csr"})
        for threads in (1, 2):
            _same_bits(k(A=a, x=x, threads=threads).to_numpy(), row_sums_in_order(a, x))
    assert _takes_helper(k, "i32")


def test_every_row_of_a_parallel_loop_is_written() -> None:
    """The result is allocated unzeroed: groups of eight rows in chunks over two threads, a
    tail of five rows, each row written once with its own sum."""
    rng = np.random.default_rng(7)
    a = csr_with_lengths(rng, _tiny_lengths(rng, 20005), 3000, np.int32)
    x = spread_values(rng, 3000)
    k = coiter.compile(SPMV, formats={"A": "csr"})
    for threads in (1, 2):
        _same_bits(k(A=a, x=x, threads=threads).to_numpy(), row_sums_in_order(a, x))
    assert _takes_helper(k, "i32")


@pytest.mark.parametrize("chunking,rows", [("static", UNCHUNKED_ROWS), ("dynamic,3", 8)])
def test_scheduled_parallel_loops_call_the_helper_per_chunk(chunking: str, rows: int) -> None:
    """A parallel row loop calls the helper once per chunk of rows: its schedule's chunk size
    rounded up to whole groups of eight, or UNCHUNKED_ROWS where it names none; every row
    is written once with its own sum, with tails, at 1 and 2 threads."""
    rng = np.random.default_rng(9)
    a = csr_with_lengths(rng, _tiny_lengths(rng, 5005), 3000, np.int32)
    x = spread_values(rng, 3000)
    k = coiter.compile(SPMV, formats={"A": "csr"},
                       schedule=f"parallelize(i,CPUThread,NoRaces,{chunking})")
    for threads in (1, 2):
        _same_bits(k(A=a, x=x, threads=threads).to_numpy(), row_sums_in_order(a, x))
    assert _takes_helper(k, "i32")
    assert f"i_chunk * {rows}, COITER_MIN(i_chunk * {rows} + {rows}, y1_dimension)" in k.source


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ttv_fibers(dtype: type) -> None:
    """TTV over a CSF tensor whose fibers hold one or two entries: the result shares the
    tensor's first levels and each fiber's value is its one-by-one sum, at 1 and 2 threads."""
    rng = np.random.default_rng(3)
    shape = (30, 40, 50)
    dense = np.where(rng.random(shape) < 0.01, spread_values(rng, 60000).reshape(shape), 0.0).astype(dtype)
    c = spread_values(rng, 50).astype(dtype)
    coords = np.array(np.nonzero(dense))
    fibers = sp.csr_array(dense.reshape(-1, 50))
    fibers = sp.csr_array(fibers[np.diff(fibers.indptr) > 0])
    assert fibers.nnz < TINY_AVERAGE * fibers.shape[0]
    k = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats={"B": coiter.csf(3), "A": coiter.csf(2)},
                       dtype=dtype)
    b = coiter.Tensor.from_coo(coords, dense[tuple(coords)], dense.shape, format=coiter.csf(3))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for threads in (1, 2):
        got = k(B=b, c=c, threads=threads)
        _same_bits(got.storage.vals, row_sums_in_order(fibers, c))
        np.testing.assert_allclose(got.to_numpy(), np.einsum("ijk,k->ij", dense.astype(np.float64), c),
                                   rtol=tol, atol=1e-300)
    assert _takes_helper(k, "i32", dtype)


def test_a_far_vector_keeps_the_loop() -> None:
    """A gathered vector past coiter_far_bytes() (8 MB here; the loop prefetches it, the
    helper would not) takes the row loop: the same sums."""
    rng = np.random.default_rng(11)
    n = 1 << 20
    a = csr_with_lengths(rng, _tiny_lengths(rng, 3000), n, np.int32)
    x = spread_values(rng, n)
    k = coiter.compile(SPMV, formats={"A": "csr"})
    _same_bits(k(A=a, x=x).to_numpy(), row_sums_in_order(a, x))


def test_other_row_bodies_keep_the_loop() -> None:
    """Integer values, a factor indexed by the row (not the run's coordinate), a sum added to
    the result (``+=`` of a second statement's loop) and a DCSR matrix (whose rows' results
    are scattered) keep their loops; their values match SciPy."""
    rng = np.random.default_rng(5)
    a = csr_with_lengths(rng, [1, 2, 0, 1, 1, 3, 1, 0, 1, 2], 6, np.int32)
    x = rng.standard_normal(6)
    k64 = coiter.compile(SPMV, formats={"A": "csr"}, dtype=np.int64)
    a64 = sp.csr_array((np.arange(1, a.nnz + 1), a.indices, a.indptr), shape=a.shape)
    np.testing.assert_array_equal(k64(A=a64, x=np.arange(6)).to_numpy(), a64 @ np.arange(6))
    scaled = coiter.compile("y(i) = A(i,j) * b(i)", formats={"A": "csr"})
    b = rng.standard_normal(10)
    np.testing.assert_allclose(scaled(A=a, b=b).to_numpy(), a.sum(axis=1) * b, rtol=1e-12)
    dcsr = coiter.compile(SPMV, formats={"A": "dcsr"})
    np.testing.assert_allclose(dcsr(A=a, x=x).to_numpy(), a @ x, rtol=1e-12)
    for k in (k64, scaled, dcsr):
        assert "coiter_rows_dot" not in "".join(generated_functions(v.source) for v in k.core.variants())
