"""Coercing user operands (Tensor, NumPy, SciPy, Python scalars) to Tensors."""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .formats.format import Format
from .tensor import Tensor


def as_tensor(obj: Any, fmt: Format | None = None, name: str | None = None) -> Tensor:
    """``obj`` as a Tensor: Tensors pass through; SciPy keeps its layout unless
    ``fmt`` asks otherwise; arrays and scalars are dense unless ``fmt`` is given."""
    if isinstance(obj, Tensor):
        return obj
    if sp.issparse(obj):
        return Tensor.from_scipy(obj, format=fmt, name=name)
    arr = np.asarray(obj)
    if arr.dtype == object:
        raise TypeError(f"operand {name} of type {type(obj).__name__} is not a tensor")
    if fmt is not None and fmt.order != arr.ndim:
        fmt = None  # the shape error is reported with index variables later
    return Tensor.from_numpy(arr, format=fmt, name=name)
