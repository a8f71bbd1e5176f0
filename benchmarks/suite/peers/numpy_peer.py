"""NumPy on dense arrays (BLAS for products, ``einsum`` with a precomputed path for
MTTKRP), run only where the dense arrays fit in ``dense_bytes_limit`` and the dense
arithmetic stays under ``dense_flops_limit``."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import scipy.sparse as sp

from ..data import Tensor
from ..kernels import Case
from ..settings import Settings
from .base import NotApplicable, Peer, Prepared


def _dense(value: sp.csr_array | Tensor) -> np.ndarray:
    if isinstance(value, Tensor):
        out = np.zeros(value.shape)
        out[tuple(value.coords)] = value.vals
        return out
    return value.toarray()


def dense_cost(case: Case, rank: int) -> tuple[int, int]:
    """Bytes of the dense version's arrays (operands, result, temporaries) and its flops."""
    name = case.kernel.peer_name
    if isinstance(case.input, Tensor):
        shape = case.input.shape
        full, head = math.prod(shape), math.prod(shape[:-1])
        # MTTKRP's einsum path first contracts one mode: a head x rank intermediate
        return {"ttv": (8 * (full + head), 2 * full),
                "ttm": (8 * (full + head * rank), 2 * full * rank),
                "mttkrp": (8 * (full + head * rank), 2 * full * rank * (len(shape) - 1)),
                "innerprod": (16 * full, 2 * full)}[name]
    n, m = case.input.csr.shape
    p = case.ops["B"].shape[1] if name == "spgemm" else 0
    return {"spmv": (8 * n * m, 2 * n * m), "spmspv": (8 * n * m, 2 * n * m),
            "spmm": (8 * (n * m + n * rank), 2 * n * m * rank),
            "sddmm": (8 * 3 * n * m, 2 * n * m * rank),
            "spgemm": (8 * (n * m + m * p + n * p), 2 * n * m * p),
            "spadd3": (8 * 5 * n * m, 3 * n * m)}[name]


def make(settings: Settings) -> Peer:
    def prepare(case: Case) -> Prepared:
        need, flops = dense_cost(case, settings.rank)
        if need > settings.dense_bytes_limit:
            raise NotApplicable(f"dense arrays need {need / 1e6:.0f} MB > "
                                f"{settings.dense_bytes_limit / 1e6:.0f} MB")
        if flops > settings.dense_flops_limit:
            raise NotApplicable(f"dense arithmetic {flops:.1g} flops > {settings.dense_flops_limit:.0e}")
        return BUILDERS[case.kernel.peer_name](case)

    return Peer("NumPy dense", np.__version__, {name: prepare for name in BUILDERS},
                note=f"dense arrays, only below {settings.dense_bytes_limit / 1e6:.0f} MB "
                     f"and {settings.dense_flops_limit:.0e} flops")


def _spmv(case: Case) -> Prepared:
    a, x = _dense(case.ops["A"]), case.ops["x"]
    return Prepared(lambda: a @ x, np.asarray)


def _spmspv(case: Case) -> Prepared:
    a, x = _dense(case.ops["A"]), case.ops["x"].dense()
    return Prepared(lambda: a @ x, np.asarray)


def _spmm(case: Case) -> Prepared:
    a, b = _dense(case.ops["A"]), case.ops["B"]
    return Prepared(lambda: a @ b, np.asarray)


def _sddmm(case: Case) -> Prepared:
    a, u, v = _dense(case.ops["A"]), case.ops["U"], case.ops["V"]
    return Prepared(lambda: a * (u @ v.T), np.asarray)


def _spgemm(case: Case) -> Prepared:
    a, b = _dense(case.ops["A"]), _dense(case.ops["B"])
    return Prepared(lambda: a @ b, np.asarray)


def _spadd3(case: Case) -> Prepared:
    a, b, c = (_dense(case.ops[k]) for k in "ABC")
    return Prepared(lambda: a + b + c, np.asarray)


def _ttv(case: Case) -> Prepared:
    b, c = _dense(case.ops["B"]), case.ops["c"]
    return Prepared(lambda: b @ c, np.asarray)


def _ttm(case: Case) -> Prepared:
    b, m = _dense(case.ops["B"]), case.ops["C"]
    return Prepared(lambda: b @ m, np.asarray)


def _mttkrp(case: Case) -> Prepared:
    b = _dense(case.ops["B"])
    factors = [v for k, v in case.ops.items() if k != "B"]
    modes = "ijkmnopq"[: b.ndim]
    spec = f"{modes}," + ",".join(f"{m}l" for m in modes[1:]) + "->il"
    path = np.einsum_path(spec, b, *factors, optimize="optimal")[0]
    return Prepared(lambda: np.einsum(spec, b, *factors, optimize=path), np.asarray)


def _innerprod(case: Case) -> Prepared:
    b, c = _dense(case.ops["B"]), _dense(case.ops["C"])
    return Prepared(lambda: np.vdot(b, c), lambda s: np.array(float(s)))


BUILDERS: dict[str, Callable[[Case], Prepared]] = {
    "spmv": _spmv, "spmspv": _spmspv, "spmm": _spmm, "sddmm": _sddmm, "spgemm": _spgemm,
    "spadd3": _spadd3, "ttv": _ttv, "ttm": _ttm, "mttkrp": _mttkrp, "innerprod": _innerprod,
}
