"""Rows of a sum of sparse vectors formed by a sorting network or a window of columns.

``D(i,j) = A(i,j) + B(i,j) + C(i,j)`` over CSR operands merges, for each row, two or three
sorted runs of coordinates. The merge loop takes one or two branches per entry on which
operands hold the smallest coordinate, and on rows from independent patterns these
mispredict about once an entry: some 15 cycles against a few for the entry's work (a
branch-free merge is no faster: each step's loads wait for the previous step's compares).
Where a row's runs hold at most 64 entries in all, the C prelude's ``coiter_union_sum3``
forms the whole row without a branch per entry: it sorts the runs' coordinates together
with a sorting network (keys carry each entry's run, so equal coordinates keep the sum's
order), adds the values of equal coordinates in that order (``-0.0`` where a run lacks
one, which changes no sum) and compresses the row into the result. Longer rows whose
coordinates span at most 8 columns an entry are added run after run into windows of 512
columns and compressed out of them (``coiter_union_span``; mbeacxc 0.73 -> 0.29 ms). The
values are the merge's, bit for bit. The merge loops still follow for other rows; after
the helper (``coiter_union_takes`` chooses per row) their iterators stand at their ends and
the loops do not run.

The lowering (``_union_row`` in :mod:`.lower`) takes the helper where a merge qualifies: a
kernel that assembles and computes its result at once, a plain assignment of a
left-to-right sum of two or three input accesses (no scaling, no other terms) to a result
whose last level appends, every operand and the result with ``double`` values and zero
fill (an absent entry adds nothing), the result with 32-bit coordinates, each operand's run
read at its own last level (so a position indexes its values) from an ordered, unique level
with 32- or 64-bit coordinates (the helper narrows the latter's rows of at most 64 entries
and leaves longer ones to the merge). The helper needs AVX-512, and coordinates below 2^25
for the sorting network (checked per row); elsewhere the merge runs. Rows of more than 16
entries whose runs look alike (operands sharing a pattern) merge: their merge mispredicts
nothing.

Old and new kernels in one process on the benchmark's SpAdd3 operands (A, A with rows
shuffled, A with columns shuffled; 1 thread, ms, merge -> helper): add32 0.52 -> 0.26,
memplus 2.19 -> 1.27, cit-HepPh 10.1 -> 8.0, USA-road-NY 16.5 -> 11.8; rows of more than 64
entries (bcsstk33) keep the merge, and rows the merge predicts well (lp_ship04l's long
single-operand stretches) lose 0.01 ms (docs/performance.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..concrete.stmt import Assign as CAssign, Stmt
from ..ir.nodes import Assign, Bin, Block, Call, Const, If, IRExpr, IRStmt, Var
from ..notation.ast import Access, Add, Expr

MAX_RUNS = 3  # runs the helper merges


@dataclass(frozen=True)
class Run:
    """One operand's run of positions ``[p, end)`` with its coordinate and value arrays."""

    crd: str
    vals: str
    p: str
    end: str
    wide: bool  # int64 coordinates


def sum_terms(body: Stmt) -> list[Access] | None:
    """The accesses of ``body``'s right-hand side, left to right, when ``body`` assigns a
    sum of accesses added from left to right (``(A + B) + C``); None otherwise."""
    if not isinstance(body, CAssign) or body.accumulate:
        return None
    terms: list[Access] = []
    e: Expr = body.rhs
    while isinstance(e, Add):
        if not isinstance(e.b, Access):  # A + (B + C) adds in another order
            return None
        terms.append(e.b)
        e = e.a
    if not isinstance(e, Access):
        return None
    terms.append(e)
    return terms[::-1]


def union_row(runs: list[Run], out_crd: str, out_vals: str, counter: str, extent: IRExpr) -> IRStmt:
    """``if (coiter_union_takes(wide, runs, extent)) { counter += coiter_union_sum3(wide,
    ...); p = end for each run; }``: the row formed at once, written at the result's next
    position (room for every entry of the runs is reserved before), the merge loops left with
    nothing to do. ``wide``: bit s set where run s has int64 coordinates."""
    # missing runs: run 0's pointers with no entries, never read
    padded = runs + [runs[0]] * (MAX_RUNS - len(runs))
    lengths = [Bin("-", Var(r.end), Var(r.p)) for r in runs] + [Const(0)] * (MAX_RUNS - len(runs))
    args: list[IRExpr] = []
    for r, n in zip(padded, lengths):
        args += [Bin("+", Var(r.crd), Var(r.p)), Bin("+", Var(r.vals), Var(r.p)), n]
    wide = Const(sum(1 << s for s, r in enumerate(padded) if r.wide))
    takes = [a for k, a in enumerate(args) if k % 3 != 1]  # each run's coordinates and length
    args += [Bin("+", Var(out_crd), Var(counter)), Bin("+", Var(out_vals), Var(counter))]
    return If(Call("coiter_union_takes", (wide, *takes, extent)), Block((
        Assign(Var(counter), Call("coiter_union_sum3", (wide, *args)), "+="),
        *(Assign(Var(r.p), Var(r.end)) for r in runs),
    )))
