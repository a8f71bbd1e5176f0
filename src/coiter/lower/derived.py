"""Lowering loops over derived index variables (Senanayake et al. 2020, §5).

A schedule replaces loops by loops over derived variables (split pieces, fused
pairs, positions of one operand, bounded copies). Tensors stay indexed by the
original variables, so each derived loop walks the provenance graph:

* **bounds** — a derived variable's range follows from its parent's: the outer
  piece of a split has ``ceil(R / b)`` steps, a position variable spans its
  operand's segment (or the whole level when fused);
* **recovery** — once every child of a relation is bound, the parent is computed
  (``i = lo + i0*b + i1``; ``j = crd[p]``; a fused position recovers the outer
  coordinates by *tracking*: one binary search when the loop starts, then
  ``while (p >= pos[i+1]) i++`` as it advances);
* **guards** — a split's last piece may run past its parent (``if (i >= N) break``);
  the position's coordinate is read only inside the operand's range.

A coordinate split of a variable that some operand walks sparsely (no locate)
becomes a *window*: that operand's segment is narrowed by binary search to the
coordinates of the current piece.
"""
from __future__ import annotations

from dataclasses import replace

from ..concrete.provenance import Bound, Coord, Divide, Fuse, Pos, Precomputed, Split
from ..concrete.stmt import Assign, Forall, Stmt, Where
from ..errors import ScheduleError
from ..formats.levels.base import ParentPos
from ..ir.nodes import (
    Assign as IRAssign, Bin, Break, Call, Const, Decl, If, IRExpr, IRStmt, Load, Min, Var, While,
    add, block, ceil_div, conj, lt, mul, sub,
)
from ..notation.ast import Access, IndexVar, rename_index


def _renamed(s: Stmt, old: IndexVar, new: IndexVar) -> Stmt:
    """``s`` with index variable ``old`` replaced by ``new`` in its assignments."""
    if isinstance(s, Assign):
        return Assign(rename_index(s.lhs, old, new), rename_index(s.rhs, old, new), s.accumulate)
    if isinstance(s, Forall):
        return replace(s, body=_renamed(s.body, old, new))
    if isinstance(s, Where):
        return Where(_renamed(s.consumer, old, new), _renamed(s.producer, old, new))
    raise ScheduleError(f"a precomputed loop over {old} holds {type(s).__name__}")


def cut_by_coordinate(level, names) -> bool:
    """Whether a window of coordinates cuts ``level``'s positions into one run (found by
    binary search): it is ordered, unique and gapless and walks positions."""
    return level.ordered and level.unique and not level.has_coord_iter and \
        level.pos_found(names, Var("p")) is None


class DerivedLoops:
    """Mixin of :class:`coiter.lower.lower.Lowerer` for loops over derived variables."""

    # -- ranges --------------------------------------------------------------------------
    def range_of(self, v: IndexVar, scope) -> tuple[IRExpr, IRExpr]:
        """``[lo, hi)`` of variable ``v`` where its loop starts."""
        rel = self.prov.defining(v)
        if rel is None:
            return self._span(v)
        if isinstance(rel, (Split, Divide)):
            lo, hi = self.range_of(rel.parent, scope)
            length = sub(hi, lo)
            if isinstance(rel, Split):
                return (Const(0), ceil_div(length, Const(rel.block)) if v == rel.outer else Const(rel.block))
            return (Const(0), Const(rel.parts) if v == rel.outer else ceil_div(length, Const(rel.parts)))
        if isinstance(rel, Bound):
            return (Const(0), Const(rel.value)) if rel.kind == "MaxExact" else self.range_of(rel.var, scope)
        if isinstance(rel, Fuse):
            (lo_o, hi_o), (lo_i, hi_i) = self.range_of(rel.outer, scope), self.range_of(rel.inner, scope)
            return Const(0), mul(sub(hi_o, lo_o), sub(hi_i, lo_i))
        if isinstance(rel, Pos):
            return self._pos_range(rel, scope)
        raise TypeError(type(rel).__name__)

    def extent_of(self, v: IndexVar) -> IRExpr:
        """How many values ``v`` takes, known before any loop runs (original variables and
        pieces of them; ScheduleError for positions, whose range depends on a loop)."""
        if self.prov.defining(v) is None:
            return self.extent[v]
        try:
            lo, hi = self.range_of(v, self.empty_scope)
        except (KeyError, ScheduleError):
            raise ScheduleError(f"the extent of {v} depends on the loops around it; it cannot "
                                "size a workspace or be checked against a bound") from None
        return sub(hi, lo)

    def _block_size(self, rel, scope) -> IRExpr:
        if isinstance(rel, Split):
            return Const(rel.block)
        lo, hi = self.range_of(rel.parent, scope)
        return ceil_div(sub(hi, lo), Const(rel.parts))

    def _pos_levels(self, rel: Pos) -> list[int]:
        fmt = self.fmt(rel.access.tensor)
        covered = self.prov.underived(rel.var)
        return [k for k in range(fmt.order) if rel.access.indices[fmt.ordering[k]] in covered]

    def _pos_parent(self, rel: Pos, scope) -> ParentPos:
        top = self._pos_levels(rel)[0]
        if top == 0:
            return ParentPos(Const(0))
        parent = scope.pos.get((rel.access, top - 1))
        if parent is None:
            raise ScheduleError(f"{rel}: the loop over {rel.pos} must be inside the loops binding "
                                f"the levels of {rel.access.tensor} above it")
        return parent

    def _segment(self, a: Access, k: int, lo: IRExpr, end: IRExpr) -> tuple[IRExpr, IRExpr]:
        """Positions of level ``k`` under the parent positions ``[lo, end)``."""
        level = self.fmt(a.tensor).levels[k]
        names = self.names(a.tensor, k)
        if not level.has_pos_iter:  # dense: arithmetic positions
            d = level.dimension(names)
            return mul(lo, d), mul(end, d)
        return level.pos_bounds(names, ParentPos(lo, end))

    def _segments(self, rel: Pos, scope) -> dict[int, tuple[IRExpr, IRExpr]]:
        parent = self._pos_parent(rel, scope)
        lo, end = parent.lo, parent.end
        out = {}
        for k in self._pos_levels(rel):
            lo, end = self._segment(rel.access, k, lo, end)
            if not out:  # the parent's locate missed: no positions
                lo, end = parent.or_zero(lo), parent.or_zero(end)
            out[k] = (lo, end)
        return out

    def _pos_range(self, rel: Pos, scope) -> tuple[IRExpr, IRExpr]:
        k = self._pos_levels(rel)[-1]
        lo, hi = self._segments(rel, scope)[k]
        piece = self.prov.defining(rel.var)
        if not isinstance(piece, (Split, Divide)):
            return lo, hi
        # pos of the inner piece of a split: the positions whose coordinates fall in the
        # current piece, [start, start + block), found by binary search in the segment
        level = self.fmt(rel.access.tensor).levels[k]
        crd = level.pos_access(self.names(rel.access.tensor, k), Var("p"))
        if not isinstance(crd, Load) or piece.outer not in scope.coords:
            raise ScheduleError(f"{rel}: the positions of a piece of {piece.parent} are searched in "
                                f"the coordinates of {rel.access.tensor}'s level {k + 1} ({level}) "
                                f"inside the loop over {piece.outer}, which this schedule does not give")
        plo, phi = self.range_of(piece.parent, scope)
        start = add(plo, mul(scope.coords[piece.outer], self._block_size(piece, scope)))
        end = Min((add(start, self._block_size(piece, scope)), phi))
        first = Call("coiter_lower_bound", (Var(crd.array), lo, hi, start))
        return first, Call("coiter_lower_bound", (Var(crd.array), first, hi, end))

    # -- values of variables in terms of bound loops ----------------------------------------
    def _value(self, v: IndexVar, scope) -> IRExpr | None:
        """``v`` as an expression of the loop variables bound in ``scope`` (None if some
        piece is not bound yet)."""
        if v in scope.coords:
            return scope.coords[v]
        rel = self.prov.using(v)
        if isinstance(rel, (Split, Divide)):
            outer, inner = self._value(rel.outer, scope), self._value(rel.inner, scope)
            if outer is None or inner is None:
                return None
            lo, _ = self.range_of(v, scope)
            return add(lo, add(mul(outer, self._block_size(rel, scope)), inner))
        if isinstance(rel, Bound):
            return self._value(rel.bounded, scope)
        return None

    # -- loops ---------------------------------------------------------------------------
    def lower_derived(self, f: Forall, scope) -> list[IRStmt]:
        """A loop over a derived variable: bounds, recovery, guards, then the body."""
        v = f.var
        rel = self.prov.defining(v)
        if isinstance(rel, Coord):  # iterate the coordinates again, under the new name
            u = self.prov.defining(rel.pos).var
            self.vn[u] = self.var(v)
            return self.lower_forall(replace(f, var=u), scope)
        if isinstance(rel, Precomputed):  # walk the variable's values again, named as the copy
            previous = self.vn.get(rel.var)
            self.vn[rel.var] = self.var(v)
            try:
                return self.lower_forall(replace(f, var=rel.var, body=_renamed(f.body, v, rel.var)), scope)
            finally:
                if previous is None:
                    del self.vn[rel.var]
                else:
                    self.vn[rel.var] = previous
        if isinstance(rel, (Split, Divide)) and v == rel.inner and rel.outer in scope.coords:
            parent = rel.parent
            if self.prov.defining(parent) is None and self._walked(f.body, parent, scope):
                return self._lower_window(f, rel, scope)
        lo, hi = self.range_of(v, scope)
        vname = self.var(v)
        inner = scope.with_coord(v, Var(vname))
        before: list[IRStmt] = []
        body: list[IRStmt] = []
        tagged = f.unit != "NotParallel"
        # the inner piece of an original variable's split: the last piece gets a shorter
        # bound instead of a break (none may leave an OpenMP loop; a loop without one
        # vectorizes)
        cut = isinstance(rel, (Split, Divide)) and v == rel.inner and rel.outer in scope.coords \
            and (tagged or self.prov.defining(rel.parent) is None)
        if cut:
            plo, phi = self.range_of(rel.parent, scope)
            start = mul(scope.coords[rel.outer], self._block_size(rel, scope))
            hi = Min((hi, sub(sub(phi, plo), start)))
        outer_guards, self.guards = self.guards, []
        inner, stmts = self._recover_up(v, inner, before, scope.with_coord(v, lo), tagged, cut)
        guards, self.guards = self.guards, outer_guards
        body += stmts
        # compound subscripts' variables computed from the loops bound now
        inner, solved, more = self.recover_solved(inner)
        body += solved
        guards = guards + more
        rest = self._derived_body(f.body, inner)
        body += [If(conj(guards), block(rest))] if guards and rest else rest
        return before + [self._for(f, vname, lo, hi, body, scope)]

    def _walked(self, s: Stmt, u: IndexVar, scope) -> bool:
        """Whether some operand in ``s`` iterates ``u`` sparsely (cannot locate it)."""
        get = self.iter_of(scope, u)
        return any(get(a) is not None for a in self._accesses_of(s))

    def _lower_window(self, f: Forall, rel, scope) -> list[IRStmt]:
        """The inner piece of a coordinate split over a sparsely walked variable: the
        parent's loop restricted to the coordinates of the current piece."""
        parent = rel.parent
        lo, hi = self.range_of(parent, scope)
        start = add(lo, mul(scope.coords[rel.outer], self._block_size(rel, scope)))
        self.window[parent] = (start, Min((add(start, self._block_size(rel, scope)), hi)))
        try:
            return self.lower_forall(replace(f, var=parent), scope)
        finally:
            del self.window[parent]

    def _recover_up(self, v: IndexVar, scope, before: list[IRStmt], start,
                    tagged: bool, cut: bool = False) -> tuple[object, list[IRStmt]]:
        """Bind every variable that ``v`` completes, walking up the provenance graph.
        ``start`` binds the loop being lowered to its first value (where tracked
        positions are searched for). ``cut``: the loop's bound already stops at the end of
        ``v``'s parent, which then needs no guard; the parent's own ancestors still do (a
        split of a split's inner piece runs past the original variable's end)."""
        out: list[IRStmt] = []
        rel = self.prov.defining(v)
        if rel is None:
            return scope, out
        if isinstance(rel, (Split, Divide)):
            if rel.outer not in scope.coords or rel.inner not in scope.coords:
                return scope, out
            p = rel.parent
            value = self._value(p, scope)
            first = self._value(p, start)  # where the loop being lowered starts
            pname = self.var(p)
            out.append(Decl("int64_t", pname, value))
            plo, phi = self.range_of(p, scope)
            if cut:
                pass  # the loop's bound stops at the parent's end
            elif tagged:
                # no break out of an OpenMP or SIMD loop: a parallel piece recovering the
                # parent past its end skips the body instead
                self.guards.append(lt(Var(pname), phi))
            else:
                out.append(If(Bin(">=", Var(pname), phi), block(Break())))
            scope = scope.with_coord(p, Var(pname))
            if isinstance(self.prov.defining(p), Pos):
                return self._from_position(self.prov.defining(p), p, scope, before, out, first)
            inner, more = self._recover_up(p, scope, before, start, tagged)
            return inner, out + more
        if isinstance(rel, Bound):
            out.append(Decl("int64_t", self.var(rel.var), scope.coords[v]))
            scope = scope.with_coord(rel.var, Var(self.var(rel.var)))
            inner, more = self._recover_up(rel.var, scope, before, start, tagged)
            return inner, out + more
        if isinstance(rel, Pos):
            return self._from_position(rel, v, scope, before, out, self._value(v, start))
        if isinstance(rel, Fuse):
            return self._unfuse(rel, v, scope, out)
        raise TypeError(type(rel).__name__)

    def _unfuse(self, rel: Fuse, v: IndexVar, scope, out: list[IRStmt]):
        """Coordinates of a fused variable: ``outer = f / |inner|``, ``inner = f % |inner|``,
        and so on down a fused variable fused again (``fuse(i,j,f),fuse(f,k,g)``)."""
        (lo_o, _), (lo_i, hi_i) = self.range_of(rel.outer, scope), self.range_of(rel.inner, scope)
        n = sub(hi_i, lo_i)
        f = scope.coords[v]
        for u, value in ((rel.outer, add(lo_o, Bin("/", f, n))), (rel.inner, add(lo_i, Bin("%", f, n)))):
            below = self.prov.defining(u)
            if below is not None and not isinstance(below, Fuse):
                raise ScheduleError(f"{rel}: fusing split or position variables in coordinate space "
                                    "is not supported")
            out.append(Decl("int64_t", self.var(u), value))
            scope = scope.with_coord(u, Var(self.var(u)))
            if below is not None:
                scope, out = self._unfuse(below, u, scope, out)
        return scope, out

    def _from_position(self, rel: Pos, pvar: IndexVar, scope, before: list[IRStmt],
                       out: list[IRStmt], first: IRExpr):
        """Coordinates (and operand positions) at position ``pvar`` of ``rel.access``.

        Levels above the iterated one, when fused, are tracked: their positions are
        found by binary search at the loop's ``first`` position and advanced as the
        position grows."""
        a = rel.access
        fmt = self.fmt(a.tensor)
        levels = self._pos_levels(rel)
        segments = self._segments(rel, scope)
        parent = self._pos_parent(rel, scope)
        bottom = levels[-1]
        p = scope.coords[pvar]
        positions: dict[int, IRExpr] = {bottom: p}
        # tracked levels, innermost first: search where the loop starts, then advance
        start = first
        for k in reversed(levels[:-1]):
            child = self.names(a.tensor, k + 1)
            child_level = fmt.levels[k + 1]
            qname = self._unique(f"{self.var(self.level_var(a, k))}_pos")
            seg_lo, seg_hi = segments[k]
            before += self._search(qname, seg_lo, seg_hi, start,
                                   lambda q: child_level.pos_bounds(child, ParentPos(q))[0])
            nxt = child_level.pos_bounds(child, ParentPos(add(Var(qname), Const(1))))[0]
            out.append(While(Bin(">=", positions[k + 1], nxt), block(IRAssign(Var(qname), Const(1), "+="))))
            positions[k] = Var(qname)
            start = Var(qname)
        coords: dict[int, IRExpr] = {}
        for k in levels:
            level = fmt.levels[k]
            names = self.names(a.tensor, k)
            if level.has_pos_iter:
                coords[k] = level.pos_access(names, positions[k], self._ancestors(scope, a, k))
            else:  # dense top level: position minus the parent's offset
                coords[k] = sub(positions[k], mul(parent.lo, level.dimension(names)))
            u = self.level_var(a, k)
            out.append(Decl("int64_t", self.var(u), coords[k]))
            scope = scope.with_coord(u, Var(self.var(u)))
            found = level.pos_found(names, positions[k]) if level.has_pos_iter else None
            if found is not None:
                raise ScheduleError(f"{rel}: level {k + 1} of {a.tensor} ({level}) has gaps")
        items = [((a, k), ParentPos(positions[k])) for k in levels]
        return scope.with_pos(items), out

    def _search(self, q: str, lo: IRExpr, hi: IRExpr, target: IRExpr, start) -> list[IRStmt]:
        """``q`` = the last position in ``[lo, hi)`` whose segment starts at or before
        ``target`` (binary search; segments are sorted)."""
        top, mid = self._unique(f"{q}_hi"), self._unique(f"{q}_mid")
        return [
            Decl("int64_t", q, lo),
            Decl("int64_t", top, sub(hi, Const(1))),
            While(lt(Var(q), Var(top)), block(
                Decl("int64_t", mid, add(Var(q), Bin("/", add(sub(Var(top), Var(q)), Const(1)), Const(2)))),
                If(Bin("<=", start(Var(mid)), target), block(IRAssign(Var(q), Var(mid))),
                   block(IRAssign(Var(top), sub(Var(mid), Const(1))))),
            )),
        ]

    def lower_bound(self, name: str, level, names, ancestors, lo: IRExpr, hi: IRExpr,
                    coord: IRExpr) -> list[IRStmt]:
        """``name`` = the first position in ``[lo, hi)`` whose coordinate is ``>= coord``."""
        top, mid = self._unique(f"{name}_hi"), self._unique(f"{name}_mid")
        return [
            Decl("int64_t", name, lo),
            Decl("int64_t", top, hi),
            While(lt(Var(name), Var(top)), block(
                Decl("int64_t", mid, add(Var(name), Bin("/", sub(Var(top), Var(name)), Const(2)))),
                If(lt(level.pos_access(names, Var(mid), ancestors), coord),
                   block(IRAssign(Var(name), add(Var(mid), Const(1)))),
                   block(IRAssign(Var(top), Var(mid)))),
            )),
        ]

    def _derived_body(self, body: Stmt, scope) -> list[IRStmt]:
        """The loop body once derived variables are bound: locate operands and results at
        the recovered coordinates (an ordered operand level that cannot locate by binary
        search), refusing operands that would have to be walked."""
        accs = self._accesses_of(body)
        lhs = self._lhs_of(body)
        located, stmts = self.resolve(scope, accs, lhs)
        while True:
            located, searched = self._search_locate(located, accs)
            if not searched:
                break
            located, more = self.resolve(located, accs, lhs)  # the levels below that locate
            stmts += searched + more
        for a in accs:
            decl = self.decls[a.tensor]
            k = self.resolved_depth(located, a)
            in_place = a.tensor == self.result and self.shared is not None
            if decl.role in ("input", "result") and not in_place and k < decl.order \
                    and self.level_var(a, k) in located.coords:
                level = decl.format.levels[k]
                if decl.role == "result":
                    raise ScheduleError(
                        f"{a.tensor}: level {k + 1} ({level}) of the result is indexed by "
                        f"{self.level_var(a, k)}, which a derived loop binds by coordinate (the "
                        "pieces of a split), but a result level is appended only from a loop over "
                        "its own coordinate; compute into a dense level there (a dense result)")
                raise ScheduleError(
                    f"{a.tensor}: level {k + 1} ({level}) is indexed by {self.level_var(a, k)}, which "
                    "a derived loop binds by coordinate, but it cannot be reached by coordinate "
                    "(apply pos to that operand, or keep its loop in coordinate space)")
        return stmts + self._guarded(body, located, [], {}, self._may_miss(body, located))

    def _search_locate(self, scope, accs) -> tuple[object, list[IRStmt]]:
        """Locate, by binary search in its parent's segment, each operand level whose
        coordinate a derived loop bound but that has no locate (a compressed level beside
        the operand ``pos`` walks, ``pos(i,ip,a(i))`` of ``a(i) * b(i)``; the pieces of a
        split co-iterated loop): the position holding the coordinate, or -1 when none does,
        which the body's guards treat as an absent entry. Returns the new scope and the
        searches (none when no level qualifies)."""
        new: list = []
        out: list[IRStmt] = []
        for a in accs:
            decl = self.decls[a.tensor]
            k = self.resolved_depth(scope, a)
            if decl.role != "input" or k >= decl.order:
                continue
            level, names = decl.format.levels[k], self.names(a.tensor, k)
            v = self.level_var(a, k)
            parent = scope.pos.get((a, k - 1), ParentPos(Const(0)))
            if v not in scope.coords or level.has_locate or parent.hi is not None or \
                    not cut_by_coordinate(level, names):
                continue
            anc = self._ancestors(scope, a, k)
            at, q = self._unique(f"p{names.tensor}{names.k}_at"), self._unique(f"p{names.tensor}{names.k}")
            begin, end = level.pos_bounds(names, ParentPos(parent.lo), anc)
            coord = scope.coords[v]
            search = self.lower_bound(q, level, names, anc, begin, end, coord)
            search.append(If(conj([lt(Var(q), end), Bin("==", level.pos_access(names, Var(q), anc), coord)]),
                             block(IRAssign(Var(at), Var(q)))))
            out.append(Decl("int64_t", at, Const(-1)))
            # below a position that may be missing (-1), its segment is not read
            out += [If(Bin(">=", parent.lo, Const(0)), block(*search))] if parent.may_fail else search
            new.append(((a, k), ParentPos(Var(at), may_fail=True)))
        return (scope.with_pos(new) if new else scope), out

    def _window_bounds(self, it, begin: IRExpr, end: IRExpr, scope, out: list[IRStmt]) -> tuple[IRExpr, IRExpr]:
        """Narrow iterator ``it``'s range to the coordinates of the current window."""
        lo, hi = self.window[it.var]
        level = self.fmt(it.access.tensor).levels[it.level]
        names = self.names(it.access.tensor, it.level)
        if not cut_by_coordinate(level, names):
            raise ScheduleError(f"split of {it.var}: {it.access.tensor}'s level {it.level + 1} ({level}) "
                                "must be ordered, unique and gapless to be cut by coordinate")
        base = f"p{self.cn[it.access.tensor]}{it.level + 1}"
        first, last = self._unique(f"{base}_first"), self._unique(f"{base}_last")
        anc = self._ancestors(scope, it.access, it.level)
        out += self.lower_bound(first, level, names, anc, begin, end, lo)
        if it.var in self.short_windows:  # a filter's few taps: scan to the window's end
            out += [Decl("int64_t", last, Var(first)),
                    While(conj([lt(Var(last), end), lt(level.pos_access(names, Var(last), anc), hi)]),
                          block(IRAssign(Var(last), Const(1), "+=")))]
        else:
            out += self.lower_bound(last, level, names, anc, Var(first), end, hi)
        return Var(first), Var(last)

