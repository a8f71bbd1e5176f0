"""Call plans: a compiled variant bound for the C call path (``coiter.runtime._fastcall``).

A plan says where each of the kernel's parameters comes from: a word of an operand's
argument block (:attr:`Storage._cargs`: shape, level dimensions, array addresses, values
address, value count), the result's dimensions, its values, the thread count or the work.
It also lists the extents that must agree (index variables shared by several operands) and
how the result is built. Calling a plan binds the operands of one call in C; whatever the
plan does not cover returns NotImplemented and the caller takes the Python path.

The C extension is optional (built at install time): without it :func:`build_plan` returns
None and every call goes through ctypes.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from ..errors import ShapeError
from ..formats.format import Format
from ..formats.storage import signature_id
from ..notation.ast import IndexVar
from .kernel import SPECIALIZE_EXTENT, StorageKernel, Variant, entries_slot, shared_spec

try:
    from . import _fastcall
except ImportError:  # built without the extension: ctypes only
    _fastcall = None  # type: ignore[assignment]

# Calls with at least this much work (stored values) release the GIL while the kernel runs.
GIL_WORK = 65536


if _fastcall is not None:
    KernelCall: type = _fastcall.KernelCall
else:
    class KernelCall:  # type: ignore[no-redef]
        """Base of :class:`coiter.Kernel` without the extension: every call is ``_call``'s."""

        _plan: Any = None
        _direct = True

        def __call__(self, threads: int | None = None, **operands: Any) -> Any:
            return self._call(threads, **operands)  # type: ignore[attr-defined]


def available() -> bool:
    """Whether the C call path is built."""
    return _fastcall is not None


def _block(fmt: Format) -> tuple[int, list[tuple[int, str]]]:
    """Number of levels and the (level, array) list of ``fmt``'s argument block: shape,
    level dimensions, level sizes, arrays, values, value count (Storage._cargs)."""
    arrays = [(k, name) for k, level in enumerate(fmt.levels) for name in level.arrays]
    return len(fmt.levels), arrays


class Bound(NamedTuple):
    """A variant's CallPlan and the index variables whose extents no operand's shape gives
    (compound subscripts' and given extents, in the plan's derived words): the Python path
    solves them and hands them to the plan with :func:`remember_extents`."""

    plan: Any
    derived: tuple[IndexVar, ...]


def build_plan(core: StorageKernel, var: Variant, finisher: Callable[..., Any],
               tensor_type: type, storage_type: type) -> Bound | None:
    """A CallPlan for ``var`` of ``core``, or None when the variant needs the Python path
    (converted operands, converted results, counted iterations) or the extension is
    missing. ``finisher(rc, vals, arrays, shape, shared)`` builds sparse results
    (``shared``: the storage of the operand whose levels the result shares) and reports
    errors; dense results become ``tensor_type`` objects in C."""
    if _fastcall is None or core.tuner is not None or var.ir.mode != "fused" or core.count_iterations:
        return None
    prog, ir = var.prog, var.ir
    if prog.result_conversion is not None:
        return None
    limit = core.row_workspace_limit(prog)
    decls = prog.tensors
    if any(d.converted_from is not None for d in decls.values()):
        return None
    rdecl = decls[core.result]
    rfmt = core.result_format(var)
    if rfmt.layout is not None or len(rfmt.levels) != rfmt.order:
        return None

    ops: list[tuple[str, int, int, int, int, int]] = []
    offsets: dict[str, tuple[int, int, list[tuple[int, str]]]] = {}  # name -> offset, order, arrays
    words = 0
    for name in core.inputs:
        fmt, dtype = core.formats[name], decls[name].dtype
        nlevels, arrays = _block(fmt)
        order = core.orders[name]
        length = order + 2 * nlevels + len(arrays) + 2
        dense = fmt.is_dense and fmt.is_identity_ordered
        kind = _fastcall.OP_DENSE if dense else _fastcall.OP_STORAGE
        sig = signature_id(fmt, dtype, var.itypes.get(name), decls[name].fill)
        ops.append((core.keyword(name), kind, sig, np.dtype(dtype).num, order, length))
        offsets[name] = (words, order, arrays)
        words += length

    checks, first = _extent_words(core, offsets)
    derived: list[IndexVar] = []

    def extent_word(v: IndexVar) -> int:
        # an operand's shape word, else a derived word (solved by the Python path)
        if v in first:
            return first[v]
        if v not in derived:
            derived.append(v)
        return words + derived.index(v)

    params: list[int] = []
    sources = {"threads": _fastcall.SRC_THREADS, "work": _fastcall.SRC_WORK,
               "vals": _fastcall.SRC_RVALS, "shared_vals": _fastcall.SRC_RVALS, "out": _fastcall.SRC_OUT,
               "out_len": _fastcall.SRC_OUT_LEN, "cap_hint": _fastcall.SRC_CAP_HINT}
    for p in ir.params:
        if p.kind in ("threads", "work") or (p.tensor == core.result and p.kind in sources):
            params += [sources[p.kind], 0]
        elif p.tensor == core.result and p.kind == "dim":
            params += [_fastcall.SRC_RDIM, p.level]
        elif p.kind == "extent":
            params += [_fastcall.SRC_WORD, extent_word(IndexVar(p.array))]
        elif p.tensor in offsets and p.kind in ("dim", "array", "vals"):
            base, order, arrays = offsets[p.tensor]
            nlevels = len(core.formats[p.tensor].levels)
            if p.kind == "dim":
                word = base + order + p.level
            elif p.kind == "vals":
                word = base + order + 2 * nlevels + len(arrays)
            elif (p.level, p.array) in arrays:
                word = base + order + 2 * nlevels + arrays.index((p.level, p.array))
            else:
                return None
            params += [_fastcall.SRC_WORD, word]
        else:
            return None  # a parameter unknown here

    rshape = [extent_word(v) for v in core.plain.lhs.indices]
    # (word, value): the extents the variant was compiled for; a generic level's extent
    # (value -1) must not be one a specialised variant exists for
    fixed: list[int] = []
    extents = {(name, k): extent for name, k, extent in var.fixed}
    for name, k in core.specializable:
        mode = core.formats[name].ordering[k]
        word = rshape[mode] if name == core.result else offsets[name][0] + mode
        fixed += [word, extents.get((name, k), -1)]
    if limit is not None:  # a larger row workspace is another choice: the Python path's
        mode, most = limit
        fixed += [rshape[mode], -2 - most]
    # extents given at compile time (or by windows) that an operand's shape must match: a
    # mismatch is the Python path's ShapeError
    fixed += [x for v, extent in core.extents.items() if v in first for x in (first[v], extent)]
    itype = var.itypes[core.result]
    out_types = [np.dtype(rdecl.dtype) if k < 0 else np.dtype(itype) for k, _ in ir.out_arrays]
    # (operand, word of its positions in the last shared level, shared levels)
    shared: tuple[int, int, int] = (-1, 0, 0)
    spec = shared_spec(ir)
    if spec is not None:
        base, order, _ = offsets[spec.array]
        shared = (core.inputs.index(spec.array), base + order + len(core.formats[spec.array].levels)
                  + spec.level - 1, spec.level)
        kind = _fastcall.RESULT_SHARED
    else:
        kind = _fastcall.RESULT_ALLOCATED if ir.result_allocated else _fastcall.RESULT_DENSE
    plan = _fastcall.CallPlan(
        var.address, var.library, tuple(ops), tuple(params), tuple(checks), tuple(rshape),
        tuple(rfmt.ordering), kind, shared,
        np.dtype(rdecl.dtype).num, itype == np.int32,
        tuple(t.num for t in out_types), tuple(t.itemsize for t in out_types), tuple(fixed),
        SPECIALIZE_EXTENT, finisher, tensor_type, storage_type, rfmt, core.result, GIL_WORK,
        entries_slot(rfmt, ir.out_arrays), ir.zeroes_result,
        tuple(base + m for base, order, _ in offsets.values() for m in range(order)), len(derived))
    return Bound(plan, tuple(derived))


def remember_extents(bound: Bound, core: StorageKernel, shapes: Mapping[str, tuple[int, ...]],
                     given: tuple[int, ...] | None = None) -> None:
    """Give ``bound``'s plan the derived extents of operands of these ``shapes`` (after a
    call that succeeded), so that its next calls with these shapes stay in C. A call given
    the result's shape ``given`` teaches the plan only when the operands alone size the
    result that way."""
    if not bound.derived:
        return
    try:
        dims = core.dims(shapes)
    except ShapeError:  # the operands alone do not size the result
        return
    if given is not None and tuple(dims[v] for v in core.plain.lhs.indices) != tuple(given):
        return
    bound.plan.remember(tuple(d for name in core.inputs for d in shapes[name]),
                        tuple(dims[v] for v in bound.derived))


def _extent_words(core: StorageKernel, offsets: Mapping[str, tuple[int, int, list]]
                  ) -> tuple[list[int], dict[Any, int]]:
    """Pairs of shape words that must be equal, and the first word giving each index
    variable's extent."""
    checks: list[int] = []
    first: dict[Any, int] = {}
    for a in core.accesses:
        base = offsets[a.tensor][0]
        for m, v in enumerate(a.indices):
            if v in first:
                checks += [first[v], base + m]
            else:
                first[v] = base + m
    return checks, first
