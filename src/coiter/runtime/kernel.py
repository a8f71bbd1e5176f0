"""Compiled kernels: bind operands to a generated C function and wrap its result.

A :class:`Kernel` is compiled once per assignment and formats; concrete variants
specialised on value and index types are generated, compiled and cached on
first use.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..concrete.concretize import concretize
from ..concrete.commands import Command
from ..concrete.schedule import apply as apply_command
from ..concrete.stmt import ConcreteProgram
from ..errors import FormatError, KernelError, ShapeError
from ..formats.format import Format
from ..formats.storage import INT32_MAX, Storage
from ..lower.lower import BOUND_ERROR, KernelIR, ParamSpec, lower
from ..codegen import cuda
from ..codegen.c import module
from ..notation.ast import Assignment, Div, Literal, accesses, walk
from ..notation.reductions import insert_reductions
from .autotune import AutoTuner
from .compiler import load_library
from .cuda import load_cuda_library

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None

_ERRORS = {
    1: "out of memory while assembling the result",
    2: "result index overflow",
    BOUND_ERROR: "the operands' sizes break a bound() promise of the schedule",
    cuda.CUDA_ERROR: "a CUDA runtime call failed (the message is on stderr)",
}


@dataclass(frozen=True)
class _Variant:
    ir: KernelIR
    source: str
    fn: Any  # ctypes function


def _ctype_of(spec: ParamSpec) -> Any:
    return ctypes.c_int64 if spec.kind in ("dim", "cap_hint", "threads") else ctypes.c_void_p


class Kernel:
    """A compiled tensor assignment; call it with operands by name."""

    def __init__(
        self,
        assignment: Assignment,
        formats: Mapping[str, Format],
        dtype: np.dtype = np.dtype(np.float64),
        aliases: Mapping[str, str] | None = None,
        schedule: tuple[Command, ...] | str = (),
        target: str = "c",
    ) -> None:
        self.assignment = assignment
        self.target = target  # "c" or "cuda": the back end of every variant
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
        self._accesses = accesses(assignment.rhs)
        self.inputs = list(dict.fromkeys(a.tensor for a in self._accesses))
        self._orders = {a.tensor: len(a.indices) for a in accesses(assignment.rhs)}
        self._orders[self.result] = len(assignment.lhs.indices)
        self._has_div = any(isinstance(n, Div) for n in walk(assignment.rhs))
        self._programs: dict[tuple, ConcreteProgram] = {}
        self._variants: dict[tuple, _Variant] = {}

    # -- introspection -------------------------------------------------------------------
    def _default_dtypes(self) -> dict[str, np.dtype]:
        return {n: self.dtype for n in self.inputs}

    @property
    def concrete(self) -> ConcreteProgram:
        """Concrete index notation chosen for the default value type."""
        return self._program(self._default_dtypes())

    @property
    def source(self) -> str:
        """Generated C (CUDA for target "cuda") for the default value type and int32 indices."""
        prog = self.concrete
        itypes = {n: np.dtype(np.int32) for n in prog.tensors}
        return self._variant(prog, itypes, "fused").source

    # -- compilation ---------------------------------------------------------------------
    def result_dtype(self, dtypes: Mapping[str, np.dtype]) -> np.dtype:
        parts: list[Any] = [dtypes[n] for n in self.inputs]
        parts += [n.value for n in walk(self.assignment.rhs) if isinstance(n, Literal)]
        rt = np.result_type(*parts) if parts else self.dtype
        if self._has_div and rt.kind in "biu":
            rt = np.dtype(np.float64)
        if rt not in (np.float64, np.float32, np.int64, np.int32, np.complex128, np.bool_):
            rt = np.dtype(np.complex128) if rt.kind == "c" else np.dtype(np.float64)
        return np.dtype(rt)

    def _program(self, dtypes: Mapping[str, np.dtype],
                 commands: tuple[Command, ...] | None = None) -> ConcreteProgram:
        commands = self.schedule if commands is None else commands
        key = (frozenset(dtypes.items()), commands)
        prog = self._programs.get(key)
        if prog is None:
            rt = self.result_dtype(dtypes)
            all_dtypes = {**dtypes, self.result: rt}
            prog = concretize(insert_reductions(self.assignment), self.formats, all_dtypes, rt)
            for command in commands:
                prog = apply_command(prog, command)
            self._programs[key] = prog
        return prog

    def _variant(self, prog: ConcreteProgram, itypes: Mapping[str, np.dtype], mode: str) -> _Variant:
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
                source = module([ir.function], index_max)
                lib = load_library(source)
            fn = getattr(lib, ir.function.name)
            fn.argtypes = [_ctype_of(p) for p in ir.params]
            fn.restype = ctypes.c_int
            var = _Variant(ir, source, fn)
            self._variants[key] = var
        return var

    # -- calling -------------------------------------------------------------------------
    def __call__(self, threads: int | None = None, **operands: Any) -> Any:
        """Compute the assignment; returns the result as a :class:`coiter.Tensor`.

        ``threads`` sets the number of OpenMP threads of parallel loops for this call
        (default: ``OMP_NUM_THREADS``, else every core); pass an operand named
        ``threads`` through :meth:`run`."""
        return self._run("fused", operands, threads=threads)

    def run(self, operands: Mapping[str, Any], result_shape: tuple[int, ...] | None = None,
            threads: int | None = None) -> Any:
        """Like calling the kernel, with the result's shape given (needed when no operand
        carries a result index, as in ``A(i,j) = 0``; checked against the operands otherwise)."""
        return self._run("fused", operands, result_shape=result_shape, threads=threads)

    def assemble(self, **operands: Any) -> Any:
        """Only the result's index structure (values zero)."""
        return self._run("assemble", operands)

    def compute(self, pattern: Any, **operands: Any) -> Any:
        """Values into the index structure of ``pattern`` (from :meth:`assemble`)."""
        return self._run("compute", operands, pattern)

    def _run(self, mode: str, operands: Mapping[str, Any], pattern: Any = None,
             result_shape: tuple[int, ...] | None = None, threads: int | None = None,
             commands: tuple[Command, ...] | None = None) -> Any:
        from ..operands import as_tensor
        from ..tensor import Tensor

        keywords = {self.aliases.get(n, n) for n in self.inputs}
        missing = sorted(keywords - set(operands))
        if missing:
            raise ShapeError(f"missing operand(s) {', '.join(missing)}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        extra = sorted(set(operands) - keywords)
        if extra:
            raise ShapeError(f"unexpected operand(s) {', '.join(extra)}; expected {sorted(keywords)}")
        tensors: dict[str, Tensor] = {}
        for name in self.inputs:
            t = as_tensor(operands[self.aliases.get(name, name)], self.formats.get(name), name=name)
            if t.order != self._orders[name]:
                raise ShapeError(f"operand {name} has order {t.order}, the expression uses {self._orders[name]}")
            fmt = self.formats.get(name)
            if fmt is not None and t.format != fmt:
                t = t.asformat(fmt)
            tensors[name] = t
        dtypes = {n: t.dtype for n, t in tensors.items()}
        if commands is None and self.tuner is not None and mode == "fused":
            commands = self.tuner.schedule(
                self._program(dtypes, ()), tensors,
                lambda c: self._run(mode, operands, pattern, result_shape, threads, commands=c),
                lambda: Kernel(self.assignment, self.formats, self.dtype, self.aliases)._run(
                    mode, operands, pattern, result_shape, threads))
        prog = self._program(dtypes, commands)
        if mode != "fused" and prog.commands and prog.tensors[self.result].pattern_of is not None:
            raise FormatError(f"{mode}: the scheduled kernel writes {self.result} in place over "
                              f"{prog.tensors[self.result].pattern_of}'s pattern; call the kernel instead")
        if mode != "fused" and prog.result_conversion is not None:
            # the kernel builds another format and converts, which keeps no explicit zeros
            raise FormatError(
                f"{mode}: the result {self.result} ({prog.result_conversion}) is computed in "
                f"{prog.tensors[self.result].format} and converted, so it has no separate "
                "assembly; call the kernel instead")
        dims = self._dims(tensors, result_shape)
        storages: dict[str, Storage] = {n: t.storage for n, t in tensors.items()}
        for name, decl in prog.tensors.items():
            if decl.converted_from is not None:
                storages[name] = tensors[decl.converted_from].asformat(decl.format).storage
        lhs = self.assignment.lhs
        rshape = tuple(dims[v] for v in lhs.indices)
        rdecl = prog.tensors[self.result]
        itypes = {n: s.index_dtype for n, s in storages.items()}
        fits32 = all(d < INT32_MAX for d in rshape)
        itypes[self.result] = np.dtype(np.int32 if fits32 else np.int64)
        if mode == "compute":
            pstore = as_tensor(pattern, rdecl.format).storage
            storages[self.result] = pstore
            itypes[self.result] = pstore.index_dtype
        storage = self._invoke(prog, itypes, mode, storages, rshape, rdecl.format, rdecl.dtype, threads)
        if storage is None:  # int32 result indices overflowed: retry with int64
            itypes[self.result] = np.dtype(np.int64)
            storage = self._invoke(prog, itypes, mode, storages, rshape, rdecl.format, rdecl.dtype, threads)
        result = Tensor._wrap(storage, name=self.result)
        if prog.result_conversion is not None:
            result = result.asformat(prog.result_conversion)
        return result

    def _dims(self, tensors: Mapping[str, Any], result_shape: tuple[int, ...] | None = None) -> dict:
        dims: dict = {}
        where: dict = {}
        lhs = self.assignment.lhs.indices
        if result_shape is not None:
            if len(result_shape) != len(lhs):
                raise ShapeError(f"result shape {tuple(result_shape)} has {len(result_shape)} modes, "
                                 f"the result {self.result} has {len(lhs)}")
            for m, v in enumerate(lhs):
                dims[v] = int(result_shape[m])
                where[v] = f"the result {self.result} (mode {m})"
        for a in self._accesses:
            shape = tensors[a.tensor].shape
            for m, v in enumerate(a.indices):
                if v in dims and dims[v] != shape[m]:
                    raise ShapeError(
                        f"index variable {v.name} has size {dims[v]} in {where[v]} "
                        f"but {shape[m]} in {a.tensor} (mode {m})"
                    )
                dims.setdefault(v, shape[m])
                where.setdefault(v, f"{a.tensor} (mode {m})")
        for v in self.assignment.lhs.indices:
            if v not in dims:
                raise ShapeError(f"index variable {v.name} of the result has no size: it appears in no operand")
        return dims

    def _invoke(
        self, prog: ConcreteProgram, itypes: Mapping[str, np.dtype], mode: str,
        storages: Mapping[str, Storage], rshape: tuple[int, ...], rfmt: Format, rdtype: np.dtype,
        threads: int | None = None,
    ) -> Storage | None:
        var = self._variant(prog, itypes, mode)
        ir = var.ir
        args: list[Any] = []
        res_vals = None
        shared = None
        out = out_len = None
        nslots = len(ir.out_arrays)
        rdims = tuple(rshape[m] for m in rfmt.ordering)
        for p in ir.params:
            if p.kind == "threads":
                args.append(threads or 0)
                continue
            if p.tensor == self.result:
                if p.kind == "dim":
                    args.append(rdims[p.level])
                elif p.kind == "array":
                    args.append(storages[self.result].addresses[(p.level, p.array)])
                elif p.kind == "vals":
                    n = math.prod(rdims) if mode != "compute" else storages[self.result].nnz
                    res_vals = np.zeros(max(n, 1), dtype=rdtype)
                    args.append(res_vals.ctypes.data)
                elif p.kind == "shared_vals":
                    shared = storages[p.array]
                    res_vals = np.zeros(max(len(shared.vals), 1), dtype=rdtype)
                    args.append(res_vals.ctypes.data)
                elif p.kind == "out":
                    out = (ctypes.c_void_p * nslots)()
                    args.append(ctypes.addressof(out))
                elif p.kind == "out_len":
                    out_len = (ctypes.c_int64 * nslots)()
                    args.append(ctypes.addressof(out_len))
                elif p.kind == "cap_hint":
                    args.append(max(16, max((s.nnz for s in storages.values()), default=16)))
                continue
            st = storages[p.tensor]
            if p.kind == "dim":
                args.append(st.level_dims[p.level])
            elif p.kind == "array":
                args.append(st.addresses[(p.level, p.array)])
            else:
                args.append(st.addresses[(-1, "vals")])
        rc = var.fn(*args)
        if out is not None:
            arrays = self._take(out, out_len, ir, itypes[self.result], rdtype)
        if rc == 2 and itypes[self.result] == np.int32:
            return None
        if rc != 0:
            raise KernelError(_ERRORS.get(rc, f"kernel failed with code {rc}"))
        if mode == "compute":
            pat = storages[self.result]
            return Storage(rfmt, rshape, pat.levels, res_vals[: pat.nnz])
        if shared is not None:  # the operand's pattern, copied: the result owns its arrays
            levels = tuple({arr: a.copy() for arr, a in lv.items()} for lv in shared.levels)
            return Storage(rfmt, rshape, levels, res_vals[: len(shared.vals)])
        if out is None:
            levels = tuple({} for _ in rfmt.levels)
            return Storage(rfmt, rshape, levels, res_vals[: math.prod(rdims)] if rdims else res_vals)
        levels = tuple({arr: arrays[(k, arr)] for arr in lv.arrays} for k, lv in enumerate(rfmt.levels))
        vals = arrays.get((-1, "vals"))
        if vals is None:  # assemble mode: structure only
            size = Storage(rfmt, rshape, levels, np.zeros(0, rdtype)).level_sizes()[-1]
            vals = np.zeros(size, dtype=rdtype)
        return Storage(rfmt, rshape, levels, vals)

    @staticmethod
    def _take(out: Any, out_len: Any, ir: KernelIR, itype: np.dtype, vtype: np.dtype) -> dict:
        """Copy the kernel's malloc'ed result arrays into NumPy and free them."""
        arrays: dict = {}
        for n, slot in enumerate(ir.out_arrays):
            ptr, length = out[n], int(out_len[n])
            dtype = np.dtype(vtype) if slot[0] < 0 else np.dtype(itype)
            if ptr:
                buf = (ctypes.c_char * (length * dtype.itemsize)).from_address(ptr)
                arrays[slot] = np.frombuffer(buf, dtype=dtype, count=length).copy()
                _libc.free(ptr)
            else:
                arrays[slot] = np.zeros(length, dtype=dtype)
        return arrays
