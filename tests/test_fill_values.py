"""Fill values: the value of the entries a sparse tensor does not store (pydata/sparse's
``fill_value``), carried by tensors and compiled into kernels, whose loops then visit only
what the fills do not decide. Values are checked against NumPy on the densified operands;
shortest paths and breadth-first search by repeated semiring products against
scipy.sparse.csgraph."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph

import coiter
from coiter import ArgumentError, FormatError
from helpers import generated_functions

INF = np.inf


def _sparse(rng: np.random.Generator, shape: tuple[int, ...], fill: float, density: float = 0.4) -> np.ndarray:
    """Small integer values where stored, ``fill`` elsewhere."""
    a = rng.integers(1, 5, shape).astype(float)
    a[rng.random(shape) >= density] = fill
    return a


# ------------------------------------------------------------------------------ tensors

def test_a_tensor_carries_its_fill_through_conversions() -> None:
    rng = np.random.default_rng(0)
    a = _sparse(rng, (5, 6), INF)
    t = coiter.Tensor.from_numpy(a, format="csr", fill_value=INF)
    assert t.fill_value == INF and t.nnz == int(np.isfinite(a).sum())
    np.testing.assert_array_equal(t.to_numpy(), a)
    for fmt in ("dcsr", "coo", "csc", "dd", "dd:1,0", coiter.dia()):
        np.testing.assert_array_equal(t.asformat(fmt).to_numpy(), a)
    m = sp.csr_array(np.where(np.isinf(a), 0, a))
    np.testing.assert_array_equal(coiter.Tensor.from_scipy(m, fill_value=INF).to_numpy(), a)
    coords = np.argwhere(np.isfinite(a)).T
    np.testing.assert_array_equal(
        coiter.Tensor.from_coo(coords, a[tuple(coords)], a.shape, fill_value=INF).to_numpy(), a)
    assert "fill_value=inf" in repr(t)


PADDED = ["sd", "sd:1,0", "hd", "dsd", coiter.ell(), coiter.dia(), coiter.bcsr((2, 2)), coiter.csb((2, 3))]


@pytest.mark.parametrize("fmt", PADDED)
@pytest.mark.parametrize("fill", [-1.5, INF])
def test_formats_that_pad_with_zeros_store_the_entries_of_another_fill(fmt, fill) -> None:
    # fuzz seed 38 case 121: A(j,l) = D(l,j) into "sd" read 0 where D's fill -1.5 was due: a
    # stored row's other columns, like ELL's, DIA's and blocks' padding and stored zeros,
    # read as zeros; so did a tensor built or converted into those formats with that fill
    rng = np.random.default_rng(21)
    shape = (3, 4, 5) if fmt == "dsd" else (6, 7)
    a = _sparse(rng, shape, fill)
    a[rng.random(shape) < 0.15] = 0.0  # stored zeros, which a layout's padding looks like
    nz = np.nonzero(a != fill)
    plain = coiter.Tensor.from_numpy(a, format="coo", fill_value=fill)
    built = [coiter.Tensor.from_numpy(a, format=fmt, fill_value=fill),
             coiter.Tensor.from_coo(np.stack(nz), a[nz], shape, format=fmt, fill_value=fill),
             plain.asformat(fmt)]
    if len(shape) == 2:
        ident = "A(i,j) = B(i,j)"
        built += [coiter.evaluate(ident, B=plain, out_format=fmt),
                  coiter.compile(ident, formats={"B": "csr", "A": fmt}, fill_values={"B": fill})(
                      B=plain.asformat("csr"))]
    for t in built:
        np.testing.assert_array_equal(t.to_numpy(), a)
        assert t.fill_value == 0  # every entry is stored instead
    if len(shape) == 2:  # an operand in such a format, whatever fill the kernel states
        k = coiter.compile("y(i) = B(i,j) * x(j)", formats={"B": fmt}, fill_values={"B": fill})
        x = rng.random(shape[1])
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(k(B=plain, x=x).to_numpy(), a @ x)
        t = coiter.evaluate("A(j,i) = B(i,j)", B=plain, out_format=fmt)
        np.testing.assert_array_equal(t.to_numpy(), a.T)
    if fmt == "sd":  # with_fill: a stored row's columns are entries, the other rows the fill
        base = np.where(a == fill, 0, a)
        want = np.where(base.any(axis=1)[:, None], base, fill)
        refilled = coiter.Tensor.from_numpy(base, format="sd").with_fill(fill)
        np.testing.assert_array_equal(refilled.to_numpy(), want)
        assert refilled.fill_value == 0


def test_an_interleaved_coo_keeps_its_stored_zeros_under_another_fill() -> None:
    # fuzz seed 38 case 251: coo_aos unpacked its entries as a padded layout does, dropping
    # the stored zeros, which then read as the fill (2)
    a = np.array([[3.0, 0.0], [2.0, 5.0]])
    t = coiter.Tensor.from_numpy(a, format="coo_aos", fill_value=2.0)
    assert t.nnz == 3 and t.fill_value == 2.0
    np.testing.assert_array_equal(t.to_numpy(), a)
    np.testing.assert_array_equal(t.asformat("csr").to_numpy(), a)
    np.testing.assert_array_equal(coiter.evaluate("y(i) = B(i,j)", B=t).to_numpy(), a.sum(axis=1))


def test_a_result_whose_absent_value_is_nan_stores_every_entry() -> None:
    # fuzz seed 38 case 206: a complex product of fills 1 and -inf is -inf+nanj where nothing
    # is stored: no fill (NaN equals no entry), which raised ArgumentError
    c = coiter.Tensor.from_numpy(np.array([1, 2 + 1j, 1], dtype=complex), format="s", fill_value=1)
    e = coiter.Tensor.from_numpy(np.array([-INF, 3.0, 0.0]), format="s", fill_value=-INF)
    got = coiter.evaluate("A(i) = C(i) * E(i)", C=c, E=e, out_format="s")
    assert got.fill_value == 0
    with np.errstate(invalid="ignore"):
        want = c.to_numpy() * e.to_numpy()
    finite = np.isfinite(want)
    np.testing.assert_allclose(got.to_numpy()[finite], want[finite])
    got = coiter.evaluate("A(i) = B(i) - D(i)", B=e, D=e, out_format="s")  # -inf - -inf
    assert got.fill_value == 0 and got.to_numpy()[1] == 0


def test_with_fill_and_prune() -> None:
    m = sp.csr_array(np.array([[0.0, 2.0], [7.0, 0.0]]))
    t = coiter.Tensor.from_scipy(m).with_fill(7.0)
    np.testing.assert_array_equal(t.to_numpy(), [[7.0, 2.0], [7.0, 7.0]])
    assert t.prune().nnz == 1  # the stored 7 equals the fill
    np.testing.assert_array_equal(t.prune().to_numpy(), t.to_numpy())


@pytest.mark.parametrize("fill,dtype,message", [
    (np.nan, np.float64, "NaN"), ("x", np.float64, "not a number"), ([1, 2], np.float64, "not a number"),
    (INF, np.int32, "does not fit int32"), (2.5, np.int64, "does not fit int64"),
])
def test_bad_fills(fill, dtype, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        coiter.Tensor.from_numpy(np.ones(3, dtype=dtype), format="s", fill_value=fill)


def test_scipy_cannot_hold_a_nonzero_fill() -> None:
    t = coiter.Tensor.from_numpy(np.array([[1.0, INF]]), format="csr", fill_value=INF)
    with pytest.raises(FormatError, match="absent entries are inf"):
        t.to_scipy()
    assert t.with_fill(0).to_scipy().nnz == 1


# ------------------------------------------------------------------------------ kernels

# expressions, their NumPy meaning, and operand fills for which IEEE arithmetic and merge
# lattices agree (docs/language.md: 0 * inf and inf - inf are not taken as NaN)
ELEMENTWISE = [
    ("C(i,j) = A(i,j) + B(i,j)", lambda a, b: a + b, [(0, 0), (INF, INF), (INF, 2), (1, 2), (-INF, 0)]),
    ("C(i,j) = A(i,j) * B(i,j)", lambda a, b: a * b, [(0, 0), (1, 1), (2, 3), (0, 2), (INF, 2)]),
    ("C(i,j) = min(A(i,j), B(i,j))", np.minimum, [(INF, INF), (0, INF), (-INF, 2), (3, 1)]),
    ("C(i,j) = max(A(i,j), B(i,j)) - 1", lambda a, b: np.maximum(a, b) - 1, [(-INF, -INF), (0, 5), (INF, 1)]),
]
REDUCTIONS = [
    ("c(i) = min(j, A(i,j) + B(i,j))", lambda a, b: (a + b).min(axis=1), [(INF, INF), (INF, 0), (0, 0), (2, 3)]),
    ("c(i) = max(j, A(i,j) * B(i,j))", lambda a, b: (a * b).max(axis=1), [(0, 0), (-INF, 1), (1, 1), (2, 2)]),
    ("c(i) = sum(j, A(i,j) * B(i,j))", lambda a, b: (a * b).sum(axis=1), [(0, 0), (0, 3), (1, 1)]),
    ("c(i) = any(j, A(i,j) > B(i,j))", lambda a, b: (a > b).any(axis=1), [(0, 0), (INF, 0), (1, 2)]),
]


def _cases(table):
    for expr, ref, fills in table:
        for fa, fb in fills:
            yield pytest.param(expr, ref, fa, fb, id=f"{expr.split('=')[1].strip()}-{fa}-{fb}")


@pytest.mark.parametrize("expr,ref,fa,fb", list(_cases(ELEMENTWISE + REDUCTIONS)))
@pytest.mark.parametrize("formats", [("csr", "csr"), ("dcsr", "csr"), ("coo", "dd"), ("csc", "dcsr")])
@pytest.mark.parametrize("out", ["dense", "sparse"])
def test_kernels_over_fills_match_numpy(expr: str, ref, fa: float, fb: float, formats, out: str) -> None:
    rng = np.random.default_rng(abs(hash((expr, fa, fb, formats))) % 2**32)
    a, b = _sparse(rng, (6, 7), fa), _sparse(rng, (6, 7), fb)
    A = coiter.Tensor.from_numpy(a, format=formats[0], fill_value=fa)
    B = coiter.Tensor.from_numpy(b, format=formats[1], fill_value=fb)
    order = 2 if expr.startswith("C(") else 1
    of = {("dense", 2): "dd", ("dense", 1): "d", ("sparse", 2): "csr", ("sparse", 1): "s"}[out, order]
    got = coiter.evaluate(expr, out_format=of, A=A, B=B)
    with np.errstate(all="ignore"):
        expected = ref(a, b)
    np.testing.assert_allclose(got.to_numpy(), expected)
    if out == "sparse":  # only entries that may differ from the result's fill are stored
        assert got.nnz <= a.size


def test_a_sparse_result_takes_the_fill_its_expression_has_where_nothing_is_stored() -> None:
    rng = np.random.default_rng(3)
    a, b = _sparse(rng, (5, 5), INF), _sparse(rng, (5, 5), 2.0)
    out = coiter.evaluate("C(i,j) = A(i,j) + B(i,j)", out_format="csr",
                          A=coiter.Tensor.from_numpy(a, format="csr", fill_value=INF),
                          B=coiter.Tensor.from_numpy(b, format="csr", fill_value=2.0))
    assert out.fill_value == INF
    np.testing.assert_array_equal(out.to_numpy(), a + b)
    # inf absorbs: the loops visit A's entries only, so no more are stored
    assert out.nnz == int(np.isfinite(a).sum())


def test_min_plus_visits_only_the_stored_edges() -> None:
    k = coiter.compile("y(i) = min(j, A(i,j) + x(j))", formats={"A": "csr"}, fill_values={"A": INF})
    body = generated_functions(k.source)
    assert "for (int64_t pA2 = A2_pos[i]; pA2 < A2_pos[i + 1]; pA2++)" in body
    assert "for (int64_t j = 0" not in body  # no walk over every column


def test_operands_must_come_with_the_compiled_fill() -> None:
    k = coiter.compile("y(i) = min(j, A(i,j) + x(j))", formats={"A": "csr"}, fill_values={"A": INF})
    a = sp.random_array((4, 4), density=0.5, format="csr", random_state=1)
    x = np.ones(4)
    with pytest.raises(ArgumentError, match="A's absent entries are 0, the kernel was compiled for inf"):
        k(A=coiter.Tensor.from_scipy(a), x=x)
    A = coiter.Tensor.from_scipy(a, fill_value=INF)
    for _ in range(2):  # the second call takes the C call path
        np.testing.assert_allclose(k(A=A, x=x).to_numpy(), (A.to_numpy() + x).min(axis=1))
    with pytest.raises(ArgumentError, match="fill_values: 'B' is no operand"):
        coiter.compile("y(i) = A(i,j) * x(j)", fill_values={"B": 1.0})
    with pytest.raises(ArgumentError, match="must be a number"):
        coiter.compile("y(i) = A(i,j) * x(j)", fill_values={"A": np.nan})


@pytest.mark.parametrize("threads", [1, 2])
def test_kernels_over_fills_in_parallel(threads: int) -> None:
    rng = np.random.default_rng(8)
    a, b = _sparse(rng, (3000, 60), INF, 0.1), _sparse(rng, (3000, 60), INF, 0.1)
    k = coiter.compile("C(i,j) = min(A(i,j), B(i,j) + 1)", formats={"A": "csr", "B": "csr", "C": "csr"},
                       fill_values={"A": INF, "B": INF})
    got = k(A=coiter.Tensor.from_numpy(a, format="csr", fill_value=INF),
            B=coiter.Tensor.from_numpy(b, format="csr", fill_value=INF), threads=threads)
    assert got.fill_value == INF
    np.testing.assert_array_equal(got.to_numpy(), np.minimum(a, b + 1))


# ------------------------------------------------------------------------------ graphs

def _graph(n: int, seed: int) -> sp.csr_array:
    """A random directed graph with positive integer edge lengths."""
    g = sp.random_array((n, n), density=3 / n, format="csr", random_state=seed)
    g.data = np.floor(g.data * 9) + 1
    g.setdiag(0)
    g.eliminate_zeros()
    return g


def test_single_source_shortest_paths_by_min_plus_products_match_csgraph() -> None:
    g = _graph(300, 4)
    # d(i) = min(d(i), min(j, W(i,j) + d(j))) with W(i,j) the length of edge j -> i
    W = coiter.Tensor.from_scipy(sp.csr_array(g.T), fill_value=INF)
    relax = coiter.compile("e(i) = min(d(i), min(j, W(i,j) + d(j)))", formats={"W": "csr"},
                           fill_values={"W": INF})
    d = np.full(300, INF)
    d[0] = 0.0
    for _ in range(300):
        nxt = relax(W=W, d=d).to_numpy()
        if np.array_equal(nxt, d):
            break
        d = nxt
    np.testing.assert_array_equal(d, csgraph.shortest_path(g, method="BF", indices=0))


def test_breadth_first_levels_by_or_and_products_match_csgraph() -> None:
    g = _graph(400, 5)
    A = coiter.Tensor.from_scipy(sp.csr_array(g.T != 0))  # A(i,j): an edge j -> i
    step = coiter.compile("f(i) = any(j, A(i,j) && x(j)) && !v(i)", formats={"A": "csr"})
    level = np.full(400, -1)
    frontier = np.zeros(400, dtype=bool)
    frontier[0] = True
    depth = 0
    while frontier.any():
        level[frontier] = depth
        frontier = step(A=A, x=frontier, v=level >= 0).to_numpy()
        depth += 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hops = csgraph.shortest_path(g != 0, unweighted=True, indices=0)
    np.testing.assert_array_equal(level, np.where(np.isinf(hops), -1, hops).astype(int))


@pytest.mark.parametrize("fa,fb", list(itertools.product([0.0, INF], [0.0, INF])))
def test_fills_through_the_string_syntax_einsum_and_the_dsl(fa: float, fb: float) -> None:
    rng = np.random.default_rng(6)
    a, b = _sparse(rng, (4, 5), fa), _sparse(rng, (5,), fb)
    A = coiter.Tensor.from_numpy(a, format="csr", fill_value=fa, name="A")
    b_t = coiter.Tensor.from_numpy(b, format="s", fill_value=fb, name="b")
    with np.errstate(all="ignore"):
        expected = (a + b).min(axis=1)
    np.testing.assert_allclose(coiter.evaluate("y(i) = min(j, A(i,j) + b(j))", A=A, b=b_t).to_numpy(), expected)
    i, j = coiter.index_vars("i j")
    y = coiter.Tensor((4,), name="y")
    y[i] = coiter.reduce("min", j, A[i, j] + b_t[j])
    np.testing.assert_allclose(y.to_numpy(), expected)
    if fa == fb:  # (0 * inf is no NaN to merge lattices, see test_kernels_over_fills_match_numpy)
        np.testing.assert_allclose(coiter.einsum("ij,j->i", A, b_t).to_numpy(), (a * b).sum(axis=1))


def test_negated_unsigned_fills_wrap_without_numpy_warnings() -> None:
    # fuzz seed 0 cases 200-249: the lattice negated a uint32 fill with NumPy, whose overflow
    # RuntimeWarning reached the user at compile time; kernels wrap, as NumPy's arrays do
    b = np.array([1, 2, 3, 2], dtype=np.uint32)
    t = coiter.Tensor.from_numpy(b, format="s", fill_value=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = coiter.evaluate("a(i) = -b(i)", b=t, out_format="s")
    np.testing.assert_array_equal(got.to_numpy(), -b)
    assert got.fill_value == np.uint32(2**32 - 2)


def test_a_bool_result_of_fills_that_add_up_is_true() -> None:
    # fuzz seed 40 cases 4872, 5340: with fill True, B(k) + B(k) is 2 in the lattice (bools
    # count as 0/1 there), which 'does not fit bool' as the result's fill; kernels compute
    # the bool result as NumPy does (True + True is True)
    b = np.array([True, False, True, True])
    t = coiter.Tensor.from_numpy(b, format="s", fill_value=True)
    got = coiter.evaluate("A(k) = (B(k) + B(k)) * (B(k) * B(k))", B=t, out_format="s")
    assert got.fill_value is True or got.fill_value == np.True_
    np.testing.assert_array_equal(got.to_numpy(), (b + b) * (b * b))


@pytest.mark.parametrize("fmt", ["s", "n"])
@pytest.mark.parametrize("out", ["s", "d"])
def test_a_float_result_computes_unsigned_fills_in_its_own_type(fmt: str, out: str) -> None:
    # fuzz seed 2026120207 case 98: the result's fill (where b is absent) was computed in
    # b's uint32, so -b - b wrapped to 2**32 - 4 where the kernel's float arithmetic (the
    # result's type, docs/language.md) gives -4 at every stored entry
    b = np.array([2, 0, 2, 2, 0, 2], dtype=np.uint32)
    t = coiter.Tensor.from_numpy(b, format=fmt, fill_value=2)
    got = coiter.evaluate("a(i) = (b(i) + 0.5) + (-b(i) - b(i))", b=t, out_format=out)
    bf = b.astype(np.float64)
    np.testing.assert_array_equal(got.to_numpy(), (bf + 0.5) + (-bf - bf))
    if out == "s":
        assert got.fill_value == -1.5
        assert got.nnz == int((b != 2).sum())  # the loops walk b's stored entries only
