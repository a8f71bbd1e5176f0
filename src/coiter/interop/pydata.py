"""pydata/sparse arrays in and out, sharing arrays where the layouts match.

A ``sparse.COO`` is coiter's COO format: its coordinate rows become the levels' coordinate
arrays and its data the values, without a copy when the entries are in order (as pydata
keeps them). A ``sparse.GCXS`` matrix compressed along axis 0 is CSR, and along axis 1
CSC, again without a copy. Other arrays go through their COO form. pydata/sparse is not a
dependency: these functions only touch objects the caller already has, and import it only
to build one.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import FormatError
from ..formats.format import csc, csr
from ..tensor import Tensor
from .foreign import compressed_arrays, compressed_matrix, coo_tensor


def is_pydata(obj: Any) -> bool:
    """Whether ``obj`` is a pydata/sparse array (without importing pydata/sparse)."""
    return type(obj).__module__.split(".")[0] == "sparse" and hasattr(obj, "fill_value")


def from_pydata(x: Any, name: str | None = None) -> Tensor:
    """The coiter Tensor of pydata/sparse array ``x`` (COO, GCXS or anything with ``tocoo``),
    keeping its fill value."""
    fill = x.fill_value
    t = None
    if type(x).__name__ == "GCXS" and x.ndim == 2 and tuple(x.compressed_axes) in ((0,), (1,)):
        fmt = csr if tuple(x.compressed_axes) == (0,) else csc
        try:
            t = compressed_matrix(x.shape, fmt, x.indptr, x.indices, x.data, name)
        except FormatError:  # unsorted or repeated coordinates: through COO
            pass
    if t is None:
        if not hasattr(x, "coords"):
            x = x.tocoo()
        if x.ndim == 0:
            return Tensor.from_numpy(np.asarray(x.todense()), name=name)
        coords, data = np.asarray(x.coords), np.asarray(x.data)
        try:
            t = coo_tensor(x.shape, coords, data, name) if coords.dtype == np.int64 else None
        except FormatError:  # entries out of order
            pass
        if t is None:
            return Tensor.from_coo(coords, data, x.shape, name=name, fill_value=fill)
    return t.with_fill(fill) if fill != 0 else t


def to_pydata(t: Tensor) -> Any:
    """``t`` as a pydata/sparse array: GCXS sharing CSR/CSC arrays, COO otherwise."""
    import sparse

    s = t.storage
    if s.format in (csr, csc):
        pos, crd, vals = compressed_arrays(t)
        return sparse.GCXS((vals, crd, pos), shape=t.shape, compressed_axes=(0,) if s.format == csr else (1,),
                           fill_value=s.fill)
    coords, vals = s.to_coords()
    return sparse.COO(coords, vals, shape=t.shape, fill_value=s.fill)
