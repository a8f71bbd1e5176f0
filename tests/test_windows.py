"""Windows of operand modes (TACO's ``B(i(lo,hi,step))``, the DSL's ``B[i[lo:hi:step]]``),
in every format, against NumPy slicing of the same data."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import coiter
from coiter import ArgumentError, ParseError, ShapeError
from helpers import check, random_array, tensor

OPS = {"+": np.add, "-": np.subtract, "*": np.multiply}


def _window(n: int, draw_lo: int, length: int, step: int) -> tuple[int, int, int] | None:
    """A window of a mode of size ``n`` holding ``length`` coordinates, or None."""
    lo = draw_lo % n
    hi = lo + (length - 1) * step + 1
    return (lo, hi, step) if hi <= n else None


def _spell(var: str, w: tuple[int, int, int]) -> str:
    lo, hi, step = w
    return f"{var}({lo},{hi}{f',{step}' if step != 1 else ''})"


@given(n=st.integers(1, 12), m=st.integers(1, 12), length=st.integers(1, 6),
       lo_b=st.integers(0, 11), lo_c=st.integers(0, 11), step_b=st.integers(1, 3),
       step_c=st.integers(1, 3), op=st.sampled_from(sorted(OPS)),
       fb=st.sampled_from(["d", "s"]), fc=st.sampled_from(["d", "s"]), fa=st.sampled_from(["d", "s"]),
       density=st.sampled_from([0.0, 0.3, 0.8]), seed=st.integers(0, 99))
def test_vector_windows(n, m, length, lo_b, lo_c, step_b, step_c, op, fb, fc, fa, density, seed) -> None:
    wb, wc = _window(n, lo_b, length, step_b), _window(m, lo_c, length, step_c)
    if wb is None or wc is None:
        return
    rng = np.random.default_rng(seed)
    b, c = random_array(rng, (n,), density), random_array(rng, (m,), density)
    got = coiter.evaluate(f"a(i) = b({_spell('i', wb)}) {op} c({_spell('i', wc)})", out_format=fa,
                          b=tensor(b, fb), c=tensor(c, fc))
    check(got, OPS[op](b[slice(*wb)], c[slice(*wc)]))


@given(rows=st.integers(2, 8), cols=st.integers(2, 8), lr=st.integers(1, 4), lc=st.integers(1, 4),
       lo=st.tuples(st.integers(0, 7), st.integers(0, 7), st.integers(0, 7), st.integers(0, 7)),
       steps=st.tuples(st.integers(1, 2), st.integers(1, 3)), op=st.sampled_from(sorted(OPS)),
       fmts=st.tuples(st.sampled_from(["dense", "csr", "dcsr", "coo"]),
                      st.sampled_from(["dense", "csr", "dcsr", "coo"]), st.sampled_from(["dense", "csr"])),
       density=st.sampled_from([0.1, 0.5]), seed=st.integers(0, 99))
def test_matrix_windows(rows, cols, lr, lc, lo, steps, op, fmts, density, seed) -> None:
    """TACO's windowing tests: two windowed matrices combined, any formats (row-major)."""
    wi, wj = _window(rows, lo[0], lr, steps[0]), _window(cols, lo[1], lc, steps[1])
    vi, vj = _window(rows, lo[2], lr, 1), _window(cols, lo[3], lc, 1)
    if None in (wi, wj, vi, vj):
        return
    rng = np.random.default_rng(seed)
    b, c = random_array(rng, (rows, cols), density), random_array(rng, (rows, cols), density)
    fb, fc, fa = fmts
    text = (f"A(i,j) = B({_spell('i', wi)},{_spell('j', wj)}) {op} "
            f"C({_spell('i', vi)},{_spell('j', vj)})")
    got = coiter.evaluate(text, out_format=fa, B=tensor(b, fb), C=tensor(c, fc))
    check(got, OPS[op](b[slice(*wi), slice(*wj)], c[slice(*vi), slice(*vj)]))


@pytest.mark.parametrize("fmt,fx", list(itertools.product(["dense", "csr", "dcsr", "coo", "csc"], ["d", "s"])))
def test_windowed_matrix_vector_product(fmt, fx) -> None:
    rng = np.random.default_rng(3)
    a, x = random_array(rng, (9, 11), 0.4), random_array(rng, (8,), 0.6)
    got = coiter.evaluate("y(i) = A(i(1,9,2), j(3,11)) * x(j(0,8))", A=tensor(a, fmt), x=tensor(x, fx))
    check(got, a[1:9:2, 3:11] @ x[0:8])


@pytest.mark.parametrize("fmt", ["ddd", "sss", "dss", "dds", "sds"])
def test_windows_of_a_tensor_mix_with_plain_modes(fmt) -> None:
    rng = np.random.default_rng(4)
    b, c = random_array(rng, (5, 4, 9), 0.4), rng.standard_normal(3)
    got = coiter.evaluate("A(i,j) = B(i(1,4), j, k(2,9,3)) * c(k)", B=tensor(b, fmt), c=c)
    check(got, np.einsum("ijk,k->ij", b[1:4, :, 2:9:3], c))


def test_dsl_windows_are_the_parsers() -> None:
    rng = np.random.default_rng(5)
    a = random_array(rng, (7, 6), 0.5)
    A = tensor(a, "csr")
    i, j = coiter.index_vars("i j")
    C = coiter.Tensor((3, 3), format="csr")
    C[i, j] = A[i[0:6:2], j[1:4]] * 2
    check(C, 2 * a[0:6:2, 1:4])
    parsed = coiter.parse("C(i,j) = A(i(0,6,2),j(1,4)) * 2")
    assert str(parsed) == "C(i,j) = A(i(0,6,2),j(1,4)) * 2"
    assert coiter.parse(str(parsed)) == parsed
    assert parsed.rhs.a.indices == (i[0:6:2], j[1:4])


def test_a_sparse_window_is_walked_in_place() -> None:
    """No copy of the operand: its stored entries outside the window are never visited."""
    rng = np.random.default_rng(6)
    b = random_array(rng, (4000,), 0.01)
    k = coiter.compile("a(i) = b(i(1000,1100)) * c(i)", {"b": "s", "c": "s"}, count_iterations=True)
    B, c = tensor(b, "s"), random_array(rng, (100,), 1.0)
    check(k(b=B, c=tensor(c, "s")), b[1000:1100] * c)
    assert k.iterations <= 4 * 100 + 64  # the window's coordinates, not b's 4000 or its ~40 entries


def test_window_errors_name_the_window() -> None:
    b = tensor(np.arange(8.0), "s")
    with pytest.raises(ShapeError, match=r"the window i\(2,10\) of b\(i\(2,10\)\) reaches coordinate 9 "
                                         r"but the mode has size 8"):
        coiter.evaluate("a(i) = b(i(2,10))", b=b)
    with pytest.raises(ShapeError, match=r"index variable i has 3 coordinates in the window i\(0,3\) "
                                         r"of b\(i\(0,3\)\) but 4 in the window i\(0,4\) of c"):
        coiter.evaluate("a(i) = b(i(0,3)) + c(i(0,4))", b=b, c=b)
    with pytest.raises(ShapeError, match=r"index variable i has size 3 in the window i\(0,6,2\)"):
        coiter.evaluate("a(i) = b(i(0,6,2)) * c(i)", b=b, c=np.ones(4))
    with pytest.raises(ArgumentError, match="the result a\\(i\\(0,3\\)\\) has the window i\\(0,3\\)"):
        coiter.compile("a(i(0,3)) = b(i)")
    for bad, match in (("a(i) = b(i(4,2))", "needs 0 <= lo < hi"), ("a(i) = b(i(0,4,0))", "step"),
                       ("a(i) = b(i(0,4)+1)", "a window is a whole subscript"),
                       ("a(i) = b(i(0))", r"the window i\(lo,hi\)")):
        with pytest.raises(ParseError, match=match):
            coiter.parse(bad)
    i = coiter.IndexVar("i")
    for bad in (slice(None, None), slice(3, 1), slice(0, 4, -1), 2):
        with pytest.raises(ArgumentError, match="window"):
            i[bad]
