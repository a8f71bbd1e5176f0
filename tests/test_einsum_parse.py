"""Tests for coiter.notation.einsum: NumPy subscripts to index notation."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coiter.errors import ParseError
from coiter.notation.ast import Access, Assignment, Expr, IndexVar, Mul, Reduction
from coiter.notation.einsum import parse_einsum
from coiter.notation.reductions import insert_reductions

i, j, k = IndexVar("i"), IndexVar("j"), IndexVar("k")
a, b = IndexVar("a"), IndexVar("b")  # the first letters no term uses: an ellipsis's


def acc(name: str, *indices: IndexVar) -> Access:
    """Shorthand for an access node."""
    return Access(name, indices)


@pytest.mark.parametrize(
    ("subscripts", "ranks", "expected"),
    [
        ("ij,jk->ik", [2, 2], Assignment(acc("out", i, k), Mul(acc("T0", i, j), acc("T1", j, k)))),
        ("ij,jk", [2, 2], Assignment(acc("out", i, k), Mul(acc("T0", i, j), acc("T1", j, k)))),
        (" ij , jk -> ki ", [2, 2], Assignment(acc("out", k, i), Mul(acc("T0", i, j), acc("T1", j, k)))),
        ("ij->", [2], Assignment(acc("out"), acc("T0", i, j))),
        ("i,i", [1, 1], Assignment(acc("out"), Mul(acc("T0", i), acc("T1", i)))),
        ("i,i->i", [1, 1], Assignment(acc("out", i), Mul(acc("T0", i), acc("T1", i)))),
        ("ji", [2], Assignment(acc("out", i, j), acc("T0", j, i))),
        ("ij->ji", [2], Assignment(acc("out", j, i), acc("T0", i, j))),
        (
            "ij,j,i->",
            [2, 1, 1],
            Assignment(acc("out"), Mul(Mul(acc("T0", i, j), acc("T1", j)), acc("T2", i))),
        ),
        (",i->i", [0, 1], Assignment(acc("out", i), Mul(acc("T0"), acc("T1", i)))),
        # Implicit output order is ASCII order, as in NumPy: upper case before lower case.
        ("iB", [2], Assignment(acc("out", IndexVar("B"), i), acc("T0", i, IndexVar("B")))),
        # An ellipsis takes letters no term uses, in order, aligned at the last dimension;
        # implicit output puts its dimensions first.
        ("...ij,...j", [4, 2], Assignment(acc("out", a, b, i),
                                          Mul(acc("T0", a, b, i, j), acc("T1", b, j)))),
        ("i...->...", [3], Assignment(acc("out", a, b), acc("T0", i, a, b))),
        ("...->...i", [0], None),
        ("ij...,jk->ik", [2, 2], Assignment(acc("out", i, k), Mul(acc("T0", i, j), acc("T1", j, k)))),
    ],
)
def test_subscripts_become_products(subscripts: str, ranks: list[int], expected: Assignment | None) -> None:
    if expected is None:
        with pytest.raises(ParseError, match="'i' does not appear"):
            parse_einsum(subscripts, len(ranks), ranks)
    else:
        assert parse_einsum(subscripts, len(ranks), ranks) == expected


def test_summed_letters_get_innermost_reductions() -> None:
    # Over a pure product, summing each letter at its innermost scope equals NumPy's sum of
    # the whole product (distributivity); test_agrees_with_numpy_einsum checks the values.
    a = insert_reductions(parse_einsum("ij,jk,k->", 3, [2, 2, 1]))
    inner = Mul(Reduction(i, acc("T0", i, j)), acc("T1", j, k))
    assert a.rhs == Reduction(k, Mul(Reduction(j, inner), acc("T2", k)))


@pytest.mark.parametrize(
    ("subscripts", "ranks", "column", "fragment"),
    [
        ("...i...j", [3], 5, "one ellipsis"),
        ("...ij->ij", [3], 1, "stands for 1 dimension(s) that the output does not place"),
        ("a...bc,...d->", [2, 1], 1, "operand 0 (T0) has 2 dimension(s) but its subscripts 'abc' name 3"),
        ("i..j", [2], 2, "invalid character '.'"),
        ("ij,jk", [2], 4, "name 2 operand(s) but 1"),
        ("ij", [2, 2], 3, "name 1 operand(s) but 2"),
        ("ij->ij", [2, 2], 3, "name 1 operand(s) but 2"),
        ("ij", [], 1, "but 0 operand(s)"),
        ("ij,jk->ik", [2, 3], 4, "operand 1 (T1) has 3 dimension(s)"),
        ("ij", [3], 1, "operand 0 (T0) has 3 dimension(s)"),
        ("ij,->i", [2, 1], 4, "operand 1 (T1) has 1 dimension(s)"),
        ("ij->k", [2], 5, "output subscript 'k' does not appear"),
        ("ij->ii", [2], 6, "output subscript 'i' is repeated"),
        ("i->i->i", [1], 5, "only one '->'"),
        ("i->i,j", [1], 5, "cannot contain ','"),
        ("i2", [2], 2, "invalid character '2'"),
        ("i-j", [2], 2, "invalid character '-'"),
        ("i>j", [2], 2, "invalid character '>'"),
        ("i.j", [2], 2, "invalid character '.'"),
        ("i\u03bb", [2], 2, "invalid character"),
    ],
)
def test_errors(subscripts: str, ranks: list[int], column: int, fragment: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_einsum(subscripts, len(ranks), ranks)
    assert info.value.column == column
    assert fragment in str(info.value)


def test_ranks_must_match_the_operand_count() -> None:
    with pytest.raises(ValueError, match="2 ranks for 1 operands"):
        parse_einsum("ij", 1, [2, 2])


# -- agreement with numpy.einsum --------------------------------------------------------------

_SIZES = {"a": 2, "b": 3, "c": 2, "d": 3}


def _evaluate(e: Expr, arrays: dict[str, np.ndarray], env: dict[IndexVar, int]) -> float:
    """Value of ``e`` at the index point ``env``, summing Reductions by brute force."""
    if isinstance(e, Access):
        return float(arrays[e.tensor][tuple(env[v] for v in e.indices)])
    if isinstance(e, Reduction):
        return sum(_evaluate(e.body, arrays, {**env, e.var: n}) for n in range(_SIZES[e.var.name]))
    assert isinstance(e, Mul)
    return _evaluate(e.a, arrays, env) * _evaluate(e.b, arrays, env)


@st.composite
def _einsum_calls(draw: st.DrawFn) -> tuple[str, list[np.ndarray]]:
    """Random valid subscripts over letters a-d (explicit or implicit) and matching operands."""
    n_operands = draw(st.integers(1, 3))
    terms = ["".join(draw(st.permutations("abcd"))[: draw(st.integers(0, 3))]) for _ in range(n_operands)]
    subscripts = ",".join(terms)
    if draw(st.booleans()):
        used = sorted(set("".join(terms)))
        output = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
        subscripts += "->" + "".join(output)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    operands = [rng.integers(-3, 4, size=[_SIZES[c] for c in t]).astype(float) for t in terms]
    return subscripts, operands


@given(_einsum_calls())
def test_agrees_with_numpy_einsum(call: tuple[str, list[np.ndarray]]) -> None:
    subscripts, operands = call
    a = insert_reductions(parse_einsum(subscripts, len(operands), [op.ndim for op in operands]))
    arrays = {f"T{n}": op for n, op in enumerate(operands)}
    expected = np.einsum(subscripts, *operands)
    assert expected.ndim == len(a.lhs.indices)
    for point in itertools.product(*(range(_SIZES[v.name]) for v in a.lhs.indices)):
        env = dict(zip(a.lhs.indices, point))
        assert _evaluate(a.rhs, arrays, env) == expected[point]

