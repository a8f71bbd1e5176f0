"""Tensor expressions built with Python operators and NumPy's functions, computed as one
kernel when their value is needed.

``A @ x``, ``A + B``, ``A - B``, ``A * B`` (element-wise), scalar ``*`` and ``/``, ``-A``,
``abs(A)``, ``A ** p``, the comparisons ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``A.T``,
``A.sum/max/min/mean(axis=)``, ``A.diagonal(k)``, SciPy's ``multiply``, ``power``, ``conj``
and ``trace``, and NumPy's
element-wise functions of one or two operands (``np.sin(A)``, ``np.maximum(A, 0)``) on
coiter Tensors, NumPy arrays and SciPy matrices build a :class:`Lazy` expression; nothing is
computed until :meth:`Lazy.evaluate`, ``to_numpy()``, ``to_scipy()`` or ``np.asarray``.
A chain is one index-notation assignment, so it compiles to one fused kernel:
``(A + B) @ x`` is ``out(i) = sum(j, (A(i,j) + B(i,j)) * x(j))``, with no intermediate
matrix. A wide sum of sparse operands into a sparse result is the exception: a chain of
three-way sums (:mod:`coiter.planning.sums` says when), which compiles in a fraction of the
time and adds in the same order.

The result's format follows SciPy's rule for the same operation, so that sparse stays
sparse where SciPy's does and nothing densifies unasked:

- ``a * b`` (element-wise) is sparse when either side is (a sparse pattern bounds it);
- ``a + b``, ``a - b`` are sparse when both sides are;
- ``a @ b`` is sparse when both sides are (sparse times dense is dense, as in SciPy);
- a scalar factor or divisor, ``-a``, ``.T`` keep ``a``'s sparsity;
- an element-wise function (``**`` and the comparisons too) keeps it when every tensor
  operand is sparse and the function is zero where they all are: ``sin``, ``abs``,
  ``A ** 2``, ``np.maximum(A, 0)``, ``A > 0.5``, ``A != 0`` are sparse; ``cos``, ``A ** 0``,
  ``A < 0.5``, ``A == B``, ``np.maximum(A, M)`` with a dense ``M`` are dense;
- ``.sum/max/min/mean(axis=...)`` and ``.diagonal()`` are dense (``max`` and ``min`` see the
  implicit zeros, as NumPy's on the dense array).

``==`` and ``!=`` compare element-wise, as NumPy's do (``if A == B:`` is NumPy's ambiguity
error; ``np.array_equal`` answers whether two tensors hold the same values). Tensors and
expressions still hash by identity, so they can key dictionaries and sets (not weak sets:
their weak references compare the tensors with ``==``).

A sparse result holds an entry wherever the kernel visited one, false comparisons included
(:meth:`coiter.Tensor.prune` drops them).

A sparse result is a compressed vector, CSR or CSF by order (``evaluate(format=...)``
chooses another); a dense one is a dense array.
"""
from __future__ import annotations

import functools
import inspect
import itertools
import math
from dataclasses import replace
from typing import Any, Callable, NamedTuple

import numpy as np
import scipy.sparse as sp

from . import api
from .array_methods import ArrayMethods
from .errors import ArgumentError, ShapeError
from .formats import Format, as_format, csf, csr, dense
from .formats.levels.compressed import Compressed
from .notation.ast import (
    Access, Add, Assignment, Call, Div, Expr, IndexVar, Mul, Neg, Reduction, Sub, as_expr,
    children, map_accesses, rename_index, walk, with_children,
)
from .notation.functions import FUNCTIONS, computation_dtype, ufunc_expr, zero_at
from .tensor import Tensor, check_dtype, densify_check

_leaves = itertools.count()  # operand names while an expression is built (L0, L1, ...)
_vars = itertools.count()  # index variable names while an expression is built


def _var() -> IndexVar:
    return IndexVar(f"v{next(_vars)}")


Parts = tuple[Expr, tuple[IndexVar, ...], dict[str, Tensor]]
# an operand as given (Tensor, array or SciPy matrix) and the order of its axes an
# expression reads it in (a leaf: 0, 1, ...; its transpose: ..., 1, 0)
Source = tuple[Any, tuple[int, ...]]
# what a deferred expression computes of its operands (the Sources it reads, in order):
# _LEAF for one operand read whole, else a tuple of the operation and what it applies to
Tag = Any
_LEAF = "L"
# how deep deferred expressions nest: an expression over a deeper one is built now (its tag
# would nest as deep, and hashing a tuple tens of thousands deep overflows C's stack; the
# build recurses through every deferred level at once)
_DEFER_DEPTH = 32


class Deferral(NamedTuple):
    """What a deferred expression computes of an operand or subexpression (its tag), of
    which operands as given (``objs``, in the order its expression reads them, and the axis
    order it reads each in, ``orders``), and how deeply deferred expressions nest in it (0
    for an operand)."""

    tag: Tag
    objs: tuple[Any, ...]
    orders: tuple[tuple[int, ...], ...]
    depth: int


class Lazy(ArrayMethods):
    """A tensor expression over coiter Tensors, not computed yet (see the module's doc).

    An operator expression over operands as given or their transposes (``A @ x``,
    ``A.T @ x``, ``(A + B) @ x``, ``2 * A``, ``-A``, ``abs(A)``, ``A > 0.5``, ``A.sum(0)``,
    chains of these) defers building its index-notation expression until an enclosing
    expression needs it: computed alone, it calls the kernel the last expression of the
    same operations, axis orders and scalars used through its C call plan (about the
    kernel call's cost), not the whole path."""

    __slots__ = ("_parts", "_build", "_objs", "_orders", "_tag", "_depth", "_source", "_root",
                 "shape", "_sparse")
    __array_priority__ = 20  # NumPy defers ``ndarray + Lazy`` to this class

    def __init__(self, expr: Expr, free: tuple[IndexVar, ...], shape: tuple[int, ...],
                 operands: dict[str, Tensor], sparse: bool) -> None:
        self._parts: Parts | None = (expr, free, operands)
        self._build: Callable[[], Parts] | None = None
        # a deferred expression's operands, the axis orders it reads them in...
        self._objs: tuple[Any, ...] = ()
        self._orders: tuple[tuple[int, ...], ...] = ()
        self._tag: Tag | None = None  # ...and what it computes of them, for its kernel's key
        self._depth = 0  # deferred expressions nested in it, itself included
        self._source: Source | None = None  # what a leaf or its transpose reads
        self._root: Lazy | None = None  # the leaf a leaf's transpose transposes
        self.shape = shape
        self._sparse = sparse

    @classmethod
    def _deferred(cls, build: Callable[[], Lazy], parts: list[Deferral], tag: Tag,
                  shape: tuple[int, ...], sparse: bool) -> Lazy:
        """The expression ``build()`` returns, built when first needed: ``tag`` of the
        operands and subexpressions ``parts`` (in the order the expression reads them), of
        ``shape``."""
        lazy = cls.__new__(cls)
        lazy._parts, lazy._tag, lazy._source, lazy._root = None, tag, None, None
        # (a loop, not generators: this runs on every operator, whose cost users see)
        first = parts[0]
        objs, orders, depth = first.objs, first.orders, first.depth
        for part in parts[1:]:
            objs, orders, depth = objs + part.objs, orders + part.orders, max(depth, part.depth)
        lazy._objs, lazy._orders, lazy._depth = objs, orders, depth + 1
        lazy._build = lambda: build()._built()
        lazy.shape, lazy._sparse = shape, sparse
        return lazy

    def _unary(self, build: Callable[[], Lazy], head: tuple[Any, ...], shape: tuple[int, ...],
               sparse: bool) -> Lazy:
        """``build()``, an operation ``head`` of this expression alone: deferred where this
        expression can be, else built now."""
        deferral = _deferral(self)
        if deferral is None:
            return build()
        return Lazy._deferred(build, [deferral], (*head, deferral.tag), shape, sparse)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its built expression (a deferred one's builder is a closure)."""
        expr, free, operands = self._built()
        return Lazy, (expr, free, self.shape, operands, self._sparse)

    def _built(self) -> Parts:
        if self._parts is None:
            assert self._build is not None
            self._parts, self._build = self._build(), None
        return self._parts

    @property
    def _expr(self) -> Expr:
        return self._built()[0]

    @property
    def _free(self) -> tuple[IndexVar, ...]:
        return self._built()[1]

    @property
    def _operands(self) -> dict[str, Tensor]:
        return self._built()[2]

    @staticmethod
    def leaf(obj: Any) -> Lazy:
        """``obj`` (a Tensor, array, SciPy matrix or Lazy) as an expression; the expression
        of an operand as given (:func:`_plain`) is built when first needed."""
        if isinstance(obj, Lazy):
            return obj
        if _plain(obj):
            return Lazy._read(obj, _identity(len(obj.shape)), lambda: Lazy._leaf_now(obj)._built(),
                              tuple(obj.shape), _sparse_operand(obj), None)
        return Lazy._leaf_now(obj)

    @staticmethod
    def _leaf_now(obj: Any) -> Lazy:
        """``obj`` as an expression, built now."""
        t = obj if isinstance(obj, Tensor) else _as_tensor(obj)
        name = f"L{next(_leaves)}"
        free = tuple(_var() for _ in t.shape)
        lazy = Lazy(Access(name, free), free, t.shape, {name: t}, not t.format.is_dense)
        # the array or matrix itself where the call plan takes it as it is (cheaper to bind)
        lazy._source = (obj if _plain(obj) else t, _identity(t.order))
        return lazy

    @classmethod
    def _read(cls, obj: Any, order: tuple[int, ...], build: Callable[[], Parts],
              shape: tuple[int, ...], sparse: bool, root: Lazy | None) -> Lazy:
        """Operand ``obj`` as given, read in axis ``order``, of ``shape`` so read: a leaf or
        (``root`` the leaf) its transpose, whose expression ``build()`` returns when first
        needed."""
        lazy = cls.__new__(cls)
        lazy._parts, lazy._build, lazy._source, lazy._root = None, build, (obj, order), root
        lazy._objs, lazy._orders, lazy._tag, lazy._depth = (), (), None, 0
        lazy.shape, lazy._sparse = shape, sparse
        return lazy

    # ------------------------------------------------------------------ properties
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        """The dtype NumPy would give the same operation."""
        dtypes = {n: t.dtype for n, t in self._operands.items()}
        return computation_dtype(self._expr, dtypes, np.dtype(np.float64))

    @property
    def T(self) -> Lazy:
        return self.transpose()

    def transpose(self, axes: Any = None) -> Lazy:
        order = tuple(reversed(range(self.ndim))) if axes is None else tuple(axes)
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"axes {axes} do not permute the {self.ndim} axes of shape {self.shape}")
        shape = tuple(self.shape[a] for a in order)
        if self._source is None:
            return self._unary(lambda: self._transposed(order), ("T", order), shape, self._sparse)
        # a leaf's transpose reads its operand whole too; it is built from the leaf (so
        # that L @ L.T reads one operand), not from the transpose before it (builds nested
        # as deep as a chain of transposes overflow Python's stack)
        obj, axes = self._source
        read = tuple(axes[a] for a in order)
        root = self if self._root is None else self._root
        return Lazy._read(obj, read, lambda: root._transposed(read)._built(), shape, self._sparse, root)

    def _transposed(self, order: tuple[int, ...]) -> Lazy:
        """This expression with its axes in ``order``, built now."""
        return Lazy(self._expr, tuple(self._free[a] for a in order), tuple(self.shape[a] for a in order),
                    self._operands, self._sparse)

    def sum(self, axis: int | tuple[int, ...] | None = None) -> Lazy:
        """The sum over ``axis`` (every axis when None): dense, as SciPy's."""
        return self._reduced("sum", axis)

    def max(self, axis: int | tuple[int, ...] | None = None) -> Lazy:
        """The largest value over ``axis`` (every axis when None), implicit zeros included."""
        return self._reduced("max", axis)

    def min(self, axis: int | tuple[int, ...] | None = None) -> Lazy:
        """The smallest value over ``axis`` (every axis when None), implicit zeros included."""
        return self._reduced("min", axis)

    def mean(self, axis: int | tuple[int, ...] | None = None) -> Lazy:
        """The mean over ``axis`` (every axis when None), implicit zeros included."""
        return self._reduced("sum", axis) / math.prod(self.shape[a] for a in self._axes(axis))

    def diagonal(self, offset: int = 0) -> Lazy:
        """The entries ``(i, i + offset)`` of a matrix, as a dense vector (NumPy's and SciPy's
        ``diagonal``). On the main diagonal of a square expression it is part of the
        expression's kernel; otherwise the expression is computed and the diagonal's
        square block sliced from it first."""
        if self.ndim != 2:
            raise ShapeError(f"diagonal of shape {self.shape}: only matrices have one")
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise ArgumentError(f"diagonal offset {offset!r} is not an integer")
        m, n = self.shape
        if offset == 0 and m == n:
            row, col = self._free
            return Lazy(rename_index(self._expr, col, row), (row,), (m,), self._operands, False)
        first_row, first_col = max(0, -offset), max(0, offset)
        length = max(0, min(m - first_row, n - first_col))
        block = self.evaluate()[first_row:first_row + length, first_col:first_col + length]
        return Lazy.leaf(block).diagonal()

    @property
    def real(self) -> Tensor:
        """The real parts of the computed values (see :attr:`coiter.Tensor.real`)."""
        return self.evaluate().real

    @property
    def imag(self) -> Tensor:
        """The imaginary parts of the computed values (see :attr:`coiter.Tensor.imag`)."""
        return self.evaluate().imag

    def nonzero(self) -> tuple[np.ndarray, ...]:
        """The coordinates of the entries that are not zero (see :meth:`coiter.Tensor.nonzero`)."""
        return self.evaluate().nonzero()

    def _axes(self, axis: int | tuple[int, ...] | None) -> list[int]:
        """The axes ``axis`` names (all when None), non-negative and sorted."""
        axes = range(self.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
        return sorted({_axis(a, self.ndim) for a in axes})

    def _reduced(self, op: str, axis: int | tuple[int, ...] | None) -> Lazy:
        """This expression reduced by ``op`` over ``axis`` (every axis when None): dense."""
        summed = self._axes(axis)
        empty = next((a for a in summed if self.shape[a] == 0), None)
        if op != "sum" and empty is not None:
            # NumPy's ValueError too: min and max have no value over nothing
            raise ShapeError(f"{op} over axis {empty} of length 0 (shape {self.shape}) has no "
                             "value")
        shape = tuple(n for a, n in enumerate(self.shape) if a not in summed)
        return self._unary(lambda: self._reduced_now(op, summed), ("reduce", op, tuple(summed)), shape, False)

    def _reduced_now(self, op: str, summed: list[int]) -> Lazy:
        """This expression reduced by ``op`` over the axes ``summed``, built now."""
        expr = self._expr
        widened = _sum_type(self.dtype) if op == "sum" else None
        if widened is not None:
            expr = Call(widened, (expr,))
        for a in summed:
            expr = Reduction(self._free[a], expr, op)
        keep = [a for a in range(self.ndim) if a not in summed]
        return Lazy(expr, tuple(self._free[a] for a in keep), tuple(self.shape[a] for a in keep),
                    self._operands, False)

    # ------------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Lazy:
        return _elementwise(self, other, "+")

    def __radd__(self, other: Any) -> Lazy:
        return _elementwise(other, self, "+")

    def __sub__(self, other: Any) -> Lazy:
        return _elementwise(self, other, "-")

    def __rsub__(self, other: Any) -> Lazy:
        return _elementwise(other, self, "-")

    def __mul__(self, other: Any) -> Lazy:
        return _elementwise(self, other, "*")

    def __rmul__(self, other: Any) -> Lazy:
        return _elementwise(other, self, "*")

    def __truediv__(self, other: Any) -> Lazy:
        return _elementwise(self, other, "/")

    def __neg__(self) -> Lazy:
        return self._unary(self._negated, ("neg",), self.shape, self._sparse)

    def _negated(self) -> Lazy:
        return Lazy(Neg(self._expr), self._free, self.shape, self._operands, self._sparse)

    def __pos__(self) -> Lazy:
        return self

    def __abs__(self) -> Lazy:
        return _apply(np.absolute, (self,))

    def __pow__(self, other: Any) -> Lazy:
        return _apply(np.power, (self, other))

    def __rpow__(self, other: Any) -> Lazy:
        return _apply(np.power, (other, self))

    def __lt__(self, other: Any) -> Lazy:
        return _apply(np.less, (self, other))

    def __le__(self, other: Any) -> Lazy:
        return _apply(np.less_equal, (self, other))

    def __gt__(self, other: Any) -> Lazy:
        return _apply(np.greater, (self, other))

    def __ge__(self, other: Any) -> Lazy:
        return _apply(np.greater_equal, (self, other))

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return _apply(np.equal, (self, other)) if _comparable(other) else NotImplemented

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return _apply(np.not_equal, (self, other)) if _comparable(other) else NotImplemented

    __hash__ = object.__hash__  # identity, though == compares values (see the module's doc)

    def __matmul__(self, other: Any) -> Lazy:
        return matmul(self, other)

    def __rmatmul__(self, other: Any) -> Lazy:
        return matmul(other, self)

    # ------------------------------------------------------------------ evaluation
    def assignment(self) -> tuple[Assignment, dict[str, Tensor]]:
        """The expression as an assignment to ``out`` over canonical names (operands
        ``T0, T1, ...`` and variables ``i0, i1, ...`` in order of appearance, so the same
        expression on other data reuses its compiled kernel) and its operands."""
        names: dict[str, str] = {}
        for x in walk(self._expr):
            if isinstance(x, Access) and x.tensor not in names:
                names[x.tensor] = f"T{len(names)}"
        expr = map_accesses(self._expr, lambda a: Access(names[a.tensor], a.indices))
        # building names variables v0, v1, ...: renamed to i0, i1, ... they meet no other
        seen = dict.fromkeys([*self._free, *(v for x in walk(self._expr) if isinstance(x, Access)
                                            for v in x.indices)])
        final = {v: IndexVar(f"i{n}") for n, v in enumerate(seen)}
        for v, w in final.items():
            expr = rename_index(expr, v, w)
        expr = _rename_reductions(expr, final)
        lhs = Access("out", tuple(final[v] for v in self._free))
        return Assignment(lhs, expr), {names[n]: t for n, t in self._operands.items()}

    def result_format(self) -> Format:
        """The format :meth:`evaluate` gives by default (the module's rule)."""
        if not self._sparse or self.ndim == 0:
            return dense(self.ndim)
        if self.ndim == 1:
            return Format([Compressed()])
        return csr if self.ndim == 2 else csf(self.ndim)

    def kernel(self, format: Any = None) -> Any:
        """The compiled kernel that computes this expression (compiled once per expression
        shape, formats and dtypes, then cached); for a wide sum of sparse operands, which
        :meth:`evaluate` runs as a chain of narrow sums, the one kernel of the whole sum."""
        a, tensors, out = self._prepared(format)
        return api.kernel_for(a, tensors, out)

    def evaluate(self, format: Any = None) -> Tensor:
        """Compute the expression with one kernel (a wide sum of sparse operands: a chain of
        three-way sums, :func:`coiter.api.run_chained_sum`); the result in ``format`` or by
        the rule."""
        key = None
        # (a leaf read twice, ``L @ L.T``, is one operand of the kernel: the plan of one with
        # two refuses the call, and the other way round)
        if self._tag is not None and format is None:
            key = (self._tag, self._orders, self._sparse)
            operands = dict(zip(_operand_names(len(self._objs)), self._objs))
            out = api.call_remembered(key, operands)
            if out is None:
                out = api.call_chained(key, operands)
            if out is not None:
                return out
        a, tensors, fmt = self._prepared(format)
        # a wide sum of sparse operands runs as a chain of kernels
        chained = api.run_chained_sum(a, tensors, fmt, self.shape, key)
        if chained is not None:
            return chained
        kernel = api.kernel_for(a, tensors, fmt)
        if key is not None:
            api.remember_kernel(key, kernel)
        return kernel.run(tensors, self.shape)

    def _prepared(self, format: Any) -> tuple[Assignment, dict[str, Tensor], Format]:
        """The assignment, its operands and the result's format."""
        a, tensors = self.assignment()
        out = as_format(format, self.ndim) if format is not None else self.result_format()
        return a, tensors, out

    def to_numpy(self) -> np.ndarray:
        return self.evaluate().to_numpy()

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of an expression of order 0")
        return self.shape[0]

    def __bool__(self) -> bool:
        """The truth of a single value; for more, NumPy's error (``if A > 0.5:`` and
        ``0 < A < 1`` are ambiguous)."""
        return bool(self.evaluate())

    def __float__(self) -> float:
        return float(self.evaluate())

    def __int__(self) -> int:
        return int(self.evaluate())

    def __complex__(self) -> complex:
        return complex(self.evaluate())

    def to_scipy(self) -> sp.sparray:
        return self.evaluate().to_scipy()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(self.evaluate(), dtype=dtype)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return array_function(func, args, kwargs)

    def __repr__(self) -> str:
        a, tensors = self.assignment()
        kinds = ", ".join(f"{n}: {t.format.to_string()} {t.shape}" for n, t in tensors.items())
        return f"coiter.Lazy(shape={self.shape}, expression='{a}', operands={{{kinds}}})"


# ---------------------------------------------------------------------- building
def _as_tensor(obj: Any) -> Tensor:
    from .operands import as_tensor

    return as_tensor(obj)


def _is_scalar(obj: Any) -> bool:
    return isinstance(obj, (bool, int, float, complex, np.generic)) and np.ndim(obj) == 0


def _comparable(obj: Any) -> bool:
    """Whether ``==`` with ``obj`` compares values: scalars, tensors, expressions and arrays
    of any library (anything else, ``None`` say, compares by identity, as Python's)."""
    return (_is_scalar(obj) or isinstance(obj, (Lazy, Tensor, np.ndarray, list, tuple))
            or sp.issparse(obj) or hasattr(obj, "__array__") or hasattr(obj, "__dlpack__"))


def _sum_type(dtype: np.dtype) -> str | None:
    """The type NumPy sums ``dtype`` in where it is not ``dtype``: bools and integers
    narrower than 64 bits add up in 64-bit integers (``(A > 0.5).sum()`` counts)."""
    if dtype.kind == "b" or (dtype.kind == "i" and dtype.itemsize < 8):
        return "int64"
    if dtype.kind == "u" and dtype.itemsize < 8:
        return "uint64"
    return None


def _axis(a: int, ndim: int) -> int:
    if not -ndim <= a < ndim:
        raise ShapeError(f"axis {a} is out of range for {ndim} axes")
    return a % ndim


def _rename_reductions(e: Expr, names: dict[IndexVar, IndexVar]) -> Expr:
    """``e`` with the variables its Reductions bind renamed too."""
    if isinstance(e, Reduction):
        body = _rename_reductions(e.body, names)
        return Reduction(names.get(e.var, e.var), body, e.op)
    return with_children(e, [_rename_reductions(c, names) for c in children(e)])


def _rebase(b: Lazy, free: tuple[IndexVar, ...]) -> Expr:
    """``b``'s expression over the variables ``free`` (its own, renamed in order). All at
    once, through fresh ones: ``b``'s may be ``free`` reordered (a transpose of the
    expression it is combined with), and renaming one after another would merge two. Its
    sums bind fresh variables first, so that none of ``free`` is captured by one."""
    expr = _fresh_bound(b._expr)
    fresh = [_var() for _ in free]
    for v, w in zip(b._free, fresh):
        expr = rename_index(expr, v, w)
    for v, w in zip(fresh, free):
        expr = rename_index(expr, v, w)
    return expr


def _fresh_bound(e: Expr) -> Expr:
    """``e`` with the variable of every Reduction renamed to a fresh one in its body (inner
    ones first, so that each renames the uses it binds)."""
    if isinstance(e, Reduction):
        var = _var()
        return replace(e, var=var, body=rename_index(_fresh_bound(e.body), e.var, var))
    return with_children(e, [_fresh_bound(c) for c in children(e)])


_BINARY = {"+": Add, "-": Sub, "*": Mul, "/": Div}


def _elementwise(x: Any, y: Any, op: str) -> Lazy:
    if op == "/" and not _is_scalar(y):
        raise ArgumentError("a coiter expression divides by scalars only; for a division by a "
                            "tensor write it in index notation (coiter.evaluate)")
    if _is_scalar(x) or _is_scalar(y):
        scalar, tensors = (x, [y]) if _is_scalar(x) else (y, [x])
    else:
        scalar, tensors = None, [x, y]
    parts = _deferrals(tensors)  # (two scalars: None, nothing to defer)
    if parts is None:
        return _elementwise_now(x, y, op)
    shape = _broadcast(op, [tuple(v.shape) for v in tensors])
    sparse = _elementwise_sparse(op, scalar, [_sparse_operand(v) for v in tensors])
    head = (op,) if scalar is None else (op, scalar is x, *_scalar_tag(scalar))
    return Lazy._deferred(lambda: _elementwise_now(x, y, op), parts, (*head, *(p.tag for p in parts)),
                          shape, sparse)


def _scalar_tag(scalar: Any) -> tuple[type, str]:
    """A scalar as a kernel's key holds it: its type and repr (``-0.0 != 0.0``, ``1 != 1.0``)."""
    return type(scalar), repr(scalar)


def _elementwise_sparse(op: str, scalar: Any, sparse: list[bool]) -> bool:
    """Whether ``x op y`` is sparse, its tensor operands' sparsity ``sparse`` and its scalar
    operand ``scalar`` (None: none): a product where either factor is, a sum or difference
    where both are, or the tensor is and the scalar is 0 (else every entry moves off zero)."""
    if scalar is not None:
        return sparse[0] and not (op in "+-" and scalar != 0)
    return any(sparse) if op == "*" else all(sparse)


def _elementwise_now(x: Any, y: Any, op: str) -> Lazy:
    """``x op y`` with its expression built now."""
    if _is_scalar(x) or _is_scalar(y):
        lazy, scalar = (Lazy.leaf(y), x) if _is_scalar(x) else (Lazy.leaf(x), y)
        sparse = _elementwise_sparse(op, scalar, [lazy._sparse])
        lit = as_expr(scalar)
        args = (lit, lazy._expr) if _is_scalar(x) else (lazy._expr, lit)
        bools = op == "+" and isinstance(scalar, (bool, np.bool_)) and lazy.dtype == np.bool_
        return Lazy(_logical(_BINARY[op](*args), op, bools), lazy._free, lazy.shape,
                    lazy._operands, sparse)
    a, b = Lazy.leaf(x), Lazy.leaf(y)
    free, shape, (left, right) = _aligned(op, (a, b))
    sparse = _elementwise_sparse(op, None, [a._sparse, b._sparse])
    bools = op == "+" and a.dtype == np.bool_ and b.dtype == np.bool_
    return Lazy(_logical(_BINARY[op](left, right), op, bools), free, shape,
                {**a._operands, **b._operands}, sparse)


def _logical(expr: Expr, op: str, bools: bool) -> Expr:
    """``expr`` (``a op b``) as NumPy computes it on two bool operands: their sum is bool
    (logical or), though an enclosing expression computes in integers (``3 * (A + B)``
    counts each entry once, not twice)."""
    return Call("bool", (expr,)) if bools and op == "+" else expr


def _aligned(op: str, operands: tuple[Lazy, ...]) -> tuple[tuple[IndexVar, ...], tuple[int, ...],
                                                             list[Expr]]:
    """The variables and shape of the widest operand and every operand's expression over
    them: NumPy's broadcasting of missing leading axes (a row vector scales every row); axes
    of length 1 would need an index that is no variable."""
    wide = max(operands, key=lambda o: o.ndim)
    free = wide._free
    _broadcast(op, [o.shape for o in operands])
    # (the widest is over its own variables already)
    return free, wide.shape, [o._expr if o is wide else _rebase(o, free[len(free) - o.ndim:])
                              for o in operands]


def _broadcast(op: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The shape of operands of ``shapes`` combined element-wise by ``op``: the widest,
    which every other must end (NumPy's broadcasting of missing leading axes); ShapeError
    otherwise."""
    wide = max(shapes, key=len)
    if any(s != wide[len(wide) - len(s):] for s in shapes):
        raise ShapeError(f"operands of {op} have shapes {' and '.join(map(str, shapes))}; coiter "
                         "expressions broadcast only missing leading axes (write it in index notation)")
    return wide


def matmul(x: Any, y: Any) -> Lazy:
    """``x @ y`` as an expression: deferred (see :class:`Lazy`) when both are operands as
    given (coiter Tensors, numeric NumPy arrays, SciPy matrices) or their transposes."""
    if _is_scalar(x) or _is_scalar(y):
        raise ArgumentError("matmul: a scalar operand is not allowed, use * instead")
    parts = _deferrals([x, y])
    if parts is None:
        return _matmul_now(x, y)
    shape = _matmul_shape(tuple(x.shape), tuple(y.shape))
    return Lazy._deferred(lambda: _matmul_now(x, y), parts, ("@", parts[0].tag, parts[1].tag), shape,
                          _sparse_operand(x) and _sparse_operand(y))


def _matmul_now(x: Any, y: Any) -> Lazy:
    """``x @ y`` with its expression built now."""
    a, b = Lazy.leaf(x), Lazy.leaf(y)
    shape = _matmul_shape(a.shape, b.shape)
    k = _var()
    left = rename_index(a._expr, a._free[-1], k)
    # b's other axes get fresh variables: b may share a's (a transpose of a)
    rest = tuple(_var() for _ in b._free[1:])
    right = _rebase(b, (k, *rest))
    # NumPy's product of bool matrices is bool, an "or" of "and"s: a sum would count them
    # once an enclosing expression computes in numbers (3 * (P @ Q))
    op = "any" if a.dtype == np.bool_ and b.dtype == np.bool_ else "sum"
    return Lazy(Reduction(k, Mul(left, right), op), a._free[:-1] + rest, shape,
                {**a._operands, **b._operands}, a._sparse and b._sparse)


def _plain(obj: Any) -> bool:
    """Whether ``obj`` is an operand a product may keep as it is until it runs: a Tensor, a
    NumPy array of numbers or a SciPy matrix, of a dtype coiter supports (DTypeError now
    otherwise; whatever else becomes a Tensor at once, so that its errors come at once)."""
    if isinstance(obj, Tensor):
        return True
    if (type(obj) is np.ndarray and obj.dtype.kind in "biufc") or sp.issparse(obj):
        check_dtype(obj.dtype)
        return True
    return False


def _deferral(obj: Any) -> Deferral | None:
    """What a deferred expression over ``obj`` computes of which operands: an operand as
    given or a leaf reads one whole; a deferred expression its own; None where ``obj`` is
    neither (an expression built already, one _DEFER_DEPTH deep, a list: the expression
    over it is built now)."""
    if isinstance(obj, Lazy):
        if obj._source is not None:
            return Deferral(_LEAF, (obj._source[0],), (obj._source[1],), 0)
        if obj._tag is None or obj._depth >= _DEFER_DEPTH:
            return None
        return Deferral(obj._tag, obj._objs, obj._orders, obj._depth)
    return Deferral(_LEAF, (obj,), (_identity(len(obj.shape)),), 0) if _plain(obj) else None


@functools.cache
def _identity(order: int) -> tuple[int, ...]:
    """The axis order of an operand of ``order`` axes read as it is."""
    return tuple(range(order))


@functools.cache
def _operand_names(n: int) -> tuple[str, ...]:
    """The names of a deferred expression's ``n`` operands in its kernel (T0, T1, ...)."""
    return tuple(f"T{k}" for k in range(n))


def _deferrals(objs: list[Any]) -> list[Deferral] | None:
    """Each of ``objs``'s deferral (:func:`_deferral`), or None unless all have one."""
    parts: list[Deferral] = []
    for obj in objs:
        part = _deferral(obj)
        if part is None:
            return None
        parts.append(part)
    return parts


def _sparse_operand(obj: Any) -> bool:
    if isinstance(obj, Tensor):  # (before SciPy's test, which is slower)
        return not obj.format.is_dense
    if isinstance(obj, Lazy):
        return obj._sparse
    return sp.issparse(obj)


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of the product of operands of shapes ``a`` and ``b``; ShapeError if none."""
    if not (1 <= len(a) <= 2 and 1 <= len(b) <= 2):
        raise ShapeError(f"matmul takes operands of 1 or 2 axes, got shapes {a} and {b} "
                         "(use coiter.einsum for more)")
    if a[-1] != b[0]:
        raise ShapeError(f"matmul: shapes {a} and {b} do not align ({a[-1]} != {b[0]})")
    return a[:-1] + b[1:]


def _apply(ufunc: np.ufunc, inputs: tuple[Any, ...]) -> Lazy:
    """NumPy's element-wise ``ufunc`` of tensors and scalars as an intrinsic: sparse when
    every tensor operand is and the function is zero where they all are (at their zeros and
    the scalars)."""
    if ufunc is np.power:
        _check_integer_power(*inputs)
    tensors = [x for x in inputs if not _is_scalar(x)]
    parts = _deferrals(tensors)
    if not tensors or parts is None:
        return _apply_now(ufunc, inputs)
    shape = _broadcast(ufunc.__name__, [tuple(x.shape) for x in tensors])
    scalars = tuple(_scalar_tag(x) if _is_scalar(x) else None for x in inputs)
    sparse = all(_sparse_operand(x) for x in tensors) and _ufunc_keeps_zeros(ufunc, inputs, scalars)
    tags = iter([p.tag for p in parts])
    tag = (ufunc, *(next(tags) if s is None else s for s in scalars))
    return Lazy._deferred(lambda: _apply_now(ufunc, inputs), parts, tag, shape, sparse)


# whether a ufunc keeps zeros, by the ufunc and its scalar arguments' tags (None: a tensor);
# emptied when full (a program may compare with ever new thresholds)
_KEEPS_ZEROS: dict[tuple[Any, ...], bool] = {}
_KEEPS_ZEROS_MAX = 1024


def _ufunc_keeps_zeros(ufunc: np.ufunc, inputs: tuple[Any, ...], scalars: tuple[Any, ...]) -> bool:
    """Whether ``ufunc`` of ``inputs`` is zero where its tensor inputs all are, from the
    function of placeholders (which also checks now that coiter has the function)."""
    key = (ufunc, scalars)
    known = _KEEPS_ZEROS.get(key)
    if known is None:
        placeholders = iter([Access(f"_{k}", ()) for k in range(len(inputs))])
        expr = ufunc_expr(ufunc, [as_expr(x) if _is_scalar(x) else next(placeholders) for x in inputs])
        known = _keeps_zeros(expr, inputs)
        if len(_KEEPS_ZEROS) >= _KEEPS_ZEROS_MAX:
            _KEEPS_ZEROS.clear()
        _KEEPS_ZEROS[key] = known
    return known


def _apply_now(ufunc: np.ufunc, inputs: tuple[Any, ...]) -> Lazy:
    """``ufunc`` of ``inputs`` (see :func:`_apply`) with its expression built now."""
    leaves = [Lazy.leaf(x) for x in inputs if not _is_scalar(x)]
    free, shape, exprs = _aligned(ufunc.__name__, tuple(leaves))
    tensor_exprs = iter(exprs)
    args = [as_expr(x) if _is_scalar(x) else next(tensor_exprs) for x in inputs]
    expr = ufunc_expr(ufunc, args)
    sparse = all(a._sparse for a in leaves) and _keeps_zeros(expr, inputs)
    operands = {n: t for a in leaves for n, t in a._operands.items()}
    return Lazy(expr, free, shape, operands, sparse)


def _keeps_zeros(expr: Expr, inputs: tuple[Any, ...]) -> bool:
    """Whether ``expr``, an intrinsic's call on ``inputs``, is zero where its tensor inputs
    all are (at their zeros and its scalars)."""
    at_zeros = tuple(x if _is_scalar(x) else 0 for x in inputs)
    return isinstance(expr, Call) and zero_at(expr.fn, at_zeros)


def _check_integer_power(base: Any, exponent: Any) -> None:
    """NumPy's error for an integer tensor to a negative integer power (index notation's
    ``pow`` gives the truncated quotient instead, docs/language.md)."""
    if not _is_scalar(exponent) or np.asarray(exponent).dtype.kind not in "iu" or exponent >= 0:
        return
    kind = np.asarray(base).dtype.kind if _is_scalar(base) else Lazy.leaf(base).dtype.kind
    if kind in "biu":
        raise ArgumentError(f"** {exponent}: integers to negative integer powers are not "
                            "allowed (NumPy's rule); make the base float first "
                            "(A.astype(float) ** -1)")


# ---------------------------------------------------------------------- NumPy protocols
_OPERATORS = {np.add: "+", np.subtract: "-", np.multiply: "*", np.true_divide: "/"}


def array_ufunc(ufunc: np.ufunc, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """NumPy's ufuncs on coiter tensors: arithmetic and ``matmul`` build expressions, as the
    operators do; one-operand intrinsics (``np.sin``) too. Anything else (reductions such as
    ``np.add.reduce``, ``out=``, functions coiter lacks) is a TypeError saying how to densify."""
    if method == "__call__" and not kwargs:
        if ufunc in _OPERATORS and len(inputs) == 2:
            return _elementwise(inputs[0], inputs[1], _OPERATORS[ufunc])
        if ufunc is np.matmul:
            return matmul(*inputs)
        if ufunc is np.negative:
            return -Lazy.leaf(inputs[0])
        if ufunc is np.positive:
            return Lazy.leaf(inputs[0])
        if any(f.ufunc is ufunc for f in FUNCTIONS.values()):
            return _apply(ufunc, inputs)
    raise TypeError(f"numpy.{ufunc.__name__}{'' if method == '__call__' else '.' + method} on a coiter "
                    "tensor is not supported; densify explicitly with .to_numpy() first, or write "
                    "the computation in index notation (coiter.evaluate)")


_REDUCTIONS = {np.sum: "sum", np.max: "max", np.min: "min", np.mean: "mean"}


def array_function(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """NumPy's functions that keep sparsity (``matmul``, ``dot``, ``transpose``, ``sum``,
    ``max``, ``min``, ``mean``, ``einsum``, ``tensordot``) on coiter tensors; ``shape``, ``ndim`` and ``size`` answer;
    any other densifies operands small enough to (see ``Tensor.__array__``) and raises for
    larger ones."""
    if func in (np.shape, np.ndim, np.size):
        shape = args[0].shape  # a Tensor or Lazy: NumPy dispatched on it
        return {np.shape: shape, np.ndim: len(shape), np.size: math.prod(shape)}[func]
    if func is np.matmul and not kwargs:
        return matmul(*args)
    if func is np.dot and not kwargs:
        x, y = args
        if _is_scalar(x) or _is_scalar(y):
            return _elementwise(x, y, "*")
        return matmul(x, y)
    if func is np.transpose:
        return Lazy.leaf(args[0]).transpose(kwargs.get("axes", args[1] if len(args) > 1 else None))
    reduction = _REDUCTIONS.get(func)
    if reduction is not None and set(kwargs) <= {"axis"} and len(args) <= 2:
        axis = kwargs.get("axis", args[1] if len(args) > 1 else None)
        return getattr(Lazy.leaf(args[0]), reduction)(axis)
    if func is np.einsum and not kwargs and isinstance(args[0], str):
        return api.einsum(args[0], *args[1:])
    if func is np.tensordot and set(kwargs) <= {"axes"}:
        return _tensordot(*args, **kwargs)
    if func in _METHODS or func is np.linalg.norm:
        value = _as_method(func, args, kwargs)
        if value is not None:
            return value
    name = f"numpy.{func.__name__}"
    return func(*(_densified(x, name) for x in args),
                **{k: _densified(v, name) for k, v in kwargs.items()})


# NumPy functions that are methods of tensors, with the arguments besides the tensor that
# the method takes (other arguments, axis1= say, fall back to the dense array)
_METHODS: dict[Any, tuple[str, frozenset[str]]] = {
    np.diagonal: ("diagonal", frozenset({"offset"})), np.trace: ("trace", frozenset({"offset"})),
    np.real: ("real", frozenset()), np.imag: ("imag", frozenset()),
    np.count_nonzero: ("count_nonzero", frozenset()), np.nonzero: ("nonzero", frozenset()),
}


def _as_method(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` computed by the tensor's own method (``np.trace(A)`` is
    ``A.trace()``), or None where the arguments ask for more than the method does."""
    try:
        bound = inspect.signature(func).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return None
    first = next(iter(bound))
    x = bound.pop(first)
    if not isinstance(x, (Tensor, Lazy)):
        return None
    if func is np.linalg.norm:
        return _norm(Lazy.leaf(x), **bound)
    name, takes = _METHODS[func]
    if set(bound) - takes:
        return None
    method = getattr(x, name)
    return method(**bound) if callable(method) else method


def _norm(x: Lazy, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """``np.linalg.norm`` of a vector or matrix by fused kernels (no densifying): the
    vector p-norms and the matrix Frobenius, 1, -1, inf and -inf norms; None (the dense
    array's norm) for the spectral and nuclear norms and for ``axis``/``keepdims``."""
    if axis is not None or keepdims or x.ndim not in (1, 2):
        return None
    if x.dtype.kind not in "fc":  # NumPy's norm of integers and bools computes in float64
        x = Lazy(Call("float64", (x._expr,)), x._free, x.shape, x._operands, x._sparse)
    a = abs(x)
    if ord is None or (x.ndim == 2 and ord == "fro") or (x.ndim == 1 and ord == 2):
        return np.sqrt((a * a).sum().to_numpy()[()])
    if x.ndim == 2:
        if ord in (1, -1, np.inf, -np.inf):
            sums = a.sum(axis=0 if ord in (1, -1) else 1)
            return (sums.max() if ord > 0 else sums.min()).to_numpy()[()]
        return None
    if isinstance(ord, str):
        return None
    if ord == np.inf:
        return a.max().to_numpy()[()]
    if ord == -np.inf:
        return a.min().to_numpy()[()]
    if ord == 0:
        return a.dtype.type((a != 0).sum().to_numpy()[()])
    if ord == 1:
        return a.sum().to_numpy()[()]
    return (a ** ord).sum().to_numpy()[()] ** (1.0 / ord)


def _densified(obj: Any, function: str) -> Any:
    """``obj`` with every coiter tensor in it, in lists and tuples too (``np.concatenate([A,
    B])``), as a NumPy array: NumPy would hand a tensor left inside back to
    ``__array_function__``, without end."""
    if isinstance(obj, Tensor):
        densify_check(obj, function)
        return np.asarray(obj)
    if isinstance(obj, Lazy):
        return _densified(obj.evaluate(), function)
    if isinstance(obj, list):
        return [_densified(x, function) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_densified(x, function) for x in obj)
    return obj


def _tensordot(x: Any, y: Any, axes: Any = 2) -> Any:
    a, b = Lazy.leaf(x), Lazy.leaf(y)
    if isinstance(axes, int):
        left, right = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        left, right = [list(np.atleast_1d(ax)) for ax in axes]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    sa = [next(letters) for _ in range(a.ndim)]
    sb = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(left, right):
        sb[j % b.ndim] = sa[i % a.ndim]
    out = [c for n, c in enumerate(sa) if n not in {i % a.ndim for i in left}]
    out += [c for n, c in enumerate(sb) if n not in {j % b.ndim for j in right}]
    return api.einsum(f"{''.join(sa)},{''.join(sb)}->{''.join(out)}", x.evaluate() if isinstance(x, Lazy) else x,
                  y.evaluate() if isinstance(y, Lazy) else y)
