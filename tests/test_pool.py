"""The result pool (coiter.runtime.pool, _pool.c): large results reuse the memory of freed
ones; results that are alive never share memory, reused memory is zeroed, views keep their
memory, and the limit holds. Values are checked against NumPy."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import coiter
from coiter.errors import ArgumentError
from coiter.runtime import callplan, pool

pytestmark = pytest.mark.skipif(not callplan.available(), reason="the pool is part of the C extension, "
                                "which this install did not build")

LARGE = 5 << 20  # bytes: pooled from 4 MiB on


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


def test_small_arrays_and_a_zero_limit_bypass_the_pool() -> None:
    small = pool.zeros(1000, np.int32)
    assert small.dtype == np.int32 and not small.any()
    pool.set_limit(0)
    big = pool.zeros(LARGE // 4, np.float32)
    assert not big.any()
    del big, small
    gc.collect()
    assert pool.stats() == pool.PoolStats(0, 0, 0, 0)


def test_the_limit_bounds_the_free_memory_kept() -> None:
    pool.set_limit(12 << 20)
    arrays = [pool.zeros(LARGE // 8, np.float64) for _ in range(4)]  # 6 MiB blocks
    assert pool.stats().blocks_in_use == 4
    del arrays
    gc.collect()
    stats = pool.stats()
    assert stats.free_blocks == 2 and stats.free_bytes <= 12 << 20


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
