"""Singleton level: exactly one coordinate per parent position (COO's inner levels)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import FormatError
from ...ir.nodes import Assign, IRExpr, IRStmt, Load
from .base import Level, LevelNames, Packed, ParentPos


@dataclass(frozen=True)
class Singleton(Level):
    kind: ClassVar[str] = "singleton"
    letter: ClassVar[str] = "q"
    arrays: ClassVar[tuple[str, ...]] = ("crd",)
    branchless: ClassVar[bool] = True
    has_pos_iter: ClassVar[bool] = True
    has_append: ClassVar[bool] = True
    position_arrays: ClassVar[tuple[str, ...]] = ("crd",)

    def format_letter(self) -> str:
        return "q" if self.unique else "c"

    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        return parent.lo, parent.end

    def array_lengths(self, names: LevelNames, parent_size: IRExpr) -> tuple[dict[str, IRExpr], IRExpr]:
        return {"crd": parent_size}, parent_size

    def range_bounds(self, names: LevelNames, lo: IRExpr, hi: IRExpr) -> tuple[IRExpr, IRExpr]:
        return lo, hi

    def pos_access(self, names: LevelNames, p: IRExpr, ancestors: tuple[IRExpr, ...] = ()) -> IRExpr:
        return Load(names.array("crd"), p)

    def append_coord(self, names: LevelNames, p: IRExpr, coord: IRExpr) -> list[IRStmt]:
        return [Assign(Load(names.array("crd"), p), coord)]

    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return parent_size

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        crd = arrays["crd"]
        if crd.ndim != 1 or crd.shape[0] < parent_size:
            raise FormatError(f"{where}: crd has length {crd.shape[0]}, expected {parent_size}")
        used = crd[:parent_size]
        if parent_size and (used.min() < 0 or used.max() >= dim):
            raise FormatError(f"{where}: coordinate out of range [0, {dim})")
        return parent_size

    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        n = crd.shape[0]
        if n and np.any(parent_pos[1:] == parent_pos[:-1]):
            raise FormatError(
                "a singleton level needs exactly one child per parent position; "
                "put it below a non-unique level (for example 'uq', COO)"
            )
        out = np.zeros(parent_size, dtype=itype)
        out[parent_pos.astype(np.int64)] = crd
        return Packed({"crd": out}, parent_pos.astype(np.int64), parent_size)

    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = np.arange(parent_pos.shape[0], dtype=np.int64)
        child = parent_pos.astype(np.int64)
        return child, idx, arrays["crd"][child].astype(np.int64)
