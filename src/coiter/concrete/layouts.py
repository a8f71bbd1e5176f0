"""Seeing tensors with layouts (blocked, DIA, ELL) through their level variables.

Before loops are ordered, every access to such a tensor is rewritten over one index
variable per storage level, so the iteration graph, merge lattices and lowering work
on the levels as they do for any other format:

* a split mode ``i`` (block ``b``) becomes block and in-block variables with the
  provenance relation ``i = i_b * b + i_e`` (:class:`Split`); lowering recovers ``i``
  from them, guarded by ``i < N``, to locate the other operands;
* a hidden level (DIA's diagonal, ELL's slot) gets a fresh variable summed where the
  access sits: each logical entry is stored under exactly one hidden coordinate, so
  ``B(i,j) = sum(d, B'(d,j,i))`` and the sum distributes over the product around it.

This is valid where the access is a multiplicative factor of the innermost reduction
around it (or of the whole right-hand side), and, for splits, where every other tensor
using a split variable (the result included) is dense. Elsewhere (a
sum such as ``DIA + CSR``) the operand is converted at run time to a format without a
layout, like the paper's runtime conversions.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ..formats.format import Format, coo, csr
from ..notation.ast import (
    Access, Assignment, BinaryExpr, Call, Div, Expr, IndexVar, Mul, Neg, Reduction, accesses, children,
    walk, with_children,
)
from .provenance import Split


@dataclass
class LayoutPlan:
    """The assignment over level variables, formats as kernels see them, the split
    relations, and operands converted to a format without a layout (new name → original)."""

    assignment: Assignment
    formats: dict[str, Format]
    relations: tuple[Split, ...] = ()
    converted: dict[str, str] = field(default_factory=dict)
    expanded: frozenset[str] = frozenset()  # tensors accessed through their levels


def plain_format(fmt: Format) -> Format:
    """What an operand with a layout is converted to where it cannot be expanded: COO when
    the layout only interleaves arrays (AoS COO), else CSR for matrices."""
    assert fmt.layout is not None
    return csr if fmt.order == 2 and fmt.layout.reshapes else coo(fmt.order)


def _factors(e: Expr, ok: bool, out: set[Access], elsewhere: set[Access]) -> None:
    """Collect accesses that are multiplicative factors of their innermost reduction into
    ``out``, and those read in other places (a sum's term, a divisor, a call's argument)
    into ``elsewhere``."""
    if isinstance(e, Access):
        (out if ok else elsewhere).add(e)
    elif isinstance(e, Reduction):  # a hidden variable sums padding in: only under sums
        _factors(e.body, e.op == "sum", out, elsewhere)
    elif isinstance(e, Neg):
        _factors(e.operand, ok, out, elsewhere)
    elif isinstance(e, Call):  # an intrinsic's arguments are no factors of the product
        for arg in e.args:
            _factors(arg, False, out, elsewhere)
    elif isinstance(e, Mul):
        _factors(e.a, ok, out, elsewhere)
        _factors(e.b, ok, out, elsewhere)
    elif isinstance(e, Div):
        _factors(e.a, ok, out, elsewhere)
        _factors(e.b, False, out, elsewhere)
    elif isinstance(e, BinaryExpr):
        _factors(e.a, False, out, elsewhere)
        _factors(e.b, False, out, elsewhere)


def factor_accesses(e: Expr) -> set[Access]:
    """The accesses of ``e`` read as multiplicative factors of their innermost reduction
    everywhere they occur. An access read both ways (``(B - B) * B / (B * B)``) reads
    through its levels everywhere once expanded, so each of its layout's empty slots would
    add the right-hand side's value there (0 / 0 = NaN) instead of nothing."""
    out: set[Access] = set()
    elsewhere: set[Access] = set()
    _factors(e, True, out, elsewhere)
    return out - elsewhere


class _Expander:
    def __init__(self, assignment: Assignment, formats: Mapping[str, Format],
                 fresh_tensor: Callable[[str], str], plain: frozenset[str]) -> None:
        self.assignment = assignment
        self.plain = plain
        self.formats = dict(formats)
        self.fresh_tensor = fresh_tensor
        self.taken = {v.name for n in walk(assignment.rhs) if isinstance(n, Access) for v in n.indices}
        self.taken |= {v.name for v in assignment.lhs.indices}
        self.taken |= {n.var.name for n in walk(assignment.rhs) if isinstance(n, Reduction)}
        self.splits: dict[IndexVar, Split] = {}
        self.expanded: dict[Access, tuple[tuple[IndexVar, ...], tuple[IndexVar, ...]]] = {}
        self.converted: dict[str, str] = {}
        self.renamed: dict[str, str] = {}

    def fresh(self, base: str) -> IndexVar:
        name, n = base, 1
        while name in self.taken:
            name, n = f"{base}{n}", n + 1
        self.taken.add(name)
        return IndexVar(name)

    def plan(self) -> None:
        factors = factor_accesses(self.assignment.rhs)
        lhs = self.assignment.lhs
        result_dense = self.formats[lhs.tensor].is_dense or not lhs.indices
        uses = list(dict.fromkeys(accesses(self.assignment.rhs)))
        reshaped = [a for a in uses if self.formats[a.tensor].layout is not None
                    and self.formats[a.tensor].layout.reshapes]  # type: ignore[union-attr]
        plain = {a for a in reshaped if a not in factors or len(set(a.indices)) < len(a.indices)}
        plain |= {a for a in uses if a.tensor in self.plain}
        # a plain (converted) access iterates split variables, which then cannot be split
        changed = True
        while changed:
            changed = False
            for a in reshaped:
                if a not in plain and not self._can_split(a, result_dense, uses, plain):
                    plain.add(a)
                    changed = True
        original = dict(self.formats)  # expanding an access replaces its tensor's format
        for a in uses:
            fmt = original[a.tensor]
            if fmt.layout is None:
                continue
            if a not in plain:
                self._expand(a, fmt)
            elif a.tensor not in self.renamed:
                name = self.fresh_tensor(f"{a.tensor}_plain")
                self.renamed[a.tensor] = name
                self.converted[name] = a.tensor
                self.formats[name] = plain_format(fmt)

    def _blocks(self, a: Access, v: IndexVar) -> set[int]:
        """Block sizes ``a``'s layout splits variable ``v`` by (0: not split)."""
        layout = self.formats[a.tensor].layout
        assert layout is not None
        return {c.block for c in layout.coords if c.mode is not None and a.indices[c.mode] == v}

    def _can_split(self, a: Access, result_dense: bool, uses: list[Access], plain: set[Access]) -> bool:
        """Whether ``a``'s split variables can be recovered for every other use of them."""
        for c in self.formats[a.tensor].layout.coords:  # type: ignore[union-attr]
            if not c.block:
                continue
            if not result_dense:
                return False
            v = a.indices[c.mode]
            for b in uses:
                if b == a or v not in b.indices:
                    continue
                # other users locate by the recovered coordinate (dense), or split it alike
                fb = self.formats[b.tensor]
                if fb.layout is None and not fb.is_dense:
                    return False
                if fb.layout is not None and (b in plain or self._blocks(b, v) != {c.block}):
                    return False
        return True

    def _expand(self, a: Access, fmt: Format) -> None:
        level_vars: list[IndexVar] = []
        hidden: list[IndexVar] = []
        for k, c in enumerate(fmt.layout.coords):  # type: ignore[union-attr]
            if c.mode is None:
                h = self.fresh(f"{a.tensor.lower()}{k + 1}")
                hidden.append(h)
                level_vars.append(h)
                continue
            v = a.indices[c.mode]
            if not c.block:
                level_vars.append(v)
                continue
            s = self.splits.get(v)
            if s is None:
                s = Split(v, self.fresh(f"{v.name}_b"), self.fresh(f"{v.name}_e"), c.block, layout=True)
                self.splits[v] = s
            level_vars.append(s.inner if c.inner else s.outer)
        self.expanded[a] = (tuple(level_vars), tuple(hidden))
        self.formats[a.tensor] = fmt.physical

    # -- rewriting ---------------------------------------------------------------------------
    def rewrite(self, e: Expr, extra: list[IndexVar]) -> Expr:
        """``e`` over level variables; hidden variables of expanded factors go to ``extra``
        (the innermost enclosing reduction sums them)."""
        if isinstance(e, Access):
            if e in self.expanded:
                level_vars, hidden = self.expanded[e]
                extra.extend(h for h in hidden if h not in extra)
                return Access(e.tensor, level_vars)
            if e.tensor in self.renamed:
                return Access(self.renamed[e.tensor], e.indices)
            return e
        if isinstance(e, Reduction):
            vars_: list[IndexVar] = []
            op = e.op
            while isinstance(e, Reduction) and e.op == op:
                vars_.append(e.var)
                e = e.body
            return self.reduce(vars_, e, op)
        return with_children(e, [self.rewrite(c, extra) for c in children(e)])

    def reduce(self, vars_: list[IndexVar], body: Expr, op: str) -> Expr:
        """``op(vars_, body)`` over level variables: split variables reduced as their block
        and in-block parts, and the hidden variables of factors inside reduced here too."""
        inner: list[IndexVar] = []
        out = self.rewrite(body, inner)
        summed: list[IndexVar] = []
        for v in vars_:
            s = self.splits.get(v)
            summed += [s.outer, s.inner] if s is not None else [v]
        for v in reversed(summed + inner):
            out = Reduction(v, out, op)
        return out


def expand_layouts(assignment: Assignment, formats: Mapping[str, Format],
                   fresh_tensor: Callable[[str], str],
                   plain: frozenset[str] = frozenset()) -> LayoutPlan:
    """Rewrite accesses to tensors with layouts over their level variables (see module doc);
    tensors named in ``plain`` are converted instead."""
    if all(formats[a.tensor].layout is None for a in accesses(assignment.rhs)):
        return LayoutPlan(assignment, dict(formats))
    x = _Expander(assignment, formats, fresh_tensor, plain)
    x.plan()
    new = replace(assignment, rhs=x.reduce([], assignment.rhs, "sum"))
    expanded = frozenset(a.tensor for a in x.expanded)
    return LayoutPlan(new, x.formats, tuple(x.splits.values()), x.converted, expanded)
