"""PyTorch sparse on CPU: CSR/CSC tensors (SciPy's int32 arrays, shared), ``@`` for products,
``+`` for sums, ``torch.sparse.sampled_addmm`` for SDDMM; TTV/TTM run on the fiber
matricization, INNERPROD on the mode-0 unfolding as COO (no sparse tensor contractions
of order > 2)."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

from ..check import Result, from_coords
from ..kernels import Case, SparseVector, fiber_result
from ..settings import Settings
from .base import Peer, Prepared

# operands come from validated SciPy CSR arrays: no per-call invariant checks, and no
# warning each time one is built
torch.sparse.check_sparse_tensor_invariants.disable()
warnings.filterwarnings("ignore", message="Sparse CS[RC] tensor support is in beta")


def _csr(m: sp.csr_array | sp.csc_array) -> torch.Tensor:
    """CSR (or CSC) torch tensor sharing the SciPy array's arrays."""
    build = torch.sparse_csc_tensor if m.format == "csc" else torch.sparse_csr_tensor
    return build(torch.from_numpy(m.indptr), torch.from_numpy(m.indices),
                 torch.from_numpy(m.data), size=m.shape)


def _dense(t: torch.Tensor) -> np.ndarray:
    return (t.to_dense() if t.layout != torch.strided else t).numpy()


def _sparse(t: torch.Tensor) -> Result:
    coo = t.to_sparse_coo().coalesce()
    return from_coords(coo.indices().numpy(), coo.values().numpy(), tuple(t.shape))


def _column(v: SparseVector) -> sp.csc_array:
    return sp.csc_array((v.vals, v.idx, [0, v.idx.shape[0]]), shape=(v.n, 1))


def spmv(case: Case) -> Prepared:
    a, x = _csr(case.ops["A"]), torch.from_numpy(case.ops["x"])
    return Prepared(lambda: a @ x, _dense)


def spmspv(case: Case) -> Prepared:
    a, x = _csr(case.ops["A"]), _csr(_column(case.ops["x"]))
    return Prepared(lambda: a @ x, lambda out: _dense(out).ravel())


def spmm(case: Case) -> Prepared:
    a, b = _csr(case.ops["A"]), torch.from_numpy(case.ops["B"])
    return Prepared(lambda: a @ b, _dense)


def sddmm(case: Case) -> Prepared:
    a = _csr(case.ops["A"])
    u, vt = torch.from_numpy(case.ops["U"]), torch.from_numpy(case.ops["V"]).T

    def call() -> torch.Tensor:
        s = torch.sparse.sampled_addmm(a, u, vt, beta=0.0)  # (U V') at A's nonzeros
        return torch.sparse_csr_tensor(s.crow_indices(), s.col_indices(),
                                       s.values() * a.values(), size=s.shape)

    return Prepared(call, _sparse)


def spgemm(case: Case) -> Prepared:
    a, b = _csr(case.ops["A"]), _csr(case.ops["B"])
    return Prepared(lambda: a @ b, _sparse)


def spadd3(case: Case) -> Prepared:
    a, b, c = (_csr(case.ops[k]) for k in "ABC")
    return Prepared(lambda: a + b + c, _sparse)


def ttv(case: Case) -> Prepared:
    f, heads = case.fibers()
    m, c = _csr(f), torch.from_numpy(case.ops["c"])
    shape = case.input.shape[:-1]
    return Prepared(lambda: m @ c, lambda y: fiber_result(heads, _dense(y), shape))


def ttm(case: Case) -> Prepared:
    f, heads = case.fibers()
    m, c = _csr(f), torch.from_numpy(case.ops["C"])
    shape = (*case.input.shape[:-1], c.shape[1])
    return Prepared(lambda: m @ c, lambda y: fiber_result(heads, _dense(y), shape))


def _coo(m: sp.csr_array) -> torch.Tensor:
    coo = sp.coo_array(m)
    idx = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    return torch.sparse_coo_tensor(idx, torch.from_numpy(coo.data), m.shape).coalesce()


def innerprod(case: Case) -> Prepared:
    b, c = (_coo(m) for m in case.unfolded())
    return Prepared(lambda: (b * c).sum(), lambda s: np.array(float(s)))


def make(settings: Settings) -> Peer:
    return Peer(
        "torch", torch.__version__,
        {"spmv": spmv, "spmspv": spmspv, "spmm": spmm, "sddmm": sddmm, "spgemm": spgemm,
         "spadd3": spadd3, "ttv": ttv, "ttm": ttm, "innerprod": innerprod},
        {"mttkrp": "no sparse tensor contractions of order > 2"},
        set_threads=torch.set_num_threads,
        note="torch.sparse CSR on CPU; tensors as fiber matrix (TTV, TTM) or mode-0 unfolding (INNERPROD)")
