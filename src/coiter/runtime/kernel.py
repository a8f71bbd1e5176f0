"""Compiled kernels over Storages: concretize, schedule, lower, compile and invoke.

A :class:`StorageKernel` is compiled once per assignment and formats; concrete variants
specialised on value and index types are generated, compiled and cached on first use.
It computes a result :class:`~coiter.formats.storage.Storage` from operand Storages; the
user-facing :class:`coiter.Kernel` turns Tensors, arrays and SciPy matrices into those and
calls variants through the C call path (:mod:`coiter.runtime.callplan`) when it can.
"""
from __future__ import annotations

import ctypes
import functools
import math
import weakref
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

import numpy as np

from ..codegen import cuda
from ..codegen.c import module
from ..concrete.commands import Command
from ..concrete.concretize import concretize
from ..concrete.schedule import apply as apply_command
from ..concrete.stmt import ConcreteProgram
from ..errors import ArgumentError, FormatError, KernelError, ShapeError
from ..formats.format import Format
from ..ir.count import SUPPORT, counted
from ..formats.storage import INT32_MAX, Storage, check_fill, fill_key
from ..lattice.lattice import Typing, expression_fill
from ..lower.intrinsics import computable
from ..lower.ism import WORKSPACE_KEY_ERROR
from ..lower.lower import BOUND_ERROR, PATTERN_ERROR, KernelIR, ParamSpec, lower
from ..notation.ast import Assignment, IndexVar, accesses
from ..notation.affine import padding_refusal, subscript_range, trivialize
from ..notation.functions import computation_dtype
from ..notation.reductions import distinct_reductions, insert_reductions
from ..formats.workspaces import DENSE, policy_names
from .autotune import AutoTuner
from .workspace_choice import (
    AUTO, check_dense, choose, memory_cap, row_entry_bytes, workspace_decl,
)
from . import pool
from .compiler import load_library
from .cuda import load_cuda_library

OVERFLOW = 2  # kernel return code: int32 result indices overflowed
# Inner levels (below the first) whose dimension is at most this are compiled with it as a
# constant, one variant per extent: with SpMM's 16 dense columns a constant lets the C
# compiler keep a result row in registers (2-4x faster than a run-time bound).
SPECIALIZE_EXTENT = 64

Fixed = tuple[tuple[str, int, int], ...]  # (tensor, level, extent) of specialised levels
_ERRORS = {
    1: "out of memory while assembling the result",
    OVERFLOW: "result index overflow",
    BOUND_ERROR: "the operands' sizes break a bound() promise of the schedule",
    WORKSPACE_KEY_ERROR: "the sparse workspace's coordinates need more than 63 bits (the product "
                         "of its modes' extents is too large)",
    cuda.CUDA_ERROR: "a CUDA runtime call failed (the message is on stderr)",
    PATTERN_ERROR: "compute: the operands produce entries the pattern does not hold (or miss "
                   "some it holds); assemble the pattern from operands of the same structure",
}


@dataclass(frozen=True)
class Variant:
    """One compiled specialisation: its program, IR, source and entry points."""

    prog: ConcreteProgram
    itypes: Mapping[str, np.dtype]  # index type of every tensor's arrays
    ir: KernelIR
    source: str
    library: Any  # the loaded ctypes library (keeps the code mapped)
    packed: Any  # ctypes function: int f(const int64_t* args)
    fixed: Fixed = ()  # levels compiled with a constant extent

    @property
    def address(self) -> int:
        """Address of the packed entry point."""
        return ctypes.cast(self.packed, ctypes.c_void_p).value or 0


def aligned_values(size: int, dtype: np.dtype, zero: bool = True, align: int = 64) -> np.ndarray:
    """Values (zeros unless ``zero`` is False) starting at a cache line: a dense result's
    rows then start aligned (vector loads and stores of a convolution's output channels
    split no line)."""
    dtype = np.dtype(dtype)
    extra = align // dtype.itemsize + 1
    raw = (pool.zeros if zero else pool.empty)(size + extra, dtype)
    skip = (-raw.ctypes.data % align) // dtype.itemsize
    return raw[skip:skip + size]


def adopt(ptr: int, length: int, dtype: np.dtype) -> np.ndarray:
    """A 1-D array over the kernel's heap array ``ptr`` (shrunk to ``length`` elements), freed
    with the array; zeros when ``ptr`` is null."""
    if not ptr:
        return np.zeros(length, dtype=dtype)
    nbytes = max(length, 1) * dtype.itemsize
    ptr = pool.kernel_realloc(ptr, nbytes) or ptr  # a failed shrink leaves the block as it was
    buf = (ctypes.c_char * nbytes).from_address(ptr)
    weakref.finalize(buf, pool.kernel_free, ptr)
    return np.frombuffer(buf, dtype=dtype, count=length)


def shared_spec(ir: KernelIR) -> ParamSpec | None:
    """The parameter of a result written over an operand's first levels, if there is one."""
    return next((p for p in ir.params if p.kind == "shared_vals"), None)


# the last result's entries count toward a call's first capacity up to this many times
# the call's stored operand values (the C call path's LAST_ENTRIES_FACTOR too)
LAST_ENTRIES_FACTOR = 64


def capacity_hint(operand_values: Iterable[int], rdims: tuple[int, ...], last_entries: int = 0) -> int:
    """First capacity of an appended result: the operands' stored values together (a
    union of them appends no more) or, when larger, the entries of the kernel's last
    result (a product may append more: growing copies the arrays and faults in fresh
    pages, 2,000 page faults per SpGEMM call on bayer10, most of its time), at most the
    dense result's size, at least 16. Pages of the reservation that are never written
    cost nothing; the kernel trims the rest. The last result counts up to
    ``LAST_ENTRIES_FACTOR`` times the operands' values: a call on small operands after
    one on huge ones reserves no more than that."""
    work = sum(operand_values)
    return max(16, min(max(work, min(last_entries, LAST_ENTRIES_FACTOR * work)), math.prod(rdims)))


def entries_slot(fmt: Format, out_arrays: Iterable[tuple[int, str]]) -> int:
    """The out slot of a returned result whose length counts the entries of its deepest
    appended level (that level's first coordinate array), or -1 when no level appends or
    the kernel does not return that array (a result over an operand's levels)."""
    appended = [k for k, level in enumerate(fmt.levels) if level.position_arrays]
    slots = list(out_arrays)
    slot = (appended[-1], fmt.levels[appended[-1]].position_arrays[0]) if appended else None
    return slots.index(slot) if slot in slots else -1


def shared_size(operand: Storage, levels: int, rdims: tuple[int, ...]) -> int:
    """Values of a result over the first ``levels`` levels of ``operand``: that level's
    positions times the result's dense levels below it."""
    return operand.level_sizes()[levels - 1] * math.prod(rdims[levels:])


def call_work(storages: Mapping[str, Storage], inputs: list[str], dense_result: int) -> int:
    """The work a call passes to its kernel (which sizes its thread team by it): the stored
    values of every operand, plus the values of a dense result."""
    return sum(int(storages[n].vals.shape[0]) for n in inputs) + dense_result


class StorageKernel:
    """A compiled tensor assignment computing a result Storage from operand Storages."""

    def __init__(
        self,
        assignment: Assignment,
        formats: Mapping[str, Format],
        dtype: np.dtype = np.dtype(np.float64),
        aliases: Mapping[str, str] | None = None,
        schedule: tuple[Command, ...] | str = (),
        target: str = "c",
        fast_math: bool = False,
        workspace: str = AUTO,
        workspace_memory: int | None = None,
        padding: bool = False,
        extents: Mapping[str, int] | None = None,
        count_iterations: bool = False,
        gather: tuple[str, ...] | None = None,
        fills: Mapping[str, Any] | None = None,
        pattern_of: str | None = None,
    ) -> None:
        if workspace not in (AUTO, *policy_names()):
            raise FormatError(f"unknown workspace {workspace!r}: choose one of "
                              f"{', '.join((AUTO, *policy_names()))}")
        self.assignment = assignment
        # compound subscripts as fresh variables and their equations (I(i+k): I(t), t = i+k);
        # with ``padding`` they may read outside their mode, where the operand is zero
        explicit, renamed = distinct_reductions(insert_reductions(assignment))
        self.plain, self.equations = trivialize(explicit)
        if padding and (why := padding_refusal(explicit)) is not None:
            raise ArgumentError(why)
        self.padding = padding
        # sizes of index variables given by name (a pooling window's, which no operand has)
        # or by a window of a mode (B(i(0,5)): 5), with where each comes from
        self.extents = {IndexVar(n): int(e) for n, e in (extents or {}).items()}
        # (a variable bound twice was renamed in one reduction: the extent is both's)
        self.extents.update({new: self.extents[old] for new, old in renamed.items() if old in self.extents})
        self.extent_where = {v: "extents" for v in self.extents}
        for eq in self.equations:
            if eq.window is not None:
                self._window_extent(eq.window.var, eq.window.extent, f"the window {eq.window} of {eq.where}")
                self._window_extent(eq.window_offset, 1, f"the window {eq.window} of {eq.where}")
        # result variables whose compound subscripts are walked per output, not scattered
        # (None: concretize's default choice)
        self.gather = None if gather is None else tuple(gather)
        # an operand whose pattern the result takes though others are sparse (concretize)
        self.pattern_of = pattern_of
        # C kernels count their loop iterations; the count of the last call
        self.count_iterations = count_iterations
        self.iterations: int | None = None
        # the workspace of a scattered result: "auto" (chosen per call), "dense" or a
        # sparse policy; dense ones never take more than workspace_memory bytes
        self.workspace = workspace
        self.workspace_memory = workspace_memory
        self.target = target  # "c" or "cuda": the back end of every variant
        self.fast_math = fast_math  # C sums may be reassociated (compiler flags)
        # entries of the last result the Python path returned (its next first capacity)
        self.last_entries = 0
        # the value of the entries each sparse operand does not store (0 unless given)
        self.fills = {name: value for name, value in (fills or {}).items() if value != 0}
        # "auto": searched per operand size class by the autotuner, else fixed commands
        self.tuner: AutoTuner | None = None
        if schedule == "auto":
            keys = ";".join(f"{n}={f.to_string()}" for n, f in sorted(formats.items()))
            self.tuner = AutoTuner(f"{assignment}|{keys}|{target}", target)
            schedule = ()
        self.schedule = tuple(schedule)
        # operand names bound to another keyword (the old value of an updated result)
        self.aliases = dict(aliases or {})
        self.formats = dict(formats)
        self.dtype = np.dtype(dtype)
        self.result = assignment.lhs.tensor
        self.accesses = accesses(self.plain.rhs)
        self.inputs = list(dict.fromkeys(a.tensor for a in self.accesses))
        self.orders = {a.tensor: len(a.indices) for a in self.accesses}
        self.orders[self.result] = len(assignment.lhs.indices)
        self._programs: dict[tuple, ConcreteProgram] = {}
        self._variants: dict[tuple, Variant] = {}
        self._result_formats: dict[int, Format] = {}

    def _window_extent(self, v: IndexVar | None, extent: int, where: str) -> None:
        assert v is not None  # a window's equation has its offset variable
        if v in self.extents and self.extents[v] != extent:
            raise ShapeError(f"index variable {v.name} has {self.extents[v]} coordinates in "
                             f"{self.extent_where[v]} but {extent} in {where}")
        self.extents[v] = extent
        self.extent_where.setdefault(v, where)

    def keyword(self, name: str) -> str:
        """The keyword an operand is passed under."""
        return self.aliases.get(name, name)

    # -- introspection -------------------------------------------------------------------
    @property
    def concrete(self) -> ConcreteProgram:
        """Concrete index notation chosen for the default value type."""
        return self.program({n: self.dtype for n in self.inputs})

    @property
    def source(self) -> str:
        """Generated C (CUDA for target "cuda") for the default value type and int32 indices."""
        prog = self.concrete
        itypes = {n: np.dtype(np.int32) for n in prog.tensors}
        return self.variant(prog, itypes, "fused").source

    def variants(self) -> list[Variant]:
        """The variants compiled so far."""
        return list(self._variants.values())

    # -- compilation ---------------------------------------------------------------------
    def result_dtype(self, dtypes: Mapping[str, np.dtype]) -> np.dtype:
        """NumPy's type for the right-hand side, in the nearest type kernels compute in
        (functions of bools: float32 for NumPy's float16, int64 for its int8)."""
        return computable(computation_dtype(self.assignment.rhs, dtypes, self.dtype))

    def program(self, dtypes: Mapping[str, np.dtype], commands: tuple[Command, ...] | None = None,
                fixed: Fixed = (), workspace: str | None = None) -> ConcreteProgram:
        """The concrete program for operand value types ``dtypes`` (scheduled), with the
        levels in ``fixed`` specialised on their extent and ``workspace`` (by default the
        kernel's) taking scattered results."""
        commands = self.schedule if commands is None else commands
        workspace = workspace or self.workspace
        key = (frozenset(dtypes.items()), commands, fixed, workspace)
        prog = self._programs.get(key)
        if prog is None:
            rt = self.result_dtype(dtypes)
            all_dtypes = {**dtypes, self.result: rt}
            formats = dict(self.formats)
            for name, k, extent in fixed:
                fmt = formats[name]
                levels = list(fmt.levels)
                levels[k] = levels[k].with_extent(extent)
                formats[name] = Format(levels, fmt.ordering, fmt.layout)
            prog = concretize(self.plain, formats, all_dtypes, rt, workspace,
                              equations=self.equations, padded=self.padding,
                              gather=None if self.gather is None else
                              frozenset(IndexVar(n) for n in self.gather),
                              fills=self.typed_fills(all_dtypes), pattern_of=self.pattern_of,
                              scatter_sums=not commands and self.tuner is None)
            for command in commands:
                prog = apply_command(prog, command)
            self._programs[key] = prog
        return prog

    def typed_fills(self, dtypes: Mapping[str, np.dtype]) -> dict[str, Any]:
        """Every tensor's fill value in its type (``dtypes``, the result's included): the
        operands' as given, a sparse result's the value the right-hand side takes where
        no operand is stored, computed in the result's type as kernels compute it (bools'
        1 + 1 is True, unsigned -2 wraps; 0 where that varies: every entry is then stored;
        and in formats that cannot hold another, Format.pads: ``sd`` rows stored for an
        entry read their other columns as zeros). Operands in such formats have fill 0."""
        out = {name: check_fill(value, dtypes[name]) for name, value in self.fills.items()
               if not self.formats[name].is_dense and not self.formats[name].pads}
        result_format = self.formats[self.result]
        if out and not result_format.is_dense:
            fill = expression_fill(self.plain.rhs, lambda a: not self.formats[a.tensor].is_dense,
                                   lambda a: np.asarray(out.get(a.tensor, 0), dtypes[a.tensor])[()],
                                   Typing(dtypes, dtypes[self.result]))
            # (NaN, as 0 * inf of complex values, is no fill: no entry would equal it)
            if fill is not None and fill == fill and (
                    not result_format.pads or fill_key(fill) == fill_key(0)):
                out[self.result] = check_fill(fill, dtypes[self.result])
        return out

    def check_fills(self, storages: Mapping[str, Storage]) -> None:
        """ArgumentError naming an operand whose absent entries are not the ones the kernel
        was compiled for (its lattices depend on them)."""
        for name in self.inputs:
            st = storages[name]
            if st.format.is_dense:
                continue
            want = check_fill(0 if st.format.pads else self.fills.get(name, 0), st.vals.dtype)
            if fill_key(st.fill) != fill_key(want):
                raise ArgumentError(
                    f"{name}'s absent entries are {st.fill!r}, the kernel was compiled for "
                    f"{want!r}: compile with fill_values={{{name!r}: {st.fill!r}}}, or pass "
                    f"{name}.with_fill({want!r})")

    def workspace_for(self, prog: ConcreteProgram, dims: Mapping[IndexVar, int],
                      rshape: tuple[int, ...], storages: Mapping[str, Storage] | None = None) -> str:
        """The workspace a call with extents ``dims`` on ``storages`` uses (``prog`` is the
        kernel's default program): the kernel's choice, or with "auto" the one
        :func:`~coiter.runtime.workspace_choice.choose` makes from the call's operands."""
        chosen = self.scheduled_workspace()
        densely = prog.result_conversion is not None and prog.tensors[self.result].format.is_dense
        if self.workspace == DENSE or chosen == DENSE or densely:
            check_dense(prog, dims, rshape, memory_cap(self.workspace_memory))
        if self.workspace != AUTO or chosen or workspace_decl(prog) is None:
            return self.workspace
        return choose(prog, dims, rshape, memory_cap(self.workspace_memory), storages)

    def scheduled_workspace(self) -> str:
        """The workspace format a ``precompute`` of the schedule gives ("" when none does):
        it wins over the per-call choice."""
        return next((str(c.args[4]) for c in self.schedule if c.name == "precompute" and len(c.args) > 4
                     and c.args[4]), "")

    def row_workspace_limit(self, prog: ConcreteProgram) -> tuple[int, int] | None:
        """For a variant with a dense row workspace that calls choose (or check) per call:
        the result mode it spans and the largest extent the memory cap allows it."""
        decl = workspace_decl(prog)
        checked = self.workspace in (AUTO, DENSE) or self.scheduled_workspace() == DENSE
        if decl is None or decl.policy is not None or not checked:
            return None
        mode = self.plain.lhs.indices.index(decl.modes[0])
        return mode, memory_cap(self.workspace_memory) // row_entry_bytes(decl)

    def variant(self, prog: ConcreteProgram, itypes: Mapping[str, np.dtype], mode: str,
                fixed: Fixed = ()) -> Variant:
        """The compiled variant of ``prog`` (specialised on ``fixed``) for index types
        ``itypes`` and ``mode``."""
        key = (id(prog), frozenset(itypes.items()), mode)
        var = self._variants.get(key)
        if var is None:
            ir = lower(prog, itypes, mode, name=f"coiter_{mode}", target=self.target)
            rit = itypes[prog.result]
            index_max = "INT32_MAX" if rit == np.int32 else "INT64_MAX"
            if self.target == "cuda":
                formats = {n: d.format for n, d in prog.tensors.items()}
                source = cuda.module(ir, formats, index_max)
                lib = load_cuda_library(source)
            else:
                if self.count_iterations:
                    ir = replace(ir, function=counted(ir.function), support=(*ir.support, SUPPORT))
                source = module([ir.function], index_max, ir.support)
                lib = load_library(source, fast_math=self.fast_math)
                if self.count_iterations:
                    lib.coiter_iteration_count.restype = ctypes.c_int64
            packed = getattr(lib, f"{ir.function.name}_packed")
            packed.argtypes = [ctypes.c_void_p]
            packed.restype = ctypes.c_int
            var = Variant(prog, dict(itypes), ir, source, lib, packed, fixed)
            self._variants[key] = var
        return var

    @functools.cached_property
    def specializable(self) -> tuple[tuple[str, int], ...]:
        """(tensor, level) of the levels variants may fix the extent of: inner levels (not
        the first) with a fixed-extent form, in C kernels with a sparse operand (loops over
        a dense inner level under a sparse one are where a constant bound pays)."""
        if all(f.is_dense for f in self.formats.values()) or self.target != "c":
            return ()
        # a result computed in another format (a hashed one, in COO) has none of its levels
        return tuple((name, k) for name, fmt in sorted(self.formats.items()) if fmt.layout is None
                     and (name != self.result or fmt.assemblable)
                     for k, level in enumerate(fmt.levels) if k > 0 and level.with_extent(1) is not None)

    def fixed_extents(self, shapes: Mapping[str, tuple[int, ...]]) -> Fixed:
        """The specialisable levels of these tensor shapes with at most SPECIALIZE_EXTENT
        coordinates, with their extents."""
        fixed = []
        for name, k in self.specializable:
            extent = shapes[name][self.formats[name].ordering[k]]
            if 0 < extent <= SPECIALIZE_EXTENT:
                fixed.append((name, k, extent))
        return tuple(fixed)

    # -- shapes --------------------------------------------------------------------------
    def dims(self, shapes: Mapping[str, tuple[int, ...]],
             result_shape: tuple[int, ...] | None = None) -> dict[IndexVar, int]:
        """The extent of every index variable; ShapeError naming the culprit on a mismatch."""
        dims: dict[IndexVar, int] = dict(self.extents)
        where: dict[IndexVar, str] = dict(self.extent_where)
        lhs = self.plain.lhs.indices
        if result_shape is not None:
            if len(result_shape) != len(lhs):
                raise ShapeError(f"result shape {tuple(result_shape)} has {len(result_shape)} modes, "
                                 f"the result {self.result} has {len(lhs)}")
            for m, v in enumerate(lhs):
                dims[v] = int(result_shape[m])
                where[v] = f"the result {self.result} (mode {m})"
        for a in self.accesses:
            shape = shapes[a.tensor]
            for m, v in enumerate(a.indices):
                if v in dims and dims[v] != shape[m]:
                    raise ShapeError(
                        f"index variable {v.name} has size {dims[v]} in {where[v]} "
                        f"but {shape[m]} in {a.tensor} (mode {m})"
                    )
                dims.setdefault(v, shape[m])
                where.setdefault(v, f"{a.tensor} (mode {m})")
        self._solve_extents(dims)
        for v in lhs:
            if v not in dims:
                raise ShapeError(f"index variable {v.name} of the result has no size: it appears in no operand")
        return dims

    def _solve_extents(self, dims: dict[IndexVar, int]) -> None:
        """Extents of variables only compound subscripts give (the largest that keeps the
        subscript inside its mode: a "valid" convolution's output), and ShapeError for a
        subscript that leaves its mode when ``padding`` is off. With ``padding`` the inferred
        extent reaches as far past the mode's end as the subscript starts before it
        (symmetric padding: torch's output size)."""
        for eq in self.equations:
            missing = [(c, v) for c, v in eq.subscript.terms if v not in dims]
            if len(missing) == 1 and missing[0][0] > 0:
                c, v = missing[0]
                lo, rest = subscript_range(eq.subscript, {**dims, v: 1})
                end = dims[eq.var] - 1 + (max(0, -lo) if self.padding else 0)
                dims[v] = max(0, (end - rest) // c + 1)
            elif missing:
                raise ShapeError(f"index variable {missing[0][1]} of {eq.where} has no size: "
                                 "give it a plain subscript somewhere (or the result's shape)")
        for eq in self.equations:
            if eq.diagonal is not None:
                if dims[eq.var] != dims[eq.diagonal]:
                    raise ShapeError(f"{eq.where} reads a diagonal of modes of sizes "
                                     f"{dims[eq.diagonal]} and {dims[eq.var]}; they must be equal")
                dims[eq.offset] = 1
            if eq.var not in dims:  # the result's compound subscript: its whole range
                dims[eq.var] = subscript_range(eq.subscript, dims)[1] + 1
            lo, hi = subscript_range(eq.subscript, dims)
            if eq.window is not None and not self.padding and hi >= dims[eq.var]:
                raise ShapeError(f"the window {eq.window} of {eq.where} reaches coordinate {hi} "
                                 f"but the mode has size {dims[eq.var]}")
            if not self.padding and any(dims[v] for v in eq.subscript.vars) and (
                    lo < 0 or hi >= dims[eq.var]):
                raise ShapeError(
                    f"subscript {eq.subscript} of {eq.where} ranges over [{lo}, {hi}] but the "
                    f"mode has size {dims[eq.var]}; compile with padding=True to let it reach "
                    "outside (zero padding)")

    # -- running -------------------------------------------------------------------------
    def run(self, storages: Mapping[str, Storage], mode: str = "fused", pattern: Storage | None = None,
            result_shape: tuple[int, ...] | None = None, threads: int | None = None,
            commands: tuple[Command, ...] | None = None) -> tuple[Storage, Variant]:
        """Compute the result from operand storages (keyed by operand name, in the kernel's
        formats); returns it with the variant that computed it. ``pattern`` is the
        structure ``compute`` mode fills."""
        self.check_fills(storages)
        dtypes = {n: s.vals.dtype for n, s in storages.items()}
        if commands is None and self.tuner is not None and mode == "fused":
            commands = self.tuner.schedule(
                self.program(dtypes, ()), storages,
                lambda c: self.run(storages, mode, pattern, result_shape, threads, commands=c)[0],
                lambda: StorageKernel(self.assignment, self.formats, self.dtype, self.aliases,
                                      fast_math=self.fast_math, workspace=self.workspace,
                                      workspace_memory=self.workspace_memory,
                                      padding=self.padding,
                                      extents={v.name: e for v, e in self.extents.items()},
                                      count_iterations=self.count_iterations,
                                      gather=self.gather, fills=self.fills,
                                      pattern_of=self.pattern_of).run(
                    storages, mode, pattern, result_shape, threads)[0])
        dims = self.dims({n: s.shape for n, s in storages.items()}, result_shape)
        rshape = tuple(dims[v] for v in self.plain.lhs.indices)
        _check_dense_positions(self.result, self.formats[self.result], rshape)
        prog = self.program(dtypes, commands)
        workspace = self.workspace_for(prog, dims, rshape, storages)
        prog = self.program(dtypes, commands, workspace=workspace)
        # no specialising when concretize re-stores an operand in another mode order: its
        # levels (and a fixed extent) would move to other modes
        fixed = ()
        if mode == "fused" and not any(d.converted_from for d in prog.tensors.values()):
            fixed = self.fixed_extents({**{n: s.shape for n, s in storages.items()}, self.result: rshape})
            prog = self.program(dtypes, commands, fixed, workspace)
        rdecl = prog.tensors[self.result]
        if mode != "fused" and prog.commands and rdecl.pattern_of is not None:
            raise FormatError(f"{mode}: the scheduled kernel writes {self.result} in place over "
                              f"{rdecl.pattern_of}'s pattern; call the kernel instead")
        if mode != "fused" and prog.result_conversion is not None:
            return self._converted_phase(storages, mode, pattern, result_shape, threads, commands,
                                         prog.result_conversion)
        args: dict[str, Storage] = dict(storages)
        for name, decl in prog.tensors.items():
            if decl.converted_from is not None:
                from .convert import convert  # converting runs kernels: imported late

                args[name] = convert(storages[decl.converted_from], decl.format)
        itypes = {n: s.index_dtype for n, s in args.items()}
        itypes[self.result] = np.dtype(np.int32 if all(d < INT32_MAX for d in rshape) else np.int64)
        if mode == "compute":
            assert pattern is not None
            if _append_groups(rdecl.format) > 1:
                self._check_pattern(storages, pattern, result_shape, threads, commands)
            args[self.result] = pattern
            itypes[self.result] = pattern.index_dtype
        var = self.variant(prog, itypes, mode, fixed)
        storage = self.invoke(var, args, rshape, threads, dims)
        if storage is None:  # int32 result indices overflowed: retry with int64
            itypes[self.result] = np.dtype(np.int64)
            var = self.variant(prog, itypes, mode, fixed)
            storage = self.invoke(var, args, rshape, threads, dims)
        assert storage is not None
        if prog.result_conversion is not None:
            from .convert import convert

            # the declared format: the program's may be specialised on the call's extents
            storage = convert(storage, self.formats[self.result])
        return storage, var

    def _converted_phase(self, storages: Mapping[str, Storage], mode: str, pattern: Storage | None,
                         result_shape: tuple[int, ...] | None, threads: int | None,
                         commands: tuple[Command, ...] | None, final: Format) -> tuple[Storage, Variant]:
        """assemble or compute for a result the kernel builds in another format and converts to
        ``final``: no kernel phase builds its structure alone, so both run the whole kernel. assemble
        keeps the converted result's structure; compute places its values into ``pattern``
        (KernelError when a nonzero falls outside it)."""
        if not final.assemblable:
            raise FormatError(f"{mode}: results in {final} are built through COO and have no "
                              f"separate assembly; call the kernel instead")
        full, var = self.run(storages, "fused", None, result_shape, threads, commands)
        if mode == "assemble":
            return Storage(full.format, full.shape, full.levels, np.zeros_like(full.vals)), var
        assert pattern is not None
        coords, vals = full.to_coords()
        coords = coords[:, vals != 0]
        vals = vals[vals != 0]
        # the pattern's value positions, read through to_coords with positions for values
        probe = Storage(pattern.format, pattern.shape, pattern.levels,
                        np.arange(pattern.vals.shape[0], dtype=np.int64))
        pcoords, positions = probe.to_coords()
        if pattern.shape != full.shape:
            raise KernelError(_ERRORS[PATTERN_ERROR])
        wanted = np.ravel_multi_index(tuple(coords), full.shape)
        held = np.ravel_multi_index(tuple(pcoords), full.shape)
        order = np.argsort(held, kind="stable")
        at = np.searchsorted(held[order], wanted)
        found = at < held.shape[0]
        found[found] = held[order][at[found]] == wanted[found]
        if not found.all():
            raise KernelError(_ERRORS[PATTERN_ERROR])
        out = np.zeros_like(pattern.vals, dtype=full.vals.dtype)
        out[positions[order][at]] = vals
        return Storage(pattern.format, pattern.shape, pattern.levels, out), var

    def _check_pattern(self, storages: Mapping[str, Storage], pattern: Storage,
                       result_shape: tuple[int, ...] | None, threads: int | None,
                       commands: tuple[Command, ...] | None) -> None:
        """KernelError unless the operands assemble exactly ``pattern``: compute mode writes
        into its arrays, and a result of several append groups cannot check that as it goes."""
        built, _ = self.run(storages, "assemble", None, result_shape, threads, commands)
        same = built.shape == pattern.shape and len(built.levels) == len(pattern.levels) and all(
            a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
            for a, b in zip(built.levels, pattern.levels))
        if not same:
            raise KernelError(_ERRORS[PATTERN_ERROR])

    def invoke(self, var: Variant, storages: Mapping[str, Storage], rshape: tuple[int, ...],
               threads: int | None = None,
               dims: Mapping[IndexVar, int] | None = None) -> Storage | None:
        """Call ``var`` through ctypes on ``storages`` (including converted operands and, in
        compute mode, the result's pattern); None when int32 result indices overflowed."""
        ir, rdecl = var.ir, var.prog.tensors[self.result]
        rfmt = self.result_format(var)
        rdims = tuple(rshape[m] for m in rfmt.ordering)
        nslots = len(ir.out_arrays)
        out = np.zeros(max(nslots, 1), dtype=np.uint64)
        out_len = np.zeros(max(nslots, 1), dtype=np.int64)
        res_vals: np.ndarray | None = None
        inputs = [n for n, d in var.prog.tensors.items() if d.role == "input"]
        dense = math.prod(rdims) if rfmt.is_dense and ir.mode != "compute" else 0
        work = call_work(storages, inputs, dense)
        args = np.zeros(len(ir.params), dtype=np.int64)
        for n, p in enumerate(ir.params):
            if p.kind == "threads":
                args[n] = threads or 0
            elif p.kind == "extent":
                args[n] = (dims or {})[IndexVar(p.array)]
            elif p.kind == "work":
                args[n] = work
            elif p.tensor == self.result and p.kind not in ("array", "dim"):
                if p.kind == "vals":
                    size = math.prod(rdims) if ir.mode != "compute" else storages[self.result].nnz
                    res_vals = aligned_values(max(size, 1), rdecl.dtype, not ir.zeroes_result)
                    args[n] = res_vals.ctypes.data
                elif p.kind == "shared_vals":
                    size = shared_size(storages[p.array], p.level, rdims)
                    res_vals = (pool.empty if ir.zeroes_result else pool.zeros)(max(size, 1), rdecl.dtype)
                    args[n] = res_vals.ctypes.data
                elif p.kind == "out":
                    args[n] = out.ctypes.data
                elif p.kind == "out_len":
                    args[n] = out_len.ctypes.data
                elif p.kind == "cap_hint":
                    args[n] = capacity_hint((int(s.vals.shape[0]) for s in storages.values()), rdims,
                                            self.last_entries)
            elif p.tensor == self.result and p.kind == "dim":
                args[n] = rdims[p.level]
            else:
                st = storages[p.tensor]
                if p.kind == "dim":
                    args[n] = st.level_dims[p.level]
                elif p.kind == "array":
                    args[n] = st.addresses[(p.level, p.array)]
                else:
                    args[n] = st.addresses[(-1, "vals")]
        rc = var.packed(args.ctypes.data)
        if self.count_iterations and self.target == "c":
            self.iterations = int(var.library.coiter_iteration_count())
        arrays: tuple[np.ndarray, ...] | None = None
        if ir.result_allocated and ir.mode != "compute":
            itype = var.itypes[self.result]
            arrays = tuple(adopt(int(out[k]), int(out_len[k]), rdecl.dtype if slot[0] < 0 else itype)
                           for k, slot in enumerate(ir.out_arrays))
            slot = entries_slot(rfmt, ir.out_arrays)
            if rc == 0 and slot >= 0:
                self.last_entries = int(out_len[slot])
        if ir.mode == "compute":
            pattern = storages[self.result]
            if rc != 0:
                raise KernelError(_ERRORS.get(rc, f"kernel failed with code {rc}"))
            assert res_vals is not None
            return Storage(rfmt, rshape, pattern.levels, res_vals[: pattern.nnz],
                           var.prog.tensors[self.result].fill)
        spec = shared_spec(ir)
        return self.finish(var, rc, res_vals, arrays, rshape, storages[spec.array] if spec else None)

    def result_format(self, var: Variant) -> Format:
        """The format of the result Storage ``var`` builds: its program's, with the levels
        it was specialised on as the kernel declares them (built once per variant)."""
        fmt = self._result_formats.get(id(var))
        if fmt is None:
            fmt = var.prog.tensors[self.result].format
            fixed = [k for name, k, _ in var.fixed if name == self.result]
            if fixed:
                levels = list(fmt.levels)
                for k in fixed:
                    levels[k] = self.formats[self.result].levels[k]
                fmt = Format(levels, fmt.ordering, fmt.layout)
            self._result_formats[id(var)] = fmt  # variants live as long as the kernel
        return fmt

    def finish(self, var: Variant, rc: int, vals: np.ndarray | None,
               arrays: tuple[np.ndarray, ...] | None, rshape: tuple[int, ...],
               shared: Storage | None = None) -> Storage | None:
        """The result Storage of a fused or assemble call that returned ``rc`` with values
        ``vals`` (dense results, or results over the first levels of operand storage
        ``shared``) or result ``arrays`` (in ``ir.out_arrays`` order); None when int32
        result indices overflowed (the caller retries with int64); KernelError for other
        failures."""
        ir = var.ir
        if rc == OVERFLOW and ir.result_allocated and var.itypes[self.result] == np.int32:
            return None
        if rc != 0:
            raise KernelError(_ERRORS.get(rc, f"kernel failed with code {rc}"))
        rdecl = var.prog.tensors[self.result]
        rfmt = self.result_format(var)
        rdims = tuple(rshape[m] for m in rfmt.ordering)
        spec = shared_spec(ir)
        if spec is not None:
            assert vals is not None and shared is not None
            levels: tuple[dict[str, np.ndarray], ...] = shared._read_only_levels[: spec.level]
            levels += tuple({} for _ in rfmt.levels[spec.level:])
            return Storage(rfmt, rshape, levels, vals[: shared_size(shared, spec.level, rdims)])
        if arrays is None:
            assert vals is not None
            levels = tuple({} for _ in rfmt.levels)
            return Storage(rfmt, rshape, levels, vals[: math.prod(rdims)] if rdims else vals)
        by_slot = dict(zip(ir.out_arrays, arrays))
        levels = tuple({arr: by_slot[(k, arr)] for arr in lv.arrays} for k, lv in enumerate(rfmt.levels))
        values = by_slot.get((-1, "vals"))
        if values is None:  # assemble mode: structure only
            size = Storage(rfmt, rshape, levels, np.zeros(0, rdecl.dtype)).level_sizes()[-1]
            values = pool.zeros(size, rdecl.dtype)
        return Storage(rfmt, rshape, levels, values, rdecl.fill)



# positions a result level may hold: dense levels multiply their parents' positions, and
# kernels compute positions in int64_t
MAX_POSITIONS = 2**62


def _append_groups(fmt: Format) -> int:
    """Runs of result levels that share one append counter (DCSR has two, CSR one)."""
    return sum(1 for lv in fmt.levels if lv.has_append and not lv.branchless)


def _check_dense_positions(name: str, fmt: Format, shape: tuple[int, ...]) -> None:
    """ShapeError when a full (dense) level of result ``name`` would have more positions
    than int64_t arithmetic holds (a (2**32, 2**32, 4) result stored dds)."""
    if fmt.layout is not None:  # computed in its assembly format, checked there
        fmt = fmt.assembly_format()
    positions = 1
    for level, mode in zip(fmt.levels, fmt.ordering):
        positions *= shape[mode]
        if level.full and positions > MAX_POSITIONS:
            raise ShapeError(f"result {name} of shape {shape} in format {fmt}: its dense level "
                             f"{mode + 1} would hold {positions} positions, more than {MAX_POSITIONS}")
