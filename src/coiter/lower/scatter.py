"""Parallel scatter into sparse workspaces: the outer product's loop on threads.

An outer product (SpGEMM CSC x CSR, SpTTM) walks the contracted index ``k`` outermost and
scatters every product into one sparse workspace of the whole result. The paper's code is
serial. Here each thread takes a block of ``k`` and inserts into a workspace of its own
(thread 0 into the kernel's), sorts and merges it (the ISM flush, in parallel), and after
the region the threads' sorted components are merged into the kernel's workspace in thread
order. The consumer then compresses it into the result as in the serial kernel.

Threads take fixed blocks of ``k`` (not dynamic chunks), balanced by the products under
each ``k`` counted beforehand (real matrices put most products in a few columns): which
thread sums a product then depends on the operands alone, not on timing.
Inside the region nothing may ``return``: errors record their code and jump to the end of
the thread's block, as in the row-parallel assembly.
"""
from __future__ import annotations

from dataclasses import replace

from ..concrete.races import scatter_loops
from ..concrete.stmt import Assign, Forall, Where, walk_stmts
from ..ir.nodes import (
    Assign as IRAssign, Bin, Call, Cast, Comment, Const, Decl, ExprStmt, For, If, IRExpr, IRStmt,
    Label, Load, Region, Return, Select, Un, Var, add, block, mul,
)
from ..notation.ast import accesses
from .assembly import RC, cut_into_blocks, no_returns


class ParallelScatter:
    """Mixin of :class:`coiter.lower.lower.Lowerer`: the scatter region of an outer product."""

    def scatter_workspace(self, w: Where) -> str | None:
        """The sparse workspace ``w``'s producer scatters into when its outermost loop runs
        on threads: asked for (``CPUThread``) or, without a parallel schedule, by default."""
        f = w.producer
        if self.target != "c" or self.mode != "fused" or self.parallel_depth or not isinstance(f, Forall):
            return None
        if id(f) not in scatter_loops(self.prog.stmt, self.decls):
            return None
        if f.unit != "CPUThread" and (f.unit != "NotParallel" or self.explicit_parallel):
            return None
        if self.prov.defining(f.var) is not None or not cut_into_blocks(f, self.prog):
            return None
        written = {s.lhs.tensor for s in walk_stmts(f) if isinstance(s, Assign)}
        sparse = [t for t in written if self.decls[t].role == "workspace" and self.decls[t].policy is not None]
        return sparse[0] if len(sparse) == 1 else None

    def lower_scatter(self, f: Forall, name: str, scope) -> list[IRStmt]:
        """``f`` (the producer's loop) run by threads over blocks of its range, each
        inserting into its own workspace; the parts merged into ``name``'s."""
        ws, policy, n = self._ism(name)
        bits = self._ism_arrays(name)[2]
        wstype = f"coiter_ws_{n}"
        nt, tid, lo, hi, t, parts, mine = (self._unique(x) for x in (
            "coiter_nt", "coiter_tid", "coiter_lo", "coiter_hi", "coiter_t", f"{ws}_parts", f"{ws}_mine"))
        done = self._unique("coiter_scatter_done")
        extent = self.extent[f.var]
        out: list[IRStmt] = [Comment("scatter in parallel: a workspace per thread, merged after")]
        if RC in self.used:
            out.append(IRAssign(Var(RC), Const(0)))
        else:
            self.used.add(RC)
            out.append(Decl("int", RC, Const(0)))
        prefix = self._unique("coiter_work_at")
        out += self._work_prefix(f, prefix, extent)
        out += [Decl("int64_t", nt, Call("COITER_THREADS", ())),
                Decl(f"{wstype}*", parts, Cast(f"{wstype}*", Call("calloc", (
                    Var(nt), Call("sizeof", (Var(wstype),)))))),
                If(Un("!", Var(parts)), block(ExprStmt(Call("free", (Var(prefix),))), Return(Const(1))))]
        # thread 0 inserts into the kernel's workspace; the others start their own
        hint = Var(f"{self.cn[self.result]}_cap_hint") if self.result_allocated else Const(0)
        local: list[IRStmt] = [
            Decl("int64_t", tid, Call("COITER_THREAD_NUM", ())),
            Decl("int64_t", lo, Call("coiter_balanced_start", (Var(prefix), extent, Var(tid), Var(nt)))),
            Decl("int64_t", hi, Call("coiter_balanced_start", (Var(prefix), extent, add(Var(tid), Const(1)),
                                                               Var(nt)))),
            Decl(f"{wstype}*", mine, Select(Bin("==", Var(tid), Const(0)), Un("&", Var(ws)),
                                            add(Var(parts), Var(tid)))),
        ]
        start = If(Bin("&&", Bin(">", Var(tid), Const(0)), Call(f"coiter_ws_init_{n}", (
            Var(mine), Bin("/", hint, Var(nt)), Const(int(policy.fills))))), block(Return(Const(1))))
        self.window[f.var] = (Var(lo), Var(hi))
        self.ism_inserting[name] = Var(mine)
        self.parallel_depth += 1
        try:
            loop = self.lower_forall(replace(f, unit="NotParallel"), scope)
        finally:
            self.parallel_depth -= 1
            del self.ism_inserting[name]
            del self.window[f.var]
        flush = If(Call(policy.flush_fn(n), (Var(mine), Var(bits))), block(Return(Const(1))))
        body = [*local, *no_returns([start, *loop, flush], done), Label(done)]
        out.append(Region(f"omp parallel num_threads({nt})", block(body)))
        # merge in thread order, then free the other threads' workspaces
        part = add(Var(parts), Var(t))
        absorb = Call(f"coiter_ws_absorb_{n}", (Un("&", Var(ws)), part))
        out.append(For(t, "int64_t", Const(1), Var(nt), block(
            If(Bin("&&", Un("!", Var(RC)), absorb), block(IRAssign(Var(RC), Const(1)))),
            ExprStmt(Call(f"coiter_ws_free_{n}", (part,))))))
        out.append(ExprStmt(Call("free", (Var(parts),))))
        out.append(ExprStmt(Call("free", (Var(prefix),))))
        out.append(If(Var(RC), block(Return(Var(RC)))))
        return out

    def _work_prefix(self, f: Forall, prefix: str, extent: IRExpr) -> list[IRStmt]:
        """``prefix[q]``: the work of ``f``'s iterations before ``q``, one per iteration plus
        the product of the entries each operand holds under it (an outer product's
        products), counted from the ``pos`` arrays of operands whose first level is dense."""
        q = self._unique("q")
        product: IRExpr | None = None
        operands = [x for s in walk_stmts(f.body) if isinstance(s, Assign) for x in accesses(s.rhs)]
        for a in dict.fromkeys(operands):
            decl = self.decls[a.tensor]
            if decl.role != "input" or decl.order < 2 or a.indices[decl.format.ordering[0]] != f.var:
                continue
            if decl.format.levels[0].full and "pos" in decl.format.levels[1].arrays:
                pos = self.names(a.tensor, 1).array("pos")
                count = Bin("-", Load(pos, add(Var(q), Const(1))), Load(pos, Var(q)))
                product = count if product is None else mul(product, count)
        term = Const(1) if product is None else add(Const(1), product)
        size = mul(add(extent, Const(1)), Call("sizeof", (Var("int64_t"),)))
        return [Decl("int64_t*", prefix, Cast("int64_t*", Call("malloc", (size,)))),
                If(Un("!", Var(prefix)), block(Return(Const(1)))),
                IRAssign(Load(prefix, Const(0)), Const(0)),
                For(q, "int64_t", Const(0), extent, block(
                    IRAssign(Load(prefix, add(Var(q), Const(1))), add(Load(prefix, Var(q)), term))))]
