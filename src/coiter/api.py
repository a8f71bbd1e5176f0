"""The user-facing entry points: compile, evaluate, einsum."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .concrete.commands import Command, parse_commands
from .concrete.stmt import ConcreteProgram
from .formats.format import Format, FormatLike, as_format, csf, csr, dense
from .notation.ast import Access, Add, Assignment, accesses
from .notation.einsum import parse_einsum
from .notation.parser import parse
from .operands import as_tensor
from .runtime.kernel import Kernel
from .tensor import Tensor

AssignmentLike = str | Assignment
ScheduleLike = str | Sequence[Command] | ConcreteProgram | None  # or "auto"

_kernels: dict[tuple, Kernel] = {}


def _as_assignment(a: AssignmentLike) -> Assignment:
    if isinstance(a, Assignment):
        return a
    if isinstance(a, str):
        return parse(a)
    raise TypeError(f"expected an index-notation string or Assignment, got {type(a).__name__}")


def _rename(e: Any, old: str, new: str) -> Any:
    from .notation.ast import BinaryExpr, Neg

    if isinstance(e, Access):
        return Access(new, e.indices, e.source) if e.tensor == old else e
    if isinstance(e, BinaryExpr):
        return type(e)(_rename(e.a, old, new), _rename(e.b, old, new))
    if isinstance(e, Neg):
        return Neg(_rename(e.operand, old, new))
    return e


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
    """
    a, aliases = _prepare(_as_assignment(assignment))
    formats = dict(formats or {})
    orders = _orders(a)
    fmts: dict[str, Format] = {}
    for name, order in orders.items():
        spec = formats.get(aliases.get(name, name))
        if name in aliases and spec is None:
            spec = formats.get(name)
        fmts[name] = as_format(spec, order)
    unknown = set(formats) - set(orders) - set(aliases.values())
    if unknown:
        from .errors import FormatError

        raise FormatError(f"formats given for tensors not in the expression: {sorted(unknown)}")
    commands = "auto" if schedule == "auto" else _commands(schedule)
    if target not in ("c", "cuda"):
        raise ValueError(f"target must be 'c' or 'cuda', got {target!r}")
    kernel = Kernel(a, fmts, np.dtype(dtype or np.float64), aliases, commands, target)
    if kernel.schedule:
        kernel.concrete  # apply the schedule now, so a bad one fails at compile time
    return kernel


def _commands(schedule: ScheduleLike) -> tuple[Command, ...]:
    if schedule is None:
        return ()
    if isinstance(schedule, str):
        return parse_commands(schedule)
    if isinstance(schedule, ConcreteProgram):
        return schedule.commands
    if isinstance(schedule, (list, tuple)) and all(isinstance(c, Command) for c in schedule):
        return tuple(schedule)
    raise TypeError("schedule must be a command string, a sequence of Commands or a "
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
    a = _as_assignment(assignment)
    tensors = {n: as_tensor(v, name=n) for n, v in operands.items()}
    return _run(a, tensors, out_format, out_shape)


def _run(a: Assignment, tensors: Mapping[str, Tensor], out_format: FormatLike | None,
         out_shape: tuple[int, ...] | None = None) -> Tensor:
    order = len(a.lhs.indices)
    rhs_names = [x.tensor for x in accesses(a.rhs) if x.tensor in tensors]
    if out_format is None:
        out = default_result_format(order, [tensors[n] for n in dict.fromkeys(rhs_names)])
    else:
        out = as_format(out_format, order)
    formats: dict[str, FormatLike] = {n: t.format for n, t in tensors.items()}
    formats[a.lhs.tensor] = out
    key = (str(a), tuple(sorted((n, f.to_string()) for n, f in formats.items())))
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = compile(a, formats)
        _kernels[key] = kernel
    return kernel.run(tensors, out_shape)


def einsum(subscripts: str, *operands: Any, out_format: FormatLike | None = None) -> Tensor:
    """NumPy-style einsum (``"ij,j->i"``) over Tensors, arrays and SciPy matrices."""
    tensors = [as_tensor(op, name=f"T{n}") for n, op in enumerate(operands)]
    a = parse_einsum(subscripts, len(tensors), [t.order for t in tensors])
    return _run(a, {f"T{n}": t for n, t in enumerate(tensors)}, out_format)


def run_assignment(assignment: Assignment, out_format: FormatLike | None, out_dtype: Any = None):
    """Evaluate a DSL assignment whose accesses carry their Tensors; returns the Storage."""
    tensors: dict[str, Tensor] = {}
    for x in accesses(assignment.rhs):
        if x.source is None:
            raise TypeError(f"access {x} has no tensor attached")
        tensors[x.tensor] = x.source
    if assignment.lhs.tensor in tensors or assignment.accumulate:
        tensors[assignment.lhs.tensor] = assignment.lhs.source
    result = _run(assignment, tensors, out_format, assignment.lhs.source.shape)
    return result.storage
