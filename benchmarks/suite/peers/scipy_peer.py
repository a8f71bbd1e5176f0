"""scipy.sparse (single-threaded): CSR operators; SDDMM gathers the rows of U and V at
A's nonzeros with NumPy; TTV/TTM run on the fiber matricization, INNERPROD on the mode-0
unfolding (scipy has no tensors of order > 2)."""
from __future__ import annotations

import numpy as np
import scipy
import scipy.sparse as sp

from ..check import from_scipy
from ..kernels import Case, fiber_result
from ..settings import Settings
from .base import Peer, Prepared


def spmv(case: Case) -> Prepared:
    a, x = case.ops["A"], case.ops["x"]
    return Prepared(lambda: a @ x, np.asarray)


def spmspv(case: Case) -> Prepared:
    a, v = case.ops["A"], case.ops["x"]
    x = sp.csc_array((v.vals, v.idx, [0, v.idx.shape[0]]), shape=(v.n, 1))
    return Prepared(lambda: a @ x, lambda out: out.toarray().ravel())


def spmm(case: Case) -> Prepared:
    a, b = case.ops["A"], case.ops["B"]
    return Prepared(lambda: a @ b, np.asarray)


def sddmm(case: Case) -> Prepared:
    a, u, v = case.ops["A"], case.ops["U"], case.ops["V"]

    def call() -> sp.csr_array:
        rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
        vals = a.data * np.einsum("ij,ij->i", u[rows], v[a.indices])
        return sp.csr_array((vals, a.indices, a.indptr), shape=a.shape)

    return Prepared(call, from_scipy)


def spgemm(case: Case) -> Prepared:
    a, b = case.ops["A"], case.ops["B"]
    return Prepared(lambda: a @ b, from_scipy)


def spadd3(case: Case) -> Prepared:
    a, b, c = case.ops["A"], case.ops["B"], case.ops["C"]
    return Prepared(lambda: a + b + c, from_scipy)


def ttv(case: Case) -> Prepared:
    f, heads = case.fibers()
    c, shape = case.ops["c"], case.input.shape[:-1]
    return Prepared(lambda: f @ c, lambda y: fiber_result(heads, y, shape))


def ttm(case: Case) -> Prepared:
    f, heads = case.fibers()
    m = case.ops["C"]
    shape = (*case.input.shape[:-1], m.shape[1])
    return Prepared(lambda: f @ m, lambda y: fiber_result(heads, y, shape))


def innerprod(case: Case) -> Prepared:
    b, c = case.unfolded()
    return Prepared(lambda: b.multiply(c).sum(), lambda out: np.array(float(out)))


def make(settings: Settings) -> Peer:
    return Peer(
        "scipy", scipy.__version__,
        {"spmv": spmv, "spmspv": spmspv, "spmm": spmm, "sddmm": sddmm, "spgemm": spgemm,
         "spadd3": spadd3, "ttv": ttv, "ttm": ttm, "innerprod": innerprod},
        {"mttkrp": "no tensors of order > 2; the matricized form needs the dense "
                   "Khatri-Rao product of the factors"},
        threaded=False,
        note="single-threaded; tensors as fiber matrix (TTV, TTM) or mode-0 unfolding (INNERPROD)")
