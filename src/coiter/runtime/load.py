"""The cores other processes leave free.

The C extension samples, once per 100 ms and process-wide, the CPU time that the CPUs this
process may run on spent busy and its own (``_load.c``), the first time as it loads. Each
kernel library gets its estimate as the runtime loads it (:func:`install`;
``coiter_use_load`` in the C prelude), and calls at the default thread count use no more
threads than the cores the others left free (docs/performance.md, "Cores other processes
use"). Without the extension kernels keep only their late-team back-off.

Each library also gets the address of one cell holding the time of the process's last
kernel call (``coiter_share_last_call``): a small call after 5 ms without any runs on one
thread, as OpenMP's workers may be asleep ("Calls after an idle pause").
"""
from __future__ import annotations

import ctypes

try:
    from . import _fastcall
except ImportError:  # built without the extension
    _fastcall = None  # type: ignore[assignment]

_FREE_CORES = _fastcall.load_function() if _fastcall is not None else None


# the time of the process's last kernel call (coiter_clock's nanoseconds), one cell that every
# kernel library reads and writes (coiter_share_last_call in the C prelude)
_LAST_CALL = ctypes.c_int64(0)


def install(library: ctypes.CDLL) -> None:
    """Hand a kernel library the process's last-call cell (``coiter_share_last_call``) and
    the load estimate (``coiter_use_load``), both present where the library was built with
    OpenMP."""
    if hasattr(library, "coiter_share_last_call"):
        library.coiter_share_last_call.argtypes = [ctypes.c_void_p]
        library.coiter_share_last_call.restype = None
        library.coiter_share_last_call(ctypes.addressof(_LAST_CALL))
    if _FREE_CORES is None or not hasattr(library, "coiter_use_load"):
        return
    library.coiter_use_load.argtypes = [ctypes.c_void_p]
    library.coiter_use_load.restype = None
    library.coiter_use_load(_FREE_CORES)
