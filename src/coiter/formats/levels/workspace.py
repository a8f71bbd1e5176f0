"""Workspace level: a dense array plus the list of coordinates written so far.

Used internally for Gustavson-style row workspaces. As a result it is located
densely and records first writes in ``list``; as an operand it is iterated
through the sorted ``list``, and values are read by coordinate. Its storage
(``vals``, ``set``, ``list``, ``count``) is allocated by the kernel itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...ir.nodes import (
    Assign, Call, Const, ExprStmt, IRExpr, IRStmt, Load, Un, Var,
)
from .base import Level, LevelNames, Packed, ParentPos


@dataclass(frozen=True)
class WorkspaceList(Level):
    kind: ClassVar[str] = "workspace"
    letter: ClassVar[str] = "w"
    arrays: ClassVar[tuple[str, ...]] = ("set", "list")
    full: ClassVar[bool] = False
    has_pos_iter: ClassVar[bool] = True
    has_locate: ClassVar[bool] = False
    has_insert: ClassVar[bool] = True

    @staticmethod
    def count(names: LevelNames) -> Var:
        return Var(names.array("count"))

    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        return Const(0), self.count(names)

    def pos_access(self, names: LevelNames, p: IRExpr, ancestors: tuple[IRExpr, ...] = ()) -> IRExpr:
        return Load(names.array("list"), p)

    def child_position(self, names: LevelNames, p: IRExpr, coord: IRExpr, parent: IRExpr) -> IRExpr:
        return coord

    def iter_init(self, names: LevelNames) -> list[IRStmt]:
        if not self.ordered:  # the result takes its coordinates in any order
            return []
        args = (Var(names.array("list")), self.count(names), Var(names.array("set")), names.dimension)
        return [ExprStmt(Call("coiter_sort_index", args))]

    def locate(self, names: LevelNames, parent: IRExpr, coord: IRExpr) -> IRExpr:
        return coord

    def insert_coord(self, names: LevelNames, p: IRExpr, coord: IRExpr) -> list[IRStmt]:
        # without a branch, whose outcome (first visit or not) is a coin toss in SpGEMM: the
        # coordinate is always written after the list's end, and kept by counting it when
        # it is new (the list holds dim + 1 entries, so the write stays inside)
        flag = Load(names.array("set"), coord)
        count = self.count(names)
        return [
            Assign(Load(names.array("list"), count), coord),
            Assign(count, Un("!", flag), "+="),
            Assign(flag, Const(1)),
        ]

    # The workspace never lives in NumPy; these satisfy the interface for completeness
    # of the plugin contract and describe a workspace as if it were a sparse vector.
    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return dim

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        return dim

    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        raise TypeError("workspaces are internal to kernels and cannot be packed")

    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise TypeError("workspaces are internal to kernels and cannot be unpacked")
