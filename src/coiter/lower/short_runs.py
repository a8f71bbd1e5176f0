"""Short runs summed without a loop.

A sparse row sum ``for (p = A2_pos[i]; p < A2_pos[i+1]; p++) t += A_vals[p] * x_vals[A2_crd[p]]``
over runs of one to four positions spends most of its time in the loop's exit branch: when
run lengths vary (a road network's rows, a knowledge graph's fibers) it mispredicts about
once a run, some 15 cycles against a few for the run's arithmetic. A run of at most
:data:`SHORT_RUN` positions is therefore summed by a helper (``coiter_run_dot_i32``/``_i64``
in the C prelude) that reads it with masked vector loads and a masked gather, no loop, and
adds the products to ``t`` one by one in position order: the same additions in the same
order as the loop, so results are bit for bit those of the loop. Longer runs take the loop.

Where nearly every run holds one position the loop predicts well and the gather costs more
than it saves, and where runs average 6 or more few are short enough: an operand takes the
helper only where its runs average 1.5 to 6 positions (``SHORT_AVERAGES``). :mod:`.sums`
versions the kernel's statements on a flag computed before the loops (``if (A2_long_runs)
{ partial sums } else if (A2_short_runs) { helper } else { loops }``).

Only runs whose values and gathered vector are ``double`` and whose coordinates are
``int32_t`` or ``int64_t`` qualify; without AVX-512 the helper is the plain loop, and where
gathers are slow (AMD Zen: ``COITER_FAST_GATHER`` in the C prelude) the flag is false. Measured
on the benchmark suite's operands, old and new kernel in one process (1 thread, ms, loop ->
helper): CSR SpMV on USA-road-NE 14.3 -> 9.3, USA-road-BAY 2.71 -> 1.15, as-caida 0.45 ->
0.28; TTV on fb15k-237's fibers (3.0 a fiber) 0.99 -> 0.72, collegemsg-day 0.169 -> 0.103
(docs/performance.md, "Short rows: no loop").
"""
from __future__ import annotations

from ..ir.nodes import Assign, Bin, Block, Call, Const, Decl, For, If, IRStmt, Load, Var
from ..ir.rewrite import LoopRewrite

SHORT_RUN = 4  # positions summed without a loop (the lanes of one 256-bit register)
INDEX_SUFFIX = {"int32_t": "i32", "int64_t": "i64"}


def short_run_sums(inputs: dict[str, str]) -> LoopRewrite:
    """The rewrite of a loop ``for (p = pos[e]; p < pos[e+1]; p++) { k = crd[p]; t += vals[p]
    * x[k]; }`` into ``if (pos[e+1] - pos[e] <= SHORT_RUN) t = coiter_run_dot(...); else
    loop``, for :func:`.sums.split_long_sums` to apply to the loops over one run of an
    input's (validated, non-decreasing) pos array where the input's runs are short.
    ``inputs`` maps the kernel's read-only array parameters to their element types."""

    def rewrite(f: For, scope: dict[str, str]) -> IRStmt | None:
        summed = None if f.pragma or f.unroll or f.unit else product(f, scope, inputs)
        if summed is None:
            return None
        total, vals, crd, x = summed
        length = Bin("-", f.end, f.start)
        dot = Call(f"coiter_run_dot_{INDEX_SUFFIX[inputs[crd]]}",
                   (Var(total), Var(vals), Var(crd), Var(x), f.start, length))
        return If(Bin("<=", length, Const(SHORT_RUN)), Block((Assign(Var(total), dot),)),
                  Block((f,)))

    return rewrite


def product(f: For, scope: dict[str, str], inputs: dict[str, str],
             ) -> tuple[str, str, str, str] | None:
    """``(t, vals, crd, x)`` when ``f``'s body is ``[k = crd[p];] t += vals[p] * x[k]`` (either
    factor first) with ``t``, ``vals`` and ``x`` double, ``crd`` a 32- or 64-bit index array,
    and every array a read-only input."""
    p = Var(f.var)
    *decls, last = f.body.stmts or (None,)
    if len(decls) > 1 or not (isinstance(last, Assign) and last.op == "+="
                              and isinstance(last.target, Var)
                              and scope.get(last.target.name) == "double"
                              and isinstance(last.value, Bin) and last.value.op == "*"):
        return None
    coordinate = {d.name: d.init for d in decls if isinstance(d, Decl)}
    if len(coordinate) != len(decls):
        return None
    for a, b in ((last.value.a, last.value.b), (last.value.b, last.value.a)):
        if not (isinstance(a, Load) and a.index == p and isinstance(b, Load)):
            continue
        # x's index: the coordinate declared first, or crd[p] itself
        index = coordinate.get(b.index.name) if isinstance(b.index, Var) else b.index
        if isinstance(index, Load) and index.index == p \
                and inputs.get(a.array) == inputs.get(b.array) == "double" \
                and inputs.get(index.array) in INDEX_SUFFIX:
            return last.target.name, a.array, index.array, b.array
    return None
