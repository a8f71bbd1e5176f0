"""pydata ``sparse`` (COO arrays of any order, Numba kernels): matrix products with
``@``, sums with ``+``, everything else with ``sparse.einsum``."""
from __future__ import annotations

from typing import Any

import numpy as np
import sparse

from ..check import Result, from_coords
from ..data import Tensor
from ..kernels import Case
from ..settings import Settings
from .base import Peer, Prepared


def _coo(value: Any) -> sparse.COO:
    if isinstance(value, Tensor):
        return sparse.COO(value.coords, value.vals, shape=value.shape, sorted=True,
                          has_duplicates=False)
    return sparse.COO.from_scipy_sparse(value)


def result(out: Any) -> Result:
    if not isinstance(out, sparse.SparseArray):
        return np.asarray(out)
    if out.ndim == 0 or out.fill_value != 0:
        return np.asarray(out.todense())  # a reduction to a scalar keeps it as fill value
    coo = sparse.COO(out)
    return from_coords(coo.coords, coo.data, coo.shape)


def spmv(case: Case) -> Prepared:
    a, x = _coo(case.ops["A"]), case.ops["x"]
    return Prepared(lambda: a @ x, result)


def spmspv(case: Case) -> Prepared:
    v = case.ops["x"]
    a, x = _coo(case.ops["A"]), sparse.COO(v.idx[None, :], v.vals, shape=(v.n,))
    return Prepared(lambda: a @ x, result)


def spmm(case: Case) -> Prepared:
    a, b = _coo(case.ops["A"]), case.ops["B"]
    return Prepared(lambda: a @ b, result)


def sddmm(case: Case) -> Prepared:
    a, u, v = _coo(case.ops["A"]), case.ops["U"], case.ops["V"]
    return Prepared(lambda: sparse.einsum("ij,ik,jk->ij", a, u, v), result)


def spgemm(case: Case) -> Prepared:
    a, b = _coo(case.ops["A"]), _coo(case.ops["B"])
    return Prepared(lambda: a @ b, result)


def spadd3(case: Case) -> Prepared:
    a, b, c = (_coo(case.ops[k]) for k in "ABC")
    return Prepared(lambda: a + b + c, result)


def _einsum(case: Case, expression: str) -> Prepared:
    """The kernel as ``sparse.einsum`` of the coiter expression's index letters."""
    lhs, rhs = (side.strip() for side in expression.split("="))
    accesses = [term.strip() for term in rhs.split("*")]
    names = [term.split("(")[0] for term in accesses]
    subscripts = ",".join(term.split("(")[1].rstrip(")").replace(",", "") for term in accesses)
    out = lhs.split("(")[1].rstrip(")").replace(",", "") if "(" in lhs else ""
    ops = [_coo(case.ops[n]) if isinstance(case.ops[n], Tensor) else case.ops[n] for n in names]
    spec = f"{subscripts}->{out}"
    return Prepared(lambda: sparse.einsum(spec, *ops), result)


def make(settings: Settings) -> Peer:
    kernels = {"spmv": spmv, "spmspv": spmspv, "spmm": spmm, "sddmm": sddmm,
               "spgemm": spgemm, "spadd3": spadd3}
    kernels |= {name: (lambda case: _einsum(case, case.kernel.expression(case.order)))
                for name in ("ttv", "ttm", "mttkrp", "innerprod")}
    return Peer("pydata", sparse.__version__, kernels, threaded=False,
                note="pydata/sparse COO; tensor kernels with sparse.einsum")
