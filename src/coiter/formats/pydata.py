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
from ..tensor import Tensor
from .format import coo, csc, csr


def is_pydata(obj: Any) -> bool:
    """Whether ``obj`` is a pydata/sparse array (without importing pydata/sparse)."""
    return type(obj).__module__.split(".")[0] == "sparse" and hasattr(obj, "fill_value")


def from_pydata(x: Any, name: str | None = None) -> Tensor:
    """The coiter Tensor of pydata/sparse array ``x`` (COO, GCXS or anything with ``tocoo``),
    keeping its fill value."""
    fill = x.fill_value
    if type(x).__name__ == "GCXS" and x.ndim == 2 and tuple(x.compressed_axes) in ((0,), (1,)):
        fmt = csr if tuple(x.compressed_axes) == (0,) else csc
        pos, crd = np.asarray(x.indptr), np.asarray(x.indices)
        if pos.dtype != crd.dtype or pos.dtype not in (np.int32, np.int64):
            pos, crd = pos.astype(np.int64), crd.astype(np.int64)
        try:
            t = Tensor.from_arrays(x.shape, fmt, [{}, {"pos": pos, "crd": crd}], np.asarray(x.data), name)
        except FormatError:  # unsorted or repeated columns: through COO
            pass
        else:
            return t.with_fill(fill) if fill != 0 else t
    if not hasattr(x, "coords"):
        x = x.tocoo()
    coords, data = np.asarray(x.coords), np.asarray(x.data)
    if x.ndim == 0:
        return Tensor.from_numpy(np.asarray(x.todense()), name=name)
    fmt = coo(x.ndim)
    levels: list[dict[str, Any]] = [{"pos": np.array([0, data.shape[0]], dtype=np.int64),
                                     "crd": coords[0]}]
    levels += [{"crd": coords[m]} for m in range(1, x.ndim)]
    if coords.dtype == np.int64:
        try:
            t = Tensor.from_arrays(x.shape, fmt, levels if x.ndim > 1 else levels[:1], data, name)
        except FormatError:  # entries out of order: sorted by from_coo
            pass
        else:
            return t.with_fill(fill) if fill != 0 else t
    return Tensor.from_coo(coords, data, x.shape, name=name, fill_value=fill)


def to_pydata(t: Tensor) -> Any:
    """``t`` as a pydata/sparse array: GCXS sharing CSR/CSC arrays, COO otherwise."""
    import sparse

    s = t.storage
    if s.format in (csr, csc):
        level = s.levels[1]
        nnz = int(level["pos"][-1])
        return sparse.GCXS((s.vals[:nnz], level["crd"][:nnz], level["pos"]), shape=t.shape,
                           compressed_axes=(0,) if s.format == csr else (1,), fill_value=s.fill)
    coords, vals = s.to_coords()
    return sparse.COO(coords, vals, shape=t.shape, fill_value=s.fill)
