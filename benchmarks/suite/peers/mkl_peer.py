"""Intel MKL sparse BLAS through ``sparse_dot_mkl.dot_product_mkl`` (products only);
TTV/TTM run on the fiber matricization."""
from __future__ import annotations

import glob
import os
import sys

import numpy as np
import scipy.sparse as sp

# The mkl wheel puts libmkl_rt.so.N in <prefix>/lib, where sparse_dot_mkl's search (the
# loader's path, ctypes.util) does not look; MKL_RT names it, unless the user already did.
if "MKL_RT" not in os.environ:
    found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
    if found:
        os.environ["MKL_RT"] = found[-1]

import sparse_dot_mkl  # noqa: E402 - after MKL_RT is set
from sparse_dot_mkl import dot_product_mkl  # noqa: E402

from ..check import from_scipy  # noqa: E402
from ..kernels import Case, fiber_result
from ..settings import Settings
from .base import Peer, Prepared

_PRODUCTS_ONLY = "sparse_dot_mkl has sparse products only"


def spmv(case: Case) -> Prepared:
    a, x = case.ops["A"], case.ops["x"]
    return Prepared(lambda: dot_product_mkl(a, x), np.asarray)


def spmspv(case: Case) -> Prepared:
    a, v = case.ops["A"], case.ops["x"]
    x = sp.csc_array((v.vals, v.idx, [0, v.idx.shape[0]]), shape=(v.n, 1))
    return Prepared(lambda: dot_product_mkl(a, x), lambda out: out.toarray().ravel())


def spmm(case: Case) -> Prepared:
    a, b = case.ops["A"], case.ops["B"]
    return Prepared(lambda: dot_product_mkl(a, b), np.asarray)


def spgemm(case: Case) -> Prepared:
    a, b = case.ops["A"], case.ops["B"]
    return Prepared(lambda: dot_product_mkl(a, b), from_scipy)


def ttv(case: Case) -> Prepared:
    f, heads = case.fibers()
    c, shape = case.ops["c"], case.input.shape[:-1]
    return Prepared(lambda: dot_product_mkl(f, c), lambda y: fiber_result(heads, y, shape))


def ttm(case: Case) -> Prepared:
    f, heads = case.fibers()
    m = case.ops["C"]
    shape = (*case.input.shape[:-1], m.shape[1])
    return Prepared(lambda: dot_product_mkl(f, m), lambda y: fiber_result(heads, y, shape))


def make(settings: Settings) -> Peer:
    return Peer(
        "MKL", f"sparse_dot_mkl {sparse_dot_mkl.__version__}, {sparse_dot_mkl.mkl_get_version_string()}",
        {"spmv": spmv, "spmspv": spmspv, "spmm": spmm, "spgemm": spgemm, "ttv": ttv, "ttm": ttm},
        {"sddmm": f"{_PRODUCTS_ONLY} (no sampled dense-dense product)",
         "spadd3": f"{_PRODUCTS_ONLY} (no sparse addition)",
         "mttkrp": f"{_PRODUCTS_ONLY}; no tensors of order > 2",
         "innerprod": f"{_PRODUCTS_ONLY} (no elementwise product)"},
        set_threads=sparse_dot_mkl.mkl_set_num_threads,
        note="MKL inspector-executor through sparse_dot_mkl; tensors as fiber matrix (TTV, TTM)")
