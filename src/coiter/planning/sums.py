"""Wide sums of sparse terms as a chain of narrow ones.

One kernel for ``R(i,j) = A(i,j) + B(i,j) + ... `` of ``n`` sparse terms into a sparse result
merges them all at once: up to ``2**n`` lattice points per loop, each with a case per
sub-point, which the C compiler takes seconds to compile from six terms on (nine terms: 16
to 39 s) and whose branches on which terms hold a coordinate run slower than SciPy adding
the terms two at a time (seven CSR terms of 2000 x 2000 at 1%: 11.3 ms against 5.6, and 4.9
s to compile). Three terms at a time compile fast and take the branch-free union of three
runs (``lower/unions.py``): 4.1 ms for those seven (docs/performance.md, "Sums of many
sparse operands").

:func:`sum_chain` splits such a sum into a left fold: ``t1 + t2 + t3`` into a temporary,
then the temporary plus the next two terms, and so on, each step's result in the sum's
sparse format. A fold adds in the sum's own order, so every value is the one the single
kernel computes, bit for bit (an entry absent from some terms adds only the others, as the
merge does), and the stored pattern is the same union.
"""
from __future__ import annotations

from typing import Callable

from ..notation.ast import Access, Add, Assignment, Expr, IndexVar, Neg, Reduction, Sub, walk

# Sums of this many sparse terms or more are chained (four merged in one kernel ran at 2.01
# ms where the chain took 1.34, CSR 2000 x 2000 at 1%, one thread) ...
MIN_TERMS = 4
# ... where their operands store this many entries in all: each step costs some 25 us more
# than its kernel (a fresh temporary as the next step's operand), which small sums do not
# repay (one thread, merged / chain in us: four CSR 100 x 100 at 10%, 4000 entries, 38 / 96;
# 200 x 200, 16,000 entries, 174 / 138; five terms, 5000 entries, 70 / 105; 20,000, 293 /
# 140) ...
MIN_ENTRIES = 1 << 13
# ... and from this many terms whatever their size: the merged kernel takes seconds to
# compile (3.2 s for six CSR terms, 4.9 s for seven)
ALWAYS_TERMS = 6
# terms per step: the first step adds this many, later ones the running sum and one fewer
STEP_TERMS = 3


def _terms(e: Expr) -> list[tuple[bool, Expr]]:
    """The terms a left fold adds as ``e`` does, with their signs (True: subtracted), left
    to right. Only the left operand of a sum opens into terms: ``a + (b + c)`` is not
    ``(a + b) + c`` in floating point, so a parenthesized sum stays one term (which no chain
    takes); a negated sum opens, negation being exact (``-(a + b)`` is ``-a - b``)."""
    if isinstance(e, (Add, Sub)):
        return _terms(e.a) + [(isinstance(e, Sub), e.b)]
    if isinstance(e, Neg):
        return [(not neg, t) for neg, t in _terms(e.operand)]
    return [(False, e)]


def _plain_term(term: Expr, result_vars: tuple[IndexVar, ...], sparse: Callable[[str], bool]) -> bool:
    """Whether ``term`` can be added on its own into a temporary shaped like the result: it
    holds no reduction (whose variable another term could share), and every operand it reads
    is sparse and read by the result's index variables, in the result's order or, for a
    matrix, transposed (a step over three terms of a 3-tensor read in other orders merges
    6859 cases; over matrices one transposed term compiles in about a second)."""
    matrix = len(result_vars) == 2
    for node in walk(term):
        if isinstance(node, Reduction):
            return False
        if isinstance(node, Access) and (not sparse(node.tensor) or (
                node.indices != result_vars
                and not (matrix and node.indices == result_vars[::-1]))):
            return False
    return True


def _added(acc: Expr | None, term: tuple[bool, Expr]) -> Expr:
    neg, e = term
    if acc is None:
        return Neg(e) if neg else e
    return Sub(acc, e) if neg else Add(acc, e)


def sum_chain(a: Assignment, sparse: Callable[[str], bool], entries: Callable[[], int],
              fresh: Callable[[], str]) -> list[Assignment] | None:
    """``a`` as a chain of assignments, each adding at most ``STEP_TERMS`` terms (the
    previous step's result counting as one), the last one assigning ``a``'s result; None
    unless ``a`` assigns (not ``+=``) a sum of at least ``MIN_TERMS`` terms, each an
    element-wise expression of operands for which ``sparse(name)`` holds, read as the result
    is (``B(i,j)`` in a sum into ``A(i,j)``) or transposed into a matrix; and unless the terms are
    ``ALWAYS_TERMS`` or more or their operands store ``MIN_ENTRIES`` entries in all
    (``entries()``). The caller decides that the result is sparse. ``fresh()`` names each
    temporary (a name no operand has)."""
    if a.accumulate:
        return None
    terms = _terms(a.rhs)
    result_vars = a.lhs.indices
    if (len(terms) < MIN_TERMS or not all(isinstance(v, IndexVar) for v in result_vars)
            or len(set(result_vars)) != len(result_vars)
            or not all(_plain_term(t, result_vars, sparse) for _, t in terms)
            or (len(terms) < ALWAYS_TERMS and entries() < MIN_ENTRIES)):
        return None
    steps: list[Assignment] = []
    acc: Expr | None = None
    rest = list(terms)
    while rest:
        take = STEP_TERMS if acc is None else STEP_TERMS - 1
        rhs = acc
        for term in rest[:take]:
            rhs = _added(rhs, term)
        rest = rest[take:]
        lhs = a.lhs if not rest else Access(fresh(), a.lhs.indices)
        steps.append(Assignment(lhs, rhs))  # type: ignore[arg-type]
        acc = lhs
    return steps
