"""NumPy indexing of stored tensors (integers, slices, ``...``, one index array), gathers and
concatenation.

``slice_storage`` is what ``Tensor[0:5, :]`` and ``Tensor[3]`` do; ``gather_storage`` reads
a mode at a list of coordinates (an index set's operand, ``Tensor[[3, 0, 3]]`` through
``index_storage``); ``concatenate`` joins tensors along one mode. They keep the format where
the result can have it. A range of the first mode of a format of dense and compressed levels
(CSR, DCSR, CSF, dense arrays) is sliced without copying the value array or the coordinates
below the first level: only the positions of the levels below are rebased (``O(rows)``;
``O(log nnz)`` more to find the range in a compressed first level); joining such row blocks
appends their arrays (``O(nnz)``, how Dask's ``compute`` assembles a CSR result). Anything
else goes through the coordinates (``O(nnz log nnz)``).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import ArgumentError, FormatError, OutOfBoundsError, ShapeError
from .format import Format, csf, dense
from .levels.compressed import Compressed
from .levels.dense import Dense
from .storage import Storage

# one mode's part of a key: an integer (the mode is dropped) or a (start, stop, step) range
ModeKey = int | tuple[int, int, int]


def normalize_key(key: Any, shape: tuple[int, ...]) -> tuple[ModeKey, ...]:
    """One entry per mode for a key of integers, slices and at most one ``...``."""
    given = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in given) > 1:
        raise ArgumentError("an index can only have a single ellipsis ('...')")
    if Ellipsis in given:
        at = given.index(Ellipsis)
        fill = (slice(None),) * (len(shape) - len(given) + 1)
        given = given[:at] + fill + given[at + 1:]
    if len(given) > len(shape):
        raise ShapeError(f"too many indices for a tensor of order {len(shape)}: {key!r}")
    given = given + (slice(None),) * (len(shape) - len(given))
    out: list[ModeKey] = []
    for mode, (k, dim) in enumerate(zip(given, shape)):
        if isinstance(k, slice):
            start, stop, step = k.indices(dim)
            if step < 0:
                raise ArgumentError(f"mode {mode}: slices with a negative step are not supported "
                                    f"({k!r})")
            out.append((start, max(start, stop), step))
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            if not -dim <= k < dim:
                raise OutOfBoundsError(f"index {k} is out of bounds for mode {mode} of size {dim}")
            out.append(int(k) % dim)
        else:
            raise ArgumentError(f"mode {mode}: tensors are indexed by integers, slices and '...' "
                                f"(or by index variables in expressions), got {k!r}")
    return tuple(out)


def _extent(k: tuple[int, int, int]) -> int:
    start, stop, step = k
    return len(range(start, stop, step))


def slice_storage(st: Storage, key: Any) -> Storage:
    """The entries of ``st`` that ``key`` selects, renumbered from 0 (NumPy's basic indexing)."""
    keys = normalize_key(key, st.shape)
    rows = _leading_range(st, keys)
    if rows is not None:
        return _row_range(st, *rows)
    kept = [m for m, k in enumerate(keys) if not isinstance(k, int)]
    shape = tuple(_extent(keys[m]) for m in kept)  # type: ignore[arg-type]
    fmt = _format_of_modes(st.format, kept)
    if st.format.is_dense:
        arr = st.vals.reshape(tuple(st.shape[m] for m in st.format.ordering))
        arr = arr.transpose(np.argsort(st.format.ordering))
        picked = arr[tuple(k if isinstance(k, int) else slice(*k) for k in keys)]
        vals = np.ascontiguousarray(picked.transpose(fmt.ordering)).reshape(-1)
        return Storage(fmt, shape, tuple({} for _ in shape), vals, st.fill)
    coords, vals = st.to_coords()
    mask = np.ones(vals.shape[0], dtype=bool)
    for m, k in enumerate(keys):
        c = coords[m]
        if isinstance(k, int):
            mask &= c == k
        else:
            start, stop, step = k
            mask &= (c >= start) & (c < stop) & ((c - start) % step == 0)
    picked = np.stack([(coords[m][mask] - keys[m][0]) // keys[m][2] for m in kept]) \
        if kept else np.zeros((0, int(mask.sum())), dtype=np.int64)
    return _repack(picked, vals[mask], shape, fmt, st.fill)


def _is_index_array(k: Any) -> bool:
    """Whether ``k`` is an integer array or boolean mask (a list or 1-D NumPy array)."""
    if isinstance(k, list):
        return True
    return isinstance(k, np.ndarray) and k.dtype.kind in "biu"


def index_storage(st: Storage, key: Any) -> Storage:
    """NumPy indexing by integers, slices, ``...`` and at most one integer array or boolean
    mask along a mode (``T[[3, 0, 3]]``, ``T[:, mask]``), which takes those coordinates in
    that order; an array beside integers is refused (NumPy would move the axes)."""
    given = key if isinstance(key, tuple) else (key,)
    arrays = [n for n, k in enumerate(given) if _is_index_array(k)]
    if not arrays:
        return slice_storage(st, key)
    if len(arrays) > 1 or any(isinstance(k, (int, np.integer)) for k in given):
        raise ArgumentError("a tensor is indexed by one integer array (or boolean mask) at most, "
                            f"beside slices and '...' only; got {key!r}")
    at = arrays[0]
    # '...' before the array stands for the modes the key does not name
    mode = at + (len(st.shape) - len(given) if Ellipsis in given[:at] else 0)
    if mode >= len(st.shape):
        raise ShapeError(f"too many indices for a tensor of order {len(st.shape)}: {key!r}")
    picks = np.asarray(given[at])
    dim = st.shape[mode]
    if picks.ndim != 1 or (picks.dtype.kind not in "biu" and picks.size):  # [] is an empty pick
        raise ArgumentError(f"mode {mode}: an index array is a 1-D list of integers or booleans, "
                            f"got {given[at]!r}")
    if picks.dtype.kind == "b":
        if picks.shape[0] != dim:
            raise ShapeError(f"mode {mode}: a boolean mask of length {picks.shape[0]} for a mode "
                             f"of size {dim}")
        picks = np.flatnonzero(picks)
    picks = picks.astype(np.int64)
    bad = picks[(picks < -dim) | (picks >= dim)]
    if bad.size:
        raise OutOfBoundsError(f"index {int(bad[0])} is out of bounds for mode {mode} of size {dim}")
    basic = slice_storage(st, given[:at] + (slice(None),) + given[at + 1:])
    return gather_storage(basic, mode, picks % dim if dim else picks)


def gather_storage(st: Storage, mode: int, coords: Sequence[int]) -> Storage:
    """``st`` with mode ``mode`` read at ``coords`` (NumPy's ``np.take(a, coords, axis=mode)``:
    any order, repeats allowed), in the same format. A sparse operand costs
    ``O((nnz + len(coords)) log len(coords))`` plus packing the selected entries; a
    coordinate outside the mode is a ShapeError naming it ("reaches coordinate 12, outside
    mode 0 of size 10", to follow the set's name)."""
    picks = np.asarray(coords, dtype=np.int64)
    dim = st.shape[mode]
    bad = picks[(picks < 0) | (picks >= dim)]
    if bad.size:
        raise ShapeError(f"reaches coordinate {int(bad[0])}, outside mode {mode} of size {dim}")
    shape = st.shape[:mode] + (len(picks),) + st.shape[mode + 1:]
    fmt = st.format
    if fmt.is_dense:
        arr = st.vals.reshape(tuple(st.shape[m] for m in fmt.ordering))
        arr = arr.transpose(np.argsort(fmt.ordering))
        picked = np.take(arr, picks, axis=mode)
        vals = np.ascontiguousarray(picked.transpose(fmt.ordering)).reshape(-1)
        return Storage(fmt, shape, tuple({} for _ in shape), vals, st.fill)
    entries, vals = st.to_coords()
    order = np.argsort(picks, kind="stable")
    ordered = picks[order]
    c = entries[mode]
    first = np.searchsorted(ordered, c, side="left")
    counts = np.searchsorted(ordered, c, side="right") - first
    # each stored entry is copied once per position of the set that reads its coordinate
    which = np.repeat(np.arange(c.shape[0]), counts)
    starts = np.repeat(first - (np.cumsum(counts) - counts), counts)
    new = entries[:, which]
    new[mode] = order[starts + np.arange(which.shape[0])]
    return _repack(new, vals[which], shape, fmt, st.fill)


def _leading_range(st: Storage, keys: tuple[ModeKey, ...]) -> tuple[int, int] | None:
    """``(start, stop)`` when ``keys`` is a unit-step range of the first mode of a format
    whose levels are dense or compressed, the first one over mode 0 (dense, or compressed
    with ordered unique coordinates, as in DCSR and CSF)."""
    fmt = st.format
    first = keys[0] if keys else None
    if fmt.layout is not None or not keys or fmt.ordering[0] != 0 or not isinstance(first, tuple):
        return None
    if first[2] != 1 or any(k != (0, d, 1) for k, d in zip(keys[1:], st.shape[1:])):
        return None
    if not all(type(lv) in (Dense, Compressed) for lv in fmt.levels):
        return None
    top = fmt.levels[0]
    if isinstance(top, Compressed) and not (top.ordered and top.unique):
        return None
    return first[0], first[1]


def _row_range(st: Storage, start: int, stop: int) -> Storage:
    """Rows ``start:stop``: views of the arrays below the first level, but for the rebased
    positions of the compressed levels (and, when the first level is compressed, its
    coordinates in the range, shifted)."""
    levels: list[dict[str, np.ndarray]] = []
    if isinstance(st.format.levels[0], Dense):
        lo, hi = start, stop
        levels.append({})
    else:
        crd = st.levels[0]["crd"][int(st.levels[0]["pos"][0]):int(st.levels[0]["pos"][1])]
        lo, hi = (int(x) for x in np.searchsorted(crd, [start, stop]))
        levels.append({"pos": np.asarray([0, hi - lo], dtype=crd.dtype),
                       "crd": crd[lo:hi] - crd.dtype.type(start)})
        lo, hi = lo + int(st.levels[0]["pos"][0]), hi + int(st.levels[0]["pos"][0])
    for level, arrays, dim in zip(st.format.levels[1:], st.levels[1:], st.level_dims[1:]):
        if isinstance(level, Dense):
            lo, hi = lo * dim, hi * dim
            levels.append({})
            continue
        pos, crd = arrays["pos"], arrays["crd"]
        first, last = int(pos[lo]), int(pos[hi])
        levels.append({"pos": pos[lo:hi + 1] - pos.dtype.type(first), "crd": crd[first:last]})
        lo, hi = first, last
    shape = (stop - start,) + st.shape[1:]
    return Storage(st.format, shape, tuple(levels), st.vals[lo:hi], st.fill)


def _format_of_modes(fmt: Format, kept: Sequence[int]) -> Format:
    """``fmt`` restricted to the modes ``kept`` (renumbered), or CSF / dense when the levels
    left cannot form a format on their own (COO without its first level)."""
    n = len(kept)
    if len(kept) == fmt.order:
        return fmt
    if fmt.layout is None:
        storage_modes = [m for m in fmt.ordering if m in kept]
        levels = [fmt.levels[fmt.ordering.index(m)] for m in storage_modes]
        try:
            return Format(levels, [kept.index(m) for m in storage_modes])
        except FormatError:
            pass
    return dense(n) if fmt.is_dense or n == 0 else csf(n)


def concatenate(storages: Sequence[Storage], axis: int) -> Storage:
    """The storages joined along mode ``axis``, in the first one's format."""
    first = storages[0]
    order = len(first.shape)
    if not -order <= axis < order:
        raise ShapeError(f"axis {axis} is out of range for tensors of order {order}")
    axis %= order
    for s in storages[1:]:
        if len(s.shape) != order or any(a != b for m, (a, b) in enumerate(zip(s.shape, first.shape))
                                        if m != axis):
            raise ShapeError(f"cannot concatenate shapes {first.shape} and {s.shape} "
                             f"along axis {axis}")
    sizes = [s.shape[axis] for s in storages]
    shape = first.shape[:axis] + (sum(sizes),) + first.shape[axis + 1:]
    if axis == 0 and _stacks_by_rows(first.format) and all(s.format == first.format for s in storages):
        return _stack_rows(storages, shape)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    parts = [s.to_coords() for s in storages]
    coords = np.concatenate([c for c, _ in parts], axis=1) if parts else np.zeros((order, 0))
    coords[axis] += np.repeat(offsets, [c.shape[1] for c, _ in parts])
    vals = np.concatenate([v for _, v in parts]).astype(
        np.result_type(*(s.vals.dtype for s in storages)), copy=False)
    return _repack(coords, vals, shape, first.format, first.fill)


def _stacks_by_rows(fmt: Format) -> bool:
    """Whether row blocks of ``fmt`` join by appending their arrays: a dense first level over
    mode 0 and dense or compressed levels below it."""
    return (fmt.layout is None and fmt.order > 0 and fmt.ordering[0] == 0
            and isinstance(fmt.levels[0], Dense)
            and all(type(lv) in (Dense, Compressed) for lv in fmt.levels[1:]))


def _stack_rows(storages: Sequence[Storage], shape: tuple[int, ...]) -> Storage:
    """Row blocks of one dense-first format joined in ``O(nnz)``: each compressed level's
    positions are appended shifted by the entries before them, everything else appended."""
    fmt = storages[0].format
    spans = [(0, s.shape[0]) for s in storages]  # each block's positions in the level above
    levels: list[dict[str, np.ndarray]] = [{}]
    for depth, (level, dim) in enumerate(zip(fmt.levels[1:], storages[0].level_dims[1:]), 1):
        if isinstance(level, Dense):
            spans = [(lo * dim, hi * dim) for lo, hi in spans]
            levels.append({})
            continue
        pos_parts, crd_parts, new_spans, offset = [], [], [], 0
        for s, (lo, hi) in zip(storages, spans):
            pos = s.levels[depth]["pos"][lo:hi + 1].astype(np.int64)
            first, last = int(pos[0]), int(pos[-1])
            pos_parts.append((pos if not pos_parts else pos[1:]) - first + offset)
            crd_parts.append(s.levels[depth]["crd"][first:last])
            new_spans.append((first, last))
            offset += last - first
        levels.append({"pos": np.concatenate(pos_parts), "crd": np.concatenate(crd_parts)})
        spans = new_spans
    largest = max([*shape, *(int(lv["pos"][-1]) for lv in levels if lv)])
    index = np.int32 if largest < 2**31 - 1 else np.int64  # one index width for all levels
    levels = [{k: a.astype(index, copy=False) for k, a in lv.items()} for lv in levels]
    vals = np.concatenate([s.vals[lo:hi] for s, (lo, hi) in zip(storages, spans)]).astype(
        np.result_type(*(s.vals.dtype for s in storages)), copy=False)
    return Storage(fmt, shape, tuple(levels), vals, storages[0].fill)


def _repack(coords: np.ndarray, vals: np.ndarray, shape: tuple[int, ...], fmt: Format,
            fill: Any) -> Storage:
    """Entries packed into ``fmt``, keeping their value type and the fill value."""
    if not shape:  # a scalar: the one selected entry, or the fill value
        total = vals[0] if vals.shape[0] else vals.dtype.type(fill)
        return Storage(fmt, (), (), np.asarray([total], dtype=vals.dtype), fill)
    out = Storage.from_coords(coords, vals, shape, fmt)
    return Storage(out.format, out.shape, out.levels, out.vals.astype(vals.dtype, copy=False), fill)
