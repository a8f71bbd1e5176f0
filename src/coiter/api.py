"""The user-facing entry points: compile, evaluate, einsum."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from .concrete.commands import Command, parse_commands
from .concrete.stmt import ConcreteProgram
from .errors import ArgumentError, FormatError, ShapeError
from .formats.format import Format, FormatLike, as_format, csf, csr, dense
from .formats.storage import Storage, check_fill, fill_key
from .notation.ast import Access, Add, Assignment, Call, Expr, Neg, Sub, accesses, map_accesses, walk
from .notation.einsum import parse_einsum
from .notation.functions import CASTS, computation_dtype
from .notation import operators
from .notation.index_sets import split_index_sets
from .notation.parser import parse
from .planning import EinsumPlan, Optimize, plan_einsum
from .planning.sums import sum_chain
from .kernel import Kernel
from .operands import as_tensor
from .runtime.kernel import StorageKernel
from .runtime.workspace_choice import memory_cap
from .tensor import Tensor, check_dtype, scipy_as_tensors, scipy_operand

AssignmentLike = str | Assignment
ScheduleLike = str | Sequence[Command] | ConcreteProgram | None  # or "auto"

_kernels: dict[tuple, Kernel] = {}
# kernels kept by evaluate/einsum/the DSL: a loop naming a fresh result each time (DSL
# Tensors get new names) must not hold every kernel it ever made
_KERNELS_MAX = 1024
# The kernel that last ran an evaluate()/einsum() call, keyed by the call's spelling: the
# next call with the same spelling tries its C call plan first, which accepts only operands
# of the formats and types that kernel was compiled for (so it is the kernel kernel_for
# would pick).
_last: dict[tuple, Kernel] = {}
_LAST_MAX = 256
# the same for calls whose sum runs as a chain of kernels (SumChain)
_chains: dict[tuple, "SumChain"] = {}
_step_kernels: dict[tuple, Kernel] = {}  # einsum steps' kernels (see _step_kernel)
_dense_plans: dict[tuple, EinsumPlan] = {}  # one-NumPy-step plans of NumPy arrays (see einsum)


def _as_assignment(a: AssignmentLike) -> Assignment:
    if isinstance(a, Assignment):
        return a
    if isinstance(a, str):
        return parse(a)
    raise ArgumentError(f"expected an index-notation string or Assignment, got {type(a).__name__}")


def _rename(e: Expr, old: str, new: str) -> Expr:
    return map_accesses(e, lambda a: Access(new, a.indices, a.source) if a.tensor == old else a)


def _fresh(name: str, taken: set[str]) -> str:
    n = 2
    while f"{name}_{n}" in taken:
        n += 1
    return f"{name}_{n}"


def _separate_sources(a: Assignment) -> Assignment:
    """DSL operands are Tensors, named for printing only: distinct Tensors that share a name
    (with each other or with the result) get distinct names, so none is read as another."""
    owner: dict[str, Any] = {a.lhs.tensor: a.lhs.source}
    renamed: dict[int, str] = {}
    taken = {x.tensor for x in accesses(a.rhs)} | {a.lhs.tensor}

    def separate(x: Access) -> Access:
        if owner.setdefault(x.tensor, x.source) is x.source:
            return x
        if id(x.source) not in renamed:
            new = _fresh(x.tensor, taken)
            taken.add(new)
            owner[new] = x.source
            renamed[id(x.source)] = new
        return Access(renamed[id(x.source)], x.indices, x.source)

    return Assignment(a.lhs, map_accesses(a.rhs, separate), a.accumulate)


def _prepare(a: Assignment) -> tuple[Assignment, dict[str, str]]:
    """Make ``y += e`` and ``y = ... y ...`` read the old ``y`` as a separate operand."""
    name = a.lhs.tensor
    uses = any(x.tensor == name for x in accesses(a.rhs))
    if not (a.accumulate or uses):
        return a, {}
    taken = {x.tensor for x in accesses(a.rhs)} | {name}
    old = f"{name}_old"
    while old in taken:
        old += "_"
    rhs = _rename(a.rhs, name, old)
    if a.accumulate:
        rhs = Add(Access(old, a.lhs.indices), rhs)
    return Assignment(a.lhs, rhs), {old: name}


def _orders(a: Assignment) -> dict[str, int]:
    out = {x.tensor: len(x.indices) for x in accesses(a.rhs)}
    out[a.lhs.tensor] = len(a.lhs.indices)
    return out


def compile(
    assignment: AssignmentLike,
    formats: Mapping[str, FormatLike] | None = None,
    dtype: Any = None,
    schedule: ScheduleLike = None,
    target: str = "c",
    fast_math: bool = False,
    workspace: str = "auto",
    workspace_memory: int | None = None,
    padding: bool = False,
    extents: Mapping[str, int] | None = None,
    count_iterations: bool = False,
    gather: Sequence[str] | None = None,
    fill_values: Mapping[str, Any] | None = None,
    pattern_of: str | None = None,
) -> Kernel:
    """Compile an assignment for the given formats (unnamed tensors are dense).

    The returned Kernel is specialised on value and index types at first call;
    ``dtype`` picks the value type shown by ``.source``/``.concrete``. ``schedule`` is
    TACO's command string (``"split(i,i0,i1,16),parallelize(i0,CPUThread,NoRaces)"``),
    a sequence of commands, or a concrete program transformed through its chained
    methods (``kernel.concrete.split(...).parallelize(...)``); it is checked here.
    ``schedule="auto"`` searches the autoscheduler's templates on the operands of the
    first call of each size class and caches the fastest on disk.
    ``target="cuda"`` compiles a GPU schedule with nvcc (docs/scheduling.md, "CUDA").
    ``fast_math=True`` lets the C compiler reassociate floating-point sums (vectorized
    reductions, faster on long rows); results may then differ in the last bits from the
    default build, whose sums run in a fixed order (bit-for-bit reproducible).
    ``workspace`` takes a result the loops scatter into (docs/workspaces.md): ``"auto"``
    chooses per call, ``"dense"``, or a sparse policy (``"hash"``, ``"coord"``,
    ``"bucket"``); no dense workspace takes more than ``workspace_memory`` bytes
    (default: ``COITER_WORKSPACE_MEMORY``, else a quarter of the machine's memory).
    ``padding=True`` lets compound subscripts (``I(i+k-1)``) reach outside their operand's
    mode; the terms reading there are skipped: zero padding in a convolution's sum of
    products, never counted by a pooling min/max (docs/convolutions.md); otherwise that is a
    ShapeError.
    ``extents`` sizes index variables by name (``{"r": 2}``: a pooling window no operand
    sizes); operands and the result must agree with them. ``count_iterations=True``
    instruments the C kernel to count its loop iterations (``kernel.iterations`` after a
    single-threaded call): its work, for complexity checks. A sparse operand read through a
    compound subscript is scattered into the result (``O(i) = I(i+k)``: each stored input
    adds to the outputs it reaches), except the outermost spatial mode of a 2-D or 3-D
    convolution, walked per output row; ``gather`` lists the result variables walked per
    output instead (each reads its window; those loops write their own outputs and can run
    in parallel), ``gather=()`` scatters all.
    ``fill_values`` gives the value of the entries a sparse operand does not store
    (``{"A": np.inf}``: a graph's absent edges, for min-plus shortest paths); 0 by default.
    The loops visit only where those values do not decide the result, and a sparse result
    takes the fill the right-hand side has where no operand is stored (docs/language.md,
    "Fill values"). Operands must then come with those fills (``Tensor.with_fill``).
    ``pattern_of`` names an operand, a factor of the whole right-hand side, whose pattern
    a sparse result takes (its first levels, dense ones below them): the result has an
    entry at each of its positions, zero where the other factors are absent, and is
    written in place (no assembly), so its loops can run in parallel. A submanifold
    convolution keeps its input's sites this way (:func:`coiter.nn.submanifold_conv`).
    """
    a, aliases = _prepare(_as_assignment(assignment))
    a, gathers = split_index_sets(a)
    if formats is not None and not isinstance(formats, Mapping):
        raise ArgumentError(f"formats must map tensor names to formats, got {type(formats).__name__}")
    formats = dict(formats or {})
    orders = _orders(a)
    fmts: dict[str, Format] = {}
    for name, order in orders.items():
        # an operand gathered through an index set has the format of the one it reads
        source = gathers[name].source if name in gathers else name
        spec = formats.get(aliases.get(source, source))
        if name in aliases and spec is None:
            spec = formats.get(name)
        try:
            fmts[name] = as_format(spec, order)
        except FormatError as e:
            raise FormatError(f"format of {name}: {e}") from None
    unknown = set(formats) - set(orders) - set(aliases.values()) - {g.source for g in gathers.values()}
    if unknown:
        raise FormatError(f"formats given for tensors not in the expression: {sorted(unknown)}")
    commands = "auto" if schedule == "auto" else _commands(schedule)
    if target not in ("c", "cuda"):
        raise ArgumentError(f"target must be 'c' or 'cuda', got {target!r}")
    if not isinstance(fast_math, bool):
        raise ArgumentError(f"fast_math must be True or False, got {fast_math!r}")
    for flag, value in (("padding", padding), ("count_iterations", count_iterations)):
        if not isinstance(value, bool):
            raise ArgumentError(f"{flag} must be True or False, got {value!r}")
    names = {v.name for x in [a.lhs, *accesses(a.rhs)] for v in x.index_vars}
    if gather is not None and (isinstance(gather, str) or any(g not in names for g in gather)):
        raise ArgumentError(f"gather must list index variables of {a}, got {gather!r}")
    if pattern_of is not None and pattern_of not in {x.tensor for x in accesses(a.rhs)}:
        raise ArgumentError(f"pattern_of must name an operand of {a}, got {pattern_of!r}")
    for name, size in (extents or {}).items():
        if name not in names:
            raise ArgumentError(f"extents: {name!r} is no index variable of {a}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ArgumentError(f"extents: the size of {name} must be a non-negative int, got {size!r}")
    if workspace_memory is not None and (isinstance(workspace_memory, bool) or not isinstance(
            workspace_memory, int) or workspace_memory < 0):
        raise ArgumentError(f"workspace_memory must be a number of bytes (a non-negative int), "
                            f"got {workspace_memory!r}")
    fills = _fills(fill_values, fmts, aliases)
    fills.update({g: fills[x.source] for g, x in gathers.items() if x.source in fills})
    kernel = Kernel(StorageKernel(a, fmts, check_dtype(dtype or np.float64), aliases, commands, target,
                                  fast_math, workspace, workspace_memory, padding, extents,
                                  count_iterations, None if gather is None else tuple(gather),
                                  fills, pattern_of), gathers)
    if kernel.schedule or pattern_of is not None:
        kernel.concrete  # apply the schedule now, so a bad one fails at compile time
    return kernel


def _fills(fill_values: Mapping[str, Any] | None, formats: Mapping[str, Format],
           aliases: Mapping[str, str]) -> dict[str, Any]:
    """``fill_values`` by the kernel's tensor names, checked: operands of the expression,
    numbers (not NaN)."""
    if fill_values is None:
        return {}
    if not isinstance(fill_values, Mapping):
        raise ArgumentError(f"fill_values must map operand names to numbers, got "
                            f"{type(fill_values).__name__}")
    by_user = {aliases.get(n, n): n for n in formats}
    out: dict[str, Any] = {}
    for user, value in fill_values.items():
        name = by_user.get(user)
        if name is None:
            raise ArgumentError(f"fill_values: {user!r} is no operand of the expression")
        try:
            check_fill(value, np.asarray(value).dtype)
        except ArgumentError as e:
            raise ArgumentError(f"fill_values: the fill of {user} must be a number (not NaN): {e}") from None
        out[name] = value
    return out


def _commands(schedule: ScheduleLike) -> tuple[Command, ...]:
    if schedule is None:
        return ()
    if isinstance(schedule, str):
        return parse_commands(schedule)
    if isinstance(schedule, ConcreteProgram):
        return schedule.commands
    if isinstance(schedule, (list, tuple)) and all(isinstance(c, Command) for c in schedule):
        return tuple(schedule)
    raise ArgumentError("schedule must be a command string, a sequence of Commands or a "
                    f"scheduled ConcreteProgram, got {type(schedule).__name__}")


def default_result_format(order: int, operands: list[Tensor]) -> Format:
    """Dense, unless every operand of order ≥ 1 is sparse (then CSR / CSF)."""
    if order == 0:
        return Format([])
    tensors = [t for t in operands if t.order > 0]
    if order == 1 or not tensors or any(t.format.is_dense for t in tensors):
        return dense(order)
    return csr if order == 2 else csf(order)


def evaluate(
    assignment: AssignmentLike, out_format: FormatLike | None = None,
    out_shape: tuple[int, ...] | None = None, **operands: Any,
) -> Tensor:
    """Compile (cached) and run an assignment on operands given by name.

    ``out_shape`` is only needed when no operand sizes a result index (``A(i,j) = 0``).
    """
    spelling = _spelling(assignment, out_format) if out_shape is None else None
    if spelling is not None:
        out = call_remembered(spelling, operands)
        if out is None:
            out = call_chained(spelling, operands)
        if out is not None:
            return out
    a = _as_assignment(assignment)
    tensors = {n: as_tensor(v, name=n) for n, v in operands.items()}
    chained = run_chained_sum(a, tensors, out_format, out_shape, spelling)
    if chained is not None:
        return chained
    kernel = kernel_for(a, tensors, out_format)
    if spelling is not None:
        remember_kernel(spelling, kernel)
    return kernel.run(tensors, out_shape)


def _spelling(assignment: Any, out_format: Any) -> tuple | None:
    """The key of a call's spelling when it is hashable and cheap (strings), valid until
    an operator is (re)defined."""
    if type(assignment) is str and (out_format is None or type(out_format) is str):
        return (assignment, out_format, operators.generation)
    return None


def call_remembered(spelling: tuple, operands: dict[str, Any]) -> Tensor | None:
    """The result of the last kernel used for ``spelling`` through its C call plan, or None
    when that does not apply."""
    kernel = _last.get(spelling)
    # a kernel with index sets gathers its operands first (Kernel._call)
    plan = kernel._plan if kernel is not None and not kernel.gathers else None
    if plan is None:
        return None
    out = plan(operands, None)
    if out is NotImplemented and any(sp.issparse(v) for v in operands.values()):
        out = plan(scipy_as_tensors(operands), None)
    return None if out is NotImplemented else out


def remember_kernel(spelling: tuple, kernel: Kernel) -> None:
    if len(_last) >= _LAST_MAX:
        _last.pop(next(iter(_last)))
    _last[spelling] = kernel


def kernel_for(a: Assignment, tensors: Mapping[str, Tensor], out_format: FormatLike | None,
                ) -> Kernel:
    """The cached kernel of ``a`` for the operands' formats and ``out_format``."""
    _check_operands(a, tensors)
    out = _result_format(a, tensors, out_format)
    formats: dict[str, FormatLike] = {n: t.format for n, t in tensors.items()}
    formats[a.lhs.tensor] = out
    fills = {n: t.fill_value for n, t in tensors.items() if t.fill_value != 0}
    # index sets are data: the loops are those of the plain assignment, shared by every set
    plain, gathers = split_index_sets(a)
    for g, x in gathers.items():
        formats[g] = formats[x.source]
        if x.source in fills:
            fills[g] = fills[x.source]
    # an operator's redefinition changes what the same text reduces with
    key = (str(plain), tuple(sorted((n, f.to_string()) for n, f in formats.items())),
           tuple(sorted((n, fill_key(f)) for n, f in fills.items())), operators.generation)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = compile(plain, formats, fill_values=fills)
        if len(_kernels) >= _KERNELS_MAX:  # the oldest entry goes (its holders keep it)
            _kernels.pop(next(iter(_kernels)))
        _kernels[key] = kernel
    return kernel.with_gathers(gathers) if gathers else kernel


def _check_operands(a: Assignment, tensors: Mapping[str, Tensor]) -> None:
    """ShapeError for an operand ``a`` does not read or reads with another order."""
    orders = _orders(a)
    unexpected = sorted(set(tensors) - set(orders))
    if unexpected:
        raise ShapeError(f"unexpected operand(s) {', '.join(unexpected)}; the expression reads "
                         f"{', '.join(sorted(dict.fromkeys(x.tensor for x in accesses(a.rhs))))}")
    for n, t in tensors.items():
        if t.order != orders[n]:
            raise ShapeError(f"operand {n} has order {t.order}, the expression uses {orders[n]}")


def _result_format(a: Assignment, tensors: Mapping[str, Tensor], out_format: FormatLike | None,
                   ) -> Format:
    """``out_format``, or by default the format :func:`default_result_format` gives ``a``'s
    operands."""
    order = len(a.lhs.indices)
    if out_format is not None:
        return as_format(out_format, order)
    rhs_names = dict.fromkeys(x.tensor for x in accesses(a.rhs) if x.tensor in tensors)
    return default_result_format(order, [tensors[n] for n in rhs_names])


class SumChain:
    """A wide sum of sparse operands as a chain of kernels (:mod:`coiter.planning.sums`),
    made for one spelling of the sum and its operands' formats, types and fill values."""

    def __init__(self, a: Assignment, steps: list[Assignment], out: Format, signature: tuple) -> None:
        self.result = a.lhs
        self.reads = tuple((x.tensor, x.indices) for x in accesses(a.rhs))
        self.out = out
        self.signature = signature
        # each step with its operands and result renamed (T0, T1, ... and R), so that the
        # steps of one shape share a kernel; the values it reads as T0, T1, ...; its value
        self.steps: list[tuple[Assignment, tuple[str, ...], str]] = []
        for step in steps:
            inputs = tuple(dict.fromkeys(x.tensor for x in accesses(step.rhs)))
            canonical = dict(zip(inputs, _OPERAND_NAMES))
            rhs = map_accesses(step.rhs, lambda x: Access(canonical[x.tensor], x.indices))
            self.steps.append((Assignment(Access("R", a.lhs.indices), rhs), inputs, step.lhs.tensor))
        self.kernels: list[Kernel | None] = [None] * len(steps)  # looked up on the first run

    def run(self, tensors: Mapping[str, Tensor], result_shape: tuple[int, ...] | None) -> Tensor:
        """The sum of ``tensors`` (by the names the sum reads them by)."""
        self._check_extents(tensors, result_shape)  # the kernels know the operands as T0, T1, ...
        values = dict(tensors)
        for k, (step, inputs, output) in enumerate(self.steps):
            operands = dict(zip(_OPERAND_NAMES, (values[n] for n in inputs)))
            kernel = self.kernels[k]
            if kernel is None:
                kernel = self.kernels[k] = kernel_for(step, operands, self.out)
            last = k == len(self.steps) - 1
            values[output] = kernel.run(operands, result_shape if last else None)
        return Tensor._wrap(values[self.result.tensor].storage, name=self.result.tensor)

    def _check_extents(self, tensors: Mapping[str, Tensor],
                       result_shape: tuple[int, ...] | None) -> None:
        """ShapeError naming the operand whose mode disagrees with another's (or the
        result's) on the extent of an index variable."""
        dims: dict[Any, tuple[int, str]] = {}
        lhs = self.result
        if result_shape is not None:
            if len(result_shape) != len(lhs.indices):
                raise ShapeError(f"result shape {tuple(result_shape)} has {len(result_shape)} modes, "
                                 f"the result {lhs.tensor} has {len(lhs.indices)}")
            dims = {v: (int(d), f"the result {lhs.tensor} (mode {m})")
                    for m, (v, d) in enumerate(zip(lhs.indices, result_shape))}
        for name, indices in self.reads:
            for m, (v, d) in enumerate(zip(indices, tensors[name].shape)):
                size, where = dims.setdefault(v, (d, f"{name} (mode {m})"))
                if size != d:
                    raise ShapeError(f"index variable {v} has size {size} in {where} but {d} in "
                                     f"{name} (mode {m})")


def _signature(tensors: Mapping[str, Tensor]) -> tuple:
    """What a chain was chosen for: the operands' formats, value types and fill values."""
    return tuple(sorted(((n, t.format, t.dtype.str, fill_key(t.fill_value)) for n, t in tensors.items()),
                        key=lambda x: x[0]))


def sum_chain_for(a: Assignment, tensors: Mapping[str, Tensor], out_format: FormatLike | None,
                  ) -> SumChain | None:
    """The chain of narrow sums that computes ``a`` when it is a wide sum of sparse operands
    (no fill values but zero) into a sparse result; None otherwise (one kernel computes it)."""
    if not all(n in tensors for n in _orders(a) if n != a.lhs.tensor):
        return None  # the kernel's call names what is missing
    out = _result_format(a, tensors, out_format)
    if (out.is_dense or any(t.fill_value != 0 for t in tensors.values())
            or not isinstance(a.rhs, (Add, Sub, Neg, Call))):  # (a sum, or a cast of one)
        return None
    taken = set(tensors) | {a.lhs.tensor}

    def fresh() -> str:
        name = _fresh("sum", taken)
        taken.add(name)
        return name

    def entries() -> int:
        return sum(tensors[n].nnz for n in dict.fromkeys(x.tensor for x in accesses(a.rhs)))

    dtypes = {n: t.dtype for n, t in tensors.items()}
    whole = computation_dtype(a.rhs, dtypes, np.dtype(np.float64))
    if whole == np.bool_ and any(isinstance(x, (Sub, Neg)) for x in walk(a.rhs)):
        # a step stores its bool, where one kernel goes on adding 0/1 values: 1 - 1 + 1 is
        # true, (1 - 1) stored and + 0 false; integers wrap alike either way, bools do not
        return None
    a = Assignment(a.lhs, _without_idle_casts(a.rhs, dtypes), a.accumulate)
    steps = sum_chain(a, lambda n: n in tensors and not tensors[n].format.is_dense, entries, fresh)
    if steps is None:
        return None
    # one kernel computes every term in the result's type: so must each step (a first step
    # of int8 terms before a float64 one would wrap where the sum does not)
    dtypes.update((step.lhs.tensor, whole) for step in steps)
    if any(computation_dtype(step.rhs, dtypes, whole) != whole for step in steps):
        return None
    # (checked here, not first: where no chain is made, kernel_for checks the operands)
    _check_operands(a, tensors)
    return SumChain(a, steps, out, _signature(tensors))


def _without_idle_casts(e: Expr, dtypes: Mapping[str, np.dtype]) -> Expr:
    """``e`` without the casts along its sum's left operands that cast to the type their
    argument has: the operators write a sum of bools ``bool(bool(A + B) + C)``, as NumPy's
    bool addition is an "or", and a sum computed in bool is one already."""
    if isinstance(e, Call) and e.fn in CASTS and len(e.args) == 1 and (
            computation_dtype(e.args[0], dtypes, np.dtype(np.float64)) == np.dtype(e.fn)):
        return _without_idle_casts(e.args[0], dtypes)
    if isinstance(e, (Add, Sub)):
        return replace(e, a=_without_idle_casts(e.a, dtypes))
    return e


def run_chained_sum(a: Assignment, tensors: Mapping[str, Tensor], out_format: FormatLike | None,
                    result_shape: tuple[int, ...] | None = None, key: tuple | None = None,
                    ) -> Tensor | None:
    """``a`` computed by its :func:`sum_chain_for`, remembered under ``key`` (a call's
    spelling, see :func:`call_chained`); None when one kernel computes ``a``."""
    chain = sum_chain_for(a, tensors, out_format)
    if chain is None:
        return None
    if key is not None:
        if len(_chains) >= _LAST_MAX:
            _chains.pop(next(iter(_chains)))
        _chains[key] = chain
    return chain.run(tensors, result_shape)


def call_chained(key: tuple, operands: Mapping[str, Any]) -> Tensor | None:
    """The result of the chain remembered under ``key`` when the operands have the formats,
    types and fill values it was made for; None otherwise."""
    chain = _chains.get(key)
    if chain is None or len(operands) != len(chain.signature):
        return None
    tensors = {n: as_tensor(v, name=n) for n, v in operands.items()}
    if _signature(tensors) != chain.signature:
        return None
    return chain.run(tensors, None)


_OPERAND_NAMES = tuple(f"T{n}" for n in range(64))  # einsum's n-th operand


def einsum(subscripts: str, *operands: Any, out_format: FormatLike | None = None,
           optimize: Optimize = True) -> Tensor:
    """NumPy-style einsum (``"ij,j->i"``) over Tensors, arrays and SciPy matrices.

    With ``optimize=True`` (the default) a plan chooses between one fused kernel and a
    sequence of contractions through temporaries, and their order, from the operands'
    formats and nonzero counts (see :func:`einsum_path`); contractions of dense operands go
    to NumPy (BLAS). ``optimize=False`` always compiles one fused kernel; an
    :class:`~coiter.planning.EinsumPlan` is followed as given, and so is a NumPy path
    (``["einsum_path", (1, 2), (0, 1)]``, as ``numpy.einsum_path`` returns).

    Without ``out_format`` a matrix or tensor result is sparse (CSR, CSF) where a sparse
    operand bounds it (all its indices are result indices) or every operand is sparse, and
    any other result is dense; a dense result NumPy computed keeps the memory order NumPy
    gave it (a transpose is a view, as NumPy's is), so its format may be a dense format with
    another mode ordering.
    """
    if not isinstance(subscripts, str):
        raise ArgumentError(f"einsum subscripts must be a string such as 'ij,j->i', got "
                            f"{type(subscripts).__name__}")
    names = _operand_names(len(operands))
    operands = _shared_operands(names, operands)
    # the fast path holds only kernels of fused plans, whose choice depends on the formats
    # alone with up to two operands (the call plan refuses other formats)
    spelling = _spelling(subscripts, out_format) if optimize is True and len(operands) <= 2 else None
    if spelling is not None:
        out = call_remembered((*spelling, len(operands)), dict(zip(names, operands)))
        if out is not None:
            return out
    # NumPy arrays alone whose plan was one NumPy step: no Tensors, no planning
    dense_key = _dense_key(subscripts, operands) if optimize is True and out_format is None else None
    dense_plan = _dense_plans.get(dense_key) if dense_key is not None else None
    if dense_plan is not None:
        arr = np.asarray(np.einsum(dense_plan.subscripts, *operands, optimize=len(operands) > 1))
        return _numpy_result(arr, dense_plan.steps[0].format, True)
    tensors = {n: as_tensor(op, name=n) for n, op in zip(names, operands)}
    a = parse_einsum(subscripts, len(tensors), [t.order for t in tensors.values()])
    fmt = _einsum_result_format(a, tensors, out_format)
    plan = plan_einsum(a, list(tensors.values()), fmt, optimize)
    if dense_key is not None and len(plan.steps) == 1 and plan.steps[0].engine == "numpy":
        if len(_dense_plans) >= _LAST_MAX:
            _dense_plans.pop(next(iter(_dense_plans)))
        _dense_plans[dense_key] = plan
    if not plan.fused:
        return _run_plan(plan, list(tensors.values()), out_format is None)
    kernel = _step_kernel(plan.subscripts, tensors, fmt)
    if spelling is not None:
        remember_kernel((*spelling, len(operands)), kernel)
    # the call plan binds arrays directly: cheaper than the Tensors wrapping them
    return kernel.run(dict(zip(names, operands)))


def einsum_path(subscripts: str, *operands: Any, out_format: FormatLike | None = None) -> EinsumPlan:
    """The plan :func:`einsum` follows for these operands: its steps, each step's engine and
    result format, and the estimated costs (``print(plan)`` shows a table)."""
    if not isinstance(subscripts, str):
        raise ArgumentError(f"einsum subscripts must be a string such as 'ij,j->i', got "
                            f"{type(subscripts).__name__}")
    names = _operand_names(len(operands))
    tensors = {n: as_tensor(op, name=n) for n, op in zip(names, operands)}
    a = parse_einsum(subscripts, len(tensors), [t.order for t in tensors.values()])
    return plan_einsum(a, list(tensors.values()), _einsum_result_format(a, tensors, out_format))


def _shared_operands(names: Sequence[str], operands: Sequence[Any]) -> tuple[Any, ...]:
    """``operands`` with SciPy matrices as Tensors (the C call path takes Tensors and arrays),
    one Tensor per distinct matrix (``einsum("ij,jk->ik", a, a)`` converts ``a`` once), the
    same one again while the matrix is unchanged (:func:`~coiter.tensor.scipy_operand`)."""
    seen: dict[int, Any] = {}
    out = []
    for name, op in zip(names, operands):
        if sp.issparse(op):
            if id(op) not in seen:
                seen[id(op)] = scipy_operand(op, name)
            op = seen[id(op)]
        out.append(op)
    return tuple(out)


def _operand_names(n: int) -> tuple[str, ...]:
    return _OPERAND_NAMES[:n] if n <= len(_OPERAND_NAMES) else tuple(f"T{k}" for k in range(n))


def _einsum_result_format(a: Assignment, tensors: Mapping[str, Tensor],
                          out_format: FormatLike | None) -> Format:
    """``out_format``, else :func:`default_result_format`, except that a matrix or tensor
    result is sparse when a sparse operand bounds it: every index of that operand is a result
    index, so the result is zero wherever the operand is (a sampled product, a sparse matrix
    times a dense one element-wise), as SciPy's ``multiply`` keeps sparsity."""
    order = len(a.lhs.indices)
    if out_format is not None:
        return as_format(out_format, order)
    out = set(a.lhs.indices)
    if order >= 2 and any(not tensors[x.tensor].format.is_dense and set(x.indices) <= out
                          for x in accesses(a.rhs) if x.tensor in tensors):
        return csr if order == 2 else csf(order)
    return default_result_format(order, list(tensors.values()))


def _run_plan(plan: EinsumPlan, operands: list[Tensor], any_layout: bool) -> Tensor:
    """Follow ``plan``'s steps; the last step's result. NumPy's results stay arrays until a
    kernel or the caller needs a Tensor; with ``any_layout`` a dense result keeps the memory
    order NumPy gave it (a column-major product is not copied into row-major)."""
    values: list[Tensor | np.ndarray] = list(operands)
    for step in plan.steps:
        inputs = [values[v] for v in step.inputs]
        if step.engine == "numpy":
            arrays = [t.to_numpy() if isinstance(t, Tensor) else t for t in inputs]
            values.append(np.asarray(np.einsum(step.subscripts, *arrays, optimize=len(inputs) > 1)))
        else:
            tensors = dict(zip(_operand_names(len(inputs)), map(as_tensor, inputs)))
            values.append(_step_kernel(step.subscripts, tensors, step.format).run(tensors))
    out = values[-1]
    return out if isinstance(out, Tensor) else _numpy_result(out, plan.steps[-1].format, any_layout)


def _numpy_result(out: np.ndarray, fmt: Format, any_layout: bool) -> Tensor:
    """NumPy's result as a Tensor in ``fmt``, or with ``any_layout`` in the memory order
    NumPy gave it when ``fmt`` is dense (a column-major product is not copied)."""
    if any_layout and fmt.is_dense and out.ndim > 1 and not out.flags.c_contiguous:
        fmt = _memory_order(out) or fmt
    return Tensor.from_numpy(out, format=fmt)


def _dense_key(subscripts: str, operands: Sequence[Any]) -> tuple | None:
    """The key of an einsum call on NumPy arrays alone (None for other operands)."""
    if not operands or any(type(op) is not np.ndarray for op in operands):
        return None
    return (subscripts, memory_cap(), *((op.shape, op.dtype) for op in operands))


def _step_kernel(subscripts: str, tensors: Mapping[str, Tensor], fmt: Format) -> Kernel:
    """:func:`kernel_for` of an einsum step, looked up by the step's spelling and its operands'
    formats and fills (cheaper than kernel_for's key, which spells the whole assignment)."""
    key = (subscripts, fmt, *((t.format, fill_key(t.fill_value)) for t in tensors.values()))
    kernel = _step_kernels.get(key)
    if kernel is None:
        a = parse_einsum(subscripts, len(tensors), [t.order for t in tensors.values()])
        kernel = _step_kernels[key] = kernel_for(a, tensors, fmt)
        if len(_step_kernels) > _LAST_MAX:
            _step_kernels.pop(next(iter(_step_kernels)))
    return kernel


def _memory_order(arr: np.ndarray) -> Format | None:
    """The dense format whose mode ordering is ``arr``'s memory order, when ``arr`` is
    contiguous in some order of its axes."""
    ordering = sorted(range(arr.ndim), key=lambda m: -arr.strides[m])
    return dense(arr.ndim, ordering) if arr.transpose(ordering).flags.c_contiguous else None


def run_assignment(assignment: Assignment, out_format: FormatLike | None) -> Storage:
    """Evaluate a DSL assignment whose accesses carry their Tensors; returns the Storage."""
    assignment = _separate_sources(assignment)
    tensors: dict[str, Tensor] = {}
    for x in accesses(assignment.rhs):
        if x.source is None:
            raise TypeError(f"access {x} has no tensor attached")
        tensors[x.tensor] = x.source
    if assignment.lhs.tensor in tensors or assignment.accumulate:
        tensors[assignment.lhs.tensor] = assignment.lhs.source
    shape = assignment.lhs.source.shape
    chained = run_chained_sum(assignment, tensors, out_format, shape)
    if chained is not None:
        return chained.storage
    return kernel_for(assignment, tensors, out_format).run(tensors, shape).storage
