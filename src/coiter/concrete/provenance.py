"""The provenance graph: relations between original and derived index variables.

Schedules never rewrite data structures; they derive new loop variables from old
ones and record how (Senanayake et al., OOPSLA 2020, §3). Lowering walks these
relations to bound the derived loops, recover the original coordinates that
tensors are indexed by, and guard iterations that fall outside the tensor.

===========  ===================  =============================================
relation     TACO command         recovery (parent from children)
===========  ===================  =============================================
Split        split(i,i0,i1,b)     i = lo + i0*b + i1 (inner loop has b steps)
Divide       divide(i,i0,i1,n)    i = lo + i0*ceil(R/n) + i1 (n outer steps)
Fuse         fuse(i,j,f)          i = f / |j|, j = f % |j| (coordinate space)
Pos          pos(i,p,A(..i..))    i = A's coordinate at position p
Coord        coord(p,i)           the position of A holding coordinate i
Bound        bound(i,ib,b,kind)   i = ib, with a promise about i's extent
Precomputed  precompute(e,i,iw,w) i = iw in the loop computing the workspace
Solved       I(i+k) (an equation) i = t - k: computed from the loops it needs
===========  ===================  =============================================

``lo`` and ``R`` are the start and length of the parent's range: 0 and the
dimension for coordinates, a segment of positions for position variables.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ..notation.ast import Access, IndexVar
from .stmt import Relation

BOUND_KINDS = ("MinExact", "MinConstraint", "MaxExact", "MaxConstraint")


@dataclass(frozen=True)
class Split(Relation):
    """``parent = outer * block + inner``: strip-mining with a fixed inner size.

    ``layout`` marks the splits a blocked format makes (its levels are indexed by the
    derived variables themselves); schedule splits leave accesses on the parent."""

    parent: IndexVar
    outer: IndexVar
    inner: IndexVar
    block: int
    layout: bool = False

    def derived(self) -> tuple[IndexVar, ...]:
        return (self.outer, self.inner)

    def parents(self) -> tuple[IndexVar, ...]:
        return (self.parent,)

    def __str__(self) -> str:
        return f"split({self.parent}, {self.outer}, {self.inner}, {self.block})"


@dataclass(frozen=True)
class Divide(Relation):
    """``parent = outer * ceil(R / parts) + inner``: a fixed number of outer pieces."""

    parent: IndexVar
    outer: IndexVar
    inner: IndexVar
    parts: int

    def derived(self) -> tuple[IndexVar, ...]:
        return (self.outer, self.inner)

    def parents(self) -> tuple[IndexVar, ...]:
        return (self.parent,)

    def __str__(self) -> str:
        return f"divide({self.parent}, {self.outer}, {self.inner}, {self.parts})"


@dataclass(frozen=True)
class Fuse(Relation):
    """``fused`` walks the pairs ``(outer, inner)`` in nested order."""

    outer: IndexVar
    inner: IndexVar
    fused: IndexVar

    def derived(self) -> tuple[IndexVar, ...]:
        return (self.fused,)

    def parents(self) -> tuple[IndexVar, ...]:
        return (self.outer, self.inner)

    def __str__(self) -> str:
        return f"fuse({self.outer}, {self.inner}, {self.fused})"


@dataclass(frozen=True)
class Pos(Relation):
    """``pos`` walks the positions of ``access`` that ``var`` (coordinates) walked."""

    var: IndexVar
    pos: IndexVar
    access: Access

    def derived(self) -> tuple[IndexVar, ...]:
        return (self.pos,)

    def parents(self) -> tuple[IndexVar, ...]:
        return (self.var,)

    def __str__(self) -> str:
        return f"pos({self.var}, {self.pos}, {self.access})"


@dataclass(frozen=True)
class Coord(Relation):
    """``coord`` walks again the coordinates that position variable ``pos`` stands for."""

    pos: IndexVar
    coord: IndexVar

    def derived(self) -> tuple[IndexVar, ...]:
        return (self.coord,)

    def parents(self) -> tuple[IndexVar, ...]:
        return (self.pos,)

    def __str__(self) -> str:
        return f"coord({self.pos}, {self.coord})"


@dataclass(frozen=True)
class Bound(Relation):
    """``bounded`` walks ``var`` under a promise about its extent, checked at run time:
    MaxExact (extent == value, the loop gets a constant bound), MaxConstraint
    (extent <= value), MinExact / MinConstraint (extent == / >= value)."""

    var: IndexVar
    bounded: IndexVar
    value: int
    kind: str

    def derived(self) -> tuple[IndexVar, ...]:
        return (self.bounded,)

    def parents(self) -> tuple[IndexVar, ...]:
        return (self.var,)

    def __str__(self) -> str:
        return f"bound({self.var}, {self.bounded}, {self.value}, {self.kind})"


@dataclass(frozen=True)
class Precomputed(Relation):
    """``copy`` walks the values of the derived variable ``var`` again, in the producer
    loop of a precomputed workspace."""

    var: IndexVar
    copy: IndexVar

    def derived(self) -> tuple[IndexVar, ...]:
        return (self.copy,)

    def parents(self) -> tuple[IndexVar, ...]:
        return (self.var,)

    def __str__(self) -> str:
        return f"precomputed({self.var}, {self.copy})"


@dataclass(frozen=True)
class Solved(Relation):
    """``var = (sum(c * v for c, v in terms) + const) / divisor``: a variable of an index
    equation (a compound subscript, :mod:`coiter.notation.affine`) that no loop walks;
    lowering computes it once its ``loops`` are bound and guards that it lies in its
    range (and divides evenly). ``checked``: the range was proven before the call, so a
    guard is needed only for the division. ``driver``: the compound subscript's own
    variable when a loop walks it in place of ``var`` (``k = t - i`` walks ``t``), None
    when ``var`` is that variable (``t = i + k``). It creates no loops, so it is not an
    edge of the provenance DAG."""

    var: IndexVar
    terms: tuple[tuple[int, IndexVar], ...]
    const: int = 0
    divisor: int = 1
    checked: bool = False
    driver: IndexVar | None = None
    subscript: Any = None  # the compound subscript (an Affine) ``driver`` stands for
    # the loop over ``driver`` walks a window placed by the other loops, which come first
    windowed: bool = False
    # a diagonal's (A(i,i) read as A(i,i0)), or a window's walked by a loop other operands
    # share (B(i(2,6)) * C(i)): ``var`` is the offset i0 - i (t - i - 2), which no operand
    # reads, in a window of one coordinate; ``loops`` are the two variables, one in value
    diagonal: bool = False

    @property
    def loops(self) -> tuple[IndexVar, ...]:
        return tuple(v for _, v in self.terms)

    def derived(self) -> tuple[IndexVar, ...]:
        return ()

    def parents(self) -> tuple[IndexVar, ...]:
        return ()

    def __str__(self) -> str:
        num = " + ".join(f"{c}*{v}" for c, v in self.terms) + (f" + {self.const}" if self.const else "")
        return f"{self.var} = ({num})" + (f" / {self.divisor}" if self.divisor != 1 else "")


class Provenance:
    """Queries over a set of relations (the provenance DAG)."""

    def __init__(self, relations: Iterable[Relation]) -> None:
        self.relations = tuple(relations)
        self._defining: dict[IndexVar, Relation] = {}
        self._using: dict[IndexVar, Relation] = {}
        for r in self.relations:
            for v in r.derived():
                self._defining[v] = r
            for v in r.parents():
                self._using[v] = r

    def defining(self, v: IndexVar) -> Relation | None:
        """The relation that created ``v`` (None for an original variable)."""
        return self._defining.get(v)

    def using(self, v: IndexVar) -> Relation | None:
        """The relation that replaced ``v`` by derived variables (None if none did)."""
        return self._using.get(v)

    def underived(self, v: IndexVar) -> tuple[IndexVar, ...]:
        """The original variables ``v`` derives from, outermost first."""
        r = self.defining(v)
        if r is None:
            return (v,)
        if isinstance(r, Coord):
            return self.underived(r.pos)
        out: list[IndexVar] = []
        for p in r.parents():
            out += [u for u in self.underived(p) if u not in out]
        return tuple(out)

    def pos_relation(self, v: IndexVar) -> Pos | None:
        """The ``pos`` relation ``v`` is a position (or a piece of positions) of."""
        r = self.defining(v)
        while r is not None:
            if isinstance(r, Pos):
                return r
            if isinstance(r, (Coord, Fuse)):
                return None
            r = self.defining(r.parents()[0])
        return None

    def is_position(self, v: IndexVar) -> bool:
        """Whether ``v`` lives in some operand's position space."""
        return self.pos_relation(v) is not None

    def leaves(self, v: IndexVar) -> tuple[IndexVar, ...]:
        """The fully derived variables (loops) that ``v`` has become."""
        r = self.using(v)
        if r is None:
            return (v,)
        out: list[IndexVar] = []
        for d in r.derived():
            out += [x for x in self.leaves(d) if x not in out]
        return tuple(out)
