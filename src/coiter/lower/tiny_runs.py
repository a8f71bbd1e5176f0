"""Rows of one or two positions summed eight at a time.

Where an operand's runs hold one or two positions on average (a knowledge graph's fibers,
TTV's 3- and 4-tensors, OpenStreetMap graphs' rows), the row loop's cost is its branches: the
exit of each row's loop mispredicts wherever run lengths vary, and the :mod:`.short_runs`
helper still tests each run's length and adds its four lanes one after another. A loop
over rows whose body is only that sum, stored into the row's own result value::

    for (e = s; e < E; e++) {
      double t = 0.0;
      for (p = pos[e]; p < pos[e+1]; p++) t += vals[p] * x[crd[p]];
      R[e] = t;
    }

is instead one call of ``coiter_rows_dot_i32``/``_i64`` (C prelude; ``coiter_rows_dotf_*``
where the values are float), which takes eight rows at once, a row per vector lane: step ``j``
adds the product at position ``pos[e] + j`` of every row still that long into that row's lane
(values and coordinates picked by a permute from the group's positions, loaded once where they
are at most 16, else gathered; ``x`` gathered). Where gathers are slow (AMD Zen,
``COITER_FAST_GATHER`` 0), ``x`` is read by scalar loads instead, and the products of a group
of at most 32 positions are computed once and picked by permutes (a group of more takes the
row loop). The group's branch is taken once per step, not once per row. Each lane adds its
row's products one by one from ``0.0`` in position order, as the loop does, so results are bit
for bit those of the loop. A parallel row loop becomes a loop over its schedule's chunks of
rows (rounded up to whole groups), one call each; the helper is out of line, so that it is
compiled once for both.

:mod:`.sums` versions a statement on the operand's average run length (a flag computed
before the loops): below :data:`TINY_AVERAGE` the statement takes this form, tested before
the short-run version. In a C harness on the suite's operands (1 thread, ms, row loop ->
:mod:`.short_runs` helper -> eight rows at once): TTV wn18rr's fibers (1.41 a fiber) 0.29 ->
0.21 -> 0.16, gen-powerlaw3 (1.21) 1.19 -> 1.38 -> 0.72, collegemsg-day (1.67) 0.126 ->
0.061 -> 0.041, SpMV luxembourg_osm (2.09) 0.47 -> 0.39 -> 0.27; from ~2.3 (the road
networks, 2.3-2.8) the group's longest row sets its steps and the short-run helper is as
fast or faster (docs/performance.md, "Rows of one or two entries"; with scalar loads, "Slow
gathers, tiny runs").
"""
from __future__ import annotations

import re
from fractions import Fraction
from typing import TypeGuard

from ..ir.nodes import (
    Assign, Bin, Block, Call, Comment, Const, Decl, ExprStmt, For, IRExpr, IRStmt, Load, Min, Var,
    add, ceil_div, conj, fresh, mul, sub,
)
from ..ir.visit import exprs, subexprs, used, walk
from .gathers import FAR_BYTES
from .short_runs import VALUE_SUFFIX, helper_name, product

# positions per run, on average, below which rows are summed eight at a time
TINY_AVERAGE = Fraction(9, 4)
HELPER = "coiter_rows_dot"  # C prelude, suffixed with the value type and index width
GROUP = 8  # rows the helper takes at once (the lanes of a 512-bit register)
UNCHUNKED_ROWS = 1024  # rows per call of a parallel loop whose schedule names no chunk size
_CHUNK = re.compile(r"schedule\((\w+), (\w+)\)")  # an OpenMP schedule with a chunk size


class TinyRunRows:
    """The rewrite of a row loop (serial or parallel) whose body sums one run of a pos
    array into a scalar and stores it into the row's result value, into a call of
    ``coiter_rows_dot`` (a parallel loop: a call per group of :data:`GROUP` rows), and the
    condition under which a rewritten statement may run: every gathered vector near (below
    ``coiter_far_bytes()``; a far one keeps the loop, which prefetches it, as the helper
    does not). ``inputs`` and ``results`` map the kernel's read-only and written array
    parameters to their element types, ``dense_bytes`` dense arrays to their size in bytes."""

    def __init__(self, inputs: dict[str, str], results: dict[str, str],
                 dense_bytes: dict[str, IRExpr]) -> None:
        self.inputs = inputs
        self.results = results
        self.dense_bytes = dense_bytes

    def __call__(self, f: For, scope: dict[str, str]) -> IRStmt | None:
        row = None if f.unroll or f.unit or f.start is None \
            else _row_sum(f, scope, self.inputs, self.results)
        if row is None or row[-1] not in self.dense_bytes:
            return None
        result, pos, vals, crd, x = row
        helper = helper_name(HELPER, self.inputs[vals], self.inputs[crd])
        arrays: tuple[IRExpr, ...] = (Var(result), Var(pos), Var(crd), Var(vals), Var(x))
        if not f.pragma:
            return ExprStmt(Call(helper, (*arrays, f.start, f.end)))
        # a call per chunk of the schedule's rows (rounded up to whole groups), each chunk an
        # iteration: the helper is out of line (compiled once), and a call per group of eight
        # rows cost TTV 10 to 25%
        match = _CHUNK.search(f.pragma)
        if match is None:
            rows: IRExpr = Const(UNCHUNKED_ROWS)
            pragma = f.pragma
        else:
            rows = Const(-(-int(match[2]) // GROUP) * GROUP) if match[2].isdigit() else \
                mul(Bin("/", add(Var(match[2]), Const(GROUP - 1)), Const(GROUP)), Const(GROUP))
            pragma = _CHUNK.sub(r"schedule(\1, 1)", f.pragma)
        chunk = fresh(f"{f.var}_chunk", used(f))
        first = add(f.start, mul(Var(chunk), rows))
        call = Call(helper, (*arrays, first, Min((add(first, rows), f.end))))
        return For(chunk, f.ctype, Const(0), ceil_div(sub(f.end, f.start), rows),
                   Block((ExprStmt(call),)), pragma)

    def near(self, s: IRStmt) -> IRExpr:
        """That every vector the helper calls in ``s`` gather is below coiter_far_bytes()."""
        gathered = dict.fromkeys(e.args[4].name for x in walk(s) for top in exprs(x)
                                 for e in subexprs(top)
                                 if isinstance(e, Call) and e.fn.startswith(HELPER)
                                 and isinstance(e.args[4], Var))
        return conj([Bin("<", self.dense_bytes[x], Call(FAR_BYTES, ())) for x in gathered])


def _row_sum(f: For, scope: dict[str, str], inputs: dict[str, str], results: dict[str, str],
             ) -> tuple[str, str, str, str, str] | None:
    """``(R, pos, vals, crd, x)`` when ``f``'s body is ``T t = 0.0; for (p = pos[e]; p <
    pos[e+1]; p++) t += vals[p] * x[crd[p]]; R[e] = t;`` with ``T`` double or float (as
    ``R``, ``vals`` and ``x``) and ``pos`` of ``crd``'s index type. Comments, declarations
    nothing reads and zero stores into ``R[e]`` (which the last store overwrites) may come
    first."""
    e = Var(f.var)
    stmts = [s for s in f.body.stmts if not isinstance(s, Comment)]
    if len(stmts) < 3:
        return None
    *head, total, inner, store = stmts
    if not (isinstance(total, Decl) and total.ctype in VALUE_SUFFIX and total.init == Const(0)
            and isinstance(inner, For) and isinstance(inner.start, Load)
            and inner.start.index == e and inner.end == Load(inner.start.array, add(e, Const(1)))
            and _stores_row(store, e) and store.value == Var(total.name)):
        return None
    result, pos = store.target.array, inner.start.array
    read = used(inner) | {total.name}
    for s in head:
        dead = isinstance(s, Decl) and s.name not in read and s.init is not None \
            and not any(isinstance(x, Call) for x in subexprs(s.init))
        if not (dead or _stores_row(s, e) and s.target.array == result and s.value == Const(0)):
            return None
    summed = product(inner, {**scope, total.name: total.ctype}, inputs)
    if summed is None or summed[0] != total.name or results.get(result) != total.ctype \
            or inputs.get(pos) != inputs[summed[2]]:
        return None
    _, vals, crd, x = summed
    return result, pos, vals, crd, x


def _stores_row(s: IRStmt, e: Var) -> TypeGuard[Assign]:
    """Whether ``s`` is a plain assignment ``R[e] = ...`` to an array element at row ``e``."""
    return isinstance(s, Assign) and s.op == "=" and isinstance(s.target, Load) \
        and s.target.index == e
