"""Conversion between any two formats, by generated kernels.

* Same mode ordering: a generated copy kernel ``dst(i..) = src(i..)`` iterates
  the source and assembles the destination (append/insert), so every pair of
  level formats converts without format-specific code.
* Different mode ordering (transposition): the source is first copied into COO
  in its own ordering by a generated kernel, the coordinates are reordered
  lexicographically in the target ordering, and a second generated kernel packs
  that sorted COO into the target.
* Dense sources are packed from their nonzeros, so explicit zeros are not stored.
* Formats with a layout (blocked, DIA, ELL) and targets kernels cannot assemble
  directly (hashed levels) go through coordinates: the layout or the levels unpack
  the source and pack the target in NumPy (for DIA: find the occupied diagonals, then
  fill them).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..formats.format import Format, coo, dense
from ..formats.storage import Storage, fill_key
from ..notation.ast import Access, Assignment, IndexVar
from .kernel import StorageKernel

_copy_kernels: dict[tuple[Format, Format], Any] = {}


def _copy(storage: Storage, fmt: Format) -> Storage:
    key = (storage.format, fmt)  # not format strings: those do not show e.g. unordered levels
    kernel = _copy_kernels.get(key)
    if kernel is None:
        idx = tuple(IndexVar(f"i{m}") for m in range(fmt.order))
        asg = Assignment(Access("dst", idx), Access("src", idx))
        kernel = StorageKernel(asg, {"src": storage.format, "dst": fmt}, storage.vals.dtype)
        _copy_kernels[key] = kernel
    return kernel.run({"src": storage})[0]


def _sorted_coo(storage: Storage, ordering: tuple[int, ...]) -> Storage:
    """Reorder a COO storage's entries lexicographically by ``ordering``."""
    order = len(ordering)
    src_order = storage.format.ordering
    crds = [storage.levels[k]["crd"] for k in range(order)]
    by_mode = {src_order[k]: crds[k] for k in range(order)}
    nnz = int(storage.levels[0]["pos"][1])
    keys = [by_mode[m][:nnz] for m in reversed(ordering)]
    perm = np.lexsort(keys) if nnz else np.zeros(0, dtype=np.int64)
    fmt = coo(order, ordering)
    levels = []
    for k, m in enumerate(ordering):
        arrays = {"crd": np.ascontiguousarray(by_mode[m][:nnz][perm])}
        if k == 0:
            arrays["pos"] = np.array([0, nnz], dtype=storage.index_dtype)
        levels.append(arrays)
    return Storage(fmt, storage.shape, tuple(levels), np.ascontiguousarray(storage.vals[:nnz][perm]))


def convert(storage: Storage, fmt: Format) -> Storage:
    """``storage`` re-stored in ``fmt`` (same shape, values, index width and fill value;
    where ``fmt`` cannot hold a fill other than 0, Format.pads, every entry is stored and
    the fill becomes 0)."""
    if storage.format == fmt:
        return storage
    if fmt.pads and fill_key(storage.fill) != fill_key(0):
        return _convert(_convert(storage, dense(fmt.order)), fmt)
    return replace(_convert(storage, fmt), fill=storage.fill)


def _convert(storage: Storage, fmt: Format) -> Storage:
    if fmt.is_dense and storage.fill != 0:  # the absent entries become stored fills
        coords, vals = storage.to_coords()
        dense = np.full(storage.shape, storage.fill, dtype=storage.vals.dtype)
        dense[tuple(coords)] = 0  # stored entries (several at one coordinate add up)
        np.add.at(dense, tuple(coords), vals)
        flat = np.ascontiguousarray(dense.transpose(fmt.ordering)).reshape(-1)
        return Storage(fmt, storage.shape, tuple({} for _ in fmt.levels), flat)
    via_coords = storage.format.layout is not None or not fmt.assemblable
    if storage.format.is_dense or fmt.order == 0 or via_coords:
        coords, vals = storage.to_coords()
        keep = vals != storage.fill  # entries a sparse format need not store
        return Storage.from_coords(coords[:, keep], vals[keep], storage.shape, fmt,
                                   storage.index_dtype if storage.format.levels else None)
    stored = replace(storage, fill=0)  # a copy of the stored entries (the caller re-fills)
    if storage.format.ordering == fmt.ordering:
        return _copy(stored, fmt)
    as_coo = _copy(stored, coo(fmt.order, storage.format.ordering))
    return _copy(_sorted_coo(as_coo, fmt.ordering), fmt)
