"""Tensor index notation: the immutable expression tree every front end produces.

The string parser, the Python operator DSL and einsum all build these nodes; the
compiler's first stage (:mod:`coiter.concrete.concretize`) consumes them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Union

from ..errors import ArgumentError

Number = Union[bool, int, float, complex]


@dataclass(frozen=True)
class IndexVar:
    """A named index variable such as ``i``. In arithmetic it stands for its coordinate
    (``B[i, j] * (i * 4 + j)``, :class:`Coordinate`)."""

    name: str

    def __repr__(self) -> str:
        return self.name

    def __getitem__(self, key: Any) -> Window | IndexSet:
        """``i[lo:hi]`` or ``i[lo:hi:step]``: a window of the mode this subscript indexes
        (``B[i[0:5]]`` reads ``B``'s coordinates 0 to 4 as ``i`` = 0 to 4); ``i[[1, 3, 5]]``
        (a list or 1-D integer array): an index set (``B[i[[1, 3, 5]]]`` reads ``B``'s
        coordinates 1, 3 and 5 as ``i`` = 0, 1, 2)."""
        if isinstance(key, (list, tuple)) or (hasattr(key, "ndim") and hasattr(key, "dtype")):
            try:
                return index_set(self, key)
            except ValueError as exc:
                raise ArgumentError(str(exc)) from None
        if not isinstance(key, slice) or key.stop is None:
            raise ArgumentError(f"a window of {self.name} is a slice with an end, "
                                f"{self.name}[lo:hi] or {self.name}[lo:hi:step], or an index set, "
                                f"{self.name}[[c0, c1, ...]]; got {key!r}")
        try:
            return window(self, 0 if key.start is None else key.start, key.stop,
                          1 if key.step is None else key.step)
        except ValueError as exc:
            raise ArgumentError(str(exc)) from None

    def __add__(self, other: Any) -> Expr:
        return Coordinate(self) + other

    def __radd__(self, other: Any) -> Expr:
        return other + Coordinate(self)

    def __sub__(self, other: Any) -> Expr:
        return Coordinate(self) - other

    def __rsub__(self, other: Any) -> Expr:
        return other - Coordinate(self)

    def __mul__(self, other: Any) -> Expr:
        return Coordinate(self) * other

    def __rmul__(self, other: Any) -> Expr:
        return other * Coordinate(self)

    def __truediv__(self, other: Any) -> Expr:
        return Coordinate(self) / other

    def __rtruediv__(self, other: Any) -> Expr:
        return other / Coordinate(self)

    def __neg__(self) -> Expr:
        return -Coordinate(self)


class Expr:
    """Base of index-notation expressions; Python operators build larger trees."""

    def __add__(self, other: Any) -> Expr:
        return Add(self, as_expr(other))

    def __radd__(self, other: Any) -> Expr:
        return Add(as_expr(other), self)

    def __sub__(self, other: Any) -> Expr:
        return Sub(self, as_expr(other))

    def __rsub__(self, other: Any) -> Expr:
        return Sub(as_expr(other), self)

    def __mul__(self, other: Any) -> Expr:
        return Mul(self, as_expr(other))

    def __rmul__(self, other: Any) -> Expr:
        return Mul(as_expr(other), self)

    def __truediv__(self, other: Any) -> Expr:
        return Div(self, as_expr(other))

    def __rtruediv__(self, other: Any) -> Expr:
        return Div(as_expr(other), self)

    def __neg__(self) -> Expr:
        return Neg(self)

    # ordering comparisons build expressions; == and != keep comparing trees (np.equal builds)
    def __gt__(self, other: Any) -> Expr:
        return Call("gt", (self, as_expr(other)))

    def __ge__(self, other: Any) -> Expr:
        return Call("gte", (self, as_expr(other)))

    def __lt__(self, other: Any) -> Expr:
        return Call("lt", (self, as_expr(other)))

    def __le__(self, other: Any) -> Expr:
        return Call("lte", (self, as_expr(other)))

    def __abs__(self) -> Expr:
        return Call("abs", (self,))

    def __pow__(self, other: Any) -> Expr:
        return Call("pow", (self, as_expr(other)))

    def __rpow__(self, other: Any) -> Expr:
        return Call("pow", (as_expr(other), self))

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """NumPy's functions on expressions build them: ``np.sqrt(B[i, j])``,
        ``np.maximum(b[i], c[i])``, ``np.add(...)``."""
        from .functions import ufunc_expr

        if method != "__call__" or kwargs:
            return NotImplemented
        return ufunc_expr(ufunc, [as_expr(x) for x in inputs])

    def astype(self, dtype: Any) -> Expr:
        """The cast ``float32(...)`` of the text form: the value converted as NumPy's
        ``astype`` converts (``B[i, j].astype(np.float32)``, ``(b[i] > 0).astype(int)``)."""
        from .functions import cast_name

        return Call(cast_name(dtype), (self,))

    def __pos__(self) -> Expr:
        return self


@dataclass(frozen=True)
class Affine:
    """A compound subscript ``sum(coef * var) + const`` such as ``i+k``, ``2*i+k`` (a
    stride) or ``i+2*k-1`` (a dilation and a shift): the mode is read at that coordinate.

    Build one with :func:`affine`, which merges repeated variables and keeps a lone
    ``var`` a plain :class:`IndexVar`."""

    terms: tuple[tuple[int, IndexVar], ...]
    const: int = 0

    @property
    def vars(self) -> tuple[IndexVar, ...]:
        return tuple(v for _, v in self.terms)

    def __str__(self) -> str:
        out = ""
        for c, v in self.terms:
            sign = "-" if c < 0 else ("+" if out else "")
            out += sign + (v.name if abs(c) == 1 else f"{abs(c)}*{v.name}")
        if self.const:
            out += f"{self.const:+d}"
        return out


@dataclass(frozen=True)
class Window:
    """A window of a mode (TACO's ``A(i(lo,hi,step))``, the DSL's ``A[i[lo:hi:step]]``): the
    mode is read at ``lo + step * var`` for ``var`` in ``[0, extent)``, ``extent`` the number
    of coordinates ``range(lo, hi, step)`` holds. No data is copied: a sparse operand's
    stored coordinates in the window are walked in place. Build one with :func:`window`."""

    var: IndexVar
    lo: int
    hi: int
    step: int = 1

    @property
    def extent(self) -> int:
        return len(range(self.lo, self.hi, self.step))

    @property
    def vars(self) -> tuple[IndexVar, ...]:
        return (self.var,)

    def __str__(self) -> str:
        step = f",{self.step}" if self.step != 1 else ""
        return f"{self.var.name}({self.lo},{self.hi}{step})"


def window(var: IndexVar, lo: int, hi: int, step: int = 1) -> Window:
    """The window ``range(lo, hi, step)`` of a mode read through ``var``; ValueError saying
    why when it holds no coordinate or starts below 0."""
    if any(isinstance(x, bool) or not isinstance(x, int) for x in (lo, hi, step)):
        raise ValueError(f"the window {var.name}({lo!r},{hi!r},{step!r}) needs integer bounds")
    if lo < 0 or hi <= lo or step < 1:
        raise ValueError(f"the window {var.name}({lo},{hi},{step}) needs 0 <= lo < hi and a "
                         "step of at least 1")
    return Window(var, lo, hi, step)


@dataclass(frozen=True)
class IndexSet:
    """An index set of a mode (TACO's ``A(i({1,3,5}))``, the DSL's ``A[i[[1, 3, 5]]]``): the
    mode is read at ``coords[var]`` for ``var`` in ``[0, len(coords))``, NumPy's
    ``a[[1, 3, 5]]``. Coordinates may come in any order and repeat. Build one with
    :func:`index_set`; the compiler gathers the selected entries when the kernel is called
    (:mod:`coiter.notation.index_sets`)."""

    var: IndexVar
    coords: tuple[int, ...]

    @property
    def extent(self) -> int:
        return len(self.coords)

    @property
    def vars(self) -> tuple[IndexVar, ...]:
        return (self.var,)

    def __str__(self) -> str:
        return f"{self.var.name}({{{','.join(map(str, self.coords))}}})"


def index_set(var: IndexVar, coords: Any) -> IndexSet:
    """The index set ``coords`` (a sequence of non-negative ints) of a mode read through
    ``var``; ValueError saying why when it is empty or holds something else."""
    items = list(coords.tolist() if hasattr(coords, "tolist") else coords)
    if not items:
        raise ValueError(f"the index set of {var.name} is empty: it needs at least one coordinate")
    for c in items:
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise ValueError(f"the index set of {var.name} holds {c!r}: coordinates are "
                             "non-negative integers")
    return IndexSet(var, tuple(items))


Subscript = Union[IndexVar, Affine, Window, IndexSet]


def affine(terms: Any, const: int = 0) -> Subscript:
    """The subscript ``sum(c * v for c, v in terms) + const`` in normal form: repeated
    variables merged, zero coefficients dropped, a bare ``1 * v`` returned as ``v``.
    ValueError when no variable is left (a constant subscript)."""
    coefs: dict[IndexVar, int] = {}
    for c, v in terms:
        coefs[v] = coefs.get(v, 0) + int(c)
    kept = tuple((c, v) for v, c in coefs.items() if c != 0)
    if not kept:
        raise ValueError("a subscript needs an index variable")
    if kept == ((1, kept[0][1]),) and const == 0:
        return kept[0][1]
    return Affine(kept, int(const))


def subscript_vars(s: Subscript) -> tuple[IndexVar, ...]:
    """The index variables of one subscript."""
    return s.vars if isinstance(s, (Affine, Window, IndexSet)) else (s,)


@dataclass(frozen=True, eq=True)
class Access(Expr):
    """``tensor(indices...)``; ``source`` optionally points at the DSL's Tensor object.

    Front ends may put :class:`Affine` and :class:`Window` subscripts in ``indices``; the
    compiler replaces them by fresh variables and index equations (:mod:`coiter.notation.affine`) before
    concretizing, so every later stage sees plain variables only."""

    tensor: str
    indices: tuple[Subscript, ...]
    source: Any = field(default=None, compare=False, hash=False, repr=False)

    def __str__(self) -> str:
        return f"{self.tensor}({','.join(str(v) for v in self.indices)})"

    @property
    def index_vars(self) -> tuple[IndexVar, ...]:
        """The variables of all subscripts, in order, without repeats."""
        return tuple(dict.fromkeys(v for s in self.indices for v in subscript_vars(s)))


@dataclass(frozen=True)
class Coordinate(Expr):
    """The value of index variable ``var`` at the current coordinate (an int64, as
    ``numpy.arange`` gives): ``a(i,j) = b(i,j) * (i*4 + j)``."""

    var: IndexVar

    def __str__(self) -> str:
        return self.var.name


@dataclass(frozen=True)
class Literal(Expr):
    """A number; its value is always a plain bool, int, float or complex (a subclass's
    ``__repr__`` or ``__str__`` never reaches generated code)."""

    value: Number

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", plain_number(self.value))

    def __str__(self) -> str:
        return repr(self.value)


def plain_number(value: Any) -> Number:
    """``value`` as the built-in number type it derives from."""
    # the base types' own conversions: a subclass cannot override them
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, complex):
        return complex.__complex__(value)
    raise TypeError(f"cannot use {type(value).__name__} as a number in a tensor expression")


@dataclass(frozen=True)
class Neg(Expr):
    operand: Expr

    def __str__(self) -> str:
        # -(1) stays a negation: the parser reads -1 as one literal
        inner = self.operand
        return f"-({inner})" if isinstance(inner, Literal) else f"-{_paren(inner)}"


@dataclass(frozen=True)
class BinaryExpr(Expr):
    a: Expr
    b: Expr
    symbol = "?"

    def __str__(self) -> str:
        return f"{_paren(self.a)} {self.symbol} {_paren(self.b)}"


@dataclass(frozen=True)
class Add(BinaryExpr):
    symbol = "+"


@dataclass(frozen=True)
class Sub(BinaryExpr):
    symbol = "-"


@dataclass(frozen=True)
class Mul(BinaryExpr):
    symbol = "*"


@dataclass(frozen=True)
class Div(BinaryExpr):
    symbol = "/"


@dataclass(frozen=True)
class Call(Expr):
    """An intrinsic function applied elementwise, such as ``sqrt(B(i,j))``
    (:mod:`coiter.notation.functions`)."""

    fn: str
    args: tuple[Expr, ...]

    def __str__(self) -> str:
        # names that are no identifiers print as calls too: and(a, b) parses back
        return f"{self.fn}({', '.join(str(a) for a in self.args)})"


@dataclass(frozen=True)
class Reduction(Expr):
    """``body`` reduced over ``var`` by ``op`` (:data:`coiter.notation.reducers.REDUCERS`:
    ``sum``, ``prod``, ``min``, ``max``, ``any``, ``all``). Sums are implicit in the
    notation (:func:`coiter.notation.reductions.insert_reductions` places them); the others
    are written out: ``y(i) = min(j, A(i,j) + x(j))``."""

    var: IndexVar
    body: Expr
    op: str = "sum"

    def __str__(self) -> str:
        return f"{self.op}({self.var.name}, {self.body})"


@dataclass(frozen=True)
class Assignment:
    """``lhs = rhs`` (or ``lhs += rhs`` when ``accumulate``)."""

    lhs: Access
    rhs: Expr
    accumulate: bool = False

    def __str__(self) -> str:
        op = "+=" if self.accumulate else "="
        return f"{self.lhs} {op} {self.rhs}"


def _paren(e: Expr) -> str:
    return f"({e})" if isinstance(e, (BinaryExpr,)) else str(e)


def as_expr(value: Any) -> Expr:
    """Wrap Python numbers as literals; pass expressions through."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, IndexVar):
        return Coordinate(value)
    if isinstance(value, (bool, int, float, complex)):
        return Literal(value)
    try:  # numpy scalars
        import numpy as np

        if isinstance(value, np.generic) and value.ndim == 0:
            return Literal(value.item())
    except ImportError:  # pragma: no cover - numpy is a hard dependency
        pass
    raise TypeError(f"cannot use {type(value).__name__} in a tensor expression")


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``e``."""
    if isinstance(e, BinaryExpr):
        return (e.a, e.b)
    if isinstance(e, Neg):
        return (e.operand,)
    if isinstance(e, Reduction):
        return (e.body,)
    if isinstance(e, Call):
        return e.args
    return ()


def with_children(e: Expr, kids: list[Expr] | tuple[Expr, ...]) -> Expr:
    """A copy of ``e`` with its direct sub-expressions (:func:`children`) replaced by ``kids``."""
    if isinstance(e, BinaryExpr):
        return type(e)(kids[0], kids[1])
    if isinstance(e, Neg):
        return Neg(kids[0])
    if isinstance(e, Reduction):
        return Reduction(e.var, kids[0], e.op)
    if isinstance(e, Call):
        return Call(e.fn, tuple(kids))
    return e


def walk(e: Expr) -> Iterator[Expr]:
    """Pre-order traversal of ``e``."""
    yield e
    for c in children(e):
        yield from walk(c)


def accesses(e: Expr) -> list[Access]:
    """Every tensor access in ``e``, left to right (repeats kept)."""
    return [n for n in walk(e) if isinstance(n, Access)]


def index_vars_of(e: Expr) -> list[IndexVar]:
    """Index variables used in ``e`` in order of first appearance."""
    seen: dict[IndexVar, None] = {}
    for n in walk(e):
        if isinstance(n, Access):
            for v in n.index_vars:
                seen.setdefault(v, None)
    for n in walk(e):
        if isinstance(n, (Reduction, Coordinate)):
            seen.setdefault(n.var, None)
    return list(seen)


def factors(e: Expr) -> list[Expr]:
    """The factors of a product (``e`` itself when it is no product), left to right."""
    return factors(e.a) + factors(e.b) if isinstance(e, Mul) else [e]


def map_accesses(e: Expr, f: Callable[[Access], Expr]) -> Expr:
    """``e`` with every access ``a`` replaced by ``f(a)``."""
    if isinstance(e, Access):
        return f(e)
    return with_children(e, [map_accesses(c, f) for c in children(e)])


def rename_index(e: Expr, old: IndexVar, new: IndexVar) -> Expr:
    """``e`` with index variable ``old`` replaced by ``new`` in every access."""
    return map_accesses(e, lambda a: Access(
        a.tensor, tuple(new if u == old else u for u in a.indices), a.source))
