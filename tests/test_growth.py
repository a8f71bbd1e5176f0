"""Growth of appended result arrays: zero fill only for arrays that are read or not
assigned entry by entry (coiter.lower.growth), checked on IR and on computed values."""
from __future__ import annotations

import numpy as np
import pytest

import coiter
from coiter.ir.nodes import Assign, Bin, Block, Call, Cast, Const, Load, Var
from coiter.lower.growth import drop_unread_zero_fill
from helpers import random_array


def _grow(name: str) -> Assign:
    call = Call("coiter_grow", (Var(name), Var("cap"), Var("cap_new"), Call("sizeof", (Var("double"),))))
    return Assign(Var(name), Cast("double*", call))


def _calls(body: Block) -> dict[str, str]:
    return {s.target.name: s.value.a.fn for s in body.stmts if isinstance(s, Assign) and isinstance(s.value, Cast)}


def test_only_written_unread_arrays_lose_the_zero_fill() -> None:
    body = Block((
        _grow("crd"), _grow("vals"), _grow("acc"), _grow("pos"),
        Assign(Load("crd", Var("p")), Var("j")),
        Assign(Load("vals", Var("p")), Load("x", Var("j"))),
        Assign(Load("acc", Var("p")), Const(1.0), "+="),       # accumulated: read
        Assign(Load("pos", Bin("+", Var("i"), Const(1))), Var("n")),
    ))
    got = _calls(drop_unread_zero_fill(body, written={"crd", "vals", "acc"}))
    # pos is unread but not assigned entry by entry: it keeps its zeros
    assert got == {"crd": "coiter_expand", "vals": "coiter_expand", "acc": "coiter_grow", "pos": "coiter_grow"}


def test_an_array_passed_to_a_call_counts_as_read() -> None:
    body = Block((_grow("vals"), Assign(Var("s"), Call("coiter_sum", (Var("vals"), Const(0), Var("n"))))))
    assert _calls(drop_unread_zero_fill(body, written={"vals"})) == {"vals": "coiter_grow"}


@pytest.mark.parametrize("expr,formats,shapes,spec", [
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr", "C": "dcsr"}, {"A": (40, 30), "B": (30, 50)}, "ik,kj->ij"),
    ("A(i,j,k) = B(i,j,k) * c(k)", {"B": "ssd", "A": "ssd"}, {"B": (20, 30, 5), "c": (5,)}, "ijk,k->ijk"),
    ("A(i,j) = B(i,j) + C(i,j)", {"B": "csr", "C": "csr", "A": "csr"}, {"B": (60, 70), "C": (60, 70)}, "ij,ij->ij"),
    # products outgrow the hint: each row reserves its room before its loop
    ("A(i,j) = b(i) * c(j)", {"b": "s", "c": "s", "A": "csr"}, {"b": (60,), "c": (700,)}, "i,j->ij"),
])
def test_grown_results_hold_no_garbage(expr, formats, shapes, spec) -> None:
    """Results that outgrow their first capacity many times over, in a process whose heap
    has been written with nonzeros: every stored value matches NumPy."""
    rng = np.random.default_rng(3)
    junk = [np.full(1 << 16, 7.5) for _ in range(8)]  # freed below: the heap holds nonzeros
    del junk
    arrays = {n: random_array(rng, s, 0.6) for n, s in shapes.items()}
    ops = {n: coiter.Tensor.from_numpy(a, format=formats[n]) if n in formats else a for n, a in arrays.items()}
    k = coiter.compile(expr, formats=formats)
    for threads in (1, 2):
        got = k(threads=threads, **ops)
        ref = np.einsum(spec, *arrays.values()) if "+" not in expr else sum(arrays.values())
        np.testing.assert_allclose(got.to_numpy(), ref, rtol=1e-12)
