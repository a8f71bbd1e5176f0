"""Parallel assembly of sparse results (per-thread buffers merged afterwards).

The paper leaves parallel assembly of results without random insert as future
work. Rows of a result are independent when the loop over its first mode walks them:
each thread takes a contiguous block of rows, appends their entries to its own buffers
(its own counters, capacities and workspaces of any policy). A CSR-like result (dense
first level) has its row lengths written into the shared ``pos``; a result whose first
level appends (DCSR, COO, CSF) has every appended array per thread, the root ``pos``
too. After the parallel region the other threads' parts are appended to thread 0's in
thread order, which is row order, at running offsets per level, and the ``pos`` arrays
become offsets as in serial assembly. One pass over the data; one thread copies nothing.

Inside the region nothing may ``return``: a failed allocation records its error
code and jumps to the end of the thread's block.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..concrete.provenance import Provenance
from ..concrete.races import races, row_assembly
from ..concrete.stmt import Assign, ConcreteProgram, Forall, walk_stmts
from ..formats.levels.base import LevelNames
from ..notation.ast import accesses
from ..ir.nodes import (
    Assign as IRAssign, Bin, Block, Call, Cast, Comment, Const, Decl, ExprStmt, For, Goto, If,
    IRExpr, IRStmt, Label, Load, Pragma, Region, Return, Un, Var, While, add, block, mul,
)

RC = "coiter_rc"


def row_region(prog: ConcreteProgram) -> Forall | None:
    """The outermost loop when it can assemble the rows of a CSR-like result in parallel:
    the loop walks the result's rows, the schedule parallelizes it (or leaves the default
    to), nothing but the result and workspaces races, and every operand walked by it can
    be cut into blocks of rows by binary search."""
    f = prog.stmt
    prov = Provenance(prog.env.relations)
    if not isinstance(f, Forall) or prov.defining(f.var) is not None or not row_assembly(f, prog.tensors):
        return None
    explicit = any(isinstance(s, Forall) and s.unit != "NotParallel" for s in walk_stmts(f))
    if explicit and f.unit != "CPUThread":
        return None
    if any(r.role not in ("result", "workspace") for r in races(prov, f, prog.tensors)):
        return None
    return f if cut_into_blocks(f, prog) else None


def cut_into_blocks(f: Forall, prog: ConcreteProgram) -> bool:
    """Whether every operand level ``f`` walks can be cut into blocks of its coordinates
    (by locate, or by binary search of an ordered, unique level), so that threads can take
    blocks of ``f``'s range."""
    for s in walk_stmts(f.body):
        for a in [s.lhs, *accesses(s.rhs)] if isinstance(s, Assign) else []:
            decl = prog.tensors[a.tensor]
            if decl.role != "input" or decl.order == 0 or a.indices[decl.format.ordering[0]] != f.var:
                continue
            level = decl.format.levels[0]
            if not (level.full and level.has_locate) and not (
                    level.ordered and level.unique and not level.has_coord_iter
                    and level.pos_found(LevelNames(a.tensor, 1), Var("p")) is None):
                return False
    return True


class ParallelAssembly:
    """Mixin of :class:`coiter.lower.lower.Lowerer`: the row-parallel assembly region."""

    def region_loop(self) -> Forall | None:
        """The outermost loop when this kernel assembles result rows in parallel."""
        if self.mode != "fused" or not self.result_allocated:
            return None
        return row_region(self.prog)

    def lower_region(self, f: Forall, scope) -> list[IRStmt]:
        nt, tid, lo, hi, t = (self._unique(n) for n in (
            "coiter_nt", "coiter_tid", "coiter_lo", "coiter_hi", "coiter_t"))
        done = self._unique("coiter_thread_done")
        self.used.add(RC)
        buffers = self._thread_buffers()
        parts = {b.name: self._unique(f"{b.name}_parts") for b in buffers}
        counts = {g.counter: self._unique(f"coiter_{g.counter}_n") for g in self.groups}
        n_rows = self.extent[f.var]

        out: list[IRStmt] = [Comment("rows in parallel: per-thread buffers, merged in row order"),
                             Decl("int", RC, Const(0)),
                             Decl("int64_t", nt, Call("COITER_THREADS", ()))]
        tables = [(parts[b.name], f"{b.ctype}*") for b in buffers] + [(c, "int64_t") for c in counts.values()]
        for table, elt in tables:
            out.append(Decl(f"{elt}*", table, Cast(f"{elt}*", Call("calloc", (Var(nt), Call("sizeof", (Var(elt),)))))))
            out.append(If(Un("!", Var(table)), block(Return(Const(1)))))

        local: list[IRStmt] = [
            Decl("int64_t", tid, Call("COITER_THREAD_NUM", ())),
            Decl("int64_t", lo, Bin("/", mul(n_rows, Var(tid)), Var(nt))),
            Decl("int64_t", hi, Bin("/", mul(n_rows, add(Var(tid), Const(1))), Var(nt))),
        ]
        for g in self.groups:
            # every thread reserves the whole hint: rows are rarely split evenly (SpAdd3's
            # union, whose hint is exact, grew and copied a thread's buffers on most calls),
            # and pages a thread never writes cost nothing
            hint = Var(f"{self.cn[self.result]}_cap_hint")
            local += [Decl("int64_t", g.cap, Call("COITER_MAX", (hint, Const(16)))),
                      Decl("int64_t", g.counter, Const(0))]
        for b in buffers:
            size = Call("sizeof", (Var(b.ctype),))
            alloc = Call("calloc", (b.length, size)) if b.zeroed else Call("malloc", (mul(b.length, size),))
            local.append(Decl(f"{b.ctype}*", b.name, Cast(f"{b.ctype}*", alloc)))
        fail = [If(Un("!", Var(b.name)), block(Return(Const(1)))) for b in buffers]
        for name, decl in self.decls.items():
            if decl.role == "workspace" and decl.policy is not None:
                # the zeroed structure first: the jump to the end frees it
                allocs = self._workspace_alloc(name, decl)
                local.append(allocs[0])
                fail += allocs[1:]
            elif decl.role == "workspace":
                # declarations before any check: the jump to the end must not skip one
                allocs = self._workspace_alloc(name, decl)
                local += [s for s in allocs if isinstance(s, Decl)]
                fail += [s for s in allocs if not isinstance(s, Decl)]
        self.window[f.var] = (Var(lo), Var(hi))
        # the rows run on threads: dense temporaries inside them get a slice per thread
        self.parallel_depth += 1
        try:
            rows = self.lower_forall(replace(f, unit="NotParallel"), scope)
        finally:
            self.parallel_depth -= 1
            del self.window[f.var]
        publish = [IRAssign(Load(parts[b.name], Var(tid)), Var(b.name)) for b in buffers]
        publish += [IRAssign(Load(c, Var(tid)), Var(counter)) for counter, c in counts.items()]
        frees = self._workspace_frees()
        body = [*local, *no_returns(fail + rows, done), Label(done), *publish, *frees]
        out.append(Region(f"omp parallel num_threads({nt})", block(body)))

        # merge: concatenate the parts in thread order (= row order)
        cleanup = [ExprStmt(Call("free", (Load(parts[b.name], Var(t)),))) for b in buffers]
        # each group's counter becomes its total; the parts' offsets are running totals
        offsets = {g.counter: self._unique(f"coiter_{g.counter}_at") for g in self.groups}
        for g in self.groups:
            out.append(IRAssign(Var(g.counter), Const(0)))
            out.append(For(t, "int64_t", Const(0), Var(nt), block(
                IRAssign(Var(g.counter), Load(counts[g.counter], Var(t)), "+="))))
        # thread 0's buffers grow (or shrink) to the whole result and take the others' parts
        # after their own: one thread hands its buffers over without a copy
        for b in buffers:
            first = Load(parts[b.name], Const(0))
            if b.summed:
                out.append(IRAssign(Var(b.name), first))
                continue
            total = add(mul(Var(b.group.counter), b.stride), Const(b.skip))
            grown = Call("realloc", (first, mul(Call("COITER_MAX", (total, Const(1))),
                                                Call("sizeof", (Var(b.ctype),)))))
            # the old block is gone once realloc succeeds: the parts table frees the new one
            out.append(If(Un("!", Var(RC)), block(
                IRAssign(Var(b.name), Cast(f"{b.ctype}*", grown)),
                If(Var(b.name), block(IRAssign(first, Var(b.name))), block(IRAssign(Var(RC), Const(1)))))))
        release = [For(t, "int64_t", Const(0), Var(nt), block(cleanup))]
        release += [ExprStmt(Call("free", (Var(table),))) for table, _ in tables]
        out.append(If(Var(RC), block(release, Return(Var(RC)))))
        copy: list[IRStmt] = [Decl("int64_t", offsets[g.counter], Load(counts[g.counter], Const(0))) for g in self.groups]
        step: list[IRStmt] = []
        for b in buffers:
            if b.summed:  # every thread counted into the same parents: add them up
                part, q = self._unique(f"{b.name}_part"), self._unique("coiter_q")
                step.append(Decl(f"{b.ctype}*", part, Load(parts[b.name], Var(t))))
                step.append(For(q, "int64_t", Const(1), b.length, block(
                    IRAssign(Load(b.name, Var(q)), Load(part, Var(q)), "+="))))
                continue
            size = Call("sizeof", (Var(b.ctype),))
            at = add(mul(Var(offsets[b.group.counter]), b.stride), Const(b.skip))
            src = add(Load(parts[b.name], Var(t)), Const(b.skip))
            step.append(ExprStmt(Call("memcpy", (add(Var(b.name), at), src,
                                                 mul(mul(Load(counts[b.group.counter], Var(t)), b.stride), size)))))
        step += [IRAssign(Var(offsets[g.counter]), Load(counts[g.counter], Var(t)), "+=") for g in self.groups]
        out += copy
        out.append(For(t, "int64_t", Const(1), Var(nt), block(step)))
        out.append(For(t, "int64_t", Const(1), Var(nt), block(cleanup)))
        out += [ExprStmt(Call("free", (Var(table),))) for table, _ in tables]
        return out

    def _thread_buffers(self) -> list[_Buffer]:
        """The result arrays each thread of the region fills on its own: every group's
        coordinate arrays, the next group's ``pos`` (sized by this group's entries) or the
        values, and a first level's ``pos`` when the first level appends (every thread's
        rows hang from the one root). A dense first level's ``pos`` stays shared: threads
        write disjoint rows of it."""
        fmt = self.fmt(self.result)
        itype = self.itype[self.result]
        out: list[_Buffer] = []
        first = self.groups[0]
        if first.head == 0:
            for arr in fmt.levels[0].parent_arrays:
                out.append(_Buffer(self.names(self.result, 0).array(arr), itype, first, Const(2),
                                   Const(1), 1, zeroed=True, summed=True))
        for n, g in enumerate(self.groups):
            cap = Var(g.cap)
            for m in g.members:
                for arr in fmt.levels[m].position_arrays:
                    out.append(_Buffer(self.names(self.result, m).array(arr), itype, g, cap, Const(1), 0))
            nxt = self.groups[n + 1] if n + 1 < len(self.groups) else None
            stop = nxt.head if nxt else fmt.order
            mult = self._dense_mult(g.members[-1] + 1, stop)
            if nxt is not None:
                # counts from index 1 on (pos[p + 1] += ...), a prefix sum after the merge
                for arr in fmt.levels[nxt.head].parent_arrays:
                    out.append(_Buffer(self.names(self.result, nxt.head).array(arr), itype, g,
                                       add(mul(cap, mult), Const(1)), mult, 1, zeroed=True))
            else:
                # values a statement adds to (+=) must start at zero, like those of dense
                # levels below the last appended one
                adds = any(isinstance(st, Assign) and st.lhs.tensor == self.result and st.accumulate
                           for st in walk_stmts(self.prog.stmt))
                out.append(_Buffer(self.vals(self.result), self.vtype[self.result], g, mul(cap, mult),
                                   mult, 0, zeroed=mult != Const(1) or adds))
        return out


@dataclass(frozen=True)
class _Buffer:
    """A result array one thread of the parallel region fills: ``length`` elements at
    first; after the region the parts are concatenated, ``stride`` elements per entry of
    ``group`` from element ``skip`` on, or (``summed``) added up element by element."""

    name: str
    ctype: str
    group: Any  # the lowerer's _Group whose entries the array follows
    length: IRExpr
    stride: IRExpr
    skip: int
    zeroed: bool = False
    summed: bool = False


def no_returns(stmts: list[IRStmt], label: str) -> list[IRStmt]:
    """``stmts`` with every ``return c`` turned into recording ``c`` and jumping to
    ``label`` (a parallel region cannot be left by return)."""
    def fix(s: IRStmt) -> IRStmt:
        if isinstance(s, Return):
            return block(Pragma("omp atomic write", IRAssign(Var(RC), s.value)), Goto(label))
        if isinstance(s, Block):
            return replace(s, stmts=tuple(fix(x) for x in s.stmts))
        if isinstance(s, For):
            return replace(s, body=fix(s.body))
        if isinstance(s, While):
            return replace(s, body=fix(s.body))
        if isinstance(s, If):
            return replace(s, then=fix(s.then), otherwise=None if s.otherwise is None else fix(s.otherwise))
        return s

    return [fix(s) for s in stmts]
