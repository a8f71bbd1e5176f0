"""Compressed level: ``pos`` segments into a ``crd`` array (CSR's column level)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import FormatError
from ...ir.nodes import Assign, Bin, Const, For, IRExpr, IRStmt, Load, Var, add, block
from .base import Level, LevelNames, Packed, ParentPos


@dataclass(frozen=True)
class Compressed(Level):
    kind: ClassVar[str] = "compressed"
    letter: ClassVar[str] = "s"
    arrays: ClassVar[tuple[str, ...]] = ("pos", "crd")
    has_pos_iter: ClassVar[bool] = True
    has_append: ClassVar[bool] = True
    position_arrays: ClassVar[tuple[str, ...]] = ("crd",)
    parent_arrays: ClassVar[tuple[str, ...]] = ("pos",)

    def format_letter(self) -> str:
        if not self.ordered and self.unique:
            return "n"
        return "s" if self.unique else "u"

    # -- iteration
    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        pos = names.array("pos")
        return Load(pos, parent.lo), Load(pos, parent.end)

    def range_bounds(self, names: LevelNames, lo: IRExpr, hi: IRExpr) -> tuple[IRExpr, IRExpr]:
        pos = names.array("pos")
        return Load(pos, lo), Load(pos, hi)

    def pos_access(self, names: LevelNames, p: IRExpr, ancestors: tuple[IRExpr, ...] = ()) -> IRExpr:
        return Load(names.array("crd"), p)

    def array_lengths(self, names: LevelNames, parent_size: IRExpr) -> tuple[dict[str, IRExpr], IRExpr]:
        size = Load(names.array("pos"), parent_size)
        return {"pos": add(parent_size, Const(1)), "crd": size}, size

    # -- assembly: pos holds per-parent counts until append_finalize turns them into offsets
    def append_coord(self, names: LevelNames, p: IRExpr, coord: IRExpr) -> list[IRStmt]:
        return [Assign(Load(names.array("crd"), p), coord)]

    def append_edges(
        self, names: LevelNames, parent: IRExpr, begin: IRExpr, end: IRExpr
    ) -> list[IRStmt]:
        # added, not assigned: a split loop appends one parent's entries in several windows
        # (pos starts zeroed)
        return [Assign(Load(names.array("pos"), add(parent, Const(1))), Bin("-", end, begin), "+=")]

    def append_finalize(self, names: LevelNames, parent_size: IRExpr) -> list[IRStmt]:
        pos = names.array("pos")
        q = f"q{names.tensor}{names.k}"
        body = block(Assign(Load(pos, add(Var(q), Const(1))), Load(pos, Var(q)), "+="))
        return [For(q, "int64_t", Const(0), parent_size, body)]

    # -- NumPy side
    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return int(arrays["pos"][parent_size]) if parent_size >= 0 else 0

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        pos, crd = arrays["pos"], arrays["crd"]
        if pos.ndim != 1 or pos.shape[0] != parent_size + 1:
            raise FormatError(f"{where}: pos has length {pos.shape[0]}, expected {parent_size + 1}")
        if pos[0] != 0:
            raise FormatError(f"{where}: pos[0] is {pos[0]}, expected 0")
        if parent_size and np.any(pos[1:] < pos[:-1]):
            raise FormatError(f"{where}: pos is not monotone non-decreasing")
        size = int(pos[-1])
        if crd.ndim != 1 or crd.shape[0] < size:
            raise FormatError(f"{where}: crd has length {crd.shape[0]}, pos needs {size}")
        used = crd[:size]
        if size and (used.min() < 0 or used.max() >= dim):
            raise FormatError(f"{where}: coordinate out of range [0, {dim})")
        if self.ordered and size > 1:
            # within each segment coordinates must increase (strictly when unique)
            d = np.diff(used.astype(np.int64))
            starts = np.zeros(size, dtype=bool)
            starts[pos[:-1][pos[:-1] < size].astype(np.int64)] = True
            bad = (d < 0) if not self.unique else (d <= 0)
            if np.any(bad & ~starts[1:]):
                kind = "strictly increasing" if self.unique else "sorted"
                raise FormatError(f"{where}: coordinates within a segment are not {kind}")
        return size

    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        n = crd.shape[0]
        if self.unique:
            new = np.ones(n, dtype=bool)
            if n:
                new[1:] = (parent_pos[1:] != parent_pos[:-1]) | (crd[1:] != crd[:-1])
            child_pos = np.cumsum(new) - 1
            seg_parent, seg_crd = parent_pos[new], crd[new]
        else:
            child_pos = np.arange(n, dtype=np.int64)
            seg_parent, seg_crd = parent_pos, crd
        counts = np.bincount(seg_parent.astype(np.int64), minlength=parent_size)
        pos = np.zeros(parent_size + 1, dtype=itype)
        np.cumsum(counts, out=pos[1:])
        return Packed({"pos": pos, "crd": seg_crd.astype(itype)}, child_pos, int(seg_crd.shape[0]))

    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = arrays["pos"].astype(np.int64)
        starts, ends = pos[parent_pos], pos[parent_pos + 1]
        counts = ends - starts
        parent_index = np.repeat(np.arange(parent_pos.shape[0], dtype=np.int64), counts)
        offsets = np.arange(parent_index.shape[0], dtype=np.int64) - np.repeat(
            np.cumsum(counts) - counts, counts
        )
        child_pos = starts[parent_index] + offsets
        return child_pos, parent_index, arrays["crd"][child_pos].astype(np.int64)
