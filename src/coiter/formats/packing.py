"""Packing sorted coordinates into a hierarchy of levels (shared by every format)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import FormatError
from .levels import Level


def pack_levels(levels: Sequence[Level], crd: np.ndarray, dims: Sequence[int], values: np.ndarray,
                itype: np.dtype) -> tuple[tuple[dict[str, np.ndarray], ...], np.ndarray]:
    """Pack unique entries, sorted lexicographically by their level coordinates ``crd``
    (levels × n), level by level; returns every level's arrays and the values.

    Each level packs its *nodes*: the distinct coordinate paths down to it, except that a
    non-unique level and the branchless levels under it form one tuple (COO's row and
    column), whose nodes are the distinct paths to the end of the chain. So BCOO's
    (block row, block column) pairs are stored once however many entries a block holds.
    """
    n = crd.shape[1]
    depth = list(range(1, len(levels) + 1))  # path length that identifies level k's nodes
    for k, lv in enumerate(levels):
        if not lv.unique:
            m = k
            while m + 1 < len(levels) and levels[m + 1].branchless:
                m += 1
            for j in range(k, m + 1):
                depth[j] = max(depth[j], m + 1)
    _check_unique_prefixes(levels, crd, depth)
    entry_pos = np.zeros(n, dtype=np.int64)  # each entry's position in the level above
    parent_size = 1
    arrays: list[dict[str, np.ndarray]] = []
    for k, lv in enumerate(levels):
        new = np.ones(n, dtype=bool)
        if n > 1:
            new[1:] = np.any(crd[: depth[k], 1:] != crd[: depth[k], :-1], axis=0)
        first = np.flatnonzero(new)
        packed = lv.pack(entry_pos[first], crd[k][first], parent_size, dims[k], itype)
        arrays.append(packed.arrays)
        entry_pos = packed.child_pos[np.cumsum(new) - 1]
        parent_size = packed.size
        if n > 1 and np.any(entry_pos[1:] < entry_pos[:-1]):
            # an unordered level (hashed: positions are buckets) placed its nodes out of
            # coordinate order; the levels below append in position order, so the entries
            # follow the positions (stable: each node's entries keep their order)
            perm = np.argsort(entry_pos, kind="stable")
            crd, values, entry_pos = crd[:, perm], values[perm], entry_pos[perm]
    vals = np.zeros(parent_size, dtype=values.dtype)
    vals[entry_pos] = values
    return tuple(arrays), vals


def _check_unique_prefixes(levels: Sequence[Level], crd: np.ndarray, depth: Sequence[int]) -> None:
    """A unique level inside a non-unique level's chain (``uqq``) stores a node per entry,
    so it holds only when no two entries share their coordinates down to it; entries are
    sorted, so sharing ones are adjacent."""
    for k, lv in enumerate(levels):
        if lv.unique and depth[k] > k + 1 and crd.shape[1] > 1:
            same = np.all(crd[: k + 1, 1:] == crd[: k + 1, :-1], axis=0)
            if same.any():
                raise repeated_path_error(k, lv, crd[: k + 1, int(np.argmax(same))])


def repeated_path_error(k: int, level: Level, path: np.ndarray, name: str = "") -> FormatError:
    """The error for level ``k``, declared unique, whose coordinate path ``path`` repeats."""
    return FormatError(
        f"{name + ': ' if name else ''}level {k + 1} ({level}) is declared unique, but the coordinates "
        f"{tuple(int(c) for c in path)} of levels 1..{k + 1} repeat: declare it non-unique "
        f"(letter 'c' for a singleton, 'u' for a compressed level: 'ucq', not 'uqq', for a "
        f"3-D COO whose leading pairs repeat)")
