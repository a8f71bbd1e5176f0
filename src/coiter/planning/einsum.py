"""Plans for einsum calls: the planner's view of the operands, from their shapes, nonzero
counts, formats and dtypes."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence, Union

import numpy as np
import scipy.sparse as sp

from coiter.errors import ArgumentError, ShapeError
from coiter.formats.format import Format
from coiter.notation.ast import Assignment, accesses
from coiter.runtime.workspace_choice import memory_cap

from .model import Term, result_density
from .plan import EinsumPlan
from .search import plan_contraction

if TYPE_CHECKING:
    from coiter.tensor import Tensor

# dtypes NumPy contracts through BLAS: a step on dense operands of these goes to NumPy
_plans: dict[tuple, EinsumPlan] = {}
_PLANS_MAX = 256
_BLAS_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def letters_of(a: Assignment) -> tuple[list[str], str]:
    """The einsum terms of ``a`` (an einsum's assignment): each operand's letters, and the
    output's."""
    terms = ["".join(v.name for v in x.indices) for x in accesses(a.rhs)]
    return terms, "".join(v.name for v in a.lhs.indices)


def extents_of(terms: Sequence[str], tensors: Sequence[Tensor]) -> dict[str, int]:
    """Each letter's extent, checked to agree across the operands."""
    extents: dict[str, int] = {}
    where: dict[str, int] = {}
    for k, (term, t) in enumerate(zip(terms, tensors)):
        for c, n in zip(term, t.shape):
            if c in extents and extents[c] != n:
                raise ShapeError(f"einsum letter {c!r} has extent {extents[c]} in operand {where[c]} "
                                 f"(T{where[c]}) but {n} in operand {k} (T{k})")
            extents.setdefault(c, n)
            where.setdefault(c, k)
    return extents


Optimize = Union[bool, EinsumPlan, Sequence[Any]]


def plan_einsum(a: Assignment, tensors: Sequence[Tensor], out_format: Format,
                optimize: Optimize = True) -> EinsumPlan:
    """The plan for the einsum ``a`` over ``tensors`` (operand k is ``T<k>``) with a result in
    ``out_format``: ``optimize`` itself when it is a plan (checked to fit); the plan along
    ``optimize`` when it is a NumPy path (``["einsum_path", (0, 1), ...]``); else the
    cheapest plan, or one fused kernel for ``optimize=False`` and for operands whose fill
    value is not zero (the planner's temporaries assume zeros)."""
    terms, out = letters_of(a)
    subscripts = ",".join(terms) + "->" + out
    if isinstance(optimize, EinsumPlan):
        if optimize.subscripts != subscripts or optimize.n_operands != len(tensors):
            raise ArgumentError(f"optimize= got the plan for {optimize.subscripts!r} "
                                f"({optimize.n_operands} operands), not for {subscripts!r}")
        extents_of(terms, tensors)  # the operands' shapes still have to agree
        return optimize
    if isinstance(optimize, (list, tuple)):
        path = _checked_path(optimize, len(tensors))
        if any(t.fill_value != 0 for t in tensors):
            raise ArgumentError("operands with a nonzero fill value are computed by one kernel; "
                                "an einsum path does not apply (use optimize=False)")
        return _plan(subscripts, terms, out, tensors, out_format, memory_cap(), False, path)
    if optimize is not True and optimize is not False:
        raise ArgumentError(f"optimize must be True, False, an EinsumPlan or a NumPy path "
                            f"['einsum_path', (0, 1), ...], got {optimize!r}")
    fused_only = optimize is False or any(t.fill_value != 0 for t in tensors)
    memory = memory_cap()
    # plans hold for operands of the same kinds and shapes, nonzero counts within 2x
    key = (subscripts, out_format, fused_only, memory,
           tuple((t.format, t.shape, t.dtype, int(t.nnz).bit_length()) for t in tensors))
    plan = _plans.get(key)
    if plan is None:
        plan = _plan(subscripts, terms, out, tensors, out_format, memory, fused_only)
        if len(_plans) >= _PLANS_MAX:
            _plans.pop(next(iter(_plans)))
        _plans[key] = plan
    return plan


def _checked_path(path: Sequence[Any], n: int) -> list[tuple[int, ...]]:
    """NumPy's path as a list of groups, checked to contract ``n`` operands into one."""
    steps = list(path[1:]) if path and path[0] == "einsum_path" else list(path)
    live = n
    for group in steps:
        if not (isinstance(group, tuple) and group and all(type(k) is int for k in group)
                and len(set(group)) == len(group) and all(0 <= k < live for k in group)):
            raise ArgumentError(f"einsum path step {group!r} is not a tuple of distinct positions "
                                f"among the {live} operand(s) left")
        live -= len(group) - 1
    if live != 1:
        raise ArgumentError(f"einsum path {list(path)!r} leaves {live} operands, not one")
    return [tuple(g) for g in steps]


def _plan(subscripts: str, terms: list[str], out: str, tensors: Sequence[Tensor], out_format: Format,
          memory: int, fused_only: bool, path: list[tuple[int, ...]] | None = None) -> EinsumPlan:
    extents = extents_of(terms, tensors)
    inputs = [Term(term, 1.0 if t.format.is_dense else min(1.0, t.nnz / max(1, math.prod(t.shape))),
                   t.format.is_dense) for term, t in zip(terms, tensors)]
    output = Term(out, result_density(inputs, out, extents), out_format.is_dense)
    numpy_ok = all(t.dtype in _BLAS_DTYPES for t in tensors)
    itemsize = np.result_type(*(t.dtype for t in tensors)).itemsize if tensors else 8
    return plan_contraction(subscripts, inputs, output, extents, numpy_ok, itemsize, memory,
                            out_format, fused_only, path, _sampled_products(tensors, terms))


# rows of the left matrix multiplied to measure a sparse matrix product's density
SAMPLE_ROWS = 256


def _sampled_products(tensors: Sequence[Tensor], terms: Sequence[str]):
    """The planner's ``measure``: the density of a sparse matrix product ``x s, s y -> x y``
    of two operands, from the product of a sample of the left one's rows (SciPy), since
    real matrices' products overlap far more than independent nonzeros would (a FEM
    matrix's square: 17x fewer entries than products)."""
    def measure(k1: int, k2: int, letters: str) -> float | None:
        a, b = terms[k1], terms[k2]
        t1, t2 = tensors[k1], tensors[k2]
        if (t1.order != 2 or t2.order != 2 or t1.format.is_dense or t2.format.is_dense
                or len(set(a)) != 2 or len(set(b)) != 2 or len(set(a) & set(b)) != 1):
            return None
        (s,) = set(a) & set(b)
        x, y = a.replace(s, ""), b.replace(s, "")
        if s in letters or x == y or sorted(letters) != sorted(x + y):
            return None
        left = sp.csr_array(t1.to_scipy() if a == x + s else t1.to_scipy().T)
        right = sp.csr_array(t2.to_scipy() if b == s + y else t2.to_scipy().T)
        rows = left.shape[0]
        if rows == 0 or right.shape[1] == 0:
            return 0.0
        if rows > SAMPLE_ROWS:
            left = left[np.random.default_rng(0).choice(rows, SAMPLE_ROWS, replace=False)]
        return (left @ right).nnz / (left.shape[0] * right.shape[1])
    return measure
