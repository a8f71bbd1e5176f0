"""Lowering of compound subscripts' index equations (:mod:`coiter.concrete.equations`).

A :class:`~coiter.concrete.provenance.Solved` relation says which variable of an equation
is computed from loops over the others. This mixin of the lowerer

- computes it, with guards that it lies in its range and divides exactly
  (:meth:`recover_solved`);
- cuts a loop over a subscript's variable to the window its solved variable allows, once
  the other loops are bound (an index *resolve* loop, :meth:`_solution_window`);
- walks a loop over a result variable only through the offsets whose window of a sparse
  level holds a stored coordinate (an index *reduction* loop over non-empty subsections,
  Liu et al., OOPSLA 2024): iterators with a ``slice`` (:meth:`_slicing`,
  :meth:`_next_window`).
"""
from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Iterable, Mapping

from ..concrete.provenance import Solved
from ..concrete.stmt import Forall
from ..ir.nodes import (
    Assign as IRAssign, Bin, Const, Decl, If, IRExpr, IRStmt, Max, Min, Select, Un, Var, While,
    add, block, conj, eq, lt, mul,
)
from ..lattice.lattice import Iter
from .derived import cut_by_coordinate
from ..notation.ast import Access, IndexVar

if TYPE_CHECKING:
    from .lower import Scope


def affine_ir(terms: Iterable[tuple[int, IndexVar]], const: int,
              coords: Mapping[IndexVar, IRExpr]) -> IRExpr:
    """``sum(c * coords[v]) + const`` as readable C (``wq - 2 * w``, not ``wq + w * -2``)."""
    total: IRExpr | None = None
    for c, v in terms:
        term = coords[v] if abs(c) == 1 else mul(Const(abs(c)), coords[v])
        total = (term if c > 0 else Un("-", term)) if total is None else \
            Bin("+" if c > 0 else "-", total, term)
    if total is None:
        return Const(const)
    return Bin("+" if const > 0 else "-", total, Const(abs(const))) if const else total


class EquationLoops:
    """Solved variables, solution windows and subsection iterators (mixed into Lowerer)."""

    @cached_property
    def solved(self) -> tuple[Solved, ...]:
        """The program's index-equation solutions (read by every case of every loop)."""
        return tuple(r for r in self.prog.env.relations if isinstance(r, Solved))

    def _solve(self, sol: Solved, scope: Scope) -> tuple[list[IRStmt], list[IRExpr], IRExpr]:
        """The coordinate of an index equation's solved variable from its bound loops, with
        guards that it is a coordinate of its mode (``0 <= v < extent``, an exact quotient)."""
        total = affine_ir(sol.terms, sol.const, scope.coords)
        name = self.var(sol.var)
        extent = self.extent[sol.var]
        if sol.divisor == 1:
            guards = [] if sol.checked else [Bin(">=", Var(name), Const(0)), lt(Var(name), extent)]
            return [Decl("int64_t", name, total)], guards, Var(name)
        num = self._unique(f"{name}_num")
        stmts: list[IRStmt] = [Decl("int64_t", num, total),
                               Decl("int64_t", name, Bin("/", Var(num), Const(sol.divisor)))]
        guards = [Bin(">=", Var(num), Const(0)),
                  eq(Bin("%", Var(num), Const(sol.divisor)), Const(0)), lt(Var(name), extent)]
        return stmts, guards, Var(name)

    def recover_solved(self, scope: Scope) -> tuple[Scope, list[IRStmt], list[IRExpr]]:
        """Bind every solved variable whose loops are bound in ``scope``: its statements and
        guards."""
        stmts: list[IRStmt] = []
        guards: list[IRExpr] = []
        for sol in self.solved:
            if sol.var in scope.coords or any(v not in scope.coords for v in sol.loops):
                continue
            s, g, value = self._solve(sol, scope)
            stmts += s
            guards += g
            scope = scope.with_coord(sol.var, value)
        return scope, stmts, guards

    def _solution_window(self, f: Forall, scope: Scope) -> tuple[IRExpr, IRExpr] | None:
        """The coordinates ``[lo, hi)`` of a compound subscript's variable ``t`` that keep a
        variable solved from it inside its range, once the solution's other loops are bound:
        a pooling window ``t in [2w, 2w + |q|)`` for ``q = t - 2w`` (Liu et al.'s index
        resolve loop). The operands' levels walked by ``t`` are cut by binary search; None
        when there is no such window or a level cannot be cut by coordinate."""
        v = f.var
        if v in self.window:
            return None
        for sol in self.solved:
            if sol.driver != v or sol.var in scope.coords or \
                    any(w not in scope.coords for w in sol.loops if w != v):
                continue
            for a in self._accesses_of(f.body):
                fmt = self.fmt(a.tensor)
                for k, level in enumerate(fmt.levels):
                    if self.level_var(a, k) == v and not level.full and \
                            not cut_by_coordinate(level, self.names(a.tensor, k)):
                        return None
            # sol.var = (sign * v + rest) / divisor lies in [0, extent)
            sign = sol.terms[0][0]  # v's coefficient: +1 or -1
            others = [(-sign * c, w) for c, w in sol.terms if w != v]
            first = affine_ir(others, -sign * sol.const, scope.coords)  # v's bound at 0
            span = mul(Bin("-", self.extent[sol.var], Const(1)), Const(sol.divisor))
            lo, hi = (first, add(first, span)) if sign > 0 else (Bin("-", first, span), first)
            return Max((lo, Const(0))), Min((add(hi, Const(1)), self.extent[v]))
        return None

    def _slicing(self, scope: Scope, a: Access, k: int, v: IndexVar) -> Solved | None:
        """The relation under which the loop over ``v`` walks the non-empty windows of level
        ``k`` of ``a`` (Liu et al.'s index reduction loop): the level's variable stands for a
        compound subscript whose variable solved from it spans each window, ``v`` is in it
        with a positive coefficient, and every other variable of it is bound. None when the
        level cannot be walked so (it must be ordered, unique and gapless)."""
        t = self.level_var(a, k)
        level = self.fmt(a.tensor).levels[k]
        names = self.names(a.tensor, k)
        if t in scope.coords or level.full or not level.has_pos_iter or \
                not cut_by_coordinate(level, names):
            return None
        for sol in self.solved:
            sub = sol.subscript
            # a min or max sees every coordinate of the window, inside the operand or not
            if sol.driver != t or sol.var in self.result_vars or sub is None or \
                    t in self.nonsum_loops:
                continue
            coef = dict((w, c) for c, w in sub.terms)
            if coef.get(v, 0) > 0 and v != sol.var and all(
                    w in scope.coords for w in sub.vars if w not in (v, sol.var)):
                return sol
        return None

    def _window_of(self, it: Iter, scope: Scope) -> tuple[int, IRExpr, IRExpr]:
        """``(s, lo, hi)``: offset ``x`` of slice iterator ``it`` has the window
        ``[s*x + lo, s*x + hi]`` of coordinates (its solved variable over its range)."""
        sol, v = it.slice, it.var
        sub = sol.subscript
        coef = dict((w, c) for c, w in sub.terms)
        bound = affine_ir([(c, w) for c, w in sub.terms if w not in (v, sol.var)], sub.const,
                           scope.coords)
        reach = mul(Const(abs(coef[sol.var])), Bin("-", self.extent[sol.var], Const(1)))
        if coef[sol.var] > 0:
            return coef[v], bound, add(bound, reach)
        return coef[v], Bin("-", bound, reach), bound

    def _next_window(self, it: Iter, scope: Scope, start: IRExpr) -> list[IRStmt]:
        """Move slice iterator ``it`` to the first offset from ``start`` whose window holds a
        stored coordinate, skipping positions no such window holds (subsect_next)."""
        p, pend = self._iter_names(it)
        off = self.slice_offsets[it]
        s, lo, hi = self._window_of(it, scope)
        level = self._level(it)
        names = self.names(it.access.tensor, it.level)
        crd = level.pos_access(names, Var(p), self._ancestors(scope, it.access, it.level))
        if s == 1:
            skip = lt(crd, add(start, lo))
            first = Max((start, Bin("-", crd, hi)))
        else:
            num = Bin("-", crd, hi)  # offsets x >= ceil(num / s) reach crd
            ceil = Select(Bin(">=", num, Const(0)), Bin("/", add(num, Const(s - 1)), Const(s)),
                          Un("-", Bin("/", Un("-", num), Const(s))))
            first = Max((start, ceil))
            skip = Bin(">", add(mul(Const(s), first), lo), crd)
        return [While(conj([lt(Var(p), Var(pend)), skip]), block(IRAssign(Var(p), Const(1), "+="))),
                If(lt(Var(p), Var(pend)), block(IRAssign(Var(off), first)))]
