"""The result pool (coiter.runtime.pool, _pool.c): large results reuse the memory of freed
ones; results that are alive never share memory, reused memory is zeroed, views keep their
memory, and the limit holds. Values are checked against NumPy."""
from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter.errors import ArgumentError
from coiter.runtime import callplan, pool

# the pool's own bookkeeping exists only in the C extension (CI and `pip install` build
# it); the kernels' values are checked with or without it
needs_pool = pytest.mark.skipif(not callplan.available(), reason="the pool is part of the C extension, "
                                "which this install did not build")

LARGE = 5 << 20  # bytes: pooled (from 128 KiB on), in whole huge pages (from 2 MiB on)


@pytest.fixture(autouse=True)
def fresh_pool():
    """An empty pool with the default limit for each test, restored afterwards."""
    before = pool.stats().limit
    gc.collect()
    pool.set_limit(0)
    pool.set_limit(pool.DEFAULT_LIMIT)
    yield
    gc.collect()
    pool.set_limit(0)
    pool.set_limit(before)


def _spmm(plan: bool, monkeypatch: pytest.MonkeyPatch):
    """An SpMM kernel with a dense result of LARGE-odd bytes, its operands and reference."""
    if not plan:
        monkeypatch.setattr(coiter.kernel, "build_plan", lambda *a, **k: None)
    rng = np.random.default_rng(3)
    rows, rank = LARGE // (8 * 16) + 3, 16
    a = (rng.random((rows, 50)) < 0.05) * rng.random((rows, 50))
    b = rng.random((50, rank))
    A = coiter.Tensor.from_numpy(a, format="csr")
    k = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"})
    return (lambda: k(A=A, B=b, threads=1)), a @ b


@needs_pool
@pytest.mark.parametrize("plan", [True, False])
def test_live_results_never_share_memory_and_reused_memory_is_zeroed(plan, monkeypatch) -> None:
    call, ref = _spmm(plan, monkeypatch)
    first = call().to_numpy()
    np.testing.assert_allclose(first, ref, rtol=1e-12)
    first += 1.0  # a result the user changed and keeps
    second = call().to_numpy()
    np.testing.assert_allclose(second, ref, rtol=1e-12)
    np.testing.assert_allclose(first, ref + 1.0, rtol=1e-12)
    assert not np.shares_memory(first, second)
    in_use = pool.stats().blocks_in_use
    assert in_use >= 2
    second[:] = 7.0
    del second
    gc.collect()
    assert pool.stats().free_blocks == 1  # the dirty block waits for the next call
    third = call().to_numpy()  # reuses it: must be zeroed before the kernel adds
    assert pool.stats().free_blocks == 0
    np.testing.assert_allclose(third, ref, rtol=1e-12)


@needs_pool
def test_a_view_keeps_its_memory_out_of_the_pool() -> None:
    values = pool.zeros(LARGE // 8, np.float64)
    values[:] = np.arange(values.size)
    view = values[10::3]
    del values
    gc.collect()
    assert pool.stats().free_blocks == 0
    again = pool.zeros(LARGE // 8, np.float64)
    assert not np.shares_memory(again, view)
    np.testing.assert_array_equal(view[:4], [10, 13, 16, 19])
    np.testing.assert_array_equal(again, 0)


@needs_pool
def test_small_arrays_and_a_zero_limit_bypass_the_pool() -> None:
    small = pool.zeros(1000, np.int32)
    assert small.dtype == np.int32 and not small.any()
    pool.set_limit(0)
    big = pool.zeros(LARGE // 4, np.float32)
    assert not big.any()
    del big, small
    gc.collect()
    assert pool.stats() == pool.PoolStats(0, 0, 0, 0)


@needs_pool
@pytest.mark.parametrize("values", [(1 << 20) // 8, (128 << 10) // 8])
def test_a_result_from_128_kib_on_reuses_freed_memory(values) -> None:
    # glibc maps each such array afresh where a trim threshold is set (Dask's workers):
    # regression for an SpMV result of 3.8 MiB paying 6 of 13.6 ms in page faults there
    rng = np.random.default_rng(5)
    a = sp.random(values, 40, density=0.1, format="csr", random_state=rng)
    x = rng.random(40)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    A = coiter.Tensor.from_scipy(a)
    first = k(A=A, x=x).to_numpy()
    np.testing.assert_allclose(first, a @ x, rtol=1e-12)
    assert pool.stats().blocks_in_use == 1
    del first
    gc.collect()
    assert pool.stats().free_blocks == 1
    second = k(A=A, x=x).to_numpy()
    assert pool.stats().free_blocks == 0
    np.testing.assert_allclose(second, a @ x, rtol=1e-12)


@needs_pool
def test_arrays_below_128_kib_are_not_pooled() -> None:
    values = pool.zeros((128 << 10) // 8 - 1, np.float64)
    assert not values.any()
    assert pool.stats().blocks_in_use == 0


@needs_pool
def test_the_limit_bounds_the_free_memory_kept() -> None:
    pool.set_limit(12 << 20)
    arrays = [pool.zeros(LARGE // 8, np.float64) for _ in range(4)]  # 6 MiB blocks
    assert pool.stats().blocks_in_use == 4
    del arrays
    gc.collect()
    stats = pool.stats()
    assert stats.free_blocks == 2 and stats.free_bytes <= 12 << 20


@needs_pool
def test_resizing_a_pooled_array_keeps_its_values() -> None:
    values = pool.zeros(LARGE // 8, np.float64)
    values[:5] = [1, 2, 3, 4, 5]
    values.resize((5,), refcheck=False)
    np.testing.assert_array_equal(values, [1, 2, 3, 4, 5])
    assert pool.stats().free_blocks == 1


def test_the_limit_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("COITER_RESULT_POOL", "64M")
    assert pool._initial_limit() == 64 << 20
    monkeypatch.setenv("COITER_RESULT_POOL", "lots")
    with pytest.raises(ArgumentError, match="COITER_RESULT_POOL"):
        pool._initial_limit()
    with pytest.raises(ArgumentError, match="non-negative"):
        pool.set_limit(-1)


def _dirty_block(nbytes: int) -> None:
    """Leave a freed pool block of ``nbytes`` full of NaN for the next large result."""
    junk = pool.empty(nbytes // 8 + 64, np.float64)
    junk[:] = np.nan
    del junk
    gc.collect()


ROWS = LARGE // (8 * 16) + 5  # a rank-16 dense result over this many rows is pooled
CASES = {
    # dense result, every row written by the dense outer loop: the kernel zeroes it
    "spmm_csr": ("C(i,k) = A(i,j) * B(j,k)", {"A": "csr"}, True),
    "spmv": ("y(i) = A(i,j) * x(j)", {"A": "csr"}, True),
    # rows the loop never visits (DCSR's empty rows, MTTKRP's empty slices): zeroed by the pool
    "spmm_dcsr": ("C(i,k) = A(i,j) * B(j,k)", {"A": "dcsr"}, False),
    "mttkrp": ("A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", {"B": coiter.csf(3)}, False),
    # a result over an operand's first levels (TTM): each fiber's row zeroed by its iteration
    "ttm": ("A(i,j,l) = B(i,j,k) * C(k,l)", {"B": coiter.csf(3), "A": "ssd"}, True),
}


# every thread count and every call path; CI (COITER_TEST_PROFILE=ci) leaves out the pairs
# marked slow and keeps one of each
@pytest.mark.parametrize(("threads", "plan"), [
    (2, True), (1, False),
    pytest.param(1, True, marks=pytest.mark.slow), pytest.param(2, False, marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_unzeroed_results_are_zeroed_by_the_kernel_that_writes_them(case, threads, plan,
                                                                        monkeypatch) -> None:
    """Results come from dirty (NaN) pool blocks; kernels that zero what they own must still
    give NumPy's values, and kernels that do not must get zeroed memory."""
    if not plan:
        monkeypatch.setattr(coiter.kernel, "build_plan", lambda *a, **k: None)
    expr, formats, zeroes = CASES[case]
    rng = np.random.default_rng(5)
    if case in ("mttkrp", "ttm"):
        shape = (ROWS // 4, 4, 30) if case == "ttm" else (ROWS, 30, 30)
        b = (rng.random(shape) < 0.05) * rng.random(shape)
        if case == "mttkrp":
            b[::3] = 0  # empty slices
        C, D = rng.random((shape[1] if case == "mttkrp" else shape[2], 16)), rng.random((shape[2], 16))
        ops = {"B": coiter.Tensor.from_numpy(b, format=coiter.csf(3)), "C": C}
        if case == "mttkrp":
            ops["D"] = D
            ref = np.einsum("ijk,jl,kl->il", b, C, D)
        else:
            ref = np.einsum("ijk,kl->ijl", b, C)
    else:
        rows = ROWS * (16 if case == "spmv" else 1)
        a = (rng.random((rows, 40)) < 0.05) * rng.random((rows, 40))
        a[::5] = 0  # empty rows
        x = rng.random((40, 16)) if case.startswith("spmm") else rng.random(40)
        ops = {"A": coiter.Tensor.from_numpy(a, format=formats["A"]), "B" if x.ndim == 2 else "x": x}
        ref = a @ x
    k = coiter.compile(expr, formats=formats)
    assert ("start at zero (allocated unzeroed)" in k.source) == zeroes
    for _ in range(2):  # the second call runs through the call plan
        _dirty_block(ref.size * 8)
        got = k(threads=threads, **ops).to_numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------- the kernels' heap arrays

def _spadd(rows: int, seed: int = 7) -> tuple[dict[str, coiter.Tensor], sp.csr_array]:
    """Three random CSR operands whose sum has about 12 entries per row, and that sum."""
    rng = np.random.default_rng(seed)
    mats = [sp.random_array((rows, 200), density=0.02, format="csr", random_state=rng) for _ in range(3)]
    ops = {n: coiter.Tensor.from_scipy(m) for n, m in zip("ABC", mats)}
    return ops, sp.csr_array(mats[0] + mats[1] + mats[2])


def _assert_csr(result: coiter.Tensor, ref: sp.csr_array) -> None:
    got = sp.csr_array(result.to_scipy())
    assert got.shape == ref.shape
    np.testing.assert_allclose(got.toarray(), ref.toarray(), rtol=1e-12)


@needs_pool
@pytest.mark.parametrize("plan", [True, False])
def test_a_sparse_result_assembled_by_the_kernel_reuses_freed_memory(plan, monkeypatch) -> None:
    if not plan:  # adopted by the ctypes path (kernel_realloc, kernel_free) instead of C
        monkeypatch.setattr(coiter.kernel, "build_plan", lambda *a, **k: None)
    ops, ref = _spadd(20_000)
    k = coiter.compile("D(i,j) = A(i,j) + B(i,j) + C(i,j)", formats={n: "csr" for n in "ABCD"})
    first = k(threads=1, **ops)
    _assert_csr(first, ref)
    assert pool.stats().blocks_in_use >= 2  # its index and value arrays (~1 and ~2 MB)
    del first
    gc.collect()
    freed = pool.stats().free_blocks
    assert freed >= 2 and pool.stats().blocks_in_use == 0
    second = k(threads=1, **ops)
    _assert_csr(second, ref)
    assert pool.stats().free_blocks < freed  # reused, not mapped afresh
    # a smaller and a larger result after it: blocks are reused or grown, values stay right
    for rows in (3_000, 60_000):
        ops, ref = _spadd(rows, seed=rows)
        _assert_csr(k(threads=1, **ops), ref)


@needs_pool
def test_parallel_assembly_through_the_pool_equals_serial() -> None:
    ops, _ = _spadd(50_000, seed=3)
    k = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={n: "csr" for n in "ABC"})
    a, b = ops["A"], coiter.Tensor.from_scipy(sp.random_array((200, 300), density=0.05, format="csr",
                                                              random_state=np.random.default_rng(4)))
    serial, parallel = k(A=a, B=b, threads=1), k(A=a, B=b, threads=2)
    expect = sp.csr_array(a.to_scipy() @ b.to_scipy())
    _assert_csr(serial, expect)
    _assert_csr(parallel, expect)


@needs_pool
@pytest.mark.parametrize("start", [64, 100 << 10])  # a libc block, a pool block
def test_the_kernels_realloc_keeps_the_contents_and_free_takes_both_kinds(start) -> None:
    alloc = pool._ALLOCATOR
    malloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(alloc.malloc)
    p = malloc(start)
    ctypes.memmove(p, bytes(range(64)), 64)
    for size in (start + 1, 300 << 10, 5 << 20, 32):  # grow, across a huge page, and shrink
        p = pool.kernel_realloc(p, size)
        assert p and ctypes.string_at(p, 32) == bytes(range(32))
    pool.kernel_free(p)
    # the blocks it outgrew went back to the system: the next call's array takes this one
    assert pool.stats().blocks_in_use == 0 and pool.stats().free_blocks == 1


@needs_pool
def test_repeated_sparse_results_take_no_page_faults_where_glibc_maps_every_block() -> None:
    # glibc maps every block from 16 KiB afresh here, as it does where a process sets its trim
    # threshold (Dask's workers) or other libraries churn the heap (GraphBLAS between SpAdd3
    # calls: 56 page faults a call on lp_ship04l). Pooled, the arrays of the last call are
    # reused. Regression: a result's arrays came from libc's malloc.
    script = f"""
import resource, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import coiter
from test_pool import _spadd, _assert_csr
ops, ref = _spadd(20_000)
k = coiter.compile("D(i,j) = A(i,j) + B(i,j) + C(i,j)", formats={{n: "csr" for n in "ABCD"}})
for _ in range(3):
    _assert_csr(k(threads=1, **ops), ref)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    r = k(threads=1, **ops)
    del r
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / 10)
"""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="16384", MALLOC_TRIM_THRESHOLD_="0")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         check=True).stdout
    # the arrays take ~3 MB (750 pages); a fresh mapping per call faults on each page
    assert float(out) < 100, out
