"""Layouts: formats whose storage levels are not one per tensor mode.

Blocked formats (BCSR, BCOO, CSB) split a mode into a block coordinate and an
in-block coordinate, each stored by its own level; DIA and ELL add a *hidden* level
(the diagonal, the slot in a row) that corresponds to no mode. A layout says, for
each storage level, which coordinate it stores (:class:`LevelCoord`), how to size the
levels, and how to pack and unpack NumPy coordinates. The compiler sees such a
tensor through its level variables: an access ``B(i,j)`` to a BCSR tensor becomes
``B(i_b, j_b, i_e, j_e)`` with ``i = i_b * bi + i_e``; a hidden level adds a
summation variable (each logical entry is stored on exactly one diagonal or slot).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import FormatError
from .levels.base import check_fill
from .packing import pack_levels


@dataclass(frozen=True)
class LevelCoord:
    """The coordinate one storage level holds.

    ``mode`` is the tensor mode it comes from (None for a hidden coordinate);
    ``block > 0`` splits that mode: the level holds ``i // block`` (``inner=False``)
    or ``i % block`` (``inner=True``).
    """

    mode: int | None
    block: int = 0
    inner: bool = False

    def __str__(self) -> str:
        if self.mode is None:
            return "hidden"
        if self.block:
            return f"{'inner' if self.inner else 'outer'}({self.mode}, {self.block})"
        return f"mode({self.mode})"


@dataclass(frozen=True)
class Layout:
    """Generic layout: split and whole-mode levels, plus at most the hidden kinds
    subclasses define. ``name`` prints as the format's name."""

    name: str
    coords: tuple[LevelCoord, ...]
    order: int

    def __post_init__(self) -> None:
        modes = {c.mode for c in self.coords if c.mode is not None}
        if modes != set(range(self.order)):
            raise FormatError(f"layout {self.name}: levels must cover modes 0..{self.order - 1}")
        for c in self.coords:
            if c.block < 0:
                raise FormatError(f"layout {self.name}: block size must be positive")

    @property
    def reshapes(self) -> bool:
        """Whether levels differ from modes (a split or hidden level), so accesses need
        new index variables; otherwise only the arrays are laid out differently."""
        return any(c.mode is None or c.block for c in self.coords)

    # -- sizes ------------------------------------------------------------------------------
    def level_dims(self, shape: Sequence[int], levels: Sequence[dict[str, np.ndarray]]) -> tuple[int, ...]:
        """Extent of every storage level's coordinate."""
        return tuple(self._dim(k, c, shape, levels) for k, c in enumerate(self.coords))

    def _dim(self, k: int, c: LevelCoord, shape: Sequence[int], levels: Sequence[dict]) -> int:
        if c.mode is None:
            return self.hidden_dim(k, shape, levels)
        if not c.block:
            return int(shape[c.mode])
        return c.block if c.inner else -(-int(shape[c.mode]) // c.block)

    def hidden_dim(self, k: int, shape: Sequence[int], levels: Sequence[dict]) -> int:
        raise FormatError(f"layout {self.name} has no hidden levels")

    def hidden_coords(
        self, k: int, level_crd: list[np.ndarray], coords: np.ndarray
    ) -> tuple[np.ndarray, int]:
        """Coordinates (and extent) of hidden level ``k`` for entries sorted by the levels above."""
        raise FormatError(f"layout {self.name} has no hidden levels")

    # -- packing ----------------------------------------------------------------------------
    def level_coords(
        self, coords: np.ndarray, shape: Sequence[int]
    ) -> tuple[np.ndarray, tuple[int, ...], np.ndarray]:
        """Level coordinates (levels × n) of unique entries sorted lexicographically by level,
        the level extents, and the permutation of the entries that sorting applied.
        Hidden coordinates are derived after sorting by the levels above them, so a hidden
        level may rank entries (ELL's slot in a row).
        """
        n = coords.shape[1]
        dims: list[int] = []
        crd: list[np.ndarray] = []
        perm = np.arange(n)
        for k, c in enumerate(self.coords):
            if c.mode is None:
                # order entries by the levels above and by every mode, then rank
                keys = [coords[m][perm] for m in reversed(range(self.order))] + [x for x in reversed(crd)]
                idx = np.lexsort(keys) if n else np.zeros(0, dtype=np.int64)
                perm = perm[idx]
                crd = [x[idx] for x in crd]
                h, d = self.hidden_coords(k, crd, coords[:, perm])
                crd.append(h)
                dims.append(d)
                continue
            x = coords[c.mode][perm]
            if c.block:
                x = x % c.block if c.inner else x // c.block
            crd.append(x)
            dims.append(self._dim(k, c, shape, ()))
        level = np.stack(crd) if crd else np.zeros((0, n), dtype=np.int64)
        idx = np.lexsort(level[::-1]) if n else np.zeros(0, dtype=np.int64)
        return level[:, idx], tuple(dims), perm[idx]

    def pack(self, levels: Sequence, coords: np.ndarray, values: np.ndarray, shape: Sequence[int],
             itype: np.dtype) -> tuple[tuple[dict[str, np.ndarray], ...], np.ndarray]:
        """Arrays of every level and the values for unique entries ``coords``/``values``."""
        level, dims, perm = self.level_coords(coords, shape)
        return pack_levels(levels, level, dims, values[perm], itype)

    def unpack(self, levels: Sequence, arrays: Sequence[dict[str, np.ndarray]], vals: np.ndarray,
               shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Stored entries as (order × n coordinates, values): where levels differ from
        modes, the nonzero ones (padding, stored as zeros, is not returned)."""
        dims = self.level_dims(shape, arrays)
        pos = np.zeros(1, dtype=np.int64)
        per_level: list[np.ndarray] = []
        for lv, arr, dim in zip(levels, arrays, dims):
            pos, parent_index, crd = lv.unpack(arr, pos, dim)
            per_level = [c[parent_index] for c in per_level] + [crd]
        coords = np.zeros((self.order, pos.shape[0]), dtype=np.int64)
        for k, c in enumerate(self.coords):
            if c.mode is None:
                continue
            if c.block and not c.inner:
                coords[c.mode] += per_level[k] * c.block
            else:
                coords[c.mode] += per_level[k]
        v = vals[pos]
        # (an interleaved COO pads nothing: its stored zeros are entries, which a fill other
        # than 0 tells from absent ones)
        keep = v != 0 if self.reshapes else np.ones(v.shape, dtype=bool)
        for m in range(self.order):
            keep &= coords[m] < shape[m]
        return coords[:, keep], v[keep]


@dataclass(frozen=True)
class SlotLayout(Layout):
    """ELL: a hidden level numbering the entries of each row (slot ``k`` of row ``i``)."""

    def hidden_dim(self, k: int, shape: Sequence[int], levels: Sequence[dict]) -> int:
        rows = int(shape[self.coords[0].mode])
        width = int(levels[-1]["crd"].shape[0]) if levels else 0
        return width // rows if rows else 0

    def hidden_coords(
        self, k: int, level_crd: list[np.ndarray], coords: np.ndarray
    ) -> tuple[np.ndarray, int]:
        rows = level_crd[-1]
        n = rows.shape[0]
        if not n:
            return np.zeros(0, dtype=np.int64), 0
        start = np.ones(n, dtype=bool)
        start[1:] = rows[1:] != rows[:-1]
        first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
        slot = np.arange(n) - first
        width = int(slot.max()) + 1
        check_fill("ELL", width * (int(rows.max()) + 1), n)
        return slot, width


@dataclass(frozen=True)
class DiagonalLayout(Layout):
    """DIA: a hidden diagonal level, a range level and an offset level.

    ``coords`` are (hidden, walked mode, derived mode); the range level's ``sign``
    relates them as ``derived = walked + sign * offset``. Packing finds the set of
    occupied diagonals first, then fills a (diagonals × N_walked) value array.
    """

    @property
    def walked(self) -> int:
        return self.coords[1].mode  # type: ignore[return-value]

    @property
    def derived(self) -> int:
        return self.coords[2].mode  # type: ignore[return-value]

    def hidden_dim(self, k: int, shape: Sequence[int], levels: Sequence[dict]) -> int:
        return int(levels[1]["offset"].shape[0]) if levels else 0

    def pack(self, levels: Sequence, coords: np.ndarray, values: np.ndarray, shape: Sequence[int],
             itype: np.dtype) -> tuple[tuple[dict[str, np.ndarray], ...], np.ndarray]:
        a, b = coords[self.walked], coords[self.derived]
        diff = (b - a) * levels[1].sign  # offset of each entry's diagonal
        offsets, diag = np.unique(diff, return_inverse=True)
        na = int(shape[self.walked])
        check_fill("DIA", offsets.shape[0] * na, values.shape[0])
        vals = np.zeros(offsets.shape[0] * na, dtype=values.dtype)
        vals[diag * na + a] = values
        return ({}, {"offset": offsets.astype(itype)}, {}), vals

    def unpack(self, levels: Sequence, arrays: Sequence[dict[str, np.ndarray]], vals: np.ndarray,
               shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        offsets = arrays[1]["offset"].astype(np.int64)
        na, nb = int(shape[self.walked]), int(shape[self.derived])
        a = np.arange(na)
        b = a[None, :] + levels[1].sign * offsets[:, None]
        v = vals[: offsets.shape[0] * na].reshape(offsets.shape[0], na)
        keep = (b >= 0) & (b < nb) & (v != 0)
        d, a_idx = np.nonzero(keep)
        coords = np.zeros((self.order, d.shape[0]), dtype=np.int64)
        coords[self.walked] = a_idx
        coords[self.derived] = b[d, a_idx]
        return coords, v[d, a_idx]


def block_layout(name: str, levels_modes: Sequence[tuple[int, bool]], blocks: Sequence[int]) -> Layout:
    """Layout splitting every mode ``m`` by ``blocks[m]``; ``levels_modes`` lists, per level,
    (mode, inner?)."""
    if len(blocks) != len({m for m, _ in levels_modes}):
        raise FormatError(f"{name}: give one block size per mode, got {tuple(blocks)}")
    for b in blocks:
        if not isinstance(b, (int, np.integer)) or b < 1:
            raise FormatError(f"{name}: block sizes must be positive integers, got {tuple(blocks)}")
    coords = tuple(LevelCoord(m, int(blocks[m]), inner) for m, inner in levels_modes)
    return Layout(f"{name}({','.join(str(int(b)) for b in blocks)})", coords, len(blocks))


@dataclass(frozen=True)
class InterleavedLayout(Layout):
    """Array-of-structs COO: entries packed as a standard COO, then their coordinates
    interleaved into one array that every level shares."""

    def pack(self, levels: Sequence, coords: np.ndarray, values: np.ndarray, shape: Sequence[int],
             itype: np.dtype) -> tuple[tuple[dict[str, np.ndarray], ...], np.ndarray]:
        n = coords.shape[1]
        idx = np.lexsort(coords[::-1]) if n else np.zeros(0, dtype=np.int64)
        crd = np.ascontiguousarray(coords[:, idx].T, dtype=itype).reshape(-1)
        arrays = [{"pos": np.array([0, n], dtype=itype), "crd": crd}]
        arrays += [{"crd": crd} for _ in range(self.order - 1)]
        return tuple(arrays), values[idx]
