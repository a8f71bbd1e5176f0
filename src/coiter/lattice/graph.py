"""Iteration graphs: ordering index variables concordantly with every tensor's storage.

A sparse level can only be iterated in storage order, so each operand contributes
edges "every variable of an earlier level comes before the variable of this
level" for its levels that lack locate. Where the edges of all operands form a
cycle, the offending operands are re-stored in a concordant mode ordering
(automatic transposition) instead of failing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from ..formats.format import Format
from ..notation.ast import Access, IndexVar

Edge = tuple[IndexVar, IndexVar]


def access_edges(access: Access, fmt: Format, *, result: bool = False) -> list[Edge]:
    """Ordering edges an access needs: before each level that must be iterated
    (operands) or appended (results), every earlier level's variable."""
    edges: list[Edge] = []
    path = [access.indices[m] for m in fmt.ordering]
    for k, level in enumerate(fmt.levels):
        constrained = level.has_append if result else not level.has_locate
        if constrained:
            edges.extend((path[j], path[k]) for j in range(k) if path[j] != path[k])
        if constrained and result:
            # an appended level's parent positions must arrive in increasing order, so the
            # levels above it (dense ones too) are visited in storage order, and an
            # appended coordinate must not repeat under a deeper level's loop
            edges.extend((path[a], path[b]) for b in range(k) for a in range(b)
                         if path[a] != path[b])
            edges.extend((path[k], path[m]) for m in range(k + 1, len(path)))
    return edges


def _has_cycle(vars_: Sequence[IndexVar], edges: Iterable[Edge]) -> bool:
    succ: dict[IndexVar, set[IndexVar]] = {v: set() for v in vars_}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
        succ.setdefault(b, set())
    state: dict[IndexVar, int] = {}

    def visit(v: IndexVar) -> bool:
        state[v] = 1
        for w in succ[v]:
            s = state.get(w, 0)
            if s == 1 or (s == 0 and visit(w)):
                return True
        state[v] = 2
        return False

    return any(state.get(v, 0) == 0 and visit(v) for v in list(succ))


def _topological(vars_: Sequence[IndexVar], edges: Sequence[Edge]) -> list[IndexVar]:
    """Kahn's algorithm, taking the earliest-listed ready variable first."""
    preds = {v: {a for a, b in edges if b == v} for v in vars_}
    order: list[IndexVar] = []
    while len(order) < len(vars_):
        ready = next(v for v in vars_ if v not in order and preds[v] <= set(order))
        order.append(ready)
    return order


@dataclass(frozen=True)
class LoopOrder:
    order: tuple[IndexVar, ...]
    # operands that must be re-stored, with the concordant format to convert them to
    transposed: tuple[tuple[int, Format], ...]
    result_concordant: bool


def choose_order(
    vars_: Sequence[IndexVar],
    operands: Sequence[tuple[Access, Format]],
    result: tuple[Access, Format],
    required: Sequence[Edge] = (),
    solved: Mapping[IndexVar, tuple[IndexVar, ...]] | None = None,
) -> LoopOrder:
    """Pick a loop order over ``vars_`` (listed by preference).

    ``required`` edges (from scalar temporaries) always hold. Result edges hold
    when they can; operands whose edges would close a cycle are transposed. A variable
    in ``solved`` has no loop: an edge to or from it binds the loops it is computed from.
    """
    solved = solved or {}

    def edges_of(access: Access, fmt: Format, result: bool = False) -> list[Edge]:
        return [(a2, b2) for a, b in access_edges(access, fmt, result=result)
                for a2 in solved.get(a, (a,)) for b2 in solved.get(b, (b,)) if a2 != b2]

    edges: list[Edge] = list(required)
    result_edges = edges_of(*result, result=True)
    result_concordant = not _has_cycle(vars_, edges + result_edges)
    if result_concordant:
        edges += result_edges
    dropped: list[int] = []
    for idx, (acc, fmt) in enumerate(operands):
        mine = edges_of(acc, fmt)
        if _has_cycle(vars_, edges + mine):
            dropped.append(idx)
        else:
            edges += mine
    order = _topological(vars_, edges)
    rank = {v: n for n, v in enumerate(order)}
    # a solved variable is known once the last of its loops is
    rank.update({v: max(rank[w] for w in loops) for v, loops in solved.items()})
    transposed = []
    for idx in dropped:
        acc, fmt = operands[idx]
        ordering = sorted(range(len(acc.indices)), key=lambda m: rank[acc.indices[m]])
        transposed.append((idx, fmt.permuted(ordering)))
    return LoopOrder(tuple(order), tuple(transposed), result_concordant)
