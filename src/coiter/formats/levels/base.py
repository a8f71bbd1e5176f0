"""The level interface: what code generation may ask of one level of a format.

A level format is a plugin. It declares its *properties* (full, ordered, unique,
branchless, compact) and *capabilities* (coordinate-position iteration, locate,
insert, append) and emits IR for its level functions (Chou et al., OOPSLA 2018,
Table 1). Lowering never names a level type; it only consults this interface.

Each level also carries the NumPy-side functions that validate, pack and unpack
its arrays, so adding a level format means adding one file here.

Array-naming convention (TACO's): level ``k`` (1-based, storage order) of tensor
``B`` owns arrays ``B{k}_{name}`` (``B2_pos``, ``B2_crd``) and the dimension
``B{k}_dimension``; values live in ``B_vals``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import FormatError
from ...ir.nodes import Bin, Const, IRExpr, IRStmt, Select, Var, add

# Padded storage (DIA, ELL, hash tables) keeps every slot of its rectangle. Past this many
# slots per nonzero (plus an allowance for small inputs) packing refuses rather than
# exhaust memory.
MAX_FILL = 50
FILL_ALLOWANCE = 10_000_000


def check_fill(name: str, slots: int, nnz: int) -> None:
    """Raise FormatError when padded storage would hold far more slots than entries."""
    if slots > MAX_FILL * nnz + FILL_ALLOWANCE:
        raise FormatError(
            f"{name} would store {slots} slots for {nnz} nonzeros; the matrix is too irregular "
            "for this format (store it as CSR or COO)")


@dataclass(frozen=True)
class LevelNames:
    """C names of one level's arrays and dimension."""

    tensor: str
    k: int  # 1-based storage level

    def array(self, name: str) -> str:
        return f"{self.tensor}{self.k}_{name}"

    def sibling(self, delta: int) -> LevelNames:
        """Names of the level ``delta`` levels below (positive) or above (negative) this one.

        Levels that share arrays (DIA's offset level reads the range level's ``offset``)
        reach them through this.
        """
        return LevelNames(self.tensor, self.k + delta)

    @property
    def dimension(self) -> Var:
        return Var(f"{self.tensor}{self.k}_dimension")


@dataclass(frozen=True)
class ParentPos:
    """Where a level's parent stands: one position, or a run ``[lo, hi)`` of duplicates."""

    lo: IRExpr
    hi: IRExpr | None = None  # set when the parent level is non-unique
    may_fail: bool = False  # located by a level whose locate can miss (lo < 0 then)

    @property
    def end(self) -> IRExpr:
        """One past the last parent position: ``hi``, or ``lo + 1`` for a single position."""
        return self.hi if self.hi is not None else add(self.lo, Const(1))

    def or_zero(self, x: IRExpr) -> IRExpr:
        """``x`` where the parent's locate found its entry, 0 where it missed (``lo < 0``):
        an absent entry's value, or the bounds of an empty segment under it."""
        return Select(Bin(">=", self.lo, Const(0)), x, Const(0)) if self.may_fail else x


@dataclass(frozen=True)
class Packed:
    """Result of packing one level from sorted coordinates."""

    arrays: dict[str, np.ndarray]
    child_pos: np.ndarray  # position of every entry in this level
    size: int  # number of positions in this level


@dataclass(frozen=True)
class Level(ABC):
    """One level format, possibly configured (ordered/unique)."""

    ordered: bool = True
    unique: bool = True

    # --- identity -------------------------------------------------------------------------
    kind: ClassVar[str] = "abstract"
    letter: ClassVar[str] = "?"  # TACO format-string letter for the default configuration
    arrays: ClassVar[tuple[str, ...]] = ()  # names of the index arrays this level stores

    # --- properties -----------------------------------------------------------------------
    full: ClassVar[bool] = False
    branchless: ClassVar[bool] = False
    compact: ClassVar[bool] = True

    # --- capabilities ---------------------------------------------------------------------
    has_locate: ClassVar[bool] = False
    has_pos_iter: ClassVar[bool] = False
    # coordinate value iteration: the iterator walks coordinates, ``pos_bounds`` bounds
    # them and ``child_position`` maps one to its position (Range)
    has_coord_iter: ClassVar[bool] = False
    has_insert: ClassVar[bool] = False
    has_append: ClassVar[bool] = False
    # locate may report "not found" (a negative position): reads of values guard on it
    locate_may_fail: ClassVar[bool] = False

    def format_letter(self) -> str:
        """Letter in TACO's format strings for this configuration."""
        return self.letter

    def __str__(self) -> str:
        flags = []
        if not self.ordered:
            flags.append("unordered")
        if not self.unique:
            flags.append("nonunique")
        return self.kind + (f"({', '.join(flags)})" if flags else "")

    def with_extent(self, extent: int) -> Level | None:
        """This level with its dimension fixed to ``extent`` at compile time, so kernels
        specialised on it use a constant (None: the level has no such form)."""
        return None

    # --- iteration (IR) ----------------------------------------------------------------------
    def dimension(self, names: LevelNames) -> IRExpr:
        """The extent of this level's coordinate in generated code (a constant when the
        format fixes it, else the run-time dimension parameter)."""
        return names.dimension

    # ``ancestors`` are the coordinates of the levels above, outermost first: range and
    # offset levels compute bounds and coordinates from them (the paper's i_1..i_{k-1}).
    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        """Iterator range ``[begin, end)`` under ``parent``: positions (position iteration)
        or coordinates (coordinate value iteration)."""
        raise TypeError(f"{self.kind} levels have no position iteration")

    def range_bounds(self, names: LevelNames, lo: IRExpr, hi: IRExpr) -> tuple[IRExpr, IRExpr] | None:
        """Positions ``[begin, end)`` of all children of the parent positions ``[lo, hi)``,
        when they are one contiguous run in parent order (None: they are not, or the level
        does not say). Lets a loop walk several levels' positions at once when their outer
        coordinates are not needed."""
        return None

    def pos_access(
        self, names: LevelNames, p: IRExpr, ancestors: tuple[IRExpr, ...] = ()
    ) -> IRExpr:
        """Coordinate at iterator value ``p``."""
        raise TypeError(f"{self.kind} levels have no position iteration")

    def pos_found(self, names: LevelNames, p: IRExpr) -> IRExpr | None:
        """Condition that iterator value ``p`` encodes a coordinate (None: always)."""
        return None

    def locate(self, names: LevelNames, parent: IRExpr, coord: IRExpr) -> IRExpr:
        """Position of coordinate ``coord`` under parent position ``parent``
        (negative when absent, for levels with ``locate_may_fail``)."""
        raise TypeError(f"{self.kind} levels have no locate")

    def child_position(self, names: LevelNames, p: IRExpr, coord: IRExpr, parent: IRExpr) -> IRExpr:
        """Position that children and values use for iterator value ``p`` (usually ``p``)."""
        return p

    def array_lengths(
        self, names: LevelNames, parent_size: IRExpr
    ) -> tuple[dict[str, IRExpr], IRExpr] | None:
        """Element count of each of this level's arrays in generated code, and its number of
        positions, given its parent's (None: unknown here, so back ends that copy arrays,
        such as CUDA's, refuse the level)."""
        return None

    def iter_init(self, names: LevelNames) -> list[IRStmt]:
        """Statements run before position iteration starts (e.g. sorting an unordered list)."""
        return []

    def insert_coord(self, names: LevelNames, p: IRExpr, coord: IRExpr) -> list[IRStmt]:
        """Statements recording an insert at located position ``p``."""
        return []

    # --- assembly (IR) -----------------------------------------------------------------------
    # Append levels store ``position_arrays`` (one entry per position of this level)
    # and ``parent_arrays`` (one entry per parent position, plus one).
    position_arrays: ClassVar[tuple[str, ...]] = ()
    parent_arrays: ClassVar[tuple[str, ...]] = ()

    def append_coord(self, names: LevelNames, p: IRExpr, coord: IRExpr) -> list[IRStmt]:
        raise TypeError(f"{self.kind} levels cannot append")

    def append_edges(
        self, names: LevelNames, parent: IRExpr, begin: IRExpr, end: IRExpr
    ) -> list[IRStmt]:
        return []

    def append_finalize(self, names: LevelNames, parent_size: IRExpr) -> list[IRStmt]:
        return []

    # --- NumPy side ------------------------------------------------------------------------
    @abstractmethod
    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        """Number of positions in this level."""

    @abstractmethod
    def validate(
        self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str
    ) -> int:
        """Check the arrays' invariants (raising FormatError naming ``where``); return size."""

    @abstractmethod
    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        """Build this level from entries sorted lexicographically by coordinate path.

        ``parent_pos[e]`` is entry ``e``'s position in the parent level and
        ``crd[e]`` its coordinate in this level.
        """

    @abstractmethod
    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Expand parent positions into ``(child_pos, parent_index, crd)``.

        ``parent_index[c]`` says which entry of ``parent_pos`` child ``c`` came from.
        """
