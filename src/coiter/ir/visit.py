"""Read-only traversals of the imperative IR: the statements, names, declarations and
writes of a statement tree (used by back ends that must analyse code before printing it)."""
from __future__ import annotations

from collections.abc import Iterator

from .nodes import (
    Assign, Bin, Block, Call, Cast, Decl, ExprStmt, For, If, IRExpr, IRStmt, Load, Max, Min, Pragma,
    Region, Return, Select, Un, Var, While,
)


def children(s: IRStmt) -> tuple[IRStmt, ...]:
    """The statements directly nested in ``s``."""
    if isinstance(s, Block):
        return s.stmts
    if isinstance(s, (For, While)):
        return (s.body,)
    if isinstance(s, If):
        return (s.then,) if s.otherwise is None else (s.then, s.otherwise)
    if isinstance(s, Pragma):
        return (s.stmt,)
    return ()


def walk(s: IRStmt) -> Iterator[IRStmt]:
    """``s`` and every statement nested in it, outermost first."""
    yield s
    for c in children(s):
        yield from walk(c)


def walk_regions(s: IRStmt) -> Iterator[IRStmt]:
    """Like :func:`walk`, descending into the bodies of parallel regions too."""
    for x in walk(s):
        yield x
        if isinstance(x, Region):
            yield from walk_regions(x.body)


def subexprs(e: IRExpr) -> Iterator[IRExpr]:
    """``e`` and every expression inside it."""
    yield e
    if isinstance(e, Load):
        yield from subexprs(e.index)
    elif isinstance(e, Bin):
        yield from subexprs(e.a)
        yield from subexprs(e.b)
    elif isinstance(e, (Un, Cast)):
        yield from subexprs(e.a)
    elif isinstance(e, (Min, Max, Call)):
        for a in e.args:
            yield from subexprs(a)
    elif isinstance(e, Select):
        for a in (e.cond, e.a, e.b):
            yield from subexprs(a)


def exprs(s: IRStmt) -> tuple[IRExpr, ...]:
    """The expressions of ``s`` itself (not of nested statements)."""
    if isinstance(s, Decl):
        return () if s.init is None else (s.init,)
    if isinstance(s, Assign):
        return (s.target, s.value)
    if isinstance(s, ExprStmt):
        return (s.expr,)
    if isinstance(s, Return):
        return (s.value,)
    if isinstance(s, For):
        return (s.end,) if s.start is None else (s.start, s.end)
    if isinstance(s, (While, If)):
        return (s.cond,)
    return ()


def names(e: IRExpr) -> set[str]:
    """Variables and arrays that ``e`` reads."""
    out: set[str] = set()
    for x in subexprs(e):
        if isinstance(x, Var):
            out.add(x.name)
        elif isinstance(x, Load):
            out.add(x.array)
    return out


def used(s: IRStmt, regions: bool = False) -> set[str]:
    """Variables and arrays that the statements of ``s`` mention (inside parallel regions
    too where ``regions``)."""
    return {n for x in (walk_regions if regions else walk)(s) for e in exprs(x) for n in names(e)}


def declared(s: IRStmt, regions: bool = False) -> set[str]:
    """Names that ``s`` declares (declarations, local arrays by their name without their
    size, and loop variables; inside parallel regions too where ``regions``)."""
    out: set[str] = set()
    for x in (walk_regions if regions else walk)(s):
        if isinstance(x, Decl):
            out.add(x.name.split("[")[0])
        elif isinstance(x, For) and x.start is not None:
            out.add(x.var)
    return out


def assigned(s: IRStmt) -> set[str]:
    """Variables that ``s`` assigns after their declaration (loop variables included)."""
    out: set[str] = set()
    for x in walk(s):
        if isinstance(x, Assign) and isinstance(x.target, Var):
            out.add(x.target.name)
        elif isinstance(x, For):
            out.add(x.var)
    return out


def substitute(e: IRExpr, m: dict[str, IRExpr]) -> IRExpr:
    """``e`` with the variables named in ``m`` replaced by their expressions."""
    if isinstance(e, Var):
        return m.get(e.name, e)
    if isinstance(e, Load):
        return Load(e.array, substitute(e.index, m))
    if isinstance(e, Bin):
        return Bin(e.op, substitute(e.a, m), substitute(e.b, m))
    if isinstance(e, Un):
        return Un(e.op, substitute(e.a, m))
    if isinstance(e, Cast):
        return Cast(e.ctype, substitute(e.a, m))
    if isinstance(e, (Min, Max)):
        return type(e)(tuple(substitute(a, m) for a in e.args))
    if isinstance(e, Call):
        return Call(e.fn, tuple(substitute(a, m) for a in e.args))
    if isinstance(e, Select):
        return Select(substitute(e.cond, m), substitute(e.a, m), substitute(e.b, m))
    return e
