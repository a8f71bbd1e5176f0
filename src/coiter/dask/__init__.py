"""coiter kernels over Dask arrays: partitioned sparse tensors on a Dask cluster.

``pip install -e ".[dask]"``. Sparse blocks are coiter Tensors registered as a Dask chunk
type (:mod:`coiter.dask.chunks`); :func:`evaluate` runs any assignment block by block, with
one compiled kernel per process; :func:`read` reads Matrix Market and FROSTT files in row
blocks in parallel. Everything returns lazy Dask arrays, computed by whatever scheduler is
active (a ``dask.distributed.Client`` when one is connected).
"""
from __future__ import annotations

try:
    import dask.array  # noqa: F401
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("coiter.dask needs Dask: pip install 'coiter[dask]' "
                      "(dask[array,distributed])") from e

from .chunks import concatenate
from .compute import evaluate
from .io import read
from .kernels import add, mttkrp, multiply, sddmm, spgemm, spmm, spmv, ttv
from .partition import from_array, random

__all__ = ["add", "concatenate", "evaluate", "from_array", "mttkrp", "multiply", "random", "read",
           "sddmm", "spgemm", "spmm", "spmv", "ttv"]
