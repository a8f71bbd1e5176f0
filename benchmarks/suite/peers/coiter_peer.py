"""coiter itself: each kernel compiled once per tensor order and called as a user would,
``kernel(A=..., x=...)`` on coiter Tensors (CSR shares SciPy's arrays) and NumPy arrays."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

import coiter

from ..check import Result, from_coords
from ..data import Tensor
from ..kernels import KERNELS, Case, SparseVector
from ..settings import Settings
from .base import Peer, Prepared

_compiled: dict[tuple[str, int], coiter.Kernel] = {}


def kernel_for(case: Case) -> coiter.Kernel:
    """The compiled kernel of this case's kernel and tensor order (compiled once)."""
    key = (case.kernel.name, case.order)
    if key not in _compiled:
        _compiled[key] = case.kernel.compile(case.order)
    return _compiled[key]


def operand(value: Any, fmt: Any) -> Any:
    """A neutral operand as coiter takes it, in the kernel's format ``fmt``."""
    if isinstance(value, (sp.csr_array, sp.csc_array)):
        return coiter.Tensor.from_scipy(value)
    if isinstance(value, SparseVector):
        return coiter.Tensor.from_coo(value.idx[None, :], value.vals, (value.n,), format=fmt)
    if isinstance(value, Tensor):
        return coiter.Tensor.from_coo(value.coords, value.vals, value.shape, format=fmt)
    return value  # dense ndarray: passed as it is


def result(t: coiter.Tensor) -> Result:
    if t.format.is_dense:
        return np.asarray(t.to_numpy())
    coords, vals = t.storage.to_coords()
    return from_coords(coords, vals, t.shape)


def prepare(case: Case) -> Prepared:
    kernel = kernel_for(case)
    formats = case.kernel.formats(case.order)
    ops = {name: operand(v, formats.get(name)) for name, v in case.ops.items()}
    return Prepared(lambda: kernel(**ops), result)


ENTRY_POINTS = ("kernel call", "evaluate", "einsum", "A @ x", "kernel call, SciPy A", "evaluate, SciPy A",
                "einsum, SciPy A")


def entry_points(case: Case) -> dict[str, Callable[[], Any]]:
    """The SpMV case through each way a user calls coiter, for the per-call overhead rows
    (ENTRY_POINTS): the compiled kernel, ``coiter.evaluate``, ``coiter.einsum`` and the
    ``@`` operator on a coiter Tensor, and the first three on the SciPy matrix itself
    (kernels cached)."""
    kernel = kernel_for(case)
    m, x = case.ops["A"], case.ops["x"]
    a = operand(m, None)
    calls: dict[str, Callable[[], Any]] = {
        "kernel call": lambda: kernel(A=a, x=x),
        "evaluate": lambda: coiter.evaluate("y(i) = A(i,j) * x(j)", A=a, x=x),
        "einsum": lambda: coiter.einsum("ij,j->i", a, x),
        "A @ x": lambda: (a @ x).evaluate(),
        "kernel call, SciPy A": lambda: kernel(A=m, x=x),
        "evaluate, SciPy A": lambda: coiter.evaluate("y(i) = A(i,j) * x(j)", A=m, x=x),
        "einsum, SciPy A": lambda: coiter.einsum("ij,j->i", m, x),
    }
    assert tuple(calls) == ENTRY_POINTS
    expected = case.reference
    for name, call in calls.items():  # every entry point computes the right values
        np.testing.assert_allclose(np.asarray(call().to_numpy()), expected, rtol=1e-9, err_msg=name)
    return calls


def make(settings: Settings) -> Peer:
    return Peer("coiter", coiter.__version__, {name: prepare for name in KERNELS},
                note="generated C, OpenMP on the outermost loop where rows are disjoint")
