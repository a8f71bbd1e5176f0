"""C for intrinsic functions (:mod:`coiter.notation.functions`) in a computation type.

C99's ``<math.h>`` and ``<complex.h>`` compute most of them (``sqrtf`` in float); the rest
are inline expressions with NumPy's meaning: comparisons and logical operators give bools, ``max``/``min`` propagate NaN as
``np.maximum``/``np.minimum`` do, ``abs``/``max``/``min``/``square``/``pow`` of integers stay
integers (``pow`` by repeated squaring, wrapping on overflow; a negative exponent gives the
truncated quotient, 0 unless the base is 1 or -1, where NumPy raises), ``pow`` of complex
values by NumPy's rules (an integer exponent below 100 by multiplications: ``0 ** 0`` is 1,
``(1+1j) ** 2`` exactly ``2j``, where C's ``cpow`` gives NaN and ``1.2e-16+2j``), and ``ceil``,
``floor`` and ``trunc`` of integers are the integers themselves, as ``conj`` of real values
is. Casts (``int32(x)``...) convert as ``astype`` does.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError
from ..ir.nodes import Bin, Call, Cast, IRExpr, Un
from ..notation.functions import function
from .types import VALUE_TYPES, c_value_type

INTEGER_POW = """/* base ** exponent for integers (NumPy's power; a negative exponent truncates) */
static inline int64_t coiter_ipow(int64_t base, int64_t exponent) {
  if (exponent < 0) return base == 1 ? 1 : (base == -1 ? (exponent % 2 ? -1 : 1) : 0);
  uint64_t result = 1, b = (uint64_t)base;  /* unsigned: wraps like NumPy's int64 */
  for (; exponent; exponent >>= 1, b *= b) if (exponent & 1) result *= b;
  return (int64_t)result;
}
"""


# NumPy's complex power: a zero exponent gives 1 and a zero base 0 (for exponents of
# positive real part) or NaN before anything else; an integer exponent of magnitude below
# 100 multiplies (by squaring; a negative one divides 1 by the power); others go to cpow
COMPLEX_POW = """/* base ** exponent for complex values (NumPy's power) */
#define COITER_CPOW(name, T, real_t, creal_, cimag_, cpow_) \\
static inline T name(T a, T b) { \\
  real_t br = creal_(b), bi = cimag_(b); \\
  if (br == 0 && bi == 0) return 1; \\
  if (a == 0) return br > 0 ? (T)0 : (T)NAN + (T)NAN * I; \\
  if (bi == 0 && br > -100 && br < 100 && br == (real_t)(int64_t)br) { \\
    int64_t n = (int64_t)br, m = n < 0 ? -n : n; \\
    T r = 1, p = a; \\
    for (;;) { \\
      if (m & 1) r *= p; \\
      m >>= 1; \\
      if (!m) break; \\
      p *= p; \\
    } \\
    return n < 0 ? 1 / r : r; \\
  } \\
  return cpow_(a, b); \\
}
COITER_CPOW(coiter_cpow, double complex, double, creal, cimag, cpow)
COITER_CPOW(coiter_cpowf, float complex, float, crealf, cimagf, cpowf)
"""


COMPARISONS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<=", "eq": "==", "neq": "!="}


def computable(dtype: np.dtype) -> np.dtype:
    """The value type kernels compute ``dtype`` in: itself when C kernels have it, else
    the nearest wider one."""
    dtype = np.dtype(dtype)
    if dtype in VALUE_TYPES:
        return dtype
    return np.dtype({"i": np.int64, "u": np.uint64, "c": np.complex128}.get(dtype.kind, np.float64))


def _define(ctype: str, name: str, params: str, body: str, support: dict[str, None]) -> str:
    """``name``, a C function of ``params`` returning ``body`` of type ``ctype``, defined
    once in ``support``."""
    support.setdefault(f"static inline {ctype} {name}({params}) {{ return {body}; }}\n", None)
    return name


def _inline(name: str, ctype: str, params: tuple[str, ...], body: str, args: list[IRExpr],
            support: dict[str, None]) -> IRExpr:
    """A call of the C function ``name`` of ``params`` (each of type ``ctype``, as its
    result) returning ``body``. A function evaluates each argument once where an inline
    expression copies it per use: ``max`` of ``max`` of ``max``... grew as 4**depth
    (megabytes of C for five nested calls)."""
    signature = ", ".join(f"{ctype} {p}" for p in params)
    return Call(_define(ctype, name, signature, body, support), tuple(args))


def _identifier(ctype: str) -> str:
    """A C type as part of a function's name (``double _Complex``: ``double_Complex``)."""
    return ctype.replace(" ", "")


def _cast(x: IRExpr, source: np.dtype, target: np.dtype, support: dict[str, None]) -> IRExpr:
    """``x`` (of type ``source``) converted to ``target`` as NumPy's ``astype`` does on x86:
    complex to real keeps the real part; a float beyond a signed type's range, or NaN,
    becomes the type's minimum (C leaves that undefined)."""
    ctype = c_value_type(target)
    if source.kind == "c" and target.kind != "c":
        x = Call("creal", (x,)) if target.kind != "b" else x
        source = np.dtype(np.float64)
    if source.kind in "fc" and target.kind in "iu":
        return Call(_integer_conversion(c_value_type(source), target, support), (x,))
    return Cast(ctype, x)


def _integer_conversion(source: str, target: np.dtype, support: dict[str, None]) -> str:
    """The C function (defined in ``support``) converting a float of C type ``source`` to
    the integer type ``target`` the x86 way, as NumPy's conversion does: NaN and values out
    of range give its minimum; uint64 from 2**63 on goes through int64 of x - 2**63 with the
    top bit set back (so NaN gives 2**63, -1.5 gives 2**64 - 1, and 2**64 or more gives 0)."""
    ctype = c_value_type(target)
    name = f"coiter_{target.name}_of_{_identifier(source)}"
    if target == np.uint64:
        int64 = _integer_conversion("double", np.dtype(np.int64), support)
        top = 2.0 ** 63
        body = f"x >= {top!r} ? ((uint64_t){int64}(x - {top!r}) ^ (UINT64_C(1) << 63)) : (uint64_t){int64}(x)"
    else:
        low = float(np.iinfo(target).min)
        body = f"x >= {low!r} && x < {-low!r} ? ({ctype})x : INT{8 * target.itemsize}_MIN"
    return _define(ctype, name, f"{source} x", body, support)


def intrinsic_ir(fn: str, args: list[IRExpr], dtype: np.dtype, support: dict[str, None]) -> IRExpr:
    """``fn`` of ``args`` (values of type ``dtype``) as an IR expression of type ``dtype``
    (``abs`` of complex: its real type); C helpers it needs go into ``support``."""
    f, kind = function(fn), np.dtype(dtype).kind
    if f.cast:
        return _cast(args[0], np.dtype(dtype), computable(np.dtype(f.cast)), support)
    if fn in COMPARISONS:
        if kind == "c" and fn not in ("eq", "neq"):
            raise DTypeError(f"{fn} of complex values is not supported (NumPy orders them "
                             "lexicographically)")
        return Bin(COMPARISONS[fn], args[0], args[1])
    if fn in ("and", "or"):  # C's && and || take any nonzero (NaN too) as true, as NumPy does
        return Bin("&&" if fn == "and" else "||", args[0], args[1])
    if fn == "not":
        return Un("!", args[0])
    ctype = c_value_type(dtype)
    if fn in ("max", "min"):
        if kind == "c":
            raise DTypeError(f"{fn} of complex values is not supported")
        pick = f"a {'>' if fn == 'max' else '<'} b ? a : b"
        if kind == "f":  # NaN wins, from either side
            pick = f"a != a ? a : (b != b ? b : ({pick}))"
        return _inline(f"coiter_{fn}_{_identifier(ctype)}", ctype, ("a", "b"), pick, args, support)
    if fn == "square":
        return _inline(f"coiter_square_{_identifier(ctype)}", ctype, ("x",), "x * x", args, support)
    if fn == "conj" and kind != "c":
        return args[0]
    if kind in "biu":
        if fn in ("ceil", "floor", "trunc") or (fn == "abs" and kind == "b"):
            return args[0]
        if fn == "abs":
            return _inline(f"coiter_abs_{_identifier(ctype)}", ctype, ("x",), "x < 0 ? -x : x", args, support)
        if fn == "pow":
            support.setdefault(INTEGER_POW, None)
            return Call("coiter_ipow", tuple(args))
        raise AssertionError(f"NumPy has no integer loop of {fn}")
    single = np.dtype(dtype) in (np.float32, np.complex64)  # C99's f-suffixed functions
    if kind == "c" and fn == "pow":
        support.setdefault(COMPLEX_POW, None)
        return Call("coiter_cpowf" if single else "coiter_cpow", tuple(args))
    if kind == "c":
        if f.complex_c is None:
            raise DTypeError(f"{fn} of complex values is not supported")
        return Call(f.complex_c + ("f" if single else ""), tuple(args))
    return Call(f.c_name + ("f" if single else ""), tuple(args))
