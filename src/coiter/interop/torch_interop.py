"""torch tensors in and out, sharing memory where the layouts match.

A CPU ``torch.sparse_csr`` / ``sparse_csc`` matrix is CSR / CSC and a coalesced
``torch.sparse_coo`` tensor is coiter's COO, all without copying; a dense (strided) tensor
goes through DLPack, as any DLPack producer's does (:func:`coiter.operands.as_tensor`).
torch is not a dependency: nothing here imports it until asked to build a torch tensor.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError, FormatError
from ..formats.format import csc, csr
from ..tensor import Tensor
from .foreign import compressed_arrays, compressed_matrix, coo_tensor


def is_torch(obj: Any) -> bool:
    """Whether ``obj`` is a torch tensor (without importing torch)."""
    return type(obj).__module__.split(".")[0] == "torch" and hasattr(obj, "layout")


def from_torch(t: Any, name: str | None = None) -> Tensor:
    """The coiter Tensor of torch tensor ``t`` (CPU; sparse CSR, CSC, COO or dense)."""
    if getattr(t, "device", None) is not None and str(t.device) != "cpu":
        raise ArgumentError(f"operand {name or ''} is a torch tensor on {t.device}; move it with .cpu() first")
    layout = str(t.layout)
    if layout in ("torch.sparse_csr", "torch.sparse_csc"):
        fmt = csr if layout == "torch.sparse_csr" else csc
        pos = (t.crow_indices() if fmt == csr else t.ccol_indices()).numpy()
        crd = (t.col_indices() if fmt == csr else t.row_indices()).numpy()
        return compressed_matrix(tuple(t.shape), fmt, pos, crd, t.values().numpy(), name)
    if layout == "torch.sparse_coo":
        if not t.is_coalesced():
            t = t.coalesce()
        coords, data = t.indices().numpy(), t.values().numpy()
        if data.ndim != 1:
            raise FormatError(f"operand {name or ''}: hybrid torch COO tensors (dense values per entry) "
                              "are not supported; convert with .to_dense() or a full sparse_dim")
        return coo_tensor(tuple(t.shape), coords, data, name)
    return Tensor.from_numpy(np.from_dlpack(t.detach().resolve_conj()), name=name)


def to_torch(t: Tensor) -> Any:
    """``t`` as a torch tensor: CSR/CSC sharing their arrays, COO for other sparse formats
    (coordinates in storage order), dense as a view of the values."""
    import torch

    s = t.storage
    if s.format.is_dense:
        return torch.from_numpy(t.to_numpy())
    if s.fill != 0:
        raise FormatError(f"{t.name}: torch's sparse tensors have no fill value; {t.name}'s is {s.fill}")
    if s.format in (csr, csc):
        parts = [torch.from_numpy(a) for a in compressed_arrays(t)]
        build = torch.sparse_csr_tensor if s.format == csr else torch.sparse_csc_tensor
        # coiter validated these arrays when they were built: torch need not check again
        return build(*parts, size=t.shape, check_invariants=False)
    coords, vals = s.to_coords()
    return torch.sparse_coo_tensor(torch.from_numpy(np.ascontiguousarray(coords)), torch.from_numpy(vals),
                                   size=t.shape).coalesce()
