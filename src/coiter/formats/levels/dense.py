"""Dense level: every coordinate of the dimension, positions by arithmetic."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...ir.nodes import IRExpr, add, mul
from .base import Level, LevelNames, Packed


@dataclass(frozen=True)
class Dense(Level):
    kind: ClassVar[str] = "dense"
    letter: ClassVar[str] = "d"
    arrays: ClassVar[tuple[str, ...]] = ()
    full: ClassVar[bool] = True
    has_locate: ClassVar[bool] = True
    has_insert: ClassVar[bool] = True

    def locate(self, names: LevelNames, parent: IRExpr, coord: IRExpr) -> IRExpr:
        return add(mul(parent, names.dimension), coord)

    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return parent_size * dim

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
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


