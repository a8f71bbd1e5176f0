"""Hashed level: per-parent hash tables of ``W`` buckets with linear probing.

``crd`` holds ``parent_size * W`` buckets; bucket ``b`` of parent ``p`` is
``crd[p * W + b]`` and stores a coordinate or -1 (empty). Coordinate ``c`` lives in
the first bucket at or after ``c % W`` (cyclically) that holds it; probing stops at
an empty bucket. Iteration walks every bucket and skips empty ones (hash order, so
the level is unordered); locate probes. ``W`` is stored as a one-element array.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import FormatError
from ...ir.nodes import Bin, Call, Const, IRExpr, Load, Var, add, mul
from .base import Level, LevelNames, Packed, ParentPos, check_fill


def _bucket_count(counts: np.ndarray) -> int:
    """Buckets per segment: a power of two at least twice the fullest segment (load <= 1/2)."""
    most = int(counts.max()) if counts.size else 0
    w = 1
    while w < 2 * most:
        w *= 2
    return w


def _probe(table: np.ndarray, seg: np.ndarray, crd: np.ndarray, w: int) -> np.ndarray:
    """Bucket holding each ``crd`` under its segment (-1 where absent), all probes at once."""
    where = np.full(crd.shape[0], -1, dtype=np.int64)
    offset = crd % w
    live = np.arange(crd.shape[0])
    for _ in range(w):
        if not live.size:
            break
        b = seg[live] * w + offset[live]
        v = table[b]
        hit = v == crd[live]
        where[live[hit]] = b[hit]
        go = (v >= 0) & ~hit
        live = live[go]
        offset[live] = (offset[live] + 1) % w
    return where


@dataclass(frozen=True)
class Hashed(Level):
    ordered: bool = False
    kind: ClassVar[str] = "hashed"
    letter: ClassVar[str] = "h"
    arrays: ClassVar[tuple[str, ...]] = ("W", "crd")
    compact: ClassVar[bool] = False
    has_pos_iter: ClassVar[bool] = True
    has_locate: ClassVar[bool] = True
    locate_may_fail: ClassVar[bool] = True
    has_insert: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.ordered or not self.unique:
            raise FormatError("a hashed level is always unordered and unique")

    def __str__(self) -> str:
        return self.kind

    @staticmethod
    def _w(names: LevelNames) -> IRExpr:
        return Load(names.array("W"), Const(0))

    # -- iteration and locate
    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        if parent.hi is not None:
            raise FormatError("a hashed level cannot sit below a non-unique level")
        w = self._w(names)
        return mul(parent.lo, w), mul(add(parent.lo, Const(1)), w)

    def pos_access(self, names: LevelNames, p: IRExpr, ancestors: tuple[IRExpr, ...] = ()) -> IRExpr:
        return Load(names.array("crd"), p)

    def pos_found(self, names: LevelNames, p: IRExpr) -> IRExpr:
        return Bin(">=", Load(names.array("crd"), p), Const(0))

    def locate(self, names: LevelNames, parent: IRExpr, coord: IRExpr) -> IRExpr:
        return Call("coiter_hash_locate", (Var(names.array("crd")), self._w(names), parent, coord))

    # -- NumPy side
    def array_lengths(self, names: LevelNames, parent_size: IRExpr) -> tuple[dict[str, IRExpr], IRExpr]:
        size = mul(parent_size, Load(names.array("W"), Const(0)))
        return {"W": Const(1), "crd": size}, size

    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return parent_size * int(arrays["W"][0])

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        w_arr, table = arrays["W"], arrays["crd"]
        if w_arr.shape[0] != 1 or w_arr[0] < 1:
            raise FormatError(f"{where}: W must be one positive bucket count, got {w_arr.tolist()}")
        w = int(w_arr[0])
        size = parent_size * w
        if table.shape[0] < size:
            raise FormatError(f"{where}: crd has {table.shape[0]} buckets, needs {size}")
        used = table[:size].astype(np.int64)
        full = np.flatnonzero(used >= 0)
        if np.any(used < -1) or (full.size and used[full].max() >= dim):
            raise FormatError(f"{where}: bucket holds a coordinate outside [0, {dim}) (or < -1)")
        if full.size and not np.array_equal(_probe(used, full // w, used[full], w), full):
            raise FormatError(f"{where}: a coordinate is not where linear probing finds it "
                              "(or is stored twice)")
        return size

    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        seg = parent_pos.astype(np.int64)
        crd = crd.astype(np.int64)
        w = _bucket_count(np.bincount(seg, minlength=parent_size))
        check_fill("a hashed level", parent_size * w, crd.shape[0])
        table = np.full(parent_size * w, -1, dtype=np.int64)
        slot = np.full(crd.shape[0], -1, dtype=np.int64)
        live = np.arange(crd.shape[0])
        offset = crd % w
        while live.size:  # each round, the first claimant of a free bucket takes it
            b = seg[live] * w + offset[live]
            free = table[b] < 0
            _, first = np.unique(b, return_index=True)
            win = np.zeros(live.size, dtype=bool)
            win[first] = True
            win &= free
            table[b[win]] = crd[live[win]]
            slot[live[win]] = b[win]
            live = live[~win]
            offset[live] = (offset[live] + 1) % w
        return Packed({"W": np.array([w], dtype=itype), "crd": table.astype(itype)}, slot,
                      parent_size * w)

    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = int(arrays["W"][0])
        parent_pos = parent_pos.astype(np.int64)
        buckets = (parent_pos[:, None] * w + np.arange(w)[None, :]).reshape(-1)
        parent_index = np.repeat(np.arange(parent_pos.shape[0], dtype=np.int64), w)
        crd = arrays["crd"][buckets].astype(np.int64)
        keep = crd >= 0
        return buckets[keep], parent_index[keep], crd[keep]
