"""Merge lattices (Kjolstad et al. 2017; Chou et al. 2018 §4.2).

A lattice point is the set of *sparse iterators* — levels that must be walked
because they cannot locate — present at a coordinate. Everything the loop can
treat as present everywhere (dense levels, which are located; tensors not
indexed by the variable; literals) is implicit: the empty point stands for
"only those", and its presence means the loop must visit the full range of
the variable. Multiplication takes products of points (intersection),
addition adds the operands' own points (union). Each sub-expression also carries its
fill, the value it takes where none of its points is (a literal has no points and its
value as fill); a fill that absorbs the other operand (``x * 0``, ``x + inf``) drops the
points where only that operand is, and the empty point is added at the root when the
fill is not neutral for what the loop computes. Because full levels are never
iterated, TACO's rules "iterate only one full level" and "prune points that
lack a full iterator" hold by construction.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import ScheduleError
from ..notation.ast import (
    Access, Add, BinaryExpr, Call, Coordinate, Div, Expr, IndexVar, Literal, Mul, Neg, Reduction, Sub,
    accesses,
)
from ..notation.functions import ARITHMETIC, call_dtypes, computation_dtype, function
from ..notation.reducers import reducer


@dataclass(frozen=True)
class Iter:
    """Position iteration over level ``level`` (0-based, storage order) of ``access``.

    With ``slice`` (the relation solving a compound subscript's variable, a
    :class:`~coiter.concrete.provenance.Solved`) the iterator walks ``var`` over the
    offsets whose window of the level holds a stored coordinate (Liu et al.'s non-empty
    subsections) without resolving the level; the loop inside walks the window."""

    access: Access
    level: int
    var: IndexVar
    slice: Any = None

    def sort_key(self) -> tuple:
        return (self.access.tensor, tuple(v.name for v in self.access.indices), self.level,
                self.slice is not None)


Point = frozenset  # frozenset[Iter]

# A union of n sparse operands has 2**n points and 3**n cases: a sum of 32 sparse matrices
# ran out of memory building its lattice. Concretization takes the terms of a sum this
# large one at a time; any other expression whose lattice would pass this many points is a
# LatticeTooLarge (a ScheduleError naming it).
MAX_POINTS = 1024


class LatticeTooLarge(ScheduleError):
    """An expression whose merge lattice would have more than MAX_POINTS points."""


def _capped(points: list[Point]) -> list[Point]:
    """``points`` without repeats; LatticeTooLarge past MAX_POINTS."""
    out = list(dict.fromkeys(points))
    if len(out) > MAX_POINTS:
        raise LatticeTooLarge(f"more than {MAX_POINTS} merge lattice points")
    return out


def _summarized(points: list[Point]) -> list[Point]:
    """The empty point if ``points`` holds it and one other point if it holds one: all that
    a fill depends on (whether an operand has points, whether the empty one is among them)."""
    empty = [p for p in points if not p][:1]
    return empty + [p for p in points if p][:1]


def _product(a: list[Point], b: list[Point]) -> list[Point]:
    """The unions of a point of ``a`` and one of ``b``, without repeats; LatticeTooLarge as
    soon as there are more than MAX_POINTS (summarized operands have at most 2 points)."""
    out: dict[Point, None] = {}
    for p in a:
        for q in b:
            out[p | q] = None
            if len(out) > MAX_POINTS:
                raise LatticeTooLarge(f"more than {MAX_POINTS} merge lattice points")
    return list(out)


# A sub-expression's points (where it may differ from its fill) and its fill: the one value
# it takes wherever none of its points is, or None when it has no such constant (then the
# empty point is among its points: the loop covers every coordinate).
Node = tuple[list[Point], Any]


def _binary(op: Callable[[Any, Any], Any], a: Node, b: Node, absorbing: Callable[[Any, int], bool],
            shape: Callable[[list[Point]], list[Point]]) -> Node:
    """Points of ``op(a, b)``: where both operands are, and where one is unless the other's
    fill absorbs it (``absorbing(fill, side)``: ``op`` of anything with that fill on that
    side is one constant, as ``x * 0``). The fill is the value everywhere else: where
    neither operand is, and where an absorbed one is. ``shape`` keeps the points (without
    repeats, or only what a fill needs)."""
    (pa, fa), (pb, fb) = a, b
    a_absorbs = fa is not None and absorbing(fa, 0)
    b_absorbs = fb is not None and absorbing(fb, 1)
    points = shape(_product(pa, pb) + ([] if b_absorbs else pa) + ([] if a_absorbs else pb))
    values = []
    with np.errstate(all="ignore"):  # an absorbing fill makes the other side anything (1)
        if fa is not None and fb is not None:
            values.append(op(fa, fb))
        if b_absorbs and pa:
            values.append(op(np.float64(1), fb))
        if a_absorbs and pb:
            values.append(op(fa, np.float64(1)))
    if frozenset() in points:
        return points, None
    if not values or any(not _same(v, values[0]) for v in values):
        # the absorbed cases differ from where neither operand is (0/c vs 0/0): visit all
        return shape(_product(pa, pb) + pa + pb + [frozenset()]), None
    return points, values[0]


def _same(x: Any, y: Any) -> bool:
    return bool(x == y) or bool(x != x and y != y)


def _mul_absorbs(fill: Any, side: int) -> bool:
    return bool(fill == 0)


def _div_absorbs(fill: Any, side: int) -> bool:
    # 0 / x is taken as 0 (TACO's choice; a dense denominator never widens the iteration);
    # x / 0 is IEEE's inf or NaN, which depends on x
    return side == 0 and bool(fill == 0)


def _add_absorbs(fill: Any, side: int) -> bool:
    return bool(np.isinf(fill))


def _never(fill: Any, side: int) -> bool:
    return False


_CALL_ABSORBS: dict[str, Callable[[Any, int], bool]] = {
    # == rather than np.isposinf, which refuses the complex fills of complex operands
    "max": lambda fill, side: bool(fill == np.inf),
    "min": lambda fill, side: bool(fill == -np.inf),
    "and": lambda fill, side: not bool(fill),
    "or": lambda fill, side: bool(fill),
}

# which fills absorb each arithmetic node (its ufunc is functions.ARITHMETIC's)
_ABSORBS: dict[type, Callable[[Any, int], bool]] = {
    Mul: _mul_absorbs, Div: _div_absorbs, Add: _add_absorbs, Sub: _add_absorbs,
}


def _number(value: Any) -> Any:
    """``value`` for arithmetic: a bool as the int 0 or 1 (NumPy refuses to subtract or negate
    bools; kernels compute them in the result's number type)."""
    return np.int8(value) if isinstance(value, (bool, np.bool_)) else value


@dataclass(frozen=True)
class Typing:
    """The types kernels compute an expression in, for its fills to be the kernels' values:
    ``dtypes`` of its tensors, and ``context``, the type its arithmetic computes in (the
    result's: ``-b`` of a uint32 ``b`` in a float result is negative, not 2**32 - b).
    Intrinsics compute in their loop's type, ``any``/``all`` in their body's."""

    dtypes: Mapping[str, np.dtype]
    context: np.dtype


def _in(value: Any, dtype: np.dtype | None) -> Any:
    """``value`` converted to ``dtype`` as a kernel converts it (unchanged without one)."""
    if dtype is None:
        return value
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NaN to an integer: a kernel's conversion is as arbitrary
        return np.asarray(value).astype(dtype)[()]


def _literal(value: Any, dtype: np.dtype | None) -> Any:
    """A literal in the computation type ``dtype``, as kernels type it. One beyond the type
    stays as written: an integer beyond an integer type's range makes a comparison decided
    (as in NumPy 2), and one beyond a float's is refused by lowering (DTypeError)."""
    raw = np.asarray(value)[()]
    if dtype is None:
        return raw
    if dtype.kind in "iu" and isinstance(value, int) and not isinstance(value, bool):
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            return raw
    try:
        return _in(raw, dtype)
    except OverflowError:
        return raw


def _build(e: Expr, iter_of: Callable[[Access], Iter | None], fill_of: Callable[[Access], Any],
           typing: Typing | None = None, dtype: np.dtype | None = None,
           shape: Callable[[list[Point]], list[Point]] = _capped) -> Node:
    """``e``'s points (kept by ``shape``) and fill; with ``typing``, the fill computed in
    ``dtype`` (the context's type; its ``context`` at the root) as kernels compute it."""
    if typing is not None and dtype is None:
        dtype = np.dtype(typing.context)
    if isinstance(e, Access):
        it = iter_of(e)
        return ([frozenset({it})], _in(np.asarray(fill_of(e))[()], dtype)) if it is not None \
            else ([frozenset()], None)
    if isinstance(e, Literal):
        return [], _literal(e.value, dtype)
    if isinstance(e, Coordinate):
        return [frozenset()], None
    if isinstance(e, Neg):
        points, fill = _build(e.operand, iter_of, fill_of, typing, dtype, shape)
        with np.errstate(all="ignore"):  # unsigned fills wrap, as kernels' values do
            return points, None if fill is None else _in(-_number(fill), dtype)
    if isinstance(e, Reduction):
        logical = reducer(e.op).logical
        body = computation_dtype(e.body, typing.dtypes, np.dtype(np.float64)) \
            if typing is not None and logical else dtype
        points, fill = _build(e.body, iter_of, fill_of, typing, body, shape)
        fill = None if fill is None else reduced_fill(e.op, fill)
        return points, None if fill is None else _in(fill, dtype)
    if isinstance(e, BinaryExpr):
        op = ARITHMETIC[type(e)]
        return _binary(lambda x, y: _in(op(_number(x), _number(y)), dtype),
                       _build(e.a, iter_of, fill_of, typing, dtype, shape),
                       _build(e.b, iter_of, fill_of, typing, dtype, shape), _ABSORBS[type(e)], shape)
    if isinstance(e, Call):  # where any argument is, unless a fill absorbs (max with inf)
        f = function(e.fn)
        loop = None if typing is None else call_dtypes(e, typing.dtypes)[0]
        args = [_build(arg, iter_of, fill_of, typing, loop, shape) for arg in e.args]
        if len(args) == 2:
            return _binary(lambda x, y: _in(f(x, y), dtype), args[0], args[1],
                           _CALL_ABSORBS.get(e.fn, _never), shape)
        points, fill = args[0]
        if fill is None:
            return points, None
        with np.errstate(all="ignore"):
            return points, _in(f(fill), dtype)
    raise TypeError(f"cannot build a lattice for {type(e).__name__}")


def expression_fill(e: Expr, sparse: Callable[[Access], bool], fill_of: Callable[[Access], Any],
                    typing: Typing | None = None) -> Any:
    """The value ``e`` takes where none of its ``sparse`` operands stores an entry (their
    absent entries read as ``fill_of``), by the rules loops follow (absorbing fills, reduced
    fills), computed in ``typing``'s types (else in NumPy's for the fills); None when it has
    none (a dense operand's values, a sum of nonzero fills)."""
    return _build(e, lambda a: a if sparse(a) else None, fill_of, typing,  # type: ignore[arg-type, return-value]
                  shape=_summarized)[1]


def reduced_fill(op: str, fill: Any) -> Any:
    """The value of reducing ``fill`` over a loop of unknown length by ``op``; None when
    that depends on the length (a sum of nonzeros)."""
    r = reducer(op)
    if r.idempotent:
        return np.asarray(bool(fill) if r.logical else fill)[()]
    identity = r.neutral
    if fill == identity or (op == "prod" and fill == 0):
        return fill
    return None


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


def _zero_fill(a: Access) -> Any:
    return 0


def build_lattice(e: Expr, iter_of: Callable[[Access], Iter | None],
                  fill_of: Callable[[Access], Any] = _zero_fill, neutral: Any = 0,
                  typing: Typing | None = None) -> Lattice:
    """Merge lattice of ``e`` for one index variable.

    ``iter_of(access)`` returns the iterator of the access's level for this
    variable when that level must be walked, else None; ``fill_of(access)`` is the value
    of its absent entries. Coordinates where ``e`` takes its fill need no visit when that
    fill is ``neutral`` (the result's fill, or the identity of the reduction the loop
    computes); otherwise the lattice holds the empty point and covers every coordinate.
    With ``typing``, fills are computed in the types the loop computes ``e`` in.
    """
    try:
        points, fill = _build(e, iter_of, fill_of, typing)
    except LatticeTooLarge:
        text = str(e)
        text = text if len(text) <= 200 else text[:197] + "..."
        raise LatticeTooLarge(f"merging the sparse operands of {text} over one index variable would take "
                              f"more than {MAX_POINTS} lattice points (a union of n sparse operands "
                              "has 2**n); compute it in parts") from None
    if fill is None or not bool(fill == neutral):
        points = points + [frozenset()]
    if not points:  # neutral everywhere (B * 0): walk the intersection, where nothing is done
        points = [frozenset(it for a in accesses(e) if (it := iter_of(a)) is not None)]
    out: list[Point] = []
    for p in points:
        if p not in out:
            out.append(p)
    out.sort(key=len, reverse=True)
    return Lattice(tuple(out))
