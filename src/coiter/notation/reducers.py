"""Reduction operators of index notation: ``sum`` (implicit), ``prod``, ``min``, ``max``,
``any`` and ``all``, written ``min(j, A(i,j) + x(j))``, and the user's: a binary operator
defined with an identity (:func:`coiter.define`) reduces too, ``xor(j, A(i,j))``.

Each reduces with a NumPy ufunc (``np.minimum.reduce``...) and starts from its identity,
which is also the value of a reduction over no coordinate. They see the implicit entries
of sparse operands as their fill value (zero unless a tensor says otherwise), as NumPy sees
the densified operands: ``max(j, A(i,j))`` of a row with an implicit zero is at least 0.
With a fill value that is the reduction's identity (``min`` over a tensor filled with
``inf``: the min-plus semiring), only stored entries are visited.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import ArgumentError, DTypeError
from .ast import Expr, IndexVar, Reduction, as_expr


@dataclass(frozen=True)
class Reducer:
    """A reduction operator: its name in expressions, the binary ufunc it folds with
    (None for a user's operator, whose body folds), whether it is idempotent
    (``min(x, x) == x``: a value counts once however often it is folded in) and whether
    it yields bools (``any``, ``all``); ``start`` is a user's operator's identity."""

    name: str
    ufunc: np.ufunc | None
    idempotent: bool
    logical: bool = False
    start: bool | int | float | None = None

    @property
    def defined(self) -> bool:
        """Whether this is an operator the user defined (its body folds)."""
        return self.ufunc is None

    @property
    def neutral(self) -> Any:
        """The identity where it is one number for every type (0 for ``sum``, 1 for
        ``prod``, a user's ``start``); None for ``min`` and ``max``, whose identity
        depends on the type (:meth:`identity`)."""
        return self.start if self.ufunc is None else self.ufunc.identity

    def identity(self, dtype: Any) -> bool | int | float:
        """The value reducing nothing gives, in ``dtype`` (DTypeError where the type has
        no order, as ``min`` of complex values)."""
        dtype = np.dtype(dtype)
        if self.ufunc is None:
            return bool(self.start) if self.logical or dtype.kind == "b" else self.start  # type: ignore[return-value]
        if self.name in ("min", "max"):
            if dtype.kind == "c":
                raise DTypeError(f"{self.name} reduction of complex values is not supported")
            low = self.name == "max"
            if dtype.kind == "b":
                return not low
            if dtype.kind in "iu":
                info = np.iinfo(dtype)
                return int(info.min if low else info.max)
            return -np.inf if low else np.inf
        value = self.ufunc.identity
        return bool(value) if self.logical or dtype.kind == "b" else value

    def dtype(self, body: np.dtype) -> np.dtype:
        """The type of the reduction of values of type ``body``."""
        return np.dtype(np.bool_) if self.logical else np.dtype(body)


REDUCERS: dict[str, Reducer] = {r.name: r for r in (
    Reducer("sum", np.add, idempotent=False),
    Reducer("prod", np.multiply, idempotent=False),
    Reducer("min", np.minimum, idempotent=True),
    Reducer("max", np.maximum, idempotent=True),
    Reducer("any", np.logical_or, idempotent=True, logical=True),
    Reducer("all", np.logical_and, idempotent=True, logical=True),
)}


# reductions by operators the user defined with an identity (coiter.notation.operators
# keeps it current: a redefinition replaces its entry, one without an identity drops it)
DEFINED: dict[str, Reducer] = {}


def reducer(name: str) -> Reducer:
    """The reduction operator called ``name`` (KeyError when there is none)."""
    return REDUCERS[name] if name in REDUCERS else DEFINED[name]


def reduce(op: Any, var: IndexVar | Sequence[IndexVar], body: Any) -> Expr:
    """``body`` reduced by ``op`` over ``var`` (or over several variables, the first
    outermost): ``coiter.reduce("min", j, A[i, j] + x[j])``. ``op`` is a built-in
    reduction's name or an operator defined with an identity (or its name)."""
    op = getattr(op, "name", op)
    if not isinstance(op, str) or (op not in REDUCERS and op not in DEFINED):
        raise ArgumentError(f"unknown reduction {op!r}; reductions: {', '.join(REDUCERS)} and "
                            "the operators defined with an identity")
    vars_ = [var] if isinstance(var, IndexVar) else list(var)
    if not vars_ or not all(isinstance(v, IndexVar) for v in vars_):
        raise ArgumentError(f"reduce({op!r}, ...) takes index variables to reduce over, got {var!r}")
    out = as_expr(body)
    for v in reversed(vars_):
        out = Reduction(v, out, op)
    return out
