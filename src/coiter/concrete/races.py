"""Output races of parallel loops (Senanayake et al. 2020, §3.9 and §5).

Iterations of a loop race on a write when two of them may write the same location.
A write ``A(I)`` inside the loop over ``v`` is race-free when distinct values of
``v`` give distinct values of variables in ``I``: following ``v`` up the
provenance graph, splits, divides and bounds keep distinctness (disjoint pieces of
their parent), a position of a unique level is a distinct coordinate under a fixed
parent, and a fused variable is a distinct *pair* of coordinates.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..notation.ast import Access, IndexVar, accesses
from .provenance import Bound, Coord, Divide, Fuse, Pos, Precomputed, Provenance, Split
from .stmt import Assign, ConcreteProgram, Forall, Multi, Sequence, Stmt, TensorDecl, Where, walk_stmts


def distinct_vars(prov: Provenance, v: IndexVar, decls: Mapping[str, TensorDecl]) -> frozenset[IndexVar]:
    """Original variables that jointly take distinct values in distinct iterations of ``v``
    (empty when none are guaranteed to)."""
    rel = prov.defining(v)
    if rel is None:
        return frozenset({v})
    if isinstance(rel, (Split, Divide, Bound, Precomputed)):
        return distinct_vars(prov, rel.parents()[0], decls)
    if isinstance(rel, Coord):
        return distinct_vars(prov, rel.pos, decls)
    if isinstance(rel, Fuse):
        # a fused value is a pair: distinct pairs, not distinct outer coordinates
        return distinct_vars(prov, rel.outer, decls) | distinct_vars(prov, rel.inner, decls)
    if isinstance(rel, Pos):
        fmt = decls[rel.access.tensor].format
        covered = prov.underived(rel.var)
        levels = [k for k in range(fmt.order) if rel.access.indices[fmt.ordering[k]] in covered]
        if all(fmt.levels[k].unique for k in levels):
            return frozenset(covered)
        return frozenset()
    raise TypeError(type(rel).__name__)


@dataclass(frozen=True)
class Race:
    """A write that iterations of a parallel loop may race on."""

    access: Access
    accumulate: bool
    role: str  # the written tensor's role: "result", "temp" or "workspace"

    def __str__(self) -> str:
        return f"{self.access} {'+=' if self.accumulate else '='}"


def row_assembly(loop: Forall, decls: Mapping[str, TensorDecl]) -> bool:
    """Whether ``loop`` walks the rows of a result whose iterations can assemble rows in
    parallel into per-thread buffers merged afterwards: a CSR-like result (a dense first
    level over the loop's variable, then one compressed level and branchless ones), or one
    whose first level appends (DCSR, COO, CSF: appending and dense levels below)."""
    writes = [s.lhs for s in walk_stmts(loop.body) if isinstance(s, Assign)
              and decls[s.lhs.tensor].role == "result"]
    if not writes:
        return False
    decl = decls[writes[0].tensor]
    levels = decl.format.levels
    if decl.order < 2 or decl.format.layout is not None:
        return False
    if levels[0].has_append and not levels[0].branchless:
        if not all(lv.has_append or (lv.full and lv.has_insert) for lv in levels[1:]):
            return False
    elif not (levels[0].full and levels[0].has_insert and levels[1].has_append and not levels[1].branchless):
        return False
    elif not all(lv.has_append and lv.branchless for lv in levels[2:]):
        return False
    return all(a.indices[decl.format.ordering[0]] == loop.var for a in writes)


def shared_pattern(prog: ConcreteProgram, target: str = "c") -> Access | None:
    """The access of the operand whose pattern the result takes (written at its positions,
    nothing assembled), or None. A result sharing all its levels always does; one sharing
    only its first levels (dense ones below) needs the loops over those levels of the
    operand outermost, in order, over original variables, and the C back end."""
    decl = prog.tensors[prog.result]
    if decl.pattern_of is None:
        return None
    operand = next((a for st in walk_stmts(prog.stmt) if isinstance(st, Assign)
                    for a in accesses(st.rhs) if a.tensor == decl.pattern_of), None)
    if operand is None:  # read through a transposed copy: its positions are not the result's
        return None
    fmt = prog.tensors[operand.tensor].format
    if decl.pattern_levels == decl.order == fmt.order:
        return operand
    if target != "c":
        return None
    prov = Provenance(prog.env.relations)
    s: Stmt = prog.stmt
    for k in range(decl.pattern_levels):
        if not isinstance(s, Forall) or s.var != operand.indices[fmt.ordering[k]] or \
                prov.defining(s.var) is not None:
            return None
        s = s.body
    return operand


def _produced_inside(body: Stmt) -> set[str]:
    """Temporaries whose ``where`` lies inside ``body`` (private to one iteration)."""
    out: set[str] = set()
    for s in walk_stmts(body):
        if isinstance(s, Where):
            out |= {a.lhs.tensor for a in walk_stmts(s.producer) if isinstance(a, Assign)}
    return out


def races(prov: Provenance, loop: Forall, decls: Mapping[str, TensorDecl]) -> list[Race]:
    """Writes inside ``loop`` that distinct iterations of it may both make."""
    distinct = distinct_vars(prov, loop.var, decls)
    private = _produced_inside(loop.body)
    out: list[Race] = []
    for s in walk_stmts(loop.body):
        if not isinstance(s, Assign):
            continue
        decl = decls[s.lhs.tensor]
        # a workspace (Gustavson's row list) is allocated once per kernel: always shared
        if decl.role == "temp" and s.lhs.tensor in private:
            continue
        if decl.role == "result" and distinct and distinct <= set(s.lhs.indices):
            continue
        race = Race(s.lhs, s.accumulate, decl.role)
        if race not in out:
            out.append(race)
    return out


def scatter_loops(s: Stmt, decls: Mapping[str, TensorDecl], inside_loop: bool = False) -> set[int]:
    """``id`` of each loop that may scatter into per-thread sparse workspaces: the outermost
    loop of a ``where``'s producer that writes a workspace with an insert-sort-merge policy,
    outside every other loop (the outer product's loop over k). Its threads insert into
    workspaces of their own, merged after the loop (coiter.lower.scatter)."""
    out: set[int] = set()
    if isinstance(s, Where) and not inside_loop and isinstance(s.producer, Forall):
        written = {x.lhs.tensor for x in walk_stmts(s.producer) if isinstance(x, Assign)}
        if any(decls[t].role == "workspace" and decls[t].policy is not None for t in written):
            out.add(id(s.producer))
    below: tuple[Stmt, ...] = ()
    if isinstance(s, Forall):
        below = (s.body,)
    elif isinstance(s, Where):
        below = (s.consumer, s.producer)
    elif isinstance(s, (Sequence, Multi)):
        below = (s.define, s.mutate) if isinstance(s, Sequence) else (s.left, s.right)
    for child in below:
        out |= scatter_loops(child, decls, inside_loop or isinstance(s, Forall))
    return out
