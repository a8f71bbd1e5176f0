"""Tests for coiter.notation.reductions: where implicit sums are placed."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coiter.notation.ast import (
    Access,
    Add,
    Assignment,
    BinaryExpr,
    Expr,
    IndexVar,
    Literal,
    Mul,
    Neg,
    Reduction,
    Sub,
    accesses,
    children,
    walk,
)
from coiter.notation.parser import parse
from coiter.notation.reductions import distinct_reductions, insert_reductions, reduction_vars

i, j, k = IndexVar("i"), IndexVar("j"), IndexVar("k")


def acc(name: str, *indices: IndexVar) -> Access:
    """Shorthand for an access node."""
    return Access(name, indices)


@pytest.mark.parametrize(
    ("text", "expected_rhs"),
    [
        ("y(i) = A(i,j) * x(j)", Reduction(j, Mul(acc("A", i, j), acc("x", j)))),
        (
            "y(i) = A(i,j)*x(j) + z(i)",
            Add(Reduction(j, Mul(acc("A", i, j), acc("x", j))), acc("z", i)),
        ),
        ("a = B(i,j)*C(i,j)", Reduction(i, Reduction(j, Mul(acc("B", i, j), acc("C", i, j))))),
        ("a = B(j,i)*C(i,j)", Reduction(j, Reduction(i, Mul(acc("B", j, i), acc("C", i, j))))),
        ("A(i,j) = B(i,k)*C(k,j)", Reduction(k, Mul(acc("B", i, k), acc("C", k, j)))),
        (
            "A(i,j) = (B(i,j,k)*C(i,j,k)) + D(i,j)",
            Add(Reduction(k, Mul(acc("B", i, j, k), acc("C", i, j, k))), acc("D", i, j)),
        ),
        (
            "y(i) = A(i,j)*x(j) + B(i,j)",
            Reduction(j, Add(Mul(acc("A", i, j), acc("x", j)), acc("B", i, j))),
        ),
        ("y(i) = A(i,j) + z(i)", Add(Reduction(j, acc("A", i, j)), acc("z", i))),
        ("y(i) = -A(i,j)", Neg(Reduction(j, acc("A", i, j)))),
        (
            "a = b(i) * c(i) - d(j) * e(j)",
            Sub(Reduction(i, Mul(acc("b", i), acc("c", i))), Reduction(j, Mul(acc("d", j), acc("e", j)))),
        ),
        (
            "a = B(i,j) * c(j) * d(i)",
            Reduction(i, Mul(Reduction(j, Mul(acc("B", i, j), acc("c", j))), acc("d", i))),
        ),
        ("y(i) = x(i) * 2", Mul(acc("x", i), Literal(2))),
        ("A(i,j) = 0", Literal(0)),
    ],
)
def test_reductions_are_placed_innermost(text: str, expected_rhs: Expr) -> None:
    a = parse(text)
    result = insert_reductions(a)
    assert result == Assignment(a.lhs, expected_rhs, a.accumulate)


def test_accumulate_flag_is_kept() -> None:
    assert insert_reductions(parse("y(i) += A(i,j)*x(j)")).accumulate


def test_existing_reductions_are_left_alone() -> None:
    a = Assignment(acc("y", i), Add(Reduction(j, acc("A", i, j)), Mul(acc("B", i, j), acc("x", j))))
    summed_product = Reduction(j, Mul(acc("B", i, j), acc("x", j)))
    assert insert_reductions(a) == Assignment(a.lhs, Add(Reduction(j, acc("A", i, j)), summed_product))


def test_access_sources_are_preserved() -> None:
    source = object()
    a = Assignment(acc("y", i), Mul(Access("A", (i, j), source), acc("x", j)))
    placed = insert_reductions(a)
    assert [x.source for x in accesses(placed.rhs)] == [source, None]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("y(i) = A(i,j) * x(j)", [j]),
        ("a = B(j,i) * C(i,j)", [j, i]),
        ("A(i,j) = B(i,k) * C(k,j)", [k]),
        ("A(i,j) = B(i,j)", []),
    ],
)
def test_reduction_vars(text: str, expected: list[IndexVar]) -> None:
    a = parse(text)
    assert reduction_vars(a) == expected
    assert reduction_vars(insert_reductions(a)) == expected


# -- properties on random expressions ---------------------------------------------------------

_VARS = [IndexVar(n) for n in "ijkl"]

_leaves = st.one_of(
    st.builds(lambda p, n: Access("T", tuple(p[:n])), st.permutations(_VARS), st.integers(0, 3)),
    st.integers(0, 9).map(Literal),
)


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    """One level of expression tree above ``children``: negation or a binary operator."""
    return st.one_of(
        children.map(Neg),
        st.builds(lambda op, a, b: op(a, b), st.sampled_from([Add, Sub, Mul]), children, children),
    )


_expressions = st.recursive(_leaves, _extend, max_leaves=20)


def _strip(e: Expr) -> Expr:
    """``e`` with every Reduction node removed."""
    if isinstance(e, Reduction):
        return _strip(e.body)
    if isinstance(e, BinaryExpr):
        return type(e)(_strip(e.a), _strip(e.b))
    if isinstance(e, Neg):
        return Neg(_strip(e.operand))
    return e


def _uses(e: Expr, v: IndexVar) -> int:
    """How many accesses in ``e`` use ``v``."""
    return sum(v in x.indices for x in accesses(e))


@given(_expressions, st.integers(0, 4))
def test_every_reduction_is_innermost_and_covers_all_uses(rhs: Expr, n_result: int) -> None:
    a = Assignment(Access("R", tuple(_VARS[:n_result])), rhs)
    placed = insert_reductions(a)
    assert _strip(placed.rhs) == rhs
    reductions = [n for n in walk(placed.rhs) if isinstance(n, Reduction)]
    assert sorted(r.var.name for r in reductions) == sorted(v.name for v in reduction_vars(a))
    for r in reductions:
        core = _strip(r.body)
        assert _uses(core, r.var) == _uses(rhs, r.var)
        if isinstance(core, (BinaryExpr, Neg)):
            assert all(_uses(c, r.var) < _uses(core, r.var) for c in children(core))
    assert insert_reductions(placed) == placed


@pytest.mark.parametrize("text, expected, originals", [
    ("y(i) = min(j, A(i,j)) + min(j, B(i,j))", "y(i) = min(j, A(i,j)) + min(j_2, B(i,j_2))", {"j_2": "j"}),
    ("y(i) = min(j, A(i,j) + min(j, B(i,j)))", "y(i) = min(j, A(i,j) + min(j_2, B(i,j_2)))", {"j_2": "j"}),
    ("y(i) = sum(j, A(i,j)) * C(i,j_2) + sum(j, B(i,j))",
     "y(i) = sum(j, A(i,j)) * C(i,j_2) + sum(j_3, B(i,j_3))", {"j_3": "j"}),
    ("y(i) = max(k, I(i+k)) - max(k, J(2*i+k))", "y(i) = max(k, I(i+k)) - max(k_2, J(2*i+k_2))", {"k_2": "k"}),
    ("y(i) = sum(j, A(i,j)) + sum(k, B(i,k))", "y(i) = sum(j, A(i,j)) + sum(k, B(i,k))", {}),
])
def test_distinct_reductions_rename_a_variable_bound_twice(text: str, expected: str,
                                                          originals: dict[str, str]) -> None:
    a, renamed = distinct_reductions(parse(text))
    assert a == parse(expected)
    assert renamed == {IndexVar(n): IndexVar(o) for n, o in originals.items()}
