"""Mapping NumPy element and index types to C types."""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError

VALUE_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
    np.dtype(np.int64): "int64_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.complex128): "double _Complex",
    np.dtype(np.bool_): "bool",
}


def c_value_type(dtype: np.dtype) -> str:
    try:
        return VALUE_TYPES[np.dtype(dtype)]
    except KeyError:
        raise DTypeError(
            f"unsupported element type {np.dtype(dtype)}; use one of "
            + ", ".join(str(d) for d in VALUE_TYPES)
        ) from None


def c_index_type(dtype: np.dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == np.int32:
        return "int32_t"
    if dtype == np.int64:
        return "int64_t"
    raise DTypeError(f"index arrays must be int32 or int64, got {dtype}")
