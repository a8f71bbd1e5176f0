"""Dense level: every coordinate of the dimension, positions by arithmetic.

``extent`` fixes the dimension at compile time (the blocks of BCSR and friends), so
kernels are specialised on it: loops and position arithmetic use a constant.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from ...errors import FormatError
from ...ir.nodes import Const, IRExpr, add, mul
from .base import Level, LevelNames, Packed


@dataclass(frozen=True)
class Dense(Level):
    extent: int = 0  # 0: the tensor's dimension, known at run time
    kind: ClassVar[str] = "dense"
    letter: ClassVar[str] = "d"
    arrays: ClassVar[tuple[str, ...]] = ()
    full: ClassVar[bool] = True
    has_locate: ClassVar[bool] = True
    has_insert: ClassVar[bool] = True

    def with_extent(self, extent: int) -> Dense:
        return replace(self, extent=extent)

    def dimension(self, names: LevelNames) -> IRExpr:
        return Const(self.extent) if self.extent else names.dimension

    def locate(self, names: LevelNames, parent: IRExpr, coord: IRExpr) -> IRExpr:
        return add(mul(parent, self.dimension(names)), coord)

    def array_lengths(self, names: LevelNames, parent_size: IRExpr) -> tuple[dict[str, IRExpr], IRExpr]:
        return {}, mul(parent_size, self.dimension(names))

    def range_bounds(self, names: LevelNames, lo: IRExpr, hi: IRExpr) -> tuple[IRExpr, IRExpr]:
        dim = self.dimension(names)
        return mul(lo, dim), mul(hi, dim)

    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return parent_size * dim

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        if self.extent and dim != self.extent:
            raise FormatError(f"{where}: dimension {dim}, the format fixes {self.extent}")
        return parent_size * dim

    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        return Packed({}, parent_pos.astype(np.int64) * dim + crd, parent_size * dim)

    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = parent_pos.shape[0]
        parent_index = np.repeat(np.arange(n, dtype=np.int64), dim)
        crd = np.tile(np.arange(dim, dtype=np.int64), n)
        return parent_pos.astype(np.int64)[parent_index] * dim + crd, parent_index, crd


