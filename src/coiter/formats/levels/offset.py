"""Offset level: one coordinate per parent, the parent's coordinate shifted by its diagonal.

DIA's last level: below a range level walking coordinate ``a`` of diagonal ``d``, it
encodes ``a + sign * offset[d]`` (the range level's ``offset`` array and ``sign``) at
the parent's own position. Branchless; never assembled directly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import FormatError
from ...ir.nodes import Bin, Const, IRExpr, Load, add
from .base import Level, LevelNames, Packed, ParentPos


@dataclass(frozen=True)
class Offset(Level):
    sign: int = 1
    kind: ClassVar[str] = "offset"
    letter: ClassVar[str] = "o"
    arrays: ClassVar[tuple[str, ...]] = ()
    branchless: ClassVar[bool] = True
    compact: ClassVar[bool] = False
    has_pos_iter: ClassVar[bool] = True

    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        return parent.lo, add(parent.lo, Const(1))

    def pos_access(self, names: LevelNames, p: IRExpr, ancestors: tuple[IRExpr, ...] = ()) -> IRExpr:
        if len(ancestors) < 2:
            raise FormatError("an offset level needs a diagonal and a range level above it")
        off = Load(names.sibling(-1).array("offset"), ancestors[-2])
        return Bin("+" if self.sign > 0 else "-", ancestors[-1], off)

    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return parent_size

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        return parent_size

    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        raise FormatError("offset levels are packed by the DIA layout (coiter.dia())")

    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise FormatError("offset levels are unpacked by the DIA layout (coiter.dia())")
