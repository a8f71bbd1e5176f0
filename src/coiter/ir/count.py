"""Instrumentation that counts loop iterations: a kernel's work, observable by tests that
check its complexity (doubling a tensor's shape with the same entries must not change it)."""
from __future__ import annotations

from dataclasses import replace

from .nodes import Assign, Block, Const, For, Function, If, IRStmt, Pragma, Region, Var, While

COUNTER = "coiter_iterations"
# the counter and its reader (which also resets it), emitted beside the kernel
SUPPORT = (f"static int64_t {COUNTER};\n"
           f"int64_t coiter_iteration_count(void) {{ int64_t n = {COUNTER}; {COUNTER} = 0; return n; }}")


def counted(fn: Function) -> Function:
    """``fn`` with every loop body starting by adding one to the counter (a plain global:
    counts of loops run by several threads at once are approximate). Loops that only store
    zeros (a result slice zeroed before it is computed) count as allocation, as the zeroing
    of a result allocated zeroed does, not as the kernel's work."""
    return replace(fn, body=_counted(fn.body))


def _zero_fill(s: For) -> bool:
    return (len(s.body.stmts) == 1 and isinstance(s.body.stmts[0], Assign)
            and isinstance(s.body.stmts[0].value, Const) and s.body.stmts[0].value.value == 0)


def _counted(s: IRStmt) -> IRStmt:
    if isinstance(s, Block):
        return replace(s, stmts=tuple(_counted(x) for x in s.stmts))
    if isinstance(s, For) and _zero_fill(s):
        return s
    if isinstance(s, (For, While)):
        body = Block((Assign(Var(COUNTER), Const(1), "+="), *_counted(s.body).stmts))
        return replace(s, body=body)
    if isinstance(s, If):
        return replace(s, then=_counted(s.then),
                       otherwise=None if s.otherwise is None else _counted(s.otherwise))
    if isinstance(s, (Pragma,)):
        return replace(s, stmt=_counted(s.stmt))
    if isinstance(s, Region):
        return replace(s, body=_counted(s.body))
    return s
