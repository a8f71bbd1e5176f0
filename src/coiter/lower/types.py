"""Mapping NumPy element and index types to C types."""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError

VALUE_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
    np.dtype(np.float16): "_Float16",  # C23 / GCC >= 12, Clang >= 15 on x86-64 and AArch64
    np.dtype(np.int64): "int64_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int8): "int8_t",
    np.dtype(np.uint64): "uint64_t",
    np.dtype(np.uint32): "uint32_t",
    np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.complex128): "double _Complex",
    np.dtype(np.complex64): "float _Complex",
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


def typed_literal(value: bool | int | float | complex, dtype: np.dtype) -> bool | int | float | complex:
    """A literal converted to the kernel's computation type ``dtype`` as NumPy converts a
    Python scalar against an array (NEP 50): an int becomes a float in a floating kernel,
    and a value that does not fit the type is a DTypeError (NumPy's OverflowError), never
    a C constant the compiler truncates."""
    dtype = np.dtype(dtype)
    if isinstance(value, bool) or dtype.kind == "b":
        return value
    if dtype.kind in "fc" and isinstance(value, (int, float)):
        try:
            value = float(value)
        except OverflowError:
            raise DTypeError(f"the literal {value} is out of range for a {dtype} kernel") from None
        # in a float32 kernel the literal is a float32, as NumPy makes it
        if dtype == np.float32:
            with np.errstate(over="ignore"):  # beyond float32's range: inf, as in NumPy
                return float(np.float32(value))
        return value
    if dtype.kind in "iu" and isinstance(value, int):
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise DTypeError(f"the literal {value} is out of bounds for the {dtype} the kernel "
                             f"computes in [{info.min}, {info.max}]")
    return value
