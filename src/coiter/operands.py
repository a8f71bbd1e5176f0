"""Coercing user operands (Tensor, NumPy, SciPy, Python scalars) to Tensors."""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .errors import ArgumentError, DTypeError, ShapeError
from .formats.format import Format
from .interop.pydata import from_pydata, is_pydata
from .interop.torch_interop import from_torch, is_torch
from .tensor import Tensor


def _label(name: str | None) -> str:
    """How messages name an operand (Python operators' operands have no name)."""
    return f"operand {name}" if name is not None else "an operand"


def as_tensor(obj: Any, fmt: Format | None = None, name: str | None = None) -> Tensor:
    """``obj`` as a Tensor: Tensors pass through; SciPy, pydata/sparse and torch tensors keep
    their layout unless ``fmt`` asks otherwise; other DLPack producers are shared as dense
    arrays; arrays and scalars are dense unless ``fmt`` is given."""
    if isinstance(obj, Tensor):
        return obj
    if sp.issparse(obj):
        return Tensor.from_scipy(obj, format=fmt, name=name)
    if is_pydata(obj) or is_torch(obj):
        t = from_pydata(obj, name) if is_pydata(obj) else from_torch(obj, name)
        return t if fmt is None or fmt.order != t.order or t.format == fmt else t.asformat(fmt)
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray):
        try:  # another library's dense array (JAX, CuPy...), shared through DLPack where it can be
            obj = np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise ArgumentError(f"{_label(name)}: its {type(obj).__name__} cannot be shared with NumPy "
                                f"({e}); copy it to a host array first") from None
    if obj is None or isinstance(obj, (str, bytes, dict, set)):
        raise ArgumentError(f"{_label(name)} of type {type(obj).__name__} is not a tensor")
    try:
        arr = np.asarray(obj)
    except ValueError as e:  # ragged nested lists
        raise ShapeError(f"{_label(name)} is not a rectangular array: {e}") from None
    if arr.dtype == object:
        raise DTypeError(f"{_label(name)} holds Python objects (dtype object), not numbers")
    if fmt is not None and fmt.order != arr.ndim:
        fmt = None  # the shape error is reported with index variables later
    return Tensor.from_numpy(arr, format=fmt, name=name)
