"""Concrete index notation (Kjolstad, ch. 4): the IR that schedules rewrite and lowering consumes.

Statements fix the order of computation (``Forall``) and where temporaries live
(``Where``); ``Sequence`` and ``Multi`` compose statements. The ``Env`` holds
relations between derived index variables (the provenance graph), bounds and
tags; lowering consults it to recover original coordinates.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Iterator, Mapping

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


@dataclass(frozen=True)
class Forall(Stmt):
    var: IndexVar
    body: Stmt

    def __str__(self) -> str:
        return f"forall({self.var}, {self.body})"


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
    """Environment of concrete notation: provenance relations, bounds and tags."""

    relations: tuple[Relation, ...] = ()
    bounds: tuple[tuple[IndexVar, int], ...] = ()
    tags: tuple[tuple[IndexVar, str], ...] = ()

    def is_derived(self, v: IndexVar) -> bool:
        return any(v in r.derived() for r in self.relations)

    def __str__(self) -> str:
        parts = [str(r) for r in self.relations]
        parts += [f"bound({v}, {b})" for v, b in self.bounds]
        parts += [f"{tag}({v})" for v, tag in self.tags]
        return ", ".join(parts)


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

    def __str__(self) -> str:
        text = str(self.stmt)
        return f"{text} : {self.env}" if str(self.env) else text


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
