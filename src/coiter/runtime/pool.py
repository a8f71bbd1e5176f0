"""Recycled memory for large result arrays.

A dense result of tens of megabytes (TTM, SpMM, SDDMM on large inputs) would be a fresh
mapping on every call, whose pages the system zeroes as the kernel first touches them: 8.6
of a 11.8 ms TTM call with a 64 MiB result. The C extension's pool (``_pool.c``) gives
results from 128 KiB on memory that earlier, freed results mapped already, zeroed with a
memset (or not, for kernels that zero the values they own: :func:`empty`), and takes it
back when the last array over it is freed (NumPy frees it through the pool's memory
handler, so views keep it alive as any array's views do).

The kernels' own heap arrays (sparse results, workspaces) come from the same pool:
:func:`install` hands each kernel library the pool's allocator, and :data:`kernel_free` /
:data:`kernel_realloc` are the functions that free and shrink what a kernel returns.

``COITER_RESULT_POOL`` sets how many bytes of freed result memory are kept for reuse
(a number, or with a K/M/G suffix; 0 turns the pool off); the default is
``DEFAULT_LIMIT``, at most a sixteenth of the machine's memory. :func:`set_limit` changes it
at run time. Without the C extension results are ordinary NumPy arrays.
"""
from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np

from ..errors import ArgumentError
from .settings import env_bytes, physical_memory

try:
    from . import _fastcall
except ImportError:  # built without the extension
    _fastcall = None  # type: ignore[assignment]

DEFAULT_LIMIT = 256 << 20

_libc = ctypes.CDLL(None)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_REALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class _Allocator(ctypes.Structure):
    """The C prelude's ``coiter_allocator`` (_pool.h's ``PoolAllocator``)."""

    _fields_ = [("malloc", ctypes.c_void_p), ("calloc", ctypes.c_void_p),
                ("realloc", ctypes.c_void_p), ("free", ctypes.c_void_p)]


_ALLOCATOR = _Allocator.from_address(_fastcall.allocator()) if _fastcall is not None else None
# free and realloc for the arrays a kernel returns: the pool's, which take libc's blocks too
kernel_free = _FREE(_ALLOCATOR.free if _ALLOCATOR else ctypes.cast(_libc.free, ctypes.c_void_p).value)
kernel_realloc = _REALLOC(_ALLOCATOR.realloc if _ALLOCATOR
                          else ctypes.cast(_libc.realloc, ctypes.c_void_p).value)


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


def install(library: ctypes.CDLL, sanitized: bool) -> None:
    """Give a kernel library the pool's allocator for its heap arrays (``coiter_use_allocator``
    in the C prelude, present where the kernel allocates). Without the C extension, and in a
    ``sanitized`` build (whose malloc must see every block to catch overflows), the library
    keeps libc's heap."""
    if _ALLOCATOR is None or sanitized or not hasattr(library, "coiter_use_allocator"):
        return
    library.coiter_use_allocator.argtypes = [ctypes.c_void_p]
    library.coiter_use_allocator.restype = None
    library.coiter_use_allocator(ctypes.addressof(_ALLOCATOR))


def stats() -> PoolStats:
    """The pool's limit and blocks (all zero without the C extension)."""
    return PoolStats(*_fastcall.pool_stats()) if _fastcall is not None else PoolStats(0, 0, 0, 0)


def _initial_limit() -> int:
    from_env = env_bytes("COITER_RESULT_POOL")
    return from_env if from_env is not None else min(DEFAULT_LIMIT, physical_memory() // 16)


set_limit(_initial_limit())
