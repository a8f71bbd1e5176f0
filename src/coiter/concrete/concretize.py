"""Concretize: index notation (with reductions placed) → concrete index notation.

1. Reductions nested inside larger expressions become scalar temporaries
   (``... t ... where forall(k, t += ...)``); a reduction over the whole
   right-hand side becomes one too when every free variable is iterated first
   (TACO's SpMV form), and is otherwise an accumulation into the result.
2. A loop order concordant with every operand is chosen; operands that cannot
   be made concordant are transposed through a generated conversion.
3. Where a sparse result would be scattered into (a reduction loop encloses the
   loop of an appended result level, or the loops visit the result out of its storage
   order), a workspace takes the components (Zhang et al., PLDI 2024): over the result
   modes from the first one the loops do not visit in storage order before any
   reduction. The ``workspace`` choice says which: ``"dense"`` is a dense row workspace
   (Gustavson's algorithm) for one mode, and otherwise a dense result converted
   afterwards; a sparse policy (:mod:`coiter.formats.workspaces`) is an insert-sort-merge
   workspace of any order; ``"auto"`` takes the dense row workspace for one mode and the
   default sparse policy for more (the kernel may choose again per call).
"""
from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from ..errors import ArgumentError, FormatError, PerformanceWarning
from ..formats.format import Format, coo, dense
from ..formats.levels.workspace import WorkspaceList
from ..formats.workspaces import DENSE, policy_names
from ..lattice.graph import Edge, LoopOrder, choose_order
from ..lattice.lattice import Iter, LatticeTooLarge, build_lattice
from ..notation.affine import Equation
from ..notation.ast import (
    Access,
    Add,
    Assignment,
    Call,
    Div,
    Expr,
    IndexVar,
    Mul,
    Neg,
    Reduction,
    Sub,
    accesses,
    children,
    index_vars_of,
    map_accesses,
    with_children,
)
from ..notation.functions import computation_dtype
from ..notation.reducers import reducer
from .equations import solve_equations
from .provenance import Solved
from .layouts import LayoutPlan, expand_layouts
from .stmt import (
    Assign, ConcreteProgram, Env, Forall, Sequence, Stmt, TensorDecl, Where, walk_stmts,
)

Derived = Mapping[IndexVar, tuple[IndexVar, ...]]
AUTO = "auto"
# the sparse workspace "auto" takes where a dense one would need more than one mode
DEFAULT_POLICY = "bucket"


def _loop_vars(vs, derived: Derived) -> list[IndexVar]:
    """``vs`` with every split variable replaced by the loop variables it is recovered from."""
    out: list[IndexVar] = []
    for v in vs:
        for w in derived.get(v, (v,)):
            if w not in out:
                out.append(w)
    return out


@dataclass(frozen=True)
class _Temp:
    name: str
    reduced: tuple[IndexVar, ...]
    body: Expr
    free: frozenset[IndexVar]
    op: str = "sum"  # the reduction operator (coiter.notation.reducers)


def _peel(e: Expr, op: str = "sum") -> tuple[tuple[IndexVar, ...], Expr]:
    """Split ``sum(a, sum(b, e))`` into ``((a, b), e)`` (reductions by ``op`` only)."""
    vars_: list[IndexVar] = []
    while isinstance(e, Reduction) and e.op == op:
        vars_.append(e.var)
        e = e.body
    return tuple(vars_), e


class _Lifter:
    """Replaces nested reductions by scalar temporaries (post-order)."""

    def __init__(self, taken: set[str]) -> None:
        self.temps: list[_Temp] = []
        self._taken = taken
        # split variables and the loop variables they are recovered from (set once known)
        self.derived: Mapping[IndexVar, tuple[IndexVar, ...]] = {}
        # variables of index equations computed from loops (they stand for those loops)
        self.solved: tuple[Solved, ...] = ()

    def fresh(self, prefix: str = "t") -> str:
        """A tensor name not used yet: ``t0``, ``t1``... (or ``<prefix>0``...)."""
        for n in itertools.count():
            name = f"{prefix}{n}"
            if name not in self._taken:
                self._taken.add(name)
                return name
        raise AssertionError("unreachable")

    def lift(self, e: Expr) -> Expr:
        if isinstance(e, Reduction):
            reduced, body = _peel(e, e.op)
            body = self.lift(body)
            # a reduced variable solved from a subscript walks that subscript's variable,
            # within a window that the solution's other variables place
            mine = [s for s in self.solved if s.var in reduced and s.driver is not None]
            reduced = _driven(reduced, self.solved)
            used = _loop_vars(set(_vars_incl_temps(body, self.temps)).union(
                *(s.loops for s in mine)), {s.var: s.loops for s in self.solved})
            free = frozenset(
                v for v in used if v not in reduced
                and not set(self.derived.get(v, (None,))) <= set(reduced))
            temp = _Temp(self.fresh(), reduced, body, free, e.op)
            self.temps.append(temp)
            return Access(temp.name, ())
        return with_children(e, [self.lift(c) for c in children(e)])


def _written(a: Access, equations: tuple[Equation, ...]) -> str:
    """``a`` as the user wrote it (its compound subscripts instead of their variables)."""
    written = {eq.var: str(eq.window if eq.window is not None else eq.subscript) for eq in equations}
    return f"{a.tensor}({','.join(written.get(v, str(v)) for v in a.indices)})"


def _solved_loops(solved: tuple[Solved, ...]) -> dict[IndexVar, tuple[IndexVar, ...]]:
    """The loop variables each solved variable is computed from, through the solutions it
    uses (``ik = i + k`` with ``k = jk - j`` needs ``i``, ``jk`` and ``j``)."""
    direct = {s.var: s.loops for s in solved}

    def expand(v: IndexVar, seen: frozenset) -> tuple[IndexVar, ...]:
        if v not in direct or v in seen:
            return (v,)
        return tuple(dict.fromkeys(w for u in direct[v] for w in expand(u, seen | {v})))

    return {v: expand(v, frozenset()) for v in direct}


def _driven(reduced: tuple[IndexVar, ...], solved: tuple[Solved, ...]) -> tuple[IndexVar, ...]:
    """``reduced`` with each variable solved from a walked subscript variable replaced by
    that variable (its loop), and both variables of a diagonal where one is summed (the
    pair is one index: A(i,i)'s i0 loop sums with i's)."""
    drivers = {s.var: s.driver for s in solved if s.driver is not None}
    out = [drivers.get(v, v) for v in reduced]
    out += [w for s in solved if s.diagonal and set(s.loops) & set(reduced) for w in s.loops]
    return tuple(dict.fromkeys(out))


def _vars_incl_temps(e: Expr, temps: list[_Temp]) -> set[IndexVar]:
    """Index variables ``e`` depends on, looking through temporaries."""
    by_name = {t.name: t for t in temps}
    out: set[IndexVar] = set()
    for a in accesses(e):
        if a.tensor in by_name:
            out |= by_name[a.tensor].free
        else:
            out |= set(a.indices)
    return out


def _factors(e: Expr) -> list[Expr]:
    """The factors of product ``e``, through sums over variables a factor lacks."""
    factors: list[Expr] = []
    stack: list[Expr] = [e]
    while stack:
        e = stack.pop()
        if isinstance(e, Mul):
            stack += [e.a, e.b]
        elif isinstance(e, Reduction) and e.op == "sum":  # sum(j, B*X) = B * sum(j, X) when B lacks j
            stack.append(e.body)
        else:
            factors.append(e)
    return factors


def _pattern_operand(a: Assignment, formats: Mapping[str, Format],
                     forced: str | None = None) -> tuple[str, int] | None:
    """An operand whose stored pattern gives the result's: a factor of the whole right-hand
    side, every other operand dense, whose first levels are the result's first levels
    (same level formats over the same index variables) with only dense result levels
    below them. The result then has an entry wherever that operand has a position in
    those levels; returns the operand and the number of levels shared. Shared levels
    above the last must be unique (one result entry per coordinate). ``forced`` names the
    operand to take where other operands are sparse too (the result then stores zeros
    where they are absent); one that does not qualify is an ArgumentError."""
    result = formats[a.lhs.tensor]
    found = None
    if not all(lv.has_insert for lv in result.levels) and result.layout is None:
        for f in _factors(a.rhs):
            if not isinstance(f, Access) or formats[f.tensor].layout is not None or \
                    (forced is not None and f.tensor != forced):
                continue
            others = [x for x in accesses(a.rhs) if x is not f]
            if any(x.tensor == f.tensor for x in others) or (forced is None and not all(
                    all(lv.full for lv in formats[x.tensor].levels) for x in others)):
                continue
            found = _levels_shared(a, formats, result, f)
            if found is not None:
                break
    if found is None and forced is not None:
        raise ArgumentError(
            f"pattern_of={forced!r}: the result {a.lhs.tensor} ({result}) takes the pattern of an "
            "operand read once, as a factor of the whole right-hand side, whose first levels are "
            "the result's (same level formats over the same index variables) with only dense "
            f"levels below them; {forced} is not one")
    return found


def _levels_shared(a: Assignment, formats: Mapping[str, Format], result: Format,
                   f: Access) -> tuple[str, int] | None:
    """``f``'s tensor and how many of its first levels the result shares, or None."""
    fmt = formats[f.tensor]
    shared = 0
    while (shared < min(fmt.order, result.order) and fmt.levels[shared] == result.levels[shared]
           and f.indices[fmt.ordering[shared]] == a.lhs.indices[result.ordering[shared]]):
        shared += 1
    if shared == result.order and shared == fmt.order:
        return f.tensor, shared  # the whole pattern
    below_dense = all(lv.full and lv.has_insert for lv in result.levels[shared:])
    if shared and below_dense and all(lv.unique for lv in fmt.levels[:shared]):
        return f.tensor, shared
    return None


def concretize(
    assignment: Assignment,
    formats: Mapping[str, Format],
    dtypes: Mapping[str, np.dtype],
    result_dtype: np.dtype,
    workspace: str = AUTO,
    reserved: frozenset[str] = frozenset(),
    equations: tuple[Equation, ...] = (),
    padded: bool = False,
    gather: frozenset[IndexVar] | None = None,
    fills: Mapping[str, Any] | None = None,
    pattern_of: str | None = None,
    scatter_sums: bool = True,
) -> ConcreteProgram:
    """Turn an assignment whose reductions are explicit into concrete index notation.

    ``formats``/``dtypes`` cover every tensor named in the assignment (result included).
    ``workspace`` chooses the workspace of a scattered result (see the module's step 3).
    A result format kernels cannot assemble directly (hashed, DIA, ELL, blocked) is
    computed in its assembly format and converted afterwards. New tensors (temporaries,
    transposed operands) take names outside ``formats`` and ``reserved``. ``equations``
    define the variables of compound subscripts (:mod:`coiter.notation.affine`); with
    ``padded`` they may leave their modes, so every solved coordinate is guarded;
    ``gather`` names result variables whose subscripts are walked per output, not scattered
    (None: the default choice, :func:`coiter.concrete.equations.default_gather`).
    ``fills`` gives the value of the entries a tensor does not store (0 by default; the
    result's, where it is sparse: the value the right-hand side takes where no operand
    is stored). ``pattern_of`` names an operand whose pattern the result takes though other
    operands are sparse (:func:`_pattern_operand`). ``scatter_sums`` lets a sum into a dense
    result add its terms one at a time where merging them costs more
    (:func:`_sequenced_terms`); schedules, which name the merged program's loops and
    sub-expressions, need it off.
    """
    lhs = assignment.lhs
    fills = dict(fills or {})
    sequenced = _sequenced_terms(assignment, formats, scatter_sums)
    if sequenced is not None and pattern_of is None:  # a sum: no operand's pattern is the result's
        return _sequence(assignment, *sequenced, formats, dtypes, result_dtype, workspace,
                         equations, padded, gather, fills)
    assignment = replace(assignment, rhs=_wrap(*_hoist(assignment.rhs)))
    final_fmt = formats[lhs.tensor]
    lp = _plan_loops(assignment, {**formats, lhs.tensor: final_fmt.assembly_format()}, reserved,
                     equations, padded, gather)
    plan, lifter, body, temps, lo = lp.layouts, lp.lifter, lp.body, lp.temps, lp.order
    top_reduced, derived, operand_accesses = lp.top_reduced, lp.derived, lp.operands
    free = list(lhs.indices)
    result_fmt = plan.formats[lhs.tensor]
    formats = plan.formats
    dtypes = {**dtypes, **{new: dtypes[old] for new, old in plan.converted.items()}}
    rank = {v: n for n, v in enumerate(lo.order)}

    decls: dict[str, TensorDecl] = {}
    fills.update({new: fills.get(old, 0) for new, old in plan.converted.items()})
    # a result over an operand's pattern is zero where the operand is absent
    if pattern_of is not None and any(fills.values()):
        raise ArgumentError(f"pattern_of={pattern_of!r}: a result over an operand's pattern is zero "
                            "where the operand is absent, so no operand may have a nonzero fill value")
    pattern = _pattern_operand(assignment, formats, pattern_of) if not any(fills.values()) else None
    for name, fmt in formats.items():
        role = "result" if name == lhs.tensor else "input"
        shares = role == "result" and pattern is not None
        decls[name] = TensorDecl(name, fmt, np.dtype(dtypes[name]), role,
                                 converted_from=plan.converted.get(name),
                                 pattern_of=pattern[0] if shares else None,
                                 pattern_levels=pattern[1] if shares else 0,
                                 fill=fills.get(name, 0))
    renames: dict[Access, Access] = {}
    for idx, new_fmt in lo.transposed:
        acc = operand_accesses[idx]
        new_name = lifter.fresh(f"{acc.tensor}_T")
        source = decls[acc.tensor].converted_from or acc.tensor
        decls[new_name] = replace(decls[acc.tensor], name=new_name, format=new_fmt,
                                  converted_from=source)
        renames[acc] = Access(new_name, acc.indices)
    if renames:
        body = _rename(body, renames)
        temps = [replace(t, body=_rename(t.body, renames)) for t in temps]
    temp_types = _temp_dtypes(temps, body, {n: d.dtype for n, d in decls.items()}, result_dtype)
    for t in temps:
        decls[t.name] = TensorDecl(t.name, Format([]), temp_types[t.name], "temp", reducer=t.op)

    # --- whole-RHS reduction: temporary (gather) or accumulation (scatter) ------------------
    # a result variable computed from loops (a transposed convolution's O(2*i+k), a
    # scattered input) takes several iterations' values: they add up (one computed in order
    # within a window takes each value once)
    # a diagonal's window may hold no entry: below an appended result level, the entry is
    # appended anyway and must start at zero
    accumulate = any((s.var in free and not s.windowed) or s.diagonal for s in lp.solved)
    env = Env(relations=plan.relations + lp.solved)
    if top_reduced:
        if not any(f in derived for f in free) and all(
                rank[f] < rank[r] for f in free for r in top_reduced):
            t = _Temp(lifter.fresh(), top_reduced, body, frozenset(free))
            temps.append(t)
            decls[t.name] = TensorDecl(t.name, Format([]), np.dtype(result_dtype), "temp")
            body = Access(t.name, ())
        else:
            accumulate = True

    result_conversion = final_fmt if final_fmt != result_fmt else None
    builder = _Builder(lo.order, temps, derived,
                       {s.driver: s.loops for s in lp.solved if s.diagonal and s.driver is not None})
    scattered = _scattered_levels(lhs, result_fmt, lo.order, top_reduced if accumulate else ())
    if not lo.result_concordant or scattered:
        modes = _workspace_modes(lhs, result_fmt, lo.order, top_reduced if accumulate else (),
                                 derived)
        if workspace not in (AUTO, *policy_names()):
            raise FormatError(f"unknown workspace {workspace!r}: choose one of "
                              f"{', '.join((AUTO, *policy_names()))}")
        row = modes is not None and len(modes) == 1 and result_fmt.levels[-1].unique
        policy = workspace if workspace != AUTO else (DENSE if row else DEFAULT_POLICY)
        if modes is not None and (policy != DENSE or row):
            w = Access(lifter.fresh("w"), modes)
            row_ws = WorkspaceList(ordered=result_fmt.levels[-1].ordered)
            wfmt, wpolicy = (Format([row_ws]), None) if policy == DENSE else (coo(len(modes)), policy)
            decls[w.tensor] = TensorDecl(w.tensor, wfmt, np.dtype(result_dtype), "workspace", modes,
                                         policy=wpolicy)
            stmt = builder.workspace(lhs, w, body)
            return ConcreteProgram(stmt, _used(decls, stmt), lhs.tensor, env, result_conversion)
        # the dense workspace of more than one mode: compute densely, convert afterwards
        result_conversion = final_fmt
        decls[lhs.tensor] = replace(decls[lhs.tensor], format=dense(len(free)))
    stmt = builder.build((), lhs, body, accumulate, frozenset())
    return ConcreteProgram(stmt, _used(decls, stmt), lhs.tensor, env, result_conversion)


# Merged iteration over the terms of a sum has up to 2**n lattice points per loop for n
# sparse terms, each with a case per sub-point (3**n), nested once per loop (3 terms of a
# 3-tensor: 6859 cases; 4: 274625, and a minute of lowering). Past this estimate a dense
# result takes the terms one at a time.
MAX_MERGED_CASES = 50_000

# A dense result is written at random, so a sum into it need not merge its terms: each can
# add into it on its own, as a scatter into a dense workspace does (workspaces paper). That
# pays from this many merged cases (a three-way union's 19, or two-way unions at two nested
# loops, 25): the merge's branches on which operands hold a coordinate mispredict on
# unrelated patterns, and the second pass over the result costs less. One thread, merged
# time / one at a time (benchmarks/dense_sums.py): 2M-vectors of 20,000 nonzeros, 3 terms
# 2.7, 5 terms 6.5; CSR 500x500, 3 terms 5.0; DCSR 2000x2000, 2 terms 1.2; CSR 2000x2000
# (a 32 MB result), 3 terms 1.0, or 0.61 where they share one pattern. A two-way union (5
# cases) stays merged: CSR 2000x2000, 2 terms 0.68.
SCATTERED_SUM_CASES = 10


def _sum_terms(e: Expr) -> list[Expr]:
    """The terms of a sum (``a - b`` has the terms ``a`` and ``-b``)."""
    if isinstance(e, Add):
        return _sum_terms(e.a) + _sum_terms(e.b)
    if isinstance(e, Sub):
        return _sum_terms(e.a) + [Neg(t) for t in _sum_terms(e.b)]
    return [e]


def _sequenced_terms(assignment: Assignment, formats: Mapping[str, Format],
                     scatter_sums: bool) -> tuple[list[Expr], bool] | None:
    """The terms to compute one after another, and whether that is for want of a better
    plan (a PerformanceWarning): when merging the right-hand side would emit more than
    MAX_MERGED_CASES cases (products of sums are multiplied out first, so that no term
    merges much); with ``scatter_sums``, when it is a sum into a dense result that merges
    in SCATTERED_SUM_CASES cases or more, and in fewer apart (added in the sum's own order;
    a reduction of a sum becomes a sum of reductions). None otherwise."""
    cases = _merged_cases(assignment.rhs, formats)
    if cases > MAX_MERGED_CASES:
        terms = _sum_terms(_distributed(assignment.rhs, products=True))
        return (terms, True) if len(terms) > 1 else None
    if scatter_sums and cases >= SCATTERED_SUM_CASES and formats[assignment.lhs.tensor].is_dense:
        terms = _sum_terms(_distributed(assignment.rhs, products=False))
        if len(terms) > 1 and sum(_merged_cases(t, formats) for t in terms) < cases:
            return terms, False
    return None


def _merged_cases(e: Expr, formats: Mapping[str, Format]) -> int:
    """The cases merged iteration over ``e`` emits: for each index variable, every lattice
    point's loop has a case per sub-point; loops nest, so the counts multiply."""
    body = _without_sums(e)
    total = 1
    for v in set(index_vars_of(e)):
        def walked(a: Access, v: IndexVar = v) -> Iter | None:
            fmt = formats[a.tensor]
            if fmt.layout is not None:
                return None
            return next((Iter(a, k, v) for k, level in enumerate(fmt.levels)
                         if a.indices[fmt.ordering[k]] == v and not (level.full and level.has_locate)),
                        None)
        try:
            lattice = build_lattice(body, walked)
        except LatticeTooLarge:
            return MAX_MERGED_CASES + 1
        total *= sum(len(lattice.sub_points(p)) for p in lattice.points)
    return total


def _without_sums(e: Expr) -> Expr:
    """``e`` with its sums' bodies in their place: the loops merge those too."""
    if isinstance(e, Reduction):
        return _without_sums(e.body)
    return with_children(e, [_without_sums(c) for c in children(e)])


def _distributed(e: Expr, products: bool) -> Expr:
    """``e`` with its sums over sums made sums of sums and, with ``products``, products of
    sums (and differences, negations) distributed into sums of products: ``(a - b) * (c +
    d)`` is ``a*c + a*d - b*c - b*d``. Without it products stay whole, as do intrinsics and
    quotients."""
    if products and isinstance(e, Mul):
        left, right = (_sum_terms(_distributed(x, products)) for x in (e.a, e.b))
        return _added([_signed_product(x, y) for x in left for y in right])
    if isinstance(e, (Add, Sub, Neg)):
        return with_children(e, [_distributed(c, products) for c in children(e)])
    if isinstance(e, Reduction) and e.op == "sum":
        return _sums_of_terms(e, _sum_terms(_distributed(e.body, products)))
    return e


def _sums_of_terms(e: Reduction, terms: list[Expr]) -> Expr:
    """Sum ``e``, whose body adds ``terms``, as a sum of their sums."""
    using: list[Expr] = []
    free: list[Expr] = []
    for t in terms:
        (using if e.var in index_vars_of(t) else free).append(t)
    # a term without the variable adds once per coordinate of it: it stays in a sum
    # whose loop covers the variable's range
    if not using:
        return e
    return _added([Reduction(e.var, _added([using[0], *free]))] +
                  [Reduction(e.var, t) for t in using[1:]])


def _added(terms: list[Expr]) -> Expr:
    out = terms[0]
    for t in terms[1:]:
        out = Add(out, t)
    return out


def _signed_product(x: Expr, y: Expr) -> Expr:
    """``x * y`` with the terms' negations moved in front."""
    negative = False
    while isinstance(x, Neg):
        x, negative = x.operand, not negative
    while isinstance(y, Neg):
        y, negative = y.operand, not negative
    return Neg(Mul(x, y)) if negative else Mul(x, y)


def _sequence(assignment: Assignment, terms: list[Expr], warn: bool, formats: Mapping[str, Format],
              dtypes: Mapping[str, np.dtype], result_dtype: np.dtype, workspace: str,
              equations: tuple[Equation, ...], padded: bool,
              gather: frozenset[IndexVar] | None, fills: Mapping[str, Any]) -> ConcreteProgram:
    """``sequence(A = t1, sequence(A += t2, ...))``: each term concretized on its own (lowered
    in time linear in the number of terms), later ones adding into a dense result, which a
    sparse result format is converted from afterwards (held to the memory cap per call).
    ``warn``: a PerformanceWarning says so."""
    lhs = assignment.lhs
    final = formats[lhs.tensor]
    if warn:
        warnings.warn(f"{assignment}: merging its {len(terms)} sparse terms would take more than "
                      f"{MAX_MERGED_CASES} cases; they are added one at a time into a dense "
                      f"{lhs.tensor}" + ("" if final.is_dense else f", converted to {final} after"),
                      PerformanceWarning, stacklevel=2)
    # (a dense result keeps its mode order)
    formats = {**formats, lhs.tensor: final if final.is_dense else dense(len(lhs.indices))}
    fills = {**fills, lhs.tensor: 0}  # a dense result stores every entry
    progs: list[ConcreteProgram] = []
    reserved: frozenset[str] = frozenset()
    for term in terms:
        used = set(index_vars_of(term))
        prog = concretize(Assignment(lhs, term), formats, dtypes, result_dtype,
                          workspace, reserved, tuple(eq for eq in equations if eq.var in used), padded,
                          gather, fills)
        reserved |= frozenset(prog.tensors)
        progs.append(prog)
    stmt = progs[-1].stmt
    for prog in reversed(progs[:-1]):
        stmt = Sequence(prog.stmt, _accumulating(stmt, assignment.lhs.tensor))
    tensors: dict[str, TensorDecl] = {}
    relations: dict = {}
    for prog in progs:
        tensors.update(prog.tensors)
        relations.update(dict.fromkeys(prog.env.relations))
    return ConcreteProgram(stmt, tensors, lhs.tensor, Env(relations=tuple(relations)),
                           None if final.is_dense else final)


def _accumulating(s: Stmt, result: str) -> Stmt:
    """``s`` adding into ``result`` where it assigned it."""
    if isinstance(s, Assign):
        return replace(s, accumulate=True) if s.lhs.tensor == result else s
    if isinstance(s, Forall):
        return replace(s, body=_accumulating(s.body, result))
    if isinstance(s, Where):
        return Where(_accumulating(s.consumer, result), _accumulating(s.producer, result))
    if isinstance(s, Sequence):
        return Sequence(_accumulating(s.define, result), _accumulating(s.mutate, result))
    return s


def _used(decls: dict[str, TensorDecl], stmt: Stmt) -> dict[str, TensorDecl]:
    """``decls`` without operands the statement no longer reads (replaced by a converted
    copy), so kernels do not take their arrays."""
    read = {a.tensor for s in walk_stmts(stmt) if isinstance(s, Assign) for a in accesses(s.rhs)}
    return {n: d for n, d in decls.items() if d.role != "input" or n in read}


def _wrap(vars_: tuple[IndexVar, ...], body: Expr) -> Expr:
    for v in reversed(vars_):
        body = Reduction(v, body)
    return body


def _temp_dtypes(temps: list[_Temp], body: Expr, dtypes: Mapping[str, np.dtype],
                 result_dtype: np.dtype) -> dict[str, np.dtype]:
    """Each temporary's value type. The right-hand side computes in the result's type, and
    so do the reductions it adds or multiplies; a reduction an intrinsic reads
    (``lte(sum(k, A(i,k) * B(k,j)), O(i,j))``, ``abs(sum(...))``, ``int32(sum(...))``)
    holds its own value's type, NumPy's for that reduction, as do the reductions inside it:
    in the result's type (a comparison's bool, abs's float) the value would be lost before
    the function sees it. So do any/all, which test their body's value (a bool, or an int8
    result's type, would lose 0.5 or divide bools), and the reductions inside them."""
    by_name = {t.name: t for t in temps}
    own = {t.name for t in temps if reducer(t.op).logical}  # temporaries in their own type

    def mark(e: Expr, in_call: bool) -> None:
        if isinstance(e, Access) and e.tensor in by_name:
            if in_call and e.tensor not in own:
                own.add(e.tensor)
                mark(by_name[e.tensor].body, True)
            return
        for c in children(e):
            mark(c, in_call or isinstance(e, Call))

    for t in temps:
        mark(t.body, t.name in own)
    mark(body, False)
    types = dict(dtypes)

    def typed(name: str) -> np.dtype:
        if name not in types:
            t = by_name[name]
            if name not in own:
                types[name] = np.dtype(result_dtype)
                return types[name]
            for inner in {a.tensor for a in accesses(t.body)} & set(by_name):
                typed(inner)
            types[name] = reducer(t.op).dtype(computation_dtype(t.body, types, np.dtype(result_dtype)))
        return types[name]

    return {t.name: typed(t.name) for t in temps}


def _hoist(e: Expr) -> tuple[tuple[IndexVar, ...], Expr]:
    """Pull sums out of products (``sum(k, B*C) * D = sum(k, B*C*D)`` when ``D`` does not use
    ``k``): one reduction over a whole product needs no temporary, so its loops can follow
    the operands' storage (MTTKRP walks a CSF tensor in order). Sums under additions stay
    where they are, which is what makes ``A(i,j)*x(j) + z(i)`` sum ``j`` over the product."""
    if isinstance(e, Reduction) and e.op == "sum":
        vars_, body = _peel(e)
        inner, body = _hoist(body)
        return vars_ + inner, body
    if isinstance(e, Neg):
        vars_, a = _hoist(e.operand)
        return vars_, Neg(a)
    if isinstance(e, (Mul, Div)):
        va, a = _hoist(e.a)
        vb, b = _hoist(e.b) if isinstance(e, Mul) else ((), e.b)
        if set(va) & set(index_vars_of(b)) or set(vb) & set(index_vars_of(a)):
            return (), type(e)(_wrap(va, a), _wrap(vb, b))
        return va + vb, type(e)(a, b)
    # sums under additions and inside intrinsics stay where they are
    return (), with_children(e, [_wrap(*_hoist(c)) for c in children(e)])


@dataclass
class _LoopPlan:
    """Accesses over level variables, temporaries, and the loop order chosen for them."""

    layouts: LayoutPlan
    lifter: _Lifter
    body: Expr
    temps: list[_Temp]
    top_reduced: tuple[IndexVar, ...]
    derived: Derived
    operands: list[Access]
    order: LoopOrder
    solved: tuple[Solved, ...]


def _plan_loops(assignment: Assignment, formats: Mapping[str, Format],
                reserved: frozenset[str] = frozenset(), equations: tuple[Equation, ...] = (),
                padded: bool = False, gather: frozenset[IndexVar] | None = None) -> _LoopPlan:
    """Rewrite accesses through layouts, lift nested reductions and order the loops.

    An operand seen through its layout's levels cannot be transposed; where the order
    needs that, the operand is converted to a plain format instead and planning restarts.
    """
    lhs = assignment.lhs
    plain: frozenset[str] = frozenset()
    while True:
        lifter = _Lifter(set(formats) | reserved)
        layouts = expand_layouts(assignment, formats, lifter.fresh, plain)
        # a diagonal is read from an operand's levels of its two variables: one seen
        # through a layout (blocked) is converted to a plain format
        diagonal = {a.tensor for eq in equations if eq.diagonal is not None
                    for a in accesses(assignment.rhs) if eq.var in a.indices} & layouts.expanded
        if diagonal - plain:
            plain |= diagonal
            continue
        derived: Derived = {s.parent: s.derived() for s in layouts.relations}
        rhs = layouts.assignment.rhs
        top_reduced, top_body = _peel(rhs)
        solved = solve_equations(equations, accesses(rhs), lhs, layouts.formats, not padded,
                                 frozenset(top_reduced), gather)
        loops_of = _solved_loops(solved)
        derived.update(loops_of)
        lifter.derived = derived
        lifter.solved = solved
        # a summed variable solved from a subscript's walked variable: the sum walks that
        top_reduced = _driven(top_reduced, solved)
        body = lifter.lift(top_body)
        temps = lifter.temps
        free = list(lhs.indices)
        result_fmt = layouts.formats[lhs.tensor]
        result_path = [free[m] for m in result_fmt.ordering]
        # (a variable only windows read, b(i(3,11)) * c(i(0,8)), is walked by a loop of its
        # own, inside which each windowed level is walked in a window of one coordinate)
        all_vars = _loop_vars(result_path + [v for v in index_vars_of(rhs) if v not in free]
                              + [w for s in solved if s.diagonal for w in s.loops if w not in free],
                              derived)
        all_vars = _storage_order_first([v for v in all_vars if v not in derived],
                                        [a for a in accesses(rhs) if a.tensor in layouts.expanded])
        all_vars = _dense_last(all_vars, accesses(rhs) + [lhs], layouts.formats,
                               loops_of)
        required: list[Edge] = [(f, r) for t in temps for f in _loop_vars(t.free, derived)
                                for r in t.reduced]
        # a variable solved within a window (a reduced one, or an appended result's): the
        # loop over the subscript's variable walks it, placed by the other loops (first)
        required += [(w, s.driver) for s in solved if s.windowed for w in s.loops if w != s.driver]
        operands = _operand_accesses(body, temps)
        order = choose_order(all_vars, [(a, layouts.formats[a.tensor]) for a in operands],
                             (lhs, result_fmt), required, loops_of)
        walked = {s.driver for s in solved if s.driver is not None}
        for idx, _ in order.transposed:
            a = operands[idx]
            # (a window walks a level of it, or a solution reads its loops)
            if any(v in loops_of or v in walked for v in a.indices):
                # the equations were solved for its storage order
                raise FormatError(f"{_written(a, equations)}: its storage order conflicts "
                                  "with the loops the expression's compound subscripts or "
                                  "windows need; store it with its modes in another order")
        stuck = {operands[idx].tensor for idx, _ in order.transposed} & layouts.expanded
        if not stuck:
            return _LoopPlan(layouts, lifter, body, temps, top_reduced, derived, operands, order,
                             solved)
        assert not stuck <= plain, "a converted operand is still seen through its layout"
        plain |= stuck


def _dense_last(vars_: list[IndexVar], accs: list[Access], formats: Mapping[str, Format],
                solved: Derived) -> list[IndexVar]:
    """Loop preference with variables that only index dense levels moved innermost (stably):
    SpMM and MTTKRP then stream a dense row per nonzero instead of re-walking sparse
    fibers once per dense column. Concordance edges still put every variable a sparse
    level depends on first (the loops a ``solved`` variable is computed from stand for it)."""
    sparse: set[IndexVar] = set()
    for a in accs:
        fmt = formats[a.tensor]
        for k, level in enumerate(fmt.levels):
            if not (level.full and level.has_locate):
                sparse.update(_loop_vars([a.indices[fmt.ordering[j]] for j in range(k + 1)], solved))
    return [v for v in vars_ if v in sparse] + [v for v in vars_ if v not in sparse]


def _storage_order_first(vars_: list[IndexVar], expanded: list[Access]) -> list[IndexVar]:
    """Loop preference with the level variables of each access seen through its layout
    listed in storage order (BCSR: block row, block column, then in-block row and
    column), keeping the slots the variables took."""
    out = list(vars_)
    for a in expanded:
        slots = sorted(out.index(v) for v in a.indices if v in out)
        for slot, v in zip(slots, [v for v in a.indices if v in out]):
            out[slot] = v
    return out


def _operand_accesses(body: Expr, temps: list[_Temp]) -> list[Access]:
    temp_names = {t.name for t in temps}
    seen: dict[Access, None] = {}
    for e in [body] + [t.body for t in temps]:
        for a in accesses(e):
            if a.tensor not in temp_names:
                seen.setdefault(a, None)
    return list(seen)


def _rename(e: Expr, renames: Mapping[Access, Access]) -> Expr:
    return map_accesses(e, lambda a: renames.get(a, a))


def _scattered_levels(
    lhs: Access, fmt: Format, order: tuple[IndexVar, ...], reduced: tuple[IndexVar, ...]
) -> list[int]:
    """Result levels that append but whose loop sits inside a reduction loop."""
    if not reduced:
        return []
    first = min(order.index(r) for r in reduced)
    out = []
    for k, level in enumerate(fmt.levels):
        v = lhs.indices[fmt.ordering[k]]
        if level.has_append and order.index(v) > first:
            out.append(k)
    return out


def _workspace_modes(
    lhs: Access, fmt: Format, order: tuple[IndexVar, ...], reduced: tuple[IndexVar, ...],
    derived: Derived,
) -> tuple[IndexVar, ...] | None:
    """The result modes (in storage order) a workspace must hold: all but the longest
    prefix of them that is also the prefix of the loop order, ahead of every reduction
    loop (the paper's ``max(N + 1 - p1, p2)``); the prefix's loops enclose the workspace.
    None when a result mode is a split variable (its loops are not the mode's) or no mode
    needs one."""
    path = [lhs.indices[m] for m in fmt.ordering]
    if any(v in derived for v in path):
        return None
    first = min((order.index(r) for r in reduced), default=len(order))
    k = 0
    while k < min(len(path), first) and order[k] == path[k]:
        k += 1
    if k == len(path):
        return None
    return tuple(path[k:])


class _Builder:
    """Nests foralls in loop order, placing each temporary's where as early as possible."""

    def __init__(self, order: tuple[IndexVar, ...], temps: list[_Temp], derived: Derived,
                 placing: Mapping[IndexVar, tuple[IndexVar, ...]]) -> None:
        self.order = order
        self.temps = {t.name: t for t in temps}
        self.derived = derived
        # a variable walked in one-coordinate windows: the loops placing them (a window's
        # variable, which no access may have: b(i(3,11)) * c(i(0,8)))
        self.placing = placing

    def build(
        self, bound: tuple[IndexVar, ...], lhs: Access, rhs: Expr, accumulate: bool,
        placed: frozenset[str],
    ) -> Stmt:
        ready = [
            self.temps[a.tensor] for a in accesses(rhs)
            if a.tensor in self.temps and a.tensor not in placed
            and set(_loop_vars(self.temps[a.tensor].free, self.derived)) <= set(bound)
        ]
        if ready:
            t = ready[0]
            consumer = self.build(bound, lhs, rhs, accumulate, placed | {t.name})
            producer = self.build(bound, Access(t.name, ()), t.body, True, placed)
            return Where(consumer, producer)
        needed = set(lhs.indices) | {
            v for a in accesses(rhs) if a.tensor not in self.temps for v in a.indices
        }
        needed |= {v for a in accesses(rhs) if a.tensor in self.temps and a.tensor not in placed
                   for v in self.temps[a.tensor].free}
        needed |= {w for v in needed for w in self.placing.get(v, ())}
        needed = set(_loop_vars(needed, self.derived))
        for v in self.order:
            if v in needed and v not in bound:
                return Forall(v, self.build(bound + (v,), lhs, rhs, accumulate, placed))
        return Assign(lhs, rhs, accumulate)

    def workspace(self, lhs: Access, w: Access, body: Expr) -> Stmt:
        """``forall(outer, (forall(w's modes, A = w(...))) where (... w(...) += body))``:
        the consumer walks the workspace in the result's storage order (its modes' order)."""
        outer = tuple(v for v in self.order if v in lhs.indices and v not in w.indices)
        consumer: Stmt = Assign(lhs, w, False)
        for v in reversed(w.indices):
            consumer = Forall(v, consumer)
        producer = self.build(outer, w, body, True, frozenset())
        stmt: Stmt = Where(consumer, producer)
        for v in reversed(outer):
            stmt = Forall(v, stmt)
        return stmt
