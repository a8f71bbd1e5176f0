"""Rewriting the loops of an imperative IR statement tree (the passes that follow lowering:
prefetches, partial sums)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .nodes import Block, Decl, For, If, IRStmt, Pragma, Region, While

# a loop and the types of the variables declared around it -> its rewrite, or None to
# rewrite the loops inside it instead
LoopRewrite = Callable[[For, dict[str, str]], IRStmt | None]


def map_loops(s: IRStmt, rewrite: LoopRewrite, scope: dict[str, str] | None = None) -> IRStmt:
    """``s`` with every outermost loop ``rewrite`` accepts replaced by its rewrite, and the
    loops inside the others searched, through blocks, branches, while loops, parallel regions
    and pragmas. A loop right after a pragma whose rewrite is no longer a loop is rewritten
    inside only: the pragma must stay right before its loop. ``scope`` maps the variables
    declared around ``s`` to their types."""
    scope = {} if scope is None else scope
    if isinstance(s, Block):
        inner = dict(scope)
        out: list[IRStmt] = []
        for x in s.stmts:
            out.append(map_loops(x, rewrite, inner))
            if isinstance(x, Decl):
                inner[x.name] = x.ctype
        return replace(s, stmts=tuple(out))
    if isinstance(s, For):
        new = rewrite(s, scope)
        return new if new is not None else replace(s, body=map_loops(s.body, rewrite, scope))
    if isinstance(s, While):
        return replace(s, body=map_loops(s.body, rewrite, scope))
    if isinstance(s, If):
        other = None if s.otherwise is None else map_loops(s.otherwise, rewrite, scope)
        return replace(s, then=map_loops(s.then, rewrite, scope), otherwise=other)
    if isinstance(s, Region):
        return replace(s, body=map_loops(s.body, rewrite, scope))
    if isinstance(s, Pragma):
        new = map_loops(s.stmt, rewrite, scope)
        if isinstance(s.stmt, For) and not isinstance(new, For):
            new = replace(s.stmt, body=map_loops(s.stmt.body, rewrite, scope))
        return replace(s, stmt=new)
    return s
