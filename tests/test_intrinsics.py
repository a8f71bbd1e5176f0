"""Intrinsic functions (``sqrt(B(i,j))``, ``max(b(i), c(i))``...) against NumPy's ufuncs.

Every function runs on sparse and dense operands of every value type NumPy has a loop
for; values and result types are NumPy's on the densified operands. Which coordinates a
kernel visits follows from the function's value at zero (``sqrt`` keeps a sparse
operand's pattern, ``exp`` fills every entry), checked through the result's stored
entries.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import coiter
from coiter.notation.functions import FUNCTIONS

UNARY = sorted(n for n, f in FUNCTIONS.items() if f.arity == 1 and not f.cast)
BINARY = sorted(n for n, f in FUNCTIONS.items() if f.arity == 2)
# functions of complex values: C99's, and those computed inline
COMPLEX = {n for n, f in FUNCTIONS.items() if f.complex_c} | {"square", "eq", "neq", "and", "or", "not"}


def _vector(dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = 12
    if dtype == "bool":
        return rng.random(n) < 0.5
    values = rng.integers(-4, 5, n)
    values[rng.random(n) < 0.4] = 0
    if dtype == "complex128":
        return (values + 1j * np.roll(values, 1)).astype(dtype)
    scale = 0.37 if dtype.startswith("float") else 1
    return (values * scale).astype(dtype)


def _numpy(fn: str, *args: np.ndarray) -> np.ndarray | None:
    """NumPy's value (None when NumPy has no loop for these types)."""
    try:
        with np.errstate(all="ignore"):
            return FUNCTIONS[fn](*args)
    except TypeError:
        return None


def _check(got: coiter.Tensor, want: np.ndarray) -> None:
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    # float16 results: NumPy rounds each function's float32 value once, as kernels do
    tol = {np.float16: 1e-3, np.float32: 1e-5, np.complex64: 1e-5}.get(want.dtype.type, 1e-12)
    np.testing.assert_allclose(got.to_numpy(), want.astype(got.dtype), rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int32", "complex128", "bool"])
@pytest.mark.parametrize("fn", UNARY)
@pytest.mark.parametrize("fmt", ["s", "d"])
def test_unary_functions_match_numpy(fn: str, dtype: str, fmt: str) -> None:
    b = _vector(dtype, 1)
    want = _numpy(fn, b)
    B = coiter.Tensor.from_numpy(b, format=fmt)
    if want is None or (dtype == "complex128" and fn not in COMPLEX):
        with pytest.raises(coiter.DTypeError, match=fn):
            coiter.evaluate(f"a(i) = {fn}(b(i))", b=B)
        return
    with np.errstate(all="ignore"):
        _check(coiter.evaluate(f"a(i) = {fn}(b(i))", b=B), want)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int32", "bool", "complex128"])
@pytest.mark.parametrize("fn", BINARY)
def test_binary_functions_match_numpy(fn: str, dtype: str) -> None:
    b, c = _vector(dtype, 2), _vector(dtype, 3)
    if fn == "pow" and dtype in ("int64", "int32"):
        c = np.abs(c)  # NumPy refuses negative integer powers
    want = _numpy(fn, b, c)
    B, C = coiter.Tensor.from_numpy(b, format="s"), coiter.Tensor.from_numpy(c, format="s")
    if want is None or (dtype == "complex128" and fn not in COMPLEX):
        with pytest.raises(coiter.DTypeError, match=fn):
            coiter.evaluate(f"a(i) = {fn}(b(i), c(i))", b=B, c=C)
        return
    _check(coiter.evaluate(f"a(i) = {fn}(b(i), c(i))", b=B, c=C), want)


def test_max_and_min_propagate_nan_like_numpy() -> None:
    b = np.array([np.nan, 1.0, 0.0, -2.0, np.nan, 0.0])
    c = np.array([1.0, np.nan, -1.0, 0.0, np.nan, 0.0])
    for fn, ufunc in (("max", np.maximum), ("min", np.minimum)):
        got = coiter.evaluate(f"a(i) = {fn}(b(i), c(i))", b=coiter.Tensor.from_numpy(b, format="s"),
                              c=coiter.Tensor.from_numpy(c, format="s"))
        np.testing.assert_array_equal(got.to_numpy(), ufunc(b, c))


@pytest.mark.parametrize("expr,keeps_pattern", [
    ("sqrt(b(i))", True), ("sin(b(i))", True), ("abs(b(i))", True), ("pow(b(i), 2)", True),
    ("max(b(i), 0)", True), ("exp(b(i))", False), ("cos(b(i))", False), ("pow(b(i), 0)", False),
    ("max(b(i), 1)", False), ("log(b(i))", False),
])
def test_visited_coordinates_follow_the_value_at_zero(expr: str, keeps_pattern: bool) -> None:
    """A sparse result holds the operand's entries where the function is zero at zero, and
    every coordinate otherwise (where its value, e.g. exp(0) = 1, is stored)."""
    b = np.zeros(50)
    b[[3, 17, 41]] = [4.0, 0.25, 9.0]
    got = coiter.evaluate(f"a(i) = {expr}", b=coiter.Tensor.from_numpy(b, format="s"), out_format="s")
    assert got.nnz == (3 if keeps_pattern else 50)
    with np.errstate(all="ignore"):
        want = eval(expr.replace("(i)", ""), {"b": b, "sqrt": np.sqrt, "sin": np.sin, "abs": np.abs,
                                             "pow": np.power, "max": np.maximum, "exp": np.exp,
                                             "cos": np.cos, "log": np.log})
    np.testing.assert_allclose(got.to_numpy(), want)


def test_functions_of_sparse_matrices_in_products_and_sums() -> None:
    rng = np.random.default_rng(4)
    a = rng.random((30, 20)) * (rng.random((30, 20)) < 0.2)
    c = rng.random((30, 20)) * (rng.random((30, 20)) < 0.2)
    x = rng.random(20)
    A, C = coiter.Tensor.from_numpy(a, format="csr"), coiter.Tensor.from_numpy(c, format="dcsr")
    _check(coiter.evaluate("y(i) = sqrt(A(i,j)) * x(j)", A=A, x=x), np.sqrt(a) @ x)
    _check(coiter.evaluate("B(i,j) = max(A(i,j), C(i,j)) - tanh(C(i,j))", A=A, C=C, out_format="csr"),
           np.maximum(a, c) - np.tanh(c))
    _check(coiter.evaluate("B(i,j) = exp(A(i,j)) * C(i,j)", A=A, C=C, out_format="csr"), np.exp(a) * c)


def test_implicit_sums_apply_after_the_function() -> None:
    rng = np.random.default_rng(5)
    b = rng.random((6, 7)) * (rng.random((6, 7)) < 0.5)
    B = coiter.Tensor.from_numpy(b, format="csr")
    _check(coiter.evaluate("a(i) = sqrt(B(i,j))", B=B), np.sqrt(b).sum(axis=1))
    _check(coiter.evaluate("a(i) = exp(B(i,j)) * 2", B=B), (np.exp(b) * 2).sum(axis=1))


def test_integer_powers_with_negative_exponents_truncate() -> None:
    # NumPy raises for a negative integer exponent; coiter gives the truncated quotient
    b = np.array([1, -1, 2, -3, 0, 5], dtype=np.int64)
    got = coiter.evaluate("a(i) = pow(b(i), -1) + pow(b(i), -2)", b=b).to_numpy()
    want = [int(1 / x) + int(1 / x**2) if x else 0 for x in b.tolist()]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fmt", ["s", "d"])
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_complex_powers_follow_numpy(fmt: str, dtype: str) -> None:
    # fuzz seed 33 case 5354: C's cpow gives NaN for 0 ** 0 (NumPy: 1) and 1.2e-16+2j for
    # (1+1j) ** 2; NumPy multiplies for integer exponents below 100
    v = np.array([0, 1 + 1j, -2 + 0.5j, 0, 3j, -1.5 - 2j], dtype=dtype)
    v_t = coiter.Tensor.from_numpy(v, format=fmt)
    exact = dtype == "complex128"
    for n in (0, 1, 2, 3, 5, -1, -2, 0.5, 2.5, 1j, 3 + 3j, -3 + 3j, 3 - 1j):
        got = coiter.evaluate(f"a(i) = pow(v(i), {n})", v=v_t).to_numpy()
        with np.errstate(all="ignore"):
            want = np.power(v, np.asarray(n, dtype=dtype))
        assert got.dtype == want.dtype
        if isinstance(n, int) and exact:  # the same multiplications as NumPy's
            np.testing.assert_array_equal(got, want, err_msg=f"exponent {n}")
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "complex64" else 1e-12,
                                       equal_nan=True, err_msg=f"exponent {n}")
    w = coiter.Tensor.from_numpy(np.array([2, 0, -1, 0.5, 0, 3], dtype=dtype), format=fmt)
    got = coiter.evaluate("a(i) = pow(v(i), w(i))", v=v_t, w=w).to_numpy()
    with np.errstate(all="ignore"):
        want = np.power(v, w.to_numpy())
    np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("fmt", ["s", "d"])
@pytest.mark.parametrize("text,ref", [
    ("pow(v(i), -2)", lambda v, w: v ** -2.0),
    ("pow(abs(v(i)), -2)", lambda v, w: abs(v) ** -2.0),
    ("pow(v(i) * w(i), -1)", lambda v, w: (v * w) ** -1.0),
    ("pow(-v(i), -2)", lambda v, w: (-v) ** -2.0),
    ("pow(v(i) / 2, -1)", lambda v, w: (v / 2) ** -1.0),
    ("pow(square(v(i)), -1)", lambda v, w: (v * v) ** -1.0),
    ("pow(max(v(i), 0), -3)", lambda v, w: np.maximum(v, 0) ** -3.0),
    ("pow(v(i) * w(i), -1) + w(i)", lambda v, w: (v * w) ** -1.0 + w),
    ("pow(v(i) + 3, -2)", lambda v, w: (v + 3) ** -2.0),
    ("pow(v(i) - 3, -1)", lambda v, w: (v - 3) ** -1.0),
    ("pow(3 - v(i), -1)", lambda v, w: (3 - v) ** -1.0),
    ("pow((v(i) + 2) * 3, -1)", lambda v, w: ((v + 2) * 3) ** -1.0),
    ("exp(hypot(pow(v(i) + 3, -2), 2))", lambda v, w: np.exp(np.hypot((v + 3) ** -2.0, 2))),
])
def test_negative_integer_powers_of_absent_float_entries(fmt: str, text: str, ref: Any) -> None:
    """Regression: pow(b(i), -2) of a float b raised NumPy's ValueError (its merge lattice
    evaluated the power at the integer 0), and pow(abs(b(i)), -2) or pow(b(i) * c(i), -1)
    gave 0 where b is absent instead of inf (the folded zero was the integer 0, which made
    the power an integer one; found by hand), and pow(b(i) + 3, -2) gave 0 there instead of 1/9
    (b(i) + 3 folded into the integer literal 3; found by the fuzzer's intrinsics)."""
    v = np.array([0.0, 2.0, 0.0, -4.0, 0.5, 0.0])
    # no negative v where w is absent: x * 0 folds to +0 for every x (docs/language.md)
    w = np.array([0.0, 1.0, 3.0, 1.0, 0.0, 0.0])
    operands = {"v": coiter.Tensor.from_numpy(v, format=fmt)}
    if "w(i)" in text:
        operands["w"] = coiter.Tensor.from_numpy(w, format=fmt)
    got = coiter.evaluate(f"a(i) = {text}", fmt, **operands)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got.to_numpy(), ref(v, w))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((coiter.Tensor.from_numpy(v, format=fmt) ** -2).to_numpy(), v ** -2.0)


@pytest.mark.parametrize("text,ref", [
    ("A(l,i) = B(l) + C(i) + 1 / B(l)", lambda b, c: b + c + 1 / b),
    ("A(l,i) = log(B(l)) + C(i)", lambda b, c: np.log(b) + c),
    ("A(l,i) = C(i) - 1 / B(l)", lambda b, c: c - 1 / b),
    ("A(l,i) = C(i) + pow(B(l), -1)", lambda b, c: c + b ** -1.0),
    ("A(l,i) = max(C(i), 1 / B(l))", lambda b, c: np.maximum(c, 1 / b)),
    ("A(l,i) = (B(l) - 2 * B(l)) * C(i) + C(i)", lambda b, c: (b - 2 * b) * c + c),
    ("A(l,i) = C(i) * exp(B(l)) + C(i) / (B(l) + 1)", lambda b, c: c * np.exp(b) + c / (b + 1)),
])
def test_an_infinite_absent_value_absorbs_a_sum_over_another_operand(text: str, ref: Any) -> None:
    """Regression (found by the fuzzer's intrinsics, seed 24 case 7280): where b is absent,
    1 / b(l) is inf, which the merge lattice takes to absorb c(i) + ...: no loop over c. The
    simplified absent case kept 1 / 0.0 as an expression, so c(i) + inf was not folded and
    lowering read c(i) with no loop over c (KeyError)."""
    b = np.array([0.41, -1.9, 0.0, 2.0])
    c = np.array([-1.08, 0.0, 0.91, 0.10])
    B, C = coiter.Tensor.from_numpy(b, format="s"), coiter.Tensor.from_numpy(c, format="s")
    got = coiter.evaluate(text, "dd", B=B, C=C).to_numpy()
    with np.errstate(all="ignore"):
        want = ref(b[:, None], c[None, :])
    finite = np.isfinite(want)  # inf + c: the lattices' algebra (docs/language.md)
    np.testing.assert_array_equal(np.where(finite, got, 0), np.where(finite, want, 0))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("text", ["a(i) = (b(i) - b(i)) * c(i)", "a(i) = -b(i) * c(i) + c(i)",
                                  "a(i) = (c(i) - b(i)) * b(i)"])
def test_bools_in_arithmetic_of_sparse_operands(text: str) -> None:
    """Regression (fuzz seed 0 case 123, after merge lattices took fills in their tensor's
    type): NumPy refuses to subtract or negate bools, which the lattice did with a bool
    operand's absent False; kernels compute bools as 0 and 1 in the result's type."""
    b = np.array([True, False, True, True, False])
    c = np.array([3, -2, 0, 5, 1], dtype=np.int8)
    got = coiter.evaluate(text, b=coiter.Tensor.from_numpy(b, format="s"),
                          c=coiter.Tensor.from_numpy(c, format="s")).to_numpy()
    bi = b.astype(np.int8)
    want = {"a(i) = (b(i) - b(i)) * c(i)": (bi - bi) * c, "a(i) = -b(i) * c(i) + c(i)": -bi * c + c,
            "a(i) = (c(i) - b(i)) * b(i)": (c - bi) * bi}[text]
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int8


@pytest.mark.parametrize("fmt", ["s", "h"])
def test_negative_literals_beside_absent_unsigned_entries(fmt: str) -> None:
    """Regression (fuzz seed 2026120202 case 1137): where uint64 b is absent, b(l) + -2 folded
    to -2 was retyped to uint64 (2**64 - 2) although the sum computes in the float result's
    type: only integer literals under a float or complex sum become floats."""
    b = np.array([0, 0, 3], dtype=np.uint64)
    c = np.float16(0.5)
    got = coiter.evaluate("a(l) = c - (b(l) + -2)", b=coiter.Tensor.from_numpy(b, format=fmt),
                          c=np.array(c)).to_numpy()
    np.testing.assert_array_equal(got, np.float64(c) - (b.astype(np.float64) - 2))


def test_python_operators_and_numpy_ufuncs_build_intrinsics() -> None:
    rng = np.random.default_rng(6)
    a = rng.standard_normal((5, 4)) * (rng.random((5, 4)) < 0.5)
    c = rng.standard_normal((5, 4))
    i, j = coiter.index_vars("i j")
    A, C = coiter.Tensor.from_numpy(a, format="csr"), coiter.Tensor.from_numpy(c)
    out = coiter.Tensor((5, 4), format="dd")
    out[i, j] = np.maximum(abs(A[i, j]) ** 2, C[i, j]) + np.sin(A[i, j]) * np.add(C[i, j], 1.0)
    _check(out, np.maximum(np.abs(a) ** 2, c) + np.sin(a) * (c + 1.0))
    with pytest.raises(coiter.ArgumentError, match="logaddexp has no coiter equivalent"):
        np.logaddexp(A[i, j], C[i, j])


@pytest.mark.parametrize("text,message", [
    ("a(i) = sqrt(b(i), c(i))", "sqrt takes 1 argument, got 2"),
    ("a(i) = max(b(i))", "max takes 2 arguments, got 1"),
    ("a(i) = exp(b(i)", r"',' or '\)' in the arguments of exp"),
])
def test_bad_calls_are_parse_errors(text: str, message: str) -> None:
    with pytest.raises(coiter.ParseError, match=message):
        coiter.compile(text)


def test_scalar_tensors_may_carry_function_names() -> None:
    # a name is a call only when a '(' follows it
    b = np.array([1.0, 2.0])
    got = coiter.evaluate("a(i) = b(i) * max", b=b, max=3.0)
    np.testing.assert_allclose(got.to_numpy(), b * 3.0)


def test_comparison_and_logical_operators() -> None:
    rng = np.random.default_rng(7)
    b = rng.integers(-2, 3, 40).astype(np.float64)
    b[rng.random(40) < 0.4] = 0
    c = rng.integers(-2, 3, 40).astype(np.int32)
    B, C = coiter.Tensor.from_numpy(b, format="s"), coiter.Tensor.from_numpy(c, format="s")
    for text, want in [
        ("a(i) = b(i) > c(i)", b > c), ("a(i) = b(i) <= c(i) + 1", b <= c + 1),
        ("a(i) = b(i) * (c(i) < 0) - (b(i) != 0)", b * (c < 0) - (b != 0)),
        ("a(i) = b(i) == c(i) || !(c(i) >= 0) && b(i) != 0", (b == c) | (~(c >= 0) & (b != 0))),
        ("a(i) = and(b(i), c(i))", np.logical_and(b, c)),
    ]:
        _check(coiter.evaluate(text, b=B, c=C), want)
    i, = coiter.index_vars("i")
    out = coiter.Tensor((40,), format="d")
    out[i] = (B[i] > C[i]) * 2.0 + (B[i] <= 0) + np.equal(B[i], C[i])
    _check(out, (b > c) * 2.0 + (b <= 0) + (b == c))


@pytest.mark.parametrize("dtype, literal", [
    (d, x) for d in ("uint8", "uint64", "int8", "int64") for x in (-1, -2**70, 300, 2**64)
    if not np.iinfo(d).min <= x <= np.iinfo(d).max])
@pytest.mark.parametrize("fn", ["gt", "gte", "lt", "lte", "eq", "neq"])
@pytest.mark.parametrize("fmt", ["s", "d"])
def test_a_comparison_with_an_integer_beyond_the_type_is_numpys(dtype: str, literal: int, fn: str,
                                                                fmt: str) -> None:
    """NumPy 2 compares integers with a Python int out of their range exactly (uint8 > -1
    is true everywhere), where arithmetic with it is an error; coiter refused it."""
    info = np.iinfo(dtype)
    b = np.array([0, 1, info.max, info.min, 7], dtype=dtype)
    ufunc = FUNCTIONS[fn].ufunc
    B = coiter.Tensor.from_numpy(b, format=fmt)
    for text, want in [(f"a(i) = {fn}(b(i), {literal})", ufunc(b, literal)),
                       (f"a(i) = {fn}({literal}, b(i))", ufunc(literal, b)),
                       (f"a(i) = {fn}(b(i), {literal}) * b(i)", ufunc(b, literal) * b)]:
        got = coiter.evaluate(text, b=B)
        assert got.dtype == want.dtype, text
        np.testing.assert_array_equal(got.to_numpy(), want, err_msg=text)


def test_comparisons_of_complex_values_are_equality_only() -> None:
    z = np.array([1 + 1j, 0, 2j])
    _check(coiter.evaluate("a(i) = z(i) == w(i)", z=z, w=z * 1), z == z)
    with pytest.raises(coiter.DTypeError, match="gt of complex"):
        coiter.evaluate("a(i) = z(i) > w(i)", z=z, w=z)


def test_chained_comparisons_are_parse_errors() -> None:
    with pytest.raises(coiter.ParseError, match="do not chain"):
        coiter.parse("a(i) = b(i) < c(i) < d(i)")


CASTS = ["bool", "int32", "int64", "uint64", "float32", "float64", "complex128"]


@pytest.mark.parametrize("target", CASTS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int32", "complex128", "bool"])
@pytest.mark.parametrize("fmt", ["s", "d"])
def test_casts_convert_as_astype(target: str, dtype: str, fmt: str) -> None:
    b = _vector(dtype, 8)
    if dtype == "float64":  # NaN and values beyond int32 convert to the minimum, as on x86
        b[:3] = [np.nan, 3e12, -1e30]
        if target == "uint64":  # and the unsigned conversion's edges, the x86 way too
            b[3:8] = [-1.5, 2.0**63, 1e20, 2.0**64, -0.5]
    got = coiter.evaluate(f"a(i) = {target}(b(i))", b=coiter.Tensor.from_numpy(b, format=fmt))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        want = b.astype(target)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.to_numpy(), want)


def test_a_cast_asks_for_the_result_type() -> None:
    # TACO's int32 + float32 -> float32, written as a cast of the NumPy (float64) sum
    b = np.array([1, 2**24 + 1, -3], dtype=np.int32)
    c = np.array([0.5, 0.25, 1e-3], dtype=np.float32)
    got = coiter.evaluate("a(i) = float32(b(i) + c(i))", b=b, c=c)
    _check(got, (b + c).astype(np.float32))
    assert got.dtype == np.float32


@pytest.mark.parametrize("target", [np.float32, "int64", bool, complex, np.dtype(np.uint64)])
def test_astype_in_python_is_the_cast(target: object) -> None:
    """``expr.astype(t)`` in the operator DSL builds the text form's cast ``t(...)``."""
    b = np.array([1.5, -2.75, 0.0, 3e12, np.nan])
    c = np.array([0.25, 1.0, -4.0, 2.0, 1.0])
    B, C = coiter.Tensor.from_numpy(b, format="s"), coiter.Tensor.from_numpy(c)
    (i,) = coiter.index_vars("i")
    out = coiter.Tensor((5,), format="d", dtype=np.dtype(target))
    out[i] = (B[i] * C[i]).astype(target)
    with np.errstate(all="ignore"):
        want = (b * c).astype(target)
    assert out.dtype == want.dtype
    np.testing.assert_array_equal(out.to_numpy(), want)


def test_astype_to_a_type_without_a_cast_is_a_dtype_error() -> None:
    (i,) = coiter.index_vars("i")
    B = coiter.Tensor.from_numpy(np.ones(3))
    with pytest.raises(coiter.DTypeError, match="no cast to int8"):
        B[i].astype(np.int8)
    with pytest.raises(coiter.DTypeError, match="'vector' is not a type"):
        B[i].astype("vector")


@pytest.mark.parametrize("text, numpy", [
    ("a(i) = pow(c(i) + b(i), -1)", lambda c, b: (c + b) ** -1.0),
    ("a(i) = pow(c(i) * 2 - b(i), -2)", lambda c, b: (c * 2 - b) ** -2.0),
    ("a(i) = pow(float32(c(i)) + b(i), -1)", lambda c, b: (c.astype(np.float32) + b) ** -1.0),
    ("a(i) = pow(c(i) + z(i), -1)", lambda c, z: (c + z) ** -1),
])
@pytest.mark.parametrize("fmt", ["s", "d"])
def test_a_float_power_stays_one_where_the_float_operand_is_absent(text: str, numpy, fmt: str) -> None:
    """Where the float (complex) operand of ``c(i) + b(i)`` is absent the sum is ``c(i)``, an
    int32: an enclosing pow became an integer power there, 0 for 1/4 (fuzz seed 61 case
    1903). NumPy's sum is a float there too."""
    c = np.array([2, 4, 1, -3], dtype=np.int32)
    b = np.array([0.5, 0, 0, 0.25])
    other = b.astype(np.complex128) * (1 - 1j) if "z(" in text else b
    name = "z" if "z(" in text else "b"
    got = coiter.evaluate(text, c=c, **{name: coiter.Tensor.from_numpy(other, format=fmt)})
    want = numpy(c, other)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("fmt", ["ss", "uq", "ds", "dd"])
@pytest.mark.parametrize("text, numpy", [
    ("a(i) = pow(D(k,i) - 3, -2)", lambda d: ((d - 3) ** -2.0).sum(axis=0)),
    ("a(i) = pow(3 - D(k,i), -3)", lambda d: ((3 - d) ** -3.0).sum(axis=0)),
    ("a(i) = pow(2 * D(k,i) - 4, -1) + 1", lambda d: ((2 * d - 4) ** -1.0).sum(axis=0) + 1),
])
def test_a_float_power_of_a_folded_difference_survives_the_inner_loops(fmt: str, text: str, numpy) -> None:
    """Where D is absent, ``D(k,i) - 3`` folds to ``-3 + 0.0`` (a float, so ``pow`` stays
    a float power); the loop over ``i`` inside folded it again to the int ``-3`` and the
    integer power 0 dropped the absent rows' terms (fuzz seed 66 case 1412)."""
    d = np.zeros((3, 4))
    d[1, 2], d[2, 0] = 5.0, -1.0
    got = coiter.evaluate(text, D=coiter.Tensor.from_numpy(d, format=fmt), out_format="d")
    np.testing.assert_allclose(got.to_numpy(), numpy(d))


@pytest.mark.parametrize("fmt", ["s", "d"])
def test_a_difference_of_int32_and_uint64_is_a_float_where_one_is_absent(fmt: str) -> None:
    """NumPy computes int32 - uint64 in float64: where the int32 ``e`` is absent the case's
    ``-u(i)`` must be a float's negation, not uint64's wrap to 2**64 - u (fuzz seed
    2026120205 case 2204, from a first version of the fix above)."""
    e = np.array([0, 5, 0, -2], dtype=np.int32)
    u = np.array([3, 1, 7, 2], dtype=np.uint64)
    for text, want in [("a(i) = (e(i) - u(i)) * 1.5", (e - u) * 1.5),
                       ("a(i) = pow(e(i) - u(i), -1)", (e - u) ** -1.0)]:
        got = coiter.evaluate(text, e=coiter.Tensor.from_numpy(e, format=fmt), u=u)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.to_numpy(), want, err_msg=text)


@pytest.mark.parametrize("b_fmt,c_fmt", [("s", "s"), ("d", "s"), ("csr", "csr"), ("dense", "dcsr")])
def test_division_by_a_sparse_operand_follows_ieee(b_fmt: str, c_fmt: str) -> None:
    """Where a sparse denominator is absent the kernel divides by zero: inf, -inf or NaN
    (0 / 0), as NumPy does on the densified operands."""
    rng = np.random.default_rng(9)
    shape = (12,) if b_fmt in "sd" else (6, 7)
    b, c = (rng.integers(-2, 3, shape).astype(np.float64) for _ in range(2))
    b[rng.random(shape) < 0.4] = 0
    c[rng.random(shape) < 0.4] = 0
    text = "a(i) = b(i) / c(i) + 1" if len(shape) == 1 else "A(i,j) = B(i,j) / C(i,j) + 1"
    names = ("b", "c") if len(shape) == 1 else ("B", "C")
    got = coiter.evaluate(text, **{names[0]: coiter.Tensor.from_numpy(b, format=b_fmt),
                                   names[1]: coiter.Tensor.from_numpy(c, format=c_fmt)})
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got.to_numpy(), b / c + 1)


def test_division_of_a_sparse_operand_by_a_dense_one_keeps_its_pattern() -> None:
    # 0 / x is taken as 0 where the numerator is absent (TACO's rule; NumPy gives NaN for
    # 0 / 0): row scaling A(i,j) / d(i) visits A's entries only
    rng = np.random.default_rng(10)
    a = rng.random((8, 6)) * (rng.random((8, 6)) < 0.3)
    d = rng.random(8) + 0.5
    got = coiter.evaluate("B(i,j) = A(i,j) / d(i)", A=coiter.Tensor.from_numpy(a, format="csr"), d=d,
                          out_format="csr")
    assert got.nnz == np.count_nonzero(a)
    np.testing.assert_allclose(got.to_numpy(), a / d[:, None])


@pytest.mark.parametrize("fmt", ["csr", "dcsr", "coo", "csc", "sss"])
def test_prune_drops_the_zeros_kernels_store(fmt) -> None:
    """Kernels store every entry they visit, zeros included (x - x, a false comparison);
    prune() drops them in the same format, keeping NaN, as SciPy's eliminate_zeros does."""
    rng = np.random.default_rng(12)
    shape = (6, 5, 4) if fmt == "sss" else (9, 7)
    a = rng.random(shape) * (rng.random(shape) < 0.4)
    a[a > 0.9] = np.nan
    A = coiter.Tensor.from_numpy(a, format=fmt)
    idx = "i,j,k" if len(shape) == 3 else "i,j"
    got = coiter.evaluate(f"C({idx}) = A({idx}) * (A({idx}) > 0.5) + A({idx}) - A({idx})", A=A,
                          out_format=fmt)
    pruned = got.prune()
    with np.errstate(invalid="ignore"):
        want = a * (a > 0.5) + a - a
    assert pruned.format == got.format and pruned.nnz < got.nnz
    np.testing.assert_array_equal(pruned.to_numpy(), want)
    coords, vals = pruned.storage.to_coords()
    assert np.all((vals != 0))  # NaN != 0 holds: NaN entries stay
    assert np.isnan(vals).sum() == np.isnan(want).sum()


def _sparse_matrix(rng: np.random.Generator, shape: tuple[int, int], dtype: str) -> np.ndarray:
    values = np.where(rng.random(shape) < 0.5, rng.integers(-4, 5, shape), 0)
    if dtype == "complex128":
        return values + 1j * np.where(values != 0, rng.integers(-4, 5, shape), 0)
    return values.astype(dtype)


# (expression, dtypes of A, B and O, NumPy's value from A, B, O): a reduction an intrinsic
# reads is computed in its own type, not the result's (bool, float64, int32 here)
NESTED = {
    "comparison of a product": ("C(i,j) = lte(sum(k, A(i,k) * B(k,j)), O(i,j))", "int32",
                                lambda A, B, O: (A @ B) <= O),
    "comparison of floats": ("C(i,j) = sum(k, A(i,k) * B(k,j)) > O(i,j)", "float64",
                             lambda A, B, O: (A @ B) > O),
    "abs of a complex sum": ("C(i,j) = abs(sum(k, A(i,k) * B(k,j)))", "complex128",
                             lambda A, B, O: np.abs(A @ B)),
    "cast of a float sum": ("C(i,j) = int32(sum(k, A(i,k) * B(k,j)) * 0.5)", "float64",
                            lambda A, B, O: ((A @ B) * 0.5).astype(np.int32)),
    "sqrt of an integer sum": ("C(i,j) = sqrt(abs(sum(k, A(i,k) * B(k,j))))", "int64",
                               lambda A, B, O: np.sqrt(np.abs(A @ B))),
    "max reduction compared": ("C(i,j) = max(k, A(i,k) * B(k,j)) >= O(i,j)", "int32",
                               lambda A, B, O: (A[:, :, None] * B[None]).max(axis=1) >= O),
    "nested sums under abs": ("C(i,j) = abs(sum(k, A(i,k) * sum(l, B(k,l) * O(l,j)) + O(i,j)))",
                              "complex128", lambda A, B, O: np.abs(A @ (B @ O) + 6 * O)),
}


@pytest.mark.parametrize("fmt", ["dd", "ds", "ss"])
@pytest.mark.parametrize("case", sorted(NESTED))
def test_reductions_inside_intrinsics_keep_their_own_type(case: str, fmt: str) -> None:
    """A sum inside a comparison was computed in bool (the result's type: every product cast
    to bool first), inside ``abs`` of complex values in float64 (their real parts), inside a
    cast in the cast's type."""
    text, dtype, reference = NESTED[case]
    rng = np.random.default_rng(sorted(NESTED).index(case))
    A, B, O = (_sparse_matrix(rng, (6, 6), dtype) for _ in range(3))
    operands = {n: coiter.Tensor.from_numpy(x, format=fmt) for n, x in zip("ABO", (A, B, O))
                if f"{n}(" in text}
    _check(coiter.evaluate(text, **operands), reference(A, B, O))


@pytest.mark.parametrize("fmt", ["d", "s"])
def test_narrow_integers_wrap_at_every_operation(fmt: str) -> None:
    """int8/uint8/int16/uint16 values wrap at each operation, as NumPy's: C computes them in
    int, so -x of uint8 or x * x of int8 reached a comparison, a max or a wider cast unwrapped."""
    rng = np.random.default_rng(8)
    a8 = rng.integers(-128, 128, (5, 7)).astype(np.int8)
    u8 = rng.integers(0, 256, (5, 7)).astype(np.uint8)
    u16 = rng.integers(0, 2**16, (5, 7)).astype(np.uint16)
    a8[0, 0] = -128
    f = fmt * 2
    with np.errstate(all="ignore"):
        cases = [
            ("C(i) = max(j, A(i,j) * A(i,j))", {"A": a8}, (a8 * a8).max(axis=1)),
            ("C(i,j) = -A(i,j) > 100", {"A": u8}, (-u8) > 100),
            ("C(i,j) = abs(A(i,j)) < 0", {"A": a8}, np.abs(a8) < 0),
            ("C(i,j) = int64(A(i,j) * A(i,j) + A(i,j))", {"A": u16}, (u16 * u16 + u16).astype(np.int64)),
            ("C(i,j) = min(A(i,j) - 200, B(i,j))", {"A": u8, "B": u8}, np.minimum(u8 - np.uint8(200), u8)),
        ]
    for text, arrays, want in cases:
        got = coiter.evaluate(text, **{n: coiter.Tensor.from_numpy(x, format=f) for n, x in arrays.items()})
        assert got.dtype == want.dtype, text
        np.testing.assert_array_equal(got.to_numpy(), want, err_msg=text)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_nested_functions_evaluate_each_argument_once(dtype: str) -> None:
    # fuzz seed 62 case 8822, seed 2026120207 case 1795: max, min, abs, square and casts
    # were inline C expressions naming an argument up to five times, so nesting them
    # multiplied the source (megabytes of C, compiles of over 20 minutes)
    rng = np.random.default_rng(7)
    b, c = (rng.integers(-9, 9, 50).astype(dtype) for _ in range(2))
    text, ref = "b(i)", b
    for depth in range(4):
        if depth % 2:
            text, ref = f"min(abs({text}), square(c(i)) - 3)", np.minimum(np.abs(ref), c * c - 3)
        else:
            text, ref = f"max(int64({text} * 0.5), c(i))", np.maximum((ref * 0.5).astype(np.int64), c)
    kernel = coiter.compile(f"a(i) = {text}", dtype=dtype)
    # beyond the C prelude every kernel carries, a copy of each argument per use made megabytes
    plain = coiter.compile("a(i) = max(b(i), c(i))", dtype=dtype)
    assert len(kernel.source) - len(plain.source) < 4_000
    got = kernel(b=b, c=c).to_numpy()
    np.testing.assert_allclose(got, ref.astype(got.dtype), rtol=1e-6)


@pytest.mark.parametrize("fmt", ["s", "d"])
def test_a_negated_absent_entry_is_a_negative_zero(fmt: str) -> None:
    """``-b(i)`` where ``b`` is absent is -0.0, as NumPy negates a zero: ``1 / -b(i)`` is
    -inf there (it was +inf: the case folded the negation to +0), and ``0 - b(i)`` is +0
    (it was folded to ``-b(i)``)."""
    b = np.array([0.0, 2.0, 0.0, -4.0])
    t = coiter.Tensor.from_numpy(b, format=fmt)
    with np.errstate(divide="ignore"):
        for text, want in [("a(i) = 1 / -b(i)", 1 / -b), ("a(i) = 1 / (0 - b(i))", 1 / (0 - b))]:
            np.testing.assert_array_equal(coiter.evaluate(text, b=t).to_numpy(), want, err_msg=text)
