"""User-defined operators (TACO's ``Func``): a named expression over parameters.

``coiter.define("xor(a, b)", "(a != 0) != (b != 0)")`` makes ``xor`` callable in index
notation (``c(i) = xor(a(i), b(i))``) and in Python (``xor(A[i], B[i])``). A call is
replaced by the body with the arguments in place of the parameters, so the operator means
exactly what its body computes, NumPy's semantics included, and the merge lattice of every
loop follows from it: ``xor`` of two sparse vectors visits their union (``xor`` of two
absent entries is false), ``a * max(b, 0)`` the intersection.

The algebraic properties a user states (an identity: ``op(e, x) == op(x, e) == x``; an
annihilator: ``op(z, x) == op(x, z) == z``) are checked against the body on sample values
when the operator is defined, so a definition cannot claim what it does not compute; with
its fills the body then gives loops the iteration space the property implies. A binary
operator with an identity that is commutative and associative on the samples is also a
reduction (:mod:`coiter.notation.reducers`): ``xor(j, A(i,j))`` folds row ``i`` from the
identity.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import ArgumentError
from .ast import (
    Access, BinaryExpr, Call, Expr, Literal, Neg, Number, as_expr, children, map_accesses, walk,
)
from .functions import ARITHMETIC, FUNCTIONS, function
from .reducers import DEFINED, REDUCERS, Reducer

__all__ = ["Operator", "define", "OPERATORS"]

# samples the stated properties are checked at (besides the identity or annihilator itself)
_SAMPLES = (0.0, 1.0, -2.5, 3.0, 0.5, 7.0)
_SIGNATURE = re.compile(r"\s*([A-Za-z_]\w*)\s*\(\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*\)\s*\Z")


@dataclass(frozen=True)
class Operator:
    """An operator defined by :func:`define`: its name, parameters, body (an expression
    whose only tensors are the parameters, as scalars) and the properties it was checked
    to have."""

    name: str
    params: tuple[str, ...]
    body: Expr
    identity: Number | None = None
    annihilator: Number | None = None
    text: str = field(default="", compare=False)  # the body as the user wrote it

    def __call__(self, *args: Any) -> Expr:
        """The body with ``args`` (expressions, index variables or numbers) in place of
        the parameters: use it in Python index notation, ``C[i] = xor(A[i], B[i])``."""
        return self.expand([as_expr(a) for a in args])

    def expand(self, args: Sequence[Expr]) -> Expr:
        """The body with the expressions ``args`` in place of the parameters."""
        if len(args) != len(self.params):
            raise ArgumentError(f"{self.name} takes {len(self.params)} argument(s), got {len(args)}")
        table = dict(zip(self.params, args))
        return map_accesses(self.body, lambda a: table[a.tensor])

    def value(self, *xs: Any) -> Any:
        """NumPy's value of the body at the numbers ``xs`` (float64 unless given typed)."""
        table = dict(zip(self.params, (np.asarray(x)[()] for x in xs)))
        with np.errstate(all="ignore"):
            return _evaluate(self.body, table)

    def __str__(self) -> str:
        return f"{self.name}({', '.join(self.params)}) = {self.text or self.body}"


OPERATORS: dict[str, Operator] = {}
# counts definitions: the same text means something else after one (callers that cache by
# spelling key on it)
generation = 0


def define(signature: str, body: str, *, identity: Number | None = None,
           annihilator: Number | None = None) -> Operator:
    """Define (or redefine) the operator ``signature`` (``"xor(a, b)"``) as the expression
    ``body`` over its parameters (``"(a != 0) != (b != 0)"``: intrinsics, comparisons, logic,
    arithmetic, numbers and operators defined before). ``identity`` and ``annihilator``
    state properties of a binary operator; they are checked against the body
    (ArgumentError saying where one fails). Returns the operator, callable in Python
    index notation; its name is callable in text expressions from then on, and reserved
    for calls there as intrinsics' names are (``f(i)`` no longer reads a tensor ``f``)."""
    from .parser import parse_expr  # the parser reads operators: imported when defining

    m = _SIGNATURE.match(signature) if isinstance(signature, str) else None
    if m is None:
        raise ArgumentError(f"an operator's signature is NAME(param, ...), got {signature!r}")
    name, params = m.group(1), tuple(p.strip() for p in m.group(2).split(","))
    if name in FUNCTIONS or name in REDUCERS:
        raise ArgumentError(f"{name} is a built-in function or reduction of coiter; choose another name")
    if len(set(params)) != len(params):
        raise ArgumentError(f"{signature}: a parameter is repeated")
    if not isinstance(body, str):
        raise ArgumentError(f"the body of {name} is an expression in text, got {body!r}")
    expr = parse_expr(body, scalars=params)
    for e in walk(expr):
        if isinstance(e, Access) and (e.indices or e.tensor not in params):
            raise ArgumentError(f"the body of {name} reads {e.tensor if not e.indices else e}, "
                                f"which is not one of its parameters "
                                f"({', '.join(params)})")
        if not isinstance(e, (Access, Literal, Neg, BinaryExpr, Call)):
            raise ArgumentError(f"the body of {name} may hold arithmetic, functions and numbers, "
                                f"not {e}")
    op = Operator(name, params, expr, identity, annihilator, body.strip())
    for what, value in (("identity", identity), ("annihilator", annihilator)):
        if value is not None:
            _check(op, what, value)
    global generation
    OPERATORS[name] = op
    generation += 1
    if identity is not None and _reduces(op):
        DEFINED[name] = Reducer(name, None, idempotent=_idempotent(op),
                                logical=isinstance(op.value(1.0, 0.0), np.bool_), start=identity)
    else:
        DEFINED.pop(name, None)
    return op


def _reduces(op: Operator) -> bool:
    """Whether ``op`` folds values in any order to the same result: commutative and
    associative on the samples (then, with its identity, it is a reduction)."""
    same = _same_truth if isinstance(op.value(1.0, 0.0), np.bool_) else _same
    for x in _SAMPLES:
        for y in _SAMPLES:
            if not same(op.value(x, y), op.value(y, x)):
                return False
            for z in _SAMPLES:
                if not same(op.value(op.value(x, y), z), op.value(x, op.value(y, z))):
                    return False
    return True


def _idempotent(op: Operator) -> bool:
    same = _same_truth if isinstance(op.value(1.0, 0.0), np.bool_) else _same
    return all(same(op.value(x, x), x) for x in _SAMPLES)


def _same(a: Any, b: Any) -> bool:
    return bool(a == b) or bool(np.isnan(a) and np.isnan(b))


def _same_truth(a: Any, b: Any) -> bool:
    return bool(a) == bool(b)


def _check(op: Operator, what: str, value: Any) -> None:
    if len(op.params) != 2:
        raise ArgumentError(f"{op.name}: an {what} belongs to a binary operator")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ArgumentError(f"{op.name}: the {what} must be a real number, got {value!r}")
    for x in (value, *_SAMPLES):
        for args in ((value, x), (x, value)):
            got = op.value(*args)
            # an identity gives the other argument back; an annihilator gives itself
            want = (args[1] if args[0] == value else args[0]) if what == "identity" else value
            if isinstance(got, np.bool_):  # a logical operator: its arguments as truth values
                want = bool(want)
            if not got == want:
                raise ArgumentError(f"{op.name}: {value!r} is not its {what}: "
                                    f"{op.name}({args[0]!r}, {args[1]!r}) = {got!r}, not {want!r}")


def _evaluate(e: Expr, table: dict[str, Any]) -> Any:
    if isinstance(e, Access):
        return table[e.tensor]
    if isinstance(e, Literal):
        return np.asarray(e.value)[()]
    if isinstance(e, Neg):
        return -_evaluate(e.operand, table)
    if isinstance(e, BinaryExpr):
        a, b = (_evaluate(c, table) for c in children(e))
        return ARITHMETIC[type(e)](a, b)
    if isinstance(e, Call):
        return function(e.fn)(*(_evaluate(a, table) for a in e.args))
    raise TypeError(type(e).__name__)
