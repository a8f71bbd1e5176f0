"""The user-facing compiled kernel: operands in any form in, a :class:`Tensor` out.

A call first tries the C call path (a :mod:`~coiter.runtime.callplan` plan of the variant
that ran last), which binds Tensors and NumPy arrays in the kernel's formats without
running Python code. Anything else (SciPy matrices, scalars, other formats or value types,
wrong shapes, a first call) goes through :meth:`Kernel._run`: operands become Tensors in
the kernel's formats, the :class:`~coiter.runtime.kernel.StorageKernel` computes, and the
plan of the variant it used serves the next call.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

import scipy.sparse as sp

from . import pictures
from .concrete.stmt import ConcreteProgram
from .errors import ArgumentError, PerformanceWarning, ShapeError
from .formats.format import Format
from .formats.slicing import gather_storage
from .formats.storage import Storage
from .interop.pydata import is_pydata
from .interop.torch_interop import is_torch
from .notation.index_sets import Gather
from .operands import as_tensor
from .pictures import Dot
from .runtime.callplan import Bound, KernelCall, build_plan, remember_extents
from .runtime.kernel import StorageKernel, Variant
from .tensor import Tensor, check_shape, scipy_as_tensors


# More threads than any machine coiter runs on; libgomp crashes on absurd counts (100000).
MAX_THREADS = 4096


class Kernel(KernelCall):
    """A compiled tensor assignment; call it with operands by name,
    ``kernel(threads=None, **operands)``, for the result as a :class:`coiter.Tensor`.

    ``threads`` sets the number of OpenMP threads of parallel loops for this call.
    By default it is ``OMP_NUM_THREADS`` (else every core), limited to one thread
    per 16384 stored values the call reads and writes, so that small calls run
    serially (and so does a call of under 2**20 values that comes 5 ms or more after the
    process's last kernel call, whose OpenMP workers may have gone to sleep); pass an
    operand named ``threads`` through :meth:`run`.

    A call goes in C (:class:`~coiter.runtime.callplan.KernelCall`) to the plan of the
    variant that ran last; what that plan declines comes to :meth:`_call`."""

    # SciPy matrices as Tensors (kept per matrix while it is unchanged), for the C entry's
    # second try of the plan
    _convert_operands = staticmethod(scipy_as_tensors)

    def __init__(self, core: StorageKernel, gathers: Mapping[str, Gather] | None = None) -> None:
        self.core = core
        # operands built from the given ones through index sets (coiter.notation.index_sets)
        self.gathers: dict[str, Gather] = dict(gathers or {})
        self._direct = not self.gathers  # whether calls' operands go to the plan as given
        self._plan = None  # C call plan of the variant that ran last
        self._plans: dict[int, Bound | None] = {}  # per variant (id), None where there is none
        self._densified: set[str] = set()  # operands a call densified (warned once each)

    def with_gathers(self, gathers: Mapping[str, Gather]) -> Kernel:
        """This kernel's loops reading operands gathered through other index sets (the
        compiled variants and their call plans are shared)."""
        out = Kernel(self.core, gathers)
        out._plans = self._plans
        return out

    # -- introspection -------------------------------------------------------------------
    @property
    def assignment(self):
        return self.core.assignment

    @property
    def formats(self):
        return self.core.formats

    @property
    def schedule(self):
        return self.core.schedule

    @property
    def tuner(self):
        return self.core.tuner

    @property
    def concrete(self) -> ConcreteProgram:
        """Concrete index notation chosen for the default value type."""
        return self.core.concrete

    def iteration_graph(self) -> Dot:
        """The iteration graph as a Graphviz picture (:mod:`coiter.pictures`)."""
        return pictures.iteration_graph(self)

    def merge_lattice(self, var: str) -> Dot:
        """The merge lattice of index variable ``var`` as a Graphviz picture."""
        return pictures.merge_lattice(self, var)

    @property
    def source(self) -> str:
        """Generated C (CUDA for target "cuda") for the default value type and int32 indices."""
        return self.core.source

    # -- calling -------------------------------------------------------------------------
    def _call(self, threads: int | None = None, **operands: Any) -> Tensor:
        """A call the C entry did not finish: gathers operands, tries the plan with given
        ``threads`` or SciPy matrices as Tensors, else takes the Python path."""
        if self.gathers:
            operands = self._gathered(operands)
        plan = self._plan
        if plan is not None:
            out = plan(operands, threads)
            if out is NotImplemented:
                # the C path takes Tensors and arrays: SciPy matrices become Tensors (kept
                # per matrix while it is unchanged, tensor.scipy_operand) and the plan is
                # tried again
                out = plan(scipy_as_tensors(operands), threads)
            if out is not NotImplemented and out is not None:
                return out
        return self._run("fused", operands, threads=threads)

    def run(self, operands: Mapping[str, Any], result_shape: tuple[int, ...] | None = None,
            threads: int | None = None) -> Tensor:
        """Like calling the kernel, with the result's shape given (needed when no operand
        carries a result index, as in ``A(i,j) = 0``; checked against the operands otherwise)."""
        if self.gathers:
            operands = self._gathered(operands)
        plan = self._plan
        if plan is not None:
            # the plan sizes the result from the operands' shapes; a different shape given
            # (a smaller convolution output) is the Python path's
            out = plan(operands, threads)
            if out is not NotImplemented and out is not None and (
                    result_shape is None or out.shape == tuple(result_shape)):
                return out
        return self._run("fused", operands, result_shape=result_shape, threads=threads)

    def assemble(self, **operands: Any) -> Tensor:
        """Only the result's index structure (values zero)."""
        return self._run("assemble", self._gathered(operands))

    def compute(self, pattern: Any, **operands: Any) -> Tensor:
        """Values into the index structure of ``pattern`` (from :meth:`assemble`)."""
        return self._run("compute", self._gathered(operands), pattern)

    def _gathered(self, operands: Mapping[str, Any]) -> Mapping[str, Any]:
        """``operands`` with those read through index sets replaced by the gathered tensors
        the compiled loops read (the given ones are left as they are)."""
        if not self.gathers:
            return operands
        core = self.core
        out = dict(operands)
        for name, g in self.gathers.items():
            keyword = core.keyword(g.source)
            if keyword not in operands:
                continue  # _run reports the missing operand
            t = as_tensor(operands[keyword], core.formats.get(name), name=keyword)
            if t.order != core.orders[name]:
                raise ShapeError(f"operand {keyword} has order {t.order}, "
                                 f"the expression uses {core.orders[name]}")
            storage = t.storage
            for mode, index_set in g.sets:
                try:
                    storage = gather_storage(storage, mode, index_set.coords)
                except ShapeError as e:
                    raise ShapeError(f"the index set {index_set} of {keyword} {e}") from None
            out[core.keyword(name)] = Tensor._wrap(storage, name=name)
        return out

    def _run(self, mode: str, operands: Mapping[str, Any], pattern: Any = None,
             result_shape: tuple[int, ...] | None = None, threads: int | None = None) -> Tensor:
        core = self.core
        keywords = {core.keyword(n) for n in core.inputs}
        missing = sorted(keywords - set(operands))
        if missing:
            raise ShapeError(f"missing operand(s) {', '.join(missing)}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or not 1 <= threads <= MAX_THREADS):
            raise ArgumentError(f"threads must be a positive integer of at most {MAX_THREADS}, got {threads!r}")
        if result_shape is not None:
            result_shape = check_shape(result_shape)
        extra = sorted(set(operands) - keywords)
        if extra:
            raise ShapeError(f"unexpected operand(s) {', '.join(extra)}; expected {sorted(keywords)}")
        storages: dict[str, Storage] = {}
        for name in core.inputs:
            fmt = core.formats.get(name)
            given = operands[core.keyword(name)]
            if fmt is not None and fmt.is_dense and name not in self._densified and _is_sparse(given):
                self._warn_densified(name, fmt, given)
            t = as_tensor(given, fmt, name=name)
            if t.order != core.orders[name]:
                raise ShapeError(f"operand {name} has order {t.order}, "
                                 f"the expression uses {core.orders[name]}")
            if fmt is not None and t.format != fmt:
                t = t.asformat(fmt)
            storages[name] = t.storage
        pstore = None
        if mode == "compute":
            prog = core.program({n: s.vals.dtype for n, s in storages.items()})
            pfmt = prog.result_conversion or prog.tensors[core.result].format
            pstore = as_tensor(pattern, pfmt, name="pattern").storage
        storage, var = core.run(storages, mode, pstore, result_shape, threads)
        if mode == "fused":
            bound = self._bound(var)
            self._plan = bound.plan if bound is not None else None
            if bound is not None:
                remember_extents(bound, core, {n: s.shape for n, s in storages.items()},
                                 storage.shape if result_shape is not None else None)
        return Tensor._wrap(storage, name=core.result)

    def _warn_densified(self, name: str, fmt: Format, given: Any) -> None:
        """Say (once per operand) that calls densify the sparse operand ``given``: the kernel
        was compiled for a dense one, compile's default for tensors ``formats`` does not name."""
        self._densified.add(name)
        own = as_tensor(given, name=name).format
        warnings.warn(f"operand {name} is sparse (format {own}), but this kernel was compiled for "
                      f"a dense {name} ({fmt}), so every call converts it to a dense array first; "
                      f"name {name}'s format in coiter.compile's formats, or use coiter.evaluate, "
                      "which compiles for the operands' own formats", PerformanceWarning, stacklevel=4)

    def _bound(self, var: Variant) -> Bound | None:
        """The C call plan of ``var`` (built once; None when it has none)."""
        key = id(var)
        if key not in self._plans:
            def finish(rc: int, vals: Any, arrays: Any, shape: tuple[int, ...],
                       shared: Storage | None) -> Tensor | None:
                storage = self.core.finish(var, rc, vals, arrays, shape, shared)
                return None if storage is None else Tensor._wrap(storage, name=self.core.result)

            self._plans[key] = build_plan(self.core, var, finish, Tensor, Storage)
        return self._plans[key]

    @property
    def iterations(self) -> int | None:
        """Loop iterations of the last call (kernels compiled with ``count_iterations``)."""
        return self.core.iterations

    def __repr__(self) -> str:
        formats = ", ".join(f"{n}={f.to_string()!r}" for n, f in sorted(self.core.formats.items()))
        return f"coiter.Kernel({str(self.core.assignment)!r}, {formats})"


def _is_sparse(obj: Any) -> bool:
    """Whether ``obj`` is a sparse tensor of coiter, SciPy, pydata/sparse or torch."""
    if isinstance(obj, Tensor):
        return not obj.format.is_dense
    return bool(sp.issparse(obj) or is_pydata(obj) or (is_torch(obj) and str(obj.layout) != "torch.strided"))
