"""Parallel assembly of CSR-like results (per-thread buffers merged afterwards).

The paper leaves parallel assembly of results without random insert as future
work. Rows of a result whose first level is dense and whose second level is
compressed are independent: each thread takes a contiguous block of rows, appends
their entries to its own buffers (its own counter, capacity and workspace), and
writes the row lengths into the shared ``pos`` array. After the parallel region
the other threads' buffers are appended to thread 0's in thread order, which is row
order, and ``pos`` is turned into offsets as in serial assembly. One pass over the data;
one thread copies nothing.

Inside the region nothing may ``return``: a failed allocation records its error
code and jumps to the end of the thread's block.
"""
from __future__ import annotations

from dataclasses import replace

from ..concrete.provenance import Provenance
from ..concrete.races import races, row_assembly
from ..concrete.stmt import Assign, ConcreteProgram, Forall, walk_stmts
from ..formats.levels.base import LevelNames
from ..notation.ast import accesses
from ..ir.nodes import (
    Assign as IRAssign, Bin, Block, Call, Cast, Comment, Const, Decl, ExprStmt, For, Goto, If,
    IRStmt, Label, Load, Pragma, Region, Return, Un, Var, While, add, block, mul,
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
    if any(d.policy is not None for d in prog.tensors.values()):
        return None  # sparse workspaces are serial
    for s in walk_stmts(f.body):
        for a in [s.lhs, *accesses(s.rhs)] if isinstance(s, Assign) else []:
            decl = prog.tensors[a.tensor]
            if decl.role != "input" or decl.order == 0 or a.indices[decl.format.ordering[0]] != f.var:
                continue
            level = decl.format.levels[0]
            if not (level.full and level.has_locate) and not (
                    level.ordered and level.unique and not level.has_coord_iter
                    and level.pos_found(LevelNames(a.tensor, 1), Var("p")) is None):
                return None
    return f


class ParallelAssembly:
    """Mixin of :class:`coiter.lower.lower.Lowerer`: the row-parallel assembly region."""

    def region_loop(self) -> Forall | None:
        """The outermost loop when this kernel assembles result rows in parallel."""
        if self.mode != "fused" or not self.result_allocated:
            return None
        return row_region(self.prog)

    def lower_region(self, f: Forall, scope) -> list[IRStmt]:
        g = self.groups[0]
        fmt = self.fmt(self.result)
        itype, vt = self.itype[self.result], self.vtype[self.result]
        nt, tid, lo, hi, total, t = (self._unique(n) for n in (
            "coiter_nt", "coiter_tid", "coiter_lo", "coiter_hi", "coiter_total", "coiter_t"))
        done = self._unique("coiter_thread_done")
        self.used.add(RC)
        # (name, C element type) of the arrays each thread fills
        arrays = [(self.names(self.result, m).array(a), itype)
                  for m in g.members for a in fmt.levels[m].position_arrays]
        arrays.append((self.vals(self.result), vt))
        parts = {name: self._unique(f"{name}_parts") for name, _ in arrays}
        counts = self._unique("coiter_part_n")
        n_rows = self.extent[f.var]

        out: list[IRStmt] = [Comment("rows in parallel: per-thread buffers, merged in row order"),
                             Decl("int", RC, Const(0)),
                             Decl("int64_t", nt, Call("COITER_THREADS", ()))]
        for name, ctype in arrays + [(counts, "int64_t")]:
            table = parts.get(name, counts)
            elt = "int64_t" if table == counts else f"{ctype}*"
            out.append(Decl(f"{elt}*", table, Cast(f"{elt}*", Call("calloc", (Var(nt), Call("sizeof", (Var(elt),)))))))
            out.append(If(Un("!", Var(table)), block(Return(Const(1)))))

        local: list[IRStmt] = [
            Decl("int64_t", tid, Call("COITER_THREAD_NUM", ())),
            Decl("int64_t", lo, Bin("/", mul(n_rows, Var(tid)), Var(nt))),
            Decl("int64_t", hi, Bin("/", mul(n_rows, add(Var(tid), Const(1))), Var(nt))),
            # every thread reserves the whole hint: rows are rarely split evenly (SpAdd3's
            # union, whose hint is exact, grew and copied a thread's buffers on most calls),
            # and pages a thread never writes cost nothing
            Decl("int64_t", g.cap, Call("COITER_MAX", (Var(f"{self.cn[self.result]}_cap_hint"), Const(16)))),
            Decl("int64_t", g.counter, Const(0)),
        ]
        for name, ctype in arrays:
            local.append(Decl(f"{ctype}*", name, Cast(f"{ctype}*", Call("malloc", (mul(Var(g.cap), Call(
                "sizeof", (Var(ctype),))),)))))
        fail = [If(Un("!", Var(name)), block(Return(Const(1)))) for name, _ in arrays]
        for name, decl in self.decls.items():
            if decl.role == "workspace":
                # declarations before any check: the jump to the end must not skip one
                allocs = self._workspace_alloc(name, decl)
                local += [s for s in allocs if isinstance(s, Decl)]
                fail += [s for s in allocs if not isinstance(s, Decl)]
        self.window[f.var] = (Var(lo), Var(hi))
        try:
            rows = self.lower_forall(replace(f, unit="NotParallel"), scope)
        finally:
            del self.window[f.var]
        publish = [IRAssign(Load(parts[name], Var(tid)), Var(name)) for name, _ in arrays]
        publish.append(IRAssign(Load(counts, Var(tid)), Var(g.counter)))
        frees = self._workspace_frees()
        body = [*local, *_no_returns(fail + rows, done), Label(done), *publish, *frees]
        out.append(Region(f"omp parallel num_threads({nt})", block(body)))

        # merge: concatenate the parts in thread order (= row order)
        out.append(Decl("int64_t", total, Const(0)))
        out.append(For(t, "int64_t", Const(0), Var(nt), block(IRAssign(Var(total), Load(counts, Var(t)), "+="))))
        cleanup = [ExprStmt(Call("free", (Load(parts[name], Var(t)),))) for name, _ in arrays]
        release = [For(t, "int64_t", Const(0), Var(nt), block(cleanup))]
        release += [ExprStmt(Call("free", (Var(table),))) for table in [*parts.values(), counts]]
        out.append(If(Var(RC), block(release, Return(Var(RC)))))
        out.append(IRAssign(Var(g.counter), Var(total)))
        # thread 0's buffers grow (or shrink) to the whole result and take the others' rows
        # after their own: one thread hands its buffers over without a copy
        offset = self._unique("coiter_offset")
        for name, ctype in arrays:
            first = Load(parts[name], Const(0))
            out.append(IRAssign(Var(name), Cast(f"{ctype}*", Call("realloc", (first, mul(
                Call("COITER_MAX", (Var(total), Const(1))), Call("sizeof", (Var(ctype),))))))))
            out.append(If(Un("!", Var(name)), block(release, Return(Const(1)))))
            out.append(IRAssign(first, Var(name)))  # the old block is gone: release frees this one
        out.append(Decl("int64_t", offset, Load(counts, Const(0))))
        copy: list[IRStmt] = []
        for name, ctype in arrays:
            size = Call("sizeof", (Var(ctype),))
            copy.append(ExprStmt(Call("memcpy", (add(Var(name), Var(offset)), Load(parts[name], Var(t)),
                                                 mul(Load(counts, Var(t)), size)))))
        copy.append(IRAssign(Var(offset), Load(counts, Var(t)), "+="))
        out.append(For(t, "int64_t", Const(1), Var(nt), block(copy)))
        out.append(For(t, "int64_t", Const(1), Var(nt), block(cleanup)))
        out += [ExprStmt(Call("free", (Var(table),))) for table in [*parts.values(), counts]]
        return out


def _no_returns(stmts: list[IRStmt], label: str) -> list[IRStmt]:
    """``stmts`` with every ``return c`` turned into recording ``c`` and jumping to
    ``label`` (a parallel region cannot be left by return)."""
    def fix(s: IRStmt) -> IRStmt:
        if isinstance(s, Return):
            return block(Pragma("omp atomic write", IRAssign(Var(RC), s.value)), Goto(label))
        if isinstance(s, Block):
            return Block(tuple(fix(x) for x in s.stmts))
        if isinstance(s, For):
            return replace(s, body=fix(s.body))
        if isinstance(s, While):
            return replace(s, body=fix(s.body))
        if isinstance(s, If):
            return replace(s, then=fix(s.then), otherwise=None if s.otherwise is None else fix(s.otherwise))
        return s

    return [fix(s) for s in stmts]
