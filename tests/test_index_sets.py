"""Index sets (TACO's ``B(i({1,3,5}))``, the DSL's ``B[i[[1, 3, 5]]]``) in every format,
against NumPy's integer-array indexing of the same data."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import coiter
from coiter import ArgumentError, ParseError, ShapeError
from coiter.formats.slicing import gather_storage
from helpers import check, random_array, tensor

OPS = {"+": np.add, "-": np.subtract, "*": np.multiply}


def _spell(var: str, coords) -> str:
    return f"{var}({{{','.join(str(int(c)) for c in coords)}}})"


@pytest.mark.parametrize("fa,fb,fc", list(itertools.product("ds", repeat=3)))
def test_taco_index_set_vectors(fa, fb, fc) -> None:
    """TACO's windowing/indexSetVectors: b and c hold i at i; a = b(i({1,3,5})) op c(...)."""
    b = tensor(np.arange(10), fb)
    c = tensor(np.arange(10), fc)
    got = coiter.evaluate("a(i) = b(i({1,3,5})) * c(i({1,3,5}))", out_format=fa, b=b, c=c)
    check(got, np.array([1, 9, 25]))
    got = coiter.evaluate("a(i) = b(i({1,3,5})) + c(i({1,3,5}))", out_format=fa, b=b, c=c)
    check(got, np.array([2, 6, 10]))


@pytest.mark.parametrize("fa,fb,fc", list(itertools.product("ds", repeat=3)))
def test_taco_index_set_matrices(fa, fb, fc) -> None:
    """TACO's windowing/indexSetMatrices: b(i,j) = c(i,j) = i + j, formats {Dense, x}."""
    m = np.add.outer(np.arange(10), np.arange(10))
    got = coiter.evaluate("a(i,j) = b(i({1,3,5}),j({2,4,6})) + c(i({3,5,7}),j({4,6,8}))",
                          out_format="d" + fa, b=tensor(m, "d" + fb), c=tensor(m, "d" + fc))
    check(got, np.array([[10, 14, 18], [14, 18, 22], [18, 22, 26]]))


@given(n=st.integers(1, 12), length=st.integers(1, 7), op=st.sampled_from(sorted(OPS)),
       fb=st.sampled_from(["d", "s"]), fc=st.sampled_from(["d", "s"]), fa=st.sampled_from(["d", "s"]),
       density=st.sampled_from([0.0, 0.3, 0.8]), seed=st.integers(0, 999))
def test_vector_index_sets(n, length, op, fb, fc, fa, density, seed) -> None:
    """Unsorted sets with repeats on one operand, a plain access or another set on the other."""
    rng = np.random.default_rng(seed)
    b, c = random_array(rng, (n,), density), random_array(rng, (length,), density)
    s = rng.integers(0, n, length)
    got = coiter.evaluate(f"a(i) = b({_spell('i', s)}) {op} c(i)", out_format=fa,
                          b=tensor(b, fb), c=tensor(c, fc))
    check(got, OPS[op](b[s], c))
    t = rng.integers(0, n, length)
    got = coiter.evaluate(f"a(i) = b({_spell('i', s)}) {op} b({_spell('i', t)})", out_format=fa,
                          b=tensor(b, fb))
    check(got, OPS[op](b[s], b[t]))


NAMED = {"dia": coiter.dia(), "ell": coiter.ell(), "bcsr22": coiter.bcsr((2, 2))}
MATRIX_FORMATS = ["dense", "csr", "csc", "dcsr", "coo", *NAMED]


@given(rows=st.integers(2, 9), cols=st.integers(2, 9), lr=st.integers(1, 5), lc=st.integers(1, 5),
       fb=st.sampled_from(MATRIX_FORMATS), fc=st.sampled_from(["dense", "csr", "coo"]),
       fa=st.sampled_from(["dense", "csr", "dcsr"]), op=st.sampled_from(sorted(OPS)),
       density=st.sampled_from([0.1, 0.5]), seed=st.integers(0, 999))
def test_matrix_index_sets(rows, cols, lr, lc, fb, fc, fa, op, density, seed) -> None:
    """Sets on both modes of one operand and on one mode of another, any formats."""
    rng = np.random.default_rng(seed)
    b, c = random_array(rng, (rows, cols), density), random_array(rng, (lr, cols), density)
    si, sj = rng.integers(0, rows, lr), rng.integers(0, cols, lc)
    text = f"A(i,j) = B({_spell('i', si)},{_spell('j', sj)}) {op} C(i,{_spell('j', sj)})"
    got = coiter.evaluate(text, out_format=fa, B=tensor(b, NAMED.get(fb, fb)), C=tensor(c, fc))
    check(got, OPS[op](b[np.ix_(si, sj)], c[:, sj]))


@pytest.mark.parametrize("fmt", MATRIX_FORMATS)
def test_gather_of_every_format(fmt) -> None:
    rng = np.random.default_rng(1)
    a = random_array(rng, (8, 6), 0.4)
    fmt = NAMED.get(fmt, fmt)
    for mode, picks in ((0, [5, 0, 5, 7, 2]), (1, [5, 0, 5, 3])):
        got = coiter.Tensor._wrap(gather_storage(tensor(a, fmt).storage, mode, picks))
        assert got.format == tensor(a, fmt).format
        check(got, np.take(a, picks, axis=mode))


@pytest.mark.parametrize("fmt", ["ddd", "sss", "dss", "sds", "coo3"])
def test_sets_on_tensor_modes(fmt) -> None:
    rng = np.random.default_rng(2)
    b, c = random_array(rng, (5, 4, 9), 0.4), rng.standard_normal(3)
    f = coiter.coo(3) if fmt == "coo3" else fmt
    got = coiter.evaluate("A(i,j) = B(i({4,0,4}), j, k({8,1,2})) * c(k)", B=tensor(b, f), c=c)
    check(got, np.einsum("ijk,k->ij", b[[4, 0, 4]][:, :, [8, 1, 2]], c))


def test_dsl_lists_and_arrays_are_the_parsers_sets() -> None:
    m = sp.random(8, 8, density=0.4, format="csr", random_state=1)
    x = np.arange(8.0)
    i, j = coiter.index_vars("i j")
    A, X = coiter.Tensor.from_scipy(m), coiter.Tensor.from_numpy(x)
    y = coiter.Tensor((3,))
    y[i] = A[i[[5, 2, 5]], j] * X[j]
    check(y, m[[5, 2, 5]] @ x)
    z = coiter.Tensor((3,))
    z[i] = A[i[np.array([1, 2, 6])], j] * X[j]
    check(z, m[[1, 2, 6]] @ x)
    parsed = coiter.parse("y(i) = A(i({5,2,5}),j) * x(j)")
    assert str(parsed) == "y(i) = A(i({5,2,5}),j) * x(j)"
    assert coiter.parse(str(parsed)) == parsed == coiter.parse("y(i) = A(i([5,2,5]),j) * x(j)")
    assert parsed.rhs.a.indices == (i[[5, 2, 5]], j)


def test_one_kernel_gathers_at_every_call() -> None:
    """The compiled loops are the plain expression's; each call gathers its own operand,
    through evaluate's fast path too."""
    rng = np.random.default_rng(3)
    k = coiter.compile("y(i) = B(i({7,0,0,3}),j) * x(j)", {"B": "csr"})
    assert str(k.assignment) == "y(i) = B(i,j) * x(j)"
    x = rng.standard_normal(6)
    for _ in range(3):
        m = sp.random(9, 6, density=0.5, format="csr", random_state=rng)
        check(k(B=m, x=x), m[[7, 0, 0, 3]] @ x)
        check(coiter.evaluate("y(i) = B(i({7,0,0,3}),j) * x(j)", B=m, x=x), m[[7, 0, 0, 3]] @ x)


@pytest.mark.parametrize("threads", [1, 2])
def test_sets_under_schedules_and_threads(threads) -> None:
    rng = np.random.default_rng(4)
    m = sp.random(50, 40, density=0.2, format="csr", random_state=5)
    c = sp.random(40, 30, density=0.2, format="csr", random_state=6)
    rows = rng.integers(0, 50, 30)
    spgemm = coiter.compile(f"A(i,j) = B({_spell('i', rows)},k) * C(k,j)",
                            {"B": "csr", "C": "csr", "A": "csr"})
    check(spgemm(B=m, C=c, threads=threads), (m[rows] @ c).toarray())
    spmv = coiter.compile(f"y(i) = B({_spell('i', rows)},j) * x(j)", {"B": "csr"},
                          schedule="split(i,i0,i1,4),parallelize(i0,CPUThread,NoRaces)")
    x = rng.standard_normal(40)
    check(spmv(B=m, x=x, threads=threads), m[rows] @ x)


def test_sets_with_the_result_read_and_fill_values() -> None:
    b, y = np.arange(10.0), np.arange(3.0)
    check(coiter.evaluate("y(i) = y(i) * y(i({2,1,0})) + b(i({9,9,0}))", b=b, y=y),
          y * y[[2, 1, 0]] + b[[9, 9, 0]])
    w = np.array([[0, 1.0, 0], [2.0, 0, 0], [0, 0, 3.0]])
    W = coiter.Tensor.from_scipy(sp.csr_matrix(w)).with_fill(np.inf)
    d = np.array([1.0, 10.0, 100.0])
    k = coiter.compile("a(i) = min(j, A(i({2,0}),j) + d(j))", {"A": "csr"}, fill_values={"A": np.inf})
    full = np.where(w == 0, np.inf, w)
    check(k(A=W, d=d), (full[[2, 0]] + d).min(axis=1))


def test_index_set_errors_name_the_set() -> None:
    b = np.arange(10.0)
    with pytest.raises(ShapeError, match=r"the index set i\(\{1,30\}\) of b reaches coordinate 30, "
                                         r"outside mode 0 of size 10"):
        coiter.evaluate("a(i) = b(i({1,30}))", b=b)
    with pytest.raises(ShapeError, match="index variable i"):
        coiter.evaluate("a(i) = b(i({1,3})) + c(i)", b=b, c=np.ones(3))
    with pytest.raises(ArgumentError, match=r"the result a\(i\(\{1,2\}\)\) has the index set"):
        coiter.compile("a(i({1,2})) = b(i)")
    for bad, match in (("a(i) = b(i({}))", "integer"), ("a(i) = b(i({1,2)}))", "',' or '}'"),
                       ("a(i) = b(i({1,2}, 3))", r"'\)' after the index set"),
                       ("a(i) = b(i({1,-2}))", "integer"),
                       ("a(i) = b(i({1,2})+1)", "an index set is a whole subscript")):
        with pytest.raises(ParseError, match=match):
            coiter.parse(bad)
    i = coiter.IndexVar("i")
    for bad, match in (([], "empty"), ([1.5], "holds 1.5"), ([-1], "holds -1"), ([[1]], "holds")):
        with pytest.raises(ArgumentError, match=match):
            i[bad]


def test_every_set_shares_the_compiled_loops() -> None:
    """evaluate and the DSL compile the plain assignment once; another set (or none) reuses
    its loops instead of compiling again."""
    rng = np.random.default_rng(8)
    m = sp.random(20, 9, density=0.3, format="csr", random_state=9)
    x = rng.standard_normal(9)
    tensors = {"B": coiter.Tensor.from_scipy(m), "x": coiter.Tensor.from_numpy(x)}
    cores = set()
    for rows in ([1, 2], [19, 0, 19], list(range(20))):
        text = f"y(i) = B({_spell('i', rows)},j) * x(j)"
        kernel = coiter.api.kernel_for(coiter.parse(text), tensors, None)
        cores.add(id(kernel.core))
        check(coiter.evaluate(text, **tensors), m[rows] @ x)
    assert len(cores) == 1
    assert coiter.api.kernel_for(coiter.parse("y(i) = B(i,j) * x(j)"), tensors, None).core \
        is coiter.api.kernel_for(coiter.parse("y(i) = B(i({3}),j) * x(j)"), tensors, None).core
