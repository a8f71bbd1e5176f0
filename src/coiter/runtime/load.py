"""The cores other processes leave free.

The C extension samples, once per 100 ms and process-wide, the CPU time that the CPUs this
process may run on spent busy and its own (``_load.c``), the first time as it loads. Each
kernel library gets its estimate as the runtime loads it (:func:`install`;
``coiter_use_load`` in the C prelude), and calls at the default thread count use no more
threads than the cores the others left free (docs/performance.md, "Cores other processes
use"). Without the extension kernels keep only their late-team back-off.
"""
from __future__ import annotations

import ctypes

try:
    from . import _fastcall
except ImportError:  # built without the extension
    _fastcall = None  # type: ignore[assignment]

_FREE_CORES = _fastcall.load_function() if _fastcall is not None else None


def install(library: ctypes.CDLL) -> None:
    """Hand a kernel library the load estimate (``coiter_use_load``, present where the
    library was built with OpenMP)."""
    if _FREE_CORES is None or not hasattr(library, "coiter_use_load"):
        return
    library.coiter_use_load.argtypes = [ctypes.c_void_p]
    library.coiter_use_load.restype = None
    library.coiter_use_load(_FREE_CORES)
