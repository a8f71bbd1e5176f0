"""Parallel loops whose iterations sum into shared result entries, without OpenMP array
reductions where those copy the whole result onto a stack.

``#pragma omp simd reduction(+: A_vals[:size])`` gives every SIMD lane a private copy of the
whole result on the stack (a segfault for any sizeable result). When every write of the
result in the loop goes to one entry that the loop does not move (TTM's ``A(i,j,l) +=`` inside
a vectorized loop over ``k``), the lanes sum into a scalar instead and the entry is updated
once after the loop. A thread loop's array reduction puts one copy on each thread's stack, so
it is kept for small results only; larger ones update the result atomically.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..ir.nodes import (
    Assign, Block, Const, Decl, For, If, IRExpr, IRStmt, Load, Pragma, Var, While,
)
from ..ir.visit import declared, exprs, names, walk


def scalar_accumulation(loop: For, vals: str, vtype: str, acc: str) -> Block | None:
    """``loop`` summing into the scalar ``acc`` (of C type ``vtype``) under a simd reduction,
    followed by one update of the entry of ``vals`` it writes; None when its writes of
    ``vals`` are not all ``vals[idx] += ...`` to one ``idx`` fixed during the loop, or when
    it reads ``vals``."""
    writes = [s for s in walk(loop.body) if isinstance(s, Assign)
              and isinstance(s.target, Load) and s.target.array == vals]
    if not writes or any(s.op != "+=" or s.target != writes[0].target for s in writes):
        return None
    target = writes[0].target
    varying = declared(loop.body) | {loop.var}
    if names(target.index) & varying:
        return None
    reads = [e for s in walk(loop.body) for e in _read_exprs(s)]
    if any(vals in names(e) for e in reads):
        return None
    body = _block(_map(loop.body, lambda x: Assign(Var(acc), x.value, x.op) if x in writes else x))
    if any(isinstance(x, Assign) and x.target == target for x in walk(body)):
        return None  # a write under a pragma (already atomic) stays one
    summed = replace(loop, body=body, pragma=f"omp simd reduction(+: {acc})")
    return Block((Decl(vtype, acc, Const(0)), summed, Assign(target, Var(acc), "+=")))


def atomic_updates(s: IRStmt, vals: str) -> IRStmt | None:
    """``s`` with every ``vals[idx] += e`` made atomic; None when ``s`` also assigns ``vals``
    otherwise (which no atomic update expresses)."""
    writes = [x for x in walk(s) if isinstance(x, Assign)
              and isinstance(x.target, Load) and x.target.array == vals]
    if any(w.op != "+=" for w in writes):
        return None
    return _map(s, lambda x: Pragma("omp atomic", x) if x in writes else x)


def _read_exprs(s: IRStmt) -> tuple[IRExpr, ...]:
    """What ``s`` itself reads (an assignment's target index, not the target)."""
    if isinstance(s, Assign):
        return (s.value, s.target.index) if isinstance(s.target, Load) else (s.value,)
    return exprs(s)


def _map(s: IRStmt, f: Callable[[Assign], IRStmt]) -> IRStmt:
    """``s`` with every assignment ``a`` in it replaced by ``f(a)`` (not under pragmas)."""
    if isinstance(s, Assign):
        return f(s)
    if isinstance(s, Block):
        return replace(s, stmts=tuple(_map(x, f) for x in s.stmts))
    if isinstance(s, (For, While)):
        return replace(s, body=_block(_map(s.body, f)))
    if isinstance(s, If):
        other = None if s.otherwise is None else _map(s.otherwise, f)
        return replace(s, then=_block(_map(s.then, f)), otherwise=other)
    return s  # a Pragma's statement (an atomic update) is left as it is


def _block(s: IRStmt) -> Block:
    return s if isinstance(s, Block) else Block((s,))
