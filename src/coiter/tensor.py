"""The user-facing :class:`Tensor`: a Storage plus a name, constructors and the Python DSL.

A Tensor owns one :class:`~coiter.formats.storage.Storage`. Constructors from
NumPy and SciPy share the caller's arrays whenever the requested format lays the
data out the same way (dense C-order arrays, canonical CSR/CSC), so handing data
to a kernel costs only validation.

The DSL follows TACO's Python API: ``A[i, j] = B[i, k] * C[k, j]`` records the
assignment on ``A`` and computes it the first time ``A``'s data is needed.

Computing needs the layers above this module (:mod:`coiter.api` compiles the DSL's
assignments, :mod:`coiter.lazy` builds the operators' expressions); they lend what the Tensor
needs as a :class:`Frontend` that the package connects on import, so that imports point down
the pipeline only.
"""
from __future__ import annotations

from collections import OrderedDict

import functools
import itertools
import math
import operator
import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
import scipy.sparse as sp

from .array_methods import ArrayMethods
from .errors import ArgumentError, DensifyError, DTypeError, FormatError, ShapeError
from .formats.format import Format, FormatLike, as_format, bcsr, coo, csc, csr, csr_unordered, dia
from .formats.levels import Compressed, Dense
from .formats.storage import Storage, check_fill, fill_key
from .formats.slicing import index_storage
from .notation.affine import as_subscript
from .notation.ast import (Access, Affine, Assignment, IndexSet, IndexVar, Subscript, Window, accesses,
                           as_expr)
from .runtime.convert import convert

SUPPORTED_DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(t) for t in (
    np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32,
    np.uint16, np.uint8, np.complex128, np.complex64, np.bool_))

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_name_counter = itertools.count()


def check_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as an np.dtype if coiter supports it; DTypeError naming it otherwise."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"not a data type: {dtype!r}") from None
    if dt not in SUPPORTED_DTYPES:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise DTypeError(f"unsupported dtype {dt}; coiter supports {names}")
    return dt


def _default_name() -> str:
    return f"T{next(_name_counter)}"


def _check_name(name: str | None) -> str:
    if name is None:
        return _default_name()
    if not isinstance(name, str):
        raise TypeError(f"a tensor name must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError("a tensor name must not be empty")
    return name


# the largest extent kernels index with int64_t coordinates
MAX_DIMENSION = 2**63 - 1


def check_shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    """Shape as a tuple of non-negative Python ints (an int means a vector)."""
    try:
        dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        out = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise ShapeError(f"shape must be a sequence of integers, got {shape!r}") from None
    if any(d < 0 for d in out):
        raise ShapeError(f"negative dimension in shape {out}")
    if any(d > MAX_DIMENSION for d in out):
        raise ShapeError(f"dimension beyond {MAX_DIMENSION} (int64_t) in shape {out}")
    return out


def _entries_unique(fmt: Format) -> bool:
    """Whether every coordinate is stored at most once (all levels unique)."""
    return all(level.unique for level in fmt.levels)


# ------------------------------------------------------------------ storage builders


def _scalar_storage(value: np.ndarray) -> Storage:
    """Order-0 storage holding the one-element array ``value``."""
    return Storage(Format([]), (), (), value.reshape(1))


def _zero_storage(shape: tuple[int, ...], fmt: Format, dtype: np.dtype) -> Storage:
    if fmt.is_dense:
        vals = np.zeros(math.prod(shape), dtype=dtype)
        return Storage(fmt, shape, tuple({} for _ in shape), vals)
    coords = np.zeros((len(shape), 0), dtype=np.int64)
    return _packed(coords, np.zeros(0, dtype=dtype), shape, fmt)


def _dense_storage(arr: np.ndarray, fmt: Format) -> Storage:
    """Dense storage of ``arr``; a view of it when it is already laid out in storage order."""
    vals = np.ascontiguousarray(arr.transpose(fmt.ordering)).reshape(-1)
    return Storage(fmt, arr.shape, tuple({} for _ in arr.shape), vals)


def _packed_over(coords: np.ndarray, vals: np.ndarray, shape: tuple[int, ...], fmt: Format,
                 fill: Any) -> Storage:
    """The entries ``vals`` at ``coords`` in ``fmt``, the others reading as ``fill``; in a
    format that cannot hold a fill other than 0 (Format.pads) every entry is stored and the
    fill is 0, as conversions and kernels do."""
    if fmt.pads and fill_key(fill) != fill_key(0):
        return convert(replace(_packed(coords, vals, shape, coo(len(shape))), fill=fill), fmt)
    return replace(_packed(coords, vals, shape, fmt), fill=fill)


def _packed(coords: np.ndarray, values: np.ndarray, shape: tuple[int, ...], fmt: Format) -> Storage:
    """Pack in-range coordinates in any order into ``fmt``; duplicates summed in ``values.dtype``."""
    if not shape:
        return _scalar_storage(np.add.reduce(values, dtype=values.dtype, keepdims=True))
    s = Storage.from_coords(coords, values, shape, fmt)
    if s.vals.dtype != values.dtype:
        # Summing duplicates promotes small ints and bools to int64; keep the caller's type
        # (for bools this makes the sum a logical or).
        s = Storage(s.format, s.shape, s.levels, s.vals.astype(values.dtype))
    return s


def index_pair(pos: np.ndarray, crd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pos`` and ``crd`` contiguous with one shared int32/int64 type (no copy if they have it)."""
    if pos.dtype != crd.dtype or pos.dtype not in _INDEX_DTYPES:
        # int64 holds every int32/uint32/int16 value; wrapped uint64 turns negative and fails validation
        return pos.astype(np.int64), crd.astype(np.int64)
    return _contiguous(pos), _contiguous(crd)


def _contiguous(a: np.ndarray) -> np.ndarray:
    """``a`` itself when C-contiguous (np.ascontiguousarray makes a new view object, which
    would defeat the caches keyed by array identity below), else a contiguous copy."""
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _segments_canonical(pos: np.ndarray, crd: np.ndarray) -> bool:
    """Whether coordinates strictly increase within every segment (sorted, no duplicates)."""
    nnz = int(pos[-1])
    if nnz < 2:
        return True
    rising = np.diff(crd[:nnz]) > 0
    starts = pos[1:-1]
    starts = starts[(starts > 0) & (starts < nnz)].astype(np.int64)
    rising[starts - 1] = True  # a segment's first entry may be smaller than the previous one
    return bool(rising.all())


# Index arrays of SciPy operands checked already, by identity: calling a kernel again on the
# same matrix skips the O(nnz) checks. Entries hold the arrays weakly and leave as they die,
# so a matrix the program drops is freed (and a new array with its id matches no entry).
# Like SciPy's own has_canonical_format flag, this trusts that index arrays are not
# rewritten in place.
_CHECKED: OrderedDict[tuple, tuple[weakref.ref, weakref.ref, bool, bytes]] = OrderedDict()
_CHECKED_MAX = 32
_FINGERPRINT_SAMPLES = 64


def _fingerprint(pos: np.ndarray, crd: np.ndarray) -> bytes:
    """A cheap witness that validated index arrays were not changed in place since: both
    ends and evenly spaced samples of each (a few microseconds; validating again costs as
    much as a sparse kernel). A change no sample sees is not detected: documented in
    docs/errors.md, which says to pass changed arrays as a new matrix."""
    out = b""
    for a in (pos, crd):
        n = a.shape[0]
        if n:  # all of a short array (what the samples would pick) without indexing
            out += a.tobytes() if n <= _FINGERPRINT_SAMPLES else a[_samples(n)].tobytes()
    return out


@functools.lru_cache(maxsize=64)
def _samples(n: int) -> np.ndarray:
    """Evenly spaced positions in an array of ``n`` elements, both ends included."""
    return np.linspace(0, n - 1, min(n, _FINGERPRINT_SAMPLES)).astype(np.intp)


def _dropper(cache: OrderedDict, key: tuple) -> Callable[[Any], None]:
    """A weak reference callback that removes ``key`` from ``cache`` (its object died)."""
    return lambda _ref: cache.pop(key, None)


def _checked_structure(pos: np.ndarray, crd: np.ndarray, shape: tuple[int, int], layout: Format,
                       name: str) -> bool:
    """Validate a SciPy matrix's ``pos``/``crd`` (FormatError naming ``name``) and return
    whether its segments are canonical; remembered for the same arrays while they live."""
    key = (id(pos), id(crd), pos.shape, crd.shape, pos.dtype.str, shape, layout.ordering)
    hit = _CHECKED.get(key)
    if hit is not None and hit[0]() is pos and hit[1]() is crd and hit[3] == _fingerprint(pos, crd):
        _CHECKED.move_to_end(key)
        return hit[2]
    # Check the structure before anything (including SciPy's own C++ routines) indexes with it.
    loose = Format([Dense(), Compressed(ordered=False, unique=False)], layout.ordering)
    Storage(loose, shape, ({}, {"pos": pos, "crd": crd}), np.zeros(crd.shape[0])).validate(name)
    canonical = _segments_canonical(pos, crd)
    drop = _dropper(_CHECKED, key)
    _CHECKED[key] = (weakref.ref(pos, drop), weakref.ref(crd, drop), canonical, _fingerprint(pos, crd))
    if len(_CHECKED) > _CHECKED_MAX:
        _CHECKED.popitem(last=False)
    return canonical


# Storages sharing SciPy matrices' arrays, by matrix: a kernel called again on the same
# matrix reuses its Storage and with it the argument block the C call path reads (building
# both costs about as much as the call itself on mid-size matrices). An entry holds its
# matrix weakly and leaves when the matrix dies (the Storage holds the matrix's arrays, so
# holding those weakly would keep them forever).
_SHARED: OrderedDict[tuple, tuple[weakref.ref, Storage]] = OrderedDict()


def _shared_storage(m: Any, layout: Format, shape: tuple[int, int], pos: np.ndarray, crd: np.ndarray,
                    vals: np.ndarray) -> Storage:
    """The Storage of SciPy matrix ``m`` over its arrays ``pos``, ``crd``, ``vals``."""
    key = (id(m), shape, layout)
    hit = _SHARED.get(key)
    if hit is not None:
        matrix, st = hit
        if matrix() is m and st.levels[1]["pos"] is pos and st.levels[1]["crd"] is crd and st.vals is vals:
            _SHARED.move_to_end(key)
            return st
    st = Storage(layout, shape, ({}, {"pos": pos, "crd": crd}), vals)
    try:
        _SHARED[key] = (weakref.ref(m, _dropper(_SHARED, key)), st)
    except TypeError:  # an object without weak references: not cached
        return st
    if len(_SHARED) > _CHECKED_MAX:
        _SHARED.popitem(last=False)
    return st


# SciPy operands of kernel calls wrapped already, by matrix and operand name: a kernel called
# again on the same matrix gets the same Tensor after O(1) checks (1 us against from_scipy's
# 7 on a 10 x 10 CSR matrix). Only Tensors that share all three of the matrix's arrays are
# kept, so that they follow its in-place value changes; its index arrays must still have the
# fingerprint they had. Entries leave as their matrices die.
_WRAPPED: OrderedDict[tuple[int, str], tuple[weakref.ref, bytes, Tensor]] = OrderedDict()


def scipy_operand(m: Any, name: str) -> Tensor:
    """``Tensor.from_scipy(m, name=name)`` for a kernel call; the same Tensor again while
    ``m`` keeps the arrays it had. Never handed to the user (who could assign to it)."""
    key = (id(m), name)
    hit = _WRAPPED.get(key)
    if hit is not None:
        matrix, fingerprint, t = hit
        st = t.storage
        if (matrix() is m and m.indptr is st.levels[1]["pos"] and m.indices is st.levels[1]["crd"]
                and m.data is st.vals and m.shape == t.shape and _fingerprint(m.indptr, m.indices) == fingerprint):
            _WRAPPED.move_to_end(key)
            return t
    t = Tensor.from_scipy(m, name=name)
    st = t.storage
    if (m.format in ("csr", "csc") and st.levels[1].get("pos") is m.indptr
            and st.levels[1].get("crd") is m.indices and st.vals is m.data):
        try:
            _WRAPPED[key] = (weakref.ref(m, _dropper(_WRAPPED, key)), _fingerprint(m.indptr, m.indices), t)
        except TypeError:  # an object without weak references: not kept
            return t
        if len(_WRAPPED) > _CHECKED_MAX:
            _WRAPPED.popitem(last=False)
    return t


def scipy_as_tensors(operands: dict[str, Any]) -> dict[str, Any]:
    """``operands`` with SciPy matrices as the Tensors of :func:`scipy_operand`."""
    # (NumPy arrays and Tensors skip SciPy's issparse, an ABC check of some 0.25 us each)
    return {n: scipy_operand(v, n) if type(v) not in _NOT_SCIPY and sp.issparse(v) else v
            for n, v in operands.items()}


def _compressed_storage(m: Any, fmt: Format, name: str) -> Storage:
    """Storage of a SciPy CSR/CSC matrix in ``fmt``, sharing its arrays when possible."""
    layout = csr if m.format == "csr" else csc
    pos, crd = index_pair(m.indptr, m.indices)
    vals = _contiguous(m.data)
    shape = (int(m.shape[0]), int(m.shape[1]))
    canonical = _checked_structure(pos, crd, shape, layout, name)
    if vals.ndim != 1 or vals.shape[0] < int(pos[-1]):
        raise FormatError(f"{name}: {vals.shape[0] if vals.ndim == 1 else vals.shape} values for "
                          f"{int(pos[-1])} stored entries")
    if canonical and fmt == layout:
        return _shared_storage(m, layout, shape, pos, crd, vals)
    if canonical and fmt in (csr, csc):
        # SciPy's CSR<->CSC transposition is linear time and keeps indices sorted and unique.
        other = m.tocsr() if fmt == csr else m.tocsc()
        opos, ocrd = index_pair(other.indptr, other.indices)
        return Storage(fmt, shape, ({}, {"pos": opos, "crd": ocrd}), np.ascontiguousarray(other.data))
    nnz = int(pos[-1])
    outer = np.repeat(np.arange(len(pos) - 1, dtype=np.int64), np.diff(pos))
    by_level = (outer, crd[:nnz].astype(np.int64))
    coords = np.stack([by_level[layout.ordering.index(mode)] for mode in range(2)])
    return _packed(coords, vals[:nnz], shape, fmt)


def _coo_storage(m: Any, fmt: Format, name: str) -> Storage:
    """Storage of a SciPy COO matrix/array (any order) in ``fmt``, duplicates summed."""
    shape = tuple(int(d) for d in m.shape)
    vals = np.asarray(m.data)
    # SciPy < 1.13 has only row/col (COO was matrix-only then)
    cols = [np.asarray(c) for c in (m.coords if hasattr(m, "coords") else (m.row, m.col))]
    if vals.ndim != 1 or any(c.shape != vals.shape for c in cols):
        raise FormatError(f"{name}: COO coordinate and value arrays differ in length")
    for mode, (c, dim) in enumerate(zip(cols, shape)):
        if c.shape[0] and (c.min() < 0 or c.max() >= dim):
            raise FormatError(f"{name}: mode-{mode} coordinate out of range [0, {dim})")
    if len(shape) == 2 and fmt in (csr, csc):
        # Coordinates are in range, so SciPy's linear-time COO->CSR/CSC is safe and faster than a sort.
        return _compressed_storage(m.tocsr() if fmt == csr else m.tocsc(), fmt, name)
    return _packed(np.stack(cols), vals, shape, fmt)


def _dia_storage(m: Any, fmt: Format, name: str) -> Storage | None:
    """Storage of a SciPy DIA matrix in coiter's DIA format, sharing ``data`` when its rows
    span exactly the columns and it is C-contiguous; None when ``fmt`` is another format."""
    if fmt != dia():
        return None
    rows, cols = (int(d) for d in m.shape)
    offsets = np.asarray(m.offsets)
    itype = offsets.dtype if offsets.dtype in _INDEX_DTYPES else np.dtype(np.int64)
    data = np.asarray(m.data)
    if data.shape[1] != cols:  # SciPy allows shorter or longer rows; ours span the columns
        fixed = np.zeros((data.shape[0], cols), dtype=data.dtype)
        w = min(cols, data.shape[1])
        fixed[:, :w] = data[:, :w]
        data = fixed
    st = Storage(fmt, (rows, cols), ({}, {"offset": np.ascontiguousarray(offsets, dtype=itype)}, {}),
                 np.ascontiguousarray(data).reshape(-1))
    st.validate(name)
    return st


def _bsr_storage(m: Any, fmt: Format, name: str) -> Storage | None:
    """Storage of a SciPy BSR matrix in coiter's BCSR format of the same block size, sharing
    its arrays when its blocks are canonical; None when ``fmt`` is another format."""
    if fmt != bcsr(m.blocksize):
        return None
    pos, crd = index_pair(m.indptr, m.indices)
    if not _segments_canonical(pos, crd):
        return None
    data = np.ascontiguousarray(m.data).reshape(-1)
    st = Storage(fmt, tuple(int(d) for d in m.shape), ({}, {"pos": pos, "crd": crd}, {}, {}), data)
    st.validate(name)
    return st


# ------------------------------------------------------------------------- Tensor


# A sparse tensor densifies implicitly (np.asarray, NumPy functions coiter does not
# implement) only while its dense array stays this small: a 20000 x 20000 matrix of 40000
# nonzeros took 3 GiB and 0.7 s through NumPy's fallback. COITER_DENSIFY_LIMIT overrides.
DENSIFY_LIMIT = 256 << 20


def densify_check(t: Tensor, what: str) -> None:
    """Raise when ``what`` would densify the sparse tensor ``t`` past the limit."""
    if t.format.is_dense:
        return
    from .runtime.settings import env_bytes

    limit = env_bytes("COITER_DENSIFY_LIMIT")
    limit = DENSIFY_LIMIT if limit is None else limit
    size = math.prod(t.shape) * t.dtype.itemsize
    if size > limit:
        raise DensifyError(
            f"{what} would densify the sparse tensor {t.name} {t.shape} ({t.nnz} nonzeros) into "
            f"{size / 2**20:.0f} MiB, over the limit of {limit / 2**20:.0f} MiB "
            "(COITER_DENSIFY_LIMIT); densify explicitly with .to_numpy() if that is what you want")


@dataclass(frozen=True)
class Frontend:
    """What the layers above lend a Tensor: ``run_assignment(assignment, out_format)`` computes
    a DSL assignment into a Storage (:func:`coiter.api.run_assignment`); ``leaf(tensor)`` is
    the tensor as an operator expression (:meth:`coiter.lazy.Lazy.leaf`); ``matmul(x, y)`` is
    ``x @ y`` as one (:func:`coiter.lazy.matmul`); ``array_ufunc`` and ``array_function`` take
    NumPy's protocols (:mod:`coiter.lazy`)."""

    run_assignment: Callable[[Assignment, Format], Storage]
    leaf: Callable[[Tensor], Any]
    matmul: Callable[[Any, Any], Any]
    array_ufunc: Callable[[Any, str, tuple[Any, ...], dict[str, Any]], Any]
    array_function: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]


class Tensor(ArrayMethods):
    """A tensor of any order stored in any :class:`~coiter.formats.format.Format`.

    ``Tensor(shape, format, dtype, name)`` is all zeros (dense format by default);
    build tensors from data with :meth:`from_numpy`, :meth:`from_scipy` and
    :meth:`from_coo`. ``name`` is how the tensor appears in index notation; a
    fresh ``T<n>`` from a global counter is used when none is given.
    """

    __slots__ = ("_storage", "_pending", "_name", "_readers", "__weakref__")

    _storage: Storage
    _pending: Assignment | None
    _name: str
    # tensors whose pending assignment reads this one, by id (a WeakSet would compare
    # tensors with ==, which compares their values)
    _readers: weakref.WeakValueDictionary[int, Tensor] | None
    frontend: ClassVar[Frontend]  # connected by coiter/__init__.py

    def __init__(
        self,
        shape: int | Sequence[int],
        format: FormatLike | None = None,
        dtype: Any = np.float64,
        name: str | None = None,
    ) -> None:
        dims = check_shape(shape)
        fmt = as_format(format, len(dims))
        self._init(_zero_storage(dims, fmt, check_dtype(dtype)), _check_name(name))

    def _init(self, storage: Storage, name: str) -> None:
        self._storage = storage
        self._pending = None
        self._name = name
        self._readers = None

    @classmethod
    def _wrap(cls, storage: Storage, name: str | None = None) -> Tensor:
        """A Tensor around an already-valid ``storage`` (no copy, no checks)."""
        t = cls.__new__(cls)
        t._init(storage, name if name is not None else _default_name())
        return t

    # ---------------------------------------------------------------- constructors

    @classmethod
    def from_numpy(cls, a: Any, format: FormatLike | None = None, name: str | None = None,
                   fill_value: Any = 0) -> Tensor:
        """Tensor holding array ``a`` (dense by default).

        A dense format shares ``a``'s memory when ``a`` is already laid out in the
        format's mode order (C-contiguous for the default row-major order); sparse
        formats store the entries of ``a`` that differ from ``fill_value`` (its nonzeros).
        """
        arr = np.asarray(a)
        check_dtype(arr.dtype)
        fill = check_fill(fill_value, arr.dtype)
        fmt = as_format(format, arr.ndim)
        name = _check_name(name)
        if fmt.is_dense:
            return cls._wrap(_dense_storage(arr, fmt), name)
        coords = np.stack(np.nonzero(arr != fill))
        return cls._wrap(_packed_over(coords, arr[tuple(coords)], arr.shape, fmt, fill), name)

    @classmethod
    def from_scipy(cls, m: Any, format: FormatLike | None = None, name: str | None = None,
                   fill_value: Any = 0) -> Tensor:
        """Tensor holding SciPy sparse matrix or array ``m``, in its own layout by default.

        CSR stays CSR, CSC stays CSC, COO stays COO, DIA stays DIA, BSR becomes BCSR
        and other kinds become CSR. Canonical CSR/CSC/BSR data and DIA data spanning the
        columns are shared, not copied; unsorted or duplicate entries are sorted and
        summed. Malformed data raises FormatError. The entries ``m`` does not store read
        as ``fill_value`` (a graph's absent edges as ``inf`` for shortest paths).
        """
        if not sp.issparse(m):
            raise TypeError(f"expected a SciPy sparse matrix or array, got {type(m).__name__}")
        check_dtype(m.dtype)
        fill = check_fill(fill_value, m.dtype)
        if fill != 0:
            return cls.from_scipy(m, format, name).with_fill(fill)
        name = _check_name(name)
        if m.format in ("dia", "bsr"):
            native_fmt = dia() if m.format == "dia" else bcsr(m.blocksize)
            fmt = as_format(format, 2, native_fmt)
            st = (_dia_storage if m.format == "dia" else _bsr_storage)(m, fmt, name)
            if st is not None:
                return cls._wrap(st, name)
            m = m.tocoo()
            return cls._wrap(_coo_storage(m, fmt, name), name)
        native = {"csr": csr, "csc": csc}.get(m.format)
        if native is None and m.format != "coo":
            m, native = m.tocoo(), (csr if m.ndim == 2 else None)
        fmt = as_format(format, m.ndim, native or coo(m.ndim))
        if m.format == "coo":
            return cls._wrap(_coo_storage(m, fmt, name), name)
        return cls._wrap(_compressed_storage(m, fmt, name), name)

    @classmethod
    def from_coo(
        cls,
        coords: Any,
        values: Any,
        shape: Sequence[int],
        format: FormatLike | None = None,
        name: str | None = None,
        fill_value: Any = 0,
    ) -> Tensor:
        """Tensor from coordinates ``coords`` (order × nnz) and ``values`` (nnz).

        Entries may come in any order; duplicates are summed. COO by default. The other
        entries read as ``fill_value``.
        """
        dims = check_shape(shape)
        order = len(dims)
        crd = np.asarray(coords)
        vals = np.asarray(values)
        if crd.ndim != 2 or crd.shape[0] != order:
            raise ShapeError(f"coords must have shape ({order}, nnz) for shape {dims}, got {crd.shape}")
        if vals.ndim != 1 or vals.shape[0] != crd.shape[1]:
            raise ShapeError(f"{crd.shape[1]} coordinates but values has shape {vals.shape}")
        if crd.size and crd.dtype.kind not in "iu":
            raise DTypeError(f"coordinates must be integers, got {crd.dtype}")
        check_dtype(vals.dtype)
        for mode, dim in enumerate(dims):
            c = crd[mode]
            if c.shape[0] and (c.min() < 0 or c.max() >= dim):
                bad = c[(c < 0) | (c >= dim)][0]
                raise ShapeError(f"mode-{mode} coordinate {bad} is out of range [0, {dim})")
        fmt = as_format(format, order, coo(order) if order else None)
        fill = check_fill(fill_value, vals.dtype)
        return cls._wrap(_packed_over(crd.astype(np.int64), vals, dims, fmt, fill), _check_name(name))

    @classmethod
    def from_arrays(
        cls,
        shape: Sequence[int],
        format: FormatLike,
        levels: Sequence[dict[str, Any]],
        vals: Any,
        name: str | None = None,
    ) -> Tensor:
        """Tensor over arrays you already have, one dict of index arrays per storage level
        (``{"pos": ..., "crd": ...}`` for a compressed level, ``{}`` for a dense one) and the
        values. Nothing is copied; the arrays are validated against every invariant kernels
        rely on, so malformed data raises FormatError instead of reaching C. Unordered or
        duplicate entries are allowed where the format's levels say so. The validation is
        not repeated: build a new Tensor after changing an index array in place."""
        dims = check_shape(shape)
        fmt = as_format(format, len(dims))
        arrays = tuple({k: np.asarray(v) for k, v in lv.items()} for lv in levels)
        values = np.asarray(vals)
        check_dtype(values.dtype)
        name = _check_name(name)
        st = Storage(fmt, dims, arrays, values)
        st.validate(name)
        return cls._wrap(st, name)

    # ------------------------------------------------------------------ properties

    @property
    def name(self) -> str:
        return self._name

    @property
    def shape(self) -> tuple[int, ...]:
        return self._storage.shape

    @property
    def ndim(self) -> int:
        """The order, under NumPy's name (what array libraries such as Dask read)."""
        return self.order

    @property
    def order(self) -> int:
        return len(self._storage.shape)

    @property
    def size(self) -> int:
        """The number of entries, stored or not (the product of the shape), as NumPy's."""
        return math.prod(self.shape)

    @property
    def format(self) -> Format:
        return self._storage.format

    @property
    def storage(self) -> Storage:
        """The physical storage (computes a pending DSL assignment first)."""
        if self._pending is not None:
            self.evaluate()
        return self._storage

    @property
    def dtype(self) -> np.dtype:
        """Element type (of the result, for a pending DSL assignment)."""
        return self.storage.vals.dtype

    @property
    def nnz(self) -> int:
        """Number of stored entries (every entry for dense formats)."""
        return self.storage.nnz

    @property
    def fill_value(self) -> bool | int | float | complex:
        """The value of every entry the format does not store (0 unless the tensor says
        otherwise: ``from_scipy(m, fill_value=np.inf)``, or a result's, computed from its
        operands')."""
        return self.storage.fill

    def astype(self, dtype: Any) -> Tensor:
        """This tensor with its values (and fill value) converted to ``dtype`` as NumPy's
        ``astype`` converts them, in the same format and pattern (a new Tensor; the index
        arrays are shared)."""
        dt = check_dtype(dtype)
        s = self.storage
        fill = np.asarray(s.fill).astype(dt)[()]
        return Tensor._wrap(replace(s, vals=s.vals.astype(dt), fill=check_fill(fill, dt)), self._name)

    def dot(self, other: Any) -> Any:
        """``A.dot(b)`` is ``A @ b``, as SciPy's."""
        return self @ other

    def __len__(self) -> int:
        """The size of the first mode, as NumPy's ``len``."""
        if not self.shape:
            raise TypeError("len() of a tensor of order 0")
        return self.shape[0]

    def __iter__(self) -> Any:
        """The slices along the first mode (``A[0]``, ``A[1]``...), as NumPy iterates."""
        return (self[k] for k in range(len(self)))

    def __bool__(self) -> bool:
        """The truth of a tensor of one entry; for more, NumPy's error (ambiguous)."""
        if self.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                             "reduce it first (.max(), .min(), .sum())")
        return bool(self.to_numpy().reshape(())[()])

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex"))

    def _scalar(self, kind: str) -> Any:
        """The value of a tensor of order 0 (TypeError for others, whose conversion to a
        ``kind`` NumPy deprecates)."""
        if self.shape:
            raise TypeError(f"only a tensor of order 0 converts to {kind}, not one of shape "
                            f"{self.shape}")
        return self.to_numpy()[()]

    @property
    def real(self) -> Tensor:
        """The real parts of the values, in the same format and pattern (the tensor itself
        when its values are real), as SciPy's ``real``."""
        return self if self.dtype.kind != "c" else self._part(np.real)

    @property
    def imag(self) -> Tensor:
        """The imaginary parts of the values (zeros for real values), in the same format and
        pattern, as SciPy's ``imag``."""
        return self._part(np.imag)

    def _part(self, part: Callable[[Any], Any]) -> Tensor:
        s = self.storage
        vals = np.array(part(s.vals))  # a new array: NumPy's imag of real values is read-only
        return Tensor._wrap(replace(s, vals=vals, fill=part(np.asarray(s.fill))[()]), self._name)

    def copy(self) -> Tensor:
        """A tensor with copies of this one's arrays (SciPy's and NumPy's ``copy``)."""
        s = self.storage
        levels = tuple({k: a.copy() for k, a in level.items()} for level in s.levels)
        return Tensor._wrap(replace(s, levels=levels, vals=s.vals.copy()), self._name)

    def nonzero(self) -> tuple[np.ndarray, ...]:
        """The coordinates of the entries that are not zero, one array per mode, in
        row-major order (NumPy's and SciPy's ``nonzero``): stored zeros do not count."""
        if not self.shape:
            raise ShapeError("nonzero of a tensor of order 0: NumPy no longer defines it")
        mask = (self != 0).evaluate()  # bool, sparse (CSR/CSF: ordered) where self is
        if mask.format.is_dense:
            return np.nonzero(mask.to_numpy())
        coords, _ = mask.prune().storage.to_coords()
        return tuple(np.asarray(c, dtype=np.intp) for c in coords)

    def with_fill(self, fill_value: Any) -> Tensor:
        """This tensor's stored entries over another fill value (no copy): the entries it
        does not store now read as ``fill_value`` (a graph's adjacency matrix with absent
        edges of infinite length). In a format that cannot hold a fill other than 0
        (``sd``, ELL, DIA, blocked: Format.pads) every entry is then stored instead, and the
        fill stays 0."""
        s = self.storage
        fill = check_fill(fill_value, s.vals.dtype)
        if s.format.pads and fill_key(fill) != fill_key(0):
            coords, vals = s.to_coords()
            return Tensor._wrap(_packed_over(coords, vals, s.shape, s.format, fill), self._name)
        return Tensor._wrap(replace(s, fill=fill), self._name)

    # ------------------------------------------------------------------ conversions

    def to_numpy(self) -> np.ndarray:
        """Dense ndarray of the values; a view of the storage for dense formats."""
        s = self.storage
        if s.format.is_dense:
            dense = s.vals[: math.prod(s.shape)].reshape(s.level_dims)
            if s.format.is_identity_ordered:
                return dense
            return dense.transpose(np.argsort(s.format.ordering))
        coords, vals = s.to_coords()
        out = np.full(s.shape, s.fill, dtype=s.vals.dtype)
        if _entries_unique(s.format):
            out[tuple(coords)] = vals
        else:  # a coordinate stored several times holds their sum (over zero)
            if s.fill != 0:
                out[tuple(coords)] = 0
            np.add.at(out, tuple(coords), vals)
        return out

    def to_scipy(self) -> sp.sparray:
        """SciPy sparse array of a matrix: CSR/CSC share the storage's arrays, others give COO."""
        if self.order != 2:
            raise FormatError(f"{self.name}: only order-2 tensors convert to SciPy, this has order {self.order}")
        s = self.storage
        if s.fill != 0 and not s.format.is_dense:
            raise FormatError(f"{self.name}: its absent entries are {s.fill!r}, SciPy's are zeros; "
                              "take to_numpy(), or with_fill(0) for the stored entries alone")
        if s.vals.dtype == np.float16:
            raise DTypeError(f"{self.name}: scipy.sparse has no float16; convert the values first "
                             "(coiter.evaluate('B(i,j) = float32(A(i,j))', A=...))")
        if s.format in (csr, csc, csr_unordered):
            pos, crd = s.levels[1]["pos"], s.levels[1]["crd"]
            nnz = int(pos[-1])
            kind = sp.csc_array if s.format == csc else sp.csr_array
            out = kind((s.vals[:nnz], crd[:nnz], pos), shape=s.shape)
            if s.format == csr_unordered:
                out.has_sorted_indices = False  # SciPy sorts them when an operation needs it
            return out
        if s.format == dia():
            offsets = s.levels[1]["offset"]
            return sp.dia_array((s.vals.reshape(offsets.shape[0], s.shape[1]), offsets), shape=s.shape)
        if s.format.is_dense:
            return sp.coo_array(self.to_numpy())
        coords, vals = s.to_coords()
        return sp.coo_array((vals, (coords[0], coords[1])), shape=s.shape)

    def asformat(self, fmt: FormatLike) -> Tensor:
        """This tensor stored in ``fmt`` (``self`` when it already is)."""
        target = as_format(fmt, self.order)
        if target == self.format:
            return self
        return Tensor._wrap(convert(self.storage, target))

    def prune(self) -> Tensor:
        """This tensor without stored zeros, in the same format (NaN stays): kernels store
        every entry they visit, zeros included (``x - x``, a false comparison), as TACO
        does; SciPy's arithmetic drops them. Dense levels keep every position."""
        s = self.storage
        coords, vals = s.to_coords()
        keep = vals != s.fill
        if keep.all():
            return self
        pruned = Storage.from_coords(coords[:, keep], vals[keep], s.shape, s.format,
                                     s.index_dtype if s.format.levels else None)
        return Tensor._wrap(replace(pruned, fill=s.fill), self._name)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        densify_check(self, "numpy.asarray")
        arr = self.to_numpy()
        if dtype is not None and arr.dtype != np.dtype(dtype):
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    # ----------------------------------------------------------- operators (coiter.lazy)
    __array_priority__ = 20  # NumPy defers ``ndarray + Tensor`` to this class

    def _lazy(self) -> Any:
        return self.frontend.leaf(self)

    def __add__(self, other: Any) -> Any:
        """``A + B``: a :class:`~coiter.lazy.Lazy` expression, computed when needed."""
        return self._lazy() + other

    def __radd__(self, other: Any) -> Any:
        return other + self._lazy()

    def __sub__(self, other: Any) -> Any:
        return self._lazy() - other

    def __rsub__(self, other: Any) -> Any:
        return other - self._lazy()

    def __mul__(self, other: Any) -> Any:
        """``A * B``: element-wise (scalars scale)."""
        return self._lazy() * other

    def __rmul__(self, other: Any) -> Any:
        return other * self._lazy()

    def __truediv__(self, other: Any) -> Any:
        return self._lazy() / other

    def __neg__(self) -> Any:
        return -self._lazy()

    def __pos__(self) -> Any:
        return self._lazy()

    def __abs__(self) -> Any:
        return abs(self._lazy())

    def __pow__(self, other: Any) -> Any:
        """``A ** p``: element-wise power (sparse for a positive ``p``)."""
        return self._lazy() ** other

    def __rpow__(self, other: Any) -> Any:
        return other ** self._lazy()

    def __lt__(self, other: Any) -> Any:
        """``A < b``: element-wise comparison, a bool expression."""
        return self._lazy() < other

    def __le__(self, other: Any) -> Any:
        return self._lazy() <= other

    def __gt__(self, other: Any) -> Any:
        return self._lazy() > other

    def __ge__(self, other: Any) -> Any:
        return self._lazy() >= other

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        """``A == b``: element-wise, as NumPy's (``np.array_equal`` for one answer)."""
        return self._lazy() == other

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return self._lazy() != other

    __hash__ = object.__hash__  # identity, though == compares values: tensors key caches

    def diagonal(self, offset: int = 0) -> Any:
        """The entries ``(i, i + offset)`` of a matrix, as a dense expression (NumPy's and
        SciPy's ``diagonal``)."""
        return self._lazy().diagonal(offset)

    def __matmul__(self, other: Any) -> Any:
        """``A @ B``: matrix product (1-D and 2-D operands)."""
        return self.frontend.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        return self.frontend.matmul(other, self)

    @property
    def T(self) -> Any:
        """The transpose (axes reversed), as an expression: nothing is copied."""
        return self._lazy().T

    def transpose(self, axes: Any = None) -> Any:
        """The modes permuted by ``axes`` (reversed when None), as NumPy's ``transpose``: a
        lazy expression, computed with what it feeds (see :attr:`T`)."""
        return self._lazy().transpose(axes)

    def sum(self, axis: Any = None) -> Any:
        """The sum over ``axis`` (all when None), as a dense expression."""
        return self._lazy().sum(axis)

    def max(self, axis: Any = None) -> Any:
        """The largest value over ``axis`` (all when None), implicit zeros included, as a
        dense expression."""
        return self._lazy().max(axis)

    def min(self, axis: Any = None) -> Any:
        """The smallest value over ``axis`` (all when None), implicit zeros included, as a
        dense expression."""
        return self._lazy().min(axis)

    def mean(self, axis: Any = None) -> Any:
        """The mean over ``axis`` (all when None), implicit zeros included, as a dense
        expression."""
        return self._lazy().mean(axis)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return self.frontend.array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return self.frontend.array_function(func, args, kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle the computed data; pending DSL state and reader links are process-local.
        return (Tensor._wrap, (self.storage, self._name))

    def __repr__(self) -> str:
        head = f"Tensor(name={self._name!r}, shape={self.shape}, format={self.format.to_string()!r}"
        if self._pending is not None:
            return f"{head}, pending={str(self._pending)!r})"
        fill = f", fill_value={self._storage.fill!r}" if self._storage.fill != 0 else ""
        return f"{head}, dtype={self._storage.vals.dtype}, nnz={self._storage.nnz}{fill})"

    # ------------------------------------------------------------------------- DSL

    def _index(self, idx: Any, compound: bool = False) -> tuple[Subscript, ...]:
        given = idx if isinstance(idx, tuple) else (idx,)
        subs = []
        for v in given:
            sub = as_subscript(v) if compound else v
            if not isinstance(sub, (IndexVar, Affine, Window, IndexSet)):
                what = "IndexVar, an affine sum of them (i + k, 2*i + k - 1), a window " \
                    "(i[0:5]) or an index set (i[[1, 3, 5]])" if compound else "IndexVar"
                raise ArgumentError(f"{self._name} is indexed by {what} (see coiter.index_vars), "
                                    f"or by integers, slices and ... alone to select entries; "
                                    f"got {v!r}")
            subs.append(sub)
        if len(subs) != self.order:
            raise ShapeError(
                f"{self._name} has order {self.order} but is indexed by {len(subs)} "
                f"subscript(s) {tuple(subs)}"
            )
        return tuple(subs)

    def __getitem__(self, idx: Any) -> Any:
        """``A[i, j]``: an access for index notation (``A[()]`` for a scalar); subscripts
        may be affine (``I[i + k]``, a convolution's input).

        ``A[0:5]``, ``A[:, 3]``, ``A[..., ::2]``: integers, slices and ``...`` select entries
        as NumPy's basic indexing does and give a new Tensor in the same format (a view of
        the data for row ranges of formats whose first level is dense, such as CSR); one
        integer array or boolean mask beside slices takes those coordinates of its mode
        (``A[[3, 0, 3]]``, ``A[:, mask]``, a copy)."""
        given = idx if isinstance(idx, tuple) else (idx,)
        if given and all(isinstance(k, (int, np.integer, slice, list, np.ndarray)) or k is Ellipsis
                         for k in given):
            return Tensor._wrap(index_storage(self.storage, idx))
        return Access(self._name, self._index(idx, compound=True), source=self)

    def __setitem__(self, idx: IndexVar | tuple[IndexVar, ...], expr: Any) -> None:
        """``A[i, j] = expr``: record the assignment; it is computed when the data is needed."""
        lhs = Access(self._name, self._index(idx), source=self)
        rhs = as_expr(expr)
        # Tensors whose pending assignments read this one must see its current value.
        if self._readers:
            for reader in list(self._readers.values()):
                reader.evaluate()
            self._readers = None
        self.evaluate()
        for access in accesses(rhs):
            src = access.source
            if isinstance(src, Tensor) and src is not self:
                if src._readers is None:
                    src._readers = weakref.WeakValueDictionary()
                src._readers[id(self)] = self
        self._pending = Assignment(lhs, rhs)

    def evaluate(self) -> Tensor:
        """Compute a pending DSL assignment now (no-op otherwise); returns ``self``."""
        assignment = self._pending
        if assignment is None:
            return self
        # Cleared first so that a right-hand side reading this tensor sees its previous value.
        self._pending = None
        try:
            storage = self.frontend.run_assignment(assignment, self.format)
            if storage.shape != self.shape:
                raise ShapeError(
                    f"{self._name} has shape {self.shape} but {assignment} computes shape {storage.shape}"
                )
        except BaseException:
            self._pending = assignment
            raise
        self._storage = storage
        return self


# operand types scipy_as_tensors passes on without asking SciPy
_NOT_SCIPY = frozenset({np.ndarray, Tensor})
