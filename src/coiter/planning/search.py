"""Search for the cheapest plan: dynamic programming over subsets of operands (every split
of every subset, and one fused kernel per subset) up to ``EXACT_LIMIT`` operands, greedy
pairwise contraction beyond."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from coiter.formats.format import Format, csf, csr, dense, sparse_vector

from .model import DENSE_FRACTION, SMALL_VOLUME, Term, distinct, result_density, step_cost, volume
from .plan import EinsumPlan, Step

EXACT_LIMIT = 8  # 3^8 = 6561 subset splits; beyond, greedy


@dataclass(frozen=True)
class _Node:
    """A value of a candidate plan: an operand (``parts`` empty) or a step's result."""

    members: int               # bitmask of the operands it combines
    term: Term
    cost: float                # total estimated cost of computing it
    parts: tuple[_Node, ...]   # what the step producing it reads
    blas: bool = False         # whether that step runs on NumPy


@dataclass(frozen=True)
class _Problem:
    inputs: tuple[Term, ...]
    output: Term
    extents: Mapping[str, int]
    numpy_ok: bool               # dense steps may go to NumPy (every dtype one BLAS takes)
    itemsize: int
    memory: int                  # bytes a dense temporary may take
    order: str                   # every letter once, in order of first appearance
    # density of the product of two operands (by position) summed down to the given letters,
    # measured on the data; None where it cannot be
    measure: Callable[[int, int, str], float | None] | None = None
    densities: dict[int, float] = field(default_factory=dict, compare=False)  # by members

    def kept(self, members: int) -> str:
        """The letters a value combining ``members`` must keep: those the output or an
        operand outside it uses."""
        inside = "".join(t.letters for k, t in enumerate(self.inputs) if members >> k & 1)
        outside = self.output.letters + "".join(
            t.letters for k, t in enumerate(self.inputs) if not members >> k & 1)
        return "".join(c for c in self.order if c in inside and c in outside)

    def term(self, members: int) -> Term | None:
        """What a temporary combining ``members`` holds and how it is stored; None when it
        would have to be dense and a dense one exceeds the memory cap."""
        if members == (1 << len(self.inputs)) - 1:
            return self.output
        letters = self.kept(members)
        leaves = [t for k, t in enumerate(self.inputs) if members >> k & 1]
        size = volume(letters, self.extents)
        fits = size * self.itemsize <= self.memory
        all_dense = all(t.dense for t in leaves)
        if all_dense and not fits:
            return None
        density = self.density(members)
        stored_dense = fits and (all_dense or density >= DENSE_FRACTION or size <= SMALL_VOLUME)
        return Term(letters, density, stored_dense)

    def density(self, members: int) -> float:
        """Estimated density of the value combining ``members``: measured on a sample for
        two operands where :attr:`measure` can, else built up in operand order (the
        operands but the last, then the last), each step assuming independent nonzeros."""
        known = self.densities.get(members)
        if known is not None:
            return known
        ks = _bits(members)
        letters = self.kept(members)
        if len(ks) == 1:
            density = self.inputs[ks[0]].density
        else:
            measured = self.measure(ks[0], ks[1], letters) if len(ks) == 2 and self.measure else None
            if measured is not None:
                density = measured
            else:
                rest = members & ~(1 << ks[-1])
                before = Term(self.kept(rest) if len(ks) > 2 else self.inputs[ks[0]].letters,
                              self.density(rest), False)
                density = result_density([before, self.inputs[ks[-1]]], letters, self.extents)
        self.densities[members] = density
        return density

    def numpy_step(self, parts: Sequence[_Node]) -> bool:
        """Whether a step over ``parts`` runs on NumPy: every part a dense array."""
        return self.numpy_ok and all(p.term.dense for p in parts)

    def step(self, members: int, parts: Sequence[_Node], term: Term) -> _Node:
        blas = len(parts) <= 2 and self.numpy_step(parts)
        if blas and volume(term.letters, self.extents) * self.itemsize > self.memory:
            return _Node(members, term, math.inf, tuple(parts))
        cost = sum(p.cost for p in parts) + step_cost([p.term for p in parts], term, self.extents, blas)
        return _Node(members, term, cost, tuple(parts), blas)


def _bits(members: int) -> list[int]:
    return [k for k in range(members.bit_length()) if members >> k & 1]


def plan_contraction(
    subscripts: str, inputs: Sequence[Term], output: Term, extents: Mapping[str, int],
    numpy_ok: bool, itemsize: int, memory: int, output_format: Format,
    fused_only: bool = False, path: Sequence[tuple[int, ...]] | None = None,
    measure: Callable[[int, int, str], float | None] | None = None,
) -> EinsumPlan:
    """The cheapest plan for the einsum whose operands are ``inputs`` and result ``output``;
    with ``fused_only``, the plan of one generated kernel over every operand; with ``path``
    (NumPy's contraction list without its ``"einsum_path"`` head), the plan that contracts
    in that order. ``measure(k1, k2, letters)`` gives the density of the contraction of
    operands k1 and k2 down to ``letters`` from the data, where it can (None otherwise)."""
    order = distinct("".join(t.letters for t in inputs))
    if fused_only:
        numpy_ok = False
    problem = _Problem(tuple(inputs), output, extents, numpy_ok, itemsize, memory, order, measure)
    if len(inputs) > 1:  # the result's density as the temporaries' (measured where it can be)
        full = Term(output.letters, problem.density((1 << len(inputs)) - 1), output.dense)
        problem = replace(problem, output=full)
    leaves = [_Node(1 << k, t, 0.0, ()) for k, t in enumerate(inputs)]
    everything = (1 << len(inputs)) - 1
    fused = problem.step(everything, leaves, problem.output)
    if path is not None:
        best = _along(problem, leaves, path)
    elif len(inputs) <= 2 or fused_only:
        best = fused
    elif len(inputs) <= EXACT_LIMIT:
        best = _exact(problem, leaves)
    else:
        best = min(_greedy(problem, leaves), fused, key=lambda n: n.cost)
    steps: list[Step] = []
    _emit(problem, best, steps, output_format)
    return EinsumPlan(subscripts, len(inputs), tuple(steps), best.cost, fused.cost)


def _exact(problem: _Problem, leaves: list[_Node]) -> _Node:
    """Cheapest node for every subset, smallest subsets first."""
    n = len(leaves)
    best: dict[int, _Node] = {1 << k: leaf for k, leaf in enumerate(leaves)}
    for members in sorted(range(1, 1 << n), key=lambda m: bin(m).count("1")):
        if members in best:
            continue
        term = problem.term(members)
        if term is None:
            best[members] = _Node(members, Term("", 1.0, True), math.inf, ())
            continue
        candidates = [problem.step(members, [leaves[k] for k in _bits(members)], term)]
        low = members & -members
        sub = (members - 1) & members
        while sub:
            if sub & low:  # each split once: the part holding the lowest operand
                a, b = best[sub], best[members ^ sub]
                if a.cost < math.inf and b.cost < math.inf:
                    candidates.append(problem.step(members, [a, b], term))
            sub = (sub - 1) & members
        best[members] = min(candidates, key=lambda node: node.cost)
    return best[(1 << n) - 1]


def _greedy(problem: _Problem, leaves: list[_Node]) -> _Node:
    """Contract the cheapest pair until one value is left."""
    live = list(leaves)
    while len(live) > 1:
        options = []
        for x in range(len(live)):
            for y in range(x + 1, len(live)):
                members = live[x].members | live[y].members
                term = problem.term(members)
                if term is not None:
                    node = problem.step(members, [live[x], live[y]], term)
                    options.append((node.cost - live[x].cost - live[y].cost, x, y, node))
        if not options:
            return _Node(0, problem.output, math.inf, ())
        _, x, y, node = min(options, key=lambda o: o[0])
        live = [v for k, v in enumerate(live) if k not in (x, y)] + [node]
    return live[0]


def _along(problem: _Problem, leaves: list[_Node], path: Sequence[tuple[int, ...]]) -> _Node:
    """The plan contracting ``path``'s groups in turn (positions in the list of values left,
    each result appended), as NumPy's paths say."""
    live = list(leaves)
    for group in path:
        parts = [live[k] for k in group]
        members = 0
        for p in parts:
            members |= p.members
        # a temporary the cap forbids dense is stored sparse: the path is the user's choice
        term = problem.term(members) or Term(problem.kept(members), 1.0, False)
        live = [v for k, v in enumerate(live) if k not in group] + [problem.step(members, parts, term)]
    return live[0]


def _emit(problem: _Problem, node: _Node, steps: list[Step], output_format: Format) -> int:
    """Append the steps computing ``node`` (children first); its value index."""
    n = len(problem.inputs)
    if not node.parts:
        return node.members.bit_length() - 1
    # consecutive NumPy contractions are one step: NumPy's einsum orders them itself, with
    # its own choice of intermediate layouts (dense costs are flops, as the planner's)
    parts = _numpy_group(node) if node.blas else node.parts
    inputs = tuple(_emit(problem, p, steps, output_format) for p in parts)
    subscripts = ",".join(p.term.letters for p in parts) + "->" + node.term.letters
    full = node.members == (1 << n) - 1
    fmt = output_format if full else _temporary_format(node.term)
    nnz = node.term.density * volume(node.term.letters, problem.extents)
    steps.append(Step(inputs, subscripts, "numpy" if node.blas else "coiter", fmt,
                      nnz, node.cost - sum(p.cost for p in parts)))
    return n + len(steps) - 1


def _numpy_group(node: _Node) -> list[_Node]:
    """What the NumPy contractions ending at ``node`` read: operands and other steps'
    results, in the einsum's operand order (NumPy's own path search depends on it)."""
    out: list[_Node] = []
    for p in node.parts:
        out += _numpy_group(p) if p.blas and p.parts else [p]
    return sorted(out, key=lambda p: p.members & -p.members)


def _temporary_format(term: Term) -> Format:
    order = len(term.letters)
    if term.dense or order == 0:
        return dense(order)
    return sparse_vector() if order == 1 else csr if order == 2 else csf(order)
