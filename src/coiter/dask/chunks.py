"""coiter Tensors as Dask array chunks.

Registering :class:`~coiter.Tensor` as a chunk type lets Dask arrays hold coiter tensors in
their blocks; with NumPy-style slicing (``Tensor[0:5, :]``) and the concatenation below
Dask's own operations on such arrays work: ``compute`` (blocks joined into one Tensor),
``persist``, ``rechunk``, ``map_blocks``, ``blockwise``, ``blocks[...]`` and slicing.
Dask's memory accounting (spilling, ``memory_limit``) sees a Tensor's real size.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from dask.array.chunk_types import register_chunk_type
from dask.array.dispatch import concatenate_lookup
from dask.sizeof import sizeof

from ..formats.slicing import concatenate as concatenate_storages
from ..operands import as_tensor
from ..tensor import Tensor

register_chunk_type(Tensor)


@sizeof.register(Tensor)
def nbytes(t: Tensor) -> int:
    """Bytes of a Tensor's arrays: what Dask counts against a worker's memory."""
    st = t.storage
    return int(st.vals.nbytes + sum(a.nbytes for level in st.levels for a in level.values()))


@concatenate_lookup.register(Tensor)
def concatenate(blocks: Sequence[Any], axis: int = 0) -> Tensor:
    """Blocks (Tensors, or arrays Dask mixes in) joined along ``axis`` in the first Tensor's
    format."""
    tensors = [as_tensor(b) for b in blocks]
    first = next((t for t in tensors if not t.format.is_dense), tensors[0])
    storages = [(t if t.format == first.format else t.asformat(first.format)).storage
                for t in tensors]
    return Tensor._wrap(concatenate_storages(storages, axis))


def empty_like_chunks(block: Any) -> Any:
    """A block of the same kind, order, type and format with no entries (Dask's ``meta``)."""
    if isinstance(block, np.ndarray):
        return np.empty((0,) * block.ndim, dtype=block.dtype)
    return block[(slice(0, 0),) * block.ndim] if block.ndim else block
