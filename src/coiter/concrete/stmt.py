"""Concrete index notation (Kjolstad, ch. 4): the IR that schedules rewrite and lowering consumes.

Statements fix the order of computation (``Forall``) and where temporaries live
(``Where``); ``Sequence`` and ``Multi`` compose statements. The ``Env`` holds
relations between derived index variables (the provenance graph), bounds and
tags; lowering consults it to recover original coordinates.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

from ..formats.format import Format
from ..notation.ast import Access, Expr, IndexVar


class Stmt:
    """Base of concrete statements."""


@dataclass(frozen=True)
class Assign(Stmt):
    lhs: Access
    rhs: Expr
    accumulate: bool = False

    def __str__(self) -> str:
        return f"{self.lhs} {'+=' if self.accumulate else '='} {self.rhs}"


PARALLEL_UNITS = ("NotParallel", "CPUThread", "CPUVector", "GPUBlock", "GPUWarp", "GPUThread")
RACE_STRATEGIES = ("IgnoreRaces", "NoRaces", "Atomics", "Temporary", "ParallelReduction")


@dataclass(frozen=True)
class Forall(Stmt):
    """``forall(var, body)``, tagged by the schedule with how the loop runs: its parallel
    unit and output race strategy, OpenMP chunking (``"static"``, ``"dynamic,16"``; empty
    for the default), an unroll factor (0: none) and how it merges sparse operands whose
    coordinates must all match (``"TwoFinger"``: step by one; ``"Gallop"``: the lagging
    ones jump ahead by exponential search, TACO's ``mergeby``)."""

    var: IndexVar
    body: Stmt
    unit: str = "NotParallel"
    race: str = "IgnoreRaces"
    chunking: str = ""
    unroll: int = 0
    merge: str = "TwoFinger"

    def __str__(self) -> str:
        tags = ""
        if self.unit != "NotParallel":
            tags += f", {self.unit}, {self.race}" + (f", {self.chunking}" if self.chunking else "")
        if self.unroll:
            tags += f", unroll {self.unroll}"
        if self.merge != "TwoFinger":
            tags += f", {self.merge}"
        return f"forall({self.var}, {self.body}{tags})"


@dataclass(frozen=True)
class Where(Stmt):
    """``consumer where producer``: the producer computes temporaries the consumer reads."""

    consumer: Stmt
    producer: Stmt

    def __str__(self) -> str:
        return f"where({self.consumer}, {self.producer})"


@dataclass(frozen=True)
class Sequence(Stmt):
    define: Stmt
    mutate: Stmt

    def __str__(self) -> str:
        return f"sequence({self.define}, {self.mutate})"


@dataclass(frozen=True)
class Multi(Stmt):
    left: Stmt
    right: Stmt

    def __str__(self) -> str:
        return f"multi({self.left}, {self.right})"


class Relation(ABC):
    """Base of provenance-graph edges between index variables (split, fuse, pos...)."""

    @abstractmethod
    def derived(self) -> tuple[IndexVar, ...]:
        """Index variables this relation creates."""

    @abstractmethod
    def parents(self) -> tuple[IndexVar, ...]:
        """Index variables this relation derives from."""


@dataclass(frozen=True)
class Env:
    """Environment of concrete notation: the provenance relations of derived variables."""

    relations: tuple[Relation, ...] = ()

    def __str__(self) -> str:
        return ", ".join(str(r) for r in self.relations)


@dataclass(frozen=True)
class TensorDecl:
    """A tensor the program touches: operand, result, scalar temporary or workspace."""

    name: str
    format: Format
    dtype: np.dtype
    role: str  # "input" | "result" | "temp" | "workspace"
    # for temporaries and workspaces: index variables whose extents size each mode
    modes: tuple[IndexVar, ...] = ()
    # an operand the compiler re-stores in another format (automatic transposition)
    converted_from: str | None = None
    # result only: an operand whose first ``pattern_levels`` levels are the result's (a
    # factor of the whole right-hand side, every other operand dense, dense result levels
    # below): the kernel writes the result at that operand's positions and the result
    # shares those levels' arrays instead of assembling them
    pattern_of: str | None = None
    pattern_levels: int = 0
    # sparse workspaces only: the insert-sort-merge policy (coiter.formats.workspaces)
    policy: str | None = None
    # scalar temporaries only: the operator their producer reduces with (coiter.notation.reducers)
    reducer: str = "sum"
    # operands and sparse results: the value of the entries the format does not store
    fill: Any = 0

    @property
    def order(self) -> int:
        return self.format.order


@dataclass(frozen=True)
class ConcreteProgram:
    """A concrete statement plus the declarations and environment lowering needs."""

    stmt: Stmt
    tensors: Mapping[str, TensorDecl] = field(hash=False)
    result: str
    env: Env = Env()
    # set when the result is computed densely and converted to this format afterwards
    result_conversion: Format | None = None
    # the scheduling commands applied so far, in order (replayed for other value types)
    commands: tuple[Any, ...] = ()

    def __str__(self) -> str:
        text = str(self.stmt)
        return f"{text} : {self.env}" if str(self.env) else text

    def __repr__(self) -> str:
        # what the REPL shows for kernel.concrete: the notation, not every field's dataclass repr
        return f"<ConcreteProgram {self}>"

    # -- the scheduling language, chained: ``prog.split(i, i0, i1, 16).reorder(...)`` ------
    def _apply(self, name: str, *args: Any) -> ConcreteProgram:
        from .commands import Command
        from .schedule import apply

        return apply(self, Command.make(name, args))

    def reorder(self, *vars: Any) -> ConcreteProgram:
        """Loops of ``vars`` (nested along one path) in this order."""
        return self._apply("reorder", *vars)

    def split(self, i: Any, outer: Any, inner: Any, factor: int) -> ConcreteProgram:
        """``i`` into ``outer`` and an inner loop of ``factor`` steps."""
        return self._apply("split", i, outer, inner, factor)

    def divide(self, i: Any, outer: Any, inner: Any, parts: int) -> ConcreteProgram:
        """``i`` into ``parts`` outer steps and an inner loop over each part."""
        return self._apply("divide", i, outer, inner, parts)

    def fuse(self, i: Any, j: Any, f: Any) -> ConcreteProgram:
        """Directly nested ``i`` and ``j`` into one loop ``f``."""
        return self._apply("fuse", i, j, f)

    def pos(self, i: Any, p: Any, access: Any) -> ConcreteProgram:
        """Loop ``i`` over the positions of ``access`` instead of coordinates."""
        return self._apply("pos", i, p, access)

    def coord(self, p: Any, i: Any) -> ConcreteProgram:
        """Position loop ``p`` back into coordinate space as ``i``."""
        return self._apply("coord", p, i)

    def precompute(self, expr: Any, i: Any, iw: Any, workspace: Any, format: str = "") -> ConcreteProgram:
        """``expr`` into a dense ``workspace`` over ``iw`` (the range of ``i``). Where coiter
        already computes ``expr`` into a workspace for a scattered result (SpGEMM's row),
        that workspace takes the name and, when given, the ``format``: ``"dense"`` or an
        insert-sort-merge policy (``"coord"``, ``"bucket"``, ``"hash"``)."""
        return self._apply("precompute", expr, i, iw, workspace, format)

    def bound(self, i: Any, ib: Any, value: int, kind: str) -> ConcreteProgram:
        """Loop ``ib`` over ``i`` with a promise about ``i``'s extent (checked at run time)."""
        return self._apply("bound", i, ib, value, kind)

    def unroll(self, i: Any, factor: int) -> ConcreteProgram:
        """Ask the C compiler to unroll loop ``i`` by ``factor``."""
        return self._apply("unroll", i, factor)

    def mergeby(self, i: Any, strategy: str) -> ConcreteProgram:
        """How loop ``i`` merges sparse operands that must all hold a coordinate (an
        intersection): ``"TwoFinger"`` steps each by one, ``"Gallop"`` lets the lagging ones
        jump to the leader's coordinate by exponential search (fast when one operand is
        much sparser than the other)."""
        return self._apply("mergeby", i, strategy)

    def parallelize(self, i: Any, unit: str, race: str, chunking: str = "") -> ConcreteProgram:
        """Run loop ``i`` on ``unit`` (CPUThread, CPUVector...) handling output races with
        ``race``; ``chunking`` picks OpenMP's ``static`` or ``dynamic[,n]`` schedule."""
        return self._apply("parallelize", i, unit, race, chunking)


def walk_stmts(s: Stmt) -> Iterator[Stmt]:
    """Pre-order traversal of statements."""
    yield s
    if isinstance(s, Forall):
        yield from walk_stmts(s.body)
    elif isinstance(s, Where):
        yield from walk_stmts(s.consumer)
        yield from walk_stmts(s.producer)
    elif isinstance(s, Sequence):
        yield from walk_stmts(s.define)
        yield from walk_stmts(s.mutate)
    elif isinstance(s, Multi):
        yield from walk_stmts(s.left)
        yield from walk_stmts(s.right)
