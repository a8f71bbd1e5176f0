"""Physical storage of a tensor: per-level index arrays plus a values array.

This is the data contract between the Python side and generated kernels: level
``k`` of the format owns ``levels[k][name]`` for each name in ``Level.arrays``;
all index arrays of one tensor share one integer type (int32 when every index
fits, int64 otherwise); ``vals`` holds one value per position of the last level.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import ArgumentError, FormatError, ShapeError
from .format import Format
from .memory import place
from .packing import pack_levels, repeated_path_error

INT32_MAX = np.iinfo(np.int32).max


def choose_index_dtype(shape: tuple[int, ...], nnz: int) -> np.dtype:
    """int32 when every coordinate and position fits, else int64."""
    biggest = max([nnz, *shape], default=0)
    return np.dtype(np.int32) if biggest < INT32_MAX else np.dtype(np.int64)


_signatures: dict[tuple, int] = {}


def fill_key(fill: Any) -> tuple[str, Any]:
    """A hashable, exact stand-in for a fill value (0 and 0.0 alike, -0.0 too)."""
    value = complex(fill)
    return ("c", value) if value.imag else ("r", value.real)


_zeros: dict[np.dtype, Any] = {}  # each dtype's zero as a Python scalar


def check_fill(fill: Any, dtype: np.dtype) -> bool | int | float | complex:
    """``fill`` as a Python scalar of ``dtype``; ArgumentError for NaN (no entry would equal
    the fill, not even an absent one) or a value the type cannot hold."""
    if type(fill) is int and fill == 0:  # the default, on every tensor built: kept cheap
        zero = _zeros.get(dtype)
        if zero is None:
            zero = _zeros.setdefault(np.dtype(dtype), np.zeros((), dtype).item())
        return zero
    if np.ndim(fill) != 0 or np.asarray(fill).dtype.kind not in "biufc":
        raise ArgumentError(f"fill value {fill!r} is not a number")
    if fill != fill:
        raise ArgumentError("fill value NaN is not supported: no entry equals it")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        value = np.asarray(fill).astype(dtype)[()].item()
    exact = np.dtype(dtype).kind in "biu" or np.iscomplexobj(fill)
    if exact and value != fill:
        raise ArgumentError(f"fill value {fill!r} does not fit {np.dtype(dtype)}")
    return value


def signature_id(fmt: Format, vtype: np.dtype, itype: np.dtype | None, fill: Any = 0) -> int:
    """A small integer naming (format, value type, index type, fill value): what a compiled
    kernel variant assumes of an operand. ``itype`` is ignored for formats without index
    arrays; the fill is ignored for dense formats (they store every entry)."""
    has_arrays = any(level.arrays for level in fmt.levels)
    key = (fmt, np.dtype(vtype), np.dtype(itype) if has_arrays and itype is not None else None,
           None if fmt.is_dense else fill_key(fill))
    sig = _signatures.get(key)
    if sig is None:
        sig = _signatures.setdefault(key, len(_signatures) + 1)
    return sig


@dataclass(frozen=True, eq=False)
class Storage:
    format: Format
    shape: tuple[int, ...]
    levels: tuple[dict[str, np.ndarray], ...]
    vals: np.ndarray
    # the value of every entry the levels do not store (pydata/sparse's fill_value): 0 for
    # SciPy's matrices, inf for a graph whose absent edges are infinitely long
    fill: Any = 0

    def __getstate__(self) -> dict[str, Any]:
        # Only the fields: the cached properties hold this process's array addresses and
        # signature ids, which mean nothing in the process that unpickles (a Dask worker).
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def index_dtype(self) -> np.dtype:
        for arrays in self.levels:
            for a in arrays.values():
                return a.dtype
        return choose_index_dtype(self.shape, int(self.vals.shape[0]))

    @cached_property
    def level_dims(self) -> tuple[int, ...]:
        """Extent of every level's coordinate (the layout's, for blocked/DIA/ELL formats)."""
        if self.format.layout is not None:
            return self.format.layout.level_dims(self.shape, self.levels)
        return tuple(self.shape[m] for m in self.format.ordering)

    @cached_property
    def addresses(self) -> dict[tuple[int, str], int]:
        """Data pointers of every array, keyed (level, name); values under (-1, "vals").

        Cached because kernels are called many times on the same storage and
        ``ndarray.ctypes`` is slow on the per-call path.
        """
        out = {(k, name): a.ctypes.data for k, arrays in enumerate(self.levels)
               for name, a in arrays.items()}
        out[(-1, "vals")] = self.vals.ctypes.data
        return out

    @cached_property
    def _read_only_levels(self) -> tuple[dict[str, np.ndarray], ...]:
        """Every level's arrays as read-only views: what results that share this storage's
        first levels hold (built once, shared by every such result)."""
        out = []
        for arrays in self.levels:
            views = {}
            for name, a in arrays.items():
                views[name] = a.view()
                views[name].flags.writeable = False
            out.append(views)
        return tuple(out)

    @cached_property
    def _cargs(self) -> bytes:
        """This storage as kernel arguments, int64 words: its signature id (see
        :func:`signature_id`), the shape, every level's dimension, every level's number of
        positions, the address of every level array (levels outermost first, each level's
        ``arrays`` in order), the address of the values and their count. Read by the C
        call path."""
        addresses = self.addresses
        pointers = [addresses[(k, name)] for k, level in enumerate(self.format.levels)
                    for name in level.arrays]
        sig = signature_id(self.format, self.vals.dtype, self.index_dtype, self.fill)
        words = [sig, *self.shape, *self.level_dims, *self.level_sizes(), *pointers,
                 addresses[(-1, "vals")], self.vals.shape[0]]
        return np.array(words, dtype=np.int64).tobytes()

    def level_sizes(self) -> list[int]:
        """Positions per level, outermost first (no validation)."""
        sizes, parent = [], 1
        for level, arrays, dim in zip(self.format.levels, self.levels, self.level_dims):
            parent = level.size(arrays, parent, dim)
            sizes.append(parent)
        return sizes

    @property
    def nnz(self) -> int:
        """Stored entries (positions of the last level; all of them for dense)."""
        return self.level_sizes()[-1] if self.levels else 1

    def validate(self, name: str = "tensor") -> None:
        """Check every invariant a kernel relies on; raise FormatError naming ``name``."""
        fmt = self.format
        if len(self.shape) != fmt.order:
            raise FormatError(f"{name}: format {fmt} does not match order {len(self.shape)}")
        if len(self.levels) != len(fmt.levels):
            raise FormatError(f"{name}: {len(self.levels)} level array sets given, format {fmt} "
                              f"has {len(fmt.levels)} levels")
        if any(d < 0 for d in self.shape):
            raise ShapeError(f"{name}: negative dimension in shape {self.shape}")
        itypes = {a.dtype for arrays in self.levels for a in arrays.values()}
        if len(itypes) > 1 or (itypes and next(iter(itypes)) not in (np.int32, np.int64)):
            raise FormatError(f"{name}: index arrays must all be int32 or all int64, got {itypes}")
        parent = 1
        for k, (level, arrays, dim) in enumerate(zip(fmt.levels, self.levels, self.level_dims)):
            missing = set(level.arrays) - set(arrays)
            if missing:
                raise FormatError(f"{name}: level {k + 1} ({level}) lacks arrays {sorted(missing)}")
            for a in arrays.values():
                if a.ndim != 1 or not a.flags.c_contiguous:
                    raise FormatError(f"{name}: level {k + 1} arrays must be 1-D and contiguous")
            parent = level.validate(arrays, parent, dim, f"{name} level {k + 1} ({level})")
        if self.vals.ndim != 1 or self.vals.shape[0] < parent or not self.vals.flags.c_contiguous:
            raise FormatError(f"{name}: values array has {self.vals.shape[0]} entries, needs {parent}")
        self._check_unique_paths(name)

    def _check_unique_paths(self, name: str) -> None:
        """A unique level below a non-unique one is unique over coordinate paths, not only
        within one parent position: two parents with the same coordinates (COO's repeated
        rows) must not both hold a child with the same coordinate. Levels check the rest."""
        levels = self.format.levels
        first = next((k for k, lv in enumerate(levels) if not lv.unique), None)
        if first is None or self.format.layout is not None:
            return
        pos = np.zeros(1, dtype=np.int64)
        paths: list[np.ndarray] = []
        for k, (level, arrays, dim) in enumerate(zip(levels, self.levels, self.level_dims)):
            pos, parent_index, crd = level.unpack(arrays, pos, dim)
            paths = [c[parent_index] for c in paths] + [crd.astype(np.int64)]
            if k > first and level.unique and pos.shape[0] > 1:
                rows = np.stack(paths)
                order = np.lexsort(rows[::-1])
                same = np.all(rows[:, order[1:]] == rows[:, order[:-1]], axis=0)
                if same.any():
                    raise repeated_path_error(k, level, rows[:, order[int(np.argmax(same))]], name)

    # ------------------------------------------------------------------ packing

    @classmethod
    def from_coords(
        cls,
        coords: np.ndarray,
        values: np.ndarray,
        shape: tuple[int, ...],
        fmt: Format,
        index_dtype: np.dtype | None = None,
    ) -> Storage:
        """Pack coordinates (order × nnz, any order, duplicates summed) into ``fmt``."""
        order = len(shape)
        if fmt.layout is not None:
            return cls._from_coords_layout(coords, values, shape, fmt, index_dtype)
        coords = np.asarray(coords, dtype=np.int64).reshape(order, -1)
        values = np.asarray(values).reshape(-1)
        if coords.shape[1] != values.shape[0]:
            raise ShapeError(f"{coords.shape[1]} coordinates but {values.shape[0]} values")
        for m in range(order):
            if coords.shape[1] and (coords[m].min() < 0 or coords[m].max() >= shape[m]):
                raise ShapeError(f"coordinate of mode {m} out of range [0, {shape[m]})")
        perm = coords[list(fmt.ordering)] if order else coords
        if order and perm.shape[1]:
            idx = np.lexsort(perm[::-1])
            perm, values = perm[:, idx], values[idx]
            keep = np.ones(perm.shape[1], dtype=bool)
            keep[1:] = np.any(perm[:, 1:] != perm[:, :-1], axis=0)
            if not keep.all():
                starts = np.flatnonzero(keep)
                values = np.add.reduceat(values, starts, dtype=values.dtype)
                perm = perm[:, keep]
        itype = index_dtype or choose_index_dtype(shape, perm.shape[1] if order else 1)
        if not order:
            return cls(fmt, (), (), np.asarray([values.sum()], dtype=values.dtype))
        levels, vals = pack_levels(fmt.levels, perm, [shape[m] for m in fmt.ordering], values, itype)
        return cls(fmt, tuple(shape), *place(levels, vals))

    @classmethod
    def _from_coords_layout(cls, coords: np.ndarray, values: np.ndarray, shape: tuple[int, ...],
                            fmt: Format, index_dtype: np.dtype | None) -> Storage:
        """Pack into a format with a layout: sum duplicates, then let the layout place entries."""
        assert fmt.layout is not None
        order = len(shape)
        coords = np.asarray(coords, dtype=np.int64).reshape(order, -1)
        values = np.asarray(values).reshape(-1)
        if coords.shape[1]:
            flat = np.ravel_multi_index(tuple(coords), shape)
            flat, inverse = np.unique(flat, return_inverse=True)
            summed = np.zeros(flat.shape[0], dtype=values.dtype)
            np.add.at(summed, inverse, values)
            coords, values = np.stack(np.unravel_index(flat, shape)).astype(np.int64), summed
        itype = index_dtype or choose_index_dtype(shape, coords.shape[1])
        levels, vals = fmt.layout.pack(fmt.levels, coords, values, shape, itype)
        return cls(fmt, tuple(shape), levels, vals)

    def to_coords(self) -> tuple[np.ndarray, np.ndarray]:
        """Stored coordinates (order × n, in storage order of traversal) and their values.

        Formats with a layout return their nonzero entries only (not block or row padding).
        """
        fmt = self.format
        if fmt.layout is not None:
            return fmt.layout.unpack(fmt.levels, self.levels, self.vals, self.shape)
        pos = np.zeros(1, dtype=np.int64)
        per_level: list[np.ndarray] = []
        for level, arrays, dim in zip(fmt.levels, self.levels, self.level_dims):
            pos, parent_index, crd = level.unpack(arrays, pos, dim)
            per_level = [c[parent_index] for c in per_level] + [crd]
        coords = np.zeros((fmt.order, pos.shape[0]), dtype=np.int64)
        for k, m in enumerate(fmt.ordering):
            coords[m] = per_level[k]
        return coords, self.vals[pos]

