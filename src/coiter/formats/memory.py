"""Where the arrays of a storage coiter packs live: in one block of memory that Linux backs
with transparent huge pages (2 MiB) where it offers them.

A kernel streams every array of its operands once, and a call that finds them out of the
caches (the usual case between other work) pays a TLB miss, and a page walk that itself
misses the caches, at each 4 KiB page of each stream. NumPy asks for huge pages only for
arrays of 4 MiB or more; a tensor of a million entries has no such array. Placed in one
block advised for huge pages, its arrays take a walk per 2 MiB instead. AMD Zen 4, 1 thread,
TTV's fiber sums on data from memory, ms, arrays as packed -> in one huge-page block:
fb15k-237 0.71 -> 0.61, wn18rr 0.38 -> 0.36, gen-uniform3 1.05 -> 1.01
(docs/performance.md, "TTV at one thread: operands in huge pages, streams a group ahead").
"""
from __future__ import annotations

import mmap
from functools import lru_cache
from pathlib import Path

import numpy as np

HUGE_PAGE = 2 << 20
# each array starts on a cache line, as NumPy's own allocations do
ALIGN = 64
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")

Levels = tuple[dict[str, np.ndarray], ...]


@lru_cache(maxsize=1)
def huge_pages_offered() -> bool:
    """Whether this system backs memory advised MADV_HUGEPAGE with huge pages: Linux, its
    transparent huge pages set to ``always`` or ``madvise``."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        setting = THP_SETTING.read_text()
    except OSError:
        return False
    return "[always]" in setting or "[madvise]" in setting


def block_length(nbytes: int) -> int:
    """Bytes of the block that holds ``nbytes`` of arrays, 0 where they stay as they are.

    Whole huge pages where rounding up adds at most half the arrays' size (so the unused
    tail is less than 2 MiB and less than half the arrays; from about 1.3 MiB of arrays);
    else, from 2 MiB, the arrays' own bytes, whose last partial huge page gets small pages;
    else no block, which no huge page could back.
    """
    whole = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
    if 2 * (whole - nbytes) <= nbytes:
        return whole
    return nbytes if nbytes >= HUGE_PAGE else 0


def _offsets(arrays: list[np.ndarray]) -> tuple[list[int], int]:
    """Each array's offset in a block holding them all, cache-line aligned, and the total."""
    offsets, end = [], 0
    for a in arrays:
        offsets.append(end)
        end += -(-a.nbytes // ALIGN) * ALIGN
    return offsets, end


def place(levels: Levels, vals: np.ndarray) -> tuple[Levels, np.ndarray]:
    """``levels`` and ``vals`` copied into one block advised for huge pages, where the system
    offers them and the arrays are large enough (:func:`block_length`); else as they are.
    The copies are C-contiguous, writable and of the same types; the block lives as long as
    any of them."""
    arrays = [a for arrays in levels for a in arrays.values()] + [vals]
    offsets, total = _offsets(arrays)
    length = block_length(total)
    if not length or not huge_pages_offered():
        return levels, vals
    # private anonymous memory (shared memory is not backed by transparent huge pages), a
    # huge page more than needed so that the block can start on a huge-page boundary
    block = mmap.mmap(-1, length + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(block, dtype=np.uint8)
    start = -raw.ctypes.data % HUGE_PAGE
    try:
        block.madvise(mmap.MADV_HUGEPAGE, start, length)
    except OSError:
        pass  # a kernel built without huge pages: the block works all the same
    copies = []
    for a, off in zip(arrays, offsets):
        out = raw[start + off:start + off + a.nbytes].view(a.dtype).reshape(a.shape)
        out[...] = a
        copies.append(out)
    it = iter(copies)
    placed = tuple({name: next(it) for name in arrays_of} for arrays_of in levels)
    return placed, next(it)
