"""Python operators and NumPy's functions on coiter tensors (coiter/lazy.py): expressions
computed as one kernel, results in the documented format, values against NumPy/SciPy."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import coiter
import coiter.api
import coiter.lazy
from coiter.errors import ArgumentError, ShapeError
from coiter.lazy import Lazy

RNG = np.random.default_rng(31)


def _sparse(shape: tuple[int, int], density: float = 0.1, fmt: str = "csr") -> coiter.Tensor:
    return coiter.Tensor.from_scipy(sp.random_array(shape, density=density, rng=RNG, format=fmt))


A, B = _sparse((40, 30)), _sparse((40, 30))
C = _sparse((30, 20), fmt="csc")
X = RNG.random(30)
M = RNG.random((40, 30))
Ad, Bd, Cd = A.to_numpy(), B.to_numpy(), C.to_numpy()

# expression, NumPy reference, the result's format letters by the module's rule
CASES = {
    "add": (lambda: A + B, lambda: Ad + Bd, "ds"),
    "sub, scalar factor": (lambda: A - 2 * B, lambda: Ad - 2 * Bd, "ds"),
    "element-wise product": (lambda: A * B, lambda: Ad * Bd, "ds"),
    "negation, scalar divisor": (lambda: -A / 4, lambda: -Ad / 4, "ds"),
    "sparse @ dense vector": (lambda: A @ X, lambda: Ad @ X, "d"),
    "sparse @ sparse": (lambda: A @ C, lambda: Ad @ Cd, "ds"),
    "transpose @ sparse": (lambda: A.T @ B, lambda: Ad.T @ Bd, "ds"),
    "vector @ transpose": (lambda: X @ A.T, lambda: X @ Ad.T, "d"),
    "sum over an axis": (lambda: A.sum(axis=0), lambda: Ad.sum(axis=0), "d"),
    "sum of everything": (lambda: A.sum(), lambda: Ad.sum(), ""),
    "sparse times row vector": (lambda: A * X, lambda: Ad * X, "ds"),
    "array times sparse": (lambda: M * A, lambda: M * Ad, "ds"),
    "sparse plus array": (lambda: A + M, lambda: Ad + M, "dd"),
    "sparse plus scalar": (lambda: A + 1, lambda: Ad + 1, "dd"),
    "np.sin keeps zeros": (lambda: np.sin(A), lambda: np.sin(Ad), "ds"),
    "np.cos does not": (lambda: np.cos(A), lambda: np.cos(Ad), "dd"),
    "np.add": (lambda: np.add(A, B), lambda: Ad + Bd, "ds"),
    "np.dot": (lambda: np.dot(A, X), lambda: Ad @ X, "d"),
    "np.matmul": (lambda: np.matmul(A, C), lambda: Ad @ Cd, "ds"),
    "np.transpose": (lambda: np.transpose(A), lambda: Ad.T, "ds"),
    "np.sum": (lambda: np.sum(A, axis=1), lambda: Ad.sum(axis=1), "d"),
    "chain": (lambda: (2 * A - B).T @ (A @ X), lambda: (2 * Ad - Bd).T @ (Ad @ X), "d"),
    # intrinsics through Python's operators and NumPy's binary ufuncs: sparse where the
    # function is zero wherever every tensor operand is
    "abs keeps zeros": (lambda: abs(A - B), lambda: np.abs(Ad - Bd), "ds"),
    "square keeps zeros": (lambda: A ** 2, lambda: Ad ** 2, "ds"),
    "power 0 does not": (lambda: A ** 0, lambda: Ad ** 0, "dd"),
    "scalar to a sparse power": (lambda: 2 ** A, lambda: 2 ** Ad, "dd"),
    "np.power of two tensors": (lambda: np.power(A, B), lambda: np.power(Ad, Bd), "dd"),
    "np.maximum with 0 keeps zeros": (lambda: np.maximum(A - B, 0), lambda: np.maximum(Ad - Bd, 0), "ds"),
    "np.maximum of two sparse": (lambda: np.maximum(A, B), lambda: np.maximum(Ad, Bd), "ds"),
    "np.minimum with an array": (lambda: np.minimum(A, M), lambda: np.minimum(Ad, M), "dd"),
    "np.hypot of a chain": (lambda: np.hypot(A, 2 * B), lambda: np.hypot(Ad, 2 * Bd), "ds"),
    "greater keeps zeros": (lambda: A > 0.5, lambda: Ad > 0.5, "ds"),
    "less-equal than negative keeps zeros": (lambda: A <= -1, lambda: Ad <= -1, "ds"),
    "less is true at zero": (lambda: A < 0.5, lambda: Ad < 0.5, "dd"),
    "greater-equal of two tensors": (lambda: A >= B, lambda: Ad >= Bd, "dd"),
    "scalar on the left": (lambda: 0.5 < A, lambda: 0.5 < Ad, "ds"),
    "np.logical_and": (lambda: np.logical_and(A, B), lambda: np.logical_and(Ad, Bd), "ds"),
    "mask times values": (lambda: (A > 0.5) * B, lambda: (Ad > 0.5) * Bd, "ds"),
    # reductions other than sum see the implicit zeros, as NumPy on the dense array does
    "max over an axis": (lambda: (A - B).max(axis=1), lambda: (Ad - Bd).max(axis=1), "d"),
    "min of everything": (lambda: (A - B).min(), lambda: (Ad - Bd).min(), ""),
    "max of a full row": (lambda: (A + 1).max(axis=0), lambda: (Ad + 1).max(axis=0), "d"),
    "mean over an axis": (lambda: A.mean(axis=0), lambda: Ad.mean(axis=0), "d"),
    "mean of everything": (lambda: A.mean(), lambda: Ad.mean(), ""),
    # NumPy sums bools and narrow integers in int64: a sum of comparisons counts
    "count per row": (lambda: (A > 0.5).sum(axis=1), lambda: (Ad > 0.5).sum(axis=1), "d"),
    "int32 sum": (lambda: coiter.Tensor.from_numpy((Ad * 100).astype(np.int32), format="csr").sum(),
                  lambda: (Ad * 100).astype(np.int32).sum(), ""),
    "uint8 sum": (lambda: coiter.Tensor.from_numpy((Ad * 100).astype(np.uint8), format="csr").sum(axis=0),
                  lambda: (Ad * 100).astype(np.uint8).sum(axis=0), "d"),
    # NumPy adds two bool arrays as bool (logical or) before a scalar factor makes it int
    "bool sum scaled": (lambda: 3 * ((A > 0.5) + (B > 0.5)), lambda: 3 * ((Ad > 0.5) + (Bd > 0.5)), "ds"),
    "bool plus True": (lambda: ((A > 0.5) + True) * 2, lambda: ((Ad > 0.5) + True) * 2, "dd"),
    "fraction per column": (lambda: (A > 0.5).mean(axis=0), lambda: (Ad > 0.5).mean(axis=0), "d"),
    "np.max": (lambda: np.max(A, axis=0), lambda: np.max(Ad, axis=0), "d"),
    "np.min of a chain": (lambda: np.min(A @ C, axis=1), lambda: np.min(Ad @ Cd, axis=1), "d"),
    "np.mean": (lambda: np.mean(A, axis=(0, 1)), lambda: np.mean(Ad, axis=(0, 1)), ""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_operators_against_numpy(case: str) -> None:
    build, reference, letters = CASES[case]
    expr = build()
    assert isinstance(expr, Lazy)
    got = expr.evaluate()
    ref = np.asarray(reference())
    assert got.format.to_string() == letters
    assert got.dtype == ref.dtype and expr.dtype == ref.dtype
    np.testing.assert_allclose(got.to_numpy(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(expr), ref, rtol=1e-12, atol=1e-12)


def test_fused_chain_is_one_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """``(A + B) @ x`` compiles one kernel reading all three operands: no A + B matrix."""
    compiled = []
    real = coiter.api.compile
    monkeypatch.setattr(coiter.api, "_kernels", {})
    monkeypatch.setattr(coiter.api, "compile", lambda *a, **k: compiled.append(a[0]) or real(*a, **k))
    got = ((A + B) @ X).to_numpy()
    np.testing.assert_allclose(got, (Ad + Bd) @ X, rtol=1e-12)
    assert len(compiled) == 1
    assert str(compiled[0]) == "out(i0) = sum(i1, (T0(i0,i1) + T1(i0,i1)) * T2(i1))"
    # the same expression on other data reuses the kernel
    B2 = _sparse((40, 30))
    np.testing.assert_allclose(((A + B2) @ X).to_numpy(), (Ad + B2.to_numpy()) @ X, rtol=1e-12)
    assert len(compiled) == 1


def test_evaluate_takes_a_format() -> None:
    got = (A + B).evaluate(format="coo")
    assert got.format == coiter.coo(2)
    np.testing.assert_allclose(got.to_numpy(), Ad + Bd)
    assert (A + B).kernel().assignment.lhs.tensor == "out"


def test_scipy_results_and_repr() -> None:
    got = (A + B).to_scipy()
    assert sp.issparse(got)
    np.testing.assert_allclose(got.toarray(), Ad + Bd)
    assert "out(i0,i1) = T0(i0,i1) + T1(i0,i1)" in repr(A + B)


def test_operator_errors_name_the_shapes() -> None:
    with pytest.raises(ShapeError, match=r"\(40, 30\) and \(30, 20\)"):
        A + C
    with pytest.raises(ShapeError, match="do not align"):
        A @ B
    with pytest.raises(ArgumentError, match="divides by scalars only"):
        A / B
    with pytest.raises(ArgumentError, match="divides by scalars only"):
        np.true_divide(2.0, A)  # 2 / 0 at every absent entry
    with pytest.raises(ShapeError, match="out of range"):
        A.sum(axis=2)
    with pytest.raises(ShapeError, match=r"max over axis 0 of length 0 .*\(0, 30\)"):
        coiter.Tensor.from_scipy(sp.csr_array((0, 30))).max(axis=0)
    with pytest.raises(ShapeError, match=r"\(40, 30\) and \(30, 20\)"):
        np.maximum(A, C)


def test_integer_powers_and_comparisons_keep_numpy_types() -> None:
    """``**`` of integers stays integer (a negative exponent is NumPy's error); comparisons
    are bool and sparse ones keep their pattern's entries, the false ones included (as every
    kernel stores what it visits: ``prune()`` drops them)."""
    Ai = coiter.Tensor.from_scipy(sp.csr_array((Ad * 10).astype(np.int64)))
    Aid = Ai.to_numpy()
    got = (Ai ** 3).evaluate()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.to_numpy(), Aid ** 3)
    for base in (Ai, Ai + Ai, coiter.Tensor.from_numpy(Aid)):  # sparse, an expression, dense
        with pytest.raises(coiter.ArgumentError, match="negative integer powers"):
            base ** -1
        with pytest.raises(coiter.ArgumentError, match="negative integer powers"):
            np.power(base, -2)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal((Ai.astype(float) ** -1).to_numpy(), Aid.astype(float) ** -1.0)
    mask = (Ai > 5).evaluate()
    assert mask.dtype == np.bool_ and mask.format.to_string() == "ds"
    np.testing.assert_array_equal(mask.to_numpy(), Aid > 5)
    assert mask.prune().nnz == np.count_nonzero(Aid > 5)


def test_unsupported_numpy_functions_say_how_to_densify() -> None:
    with pytest.raises(TypeError, match=r"numpy.add.reduce .* \.to_numpy\(\)"):
        np.add.reduce(A)
    with pytest.raises(TypeError, match="numpy.floor_divide"):
        np.floor_divide(A, 2)


def test_large_sparse_tensors_do_not_densify_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    """``np.asarray`` of a sparse tensor whose dense array would pass the limit raises,
    pointing at the explicit way; within the limit it densifies as before."""
    big = coiter.Tensor.from_scipy(sp.random_array((20000, 20000), density=1e-4, rng=RNG, format="csr"))
    with pytest.raises(coiter.DensifyError, match=r"3052 MiB.*\.to_numpy\(\)"):
        np.asarray(big)
    with pytest.raises(coiter.DensifyError, match="numpy.cumsum"):
        np.cumsum(big)
    monkeypatch.setenv("COITER_DENSIFY_LIMIT", "1K")
    with pytest.raises(RuntimeError, match="over the limit of 0 MiB"):  # a RuntimeError too
        np.asarray(A)
    monkeypatch.delenv("COITER_DENSIFY_LIMIT")
    np.testing.assert_array_equal(np.asarray(A), Ad)
    np.testing.assert_allclose(np.linalg.norm(A), np.linalg.norm(Ad))  # coiter computes norms itself
    assert np.shape(big) == (20000, 20000) and np.ndim(big) == 2 and np.size(big) == 4 * 10**8


def test_numpy_functions_given_tensors_in_lists_densify_them() -> None:
    """``np.concatenate([A, B])`` handed the tensors inside its list back to NumPy's
    dispatch, which called coiter again without end (RecursionError)."""
    np.testing.assert_array_equal(np.concatenate([A, B]), np.concatenate([Ad, Bd]))
    np.testing.assert_array_equal(np.stack((A, A * M, M)), np.stack((Ad, Ad * M, M)))
    np.testing.assert_array_equal(np.where(A > 0.5, A, -1.0), np.where(Ad > 0.5, Ad, -1.0))


def test_einsum_and_tensordot_keep_sparsity() -> None:
    got = np.einsum("ij,jk->ik", A, C)
    assert isinstance(got, coiter.Tensor)
    np.testing.assert_allclose(got.to_numpy(), Ad @ Cd, rtol=1e-12)
    got = np.tensordot(A, B, axes=([1], [1]))
    np.testing.assert_allclose(np.asarray(got), Ad @ Bd.T, rtol=1e-12)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_random_operator_chains(data: st.DataObject) -> None:
    """Random chains of operators over sparse and dense operands equal NumPy's."""
    shape = (6, 6)
    leaves = [(coiter.Tensor.from_numpy(m, format=f), m) for m, f in (
        (np.where(RNG.random(shape) < 0.3, RNG.integers(-3, 4, shape), 0).astype(float), fmt)
        for fmt in ("csr", "dense", "csc", "dcsr"))]
    value, ref = data.draw(st.sampled_from(leaves))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["+", "-", "*", "@", "T", "neg", "scale", "abs", "square",
                                        "maximum", "greater"]))
        other, other_ref = data.draw(st.sampled_from(leaves))
        if op == "+":
            value, ref = value + other, ref + other_ref
        elif op == "-":
            value, ref = value - other, ref - other_ref
        elif op == "*":
            value, ref = value * other, ref * other_ref
        elif op == "@":
            value, ref = value @ other, ref @ other_ref
        elif op == "T":
            value, ref = value.T, ref.T
        elif op == "neg":
            value, ref = -value, -ref
        elif op == "abs":
            value, ref = abs(value), abs(ref)
        elif op == "square":
            value, ref = value ** 2, ref ** 2
        elif op == "maximum":
            value, ref = np.maximum(value, other), np.maximum(ref, other_ref)
        elif op == "greater":
            value, ref = (value > other) * other, (ref > other_ref) * other_ref
        else:
            value, ref = 3 * value, 3 * ref
    np.testing.assert_allclose(np.asarray(value), ref, rtol=1e-12, atol=1e-12)


def _operand(kind: str, dense: np.ndarray) -> object:
    """``dense`` as an operand of the given kind."""
    if kind == "array":
        return dense
    if kind == "float32 array":
        return dense.astype(np.float32)
    if dense.ndim == 1:
        return coiter.Tensor.from_numpy(dense, format="s" if kind.endswith("sparse") else "d")
    if kind == "scipy csr":
        return sp.csr_array(dense)
    if kind == "scipy csc":
        return sp.csc_array(dense)
    return coiter.Tensor.from_numpy(dense, format="csr" if kind == "csr" else "dd")


PRODUCT_KINDS = [("csr", "array"), ("scipy csr", "array"), ("scipy csc", "float32 array"),
                 ("dense", "array"), ("array", "csr"), ("csr", "sparse"), ("scipy csr", "scipy csc")]


def test_a_product_alone_reuses_its_kernel_and_stays_right_as_operands_change(monkeypatch) -> None:
    """``A @ x`` of operands as given runs the kernel the last such product used, through
    its call plan; operands of other formats or types still get (and then keep) their own."""
    rng = np.random.default_rng(44)
    a = rng.random((12, 9)) * (rng.random((12, 9)) < 0.3)
    b, v = rng.random((9, 5)) * (rng.random((9, 5)) < 0.4), rng.random(9)
    for left, right in PRODUCT_KINDS:
        for other in (v, b):
            x, y = _operand(left, a), _operand(right, other)
            for _ in range(2):
                # SciPy's own @ takes a SciPy left operand: then the product coiter.lazy builds
                via_operator = not sp.issparse(x) and (isinstance(x, coiter.Tensor) or isinstance(y, coiter.Tensor))
                got = x @ y if via_operator else coiter.lazy.matmul(x, y)
                assert isinstance(got, Lazy) and got.shape == (a @ other).shape
                np.testing.assert_allclose(np.asarray(got.evaluate().to_numpy()), a @ other, rtol=1e-6)
    # the same kinds again: no kernel is looked up
    x, y = _operand("csr", a), v
    np.testing.assert_allclose((x @ y).to_numpy(), a @ v)
    monkeypatch.setattr(coiter.api, "kernel_for", lambda *args: pytest.fail("kernel looked up"))
    for scale in (1.0, 3.0):
        np.testing.assert_allclose((x @ (scale * v)).to_numpy(), a @ (scale * v))


def test_a_deferred_product_feeds_a_larger_expression() -> None:
    """A product built without its expression still fuses into what it feeds, and its
    errors (shapes, operand types) come when it is written."""
    rng = np.random.default_rng(45)
    a, v, w = rng.random((7, 6)) * (rng.random((7, 6)) < 0.5), rng.random(6), rng.random(7)
    t = coiter.Tensor.from_numpy(a, format="csr")
    for expr, ref in [((t @ v) + w, a @ v + w), (2 * (t @ v), 2 * (a @ v)), ((t @ v) @ (t @ v), (a @ v) @ (a @ v)),
                      (w @ (t @ np.eye(6)), w @ a), (t @ v, a @ v)]:
        np.testing.assert_allclose(np.asarray(expr.to_numpy()), ref)
    assert (t @ t.T).to_numpy().shape == (7, 7)
    with pytest.raises(ShapeError, match="do not align"):
        t @ w
    with pytest.raises(ShapeError, match="1 or 2 axes"):
        t @ np.ones((6, 2, 2))
    for odd in (np.array(["a"] * 6, dtype=object), np.ones(6, dtype=np.longdouble)):
        with pytest.raises(coiter.DTypeError):
            t @ odd


@pytest.mark.parametrize("kind", ["csr", "dense", "scipy csc"])
def test_products_of_transposes_reuse_their_kernel_and_stay_right(kind: str, monkeypatch) -> None:
    """``A.T @ x``, ``x @ A.T``, ``A.T @ B.T`` and ``A.T.T @ x`` are deferred products too:
    right on every call, the second through the kernel the first used."""
    rng = np.random.default_rng(46)
    a = rng.random((8, 5)) * (rng.random((8, 5)) < 0.5)
    b = rng.random((6, 8)) * (rng.random((6, 8)) < 0.5)
    v, w = rng.random(8), rng.random(5)
    if kind == "scipy csc":  # SciPy's own @ takes a SciPy left operand; its .T is SciPy's
        t, u = coiter.Tensor.from_scipy(sp.csc_array(a)), coiter.Tensor.from_scipy(sp.csc_array(b))
    else:
        t, u = (coiter.Tensor.from_numpy(m, format="csr" if kind == "csr" else "dd") for m in (a, b))
    cases = [(lambda: t.T @ v, a.T @ v), (lambda: w @ t.T, w @ a.T), (lambda: t.T @ u.T, a.T @ b.T),
             (lambda: t.T.T @ w, a @ w), (lambda: t.T @ t, a.T @ a), (lambda: np.matmul(t.T, v), a.T @ v)]
    for build, ref in cases:
        for _ in range(2):
            got = build()
            assert isinstance(got, Lazy)
            np.testing.assert_allclose(np.asarray(got.evaluate().to_numpy()), ref)
    at = t.T  # one leaf read twice is one operand of the kernel, two leaves are two
    for build, ref in [(lambda: at @ at.T, a.T @ a), (lambda: t.T @ t, a.T @ a), (lambda: at @ u.T, a.T @ b.T),
                       (lambda: at @ at.T, a.T @ a)]:
        np.testing.assert_allclose(np.asarray(build().to_numpy()), ref)
    np.testing.assert_allclose(np.asarray((t.T @ t + t.T @ t).to_numpy()), 2 * (a.T @ a))
    monkeypatch.setattr(coiter.api, "kernel_for", lambda *args: pytest.fail("kernel looked up"))
    np.testing.assert_allclose((t.T @ (2 * v)).evaluate().to_numpy(), a.T @ (2 * v))


def test_element_wise_expressions_of_operands_reuse_their_kernel_and_stay_right(monkeypatch) -> None:
    """``A + B``, ``A - B``, ``A * B``, a scalar and a tensor, with transposes and a row
    vector broadcast, are deferred: right on every call (each scalar its own kernel), the
    repeated ones through the kernel the first used; their format follows the module's rule."""
    rng = np.random.default_rng(47)
    a = rng.random((6, 4)) * (rng.random((6, 4)) < 0.5)
    b = rng.random((6, 4)) * (rng.random((6, 4)) < 0.5)
    c = rng.random((4, 6)) * (rng.random((4, 6)) < 0.5)
    v = rng.random(4)
    ta, tb = coiter.Tensor.from_numpy(a, format="csr"), coiter.Tensor.from_scipy(sp.csr_array(b))
    tc, sb = coiter.Tensor.from_numpy(c, format="dd"), sp.csr_array(b)
    M = rng.random((6, 4))  # noqa: N806
    cases = [(lambda: ta + tb, a + b, "ds"), (lambda: ta - tb, a - b, "ds"), (lambda: ta * tb, a * b, "ds"),
             (lambda: ta * M, a * M, "ds"), (lambda: ta + M, a + M, "dd"), (lambda: ta + v, a + v, "dd"),
             (lambda: ta * v, a * v, "ds"), (lambda: ta.T + tc, a.T + c, "dd"), (lambda: ta + tc.T, a + c.T, "dd"),
             (lambda: 2 * ta, 2 * a, "ds"), (lambda: ta * 3.5, a * 3.5, "ds"), (lambda: ta / 4, a / 4, "ds"),
             (lambda: 2 - ta, 2 - a, "dd"), (lambda: ta + 0, a, "ds"), (lambda: -0.0 * ta, -0.0 * a, "ds"),
             (lambda: 0.0 * ta, 0.0 * a, "ds"), (lambda: ta + sb, a + b, "ds"), (lambda: ta.T * 2, a.T * 2, "ds")]
    for build, ref, letters in cases:
        for _ in range(2):
            got = build()
            assert isinstance(got, Lazy)
            out = got.evaluate()
            np.testing.assert_allclose(out.to_numpy(), ref)
            assert out.format == coiter.parse_format(letters)
    for scalar in (0.0, -0.0, 0.0):  # equal scalars, other literals: other kernels
        stored = (scalar * ta).evaluate().to_numpy()[a != 0]
        assert np.all(np.signbit(stored) == np.signbit(scalar))
    bools = coiter.Tensor.from_numpy(a > 0.5, format="csr"), coiter.Tensor.from_numpy(b > 0.5, format="csr")
    np.testing.assert_array_equal((bools[0] + bools[1]).to_numpy(), (a > 0.5) + (b > 0.5))
    with pytest.raises(ShapeError, match="broadcast only missing leading axes"):
        ta + tc
    (ta + tb).evaluate()  # the bool sum took the key's place: the float one takes it back
    monkeypatch.setattr(coiter.api, "kernel_for", lambda *args: pytest.fail("kernel looked up"))
    for scale in (1.0, -2.0):
        tb.storage.vals[:] *= scale  # the same operands, other values: the same kernel
        np.testing.assert_allclose((ta + tb).evaluate().to_numpy(), a + tb.to_numpy())


def test_chains_of_operations_reuse_their_kernels_and_stay_right(monkeypatch) -> None:
    """Chains of unary, element-wise, product, transpose and reduction steps are deferred
    too: each computed alone is right the first time and, through the kernel it left, the
    second, while expressions that differ only in an operation, a scalar, an axis or a
    transpose run in between (none may take another's kernel)."""
    rng = np.random.default_rng(49)
    a = rng.random((7, 5)) * (rng.random((7, 5)) < 0.5)
    b = rng.random((7, 5)) * (rng.random((7, 5)) < 0.5)
    x, y, z = rng.random(5), rng.random(7), rng.random(7)
    t, u, s = coiter.Tensor.from_numpy(a, format="csr"), coiter.Tensor.from_numpy(b, format="csr"), sp.csr_array(b)
    cases = [
        (lambda: -t, -a), (lambda: -(-t), a), (lambda: abs(-t), a), (lambda: t ** 2, a ** 2),
        (lambda: t ** 3, a ** 3), (lambda: 2.0 ** t, 2.0 ** a), (lambda: t > 0.5, a > 0.5),
        (lambda: t > 0.25, a > 0.25), (lambda: t >= 0.5, a >= 0.5), (lambda: 0.5 < t, 0.5 < a),
        (lambda: np.maximum(t, 0.3), np.maximum(a, 0.3)), (lambda: np.maximum(t, u), np.maximum(a, b)),
        (lambda: np.minimum(t, u), np.minimum(a, b)), (lambda: np.sin(t), np.sin(a)),
        (lambda: t.sum(), a.sum()), (lambda: t.sum(0), a.sum(0)), (lambda: t.sum(1), a.sum(1)),
        (lambda: t.max(1), a.max(1)), (lambda: t.min(1), a.min(1)), (lambda: t.mean(0), a.mean(0)),
        (lambda: t.T.sum(0), a.T.sum(0)), (lambda: (t + u).sum(1), (a + b).sum(1)),
        (lambda: (t - u).sum(1), (a - b).sum(1)), (lambda: (t + u) @ x, (a + b) @ x),
        (lambda: (t - u) @ x, (a - b) @ x), (lambda: (t + s) @ x, (a + b) @ x), (lambda: 2 * t @ x, 2 * a @ x),
        (lambda: 3 * t @ x, 3 * a @ x), (lambda: t @ x + y, a @ x + y), (lambda: t @ x - y, a @ x - y),
        (lambda: y - t @ x, y - a @ x), (lambda: (t @ x + y) * z, (a @ x + y) * z),
        (lambda: (2 * t).T @ y, (2 * a).T @ y), (lambda: (2 * t.T).T @ x, 2 * a @ x),
        (lambda: (t + u).T @ y, (a + b).T @ y), (lambda: (t * u).T.T, a * b), (lambda: -(t @ x), -(a @ x)),
        (lambda: abs(t - u).max(), abs(a - b).max()), (lambda: (t > 0.5).sum(0), (a > 0.5).sum(0)),
        (lambda: np.sqrt(t * t).sum(), np.sqrt(a * a).sum()), (lambda: (t @ x) @ (t @ x), (a @ x) @ (a @ x)),
    ]
    for build, ref in cases:  # the first round may compile
        got = build()
        assert isinstance(got, Lazy) and got._tag is not None
        np.testing.assert_allclose(np.asarray(got.evaluate().to_numpy()), ref)
    monkeypatch.setattr(coiter.api, "kernel_for", lambda *args: pytest.fail("kernel looked up"))
    for build, ref in cases:  # the second runs each through the kernel it left
        np.testing.assert_allclose(np.asarray(build().evaluate().to_numpy()), ref)
    u.storage.vals[:] *= -1.5  # other values in the same operands: still those kernels
    np.testing.assert_allclose(np.maximum(t, u).evaluate().to_numpy(), np.maximum(a, -1.5 * b))
    np.testing.assert_allclose(((t + u) @ x).evaluate().to_numpy(), (a - 1.5 * b) @ x)


def test_deferred_chains_check_their_operands_when_written() -> None:
    """Errors of a deferred chain come when it is written, as those of a built one."""
    t = coiter.Tensor.from_numpy(np.eye(4), format="csr")
    ints = coiter.Tensor.from_numpy(np.eye(4, dtype=np.int64), format="csr")
    for bad, error, match in [(lambda: (t + t) @ np.ones(3), ShapeError, "do not align"),
                              (lambda: abs(t) + np.ones((3, 4)), ShapeError, "broadcast"),
                              (lambda: np.maximum(-t, np.ones(3)), ShapeError, "broadcast"),
                              (lambda: (2 * t).sum(axis=2), ShapeError, "out of range"),
                              (lambda: (ints + ints) ** -1, ArgumentError, "negative integer"),
                              (lambda: (t @ np.ones((4, 0))).max(1), ShapeError, "length 0")]:
        with pytest.raises(error, match=match):
            bad()


def _nesting(tag: object) -> int:
    """How deep tuples nest in a deferred expression's tag."""
    depth, level = 0, [tag]
    while level:
        level = [x for t in level if isinstance(t, tuple) for x in t]
        depth += 1
    return depth - 1


def test_long_chains_stop_deferring_and_stay_right() -> None:
    """Regression: a chain deferred at every step nested its key as deep as the chain, and
    hashing a tuple tens of thousands deep overflows C's stack (a 200,000-deep one crashed
    Python). Past coiter.lazy._DEFER_DEPTH levels an expression is built as it is written;
    the chain's value is still NumPy's."""
    rng = np.random.default_rng(50)
    a, b = rng.random((4, 3)), rng.random((4, 3))
    t, u = coiter.Tensor.from_numpy(a, format="dd"), coiter.Tensor.from_numpy(b, format="dd")
    value, ref = t, a
    for step in range(3 * coiter.lazy._DEFER_DEPTH):
        value, ref = (0.5 * value + u, 0.5 * ref + b) if step % 2 else (abs(value) - 1.0, abs(ref) - 1.0)
        tag = value._tag
        assert tag is None or _nesting(tag) <= 2 * coiter.lazy._DEFER_DEPTH
    assert value._tag is None  # built: the steps past the depth
    np.testing.assert_allclose(value.evaluate().to_numpy(), ref)


def test_long_chains_of_transposes_stay_right() -> None:
    """Regression: a leaf's transpose builds its expression when first needed, from the
    leaf's (so that ``L @ L.T`` reads one operand); built from the transpose before it,
    thousands of transposes in a row nested the builds as deep and overflowed Python's
    recursion limit. Each builds from the leaf; values are NumPy's, and ``L`` under any
    number of transposes is still one operand of the kernel."""
    rng = np.random.default_rng(53)
    a = rng.random((4, 3)) * (rng.random((4, 3)) < 0.6)
    t = coiter.Tensor.from_numpy(a, format="csr")
    value, ref = t, a
    for _ in range(5001):
        value, ref = value.T, ref.T
    np.testing.assert_allclose(value.evaluate().to_numpy(), ref)
    leaf = coiter.lazy.Lazy.leaf(t)
    flipped = leaf
    for _ in range(3):
        flipped = flipped.T
    product = leaf @ flipped
    assert len(product.assignment()[1]) == 1
    np.testing.assert_allclose(product.evaluate().to_numpy(), a @ a.T)


@pytest.mark.parametrize("name", ["L @ L.T", "L.T @ L", "L + L.T", "L * L.T", "M @ M.T",
                                  "P + P.T", "P @ P.T", "maximum(L, L.T)", "L - L.T.T.T",
                                  "L.T + S", "S + L.T", "L.T * S"])
def test_an_expression_with_its_own_transpose(name: str) -> None:
    """Regression: an expression and its transpose share index variables (the transpose
    reorders them), and combining the two renamed one variable after another onto the
    other's (L + L.T: v1 -> v0, then v0 -> v1 turned both of L's axes into v1) or kept
    both in the result (L @ L.T: out(i0,i0)): silently wrong values or an error. Values are
    NumPy's, on a leaf, a transposed operand (M = A.T) and a built product (P = L @ L).
    And renaming a variable onto one a sum binds captured it: L.T + S with S = L.sum(axis=0)
    (sum over v0 of L(v0, v1), its v1 renamed to L.T's v0) summed L's diagonal."""
    rng = np.random.default_rng(54)
    a = rng.random((4, 4)) * (rng.random((4, 4)) < 0.7)
    t = coiter.Tensor.from_numpy(a, format="csr")
    L, M = coiter.lazy.Lazy.leaf(t), t.T
    P, S = L @ L, L.sum(axis=0)
    cases = {"L @ L.T": (lambda: L @ L.T, a @ a.T), "L.T @ L": (lambda: L.T @ L, a.T @ a),
             "L + L.T": (lambda: L + L.T, a + a.T), "L * L.T": (lambda: L * L.T, a * a.T),
             "M @ M.T": (lambda: M @ M.T, a.T @ a), "P + P.T": (lambda: P + P.T, a @ a + (a @ a).T),
             "P @ P.T": (lambda: P @ P.T, (a @ a) @ (a @ a).T),
             "maximum(L, L.T)": (lambda: np.maximum(L, L.T), np.maximum(a, a.T)),
             "L - L.T.T.T": (lambda: L - L.T.T.T, a - a.T),
             "L.T + S": (lambda: L.T + S, a.T + a.sum(axis=0)),
             "S + L.T": (lambda: S + L.T, a.sum(axis=0) + a.T),
             "L.T * S": (lambda: L.T * S, a.T * a.sum(axis=0))}
    build, ref = cases[name]
    np.testing.assert_allclose(np.asarray(build().evaluate().to_numpy()), ref)


def test_sums_of_many_sparse_operands_are_computed_term_by_term() -> None:
    """Regression: a sum of 32 sparse matrices built its merge lattice's 2**32 points and
    ran out of memory (16 took minutes). Past coiter.lattice.lattice.MAX_POINTS points the
    sum was computed a term at a time into a dense result (a PerformanceWarning); now it is a
    chain of three-way sums (coiter.planning.sums) with a sparse result. The value is
    NumPy's, added in the same order."""
    rng = np.random.default_rng(51)
    mats = [rng.random((6, 5)) * (rng.random((6, 5)) < 0.2) for _ in range(32)]
    total = coiter.Tensor.from_numpy(mats[0], format="csr")
    for m in mats[1:]:
        total = total + coiter.Tensor.from_numpy(m, format="csr")
    expected = mats[0]
    for m in mats[1:]:
        expected = expected + m
    with warnings.catch_warnings():
        warnings.simplefilter("error", coiter.PerformanceWarning)
        got = total.evaluate()
    assert not got.format.is_dense
    np.testing.assert_array_equal(got.to_numpy(), expected)


def test_an_expression_merging_too_many_sparse_operands_is_a_schedule_error() -> None:
    """Regression (as above): an expression no term-by-term plan splits, over more sparse
    operands than a merge lattice may take, is a ScheduleError that says so, not an
    exhausted memory."""
    rng = np.random.default_rng(52)
    value = coiter.Tensor.from_numpy(rng.random((4, 4)), format="csr")
    for _ in range(12):
        value = np.maximum(value, coiter.Tensor.from_numpy(rng.random((4, 4)) * (rng.random((4, 4)) < 0.3),
                                                           format="csr"))
    with pytest.raises(coiter.ScheduleError, match="more than 1024 lattice points"):
        value.evaluate()


def test_deferred_expressions_pickle() -> None:
    """Regression: a deferred expression held its builder, a closure, and did not pickle
    (built ones always did)."""
    import pickle

    rng = np.random.default_rng(48)
    a, v = rng.random((5, 5)) * (rng.random((5, 5)) < 0.5), rng.random(5)
    t = coiter.Tensor.from_numpy(a, format="csr")
    for expr, ref in [(t @ v, a @ v), (t.T @ v, a.T @ v), (t + t, 2 * a), (2 * t, 2 * a), (-t, -a),
                      ((t + t) @ v, 2 * a @ v), (abs(t).sum(0), a.sum(0)), ((t > 0.5).T, (a > 0.5).T)]:
        copy = pickle.loads(pickle.dumps(expr))
        assert isinstance(copy, Lazy) and copy.shape == expr.shape
        np.testing.assert_allclose(np.asarray(copy.to_numpy()), ref)
        np.testing.assert_allclose(np.asarray(expr.to_numpy()), ref)


def test_a_product_of_bool_matrices_is_bool_inside_arithmetic() -> None:
    """Regression (chain fuzzer seed 589): NumPy's product of bool matrices is an "or" of
    "and"s; fused into 3 * (P @ Q) or (P @ Q) + 1 the kernel summed the products in int64,
    counting them (6 where NumPy has 3)."""
    rng = np.random.default_rng(61)
    p, q = rng.random((4, 5)) < 0.6, rng.random((5, 3)) < 0.6
    P, Q = coiter.Tensor.from_numpy(p, format="csr"), coiter.Tensor.from_numpy(q, format="dense")
    for got, expected in [(P @ Q, p @ q), (3 * (P @ Q), 3 * (p @ q)), ((P @ Q) + 1, (p @ q) + 1),
                          (2 * (P @ P.T), 2 * (p @ p.T)), ((P @ Q) * 1.5, (p @ q) * 1.5)]:
        out = got.to_numpy()
        assert out.dtype == expected.dtype
        np.testing.assert_array_equal(out, expected)
