"""Array-of-structs COO levels: all coordinates of an entry side by side in one array.

TensorFlow's sparse tensors store ``idx[p * order + k]`` for coordinate ``k`` of entry
``p``. The paper supports this with variants of the compressed and singleton levels
whose ``pos_access`` reads with a stride. Every level's ``crd`` is the same shared
interleaved array; each reads its own ``field``. Packing interleaves through the
format's layout (:class:`coiter.formats.layout.InterleavedLayout`).
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import FormatError
from ...ir.nodes import Const, IRExpr, Load, add, mul
from .base import Level, LevelNames, Packed, ParentPos


@dataclass(frozen=True)
class _Strided(Level):
    """Shared part: coordinate ``field`` of entry ``p`` lives at ``crd[p * stride + field]``."""

    stride: int = 2
    field: int = 0
    has_pos_iter: ClassVar[bool] = True

    def pos_access(self, names: LevelNames, p: IRExpr, ancestors: tuple[IRExpr, ...] = ()) -> IRExpr:
        return Load(names.array("crd"), add(mul(p, Const(self.stride)), Const(self.field)))

    def _check_field(self, crd: np.ndarray, n: int, dim: int, where: str) -> None:
        if crd.ndim != 1 or crd.shape[0] < n * self.stride:
            raise FormatError(f"{where}: interleaved crd has {crd.shape[0]} entries, needs {n * self.stride}")
        used = crd[self.field: n * self.stride: self.stride]
        if n and (used.min() < 0 or used.max() >= dim):
            raise FormatError(f"{where}: coordinate out of range [0, {dim})")
        if self.ordered and n > 1 and self.field == 0 and np.any(np.diff(used.astype(np.int64)) < 0):
            raise FormatError(f"{where}: entries are not sorted")

    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        raise FormatError("array-of-structs levels are packed by coiter.coo_aos()'s layout")

    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        child, parent_index = self._children(arrays, parent_pos)
        return child, parent_index, arrays["crd"][child * self.stride + self.field].astype(np.int64)

    @abstractmethod
    def _children(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the children of ``parent_pos`` and which parent each comes from."""


@dataclass(frozen=True)
class AosCompressed(_Strided):
    """The top COO level: ``pos = [0, nnz]`` over the interleaved entries."""

    unique: bool = False
    kind: ClassVar[str] = "compressed-aos"
    letter: ClassVar[str] = "?"
    arrays: ClassVar[tuple[str, ...]] = ("pos", "crd")

    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        pos = names.array("pos")
        return Load(pos, parent.lo), Load(pos, parent.end)

    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return int(arrays["pos"][parent_size])

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        pos = arrays["pos"]
        if pos.shape[0] != parent_size + 1 or pos[0] != 0 or np.any(np.diff(pos) < 0):
            raise FormatError(f"{where}: pos must be {parent_size + 1} non-decreasing offsets from 0")
        n = int(pos[-1])
        self._check_field(arrays["crd"], n, dim, where)
        return n

    def _children(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        pos = arrays["pos"].astype(np.int64)
        counts = pos[parent_pos + 1] - pos[parent_pos]
        parent_index = np.repeat(np.arange(parent_pos.shape[0]), counts)
        starts = np.repeat(pos[parent_pos] - (np.cumsum(counts) - counts), counts)
        return np.arange(parent_index.shape[0]) + starts, parent_index


@dataclass(frozen=True)
class AosSingleton(_Strided):
    """A lower COO level reading its field of the parent's entry."""

    kind: ClassVar[str] = "singleton-aos"
    letter: ClassVar[str] = "?"
    arrays: ClassVar[tuple[str, ...]] = ("crd",)
    branchless: ClassVar[bool] = True

    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        return parent.lo, parent.end

    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return parent_size

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        self._check_field(arrays["crd"], parent_size, dim, where)
        return parent_size

    def _children(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return parent_pos.astype(np.int64), np.arange(parent_pos.shape[0])
