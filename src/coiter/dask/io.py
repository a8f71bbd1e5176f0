"""Reading Matrix Market and FROSTT files as Dask arrays of row blocks, in parallel.

Every block is read by its own task, which streams the whole file (gzip'ed or not) in
pieces of ``PIECE_BYTES`` and keeps only the entries of its rows: no process ever holds
more than its block and one piece, whatever the file's size. A symmetric Matrix Market file
gives each block the mirrored entries of its rows too.
"""
from __future__ import annotations

import io
import math
import os
import uuid
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

import dask
import dask.array as da
import numpy as np
from dask.highlevelgraph import HighLevelGraph

from ..errors import ArgumentError, FormatError
from ..formats.format import FormatLike, as_format, csf, csr
from ..interop.io import PathLike, file_kind, open_file
from ..formats.storage import Storage
from ..tensor import Tensor
from .partition import BLOCK_ENTRIES

PIECE_BYTES = 1 << 25

_FIELDS = {"real": 1, "double": 1, "integer": 1, "complex": 2, "pattern": 0}
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")


@dataclass(frozen=True)
class Header:
    """What a block reader needs to know of the file."""

    path: str
    gz: bool
    kind: str  # "mtx" or "tns"
    shape: tuple[int, ...]
    entries: int  # lines of entries
    field: str = "real"
    symmetry: str = "general"


def read(path: PathLike, chunks: Any = None, format: FormatLike | None = None,
         shape: tuple[int, ...] | None = None) -> da.Array:
    """A ``.mtx`` or ``.tns`` file (``.gz`` allowed) as a Dask array of row blocks (blocks of
    the first mode), each a coiter Tensor in ``format`` (CSR for matrices, CSF for tensors by
    default) read by its own task.

    ``chunks`` gives the rows per block (an int) or every block's rows (a tuple); by default
    blocks hold about four million entries. A ``.tns`` file has no header: its shape is found
    by one task streaming the file, unless ``shape`` gives it.
    """
    where = os.fspath(path)
    kind, gz = file_kind(path)
    if kind == "mtx":
        header = _mtx_header(where, gz)
    elif kind == "tns":
        header = dask.delayed(_tns_header)(where, gz).compute() if shape is None \
            else Header(where, gz, "tns", tuple(int(d) for d in shape), 0)
    else:
        raise FormatError(f"{where}: coiter.dask.read reads .mtx and .tns files; read {kind} "
                          "files with coiter.read and partition them with coiter.dask.from_array")
    order = len(header.shape)
    fmt = as_format(format, order, csr if order == 2 else csf(order))
    if chunks is None:
        entries = header.entries or BLOCK_ENTRIES
        chunks = max(1, math.ceil(header.shape[0] * BLOCK_ENTRIES / max(1, entries)))
    try:
        rows = da.core.normalize_chunks((chunks,) + (-1,) * (order - 1), header.shape,
                                        dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"{where}: chunks gives the rows per block (an int) or every "
                            f"block's rows (a tuple adding up to {header.shape[0]}), got "
                            f"{chunks!r}") from e
    name = f"coiter-read-{uuid.uuid4().hex}"
    graph = {}
    start = 0
    for b, n in enumerate(rows[0]):
        graph[(name, b) + (0,) * (order - 1)] = (_read_block, header, start, start + n,
                                                 fmt.to_string())
        start += n
    dtype = np.complex128 if header.field == "complex" else (
        np.int64 if header.field == "integer" else np.float64)
    meta = Tensor((0,) * order, format=fmt, dtype=dtype)
    return da.Array(HighLevelGraph.from_collections(name, graph, dependencies=()), name, rows,
                    meta=meta)


def _mtx_header(path: str, gz: bool) -> Header:
    with open_file(path, "rb", gz) as f:
        banner = f.readline().decode("ascii", errors="replace").split()
        if len(banner) != 5 or banner[0].lower() != "%%matrixmarket":
            raise FormatError(f"{path}: not a Matrix Market file (its first line is "
                              f"{' '.join(banner)!r})")
        layout, field, symmetry = (w.lower() for w in banner[2:])
        if layout != "coordinate":
            raise FormatError(f"{path}: a dense ({layout}) Matrix Market file; read it with "
                              "coiter.read")
        if field not in _FIELDS or symmetry not in _SYMMETRIES:
            raise FormatError(f"{path}: unknown Matrix Market field or symmetry {field} {symmetry}")
        line = f.readline()
        while line.startswith(b"%") or not line.strip():
            line = f.readline()
        sizes = line.split()
    if len(sizes) != 3:
        raise FormatError(f"{path}: the size line should be 'rows columns entries'")
    rows, cols, entries = (int(s) for s in sizes)
    return Header(path, gz, "mtx", (rows, cols), entries, field, symmetry)


def _tns_header(path: str, gz: bool) -> Header:
    """The shape (largest coordinate of every mode) and entry count of a ``.tns`` file."""
    largest: np.ndarray | None = None
    entries = 0
    for table in _tables(Header(path, gz, "tns", (), 0)):
        top = table[:, :-1].max(axis=0)
        largest = top if largest is None else np.maximum(largest, top)
        entries += table.shape[0]
    if largest is None:
        raise FormatError(f"{path}: no entries, so the order and shape are unknown")
    return Header(path, gz, "tns", tuple(int(d) for d in largest), entries)


def _pieces(h: Header) -> Iterator[bytes]:
    """The entry lines of the file in pieces of whole lines."""
    with open_file(h.path, "rb", h.gz) as f:
        if h.kind == "mtx":  # banner, comments, size line
            line = f.readline()
            while line.startswith(b"%") or not line.strip():
                line = f.readline()
        rest = b""
        while True:
            data = f.read(PIECE_BYTES)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                yield data[:cut]
        if rest.strip():
            yield rest


def _tables(h: Header) -> Iterator[np.ndarray]:
    """The entries as float64 tables (one row per line)."""
    for piece in _pieces(h):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # a piece of comments only
                table = np.loadtxt(io.BytesIO(piece), dtype=np.float64,
                                   comments="%" if h.kind == "mtx" else "#", ndmin=2)
        except ValueError as e:
            raise FormatError(f"{h.path}: {e}") from e
        if table.shape[0]:
            yield table


def _read_block(h: Header, start: int, stop: int, fmt: str) -> Tensor:
    """Rows ``start:stop`` of the file as a Tensor in ``fmt``."""
    order = len(h.shape)
    coords: list[np.ndarray] = []
    values: list[np.ndarray] = []
    for table in _tables(h):
        crd = table[:, :order].astype(np.int64).T - 1
        # every block checks every line, so that no bad line is dropped for being in no block
        if crd.min() < 0 or np.any(crd.max(axis=1) >= np.asarray(h.shape)):
            raise FormatError(f"{h.path}: a coordinate lies outside the shape {h.shape}")
        vals = _values(h, table, order)
        keep = (crd[0] >= start) & (crd[0] < stop)
        coords.append(crd[:, keep])
        values.append(vals[keep])
        if h.symmetry != "general":
            off = crd[0] != crd[1]
            mirror = off & (crd[1] >= start) & (crd[1] < stop)
            coords.append(crd[::-1][:, mirror])
            values.append(_mirrored(h.symmetry, vals[mirror]))
    c = np.concatenate(coords, axis=1) if coords else np.zeros((order, 0), dtype=np.int64)
    v = np.concatenate(values) if values else np.zeros(0)
    c[0] -= start
    shape = (stop - start,) + h.shape[1:]
    return Tensor._wrap(Storage.from_coords(c, v, shape, as_format(fmt, order)))


def _values(h: Header, table: np.ndarray, order: int) -> np.ndarray:
    if h.kind == "tns":
        return table[:, order]
    if h.field == "pattern":
        return np.ones(table.shape[0])
    if h.field == "complex":
        return table[:, order] + 1j * table[:, order + 1]
    if h.field == "integer":
        return table[:, order].astype(np.int64)
    return table[:, order]


def _mirrored(symmetry: str, vals: np.ndarray) -> np.ndarray:
    if symmetry == "skew-symmetric":
        return -vals
    if symmetry == "hermitian":
        return np.conj(vals)
    return vals
