"""SuiteSparse:GraphBLAS through python-graphblas, plus-times semiring. SDDMM is a
masked product ``C<A> = U V'`` times A; TTV/TTM run on the fiber matricization,
INNERPROD on the mode-0 unfolding (GraphBLAS has no tensors of order > 2)."""
from __future__ import annotations

from typing import Any

import graphblas as gb
import numpy as np

from ..check import Result, from_coords
from ..kernels import Case, fiber_result
from ..settings import Settings
from .base import Peer, Prepared

gb.init("suitesparse", blocking=True)


def _matrix(m: Any) -> gb.Matrix:
    return gb.io.from_scipy_sparse(m)


def _vector_dense(v: gb.Vector) -> np.ndarray:
    # rows of A with no nonzero have no entry in A*x: they are zeros of the dense result
    idx, vals = v.to_coo()
    out = np.zeros(v.size)
    out[idx] = vals
    return out


def _matrix_result(m: gb.Matrix) -> Result:
    rows, cols, vals = m.to_coo()
    return from_coords(np.vstack([rows, cols]), vals, m.shape)


def _matrix_dense(m: gb.Matrix) -> np.ndarray:
    rows, cols, vals = m.to_coo()
    out = np.zeros(m.shape)
    out[rows, cols] = vals
    return out


def spmv(case: Case) -> Prepared:
    a, x = _matrix(case.ops["A"]), gb.Vector.from_dense(case.ops["x"])
    return Prepared(lambda: (a @ x).new(), _vector_dense)


def spmspv(case: Case) -> Prepared:
    v = case.ops["x"]
    a, x = _matrix(case.ops["A"]), gb.Vector.from_coo(v.idx, v.vals, size=v.n)
    return Prepared(lambda: (a @ x).new(), _vector_dense)


def spmm(case: Case) -> Prepared:
    a, b = _matrix(case.ops["A"]), gb.Matrix.from_dense(case.ops["B"])
    return Prepared(lambda: (a @ b).new(), _matrix_dense)


def sddmm(case: Case) -> Prepared:
    a = _matrix(case.ops["A"])
    u, v = gb.Matrix.from_dense(case.ops["U"]), gb.Matrix.from_dense(case.ops["V"])

    def call() -> gb.Matrix:
        # the structural mask makes SuiteSparse use its masked dot-product method, which
        # computes U V' only at A's nonzeros
        c = gb.Matrix(float, a.nrows, a.ncols)
        c(a.S) << u.mxm(v.T)
        return c.ewise_mult(a, gb.binary.times).new()

    return Prepared(call, _matrix_result)


def spgemm(case: Case) -> Prepared:
    a, b = _matrix(case.ops["A"]), _matrix(case.ops["B"])
    return Prepared(lambda: (a @ b).new(), _matrix_result)


def spadd3(case: Case) -> Prepared:
    a, b, c = (_matrix(case.ops[k]) for k in "ABC")
    return Prepared(lambda: a.ewise_add(b).new().ewise_add(c).new(), _matrix_result)


def ttv(case: Case) -> Prepared:
    f, heads = case.fibers()
    m, c = _matrix(f), gb.Vector.from_dense(case.ops["c"])
    shape = case.input.shape[:-1]
    return Prepared(lambda: (m @ c).new(), lambda y: fiber_result(heads, _vector_dense(y), shape))


def ttm(case: Case) -> Prepared:
    f, heads = case.fibers()
    m, c = _matrix(f), gb.Matrix.from_dense(case.ops["C"])
    shape = (*case.input.shape[:-1], c.ncols)
    return Prepared(lambda: (m @ c).new(), lambda y: fiber_result(heads, _matrix_dense(y), shape))


def innerprod(case: Case) -> Prepared:
    b, c = (_matrix(m) for m in case.unfolded())
    return Prepared(lambda: b.ewise_mult(c, gb.binary.times).reduce_scalar(gb.monoid.plus).new(),
                    lambda s: np.array(float(s.value or 0.0)))


def _set_threads(n: int) -> None:
    gb.ss.config["nthreads"] = n


def make(settings: Settings) -> Peer:
    return Peer(
        "GraphBLAS", f"python-graphblas {gb.__version__}, SuiteSparse {gb.ss.about['library_version']}",
        {"spmv": spmv, "spmspv": spmspv, "spmm": spmm, "sddmm": sddmm, "spgemm": spgemm,
         "spadd3": spadd3, "ttv": ttv, "ttm": ttm, "innerprod": innerprod},
        {"mttkrp": "no tensors of order > 2"},
        set_threads=_set_threads,
        note="SuiteSparse:GraphBLAS; tensors as fiber matrix (TTV, TTM) or mode-0 unfolding (INNERPROD)")
