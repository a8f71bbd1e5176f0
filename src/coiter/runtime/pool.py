"""Recycled memory for large result arrays.

A dense result of tens of megabytes (TTM, SpMM, SDDMM on large inputs) would be a fresh
mapping on every call, whose pages the system zeroes as the kernel first touches them: 8.6
of a 11.8 ms TTM call with a 64 MiB result. The C extension's pool (``_pool.c``) gives
results from 128 KiB on memory that earlier, freed results mapped already, zeroed with a
memset (or not, for kernels that zero the values they own: :func:`empty`), and takes it
back when the last array over it is freed (NumPy frees it through the pool's memory
handler, so views keep it alive as any array's views do).

``COITER_RESULT_POOL`` sets how many bytes of freed result memory are kept for reuse
(a number, or with a K/M/G suffix; 0 turns the pool off); the default is
``DEFAULT_LIMIT``, at most a sixteenth of the machine's memory. :func:`set_limit` changes it
at run time. Without the C extension results are ordinary NumPy arrays.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import ArgumentError
from .settings import env_bytes, physical_memory

try:
    from . import _fastcall
except ImportError:  # built without the extension
    _fastcall = None  # type: ignore[assignment]

DEFAULT_LIMIT = 256 << 20


class PoolStats(NamedTuple):
    """The pool's state: its limit, and the freed blocks it keeps and the blocks in use."""

    limit: int
    free_blocks: int
    free_bytes: int
    blocks_in_use: int


def zeros(n: int, dtype: np.dtype) -> np.ndarray:
    """A zeroed 1-D array of ``n`` values; from 128 KiB on, memory from the pool."""
    if _fastcall is None:
        return np.zeros(n, dtype=dtype)
    return _fastcall.array(n, np.dtype(dtype), True)


def empty(n: int, dtype: np.dtype) -> np.ndarray:
    """An unzeroed 1-D array of ``n`` values (for kernels that zero what they write); from
    128 KiB on, memory from the pool."""
    if _fastcall is None:
        return np.empty(n, dtype=dtype)
    return _fastcall.array(n, np.dtype(dtype), False)


def set_limit(nbytes: int) -> None:
    """Keep at most ``nbytes`` of freed result memory for reuse (0: none, pool off)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ArgumentError(f"the pool's limit must be a number of bytes (a non-negative int), got {nbytes!r}")
    if _fastcall is not None:
        _fastcall.set_pool_limit(nbytes)


def stats() -> PoolStats:
    """The pool's limit and blocks (all zero without the C extension)."""
    return PoolStats(*_fastcall.pool_stats()) if _fastcall is not None else PoolStats(0, 0, 0, 0)


def _initial_limit() -> int:
    from_env = env_bytes("COITER_RESULT_POOL")
    return from_env if from_env is not None else min(DEFAULT_LIMIT, physical_memory() // 16)


set_limit(_initial_limit())
