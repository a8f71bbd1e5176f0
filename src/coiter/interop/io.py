"""Reading and writing tensors: Matrix Market (``.mtx``) and FROSTT (``.tns``), optionally
gzip'ed; Rutherford-Boeing (``.rb``) is read (:mod:`coiter.interop.rb`), as CSR by default;
coiter's own binary files (``.npz``, :mod:`coiter.interop.npz`) keep any format as it is.

* ``.mtx`` goes through SciPy (symmetric files come back expanded, pattern files
  with value 1.0); coordinate files default to CSR, dense ``array`` files to dense.
* ``.tns`` has one line per entry: 1-based integer coordinates then the value;
  ``#`` starts a comment. The shape is the largest coordinate of every mode and
  the order is the number of columns minus one; the default format is COO.
"""
from __future__ import annotations

import gzip
import inspect
import io
import os
import warnings
from typing import IO, Literal

import numpy as np
import scipy.io

from ..errors import DTypeError, FormatError
from ..formats.format import FormatLike, as_format, coo, csr
from ..tensor import Tensor
from .npz import load_npz, save_npz
from .rb import read_rb

PathLike = str | os.PathLike[str]
FileKind = Literal["mtx", "tns", "rb", "npz"]

_TNS_ROWS_PER_WRITE = 1 << 18  # bounds the text built in memory at once


def file_kind(path: PathLike) -> tuple[FileKind, bool]:
    """File type from the suffix, and whether the file is gzip'ed."""
    lower = os.fspath(path).lower()
    gz = lower.endswith(".gz")
    base = lower[:-3] if gz else lower
    if lower.endswith(".npz"):
        return "npz", False
    for kind in ("mtx", "tns", "rb"):
        if base.endswith("." + kind):
            return kind, gz  # type: ignore[return-value]
    raise FormatError(f"cannot tell the file type of {os.fspath(path)!r}: expected .npz, or .mtx, "
                      ".tns or .rb, optionally .gz")


def open_file(path: PathLike, mode: Literal["rb", "wb"], gz: bool) -> IO[bytes]:
    if gz:
        return gzip.open(path, mode, compresslevel=6)  # type: ignore[return-value]
    return open(path, mode)


def read(path: PathLike, format: FormatLike | None = None, name: str | None = None) -> Tensor:
    """Load a ``.mtx``/``.tns``/``.rb`` file (``.gz`` allowed) or coiter's ``.npz`` as a Tensor
    in ``format`` (a ``.npz`` file keeps its own format unless ``format`` asks for another)."""
    kind, gz = file_kind(path)
    if kind == "npz":
        t = load_npz(path, name)
        return t if format is None else t.asformat(as_format(format, t.order))
    with open_file(path, "rb", gz) as f:
        data = f.read()
    if kind == "mtx":
        return _read_mtx(data, os.fspath(path), format, name)
    if kind == "rb":
        m = read_rb(data.decode("ascii", errors="replace"), os.fspath(path))
        return Tensor.from_scipy(m, format=as_format(format, 2, csr), name=name)
    return _read_tns(data, os.fspath(path), format, name)


def write(path: PathLike, tensor: Tensor, compressed: bool = False) -> None:
    """Save ``tensor`` as ``.mtx`` (matrices only) or ``.tns``, gzip'ed when ``path`` ends in
    ``.gz``; or as coiter's ``.npz`` in its own format (``compressed`` deflates it)."""
    kind, gz = file_kind(path)
    if kind == "npz":
        save_npz(path, tensor, compressed)
        return
    if kind == "rb":
        raise FormatError(f"{os.fspath(path)!r}: .rb files are read, not written; write .mtx")
    if kind == "mtx":
        matrix = tensor.to_scipy()  # raises FormatError unless order 2, before the file is created
        with open_file(path, "wb", gz) as f:
            # "general" skips SciPy's symmetry detection, which costs a pass and changes the layout.
            scipy.io.mmwrite(f, matrix, symmetry="general")
        return
    if tensor.dtype.kind == "c":
        raise DTypeError(f"{tensor.name}: .tns files hold real values, not {tensor.dtype}")
    with open_file(path, "wb", gz) as f:
        _write_tns(f, tensor)


# --------------------------------------------------------------------------- .mtx


# sparse arrays where mmread can return them: from SciPy 1.18 on, leaving out `spmatrix` is deprecated
_MMREAD_ARRAYS = {"spmatrix": False} if "spmatrix" in inspect.signature(scipy.io.mmread).parameters else {}


def _read_mtx(data: bytes, where: str, format: FormatLike | None, name: str | None) -> Tensor:
    try:
        m = scipy.io.mmread(io.BytesIO(data), **_MMREAD_ARRAYS)
    except ValueError as e:
        raise FormatError(f"{where}: {e}") from e
    if isinstance(m, np.ndarray):
        return Tensor.from_numpy(m, format=format, name=name)
    return Tensor.from_scipy(m, format=as_format(format, 2, csr), name=name)


# --------------------------------------------------------------------------- .tns


def _read_tns(data: bytes, where: str, format: FormatLike | None, name: str | None) -> Tensor:
    table = _parse_tns(data, where)
    order = table.shape[1] - 1
    coords_f = table[:, :order].T
    if coords_f.size and np.abs(coords_f).max() >= 2.0**53:
        coords = _tns_wide_coordinates(data, where, order)  # float64 rounded them
    else:
        coords = coords_f.astype(np.int64)
        if np.any(coords != coords_f):
            raise FormatError(f"{where}: coordinates must be integers")
    if coords.size and coords.min() < 1:
        raise FormatError(f"{where}: coordinates are 1-based, found {coords.min()}")
    coords -= 1
    shape = tuple(int(d) + 1 for d in coords.max(axis=1)) if order else ()
    fmt = as_format(format, order, coo(order) if order else None)
    return Tensor.from_coo(coords, table[:, order], shape, format=fmt, name=name)


def _parse_tns(data: bytes, where: str) -> np.ndarray:
    """The entries as an (nnz, order + 1) float64 table."""
    # NumPy 2's loadtxt is a C parser; on an in-memory buffer it beat np.fromstring and
    # str.split here, and it checks that every line has the same number of columns.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
            table = np.loadtxt(io.BytesIO(data), dtype=np.float64, comments="#", ndmin=2)
    except ValueError as e:
        raise FormatError(f"{where}: {e}") from e
    if table.shape[0] == 0:
        raise FormatError(f"{where}: no entries, so the order and shape are unknown")
    return table


def _tns_wide_coordinates(data: bytes, where: str, order: int) -> np.ndarray:
    """The coordinate columns parsed as integers (order × nnz): exact beyond 2**53."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return np.loadtxt(io.BytesIO(data), dtype=np.int64, comments="#", ndmin=2,
                              usecols=range(order)).T.copy()
    except (ValueError, OverflowError) as e:
        raise FormatError(f"{where}: coordinates must be integers below 2**63 ({e})") from e


def _write_tns(f: IO[bytes], tensor: Tensor) -> None:
    s = tensor.storage
    coords, vals = s.to_coords()
    if s.format.is_dense:  # dense storage holds every entry; the file lists nonzeros
        keep = vals != 0
        coords, vals = coords[:, keep], vals[keep]
    # Integers (and bools) in %d so that values beyond 2**53 stay exact.
    value_fmt = "%d" if vals.dtype.kind in "biu" else "%.17g"
    line = " ".join(["%d"] * s.format.order + [value_fmt]) + "\n"
    for start in range(0, vals.shape[0], _TNS_ROWS_PER_WRITE):
        stop = start + _TNS_ROWS_PER_WRITE
        cols = [(c[start:stop] + 1).tolist() for c in coords] + [vals[start:stop].tolist()]
        f.write("".join(map(line.__mod__, zip(*cols))).encode("ascii"))

