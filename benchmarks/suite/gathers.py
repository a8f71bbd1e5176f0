"""The floor under SpMV on inputs larger than the last-level cache: the time of a loop that
only reads A's column indices and x at them (``gathers.c``, compiled once per process with
``$CC -O3 -march=native -fopenmp``), at the thread count OpenMP takes from the environment.
Where x is read at random, each read brings a whole cache line, and this loop, not the
STREAM triad over the minimum bytes, says how fast an SpMV on those arrays can be. On inputs
that fit in the caches it is no bound: there the loop's own costs (its parallel region, its
plain form) outweigh the reads, and tuned SpMVs pass it."""
from __future__ import annotations

import ctypes
import functools
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .environment import c_compile_command, failure

SOURCE = Path(__file__).with_name("gathers.c")


@functools.cache
def _library() -> ctypes.CDLL | str:
    """The compiled loop, or why it could not be built."""
    with tempfile.TemporaryDirectory(prefix="coiter-gathers-") as tmp:
        lib = Path(tmp) / "gathers.so"
        cmd = c_compile_command(SOURCE, lib, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            # loaded before the folder goes: the mapping outlives the file
            library = ctypes.CDLL(str(lib))
        except (OSError, subprocess.CalledProcessError) as exc:
            return failure(exc)
    fn = library.gathers_best_s
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int,
                   ctypes.POINTER(ctypes.c_double)]
    return library


def measure(indices: np.ndarray, x: np.ndarray, reps: int = 5) -> dict[str, Any]:
    """``{"best_s": seconds, "sum": sum of x[indices]}`` for the loop on these arrays, or
    ``{"error": ...}`` where it cannot be built."""
    library = _library()
    if isinstance(library, str):
        return {"error": library}
    if indices.dtype not in (np.int32, np.int64) or x.dtype != np.float64:
        raise TypeError(f"int32/int64 indices and float64 x, not {indices.dtype} and {x.dtype}")
    crd, vec = np.ascontiguousarray(indices), np.ascontiguousarray(x)
    if crd.size and (crd.min() < 0 or crd.max() >= vec.shape[0]):
        raise ValueError(f"indices outside x's {vec.shape[0]} entries")
    total = ctypes.c_double()
    best = library.gathers_best_s(crd.ctypes.data, crd.itemsize, crd.shape[0], vec.ctypes.data,
                                  reps, ctypes.byref(total))
    return {"best_s": best, "sum": total.value}
