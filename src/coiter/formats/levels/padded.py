"""Padded singleton level: at most one coordinate per parent position (ELL's column level).

Like a singleton, the child sits at its parent's position; unlike one, a parent
may have no child, marked by coordinate -1 (TACO's ``p`` level). Iteration skips
those padding slots.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import FormatError
from ...ir.nodes import Bin, Const, IRExpr, Load
from .base import Level, LevelNames, Packed, ParentPos


@dataclass(frozen=True)
class PaddedSingleton(Level):
    kind: ClassVar[str] = "padded"
    letter: ClassVar[str] = "p"
    arrays: ClassVar[tuple[str, ...]] = ("crd",)
    compact: ClassVar[bool] = False
    has_pos_iter: ClassVar[bool] = True

    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        return parent.lo, parent.end

    def pos_access(self, names: LevelNames, p: IRExpr, ancestors: tuple[IRExpr, ...] = ()) -> IRExpr:
        return Load(names.array("crd"), p)

    def pos_found(self, names: LevelNames, p: IRExpr) -> IRExpr:
        return Bin(">=", Load(names.array("crd"), p), Const(0))

    def array_lengths(self, names: LevelNames, parent_size: IRExpr) -> tuple[dict[str, IRExpr], IRExpr]:
        return {"crd": parent_size}, parent_size

    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return parent_size

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        crd = arrays["crd"]
        if crd.shape[0] < parent_size:
            raise FormatError(f"{where}: crd has length {crd.shape[0]}, expected {parent_size}")
        used = crd[:parent_size]
        if parent_size and (used.min() < -1 or used.max() >= dim):
            raise FormatError(f"{where}: coordinate outside [0, {dim}) (padding is -1)")
        return parent_size

    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        if crd.shape[0] > 1 and np.any(parent_pos[1:] == parent_pos[:-1]):
            raise FormatError("a padded singleton level holds at most one child per parent position")
        out = np.full(parent_size, -1, dtype=itype)
        out[parent_pos.astype(np.int64)] = crd
        return Packed({"crd": out}, parent_pos.astype(np.int64), parent_size)

    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        child = parent_pos.astype(np.int64)
        crd = arrays["crd"][child].astype(np.int64)
        keep = crd >= 0
        return child[keep], np.flatnonzero(keep), crd[keep]
