"""Intrinsic functions of index notation: ``sqrt(B(i,j))``, ``max(b(i), c(i))``, ``pow(b(i), 2)``,
``b(i) > c(i)``, casts such as ``float32(b(i))``.

Each intrinsic is a NumPy ufunc (or ``astype``) applied elementwise, with NumPy's meaning: its computation
type is the ufunc's loop type for the arguments' types (``sqrt`` of integers computes in
float64, ``abs`` of complex returns float64), and it sees the implicit zeros of sparse
operands as zeros. Whether a sparse operand's absent entries must be visited follows from
the function's value there, evaluated by NumPy when the kernel is built (coiter.lattice.lattice): ``sqrt(b(i))`` is
zero wherever ``b`` is, so only ``b``'s entries are visited; ``exp(b(i))`` is 1 there, so
every coordinate is (and ``pow(b(i), 2)`` visits ``b``'s entries, ``pow(b(i), 0)`` all).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..errors import ArgumentError, DTypeError
from .ast import (
    Access, Add, Call, Coordinate, Div, Expr, Literal, Mul, Neg, Number, Reduction, Sub, children,
)
from .reducers import reducer


@dataclass(frozen=True)
class Function:
    """An intrinsic: its name in expressions, its NumPy ufunc (or the type it casts to,
    ``astype``), the C99 function computing it in double (float adds ``f``; "" when lowered
    inline) and in complex (None: no complex version)."""

    name: str
    ufunc: np.ufunc | None
    c_name: str = ""
    complex_c: str | None = None
    cast: str = ""

    @property
    def arity(self) -> int:
        return 1 if self.cast else self.ufunc.nin

    def __call__(self, *args: Any) -> Any:
        """NumPy's value of the function at ``args`` (scalars or arrays)."""
        if self.cast:
            with warnings.catch_warnings():  # complex to real: the imaginary part goes, as intended
                warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
                return np.asarray(args[0]).astype(self.cast)[()]
        if self.ufunc is np.power:
            return _power(*args)
        return self.ufunc(*args)

    def loop(self, promoted: np.dtype) -> tuple[np.dtype, np.dtype]:
        """The (input, output) types NumPy computes the function in for arguments of type
        ``promoted`` (TypeError when it has no such loop)."""
        if self.cast:
            return promoted, np.dtype(self.cast)
        resolved = self.ufunc.resolve_dtypes((promoted,) * self.ufunc.nin + (None,))
        return np.dtype(resolved[0]), np.dtype(resolved[-1])


def _power(base: Any, exponent: Any) -> Any:
    """``np.power``, with the value kernels give an integer power of a negative exponent
    where NumPy raises: the truncated quotient, 0 unless the base is 1 or -1."""
    b, e = np.asarray(base), np.asarray(exponent)
    if b.dtype.kind not in "biu" or e.dtype.kind not in "iu" or not (e < 0).any():
        return np.power(base, exponent)
    power = np.power(b, np.where(e < 0, 0, e))
    quotient = np.where(b == 1, 1, np.where(b == -1, np.where(e % 2, -1, 1), 0))
    return np.where(e < 0, quotient, power).astype(power.dtype)[()]


def _table() -> dict[str, Function]:
    # (name, ufunc, C99 double function ("" when lowered inline), C99 complex function)
    rows = [
        ("abs", np.absolute, "fabs", "cabs"), ("sqrt", np.sqrt, "sqrt", "csqrt"),
        ("cbrt", np.cbrt, "cbrt", None), ("square", np.square, "", None),
        ("exp", np.exp, "exp", "cexp"), ("expm1", np.expm1, "expm1", None),
        ("log", np.log, "log", "clog"), ("log2", np.log2, "log2", None),
        ("log10", np.log10, "log10", None), ("log1p", np.log1p, "log1p", None),
        ("sin", np.sin, "sin", "csin"), ("cos", np.cos, "cos", "ccos"), ("tan", np.tan, "tan", "ctan"),
        ("asin", np.arcsin, "asin", "casin"), ("acos", np.arccos, "acos", "cacos"),
        ("atan", np.arctan, "atan", "catan"), ("sinh", np.sinh, "sinh", "csinh"),
        ("cosh", np.cosh, "cosh", "ccosh"), ("tanh", np.tanh, "tanh", "ctanh"),
        ("asinh", np.arcsinh, "asinh", "casinh"), ("acosh", np.arccosh, "acosh", "cacosh"),
        ("atanh", np.arctanh, "atanh", "catanh"), ("ceil", np.ceil, "ceil", None),
        ("floor", np.floor, "floor", None), ("trunc", np.trunc, "trunc", None),
        ("conj", np.conjugate, "", "conj"),
        ("pow", np.power, "pow", "cpow"), ("atan2", np.arctan2, "atan2", None),
        ("hypot", np.hypot, "hypot", None), ("max", np.maximum, "", None), ("min", np.minimum, "", None),
        # comparisons and logic (TACO's names; the parser also reads > >= < <= == != && || !)
        ("gt", np.greater, "", None), ("gte", np.greater_equal, "", None), ("lt", np.less, "", None),
        ("lte", np.less_equal, "", None), ("eq", np.equal, "", None), ("neq", np.not_equal, "", None),
        ("and", np.logical_and, "", None), ("or", np.logical_or, "", None), ("not", np.logical_not, "", None),
    ]
    table = {name: Function(name, ufunc, c, z) for name, ufunc, c, z in rows}
    # casts, named by the type: float32(b(i)) is b.astype(np.float32)
    for name in ("bool", "int32", "int64", "uint64", "float32", "float64", "complex128"):
        table[name] = Function(name, None, cast=name)
    return table


FUNCTIONS: dict[str, Function] = _table()
CASTS: tuple[str, ...] = tuple(name for name, f in FUNCTIONS.items() if f.cast)


def cast_name(dtype: Any) -> str:
    """The cast function converting to ``dtype`` (anything ``numpy.dtype`` reads:
    ``np.float32``, ``"int64"``, ``float``); DTypeError for a type coiter has no cast to."""
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise DTypeError(f"astype: {dtype!r} is not a type ({exc})") from None
    if name not in CASTS:
        raise DTypeError(f"astype: no cast to {name}; coiter casts to {', '.join(CASTS)}")
    return name


# the NumPy ufunc of each arithmetic node
ARITHMETIC: dict[type, np.ufunc] = {Add: np.add, Sub: np.subtract, Mul: np.multiply, Div: np.true_divide}


def ufunc_expr(ufunc: np.ufunc, args: list[Expr]) -> Expr:
    """The expression NumPy's ``ufunc`` of ``args`` stands for (ArgumentError when coiter
    has no such function)."""
    node = next((t for t, u in ARITHMETIC.items() if u is ufunc), None)
    if node is not None:
        return node(*args)
    if ufunc is np.negative:
        return Neg(args[0])
    name = next((f.name for f in FUNCTIONS.values() if f.ufunc is ufunc), None)
    if name is None:
        raise ArgumentError(f"numpy.{ufunc.__name__} has no coiter equivalent; intrinsics: "
                            f"{', '.join(FUNCTIONS)}")
    return Call(name, tuple(args))


def function(name: str) -> Function:
    """The intrinsic called ``name`` (KeyError when there is none)."""
    return FUNCTIONS[name]


def computation_dtype(e: Expr, dtypes: Mapping[str, np.dtype], default: np.dtype) -> np.dtype:
    """The type NumPy gives ``e``'s value: the promoted type of its operands and literals
    (literals weakly, NEP 50), a division of integers in float64, and each intrinsic's
    output type for its arguments' promoted type standing for the intrinsic."""
    return _promoted([e], dtypes, default)


def _promoted(exprs: list[Expr], dtypes: Mapping[str, np.dtype], default: np.dtype) -> np.dtype:
    """NumPy's promoted type of ``exprs`` together (``default`` when they hold no typed
    leaf); a division of integers is float64."""
    parts = [p for e in exprs for p in _type_parts(e, dtypes)]
    if not parts:
        return np.dtype(default)
    rt = np.dtype(np.result_type(*parts))
    if rt.kind in "biu" and any(isinstance(n, Div) for e in exprs for n in _outside_calls(e)):
        rt = np.dtype(np.float64)
    return rt


def _outside_calls(e: Expr):
    """``e`` and its subexpressions, not entering calls or logical reductions (typed leaves:
    a call by its output type, ``any``/``all`` as bool, as ``np.any``)."""
    yield e
    if isinstance(e, Call) or (isinstance(e, Reduction) and reducer(e.op).logical):
        return
    for c in children(e):
        yield from _outside_calls(c)


def _type_parts(e: Expr, dtypes: Mapping[str, np.dtype]) -> list[Any]:
    out: list[Any] = []
    for n in _outside_calls(e):
        if isinstance(n, Access):
            out.append(np.dtype(dtypes[n.tensor]))
        elif isinstance(n, Literal):
            out.append(n.value)
        elif isinstance(n, Coordinate):
            out.append(np.dtype(np.int64))
        elif isinstance(n, Call):
            out.append(call_dtypes(n, dtypes)[1])
        elif isinstance(n, Reduction) and reducer(n.op).logical:
            out.append(np.dtype(np.bool_))
    return out


def call_dtypes(e: Call, dtypes: Mapping[str, np.dtype]) -> tuple[np.dtype, np.dtype]:
    """The (input, output) types of the ufunc loop computing ``e``: NumPy's loop for the
    promoted type of its arguments (a float16 loop computes in float32: C has no float16
    math functions; its output stays float16, as NumPy's)."""
    promoted = _promoted(list(e.args), dtypes, np.dtype(np.float64))
    try:
        loop = function(e.fn).loop(promoted)
    except TypeError as exc:
        raise DTypeError(f"{e.fn} has no {promoted} version (NumPy: {exc})") from None
    inp, out = loop
    return (np.dtype(np.float32) if inp == np.float16 else inp), out


def zero_at(fn: str, args: tuple[Number, ...]) -> bool:
    """Whether ``fn`` of the literal ``args`` is zero (computed in float64, or complex128
    for complex arguments: an integer power's negative exponent gives no error here)."""
    kind = complex if any(isinstance(a, complex) for a in args) else float
    with np.errstate(all="ignore"):
        return bool(function(fn)(*(kind(a) for a in args)) == 0)
