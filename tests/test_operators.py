"""User-defined operators (coiter.define, TACO's Func): their values against NumPy in every
front end, the merge lattices their bodies give, semirings built from them, and the
properties a definition states checked against its body."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import coiter
from coiter import ArgumentError, ParseError
from helpers import random_array, tensor

XOR = coiter.define("t_xor(a, b)", "(a != 0) != (b != 0)", identity=0)
RELU_MUL = coiter.define("t_relumul(x, y)", "x * max(y, 0)", annihilator=0)
XNOR = coiter.define("t_xnor(a, b)", "!t_xor(a, b)")  # a body may call operators defined before
SOFT = coiter.define("t_soft(x, t)", "x - min(max(x, -t), t)")  # soft thresholding, 0 at x = 0

REFS = {
    "t_xor": lambda a, b: np.logical_xor(a != 0, b != 0),
    "t_relumul": lambda a, b: a * np.maximum(b, 0),
    "t_xnor": lambda a, b: ~np.logical_xor(a != 0, b != 0),
    "t_soft": lambda a, b: a - np.minimum(np.maximum(a, -b), b),
}


@given(op=st.sampled_from(sorted(REFS)), arith=st.sampled_from(["+", "-", "*", "/"]),
       fa=st.sampled_from(["dense", "csr", "dcsr", "coo"]), fb=st.sampled_from(["dense", "csr"]),
       fc=st.sampled_from(["dense", "csr"]), density=st.sampled_from([0.1, 0.5]),
       seed=st.integers(0, 99))
def test_operators_mix_with_arithmetic(op, arith, fa, fb, fc, density, seed) -> None:
    rng = np.random.default_rng(seed)
    a, b, c = (random_array(rng, (7, 9), density) for _ in range(3))
    if arith == "/":
        c = c + 3.0  # a dense, nonzero divisor (division by a sparse operand has its own tests)
    got = coiter.evaluate(f"R(i,j) = {op}(A(i,j), B(i,j)) {arith} C(i,j)",
                          A=tensor(a, fa), B=tensor(b, fb), C=tensor(c, fc))
    ref = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide}[arith](REFS[op](a, b), c)
    np.testing.assert_allclose(got.to_numpy(), ref, rtol=1e-12, atol=1e-12)


def test_the_body_decides_the_iteration_space() -> None:
    union = coiter.compile("c(i) = t_xor(a(i), b(i))", {"a": "s", "b": "s", "c": "s"})
    inter = coiter.compile("c(i) = t_relumul(a(i), b(i))", {"a": "s", "b": "s", "c": "s"})
    assert union.merge_lattice("i").source.count("label=") == 3  # both, a alone, b alone
    assert inter.merge_lattice("i").source.count("label=") == 1  # both only
    rng = np.random.default_rng(1)
    a, b = random_array(rng, (50,), 0.2), random_array(rng, (50,), 0.2)
    for k, ref, visited in ((union, REFS["t_xor"], (a != 0) | (b != 0)),
                            (inter, REFS["t_relumul"], (a != 0) & (b != 0))):
        got = k(a=tensor(a, "s"), b=tensor(b, "s"))
        np.testing.assert_array_equal(got.to_numpy(), ref(a, b))
        # entries are stored only where the loop visits (an explicit false where both are)
        coords = got.storage.to_coords()[0][0]
        assert visited[coords].all() and np.count_nonzero(ref(a, b)) <= got.nnz


def test_python_calls_and_str() -> None:
    rng = np.random.default_rng(2)
    a, b = random_array(rng, (6, 5), 0.4), random_array(rng, (6, 5), 0.4)
    A, B = tensor(a, "csr"), tensor(b, "csr")
    i, j = coiter.index_vars("i j")
    C = coiter.Tensor((6, 5), format="csr")
    C[i, j] = XOR(A[i, j], B[i, j]) * 2 + RELU_MUL(A[i, j], 0.5)
    np.testing.assert_allclose(C.to_numpy(), 2 * REFS["t_xor"](a, b) + REFS["t_relumul"](a, 0.5))
    assert str(XOR) == "t_xor(a, b) = (a != 0) != (b != 0)"
    assert XOR.value(0, 3.0) and not XOR.value(2.0, 3.0)


def test_min_plus_semiring_through_an_operator() -> None:
    """Bellman-Ford relaxation with a user operator for the semiring's product."""
    coiter.define("t_edge(w, d)", "w + d")
    rng = np.random.default_rng(3)
    m = sp.random_array((40, 40), density=0.1, rng=rng, format="csr")
    m.data = m.data * 10 + 1
    W = coiter.Tensor.from_scipy(m.T.tocsr(), fill_value=np.inf)  # W(i,j): edge j -> i
    relax = coiter.compile("e(i) = min(d(i), min(j, t_edge(W(i,j), d(j))))", formats={"W": "csr"},
                           fill_values={"W": np.inf})
    d = np.where(np.arange(40) == 0, 0.0, np.inf)
    while not np.array_equal(nxt := relax(W=W, d=d).to_numpy(), d):  # until no distance shrinks
        d = nxt
    np.testing.assert_allclose(d, sp.csgraph.shortest_path(m, indices=0, directed=True))


def test_definitions_are_checked() -> None:
    for args, kwargs, match in (
            (("max(a, b)", "a"), {}, "built-in"),
            (("t_f(a, a)", "a"), {}, "repeated"),
            (("t_f(a)", "a + c"), {}, "reads c, which is not one of its parameters"),
            (("t_g(a, b)", "a + b"), {"annihilator": 0}, r"0 is not its annihilator: t_g\(0, 1.0\)"),
            (("t_h(a, b)", "a * b"), {"identity": 0}, r"0 is not its identity: t_h\(0, 1.0\)"),
            (("t_r(a)", "a"), {"identity": 0}, "binary operator"),
            (("t_s(a, b)", "a"), {"identity": float("nan")}, "real number"),
            (("t s", "a"), {}, "signature"),
            (("t_c(a)", "a * i"), {}, "reads i"),
    ):
        with pytest.raises(ArgumentError, match=match):
            coiter.define(*args, **kwargs)
    with pytest.raises(ParseError, match="reduces over j"):
        coiter.define("t_q(a)", "sum(j, a)")
    with pytest.raises(ParseError, match="t_xor takes 2 argument"):
        coiter.parse("c(i) = t_xor(a(i))")
    with pytest.raises(ArgumentError, match="t_xor takes 2 argument"):
        XOR(1)


def test_a_redefinition_reaches_the_next_evaluate() -> None:
    """Regression: evaluate's per-spelling fast path ran the kernel of the old body."""
    a, b = np.arange(3.0), np.full(3, 2.0)
    coiter.define("t_redef(x, y)", "x + y")
    np.testing.assert_array_equal(coiter.evaluate("c(i) = t_redef(a(i), b(i))", a=a, b=b).to_numpy(), a + b)
    coiter.define("t_redef(x, y)", "x * y")
    np.testing.assert_array_equal(coiter.evaluate("c(i) = t_redef(a(i), b(i))", a=a, b=b).to_numpy(), a * b)
