"""Make implicit summation explicit: insert ``Reduction`` nodes into an assignment.

An index variable used on the right-hand side but not in the result is summed
(einsum/TACO semantics). The sum is placed at the innermost sub-expression that
contains every use of the variable, so ``y(i) = A(i,j)*x(j) + z(i)`` becomes
``y(i) = sum(j, A(i,j)*x(j)) + z(i)`` rather than summing ``z(i)`` too. An intrinsic
function is never entered: ``sum(j, sqrt(A(i,j)))``.
"""
from __future__ import annotations

from dataclasses import replace

from coiter.notation.ast import (
    Access,
    Affine,
    Assignment,
    Call,
    Coordinate,
    Expr,
    IndexSet,
    IndexVar,
    Reduction,
    Subscript,
    Window,
    children,
    index_vars_of,
    map_accesses,
    walk,
    with_children,
)

__all__ = ["distinct_reductions", "insert_reductions", "reduction_vars"]


def reduction_vars(a: Assignment) -> list[IndexVar]:
    """The index variables summed over in ``a``, in order of first appearance.

    These are the variables of the right-hand side that the result does not
    have, whether or not their ``Reduction`` nodes have been inserted yet.
    """
    result = set(a.lhs.index_vars)
    return [v for v in index_vars_of(a.rhs) if v not in result]


def insert_reductions(a: Assignment) -> Assignment:
    """Return ``a`` with a ``Reduction`` for every summed variable at its innermost scope.

    Variables whose innermost scope is the same node nest in order of first
    appearance, the first outermost. Variables already bound by a ``Reduction``
    in ``a`` are left as they are, so the function is idempotent.
    """
    result = set(a.lhs.index_vars)
    pending = [v for v in _free_vars_in_order(a.rhs) if v not in result]
    return Assignment(a.lhs, _place(a.rhs, pending), a.accumulate)


def _place(e: Expr, pending: list[IndexVar]) -> Expr:
    """Rewrite ``e``, all of whose free uses of ``pending`` lie inside it.

    A variable is summed here when ``e`` is a leaf or when its uses are split
    across several children; otherwise it is handed down to the one child that
    uses it.
    """
    kids = children(e)
    kid_vars = [_free_vars(k) for k in kids]
    # an intrinsic applies elementwise, then the sum: sum(j, sqrt(B(i,j))), never sqrt(sum)
    here = [v for v in pending if isinstance(e, Call) or sum(v in vs for vs in kid_vars) != 1]
    node = with_children(
        e, [_place(k, [v for v in pending if v in vs and v not in here]) for k, vs in zip(kids, kid_vars)]
    )
    for v in reversed(here):
        node = Reduction(v, node)
    return node


def _free_vars(e: Expr) -> set[IndexVar]:
    """Index variables used in ``e`` and not bound by a ``Reduction`` inside it."""
    if isinstance(e, Access):
        return set(e.index_vars)
    if isinstance(e, Coordinate):
        return {e.var}
    if isinstance(e, Reduction):
        return _free_vars(e.body) - {e.var}
    out: set[IndexVar] = set()
    for k in children(e):
        out |= _free_vars(k)
    return out


def _free_vars_in_order(e: Expr) -> list[IndexVar]:
    """The free index variables of ``e`` in order of first appearance."""
    free = _free_vars(e)
    return [v for v in index_vars_of(e) if v in free]


def distinct_reductions(a: Assignment) -> tuple[Assignment, dict[IndexVar, IndexVar]]:
    """``a`` with no two ``Reduction`` nodes binding one variable: a later one over a
    variable an earlier (or enclosing) one binds, as in ``min(j, A(i,j)) + min(j, B(i,j))``,
    binds a fresh variable in its body instead. Generated code declares a bound variable
    where its reduction runs, and two reductions over one name declared it twice in one
    scope (a C compilation error). Also returns each fresh variable's original."""
    taken = {v.name for v in index_vars_of(a.rhs)} | {v.name for v in a.lhs.index_vars}
    taken |= {e.var.name for e in walk(a.rhs) if isinstance(e, Reduction)}
    bound: set[IndexVar] = set()
    originals: dict[IndexVar, IndexVar] = {}

    def visit(e: Expr) -> Expr:
        if not isinstance(e, Reduction):
            return with_children(e, [visit(c) for c in children(e)])
        var, body = e.var, e.body
        if var in bound:
            k = 2
            while f"{var.name}_{k}" in taken:
                k += 1
            new = IndexVar(f"{var.name}_{k}")
            taken.add(new.name)
            originals[new] = originals.get(var, var)
            body, var = _renamed(body, var, new), new
        bound.add(var)
        return replace(e, var=var, body=visit(body))

    return Assignment(a.lhs, visit(a.rhs), a.accumulate), originals


def _renamed(e: Expr, old: IndexVar, new: IndexVar) -> Expr:
    """``e`` with index variable ``old`` replaced by ``new`` wherever it appears: subscripts
    (compound ones too), coordinates and the variables of reductions."""
    if isinstance(e, Reduction):
        return replace(e, var=new if e.var == old else e.var, body=_renamed(e.body, old, new))
    if isinstance(e, Coordinate):
        return Coordinate(new) if e.var == old else e
    if isinstance(e, Access):
        return map_accesses(e, lambda x: Access(
            x.tensor, tuple(_renamed_subscript(u, old, new) for u in x.indices), x.source))
    return with_children(e, [_renamed(c, old, new) for c in children(e)])


def _renamed_subscript(s: Subscript, old: IndexVar, new: IndexVar) -> Subscript:
    if isinstance(s, IndexVar):
        return new if s == old else s
    if isinstance(s, Affine):
        return Affine(tuple((c, new if v == old else v) for c, v in s.terms), s.const)
    if isinstance(s, (Window, IndexSet)):
        return replace(s, var=new) if s.var == old else s
    return s
