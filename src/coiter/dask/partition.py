"""Dask arrays of coiter Tensor blocks: partitioning tensors in memory, random blocks made
on the workers."""
from __future__ import annotations

import itertools
import math
import uuid
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask.highlevelgraph import HighLevelGraph

from ..errors import ArgumentError
from ..formats.format import FormatLike, as_format, csf, csr
from ..formats.storage import Storage
from ..operands import as_tensor
from ..tensor import Tensor, check_dtype, check_shape
from .chunks import empty_like_chunks

# entries per block when no chunks are given
BLOCK_ENTRIES = 1 << 22


def _array(name: str, graph: dict[tuple, Any], chunks: tuple[tuple[int, ...], ...],
           meta: Any) -> da.Array:
    return da.Array(HighLevelGraph.from_collections(name, graph, dependencies=()), name, chunks,
                    meta=meta)


def _default_chunks(shape: tuple[int, ...], entries: int) -> tuple[Any, ...]:
    """Blocks of the first mode holding about ``BLOCK_ENTRIES`` entries, other modes whole."""
    if not shape:
        return ()
    per_row = max(1, entries // max(1, shape[0]))
    rows = max(1, BLOCK_ENTRIES // per_row)
    return (rows,) + (-1,) * (len(shape) - 1)


def _slices(chunks: tuple[tuple[int, ...], ...]) -> list[list[slice]]:
    out = []
    for sizes in chunks:
        ends = np.cumsum((0,) + sizes)
        out.append([slice(int(a), int(b)) for a, b in zip(ends[:-1], ends[1:])])
    return out


def from_array(x: Any, chunks: Any = None, format: FormatLike | None = None) -> da.Array:
    """``x`` (a coiter Tensor, SciPy / pydata/sparse array or NumPy array) as a Dask array of
    blocks.

    ``chunks`` is Dask's: block sizes per mode (``(1000, -1)``: blocks of 1000 rows, columns
    whole; ``((3, 0, 5), (9,))``: explicit, uneven and empty blocks allowed). By default the
    first mode is split into blocks of about four million entries. Sparse blocks are coiter
    Tensors in ``format`` (default: ``x``'s); the row blocks of CSR and other formats whose
    first level is dense share ``x``'s index and value arrays. Dense input gives NumPy blocks.
    """
    t = as_tensor(x)
    if format is not None:
        t = t.asformat(as_format(format, t.order))
    normalized = da.core.normalize_chunks(
        _default_chunks(t.shape, t.nnz) if chunks is None else chunks, t.shape,
        dtype=t.dtype)
    if t.format.is_dense:
        return da.from_array(t.to_numpy(), chunks=normalized)
    name = f"coiter-array-{uuid.uuid4().hex}"
    graph = {(name,) + idx: t[tuple(s)]
             for idx, s in zip(itertools.product(*(range(len(c)) for c in normalized)),
                               itertools.product(*_slices(normalized)))}
    return _array(name, graph, normalized, empty_like_chunks(t))


def random(shape: Any, density: float, chunks: Any = None, format: FormatLike | None = None,
           dtype: Any = np.float64, seed: int = 0) -> da.Array:
    """A Dask array of random sparse blocks, each made by the worker that computes it (so no
    process holds the whole tensor): about ``density`` of each block's entries are stored,
    with values uniform in [0, 1). ``format`` defaults to CSR for matrices and CSF otherwise;
    ``seed`` and the block's position fix its entries."""
    dims = check_shape(shape)
    if not dims:
        raise ArgumentError("coiter.dask.random makes tensors of order >= 1")
    if not 0 <= density <= 1:
        raise ArgumentError(f"density must be in [0, 1], got {density!r}")
    fmt = as_format(format, len(dims), csr if len(dims) == 2 else csf(len(dims)))
    vtype = check_dtype(dtype)
    entries = int(density * math.prod(dims))
    normalized = da.core.normalize_chunks(
        _default_chunks(dims, entries) if chunks is None else chunks, dims, dtype=vtype)
    name = f"coiter-random-{uuid.uuid4().hex}"
    graph = {}
    for idx in itertools.product(*(range(len(c)) for c in normalized)):
        block_shape = tuple(c[k] for c, k in zip(normalized, idx))
        graph[(name,) + idx] = (_random_block, block_shape, density, fmt.to_string(),
                                vtype.str, (seed,) + idx)
    meta = Tensor((0,) * len(dims), format=fmt, dtype=vtype)
    return _array(name, graph, normalized, meta)


def _random_block(shape: tuple[int, ...], density: float, fmt: str, dtype: str,
                  seed: tuple[int, ...]) -> Tensor:
    rng = np.random.default_rng(list(seed))
    flat = _bernoulli_positions(rng, math.prod(shape), density)
    vals = rng.random(flat.shape[0]).astype(dtype)
    if len(shape) == 2:
        rows, cols = np.divmod(flat, shape[1])
        indptr = np.searchsorted(rows, np.arange(shape[0] + 1))
        index = np.int32 if max(shape[1], flat.shape[0]) < 2**31 else np.int64
        cols, indptr = cols.astype(index), indptr.astype(index)
        return Tensor.from_scipy(sp.csr_array((vals, cols, indptr), shape=shape), format=fmt)
    coords = np.stack(np.unravel_index(flat, shape))
    return Tensor._wrap(Storage.from_coords(coords, vals, shape, as_format(fmt, len(shape))))


def _bernoulli_positions(rng: np.random.Generator, size: int, density: float) -> np.ndarray:
    """The sorted positions in ``range(size)`` that independent draws of probability
    ``density`` keep: gaps between kept positions are geometric, so the work follows the
    entries, not ``size``, and nothing needs sorting."""
    if size == 0 or density == 0:
        return np.zeros(0, np.int64)
    expected = density * size
    pieces, last = [], -1
    while last < size - 1:
        gaps = rng.geometric(density, int(expected + 6 * math.sqrt(expected) + 16))
        positions = last + np.cumsum(gaps)
        pieces.append(positions)
        last = int(positions[-1])
    flat = np.concatenate(pieces)
    return flat[:np.searchsorted(flat, size)]
