"""Merge lattices (Kjolstad et al. 2017; Chou et al. 2018 §4.2).

A lattice point is the set of *sparse iterators* — levels that must be walked
because they cannot locate — present at a coordinate. Everything the loop can
treat as present everywhere (dense levels, which are located; tensors not
indexed by the variable; literals) is implicit: the empty point stands for
"only those", and its presence means the loop must visit the full range of
the variable. Multiplication takes products of points (intersection),
addition adds the operands' own points (union). Because full levels are never
iterated, TACO's rules "iterate only one full level" and "prune points that
lack a full iterator" hold by construction.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..notation.ast import Access, Add, Call, Coordinate, Div, Expr, IndexVar, Literal, Mul, Neg, Sub
from ..notation.functions import absent_value, is_zero


@dataclass(frozen=True)
class Iter:
    """Position iteration over level ``level`` (0-based, storage order) of ``access``."""

    access: Access
    level: int
    var: IndexVar

    def sort_key(self) -> tuple:
        return (self.access.tensor, tuple(v.name for v in self.access.indices), self.level)


Point = frozenset  # frozenset[Iter]


def _product(a: list[Point], b: list[Point]) -> list[Point]:
    return [p | q for p in a for q in b]


def _union(a: list[Point], b: list[Point]) -> list[Point]:
    """Points of a sum: where both are, where only one is."""
    return _product(a, b) + a + b


def _build(e: Expr, iter_of: Callable[[Access], Iter | None]) -> list[Point]:
    if isinstance(e, Access):
        it = iter_of(e)
        return [frozenset({it})] if it is not None else [frozenset()]
    if isinstance(e, (Literal, Coordinate)):
        return [frozenset()]
    if isinstance(e, Neg):
        return _build(e.operand, iter_of)
    if isinstance(e, Mul):
        return _product(_build(e.a, iter_of), _build(e.b, iter_of))
    if isinstance(e, Div):
        # a dense denominator never restricts iteration (0 / x is taken as 0, as TACO does);
        # a sparse one divides by zero where it is absent (IEEE: inf or NaN), everywhere
        denominator = _build(e.b, iter_of)
        if denominator == [frozenset()]:
            return _build(e.a, iter_of)
        return _union(_build(e.a, iter_of), denominator) + [frozenset()]
    if isinstance(e, (Add, Sub)):
        return _union(_build(e.a, iter_of), _build(e.b, iter_of))
    if isinstance(e, Call):
        # nonzero where any argument is, and everywhere when its value at zeros is not zero
        args = [_build(arg, iter_of) for arg in e.args]
        points = args[0]
        for more in args[1:]:
            points = _union(points, more)
        return points if is_zero(absent_value(e)) else points + [frozenset()]
    raise TypeError(f"cannot build a lattice for {type(e).__name__}")


@dataclass(frozen=True)
class Lattice:
    points: tuple[Point, ...]  # top point first; every point before its sub-points

    @property
    def iterators(self) -> list[Iter]:
        return sparse_iters(self.points[0])

    @property
    def full_range(self) -> bool:
        """Whether some case involves no sparse iterator, so every coordinate must be visited."""
        return frozenset() in self.points

    def sub_points(self, p: Point) -> list[Point]:
        """Points dominated by ``p`` (``p`` included), most specific first."""
        return [q for q in self.points if q <= p]


def sparse_iters(p: Point) -> list[Iter]:
    """The iterators of a point in a deterministic order."""
    return sorted(p, key=Iter.sort_key)


def locate_where_possible(lattice: Lattice, locatable: Callable[[Iter], bool]) -> Lattice:
    """Drop iterators whose level can locate from every point where another, non-locatable
    iterator is walked anyway (an intersection): they are located instead of co-iterated.

    A locatable iterator stays in the lattice when some point has nothing else to walk
    (a union, or it is the only sparse operand), since locating there would visit the
    whole range of the variable.
    """
    points = lattice.points
    located = {
        it for it in lattice.iterators if locatable(it)
        and all(any(not locatable(o) for o in p) for p in points if it in p)
    }
    if not located:
        return lattice
    out: list[Point] = []
    for p in points:
        q = frozenset(p - located)
        if q not in out:
            out.append(q)
    out.sort(key=len, reverse=True)
    return Lattice(tuple(out))


def build_lattice(e: Expr, iter_of: Callable[[Access], Iter | None]) -> Lattice:
    """Merge lattice of ``e`` for one index variable.

    ``iter_of(access)`` returns the iterator of the access's level for this
    variable when that level must be walked, else None.
    """
    points: list[Point] = []
    for p in _build(e, iter_of):
        if p not in points:
            points.append(p)
    points.sort(key=len, reverse=True)
    return Lattice(tuple(points))
