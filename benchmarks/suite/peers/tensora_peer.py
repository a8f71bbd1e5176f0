"""tensora (a TACO-style compiler in Python, LLVM backend, serial): the same index
notation as coiter, operands in TACO's CSR ("ds"), CSF ("s..s") and dense formats.

Operands are copied straight from the neutral arrays into tensora's C structures and
results read back with NumPy: tensora's own converters check and copy element by element
in Python, seconds per million nonzeros. Both use tensora's cffi structure module.
"""
from __future__ import annotations

from importlib.metadata import version
from typing import Any

import numpy as np
import scipy.sparse as sp
import tensora
from tensora.compile._cffi_ownership import allocate_taco_structure, global_weakkeydict, tensor_cdefs

from ..check import Result, from_coords
from ..data import Tensor
from ..kernels import KERNELS, Case, SparseVector, csf_arrays
from ..settings import Settings
from .base import NotApplicable, Peer, Prepared, TooSlow

DENSE, COMPRESSED = 0, 1


def _output_format(case: Case) -> str:
    order = case.order
    return {"spmv": "d", "spmspv": "d", "spmm": "dd", "sddmm": "ds", "spgemm": "ds",
            "spadd3": "ds", "ttv": "s" * (order - 1), "ttm": "s" * (order - 1) + "d",
            "mttkrp": "dd", "innerprod": ""}[case.kernel.peer_name]


def _cffi_array(values: np.ndarray, ctype: str) -> Any:
    out = tensor_cdefs.new(f"{ctype}[]", max(values.shape[0], 1))
    tensor_cdefs.memmove(out, np.ascontiguousarray(values), values.nbytes)
    return out


def _taco(levels: list[Any], vals: np.ndarray, dims: tuple[int, ...],
          ordering: tuple[int, ...] | None = None) -> tensora.Tensor:
    """tensora Tensor from per-level arrays: None for a dense level, (pos, crd) otherwise;
    ``ordering`` gives the mode each level stores (default: in order)."""
    if max(dims, default=0) >= 2**31:
        raise NotApplicable("a dimension exceeds tensora's 32-bit indices")
    modes = tuple(DENSE if lv is None else COMPRESSED for lv in levels)
    t = allocate_taco_structure(modes, tuple(dims), ordering or tuple(range(len(dims))))
    # the arrays live as long as the structure through the holder tensora keeps for it,
    # exactly as taco_structure_to_cffi stores them
    holder = global_weakkeydict[t]
    indices = tensor_cdefs.cast("int32_t***", t.indices)
    for level, arrays in enumerate(levels):
        for k, array in enumerate(arrays or ()):
            holder["**indices"][level][k] = indices[level][k] = _cffi_array(array.astype(np.int32), "int32_t")
    holder["vals"] = t.vals = _cffi_array(np.asarray(vals, dtype=np.float64).ravel(), "double")
    return tensora.Tensor(t)


def operand(value: Any) -> tuple[tensora.Tensor, str]:
    """A neutral operand as a tensora Tensor, and its format string."""
    if isinstance(value, sp.csr_array):
        return _taco([None, (value.indptr, value.indices)], value.data, value.shape), "ds"
    if isinstance(value, sp.csc_array):
        return _taco([None, (value.indptr, value.indices)], value.data, value.shape, (1, 0)), "d1s0"
    if isinstance(value, SparseVector):
        pos = np.array([0, value.idx.shape[0]])
        return _taco([(pos, value.idx)], value.vals, (value.n,)), "s"
    if isinstance(value, Tensor):
        return _taco(csf_arrays(value.coords), value.vals, value.shape), "s" * value.order
    return _taco([None] * value.ndim, value, value.shape), "d" * value.ndim


def _array(ptr: Any, n: int, dtype: type) -> np.ndarray:
    return np.frombuffer(tensor_cdefs.buffer(ptr, n * np.dtype(dtype).itemsize), dtype=dtype).copy()


def result(t: tensora.Tensor) -> Result:
    """Neutral result read from the taco structure's arrays, level by level."""
    if t.order == 0:
        return np.array(float(t))
    indices = tensor_cdefs.cast("int32_t***", t.cffi_tensor.indices)
    positions = np.zeros(1, dtype=np.int64)  # storage positions of the entries so far
    coords: list[np.ndarray] = []
    for level, (mode, dim) in enumerate(zip(t.modes, t.dimensions)):
        if mode == tensora.Mode.dense:
            child = (positions[:, None] * dim + np.arange(dim)).ravel()
            coords = [np.repeat(c, dim) for c in coords] + [np.tile(np.arange(dim), positions.shape[0])]
        else:
            parents = int(positions.max()) + 1 if positions.shape[0] else 0
            pos = _array(indices[level][0], parents + 1, np.int32).astype(np.int64)
            crd = _array(indices[level][1], int(pos[-1]), np.int32)
            starts, lengths = pos[positions], pos[positions + 1] - pos[positions]
            offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
            child = np.arange(int(lengths.sum())) + offsets
            coords = [np.repeat(c, lengths) for c in coords] + [crd[child]]
        positions = child
    size = int(positions.max()) + 1 if positions.shape[0] else 0
    vals = _array(tensor_cdefs.cast("double*", t.cffi_tensor.vals), size, np.float64)[positions]
    if all(m == tensora.Mode.dense for m in t.modes):
        return vals.reshape(t.dimensions)
    return from_coords(np.array(coords), vals, t.dimensions)


# seconds per step of tensora's SpMSpV, which walks all rows of the dense result for each
# nonzero of x (measured: USA-road-NY, 264k rows x 26k nonzeros, 9 s)
_SPMSPV_STEP_S = 1.3e-9


def prepare(case: Case, settings: Settings) -> Prepared:
    if case.kernel.peer_name == "spmspv":
        steps = case.ops["A"].shape[0] * case.ops["x"].idx.shape[0]
        if steps * _SPMSPV_STEP_S > settings.slow_limit_s:
            raise TooSlow(f"its SpMSpV walks every row for each nonzero of x: {steps:.1e} steps, "
                          f"about {steps * _SPMSPV_STEP_S:.0f} s a call")
    expression = case.kernel.expression(case.order)
    lhs, rhs = expression.split("=")
    if "(" not in lhs:
        expression = f"{lhs.strip()}() ={rhs}"  # tensora writes a scalar result as a()
    converted = {name: operand(v) for name, v in case.ops.items()}
    formats = {name: fmt for name, (_, fmt) in converted.items()}
    formats[lhs.strip().split("(")[0]] = _output_format(case)
    try:
        method = tensora.tensor_method(expression, formats)
    except Exception as exc:  # noqa: BLE001 - tensora reports what it cannot compile by raising
        raise NotApplicable(f"tensora compiles no kernel for it ({type(exc).__name__})") from exc
    ops = {name: t for name, (t, _) in converted.items()}
    return Prepared(lambda: method(**ops), result)


def make(settings: Settings) -> Peer:
    return Peer("tensora", version("tensora"),
                {name: (lambda case: prepare(case, settings)) for name in KERNELS},
                threaded=False, note="TACO-style compiler, LLVM backend, serial")
