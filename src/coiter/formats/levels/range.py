"""Range level: coordinate value iteration over the part of a diagonal inside the matrix.

DIA's middle level. Its parent's coordinate ``d`` names a diagonal with offset
``o = offset[d]``; the coordinate ``a`` walks the mode this level stores, and the
offset level below derives the other mode's coordinate ``b = a + sign * o``. The
range is every ``a`` with both coordinates in bounds:
``[max(0, -sign*o), min(N_a, N_b - sign*o))``. Positions are dense, ``parent * N_a + a``,
so values form a (diagonals × N_a) array. ``sign = +1`` is the paper's row-indexed
layout (offset = column − row); ``sign = -1`` indexes by column as SciPy does.
The level owns the ``offset`` array; the offset level reads it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import FormatError
from ...ir.nodes import Bin, Const, IRExpr, Load, Max, Min, Un, add, mul
from .base import Level, LevelNames, Packed, ParentPos


@dataclass(frozen=True)
class Range(Level):
    sign: int = 1
    kind: ClassVar[str] = "range"
    letter: ClassVar[str] = "r"
    arrays: ClassVar[tuple[str, ...]] = ("offset",)
    compact: ClassVar[bool] = False
    has_coord_iter: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.sign not in (1, -1):
            raise FormatError(f"range level sign must be +1 or -1, got {self.sign}")

    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        if not ancestors:
            raise FormatError("a range level needs a diagonal level above it")
        off = Load(names.array("offset"), ancestors[-1])
        other = names.sibling(1).dimension
        if self.sign > 0:  # b = a + o
            return Max((Const(0), Un("-", off))), Min((names.dimension, Bin("-", other, off)))
        return Max((Const(0), off)), Min((names.dimension, add(other, off)))  # b = a - o

    def pos_access(self, names: LevelNames, p: IRExpr, ancestors: tuple[IRExpr, ...] = ()) -> IRExpr:
        return p  # coordinate value iteration: the iterator is the coordinate

    def child_position(self, names: LevelNames, p: IRExpr, coord: IRExpr, parent: IRExpr) -> IRExpr:
        return add(mul(parent, names.dimension), coord)

    # -- NumPy side: DIA's layout packs and unpacks the whole hierarchy (it needs both
    # modes' coordinates at once); this level validates its offsets.
    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return parent_size * dim

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        off = arrays["offset"]
        if off.shape[0] != parent_size:
            raise FormatError(f"{where}: {off.shape[0]} offsets for {parent_size} diagonals")
        if np.unique(off).shape[0] != off.shape[0]:
            raise FormatError(f"{where}: repeated diagonal offset")
        return parent_size * dim

    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        raise FormatError("range levels are packed by the DIA layout (coiter.dia())")

    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise FormatError("range levels are unpacked by the DIA layout (coiter.dia())")
