"""Short runs summed without a loop.

A sparse row sum ``for (p = A2_pos[i]; p < A2_pos[i+1]; p++) t += A_vals[p] * x_vals[A2_crd[p]]``
over runs of one to four positions spends most of its time in the loop's exit branch: when
run lengths vary (a road network's rows, a knowledge graph's fibers) it mispredicts about
once a run, some 15 cycles against a few for the run's arithmetic. A run of at most
:data:`SHORT_RUN` positions is therefore summed by a helper (``coiter_run_dot_i32``/``_i64``
in the C prelude) with no loop, which adds the products to ``t`` one by one in position
order, lanes past the run adding -0.0: the same additions in the same order as the loop, so
results are bit for bit those of the loop. Longer runs take the loop. Two helpers:

- where gathers are fast (Intel's AVX-512: ``COITER_FAST_GATHER`` in the C prelude), masked
  vector loads and a masked gather read the run alone;
- elsewhere with AVX2 (AMD Zen), plain loads read the four positions from the run's start,
  the next run's included, and x with four scalar loads; lanes past the run are blended
  away. The helper gets the positions the operand's runs cover (``A2_stored``, read once
  before the loops) and takes the loop where four positions would pass them, so it reads no
  coordinate or value that is not stored, and every coordinate it reads is validated.

Where nearly every run holds one position the loop predicts well, and where runs average 6
or more few are short enough: an operand takes the helper only where its runs average 1.3 to
6 positions (``SHORT_AVERAGES``), only where the prelude's ``COITER_SHORT_RUNS`` says a
helper pays (without AVX2 the helper would be the loop), and only where its run lengths carry
more than repeated calls would teach the loop's exit branch (``coiter_runs_unlearned``: some
80,000 bits per thread for the plain-load helper). :mod:`.sums` versions the kernel's
statements on a flag computed before the loops (``if (A2_long_runs) { partial sums } else if
(A2_short_runs) { helper } else { loops }``), and :mod:`.gathers` fetches x ahead before the
calls as it does in the loops. Only runs whose sum, values and gathered vector are all
``double`` (``coiter_run_dot_*``) or all ``float`` (``coiter_run_dotf_*``) and whose
coordinates are ``int32_t`` or ``int64_t`` qualify.

Measured on the benchmark suite's operands, old and new kernel in one process (1 thread, ms,
loop -> helper). Gathers, on an Intel Xeon: CSR SpMV on USA-road-NE 14.3 -> 9.3,
USA-road-BAY 2.71 -> 1.15, as-caida 0.45 -> 0.28; TTV on fb15k-237's fibers (3.0 a fiber)
0.99 -> 0.72, collegemsg-day 0.169 -> 0.103. Plain loads, on an AMD EPYC (Zen 4), with the
prefetches: USA-road-NE 9.7 -> 6.8, USA-road-FLA 6.9 -> 4.5, USA-road-NY 1.88 -> 1.21,
as-caida 0.222 -> 0.126, luxembourg_osm 0.274 -> 0.255; TTV fb15k-237 0.72 -> 0.50, and the
one loss, jf17k-3ary's fibers (2.2 a fiber, 15.6k of them) 0.025 -> 0.033, which now take
the loop (docs/performance.md, "Slow gathers, short rows: plain loads").
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ..ir.nodes import Assign, Bin, Block, Call, Const, Decl, For, If, IRExpr, IRStmt, Load, Var

SHORT_RUN = 4  # positions summed without a loop (the lanes of one 256-bit register)
INDEX_SUFFIX = {"int32_t": "i32", "int64_t": "i64"}
# the value types the run helpers take, and the letter their names add (C's sqrt, sqrtf)
VALUE_SUFFIX = {"double": "", "float": "f"}
RUN_DOT = "coiter_run_dot"  # the helper's name, before its value and index suffixes
# a loop over one run, the types of the variables declared around it, and the positions its
# pos array's runs cover -> the loop rewritten, or None
ShortRunSums = Callable[[For, dict[str, str], IRExpr], IRStmt | None]


class RunDot(NamedTuple):
    """The arguments of a short-run helper call, in the helper's order: ``total + vals[p] *
    x[crd[p]]`` for ``p`` in ``start .. start + length``, ``stored`` the positions the
    operand's runs cover."""

    total: Var
    vals: Var
    crd: Var
    x: Var
    start: IRExpr
    length: IRExpr
    stored: IRExpr


def run_dot(e: IRExpr) -> RunDot | None:
    """The arguments of ``e`` when it calls a short-run helper."""
    if not (isinstance(e, Call) and e.fn in _RUN_DOTS):
        return None
    assert all(isinstance(a, Var) for a in e.args[:4])  # as short_run_sums writes them
    return RunDot._make(e.args)


def short_run_sums(inputs: dict[str, str]) -> ShortRunSums:
    """The rewrite of a loop ``for (p = pos[e]; p < pos[e+1]; p++) { k = crd[p]; t += vals[p]
    * x[k]; }`` into ``if (pos[e+1] - pos[e] <= SHORT_RUN) t = coiter_run_dot(...); else
    loop``, for :func:`.sums.split_long_sums` to apply to the loops over one run of an
    input's (validated, non-decreasing) pos array where the input's runs are short, given
    the number of positions that array's runs cover (``pos[runs]``: the helper may read the
    four positions from a run's start where they lie below it). ``inputs`` maps the kernel's
    read-only array parameters to their element types."""

    def rewrite(f: For, scope: dict[str, str], stored: IRExpr) -> IRStmt | None:
        summed = product(f, scope, inputs)
        if summed is None:
            return None
        total, vals, crd, x = summed
        length = Bin("-", f.end, f.start)
        dot = Call(helper_name(RUN_DOT, inputs[vals], inputs[crd]),
                   tuple(RunDot(Var(total), Var(vals), Var(crd), Var(x), f.start, length, stored)))
        return If(Bin("<=", length, Const(SHORT_RUN)), Block((Assign(Var(total), dot),)),
                  Block((f,)))

    return rewrite


def helper_name(base: str, value: str, index: str) -> str:
    """The C prelude's run helper ``base`` for ``value`` values and ``index`` coordinates:
    ``coiter_run_dot_i32``, ``coiter_run_dotf_i64``, ..."""
    return f"{base}{VALUE_SUFFIX[value]}_{INDEX_SUFFIX[index]}"


_RUN_DOTS = frozenset(helper_name(RUN_DOT, v, i) for v in VALUE_SUFFIX for i in INDEX_SUFFIX)


def product(f: For, scope: dict[str, str], inputs: dict[str, str],
             ) -> tuple[str, str, str, str] | None:
    """``(t, vals, crd, x)`` when ``f`` is a plain loop (no pragma, unrolling or GPU unit)
    whose body is ``[k = crd[p];] t += vals[p] * x[k]`` (either factor first) with
    ``t``, ``vals`` and ``x`` all of one type of :data:`VALUE_SUFFIX`, ``crd`` a 32- or
    64-bit index array, and every array a read-only input."""
    if f.pragma or f.unroll or f.unit:
        return None
    p = Var(f.var)
    *decls, last = f.body.stmts or (None,)
    if len(decls) > 1 or not (isinstance(last, Assign) and last.op == "+="
                              and isinstance(last.target, Var)
                              and scope.get(last.target.name) in VALUE_SUFFIX
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
                and inputs.get(a.array) == inputs.get(b.array) == scope[last.target.name] \
                and inputs.get(index.array) in INDEX_SUFFIX:
            return last.target.name, a.array, index.array, b.array
    return None
