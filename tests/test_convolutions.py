"""Compound (affine) subscripts: convolutions and pooling against a NumPy reference that
evaluates the same index expression by brute force over every coordinate (reads outside
an operand are zeros), on the densified operands."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, strategies as st

import coiter
from coiter.errors import ArgumentError, FormatError, ParseError, ShapeError
from coiter.notation.ast import Access, Add, Affine, IndexVar, Literal, Mul, Neg, Reduction, Sub
from coiter.notation.parser import parse

from helpers import check, random_array, tensor

Subscript = tuple[dict[str, int], int]  # {var: coefficient}, constant


def gathered(arr: np.ndarray, subs: list[Subscript], grid: dict[str, np.ndarray]) -> np.ndarray:
    """``arr`` read at affine subscripts over the grid of every variable (0 outside)."""
    idx = [sum(c * grid[v] for v, c in terms.items()) + const for terms, const in subs]
    inside = np.ones(next(iter(grid.values())).shape, dtype=bool)
    for m, x in enumerate(idx):
        inside &= (x >= 0) & (x < arr.shape[m])
    clipped = tuple(np.clip(x, 0, n - 1) for x, n in zip(idx, arr.shape))
    return np.where(inside, arr[clipped], 0.0)


def reference(out: list[str], operands: list[tuple[np.ndarray, list[Subscript]]],
              extents: dict[str, int], reduce=np.sum) -> np.ndarray:
    """``out(...) = reduce over the other variables of the product of the operands``."""
    names = list(extents)
    grid = dict(zip(names, np.meshgrid(*[np.arange(extents[v]) for v in names], indexing="ij")))
    prod = np.ones(grid[names[0]].shape)
    for arr, subs in operands:
        prod = prod * gathered(arr, subs, grid)
    axes = tuple(n for n, v in enumerate(names) if v not in out)
    res = reduce(prod, axis=axes) if axes else prod
    kept = [v for v in names if v in out]
    return np.transpose(res, [kept.index(v) for v in out])


def conv1d_sizes(n: int, k: int, stride: int, dilation: int, pad: int) -> int:
    return (n + 2 * pad - dilation * (k - 1) - 1) // stride + 1


# --- the language ---------------------------------------------------------------------

def test_parse_and_print_compound_subscripts() -> None:
    a = parse("O(i) = I(2*i+k-1) * F(k)")
    sub = a.rhs.a.indices[0]
    assert isinstance(sub, Affine)
    assert sub.terms == ((2, IndexVar("i")), (1, IndexVar("k"))) and sub.const == -1
    assert str(a) == "O(i) = I(2*i+k-1) * F(k)"
    assert str(parse("A(i,j) = B(i) + C(i*3+j-i)")) == "A(i,j) = B(i) + C(2*i+j)"
    assert parse("y(i) = x(i+0)").rhs.indices == (IndexVar("i"),)  # i+0 is plain i


@pytest.mark.parametrize("text, message", [
    ("O(i+k) = I(i)", "index variable k of the result does not appear"),
    ("O(i) = I(3)", "has no index variable"),
    ("O(i) = I(i-i)", "has no index variable"),
    ("O(i) = I(i+1.5)", "an index variable name or an integer"),
    ("O(i) = I(i*k)", "an index variable name or an integer"),
])
def test_bad_subscripts_are_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse(text)


def test_dsl_subscripts() -> None:
    rng = np.random.default_rng(0)
    i, k = coiter.index_vars("i k")
    x = random_array(rng, (13,), 0.5)
    f = rng.random(3)
    I, F = tensor(x, "s"), tensor(f, "d")
    O = coiter.Tensor.from_numpy(np.zeros(6))
    O[i] = I[2 * i + k - 1 + 1] * F[k]
    check(O, reference(["i"], [(x, [({"i": 2, "k": 1}, 0)]), (f, [({"k": 1}, 0)])],
                       {"i": 6, "k": 3}))
    with pytest.raises(ArgumentError, match="affine sum"):
        I[i * k]
    with pytest.raises(ArgumentError, match="IndexVar"):
        O[i + k] = I[i]


# --- differential tests ---------------------------------------------------------------

@given(n=st.integers(1, 14), k=st.integers(1, 4), stride=st.integers(1, 3),
       dilation=st.integers(1, 3), pad=st.integers(0, 2), density=st.sampled_from([0.0, 0.3, 1.0]),
       fmt_i=st.sampled_from(["d", "s"]), fmt_f=st.sampled_from(["d", "s"]), seed=st.integers(0, 99))
def test_conv1d(n, k, stride, dilation, pad, density, fmt_i, fmt_f, seed) -> None:
    out = conv1d_sizes(n, k, stride, dilation, pad)
    if out < 1:
        return
    rng = np.random.default_rng(seed)
    x, f = random_array(rng, (n,), density), random_array(rng, (k,), 0.7)
    sub = f"{stride}*i+{dilation}*k-{pad}"
    kern = coiter.compile(f"O(i) = I({sub}) * F(k)", {"I": fmt_i, "F": fmt_f}, padding=pad > 0)
    got = kern(I=tensor(x, fmt_i), F=tensor(f, fmt_f))
    check(got, reference(["i"], [(x, [({"i": stride, "k": dilation}, -pad)]), (f, [({"k": 1}, 0)])],
                         {"i": out, "k": k}))


@given(c=st.integers(1, 3), kout=st.integers(1, 3), h=st.integers(3, 9), w=st.integers(3, 9),
       r=st.integers(1, 3), stride=st.integers(1, 2), dilation=st.integers(1, 2), pad=st.integers(0, 1),
       density=st.sampled_from([0.05, 0.3, 0.8]),
       fmt=st.sampled_from(["ddd", "dss", "sss", "dds", "sdd"]), seed=st.integers(0, 99))
def test_conv2d_nchw(c, kout, h, w, r, stride, dilation, pad, density, fmt, seed) -> None:
    ho, wo = (conv1d_sizes(m, r, stride, dilation, pad) for m in (h, w))
    if ho < 1 or wo < 1:
        return
    rng = np.random.default_rng(seed)
    x, f = random_array(rng, (c, h, w), density), rng.standard_normal((kout, c, r, r))
    text = (f"O(k,h,w) = I(c,{stride}*h+{dilation}*r-{pad},{stride}*w+{dilation}*q-{pad}) "
            "* F(k,c,r,q)")
    got = coiter.compile(text, {"I": fmt}, padding=pad > 0)(I=tensor(x, fmt), F=f)
    subs = [({"c": 1}, 0), ({"h": stride, "r": dilation}, -pad), ({"w": stride, "q": dilation}, -pad)]
    check(got, reference(["k", "h", "w"], [(x, subs), (f, [({v: 1}, 0) for v in "kcrq"])],
                         {"k": kout, "c": c, "h": ho, "w": wo, "r": r, "q": r}))


@pytest.mark.parametrize("fmt", ["dddd", "dsss", "ssss", "ddds"])
def test_conv2d_nhwc_batch(fmt: str) -> None:
    rng = np.random.default_rng(1)
    x, f = random_array(rng, (2, 7, 6, 3), 0.2), rng.standard_normal((3, 3, 3, 4))
    got = coiter.evaluate("O(n,h,w,k) = I(n,h+r,w+q,c) * F(r,q,c,k)", I=tensor(x, fmt), F=f)
    subs = [({"n": 1}, 0), ({"h": 1, "r": 1}, 0), ({"w": 1, "q": 1}, 0), ({"c": 1}, 0)]
    check(got, reference(["n", "h", "w", "k"], [(x, subs), (f, [({v: 1}, 0) for v in "rqck"])],
                         {"n": 2, "h": 5, "w": 4, "k": 4, "r": 3, "q": 3, "c": 3}))


@pytest.mark.parametrize("fmt", ["ddd", "sss"])
def test_conv3d_and_depthwise(fmt: str) -> None:
    rng = np.random.default_rng(2)
    x, f = random_array(rng, (6, 5, 7), 0.15), rng.standard_normal((2, 2, 3))
    got = coiter.evaluate("O(d,h,w) = I(d+s,h+r,w+q) * F(s,r,q)", I=tensor(x, fmt), F=f)
    subs = [({"d": 1, "s": 1}, 0), ({"h": 1, "r": 1}, 0), ({"w": 1, "q": 1}, 0)]
    check(got, reference(["d", "h", "w"], [(x, subs), (f, [({v: 1}, 0) for v in "srq"])],
                         {"d": 5, "h": 4, "w": 5, "s": 2, "r": 2, "q": 3}))
    # depthwise: every channel with its own filter
    x, f = random_array(rng, (3, 6, 6), 0.3), rng.standard_normal((3, 2, 2))
    got = coiter.evaluate("O(c,h,w) = I(c,h+r,w+q) * F(c,r,q)", I=tensor(x, fmt), F=f)
    subs = [({"c": 1}, 0), ({"h": 1, "r": 1}, 0), ({"w": 1, "q": 1}, 0)]
    check(got, reference(["c", "h", "w"], [(x, subs), (f, [({v: 1}, 0) for v in "crq"])],
                         {"c": 3, "h": 5, "w": 5, "r": 2, "q": 2}))


@pytest.mark.parametrize("fmt", ["d", "s"])
def test_full_convolution_with_a_negative_coefficient(fmt: str) -> None:
    """``I(i-k+2)`` with padding: the full convolution (np.convolve's default mode)."""
    rng = np.random.default_rng(3)
    x, f = random_array(rng, (9,), 0.4), rng.standard_normal(3)
    kern = coiter.compile("O(i) = I(i-k) * F(k)", {"I": fmt}, padding=True)
    got = kern.run({"I": tensor(x, fmt), "F": f}, (11,))
    check(got, np.convolve(x, f))


@pytest.mark.parametrize("fmt", ["d", "s"])
def test_compound_result_subscript_scatters(fmt: str) -> None:
    """``O(2*i+k) = I(i) * F(k)``: a transposed convolution adds every product into the
    output its subscript names (the result's extent covers the subscript's range)."""
    rng = np.random.default_rng(9)
    x, f = random_array(rng, (6,), 0.5), rng.standard_normal(3)
    got = coiter.compile("O(2*i+k) = I(i) * F(k)", {"I": fmt})(I=tensor(x, fmt), F=f)
    expected = np.zeros(13)
    for i, k in itertools.product(range(6), range(3)):
        expected[2 * i + k] += x[i] * f[k]
    check(got, expected)
    with pytest.raises(FormatError, match="store the result densely"):
        coiter.compile("O(2*i+k) = I(i) * F(k)", {"O": "s"}).concrete


def test_extents_size_variables_no_operand_has() -> None:
    x = np.random.default_rng(10).random((9, 9))
    kern = coiter.compile("P(h,w) = max(r, max(q, X(2*h+r, 2*w+q)))", extents={"r": 2, "q": 2})
    check(kern(X=x), x[:8, :8].reshape(4, 2, 4, 2).max(axis=(1, 3)))
    with pytest.raises(ArgumentError, match="no index variable"):
        coiter.compile("P(h) = X(h+r)", extents={"z": 2})
    with pytest.raises(ArgumentError, match="non-negative int"):
        coiter.compile("P(h) = X(h+r)", extents={"r": -1})
    with pytest.raises(ShapeError, match="index variable r has size 2 in extents but 3 in F"):
        coiter.compile("O(i) = I(i+r) * F(r)", extents={"r": 2})(I=np.ones(5), F=np.ones(3))


@pytest.mark.parametrize("fmt", ["d", "s"])
def test_union_with_a_compound_subscript(fmt: str) -> None:
    """``A(i,j) = B(i) + C(i+j)``: B counts where C's subscript hits no stored entry."""
    rng = np.random.default_rng(4)
    b, c = random_array(rng, (5,), 0.5), random_array(rng, (9,), 0.4)
    kern = coiter.compile("A(i,j) = B(i) + C(i+j)", {"B": fmt, "C": fmt})
    got = kern.run({"B": tensor(b, fmt), "C": tensor(c, fmt)}, (5, 5))
    check(got, b[:, None] + np.array([[c[i + j] for j in range(5)] for i in range(5)]))


@pytest.mark.parametrize("op", ["max", "min", "sum"])
@pytest.mark.parametrize("fmt", ["dd", "ds", "ss"])
def test_pooling(op: str, fmt: str) -> None:
    """2x2 pooling with stride 2 counts the window's implicit zeros, as NumPy's reduction
    of the dense input does (the window's extent comes from the result's shape)."""
    rng = np.random.default_rng(5)
    x = random_array(rng, (8, 10), 0.3)
    inner = f"{op}(q, X(2*h+r, 2*w+q))"
    got = coiter.compile(f"P(h,w) = {op}(r, {inner})", {"X": fmt}).run({"X": tensor(x, fmt)}, (4, 5))
    check(got, getattr(np, op)(x.reshape(4, 2, 5, 2), axis=(1, 3)))


# --- shapes ---------------------------------------------------------------------------

def test_output_extent_is_inferred_from_the_input() -> None:
    rng = np.random.default_rng(6)
    x, f = rng.random(10), rng.random(3)
    got = coiter.evaluate("O(i) = I(2*i+k) * F(k)", I=x, F=f)  # (10 - 3) // 2 + 1 = 4 outputs
    check(got, np.array([x[2 * i:2 * i + 3] @ f for i in range(4)]))
    kern = coiter.compile("O(i) = I(i+k-1) * F(k)", padding=True)  # torch's padding=1: 10 outputs
    check(kern(I=x, F=f), np.convolve(np.pad(x, 1), f[::-1], "valid"))


def test_subscript_leaving_its_mode_is_a_shape_error() -> None:
    kern = coiter.compile("O(i) = I(i+k) * F(k)")
    with pytest.raises(ShapeError, match=r"subscript i\+k of I\(i\+k\) ranges over \[0, 10\]"):
        kern.run({"I": np.ones(10), "F": np.ones(3)}, (9,))
    with pytest.raises(ShapeError, match="no size"):
        coiter.evaluate("O = I(i+k)", I=np.ones(4))


def test_paper_running_example_visits_only_non_empty_windows() -> None:
    """Liu et al. (OOPSLA 2024), Fig. 3: stored coordinates {2, 8, 9}, a filter of width 2.
    A sparse result is appended at the offsets the loop visits: exactly {1, 2, 7, 8}."""
    x = np.zeros(10)
    x[[2, 8, 9]] = [1.0, 2.0, 3.0]
    f = np.array([1.0, 10.0])
    kern = coiter.compile("O(i) = I(i+k) * F(k)", {"I": "s", "O": "s"})
    got = kern(I=tensor(x, "s"), F=f)
    np.testing.assert_array_equal(got.storage.levels[0]["crd"], [1, 2, 7, 8])
    check(got, np.convolve(x, f[::-1], "valid"))


@given(n=st.integers(1, 30), k=st.integers(1, 4), stride=st.integers(1, 3), pad=st.integers(0, 2),
       density=st.sampled_from([0.0, 0.1, 0.5]), seed=st.integers(0, 99))
def test_sparse_result_walks_windows(n, k, stride, pad, density, seed) -> None:
    """A sparse result: the loop over the output walks the input's non-empty windows."""
    out = conv1d_sizes(n, k, stride, 1, pad)
    if out < 1:
        return
    rng = np.random.default_rng(seed)
    x, f = random_array(rng, (n,), density), rng.standard_normal(k)
    kern = coiter.compile(f"O(i) = I({stride}*i+k-{pad}) * F(k)", {"I": "s", "O": "s"},
                          padding=pad > 0)
    got = kern(I=tensor(x, "s"), F=f)
    expected = reference(["i"], [(x, [({"i": stride, "k": 1}, -pad)]), (f, [({"k": 1}, 0)])],
                         {"i": out, "k": k})
    check(got, expected)
    # no stored entry without an input in its window
    windows = [any(0 <= stride * i - pad + j < n and x[stride * i - pad + j] != 0 for j in range(k))
               for i in range(out)]
    assert got.nnz == sum(windows)


@pytest.mark.parametrize("fmt", ["ss", "ds"])
def test_sparse_2d_result(fmt: str) -> None:
    rng = np.random.default_rng(8)
    x, f = random_array(rng, (12, 11), 0.05), rng.standard_normal((3, 3))
    kern = coiter.compile("O(h,w) = I(h+r,w+q) * F(r,q)", {"I": fmt, "O": fmt})
    got = kern(I=tensor(x, fmt), F=f)
    check(got, reference(["h", "w"], [(x, [({"h": 1, "r": 1}, 0), ({"w": 1, "q": 1}, 0)]),
                                      (f, [({"r": 1}, 0), ({"q": 1}, 0)])],
                         {"h": 10, "w": 9, "r": 3, "q": 3}))


def test_every_variable_walked_is_refused() -> None:
    with pytest.raises(FormatError, match="can be computed from"):
        coiter.compile("O(i) = I(i+k) * F(k) * G(i)", {"I": "s", "F": "s", "G": "s"}).concrete


def test_generated_code_scatters_stored_inputs() -> None:
    """A sparse input's loop walks its stored coordinates and computes the output's."""
    src = coiter.compile("O(i) = B(i+k) * F(k)", {"B": "s"}).source
    assert "int64_t ik = B1_crd[pB1];" in src and "int64_t i = ik - k;" in src


def test_pooling_window_is_cut_by_binary_search() -> None:
    src = coiter.compile("P(h,w) = max(r, max(q, X(2*h+r, 2*w+q)))", {"X": "ds"}).source
    assert "pX2_first" in src and "q_extent" in src


@pytest.mark.parametrize("fmt", ["".join(p) for p in itertools.product("ds", repeat=2)])
def test_shared_subscript_co_iterates(fmt: str) -> None:
    """Two operands read at the same compound subscript share its variable."""
    rng = np.random.default_rng(7)
    a, b = random_array(rng, (9,), 0.5), random_array(rng, (9,), 0.5)
    kern = coiter.compile("O(i,j) = A(i+j) * B(i+j)", {"A": fmt[0], "B": fmt[1]})
    got = kern.run({"A": tensor(a, fmt[0]), "B": tensor(b, fmt[1])}, (5, 5))
    check(got, np.array([[a[i + j] * b[i + j] for j in range(5)] for i in range(5)]))


def _embedded(entries: dict[tuple[int, ...], float], shape: tuple[int, ...]) -> np.ndarray:
    x = np.zeros(shape)
    for at, v in entries.items():
        x[at] = v
    return x


@pytest.mark.parametrize("expr, formats, entries, shape, filt", [
    ("O(i) = I(i+k) * F(k)", {"I": "s"}, {(2,): 1.0, (8,): 2.0, (9,): 3.0}, (12,), (3,)),
    ("O(i) = I(i+k) * F(k)", {"I": "s", "O": "s"}, {(2,): 1.0, (8,): 2.0, (9,): 3.0}, (12,), (3,)),
    ("O(n,x,y,k) = I(n,x+r-1,y+q-1,c) * F(r,q,c,k)", {"I": "dsss"},
     {(0, 1, 2, 0): 1.0, (0, 5, 5, 1): -2.0, (0, 6, 1, 0): 0.5}, (1, 8, 8, 2), (3, 3, 2, 4)),
    ("O(n,x,y,k) = M(n,x,y) * I(n,x+r-1,y+q-1,c) * F(r,q,c,k)", {"M": "dss", "I": "dssd", "O": "dssd"},
     {(0, 1, 2, 0): 1.0, (0, 2, 2, 1): -2.0, (0, 6, 1, 0): 0.5}, (1, 8, 8, 2), (3, 3, 2, 4)),
])
def test_work_follows_the_stored_entries(expr, formats, entries, shape, filt) -> None:
    """Doubling the shape with the same entries leaves the loop iterations unchanged (the
    kernel's work is bounded by the stored entries, not the shape)."""
    rng = np.random.default_rng(11)
    f = rng.standard_normal(filt)
    counts = []
    for scale in (1, 2, 4):
        big = tuple(n if m in (0, len(shape) - 1) and len(shape) > 1 else n * scale
                    for m, n in enumerate(shape))
        x = _embedded(entries, big)
        kern = coiter.compile(expr, formats, padding="-1" in expr, count_iterations=True)
        operands = {"I": tensor(x, formats["I"]), "F": f}
        if "M" in formats:
            operands["M"] = tensor((x != 0).any(axis=-1).astype(float), formats["M"])
        got = kern(threads=1, **operands)
        expected = reference(*_conv_reference(expr, x, f, operands.get("M")))
        check(got, expected)
        counts.append(kern.iterations)
    assert counts[0] == counts[1] == counts[2] > 0


def _conv_reference(expr: str, x: np.ndarray, f: np.ndarray, mask) -> tuple:
    if expr.startswith("O(i)"):
        n, k = x.shape[0], f.shape[0]
        return ["i"], [(x, [({"i": 1, "k": 1}, 0)]), (f, [({"k": 1}, 0)])], {"i": n - k + 1, "k": k}
    _, h, w, c = x.shape
    operands = [(x, [({"n": 1}, 0), ({"x": 1, "r": 1}, -1), ({"y": 1, "q": 1}, -1), ({"c": 1}, 0)]),
                (f, [({"r": 1}, 0), ({"q": 1}, 0), ({"c": 1}, 0), ({"k": 1}, 0)])]
    if mask is not None:
        operands.append((mask.to_numpy(), [({"n": 1}, 0), ({"x": 1}, 0), ({"y": 1}, 0)]))
    return (["n", "x", "y", "k"], operands,
            {"n": 1, "x": h, "y": w, "k": f.shape[3], "r": 3, "q": 3, "c": c})


def test_iteration_count_of_a_dense_kernel_follows_the_shape() -> None:
    """The counter itself: a dense 1-D convolution's loops run |i| * |k| times (plus the
    outer loop's |i|)."""
    kern = coiter.compile("O(i) = I(i+k) * F(k)", count_iterations=True)
    for n in (10, 20):
        check(kern(I=np.ones(n), F=np.ones(3), threads=1), np.full(n - 2, 3.0))
        assert kern.iterations == (n - 2) * 4
    with pytest.raises(ArgumentError, match="count_iterations must be True or False"):
        coiter.compile("O(i) = I(i)", count_iterations=1)


def test_equations_that_would_solve_each_other_are_refused() -> None:
    """``A(i+k) * B(i+2*k)`` with both sparse: each subscript's loops are the other's
    unknowns, so no variable can be computed from bound loops."""
    with pytest.raises(FormatError, match="can be computed from"):
        coiter.compile("O(i) = A(i+k) * B(i+2*k)", {"A": "s", "B": "s"}).concrete
    rng = np.random.default_rng(12)
    a, b = random_array(rng, (9,), 0.5), random_array(rng, (13,), 0.5)  # |k| = 9 - 5 + 1
    got = coiter.compile("O(i) = A(i+k) * B(i+2*k)", {"A": "s"}).run({"A": tensor(a, "s"), "B": b}, (5,))
    expected = np.array([sum(a[i + k] * b[i + 2 * k] for k in range(5)) for i in range(5)])
    check(got, expected)


def test_gathered_rows_run_in_parallel() -> None:
    """A 2-D convolution walks the input's rows per output row by default (``r`` solved
    from ``xr``), so the loop over ``x`` writes rows of its own and runs on threads;
    scattering every mode (``gather=()``) has no loop over ``x`` to share out."""
    expr = "O(n,x,y,k) = I(n,x+r-1,y+q-1,c) * F(r,q,c,k)"
    rng = np.random.default_rng(13)
    x, f = random_array(rng, (1, 9, 8, 3), 0.3), rng.standard_normal((3, 3, 3, 4))
    kern = coiter.compile(expr, {"I": "dsss"}, padding=True,
                          schedule="parallelize(x,CPUThread,NoRaces)")
    assert "r = " in str(kern.concrete) and "y = " in str(kern.concrete)
    assert "#pragma omp for" in kern.source
    subs = [({"n": 1}, 0), ({"x": 1, "r": 1}, -1), ({"y": 1, "q": 1}, -1), ({"c": 1}, 0)]
    expected = reference(["n", "x", "y", "k"], [(x, subs), (f, [({v: 1}, 0) for v in "rqck"])],
                         {"n": 1, "x": 9, "y": 8, "k": 4, "r": 3, "q": 3, "c": 3})
    check(kern(I=tensor(x, "dsss"), F=f, threads=2), expected)
    with pytest.raises(coiter.ScheduleError):
        coiter.compile(expr, {"I": "dsss"}, padding=True, gather=(),
                       schedule="parallelize(x,CPUThread,NoRaces)")
    scattered = coiter.compile(expr, {"I": "dsss"}, padding=True, gather=())
    assert "x = " in str(scattered.concrete)
    check(scattered(I=tensor(x, "dsss"), F=f), expected)
    with pytest.raises(ArgumentError, match="gather must list index variables"):
        coiter.compile(expr, gather=["z"])


@pytest.mark.parametrize("fmt, schedule", [
    ("d", "split(i,i0,i1,4)"), ("d", "split(k,k0,k1,2)"), ("s", "split(ik,a,b,4)"),
    ("s", "pos(ik,p,I(ik))"), ("d", "parallelize(i,CPUThread,NoRaces)"), ("s", "reorder(k,ik)"),
    ("d", "split(i,i0,i1,4),parallelize(i0,CPUThread,NoRaces)"),
    ("s", "split(ik,a,b,4),parallelize(a,CPUThread,Atomics)"),
    ("d", "divide(k,k0,k1,2),reorder(k0,i,k1)"),
])
def test_schedules_of_a_convolution(fmt: str, schedule: str) -> None:
    """Schedules rewrite a convolution's loops like any other kernel's (regression: a split
    of a dense convolution's filter loop once lost the input's solved coordinate)."""
    rng = np.random.default_rng(14)
    x, f = random_array(rng, (30,), 0.5), rng.standard_normal(3)
    kern = coiter.compile("O(i) = I(i+k) * F(k)", {"I": fmt}, schedule=schedule)
    check(kern(I=tensor(x, fmt), F=f, threads=2), np.convolve(x, f[::-1], "valid"))


# --- random compound expressions against a grid evaluation ------------------------------

def _sub_value(s, grid: dict[str, np.ndarray]):
    if isinstance(s, IndexVar):
        return grid[s.name]
    return sum(c * grid[v.name] for c, v in s.terms) + s.const


def _inside(x: Access, arrays: dict[str, np.ndarray], grid: dict[str, np.ndarray], shape) -> np.ndarray:
    inside = np.ones(shape, dtype=bool)
    for m, sub in enumerate(x.indices):
        at = np.broadcast_to(_sub_value(sub, grid), shape)
        inside &= (at >= 0) & (at < arrays[x.tensor].shape[m])
    return inside


def _evaluate(e, arrays: dict[str, np.ndarray], grid: dict[str, np.ndarray]) -> np.ndarray:
    """``e`` at every point of the grid of all variables (reductions keep their axis):
    reads outside an operand are zeros, and taps outside never count in a min or max."""
    shape = next(iter(grid.values())).shape
    if isinstance(e, Access):
        arr = arrays[e.tensor]
        at = [np.broadcast_to(_sub_value(s, grid), shape) for s in e.indices]
        clipped = tuple(np.clip(x, 0, n - 1) for x, n in zip(at, arr.shape))
        return np.where(_inside(e, arrays, grid, shape), arr[clipped], 0.0)
    if isinstance(e, Literal):
        return np.full(shape, float(e.value))
    if isinstance(e, Neg):
        return -_evaluate(e.operand, arrays, grid)
    if isinstance(e, Reduction):
        body = np.broadcast_to(_evaluate(e.body, arrays, grid), shape)
        if e.op in ("min", "max") and isinstance(e.body, Access):
            body = np.where(_inside(e.body, arrays, grid, shape), body,
                            np.inf if e.op == "min" else -np.inf)
        reduce = {"sum": np.sum, "max": np.max, "min": np.min}[e.op]
        return np.broadcast_to(reduce(body, axis=list(grid).index(e.var.name), keepdims=True), shape)
    ops = {Add: np.add, Sub: np.subtract, Mul: np.multiply}
    return ops[type(e)](_evaluate(e.a, arrays, grid), _evaluate(e.b, arrays, grid))


def _expected(a, arrays: dict[str, np.ndarray], extents: dict[str, int], rshape) -> np.ndarray:
    names = sorted(extents)
    grid = dict(zip(names, np.meshgrid(*[np.arange(extents[v]) for v in names], indexing="ij")))
    value = _evaluate(a.rhs, arrays, grid)
    out = np.zeros(rshape)
    at = tuple(np.broadcast_to(_sub_value(s, grid), value.shape) for s in a.lhs.indices)
    inside = np.ones(value.shape, dtype=bool)
    for m, x in enumerate(at):
        inside &= (x >= 0) & (x < rshape[m])
    if all(isinstance(s, IndexVar) for s in a.lhs.indices):
        out[tuple(x[inside] for x in at)] = value[inside]  # reductions made the rest equal
    else:
        np.add.at(out, tuple(x[inside] for x in at), value[inside])
    return out


COMPOUND = [
    "O(i) = A(i+k) * B(k)", "O(i) = A(i+k) + B(k)", "O(i) = A(i+k) * B(k) + C(i)",
    "O(i,j) = A(2*i+j) * B(i,j)", "O(i,j) = A(i+j) + B(i)", "O(i) = max(k, A(i+k) - B(k))",
    "O(i) = A(i+k) * B(i+2*k)", "O(i,j) = A(i+j) * B(i+j)", "O(i) = A(i-k+2) * B(k)",
    "O(i,j) = A(i+r,j+q) * B(r,q)", "O(i,j) = A(i+r,j) * B(r,j)", "O(i) = min(k, A(2*i+k)) + B(i)",
    "O(i,j) = A(i,j+k) * B(k) - C(i+k,j)", "O(2*i+k) = A(i) * B(k)", "O(i+k) = A(i) * B(k) + A(i)",
]


@given(text=st.sampled_from(COMPOUND), padding=st.booleans(), data=st.data(), seed=st.integers(0, 999))
def test_random_compound_expressions(text: str, padding: bool, data, seed: int) -> None:
    """Random formats, shapes and extents; a kernel either refuses with a typed error
    (a subscript leaving its mode without padding, padding where skipping a read would not
    mean zeros, operands that cannot be walked) or matches the grid evaluation."""
    from coiter.notation.reductions import insert_reductions

    from coiter.notation.affine import subscript_range

    rng = np.random.default_rng(seed)
    a = insert_reductions(parse(text))
    orders = {x.tensor: len(x.indices) for x in accesses_of(a)}
    extents = {v.name: data.draw(st.integers(1, 8))
               for v in sorted({v for x in [a.lhs, *accesses_of(a)] for v in x.index_vars}, key=str)}
    # operands cover their subscripts' ranges, or fall short of them by up to two (padding)
    arrays: dict[str, np.ndarray] = {}
    for x in accesses_of(a):
        shape = tuple(extents[s.name] if isinstance(s, IndexVar) else max(1, subscript_range(
            s, {IndexVar(n): e for n, e in extents.items()})[1] + 1 - data.draw(st.integers(0, 2)))
            for s in x.indices)
        arrays.setdefault(x.tensor, random_array(rng, shape, data.draw(st.sampled_from([0.2, 0.6, 1.0]))))
    formats = {n: "".join(data.draw(st.sampled_from("ds")) for _ in range(k)) for n, k in orders.items()}
    out_format = "".join(data.draw(st.sampled_from("ds")) for _ in a.lhs.indices)
    rshape = tuple(extents[s.name] if isinstance(s, IndexVar) else
                   sum(max(0, c * (extents[v.name] - 1)) for c, v in s.terms) + s.const + 1
                   for s in a.lhs.indices)
    try:
        kern = coiter.compile(text, {**formats, "O": out_format}, padding=padding, extents=extents)
        got = kern.run({n: tensor(arrays[n], formats[n]) for n in orders}, rshape,
                       threads=data.draw(st.integers(1, 2)))
    except (FormatError, ShapeError, ArgumentError):
        return
    check(got, _expected(a, arrays, extents, rshape))


def accesses_of(a) -> list[Access]:
    from coiter.notation.ast import accesses

    return accesses(a.rhs)


def test_rows_scatter_when_the_filter_is_walked() -> None:
    """A sparse filter walks the taps, so the default's rows cannot be gathered: both modes
    scatter (regression: solving the equations once failed with an IndexError)."""
    rng = np.random.default_rng(15)
    x, f = random_array(rng, (6, 5), 0.5), random_array(rng, (2, 2), 0.7)
    got = coiter.compile("O(i,j) = A(i+r,j+q) * B(r,q)", {"A": "ss", "B": "ss"})(
        A=tensor(x, "ss"), B=tensor(f, "ss"))
    check(got, reference(["i", "j"], [(x, [({"i": 1, "r": 1}, 0), ({"j": 1, "q": 1}, 0)]),
                                      (f, [({"r": 1}, 0), ({"q": 1}, 0)])],
                         {"i": 5, "j": 4, "r": 2, "q": 2}))


def test_sparse_result_below_a_scattered_mode_is_walked_in_order() -> None:
    """A CSR result's rows are dense but its columns append: its row may not be computed
    from an input walked in its own order (regression: the rows came out empty)."""
    a, b = np.array([0.5, 0.0, 2.0]), np.array([0.25, 1.0, 4.0])
    kern = coiter.compile("O(i,j) = A(i+j) * B(i+j)", {"A": "d", "B": "s", "O": "ds"})
    got = kern.run({"A": tensor(a, "d"), "B": tensor(b, "s")}, (2, 2))
    check(got, np.array([[a[i + j] * b[i + j] for j in range(2)] for i in range(2)]))


@pytest.mark.parametrize("text", ["O(i,j) = A(i+j) + B(i)", "O(i) = max(k, A(i+k) - B(k))",
                                  "O(i) = sum(k, A(i+k) * B(k) + C(k))"])
def test_padding_refuses_reads_added_to_other_terms(text: str) -> None:
    """Skipping a read outside its operand would also drop the terms added to it."""
    with pytest.raises(ArgumentError, match=r"A\(i\+[jk]\) may read outside A"):
        coiter.compile(text, padding=True)
    coiter.compile(text).concrete  # without padding the same expression compiles


def test_variable_needed_above_a_walked_level_is_not_solved() -> None:
    """``B(i,j)`` with ``j`` compressed walks ``j`` under ``i``: ``i`` cannot come from
    ``(ij - j) / 2`` (regression: a KeyError in lowering); here nothing can be solved, so
    the kernel is refused, and with ``B`` dense it computes."""
    with pytest.raises(FormatError, match="can be computed from"):
        coiter.compile("O(i,j) = A(2*i+j) * B(i,j)", {"A": "s", "B": "ds"}).concrete
    rng = np.random.default_rng(16)
    a, b = random_array(rng, (9,), 0.5), rng.standard_normal((3, 3))
    got = coiter.compile("O(i,j) = A(2*i+j) * B(i,j)", {"A": "s"})(A=tensor(a, "s"), B=b)
    check(got, np.array([[a[2 * i + j] * b[i, j] for j in range(3)] for i in range(3)]))


@pytest.mark.parametrize("out", ["ss", "ds"])
def test_sparse_2d_result_rows_see_windows_past_their_range(out: str) -> None:
    """The rows a thread assembles cut the input's rows by coordinate, but a row's window
    reaches the rows below it (regression: the last output row lost the input's last rows,
    on one thread too)."""
    x = np.zeros((6, 3))
    x[[0, 0, 1, 2, 3, 5], [1, 2, 1, 1, 2, 2]] = [3.0, 4.0, 4.0, 4.0, 2.0, 3.0]
    f = np.arange(1.0, 5.0).reshape(2, 2)
    kern = coiter.compile("O(h,w) = I(h+r,w+q) * F(r,q)", {"I": "ss", "O": out})
    expected = reference(["h", "w"], [(x, [({"h": 1, "r": 1}, 0), ({"w": 1, "q": 1}, 0)]),
                                      (f, [({"r": 1}, 0), ({"q": 1}, 0)])],
                         {"h": 5, "w": 2, "r": 2, "q": 2})
    for threads in (1, 2):
        check(kern(I=tensor(x, "ss"), F=f, threads=threads), expected)


def test_solutions_computed_from_solutions() -> None:
    """``k = jk - j`` walks A's window, then C is read at ``ik = i + k``: a subscript
    computed from a solved variable (regression: the loop order found no start)."""
    rng = np.random.default_rng(17)
    a, b, c = random_array(rng, (2, 6), 0.6), rng.standard_normal(4), random_array(rng, (5, 3), 0.6)
    kern = coiter.compile("O(i,j) = A(i,j+k) * B(k) - C(i+k,j)", {"A": "ss", "C": "dd", "O": "ss"})
    got = kern.run({"A": tensor(a, "ss"), "B": b, "C": c}, (2, 3))
    expected = np.array([[sum(a[i, j + k] * b[k] - c[i + k, j] for k in range(4) if j + k < 6)
                          for j in range(3)] for i in range(2)])
    check(got, expected)
    with pytest.raises(FormatError, match=r"C\(i\+k,j\): its storage order conflicts"):
        coiter.compile("O(i,j) = A(i,j+k) * B(k) - C(i+k,j)", {"A": "ss", "C": "ds", "O": "ss"},
                       extents={"i": 1, "j": 3, "k": 11}).concrete
