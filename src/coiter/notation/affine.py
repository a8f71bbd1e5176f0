"""Compound (affine) subscripts: ``O(i) = I(i+k) * F(k)``.

The compiler's stages below notation index every tensor mode by one variable. This
module rewrites each compound subscript into a fresh variable plus an index equation
(``I(i+k)`` becomes ``I(t)`` with ``t = i+k``); concretize then decides which variable
of each equation is computed from the loops over the others (Liu et al., OOPSLA 2024,
"index variable reduction"), and lowering computes it with guards that keep it inside
its mode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ArgumentError
from .ast import (
    Access,
    Add,
    Affine,
    Assignment,
    Coordinate,
    Div,
    Expr,
    IndexSet,
    IndexVar,
    Literal,
    Mul,
    Neg,
    Reduction,
    Sub,
    Subscript,
    Window,
    affine,
    children,
    index_vars_of,
    map_accesses,
)

__all__ = ["Equation", "trivialize", "as_subscript", "subscript_range", "padding_refusal"]


@dataclass(frozen=True)
class Equation:
    """``var = subscript``: ``var`` is the coordinate of a mode read through ``subscript``
    (``where`` names it for messages, e.g. ``I(i+k)``)."""

    var: IndexVar
    subscript: Affine
    where: str
    # a repeated subscript's (``A(i,i)``: ``i0 = i``): a fresh variable of extent 1 that a
    # sparse level walked at one of the two reads its window through (``i0 - i``, in [0, 1))
    offset: IndexVar | None = None
    # a window's (``B(i(1,7,2))``: ``t = 2*i + 1``): the window, which sizes its variable,
    # and a fresh variable of extent 1 through which a sparse level that another operand's
    # loop over ``i`` co-iterates walks its stored coordinates in the window (``t = 2*i + 1
    # + i_win``, a one-wide filter of the convolution machinery)
    window: Window | None = None
    window_offset: IndexVar | None = None

    def __str__(self) -> str:
        return f"{self.var} = {self.subscript}"

    @property
    def diagonal(self) -> IndexVar | None:
        """The variable a repeated subscript repeats (``A(i,i)`` reads mode 2 at ``i``)."""
        return self.subscript.terms[0][1] if self.offset is not None else None


def trivialize(a: Assignment) -> tuple[Assignment, tuple[Equation, ...]]:
    """``a`` with every compound subscript replaced by a fresh variable, and the equations
    defining those variables. Equal subscripts share one variable (``A(i+j) * B(i+j)``
    co-iterates both operands on it). Call after reductions are explicit: the fresh
    variables are neither summed nor results."""
    taken = {v.name for v in index_vars_of(a.rhs)} | {v.name for v in a.lhs.index_vars}
    # the result's compound subscripts (a transposed convolution's O(2*x+r)) scatter: its
    # variables are results too, summed by no Reduction
    # equal compound subscripts share a variable; a window is one tensor's (another tensor's
    # mode through the same window may have another size)
    fresh: dict[Affine | tuple[Window, str], IndexVar] = {}
    equations: list[Equation] = []

    def unused(base: str) -> IndexVar:
        n, candidate = 0, base
        while candidate in taken:
            candidate, n = f"{base}{n}", n + 1
        taken.add(candidate)
        return IndexVar(candidate)

    def name(sub: Affine | Window, access: Access, diagonal: bool = False) -> IndexVar:
        # a window or a diagonal is solved against its operand's storage order, so each
        # operand gets its own variable: T0(i,i) * T1(i,i) with T0 stored column first
        key = (sub, access.tensor) if isinstance(sub, Window) or diagonal else sub
        if key not in fresh:
            # i+k is read through "ik" (ik0, ik1... when taken)
            var = fresh[key] = unused("".join(v.name for v in sub.vars))
            if isinstance(sub, Window):
                equations.append(Equation(var, Affine(((sub.step, sub.var),), sub.lo), str(access),
                                          window=sub, window_offset=unused(f"{sub.var.name}_win")))
            else:
                offset = unused(f"{sub.vars[0].name}_off") if diagonal else None
                equations.append(Equation(var, sub, str(access), offset))
        return fresh[key]

    def plain(x: Access) -> Access:
        if all(isinstance(s, IndexVar) for s in x.indices) and len(set(x.indices)) == len(x.indices):
            return x
        seen: set[IndexVar] = set()
        subs = []
        for s in x.indices:
            if isinstance(s, IndexVar) and s in seen:
                # a repeated variable (a diagonal, A(i,i)): the mode is read at a fresh
                # variable equal to it (an equation of one unit term, not in normal form)
                subs.append(name(Affine(((1, s),), 0), x, diagonal=True))
                continue
            if isinstance(s, IndexVar):
                seen.add(s)
            subs.append(s if isinstance(s, IndexVar) else name(s, x))
        return Access(x.tensor, tuple(subs), x.source)

    windows = [str(s) for s in a.lhs.indices if isinstance(s, Window)]
    if windows:
        raise ArgumentError(f"the result {a.lhs} has the window {windows[0]}: coiter computes new "
                            "results, which have no other coordinates; window the operands")
    repeated = sorted({v.name for v in a.lhs.indices if a.lhs.indices.count(v) > 1})
    if repeated:
        raise ArgumentError(f"the result {a.lhs} repeats index {', '.join(repeated)}: a result "
                            "cannot be written on its diagonal; write the diagonal to a vector")
    rhs = map_accesses(a.rhs, plain)
    return Assignment(plain(a.lhs), rhs, a.accumulate), tuple(equations)


def subscript_range(sub: Affine, extents: Mapping[IndexVar, int]) -> tuple[int, int]:
    """The least and greatest value ``sub`` takes over its variables' extents."""
    lo = hi = sub.const
    for c, v in sub.terms:
        top = c * (extents[v] - 1)
        lo, hi = lo + min(0, top), hi + max(0, top)
    return lo, hi


def as_subscript(x: Any) -> Subscript | None:
    """The subscript a DSL index stands for (``i``, ``i + k``, ``2*i + k - 1``, a window
    ``i[1:7:2]``), or None when ``x`` is not an affine sum of index variables and integers."""
    if isinstance(x, (IndexVar, Window, IndexSet)):
        return x
    if not isinstance(x, Expr):
        return None
    form = _linear(x)
    if form is None:
        return None
    terms, const = form
    try:
        return affine(((c, v) for v, c in terms.items()), const)
    except ValueError:
        return None


def _linear(e: Expr) -> tuple[dict[IndexVar, int], int] | None:
    """``e`` as ``({var: coef}, const)`` when it is affine with integer coefficients."""
    if isinstance(e, Coordinate):
        return {e.var: 1}, 0
    if isinstance(e, Literal):
        value = e.value
        return ({}, value) if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(e, Neg):
        inner = _linear(e.operand)
        return None if inner is None else ({v: -c for v, c in inner[0].items()}, -inner[1])
    if isinstance(e, (Add, Sub, Mul)):
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        if isinstance(e, Mul):
            if a[0] and b[0]:
                return None  # i * k is not affine
            (terms, const), k = (a, b[1]) if a[0] else (b, a[1])
            return {v: c * k for v, c in terms.items()}, const * k
        sign = 1 if isinstance(e, Add) else -1
        terms = dict(a[0])
        for v, c in b[0].items():
            terms[v] = terms.get(v, 0) + sign * c
        return terms, a[1] + sign * b[1]
    return None



def padding_refusal(a: Assignment) -> str | None:
    """Why ``a`` (reductions explicit) cannot read outside its operands, or None.

    Lowering skips the terms whose compound subscript leaves its mode. That is zero padding
    where the read is a factor of the product a sum adds up (a convolution) or the whole
    body of a min or max (pooling, where the outside never counts, as in torch); skipping a
    read that is added to other terms would drop them too, so those are refused. The term
    a subscript belongs to is the body of the innermost reduction over one of its variables
    (the whole right-hand side when there is none)."""

    def visit(e: Expr, scopes: tuple[Reduction | None, ...]) -> str | None:
        if isinstance(e, Access):
            for sub in e.indices:
                if isinstance(sub, Affine):
                    owner = next((r for r in reversed(scopes) if r is not None
                                  and r.var in sub.vars), None)
                    body = a.rhs if owner is None else owner.body
                    if not _factor(e, body, owner.op if owner is not None else "sum"):
                        return (f"{e} may read outside {e.tensor} (padding=True), where it would "
                                "be skipped, but it is not a factor of the product a sum adds up "
                                "nor the whole body of a min or max")
            return None
        inner = scopes + ((e,) if isinstance(e, Reduction) else ())
        for c in children(e):
            why = visit(c, inner)
            if why is not None:
                return why
        return None

    return visit(a.rhs, (None,))


def _factor(x: Access, body: Expr, op: str) -> bool:
    """Whether ``x`` is skipped exactly where ``body`` would be zero (a sum's term) or the
    reduction's identity (the whole body of min/max)."""
    if op in ("min", "max"):  # the read itself, maybe under more reductions of the same op
        return body is x or (isinstance(body, Reduction) and body.op == op
                             and _factor(x, body.body, op))
    if op != "sum":
        return False
    if body is x:
        return True
    if isinstance(body, Neg):
        return _factor(x, body.operand, op)
    if isinstance(body, Mul):
        return _factor(x, body.a, op) or _factor(x, body.b, op)
    if isinstance(body, Div):
        return _factor(x, body.a, op)
    if isinstance(body, Reduction) and body.op == "sum":
        return _factor(x, body.body, op)
    return False
