"""Tests for coiter.notation.parser: ASTs, precedence, error columns, and a print/parse round trip."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coiter.errors import ParseError
from coiter.notation.ast import (
    Access,
    Add,
    Assignment,
    Div,
    Expr,
    IndexVar,
    Literal,
    Mul,
    Neg,
    Sub,
    index_vars_of,
)
from coiter.notation.parser import parse

i, j, k = IndexVar("i"), IndexVar("j"), IndexVar("k")


def acc(name: str, *indices: IndexVar) -> Access:
    """Shorthand for an access node."""
    return Access(name, indices)


def same(actual: object, expected: object) -> None:
    """Assert equal ASTs, with literal types too (``Literal(2) == Literal(2.0)`` as dataclasses)."""
    assert actual == expected
    assert repr(actual) == repr(expected)


# -- well-formed assignments ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("y(i) = A(i,j) * x(j)", Assignment(acc("y", i), Mul(acc("A", i, j), acc("x", j)))),
        ("A(i,j) = B(i,k) * C(k,j)", Assignment(acc("A", i, j), Mul(acc("B", i, k), acc("C", k, j)))),
        ("a = B(i,j) * C(i,j)", Assignment(acc("a"), Mul(acc("B", i, j), acc("C", i, j)))),
        (
            "A(i,j) = B(i,j) + C(i,j) - 2.5 * D(i,j)",
            Assignment(
                acc("A", i, j),
                Sub(Add(acc("B", i, j), acc("C", i, j)), Mul(Literal(2.5), acc("D", i, j))),
            ),
        ),
        (
            "A(i,j) = -(B(i,j) + C(i,j)) * D(i,j) / 4",
            Assignment(
                acc("A", i, j),
                Div(Mul(Neg(Add(acc("B", i, j), acc("C", i, j))), acc("D", i, j)), Literal(4)),
            ),
        ),
        ("y(i) += A(i,j)*x(j)", Assignment(acc("y", i), Mul(acc("A", i, j), acc("x", j)), accumulate=True)),
        ("a() = b()", Assignment(acc("a"), acc("b"))),
        ("a = b", Assignment(acc("a"), acc("b"))),
        (
            "y(i) = A(i,j)*x(j) + y(i)",
            Assignment(acc("y", i), Add(Mul(acc("A", i, j), acc("x", j)), acc("y", i))),
        ),
        ("A(i,j) = 0", Assignment(acc("A", i, j), Literal(0))),
        ("A(i,j) = 2.5", Assignment(acc("A", i, j), Literal(2.5))),
        ("A(i,j) = -1", Assignment(acc("A", i, j), Literal(-1))),  # one literal: -2**63 fits int64
        ("A(i,j) = --1.5", Assignment(acc("A", i, j), Neg(Literal(-1.5)))),
        ("A(i,j) = -(1)", Assignment(acc("A", i, j), Neg(Literal(1)))),
        ("  y ( i )=A( i , j )*x(j)  ", Assignment(acc("y", i), Mul(acc("A", i, j), acc("x", j)))),
        ("y(i)=+x(i)", Assignment(acc("y", i), acc("x", i))),
        ("y(i) = --x(i)", Assignment(acc("y", i), Neg(Neg(acc("x", i))))),
        ("y(i) = x(i) * -z(i)", Assignment(acc("y", i), Mul(acc("x", i), Neg(acc("z", i))))),
        ("y_2(ii0) = _A(ii0)", Assignment(acc("y_2", IndexVar("ii0")), acc("_A", IndexVar("ii0")))),
    ],
)
def test_parses_to_expected_ast(text: str, expected: Assignment) -> None:
    same(parse(text), expected)


@pytest.mark.parametrize(
    ("number", "value"),
    [
        ("3", 3),
        ("007", 7),
        ("2.5", 2.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("1e-3", 1e-3),
        ("1.5E+2", 150.0),
        ("2e3", 2000.0),
        ("2j", 2j),
        ("1.5e1J", 15j),
        ("12345678901234567890", 12345678901234567890),
    ],
)
def test_number_literals(number: str, value: complex) -> None:
    same(parse(f"a = {number}").rhs, Literal(value))


def test_subtraction_is_left_associative() -> None:
    same(parse("a = b - c - d").rhs, Sub(Sub(acc("b"), acc("c")), acc("d")))


def test_division_and_multiplication_are_left_associative() -> None:
    same(parse("a = b / c * d").rhs, Mul(Div(acc("b"), acc("c")), acc("d")))
    same(parse("a = b * c / d").rhs, Div(Mul(acc("b"), acc("c")), acc("d")))


def test_multiplication_binds_tighter_than_addition() -> None:
    same(parse("a = b + c * d").rhs, Add(acc("b"), Mul(acc("c"), acc("d"))))
    same(parse("a = b * c - d").rhs, Sub(Mul(acc("b"), acc("c")), acc("d")))


def test_unary_minus_binds_tighter_than_multiplication() -> None:
    same(parse("a = -b * c").rhs, Mul(Neg(acc("b")), acc("c")))


def test_parentheses_override_precedence() -> None:
    same(parse("a = b - (c - d)").rhs, Sub(acc("b"), Sub(acc("c"), acc("d"))))
    same(parse("a = (b + c) * d").rhs, Mul(Add(acc("b"), acc("c")), acc("d")))


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("y(i) = A(i,j) *", 16, "end of input"),
        ("y(i = A(i)", 5, "expected ',' or ')'"),
        ("y(i) = A(i,j)) ", 14, "unmatched ')'"),
        ("= A(i)", 1, "expected the result tensor name"),
        ("y(i) A(i)", 6, "expected '=' or '+='"),
        ("y(i) = A(i,,j)", 12, "expected an index variable name"),
        ("y(i) = 3x", 9, "found 'x'"),
        ("y(i) = A(i) $ B(i)", 13, "invalid character '$'"),
        ("", 1, "expected the result tensor name"),
        ("   ", 1, "end of input"),
        ("y(i) = (A(i)", 13, "to close the '(' at column 8"),
        ("y(i) = A(i,)", 12, "expected an index variable name"),
        ("y(i) = A(i, 0)", 13, "subscript of A has no index variable"),
        ("y(i) + 1 = A(i)", 6, "expected '=' or '+='"),
        ("(y(i)) = A(i)", 1, "expected the result tensor name"),
        ("y(i) = ", 7, "expected a tensor access, a number or '('"),
        ("y(i) = A(i) B(i)", 13, "expected an operator or end of input"),
        ("y(i) == A(i)", 6, "found '=='"),
        ("y(i) = A(i) += B(i)", 13, "found '+='"),
        ("y(i) = 1e", 9, "found 'e'"),
    ],
)
def test_syntax_errors_point_at_the_offending_column(text: str, column: int, fragment: str) -> None:
    with pytest.raises(ParseError) as info:
        parse(text)
    assert info.value.column == column
    assert fragment in str(info.value)
    assert info.value.text == text


def test_repeated_index_in_an_operand_reads_its_diagonal() -> None:
    a = parse("y(i) = B(i,i)")
    assert a.rhs == Access("B", (IndexVar("i"), IndexVar("i")))


def test_repeated_index_on_the_left() -> None:
    with pytest.raises(ParseError, match="repeated index variable i in the result A") as info:
        parse("A(i,i) = B(i,j)")
    assert info.value.column == 5


def test_result_index_missing_from_the_right() -> None:
    with pytest.raises(ParseError, match="index variable j of the result does not appear") as info:
        parse("A(i,j) = B(i,k) * C(k,i)")
    assert info.value.column == 5


def test_result_index_missing_is_fine_for_a_tensor_free_fill() -> None:
    same(parse("A(i,j) = 2 * 3").rhs, Mul(Literal(2), Literal(3)))


def test_tensor_used_with_different_orders() -> None:
    with pytest.raises(ParseError, match="tensor B is accessed with 1 index here but with 2 indices") as info:
        parse("y(i) = B(i,j) * B(j)")
    assert info.value.column == 17


def test_result_used_with_a_different_order_on_the_right() -> None:
    with pytest.raises(ParseError, match="tensor y is accessed with 2 indices") as info:
        parse("y(i) = y(i,j)")
    assert info.value.column == 8


def test_error_message_renders_a_caret_under_the_column() -> None:
    with pytest.raises(ParseError) as info:
        parse("y(i) = A(i) $ B(i)")
    lines = str(info.value).splitlines()
    assert lines[-2] == "  y(i) = A(i) $ B(i)"
    assert lines[-1].index("^") == lines[-2].index("$")


# -- round trip: str() of a random AST parses back to the same AST ---------------------------

_INDEX_VARS = [IndexVar(n) for n in ("i", "j", "k", "l")]
_TENSOR_ORDERS = {"A": 2, "B": 2, "C": 3, "x": 1, "y": 1, "s": 0}

_literals = st.one_of(
    st.integers(min_value=0, max_value=10**30),
    st.floats(min_value=0.0, allow_nan=False, allow_infinity=False).map(abs),
    st.floats(min_value=0.0, max_value=1e300, allow_nan=False).map(lambda f: complex(0.0, abs(f))),
).map(Literal)


@st.composite
def _accesses(draw: st.DrawFn) -> Access:
    """An access whose order matches its tensor's fixed order, with distinct indices."""
    name = draw(st.sampled_from(sorted(_TENSOR_ORDERS)))
    indices = draw(st.permutations(_INDEX_VARS))[: _TENSOR_ORDERS[name]]
    return Access(name, tuple(indices))


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    """One level of expression tree above `children`: negation or a binary operator."""
    binary = st.sampled_from([Add, Sub, Mul, Div])
    return st.one_of(
        children.map(Neg),
        st.builds(lambda op, a, b: op(a, b), binary, children, children),
    )


_expressions = st.recursive(st.one_of(_accesses(), _literals), _extend, max_leaves=25)


@st.composite
def _assignments(draw: st.DrawFn) -> Assignment:
    """A valid assignment: the result's indices are a subset of those used on the right."""
    rhs = draw(_expressions)
    used = index_vars_of(rhs)
    result_indices = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
    return Assignment(Access("R", tuple(result_indices)), rhs, draw(st.booleans()))


@given(_assignments())
def test_printed_ast_parses_back_to_itself(a: Assignment) -> None:
    same(parse(str(a)), a)
