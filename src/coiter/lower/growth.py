"""Growth of appended result arrays without zero-filling the arrays nobody reads.

``coiter_grow`` zero-fills the new tail of a grown array, so that arrays which are
accumulated into (a ``pos`` taking row lengths with ``+=``, values summed in place) behave
as if calloc'ed. Coordinate and value arrays that are only ever assigned do not need it,
and the fill costs more than it seems: doubling touches every page of the new half, which
the kernel may never use (SpGEMM on cit-HepPh: 30,000 page faults per call).
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.nodes import (
    Assign, Bin, Block, Call, Cast, For, If, IRExpr, IRStmt, Load, Pragma, Region, Un, Var, While,
)
from ..ir.visit import exprs, subexprs, walk_regions

GROW = "coiter_grow"
EXPAND = "coiter_expand"  # realloc for growth (the C preamble's), without the fill
# calls that take an array's address without reading its elements (memcpy: its destination)
_NO_READ = {GROW: 1, EXPAND: 1, "realloc": 1, "free": 1, "memcpy": 1}


def drop_unread_zero_fill(body: Block, written: set[str]) -> Block:
    """``body`` with ``coiter_grow(x, old, new, elt)`` turned into ``coiter_expand(x, new * elt)``
    for every array ``x`` of ``written`` (arrays whose every entry up to the count is
    assigned when it is appended) that no statement of ``body`` reads."""
    read = _read_arrays(body) | (set(_all_grown(body)) - written)

    def fix(s: IRStmt) -> IRStmt:
        if isinstance(s, Assign):
            return replace(s, value=_plain_realloc(s.value, read))
        if isinstance(s, Block):
            return replace(s, stmts=tuple(fix(x) for x in s.stmts))
        if isinstance(s, (For, While, Region)):
            return replace(s, body=fix(s.body))
        if isinstance(s, If):
            return replace(s, then=fix(s.then), otherwise=None if s.otherwise is None else fix(s.otherwise))
        if isinstance(s, Pragma):
            return replace(s, stmt=fix(s.stmt))
        return s

    return fix(body)


def _plain_realloc(e: IRExpr, read: set[str]) -> IRExpr:
    """``e`` (``(T*)coiter_grow(x, ...)``) with the call replaced when ``x`` is unread."""
    for sub in subexprs(e):
        if isinstance(sub, Call) and sub.fn == GROW and isinstance(sub.args[0], Var) \
                and sub.args[0].name not in read:
            x, _, new, elt = sub.args
            plain = Call(EXPAND, (x, Bin("*", new, elt)))
            return _swap(e, sub, plain)
    return e


def _swap(e: IRExpr, old: IRExpr, new: IRExpr) -> IRExpr:
    """``e`` with its subexpression ``old`` (under casts) replaced by ``new``."""
    if e is old:
        return new
    if isinstance(e, (Cast, Un)):
        return replace(e, a=_swap(e.a, old, new))
    return e


def _read_arrays(body: Block) -> set[str]:
    """Arrays whose elements some statement reads, or whose address escapes into a call
    that may read them (every call but the allocation ones and memcpy's destination)."""
    out: set[str] = set()
    for s in walk_regions(body):
        for n, e in enumerate(exprs(s)):
            writes = isinstance(s, Assign) and n == 0
            for sub in subexprs(e):
                if isinstance(sub, Load) and not (writes and sub is e and s.op == "="):
                    out.add(sub.array)
                elif isinstance(sub, Call):
                    free = _NO_READ.get(sub.fn, 0)
                    for a in sub.args[free:]:
                        out.update(x.name for x in subexprs(a) if isinstance(x, Var))
    return out


def _all_grown(body: Block):
    """Names of the arrays that ``coiter_grow`` calls in ``body`` grow."""
    for s in walk_regions(body):
        for e in exprs(s):
            for sub in subexprs(e):
                if isinstance(sub, Call) and sub.fn == GROW and isinstance(sub.args[0], Var):
                    yield sub.args[0].name
