"""The kernel cache's size limit (coiter.runtime.cache_size): least recently used kernels
are evicted down to the limit, recently used ones survive, a kernel loaded before its
files were evicted keeps working, and an evicted kernel is built again with the right
values."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import coiter
from coiter.errors import ArgumentError
from coiter.runtime import cache_size
from coiter.runtime.compiler import clear_memory_cache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "cache"
    monkeypatch.setenv("COITER_CACHE_DIR", str(root))
    monkeypatch.setattr(cache_size, "_next_check", 0.0)
    clear_memory_cache()
    yield root
    clear_memory_cache()


def _kernels(root: Path) -> dict[str, float]:
    """Key -> last use of every library in the cache."""
    return {p.stem: p.stat().st_mtime for p in root.glob("??/*.so")}


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.glob("??/*") if not p.name.startswith("."))


def _build(n: int) -> coiter.Kernel:
    """A kernel of its own source for each n (a distinct scalar factor)."""
    k = coiter.compile(f"y(i) = {n} * A(i,j) * x(j)", formats={"A": "csr"})
    A = coiter.Tensor.from_numpy(np.eye(3) * 2, format="csr")
    np.testing.assert_allclose(k(A=A, x=np.arange(3.0)).to_numpy(), n * 2 * np.arange(3.0))
    return k


def _age(root: Path, seconds: float) -> None:
    """Make every cached file look last used ``seconds`` ago (older than the grace time)."""
    then = time.time() - seconds
    for p in root.glob("??/*"):
        os.utime(p, (then, then))


def test_the_least_recently_used_kernels_go_first(cache: Path, monkeypatch) -> None:
    for n in range(3):
        _build(n + 2)
    one = _size(cache) // 3
    first = _kernels(cache)
    _age(cache, 3600)
    # the first kernel used again (a hit in a new process touches it), the rest stay old
    clear_memory_cache()
    _build(2)
    (used,) = [k for k, t in _kernels(cache).items() if t > time.time() - 60]
    monkeypatch.setenv("COITER_CACHE_SIZE", str(int(2.2 * one)))
    cache_size.enforce_limit(cache)
    left = _kernels(cache)
    assert used in left and len(left) < len(first)
    assert _size(cache) <= 2.2 * one
    # what remains is whole kernels: every library keeps its source and digest
    for key in left:
        assert len(list(cache.glob(f"??/{key}.*"))) == 3


def test_recently_used_kernels_are_never_evicted(cache: Path, monkeypatch) -> None:
    for n in range(3):
        _build(n + 5)
    monkeypatch.setenv("COITER_CACHE_SIZE", "1K")
    cache_size.enforce_limit(cache)
    assert len(_kernels(cache)) == 3  # all used within the grace time


def test_builds_keep_the_cache_under_its_limit(cache: Path, monkeypatch) -> None:
    kernels = [_build(n + 9) for n in range(2)]
    one = _size(cache) // 2
    _age(cache, 3600)
    monkeypatch.setenv("COITER_CACHE_SIZE", str(int(1.5 * one)))
    monkeypatch.setattr(cache_size, "_next_check", 0.0)  # as in a process's first build
    kernels.append(_build(20))  # the build evicts the old kernels
    assert len(_kernels(cache)) == 1
    # loaded before their files went: they still run
    A = coiter.Tensor.from_numpy(np.eye(2), format="csr")
    for n, k in zip((9, 10, 20), kernels):
        np.testing.assert_allclose(k(A=A, x=np.ones(2)).to_numpy(), [n, n])
    # an evicted kernel is built again in a new process
    clear_memory_cache()
    _build(9)
    assert len(_kernels(cache)) == 2


def test_no_limit_and_a_bad_limit(cache: Path, monkeypatch) -> None:
    _build(30)
    _age(cache, 3600)
    monkeypatch.setenv("COITER_CACHE_SIZE", "0")
    cache_size.enforce_limit(cache)
    assert len(_kernels(cache)) == 1
    monkeypatch.setenv("COITER_CACHE_SIZE", "big")
    with pytest.raises(ArgumentError, match="COITER_CACHE_SIZE"):
        cache_size.cache_limit()
