"""Lowering: concrete index notation → imperative IR (Kjolstad, Fig. 5-2).

Every forall becomes one loop per merge-lattice point; each loop co-iterates the
point's sparse iterators (levels that cannot locate), resolves the coordinate,
locates every level that can, and runs one case per dominated point with the
expression restricted to the operands present there. Results are assembled by
insert (levels with locate) or append (levels with append), decided purely by
level capabilities: this module never names a level format.

Three kernel modes share the code: ``fused`` assembles the result's index
structure and computes values, ``assemble`` only the structure, ``compute``
only the values into a structure assembled before (same lattice, same order,
so the position counters replay exactly).
"""
from __future__ import annotations

import math
import operator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from ..concrete.provenance import Bound, Provenance, Split
from ..concrete.races import races, shared_pattern
from ..concrete.stmt import (
    Assign, ConcreteProgram, Forall, Multi, Sequence, Stmt, TensorDecl, Where, walk_stmts,
)
from ..errors import FormatError, ScheduleError
from ..formats.levels.base import Level, LevelNames, ParentPos
from ..formats.storage import fill_key
from ..ir.nodes import (
    Assign as IRAssign, Bin, Block, Call, Cast, Comment, Const, Decl, ExprStmt, For, Function,
    If, IRExpr, IRStmt, Load, Max, Min, Param, Pragma, Return, Scoped, THREADS_BRANCH, Un,
    Var, While, add, block, conj, eq, lt, mul,
)
from ..lattice.lattice import (
    Iter, Lattice, Point, Typing, build_lattice, expression_fill, locate_where_possible, sparse_iters,
)
from ..notation.ast import (
    Access, Add, BinaryExpr, Call as Intrinsic, Coordinate, Div, Expr, IndexVar, Literal, Mul, Neg,
    Number, Reduction, Sub, accesses, map_accesses, walk,
)
from ..notation.functions import call_dtypes, computation_dtype, zero_at
from ..notation.operators import OPERATORS
from ..notation.reducers import reducer
from .assembly import ParallelAssembly
from .intrinsics import computable, intrinsic_ir
from .growth import drop_unread_zero_fill
from .names import Namer
from .ism import SparseWorkspaces
from .scatter import ParallelScatter
from .dense_rows import block_dense_rows
from .gathers import prefetch_far_gathers
from .prefetch import prefetch_located_segments
from .scatter_adds import vector_scatter_adds
from .short_runs import short_run_sums
from .sums import split_long_sums
from .tiny_runs import TinyRunRows
from .vector_runs import vector_run_sums
from .unions import MAX_RUNS, Run, sum_terms, union_row
from .reductions import atomic_updates, scalar_accumulation
from .equations import EquationLoops
from .derived import DerivedLoops
from .types import c_index_type, c_value_type, typed_literal

MODES = ("fused", "assemble", "compute")
# merges of at most this many iterators branch on each iterator's coordinate in turn (a
# decision tree of 2^n - 1 leaves); more walk a chain of one test per lattice point
CASE_TREE_ITERATORS = 3
# a thread loop reduces into private copies of the result on each thread's stack up to
# this size, and updates the result atomically beyond it
ARRAY_REDUCTION_BYTES = 1 << 20
TARGETS = ("c", "cuda")

# Rows vary in cost (sparse rows): threads take chunks of rows as they finish. A chunk is
# about a sixteenth of a thread's share, and at least 4096 units of work (coiter_chunk_rows in
# the C prelude): enough chunks to balance skewed rows, or a thread slowed by another process,
# at little scheduling cost.
CHUNK = "coiter_chunk"  # the variable holding the chunk size (coiter_chunk_rows computes it)
DEFAULT_CHUNKING = f"dynamic, {CHUNK}"
# the thread count: the kernel's argument, or OpenMP's default (OMP_NUM_THREADS) when 0,
# limited by the call's work (the stored values it reads and writes, computed by the caller)
THREADS_PARAM = "coiter_nthreads"
WORK_PARAM = "coiter_work"
NUM_THREADS = "num_threads(COITER_THREADS())"
BOUND_ERROR = 3  # kernel return code: a bound() promise does not hold
PATTERN_ERROR = 6  # kernel return code: compute mode's operands do not produce its pattern
# OpenMP's reduction operator for each reduction of a scalar temporary
OMP_REDUCTIONS = {"sum": "+", "prod": "*", "min": "min", "max": "max", "any": "||", "all": "&&"}
LOCAL_TEMP = 256  # precomputed workspaces of at most this many values live on the stack


# ------------------------------------------------------------------ kernel description


@dataclass(frozen=True)
class ParamSpec:
    """One C parameter and where its value comes from at call time."""

    # "dim" | "array" | "vals" | "shared_vals" (values over the positions of the first
    # ``level`` levels of operand ``array``, times the result's dense levels below them) |
    # "out" | "out_len" | "cap_hint" | "threads" | "work" | "extent" (of the index variable
    # named ``array``)
    kind: str
    tensor: str
    level: int = -1  # 0-based storage level for "dim"/"array", shared levels for "shared_vals"
    array: str = ""


@dataclass(frozen=True)
class KernelIR:
    function: Function
    params: tuple[ParamSpec, ...]
    mode: str
    result: str
    result_allocated: bool  # True: the kernel mallocs result arrays and returns them via out/out_len
    out_arrays: tuple[tuple[int, str], ...]  # (level, array) in out-slot order; (-1, "vals") last
    support: tuple[str, ...] = ()  # C definitions the function needs besides the preamble
    # True: each iteration of the outermost loop zeroes the result values it owns before it
    # writes them, so the caller need not zero them (see Lowerer._own_slice_zeroing)
    zeroes_result: bool = False


# ------------------------------------------------------------------ scope


@dataclass(frozen=True)
class Scope:
    coords: Mapping[IndexVar, IRExpr] = field(default_factory=dict)
    pos: Mapping[tuple[Access, int], ParentPos] = field(default_factory=dict)
    # split variables whose in-block loop is bounded so they stay inside the tensor
    bounded: frozenset[IndexVar] = frozenset()

    def with_coord(self, v: IndexVar, e: IRExpr) -> Scope:
        return replace(self, coords={**self.coords, v: e})

    def with_pos(self, items: Iterable[tuple[tuple[Access, int], ParentPos]]) -> Scope:
        return replace(self, pos={**self.pos, **dict(items)})


@dataclass
class _Group:
    """Consecutive result levels sharing one append position counter (compressed + singletons)."""

    head: int
    members: list[int]
    counter: str = ""
    cap: str = ""


@dataclass(frozen=True)
class _SortedScratch:
    """An unordered (or gapped) level seen through a scratch array of its valid positions
    sorted by coordinate: the paper's reordering conversion, so it can be co-iterated or
    appended in order. Quacks like the level for the functions lowering calls."""

    level: Level  # the level being reordered
    names: LevelNames
    key: str  # scratch array of coordinates
    at: str  # scratch array of the level positions they come from
    count: str

    @property
    def unique(self) -> bool:
        return self.level.unique

    def pos_access(self, names: LevelNames, p: IRExpr, ancestors: tuple = ()) -> IRExpr:
        return Load(self.key, p)

    def pos_found(self, names: LevelNames, p: IRExpr) -> None:
        return None

    def child_position(self, names: LevelNames, p: IRExpr, coord: IRExpr, parent: IRExpr) -> IRExpr:
        return self.level.child_position(names, Load(self.at, p), coord, parent)


def _unless_returns(pragma: str | None, body: list[IRStmt]) -> str | None:
    """``pragma``, unless the loop body can return (an allocation failing inside it), which
    OpenMP does not allow out of a parallel loop."""
    def returns(s: IRStmt) -> bool:
        if isinstance(s, Return):
            return True
        if isinstance(s, Block):
            return any(returns(x) for x in s.stmts)
        if isinstance(s, (For, While)):
            return returns(s.body)
        if isinstance(s, If):
            return returns(s.then) or (s.otherwise is not None and returns(s.otherwise))
        return False

    return None if pragma is None or any(returns(s) for s in body) else pragma


# ------------------------------------------------------------------ helpers on expressions


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Literal) and e.value == 0


@dataclass(frozen=True)
class Absence:
    """What the absent entries of a program's tensors read as, and which writes change
    nothing: an operand's absent entry is its fill value; a scalar temporary that nothing
    reduced into holds its reduction's identity; dense temporaries and workspaces start at
    zero. Adding a reduction's identity, or assigning the result its own fill, is skipped."""

    decls: Mapping[str, TensorDecl]

    def fill(self, tensor: str) -> Number:
        decl = self.decls[tensor]
        if decl.role == "temp" and decl.order == 0:
            return reducer(decl.reducer).identity(decl.dtype)
        return decl.fill if decl.role in ("input", "result") else 0

    def literal(self, a: Access) -> Literal:
        """``a``'s absent value, of its tensor's kind (0.0, 0j...: it types the intrinsics
        it is left in)."""
        return Literal(np.asarray(self.fill(a.tensor), self.decls[a.tensor].dtype)[()].item())

    def zero(self, e: Expr, negated: bool = False) -> Literal:
        """A zero of ``e``'s type, for ``e`` folded away (0.0 for a float product): an int 0
        would make an enclosing ``pow(b(i) * c(i), -1)`` an integer power, 0 where the
        kernel must give inf. ``negated``: -0.0 for floats, as NumPy negates a zero
        (``1 / -b(i)`` is -inf where ``b`` is absent)."""
        zero = np.zeros((), self._dtype(e))
        return Literal((-zero if negated and zero.dtype.kind in "fc" else zero).item())

    def typed_like(self, x: Expr, e: Expr) -> Expr:
        """``x``, what ``e`` folded into (``b(i) + 3`` into ``3`` where ``b`` is absent), a
        float or complex value where ``e`` is one and ``x`` is not: ``3.0`` for a float
        ``b``, or ``x + 0.0``, so that an enclosing ``pow(b(i) + 3, -2)`` stays a float power
        (1/9, not 0), as does ``pow(c(i) + b(i), -1)`` of an int ``c`` where ``b`` is
        absent (1/c, not the integer power's 0). Integer kinds stay as written: arithmetic
        outside intrinsics computes in the result's type (``-2`` of ``uint64 b(l) + -2`` in
        a float result is -2.0, not 2**64 - 2). An ``e`` of literals only has their kind: an
        inner loop simplifies ``-3 + 0.0`` again, and must not give the int ``-3`` back."""
        want, have = self._dtype(e), self._dtype(x)
        if want.kind not in "fc" or _KIND_RANK[want.kind] <= _KIND_RANK[have.kind]:
            return x
        if isinstance(x, Literal):
            return Literal(np.asarray(x.value).astype(want).item())
        # plus a zero of that kind, not a cast: a cast computes its argument in the
        # argument's own type (-c of a uint64 c would wrap), arithmetic in the enclosing one
        return Add(x, Literal(np.zeros((), want).item()))

    def _dtype(self, e: Expr) -> np.dtype:
        dtypes = {name: decl.dtype for name, decl in self.decls.items()}
        return computation_dtype(e, dtypes, np.dtype(np.float64))

    def fill_of(self, a: Access) -> Any:
        """``a``'s absent value as a NumPy scalar of its tensor's type: merge lattices
        evaluate functions at it as kernels do (``pow(b(i), -2)`` of a float ``b`` is inf
        there, where NumPy's power of the integer 0 raises)."""
        return np.asarray(self.fill(a.tensor), self.decls[a.tensor].dtype)[()]

    def neutral(self, s: Assign) -> Number:
        """The value whose write by ``s`` changes nothing."""
        if s.accumulate:
            return self.fill(s.lhs.tensor) if self.decls[s.lhs.tensor].order == 0 else 0
        return self.fill(s.lhs.tensor)


def _infinite(e: Expr) -> bool:
    return isinstance(e, Literal) and not isinstance(e.value, bool) and bool(np.isinf(e.value))


def _absorbed(e: Expr, a: Expr, b: Expr) -> Expr | None:
    """The literal ``e`` (of simplified operands ``a``, ``b``) is when one operand's value
    absorbs the other, as merge lattices take it (x + inf, x - inf, min(x, -inf),
    max(x, inf), x and false, x or true); None otherwise."""
    if isinstance(a, Literal) and isinstance(b, Literal):
        return None  # folded elsewhere, or kept (inf - inf is NaN)
    if isinstance(e, (Add, Sub)) and (_infinite(a) or _infinite(b)):
        if _infinite(b):
            return Literal(-b.value if isinstance(e, Sub) else b.value)
        return a
    if isinstance(e, Intrinsic) and len(e.args) == 2:
        for x in (a, b):
            if isinstance(x, Literal) and (
                    (e.fn == "min" and x.value == -np.inf) or (e.fn == "max" and x.value == np.inf)
                    or (e.fn == "and" and not x.value) or (e.fn == "or" and bool(x.value))):
                return Literal(bool(x.value)) if e.fn in ("and", "or") else x
    return None


# the kinds' order in NumPy's promotion
_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def _decided_comparison(e: Intrinsic, loop: np.dtype) -> bool | None:
    """The value of a comparison of integers (of type ``loop``) with an int literal beyond
    that type, the same for every value of it; None for other calls. NumPy 2 compares such
    Python ints exactly (uint8 > -1 is true, == 300 false), where arithmetic with them is
    an error (typed_literal's DTypeError)."""
    if e.fn not in _COMPARE or loop.kind not in "iu":
        return None
    info = np.iinfo(loop)
    values = [x.value if isinstance(x, Literal) and type(x.value) is int else None for x in e.args]
    if not any(v is not None and not info.min <= v <= info.max for v in values):
        return None
    # 0 fits every integer type and stands for each of its values
    return bool(_COMPARE[e.fn](*(0 if v is None or info.min <= v <= info.max else v for v in values)))


_COMPARE = {"gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le,
            "eq": operator.eq, "neq": operator.ne}


def _typed(e: Expr) -> bool:
    """Whether ``e`` reads a tensor or a coordinate (else its type is its literals')."""
    return any(isinstance(x, (Access, Coordinate)) for x in walk(e))


def simplify(e: Expr, zero: frozenset, absence: Absence) -> Expr:
    """Replace accesses in ``zero`` by their absent value and fold x*0, x+0, -0 (Chou et
    al.'s case expressions), and operands that an absent value absorbs (x + inf), as the
    merge lattice does: it walks no loop for them."""
    if isinstance(e, Access):
        return absence.literal(e) if e in zero else e
    if isinstance(e, Neg):
        a = simplify(e.operand, zero, absence)
        return absence.zero(e, negated=True) if _is_zero(a) else _settled(Neg(a), e, absence)
    if isinstance(e, BinaryExpr):
        a, b = simplify(e.a, zero, absence), simplify(e.b, zero, absence)
        absorbed = _absorbed(e, a, b)
        if absorbed is not None:
            return absorbed
        if isinstance(e, Mul) and (_is_zero(a) or _is_zero(b)):
            return absence.zero(e)
        if isinstance(e, Div) and _is_zero(a) and not _is_zero(b):
            return absence.zero(e)  # 0 / 0 stays: NaN
        if isinstance(e, Add):
            if _is_zero(a):
                return absence.typed_like(b, e)
            if _is_zero(b):
                return absence.typed_like(a, e)
        if isinstance(e, Sub):
            if _is_zero(b):
                return absence.typed_like(a, e)
            if _is_zero(a):
                # 0 - b, not -b (+0 for b = 0, as in NumPy), in e's kind: an absent int32
                # reads as a weak literal 0, and int32 - uint64 is a float
                return absence.typed_like(_settled(Sub(a, b), e, absence), e)
        return _settled(type(e)(a, b), e, absence)
    if isinstance(e, Intrinsic):
        args = tuple(simplify(x, zero, absence) for x in e.args)
        if all(isinstance(x, Literal) for x in args) and zero_at(e.fn, tuple(x.value for x in args)):
            return absence.zero(e)
        absorbed = _absorbed(e, *args) if len(args) == 2 else None
        return absorbed if absorbed is not None else _settled(Intrinsic(e.fn, args), e, absence)
    return e


def _settled(r: Expr, e: Expr, absence: Absence) -> Expr:
    """``r``, what ``e`` simplified into, as the literal of its value where it holds literals
    only and that value is one the merge lattices' algebra acts on: an infinity absorbs a
    sum and a zero a product. The lattices evaluate such values (``1 / b(l)`` is inf where
    ``b`` is absent, so ``c(i) + 1 / b(l)`` walks no loop over ``c``); left as an expression
    the absent case kept reading ``c(i)`` with no loop over ``c`` (KeyError)."""
    if isinstance(r, Literal) or _typed(r):
        return r
    value = expression_fill(r, lambda a: False, lambda a: 0)
    if value is None or not (np.isinf(value) or value == 0):
        return r
    return absence.typed_like(Literal(np.asarray(value).item()), e)


def restrict(s: Stmt, zero: frozenset, absence: Absence) -> Stmt | None:
    """``s`` with the accesses in ``zero`` absent; None when nothing is left to do."""
    if isinstance(s, Assign):
        rhs = simplify(s.rhs, zero, absence)
        if isinstance(rhs, Literal) and _same_value(rhs.value, absence.neutral(s)):
            return None
        return replace(s, rhs=rhs)
    if isinstance(s, Forall):
        body = restrict(s.body, zero, absence)
        return None if body is None else replace(s, body=body)
    if isinstance(s, Where):
        producer = restrict(s.producer, zero, absence)
        if producer is None:  # the temporaries keep their initial values
            defined = {a.lhs for a in walk_stmts(s.producer) if isinstance(a, Assign)}
            return restrict(s.consumer, zero | defined, absence)
        consumer = restrict(s.consumer, zero, absence)
        if consumer is None:
            return None
        if _produced(producer).tensor not in {a.tensor for a in _stmt_accesses(consumer)}:
            return consumer  # the consumer no longer reads the temporary: nothing to produce
        return Where(consumer, producer)
    if isinstance(s, (Sequence, Multi)):
        first, second = (s.define, s.mutate) if isinstance(s, Sequence) else (s.left, s.right)
        a, b = restrict(first, zero, absence), restrict(second, zero, absence)
        if a is None or b is None:
            return a or b
        return type(s)(a, b)
    raise TypeError(type(s).__name__)


def _same_value(x: Number, y: Number) -> bool:
    """Whether two literal values are equal (NaN never is)."""
    return bool(x == y)


def value_expr(s: Stmt, reducers: Mapping[str, str] | None = None,
               defs: Mapping[str, Expr] | None = None) -> Expr:
    """The expression whose sparsity a loop around ``s`` must follow.

    Temporaries produced inside ``s`` are replaced by what produces them: a scalar
    temporary of ``reducers`` (tensor -> reduction operator) by the reduction of it.
    """
    reducers = reducers or {}
    defs = dict(defs or {})
    if isinstance(s, Assign):
        return _substitute(s.rhs, defs)
    if isinstance(s, Forall):
        return value_expr(s.body, reducers, defs)
    if isinstance(s, Where):
        produced = _produced(s.producer).tensor
        value = value_expr(s.producer, reducers, defs)
        if produced in reducers:
            value = Reduction(_ANY_VAR, value, reducers[produced])
        defs[produced] = value
        return value_expr(s.consumer, reducers, defs)
    if isinstance(s, Sequence):
        return Add(value_expr(s.define, reducers, defs), value_expr(s.mutate, reducers, defs))
    if isinstance(s, Multi):
        return Add(value_expr(s.left, reducers, defs), value_expr(s.right, reducers, defs))
    raise TypeError(type(s).__name__)


_ANY_VAR = IndexVar("_")  # the variable of a reduction whose loops value_expr looks through


def produced_assign(s: Stmt) -> Assign:
    """The assignment a statement ultimately makes (the consumer side of nested wheres)."""
    while not isinstance(s, Assign):
        if isinstance(s, Forall):
            s = s.body
        elif isinstance(s, Where):
            s = s.consumer
        elif isinstance(s, Sequence):
            s = s.mutate
        elif isinstance(s, Multi):
            s = s.right
        else:
            raise TypeError(type(s).__name__)
    return s


def _produced(s: Stmt) -> Access:
    """The tensor a statement ultimately writes (the consumer side of nested wheres)."""
    return produced_assign(s).lhs


def _substitute(e: Expr, defs: Mapping[str, Expr]) -> Expr:
    return map_accesses(e, lambda a: defs.get(a.tensor, a))


def _lhs_accesses(s: Stmt) -> frozenset:
    return frozenset(a.lhs for a in walk_stmts(s) if isinstance(a, Assign))


def _coordinates_read(s: Stmt) -> set[IndexVar]:
    """Index variables whose coordinate ``s`` reads as a value."""
    return {n.var for a in walk_stmts(s) if isinstance(a, Assign) for n in walk(a.rhs)
            if isinstance(n, Coordinate)}


def _wrapped(x: IRExpr, dtype: np.dtype) -> IRExpr:
    """``x``, a value of integer type ``dtype`` narrower than C's int, back in ``dtype``: C
    computes such values in int, NumPy wraps them at every operation (-x of uint8, x * x
    of int8), which a comparison, a division or a wider type would otherwise not see."""
    if dtype.kind in "iu" and dtype.itemsize < 4:
        return Cast(c_value_type(dtype), x)
    return x


def _stmt_accesses(s: Stmt) -> list[Access]:
    out: dict[Access, None] = {}
    for a in walk_stmts(s):
        if isinstance(a, Assign):
            out.setdefault(a.lhs, None)
            for x in accesses(a.rhs):
                out.setdefault(x, None)
    return list(out)


# ------------------------------------------------------------------ the lowerer


class Lowerer(DerivedLoops, EquationLoops, ParallelAssembly, ParallelScatter, SparseWorkspaces):
    """Builds one kernel function from a concrete program (single use)."""

    def __init__(
        self, prog: ConcreteProgram, index_types: Mapping[str, np.dtype], mode: str,
        name: str = "kernel", target: str = "c",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}")
        self.prog = prog
        self.target = target
        self.decls: Mapping[str, TensorDecl] = prog.tensors
        self.dtypes = {n: np.dtype(d.dtype) for n, d in prog.tensors.items()}
        self.absence = Absence(prog.tensors)
        self.reducers = {n: d.reducer for n, d in prog.tensors.items() if d.role == "temp" and d.order == 0}
        self.mode = mode
        self.name = name
        self.namer = Namer()
        self.used = self.namer.used
        self.cn: dict[str, str] = self.namer.tensors(list(self.decls))
        # a sparse workspace's coordinates are decoded from 64-bit keys
        self.itype = {t: c_index_type(index_types.get(t, np.dtype(np.int64)) if d.policy is None
                                      else np.dtype(np.int64)) for t, d in self.decls.items()}
        self.vtype = {t: c_value_type(d.dtype) for t, d in self.decls.items()}
        self.vn: dict[IndexVar, str] = {}
        self.extent: dict[IndexVar, IRExpr] = {}
        self.iter_names: dict[Iter, tuple[str, str]] = {}
        self.views: dict[Iter, _SortedScratch] = {}
        self.fused: set[Iter] = set()  # non-unique iterators walked entry by entry
        self.slice_offsets: dict[Iter, str] = {}  # slice iterators' current offsets
        # loops reducing into a min/max/prod/any/all temporary
        self.nonsum_loops = frozenset(
            f.var for w in walk_stmts(prog.stmt) if isinstance(w, Where)
            and self.reducers.get(produced_assign(w.producer).lhs.tensor, "sum") != "sum"
            for f in walk_stmts(w.producer) if isinstance(f, Forall))
        self.result_vars = frozenset(v for st in walk_stmts(prog.stmt) if isinstance(st, Assign)
                                     and st.lhs.tensor == prog.result for v in st.lhs.indices)
        self.prov = Provenance(prog.env.relations)
        # coordinate windows of split variables walked sparsely: var -> [lo, hi)
        self.window: dict[IndexVar, tuple[IRExpr, IRExpr]] = {}
        self.short_windows: set[IndexVar] = set()  # windows whose end is found by a scan
        self.explicit_parallel = any(isinstance(s, Forall) and s.unit != "NotParallel"
                                     for s in walk_stmts(prog.stmt))
        # loops whose intersections gallop (mergeby): the lagging iterators search ahead
        self.gallop = frozenset(s.var for s in walk_stmts(prog.stmt)
                                if isinstance(s, Forall) and s.merge == "Gallop")
        self.guards: list[IRExpr] = []  # iteration guards of the derived loop being lowered
        self.empty_scope = Scope()  # where loops start: nothing bound
        self.atomic_loops: list[Forall] = []  # enclosing parallel loops that resolve races by atomics
        # dense temporaries are allocated by the function (a slice per thread in parallel loops)
        self.temp_allocs: list[IRStmt] = []
        self.temp_frees: list[IRStmt] = []
        # appended result arrays whose entries are all assigned (no zero fill when grown)
        self.append_written: set[str] = set()
        # C support code the kernel needs besides the preamble (sparse workspaces), in order
        self.support: dict[str, None] = {}
        self.ism_vars: dict[str, tuple[str, str, str, str]] = {}
        self.ism_inserting: dict[str, IRExpr] = {}
        self.parallel_depth = 0  # CPUThread loops enclosing the statement being lowered
        self.zeroes_result = False  # set when the outermost loop zeroes its own result slices
        # counters of result groups whose room for the enclosing loop's appends is reserved
        # before it: their appends check no capacity
        self.reserved: set[str] = set()
        self.result = prog.result
        rdecl = self.decls[self.result]
        # a result sharing an operand's first levels is written at that operand's positions
        # (dense levels below them by insert) and takes those levels' arrays: nothing to
        # assemble (:func:`shared_pattern` says when)
        self.shared = shared_pattern(prog, target) if mode == "fused" else None
        self.shared_levels = rdecl.pattern_levels
        self.result_allocated = not rdecl.format.is_dense and self.shared is None
        self.groups = [] if self.shared is not None else self._result_groups(rdecl)

    # -- naming --------------------------------------------------------------------------
    def _unique(self, base: str) -> str:
        return self.namer.unique(base)

    def names(self, tensor: str, k: int) -> LevelNames:
        return LevelNames(self.cn[tensor], k + 1)

    def vals(self, tensor: str) -> str:
        return f"{self.cn[tensor]}_vals"

    def var(self, v: IndexVar) -> str:
        if v not in self.vn:
            self.vn[v] = self.namer.user(v.name)
        return self.vn[v]

    # -- result groups -------------------------------------------------------------------
    def _result_groups(self, decl: TensorDecl) -> list[_Group]:
        groups: list[_Group] = []
        for k, level in enumerate(decl.format.levels):
            if level.has_append and not level.branchless:
                groups.append(_Group(k, [k]))
            elif level.has_append:
                if not groups or groups[-1].members[-1] != k - 1:
                    raise FormatError(
                        f"result {decl.name}: level {k + 1} ({level}) must follow an appendable level"
                    )
                groups[-1].members.append(k)
            elif not level.has_insert:
                raise FormatError(f"result {decl.name}: level {k + 1} ({level}) cannot be assembled")
        cn = self.cn[decl.name]
        for g in groups:
            g.counter = f"p{cn}{g.head + 1}"
            g.cap = f"{cn}{g.head + 1}_capacity"
            self.used.update({g.counter, g.cap})
        return groups

    def _group_of(self, k: int) -> _Group | None:
        return next((g for g in self.groups if k in g.members), None)

    # -- access helpers ------------------------------------------------------------------
    def fmt(self, tensor: str):
        return self.decls[tensor].format

    def level_var(self, a: Access, k: int) -> IndexVar:
        return a.indices[self.fmt(a.tensor).ordering[k]]

    def resolved_depth(self, scope: Scope, a: Access) -> int:
        k = 0
        while (a, k) in scope.pos:
            k += 1
        return k

    def resolve(
        self, scope: Scope, accs: Iterable[Access], lhs: frozenset = frozenset()
    ) -> tuple[Scope, list[IRStmt]]:
        """Locate every level whose coordinate is known and that can locate (results: insert).

        Positions from a locate that may miss are computed once into a variable; the
        statements doing so come back with the new scope.
        """
        new: dict[tuple[Access, int], ParentPos] = {}
        stmts: list[IRStmt] = []
        for a in accs:
            decl = self.decls[a.tensor]
            if decl.role == "temp" and decl.order == 0:
                continue
            fmt = decl.format
            k = self.resolved_depth(scope, a)
            if a.tensor == self.result and self.shared is not None:
                # the shared levels stand where the operand does; dense levels below insert
                top = (self.shared, self.shared_levels - 1)
                if self.shared_levels == decl.order:
                    continue
                if k < self.shared_levels:
                    if top not in scope.pos:
                        continue
                    new[(a, self.shared_levels - 1)] = scope.pos[top]
                    k = self.shared_levels
            while k < fmt.order:
                level = fmt.levels[k]
                v = self.level_var(a, k)
                can = level.has_insert if a in lhs else level.has_locate
                if v not in scope.coords or not can:
                    break
                parent = new.get((a, k - 1)) or scope.pos.get((a, k - 1)) or ParentPos(Const(0))
                if parent.hi is not None:
                    raise FormatError(f"{a.tensor}: a locate level below a non-unique level")
                names = self.names(a.tensor, k)
                at = level.locate(names, parent.lo, scope.coords[v])
                may_fail = parent.may_fail or level.locate_may_fail
                if level.locate_may_fail:
                    pname = self._unique(f"p{names.tensor}{names.k}")
                    stmts.append(Decl("int64_t", pname, at))
                    at = Var(pname)
                new[(a, k)] = ParentPos(at, may_fail=may_fail)
                k += 1
        return (scope.with_pos(new.items()) if new else scope), stmts

    # -- statements ----------------------------------------------------------------------
    def lower(self, s: Stmt, scope: Scope) -> list[IRStmt]:
        if isinstance(s, Forall):
            return self.lower_forall(s, scope)
        if isinstance(s, Where):
            return self.lower_where(s, scope)
        if isinstance(s, Sequence):
            return self._scoped(s.define, scope) + self._scoped(s.mutate, scope)
        if isinstance(s, Multi):
            return self.lower(s.left, scope) + self.lower(s.right, scope)
        if isinstance(s, Assign):
            return self.lower_assign(s, scope)
        raise TypeError(type(s).__name__)

    def _scoped(self, s: Stmt, scope: Scope) -> list[IRStmt]:
        """``s`` lowered, in a C block of its own where it declares variables: the statements
        of a sequence may declare the same ones (a dense loop's index, where a sparse
        operand with a nonzero fill walks it)."""
        out = self.lower(s, scope)
        return [Scoped(tuple(out))] if any(isinstance(x, Decl) for x in out) else out

    def lower_where(self, w: Where, scope: Scope) -> list[IRStmt]:
        out: list[IRStmt] = []
        # nested wheres inside the producer declare their own temporaries
        defined = [_produced(w.producer).tensor]
        arrays = []
        for name in defined:
            decl = self.decls[name]
            if decl.role == "temp" and decl.order == 0:
                start = reducer(decl.reducer).identity(self.dtypes[name])
                out.append(Decl(self.vtype[name], self.cn[name], Const(typed_literal(start, self.dtypes[name]))))
            elif decl.role == "temp":
                here, size = self._temp_array(name, decl)
                out += here
                arrays.append((name, size))
        workspaces = [n for n in defined if self.decls[n].role == "workspace"]
        scattered = self.scatter_workspace(w)
        if scattered is not None:
            out += self.lower_scatter(w.producer, scattered, scope)
        else:
            out += self.lower(w.producer, scope)
        for name in workspaces:
            if self.decls[name].policy is not None:
                out += self.ism_finish(name)
        out += self.lower(w.consumer, scope)
        for name in workspaces:
            out += self._workspace_reset(name)
        for name, size in arrays:  # zero again for the next use
            out += self._zero(name, size)
        return out

    def _zero(self, name: str, size: IRExpr) -> list[IRStmt]:
        """Zero a temporary array: a loop for a local one (GPU code has no memset), else memset."""
        vals = self.vals(name)
        if isinstance(size, Const):
            q = self._unique(f"q{self.cn[name]}")
            return [For(q, "int64_t", Const(0), size, block(IRAssign(Load(vals, Var(q)), Const(0))))]
        return [ExprStmt(Call("memset", (Var(vals), Const(0), mul(size, Call("sizeof", (Var(self.vtype[name]),))))))]

    def _temp_array(self, name: str, decl: TensorDecl) -> tuple[list[IRStmt], IRExpr]:
        """A dense temporary (a precomputed workspace), allocated once by the function:
        one slice per thread when it lives inside a parallel loop. Returns the statements
        that point at this thread's slice, and its length."""
        size: IRExpr = Const(1)
        extents = [self.extent_of(v) for v in decl.modes]
        vals, vt = self.vals(name), self.vtype[name]
        if all(isinstance(e, Const) for e in extents) and math.prod(e.value for e in extents) <= LOCAL_TEMP:
            # a few values known at compile time: an array local to the loop (registers)
            n = math.prod(e.value for e in extents)
            for k, e in enumerate(extents):
                self.used.add(self.names(name, k).dimension.name)
            self.used.add(vals)
            dims = [Decl("int64_t", self.names(name, k).dimension.name, e) for k, e in enumerate(extents)]
            return [*dims, Decl(vt, f"{vals}[{n}]"), *self._zero(name, Const(n))], Const(n)
        for k, v in enumerate(decl.modes):
            dim = self.names(name, k).dimension.name
            if dim not in self.used:
                self.used.add(dim)
                self.temp_allocs.append(Decl("int64_t", dim, extents[k]))
            size = mul(size, Var(dim))
        whole = f"{vals}_all" if self.parallel_depth else vals
        if whole not in self.used:
            self.used.add(whole)
            copies = Call("COITER_THREADS", ()) if self.parallel_depth else Const(1)
            self.temp_allocs.append(Decl(f"{vt}*", whole, Cast(f"{vt}*", Call("calloc", (
                mul(copies, self._slice(size)), Call("sizeof", (Var(vt),)))))))
            self.temp_allocs.append(If(Un("!", Var(whole)), block(Return(Const(1)))))
            self.temp_frees.append(ExprStmt(Call("free", (Var(whole),))))
        here: list[IRStmt] = []
        if self.parallel_depth:
            self.used.add(vals)
            here.append(Decl(f"{vt}* restrict", vals, add(Var(whole), mul(
                Var("COITER_THREAD_NUM()"), self._slice(size)))))
        return here, size

    def _slice(self, size: IRExpr) -> IRExpr:
        """Values between two threads' slices of a temporary: its size, rounded up and
        padded by 16 values, so no cache line is shared (false sharing halved the speed
        of MTTKRP's per-thread workspace at 2 threads)."""
        if not self.parallel_depth:
            return Call("COITER_MAX", (size, Const(1)))
        return add(mul(Bin("/", add(size, Const(15)), Const(16)), Const(16)), Const(16))

    def lower_assign(self, s: Assign, scope: Scope) -> list[IRStmt]:
        scope, out = self.resolve(scope, _stmt_accesses(s), frozenset({s.lhs}))
        lhs = s.lhs
        decl = self.decls[lhs.tensor]
        op = "+=" if s.accumulate else "="
        if decl.role == "temp" and decl.order == 0:
            t = Var(self.cn[lhs.tensor])
            if s.accumulate and reducer(decl.reducer).defined:
                # a user's operator folds by its body: t = op(t, value)
                folded = OPERATORS[decl.reducer].expand([Access(lhs.tensor, ()), s.rhs])
                return out + [self._write(lhs, IRAssign(t, self.expr(folded, scope, self.dtypes[lhs.tensor])))]
            value = self.expr(s.rhs, scope, self.value_dtype(s))
            if reducer(decl.reducer).logical:  # any/all test the body's own value (C's bool: != 0)
                value = Cast(c_value_type(np.dtype(np.bool_)), value)
            if s.accumulate and decl.reducer != "sum":
                return out + [self._write(lhs, self._fold(decl.reducer, t, value, self.dtypes[lhs.tensor]))]
            return out + [self._write(lhs, IRAssign(t, value, op))]
        if decl.role == "result" and self.mode == "assemble":
            return []
        if decl.policy is not None:
            coords = [scope.coords[v] for v in lhs.indices]
            return out + self.ism_insert(lhs.tensor, coords, self.expr(s.rhs, scope))
        if decl.order == 0:
            pos: IRExpr = Const(0)
        elif decl.role == "result" and self.shared is not None and self.shared_levels == decl.order:
            pos = scope.pos[(self.shared, decl.order - 1)].lo
        else:
            last = decl.order - 1
            pos = scope.pos[(lhs, last)].lo
            level = decl.format.levels[last]
            if level.has_insert:
                out += level.insert_coord(self.names(lhs.tensor, last), pos,
                                          scope.coords[self.level_var(lhs, last)])
        out.append(self._write(lhs, IRAssign(Load(self.vals(lhs.tensor), pos), self.expr(s.rhs, scope), op)))
        return out

    def value_dtype(self, s: Assign) -> np.dtype:
        """The type ``s`` computes its right-hand side in: a scalar temporary's own, any's
        and all's their body's (they test it for nonzero), else the result's."""
        decl = self.decls[s.lhs.tensor]
        if decl.role != "temp" or decl.order != 0:
            return self.dtypes[self.result]
        if reducer(decl.reducer).logical:
            return computable(computation_dtype(s.rhs, self.dtypes, np.dtype(np.float64)))
        return self.dtypes[s.lhs.tensor]

    def _fold(self, op: str, acc: Var, value: IRExpr, dtype: np.dtype) -> IRAssign:
        """``acc`` updated with ``value`` by the reduction operator ``op`` (not a sum)."""
        if op == "prod":
            return IRAssign(acc, value, "*=")
        fn = {"min": "min", "max": "max", "any": "or", "all": "and"}[op]
        return IRAssign(acc, intrinsic_ir(fn, [acc, value], dtype, self.support))

    def _write(self, lhs: Access, s: IRAssign) -> IRStmt:
        """``s``, atomic when iterations of an enclosing parallel loop race on it."""
        if not self._atomic(lhs):
            return s
        if s.op != "+=":
            raise ScheduleError(f"Atomics: iterations race on {lhs}, which is assigned, not reduced")
        if self.dtypes[lhs.tensor].kind == "c":
            raise ScheduleError(f"Atomics: OpenMP has no atomic update of complex {lhs}")
        return Pragma("omp atomic", s)

    def expr(self, e: Expr, scope: Scope, dtype: np.dtype | None = None) -> IRExpr:
        """``e``'s value computed in ``dtype`` (by default the result's type, as NumPy
        computes into an output array of that type; e.g. int32 * int32 into int64)."""
        dtype = self.dtypes[self.result] if dtype is None else np.dtype(dtype)
        ctype = c_value_type(dtype)
        if isinstance(e, Access):
            decl = self.decls[e.tensor]
            if decl.role == "temp" and decl.order == 0:
                return Var(self.cn[e.tensor])
            where = ParentPos(Const(0)) if decl.order == 0 else scope.pos[(e, decl.order - 1)]
            load: IRExpr = Load(self.vals(e.tensor), where.lo)
            if where.hi is not None:  # duplicates of one coordinate: their values add up
                load = Call("coiter_sum", (Var(self.vals(e.tensor)), where.lo, where.hi))
            load = where.or_zero(load)  # an absent entry reads as zero
            if self.vtype[e.tensor] != ctype:
                load = Cast(ctype, load)
            return load
        if isinstance(e, Literal):
            return Const(typed_literal(e.value, dtype))
        if isinstance(e, Coordinate):
            return Cast(ctype, scope.coords[e.var])
        if isinstance(e, Neg):
            return _wrapped(Un("-", self.expr(e.operand, scope, dtype)), dtype)
        if isinstance(e, BinaryExpr):
            return _wrapped(Bin(e.symbol, self.expr(e.a, scope, dtype), self.expr(e.b, scope, dtype)),
                            dtype)
        if isinstance(e, Intrinsic):
            # computed in the ufunc's loop type for its arguments, then converted
            loop, out = (computable(t) for t in call_dtypes(e, self.dtypes))
            decided = _decided_comparison(e, loop)
            if decided is not None:
                return Const(typed_literal(decided, dtype))
            value = intrinsic_ir(e.fn, [self.expr(x, scope, loop) for x in e.args], loop, self.support)
            # a narrow integer result of the loop's own type (abs of int8) wraps like arithmetic
            value = _wrapped(value, out) if c_value_type(out) == c_value_type(loop) else value
            return value if c_value_type(out) == ctype else Cast(ctype, value)
        raise TypeError(type(e).__name__)

    # -- foralls -------------------------------------------------------------------------
    def iter_of(self, scope: Scope, v: IndexVar, slices: bool = True):
        """The iterator of the loop over ``v`` an access contributes (``slices``: walking a
        compound subscript's non-empty windows, which only a serial loop can)."""
        def get(a: Access) -> Iter | None:
            decl = self.decls[a.tensor]
            if decl.role == "temp" or decl.order == 0 or a.tensor == self.result:
                return None
            k = self.resolved_depth(scope, a)
            if k >= decl.order:
                return None
            level = decl.format.levels[k]
            if level.has_locate and level.full:
                return None
            if self.level_var(a, k) != v:
                sol = self._slicing(scope, a, k, v) if slices else None
                return None if sol is None else Iter(a, k, v, sol)
            return Iter(a, k, v)

        return get

    def _locatable(self, it: Iter) -> bool:
        return self.fmt(it.access.tensor).levels[it.level].has_locate

    def _level(self, it: Iter):
        """The level an iterator walks (its sorted scratch view when reordered)."""
        return self.views.get(it) or self.fmt(it.access.tensor).levels[it.level]

    def _ancestors(self, scope: Scope, a: Access, k: int) -> tuple[IRExpr, ...]:
        return tuple(scope.coords[self.level_var(a, j)] for j in range(k))

    def _needs_order(self, it: Iter, lattice: Lattice, appends: bool) -> bool:
        """Whether an iterator must be walked through a sorted scratch array: its level is
        unordered or has gaps, and the loop merges iterators or appends coordinates."""
        level = self.fmt(it.access.tensor).levels[it.level]
        names = self.names(it.access.tensor, it.level)
        if level.ordered and level.pos_found(names, Var("p")) is None:
            return False
        merges = lattice.full_range or len(lattice.iterators) > 1 or len(lattice.points) > 1
        return merges or appends

    def _scratch(self, it: Iter, begin: IRExpr, end: IRExpr, scope: Scope) -> list[IRStmt]:
        """Collect the valid positions of ``it`` in ``[begin, end)``, sorted by coordinate
        unless the level is ordered already (then gaps are only squeezed out)."""
        level = self.fmt(it.access.tensor).levels[it.level]
        names = self.names(it.access.tensor, it.level)
        if not level.unique:
            raise FormatError(f"{it.access.tensor}: level {it.level + 1} ({level}) is non-unique "
                              "and must be reordered here; store it ordered or unique")
        base = f"p{names.tensor}{names.k}"
        key, at, n, q = (self._unique(f"{base}_{x}") for x in ("key", "at", "n", "q"))
        self.views[it] = _SortedScratch(level, names, key, at, n)
        size = Max((Bin("-", end, begin), Const(1)))
        out: list[IRStmt] = []
        for arr in (key, at):
            out.append(Decl("int64_t*", arr, Cast("int64_t*", Call(
                "malloc", (mul(size, Call("sizeof", (Var("int64_t"),))),)))))
            out.append(If(Un("!", Var(arr)), block(Return(Const(1)))))
        out.append(Decl("int64_t", n, Const(0)))
        record = block(
            IRAssign(Load(key, Var(n)),
                     level.pos_access(names, Var(q), self._ancestors(scope, it.access, it.level))),
            IRAssign(Load(at, Var(n)), Var(q)),
            IRAssign(Var(n), Const(1), "+="),
        )
        found = level.pos_found(names, Var(q))
        out.append(For(q, "int64_t", begin, end, block(If(found, record) if found is not None else record)))
        if not level.ordered:
            out.append(If(Call("coiter_sort_pairs", (Var(key), Var(at), Var(n))), block(Return(Const(1)))))
        return out

    def lower_forall(self, f: Forall, scope: Scope) -> list[IRStmt]:
        if f is self.region:
            return self.lower_region(f, scope)
        rel = self.prov.defining(f.var)
        if rel is not None and not (isinstance(rel, Split) and rel.layout):
            return self._with_atomics(f, lambda: self.lower_derived(f, scope))
        return self._with_atomics(f, lambda: self._lower_coordinate_loop(f, scope))

    def _with_atomics(self, f: Forall, lower) -> list[IRStmt]:
        """Lower with ``f`` on the stack of loops whose racing writes become atomic (and
        counted among the thread-parallel loops)."""
        atomic = f.unit != "NotParallel" and f.race == "Atomics"
        threads = int(f.unit == "CPUThread")
        if atomic:
            self.atomic_loops.append(f)
        self.parallel_depth += threads
        try:
            return lower()
        finally:
            self.parallel_depth -= threads
            if atomic:
                self.atomic_loops.pop()

    @staticmethod
    def _accesses_of(s: Stmt) -> list[Access]:
        return _stmt_accesses(s)

    @staticmethod
    def _lhs_of(s: Stmt) -> frozenset:
        return _lhs_accesses(s)

    def _span(self, v: IndexVar) -> tuple[IRExpr, IRExpr]:
        """The coordinates a loop over original variable ``v`` covers: ``[0, extent)``, or
        the window of the split piece being lowered."""
        return self.window.get(v, (Const(0), self.extent[v]))

    def _lower_coordinate_loop(self, f: Forall, scope: Scope) -> list[IRStmt]:
        window = self._solution_window(f, scope)
        if window is None:
            return self._lower_walk(f, scope)
        self.window[f.var] = window
        # the loop walks what the scan passes over: scanning to the window's end costs no
        # more than the loop (a filter's few taps), where a second binary search would
        self.short_windows.add(f.var)
        try:
            return self._lower_walk(f, scope)
        finally:
            del self.window[f.var]
            self.short_windows.discard(f.var)

    def _lower_walk(self, f: Forall, scope: Scope) -> list[IRStmt]:
        collapsed = self._collapsed_loop(f, scope)
        if collapsed is not None:
            return collapsed
        v = f.var
        vname = self.var(v)
        produced = produced_assign(f.body)
        lattice = build_lattice(value_expr(f.body, self.reducers),
                                self.iter_of(scope, v, f.unit == "NotParallel"),
                                self.absence.fill_of, self.absence.neutral(produced),
                                Typing(self.dtypes, self.value_dtype(produced)))
        lattice = locate_where_possible(lattice, self._locatable)
        iters = lattice.iterators
        lo, extent = self._span(v)
        out: list[IRStmt] = []

        # results whose next level is indexed by v
        heads, bottoms = self._result_levels_at(f.body, scope, v)
        begins: dict[int, str] = {}
        for a, g in heads:
            begins[g.head] = self._unique(f"{g.counter}_begin")
            out.append(Decl("int64_t", begins[g.head], Var(g.counter)))

        bounds: dict[Iter, tuple[IRExpr, IRExpr]] = {}
        scratch: list[str] = []
        for it in iters:
            base = f"p{self.cn[it.access.tensor]}{it.level + 1}"
            self.iter_names[it] = (self._unique(base), self._unique(f"{base}_end"))
            names = self.names(it.access.tensor, it.level)
            level = self.fmt(it.access.tensor).levels[it.level]
            parent = scope.pos.get((it.access, it.level - 1), ParentPos(Const(0)))
            begin, end = level.pos_bounds(names, parent, self._ancestors(scope, it.access, it.level))
            begin, end = parent.or_zero(begin), parent.or_zero(end)  # a missed locate: nothing to walk
            # (a subsection iterator's coordinates are offsets: it skips to the window's
            # start itself, and its positions reach past the window's end)
            if v in self.window and it.slice is None:
                begin, end = self._window_bounds(it, begin, end, scope, out)
            bounds[it] = (begin, end)
            out += level.iter_init(names)
            # appending to an unordered result level takes coordinates in any order
            ordered = any(self.fmt(self.result).levels[g.head].ordered for _, g in bottoms)
            if self._needs_order(it, lattice, ordered):
                out += self._scratch(it, *bounds[it], scope)
                view = self.views[it]
                bounds[it] = (Const(0), Var(view.count))
                scratch += [view.key, view.at]

        single = len(lattice.points) == 1
        slices = [it for it in iters if it.slice is not None]
        if single and len(iters) == 1 and not slices and \
                self._fusable(iters[0], f.body, heads, bottoms):
            self.fused.add(iters[0])
        if lattice.points == (frozenset(),):
            end, inner = self._split_bound(v, extent, scope)
            body = self._case(f.body, inner, v, Var(vname), lattice, frozenset(), {}, bottoms)
            rfmt = self.fmt(self.result)
            if lo == Const(0) and end == extent and rfmt.order and rfmt.levels[0].full:
                body = [*self._own_slice_zeroing(f, scope, Var(vname), [v]), *body]
            out.append(self._for(f, vname, lo, end, body, scope))
        elif single and len(iters) == 1 and not slices and self._unique_iter(iters[0]):
            it = iters[0]
            p, _ = self._iter_names(it)
            begin, end = bounds[it]
            reserve = self._reserve(bottoms, [(begin, end)])
            out += reserve
            with self._reserved(bottoms if reserve else []):
                body = self._point_body(f.body, scope, v, lattice, lattice.points[0], bottoms, False)
            if end == add(begin, Const(1)):  # one position (offset, padded singleton): no loop
                out.append(block(Decl("int64_t", p, begin), body))
            else:
                # fused entries may repeat a coordinate: only a unique level's loop is race-free
                distinct = it not in self.fused or f.unit != "NotParallel"
                out.append(self._for(f, p, begin, end, body, scope, distinct))
        else:
            if f.unit != "NotParallel":
                raise ScheduleError(
                    f"parallelize({v}): the loop over {v} co-iterates "
                    f"{', '.join(str(it.access) for it in iters)} in a while loop, which cannot "
                    f"run in parallel; split {v} first and parallelize the outer piece")
            for it in iters:
                p, pend = self._iter_names(it)
                begin, end = bounds[it]
                out += [Decl("int64_t", p, begin), Decl("int64_t", pend, end)]
            for it in slices:
                self.slice_offsets[it] = self._unique(f"{vname}{self.cn[it.access.tensor]}")
                out.append(Decl("int64_t", self.slice_offsets[it], lo))
                out += self._next_window(it, scope, lo)
            if lattice.full_range:
                out.append(Decl("int64_t", vname, lo))
            # each iteration of the merge appends once and moves some iterator on: the
            # iterators' entries bound the appends (a dense range or offsets do not)
            walked = [] if lattice.full_range or slices else [
                (Var(self._iter_names(it)[0]), Var(self._iter_names(it)[1])) for it in iters]
            reserve = self._reserve(bottoms, walked)
            out += reserve
            if reserve:  # the helper writes a row's entries unchecked
                out += self._union_row(f, v, lattice, bottoms)
            with self._reserved(bottoms if reserve else []):
                for point in lattice.points:
                    out.append(self._point_loop(f.body, scope, v, lattice, point, bottoms))

        for arr in scratch:
            out.append(ExprStmt(Call("free", (Var(arr),))))
        for it in iters:  # a later loop over the same access builds its own scratch
            self.views.pop(it, None)
            # and decides fusion again: another lattice point's loop may merge this iterator
            # with others, and merged iterators deduplicate coordinate runs
            self.fused.discard(it)
        for a, g in heads:
            parent = scope.pos.get((a, g.head - 1), ParentPos(Const(0))).lo
            if self.mode != "compute":
                level = self.fmt(a.tensor).levels[g.head]
                out += level.append_edges(self.names(a.tensor, g.head), parent,
                                          Var(begins[g.head]), Var(g.counter))
            elif len(self.groups) == 1:  # the operands filled the pattern's segment exactly
                end = self._pattern_segment(a, g, scope)[1]
                out.append(If(Bin("!=", Var(g.counter), end), block(Return(Const(PATTERN_ERROR)))))
        return out

    def _union_row(self, f: Forall, v: IndexVar, lattice: Lattice, bottoms) -> list[IRStmt]:
        """The row of a sum of two or three sparse operands formed at once before their
        merge (:mod:`.unions`) where the merge qualifies; nothing where it does not."""
        terms = sum_terms(f.body)
        iters = {it.access: it for it in lattice.iterators}
        extent = self.extent.get(v)
        if (self.target != "c" or self.mode != "fused" or v in self.window or v in self.gallop
                or extent is None or terms is None or not 2 <= len(terms) <= MAX_RUNS
                or len(bottoms) != 1 or lattice.full_range
                or len(lattice.points) != 2 ** len(terms) - 1
                or len(lattice.iterators) != len(terms) or iters.keys() != set(terms)
                # an absent entry adds nothing only where it reads as zero
                or any(self.decls[a.tensor].role != "input" or self.absence.fill(a.tensor) != 0
                       for a in terms) or self.absence.fill(self.result) != 0):
            return []
        a, g = bottoms[0]
        k = self.decls[self.result].order - 1
        names = self.names(self.result, k)
        crd = names.array("crd")
        appended = self.fmt(self.result).levels[k].append_coord(names, Var(g.counter), Var(crd))
        if (a != f.body.lhs or g.members != [k] or self.itype[self.result] != "int32_t"
                or self.vtype[self.result] != "double"
                or appended != [IRAssign(Load(crd, Var(g.counter)), Var(crd))]):
            return []
        runs: list[Run] = []
        for term in terms:
            it = iters[term]
            level, t = self._level(it), term.tensor
            p, end = self._iter_names(it)
            at = self.names(t, it.level)
            if (it.slice is not None or it in self.views or it in self.fused
                    or it.level != self.decls[t].order - 1 or not (level.ordered and level.unique)
                    or self.itype[t] not in ("int32_t", "int64_t") or self.vtype[t] != "double"
                    or level.pos_access(at, Var(p)) != Load(at.array("crd"), Var(p))):
                return []
            runs.append(Run(at.array("crd"), self.vals(t), p, end, self.itype[t] == "int64_t"))
        return [union_row(runs, crd, self.vals(self.result), g.counter, extent)]

    def _pattern_segment(self, a: Access, g: _Group, scope: Scope) -> tuple[IRExpr, IRExpr]:
        """Positions ``[begin, end)`` of the pattern's segment that group ``g`` of result ``a``
        fills under the parent position in ``scope`` (compute mode)."""
        parent = scope.pos.get((a, g.head - 1), ParentPos(Const(0)))
        level = self.fmt(a.tensor).levels[g.head]
        return level.pos_bounds(self.names(a.tensor, g.head), parent,
                                self._ancestors(scope, a, g.head))

    def _pattern_checks(self, bottoms, scope: Scope) -> list[IRStmt]:
        """Compute mode: before a value is stored at a group's next position, that position
        must lie in the pattern's segment and hold the coordinates being computed; a pattern
        the operands do not produce is a PATTERN_ERROR, never a write past its arrays. With
        several groups (DCSR, CSF) an upper entry exists only where its children do, which
        this cannot tell in advance: the caller compares those patterns before the call."""
        out: list[IRStmt] = []
        if len(self.groups) != 1:
            return out
        for a, g in bottoms:
            bad: list[IRExpr] = [Bin(">=", Var(g.counter), self._pattern_segment(a, g, scope)[1])]
            for m in g.members:
                level = self.fmt(a.tensor).levels[m]
                coord = scope.coords[self.level_var(a, m)]
                bad.append(Bin("!=", level.pos_access(self.names(a.tensor, m), Var(g.counter)), coord))
            cond = bad[0]
            for b in bad[1:]:
                cond = Bin("||", cond, b)
            out.append(If(cond, block(Return(Const(PATTERN_ERROR)))))
        return out

    def _collapse_chain(self, f: Forall, scope: Scope) -> tuple[Access, int, list[Forall]] | None:
        """Nested loops over consecutive unique levels of one operand ``a``, from ``f`` down,
        where the body vanishes without ``a`` (so only ``a``'s positions count) and whose
        coordinates (all but the innermost's) nothing else reads: no other operand,
        no result level (unless the result is written at ``a``'s positions: a shared
        pattern), no derived variable, no schedule. Returns ``a``, the level ``f`` walks
        and the loops."""
        if f.unit != "NotParallel" or self.explicit_parallel or self.mode != "fused" or self.result_allocated:
            return None  # appended results assemble in the loops over their coordinates
        if self.prov.defining(f.var) is not None or self.prov.using(f.var) is not None:
            return None
        walkers = [x for x in _stmt_accesses(f.body) if f.var in x.indices]
        operands = [x for x in walkers if x.tensor != self.result]
        if len(operands) != 1 or self.decls[operands[0].tensor].role != "input":
            return None
        a = operands[0]
        if restrict(f.body, frozenset({a}), self.absence) is not None:
            return None  # the body does not vanish where a is absent (a union): every coordinate counts
        fmt = self.fmt(a.tensor)
        k = self.resolved_depth(scope, a)
        if fmt.layout is not None or k >= fmt.order or self.level_var(a, k) != f.var:
            return None
        parent = scope.pos.get((a, k - 1), ParentPos(Const(0)))
        if parent.hi is not None or parent.may_fail:
            return None
        # a result over a's pattern takes its position from a's last shared level, which
        # must stay bound; any other result must not be indexed by a collapsed coordinate
        shares = self.shared == a
        limit = min(fmt.order, self.shared_levels if shares else fmt.order) - 1
        if any(x.tensor == self.result and f.var in x.indices and not shares
               for x in [*_lhs_accesses(f.body), *walkers]):
            return None
        chain = [f]
        while k + len(chain) <= limit:
            inner, outer = chain[-1].body, chain[-1].var
            depth = k + len(chain)
            if not isinstance(inner, Forall) or inner.unit != "NotParallel" or \
                    self.prov.defining(inner.var) is not None or self.prov.using(inner.var) is not None or \
                    self.level_var(a, depth) != inner.var:
                break
            readers = [x for x in _stmt_accesses(inner) + list(_lhs_accesses(inner)) if outer in x.indices]
            if any(x != a and not (x.tensor == self.result and shares) for x in readers) or \
                    outer in _coordinates_read(inner) or \
                    any(outer in sol.loops for sol in self.solved):
                break
            chain.append(inner)
        levels = [fmt.levels[k + n] for n in range(len(chain))]
        last = levels[-1]
        if len(chain) < 2 or not all(lv.unique for lv in levels) or not last.has_pos_iter:
            return None
        # the collapsed loop walks a alone: any other operand of its variable must be
        # located (dense), not co-iterated
        innermost = chain[-1].var
        for x in _stmt_accesses(chain[-1]):
            if x != a and innermost in x.indices and self.decls[x.tensor].role == "input" and \
                    not all(lv.full and lv.has_locate for lv in self.fmt(x.tensor).levels):
                return None
        names = [self.names(a.tensor, k + n) for n in range(len(chain))]
        if any(lv.range_bounds(nm, Const(0), Const(1)) is None or lv.iter_init(nm)
               for lv, nm in zip(levels, names)) or last.pos_found(names[-1], Const(0)) is not None:
            return None
        return a, k, chain

    def _collapsed_loop(self, f: Forall, scope: Scope) -> list[IRStmt] | None:
        """One loop over the positions of the innermost level of a :meth:`_collapse_chain`
        (the run of children of the parent's position, level by level): TTV's loop over
        B's fibers instead of one over i and one over j inside it."""
        found = self._collapse_chain(f, scope)
        if found is None:
            return None
        a, k, chain = found
        fmt = self.fmt(a.tensor)
        parent = scope.pos.get((a, k - 1), ParentPos(Const(0)))
        lo, hi = parent.lo, parent.end
        for n in range(len(chain)):
            lo, hi = fmt.levels[k + n].range_bounds(self.names(a.tensor, k + n), lo, hi)
        depth = k + len(chain) - 1
        names = self.names(a.tensor, depth)
        p = self._unique(f"p{names.tensor}{names.k}")
        inner = chain[-1]
        vname = self.var(inner.var)
        coord = fmt.levels[depth].pos_access(names, Var(p))
        # the outer levels' positions and coordinates are not known inside the loop; nothing
        # reads them (_collapse_chain), and names never declared would not compile if it did
        unknown = [((a, k + n), ParentPos(Var(f"coiter_collapsed_p{n}"))) for n in range(len(chain) - 1)]
        body_scope = scope.with_pos([*unknown, ((a, depth), ParentPos(Var(p)))])
        for n, outer in enumerate(chain[:-1]):
            body_scope = body_scope.with_coord(outer.var, Var(f"coiter_collapsed_{n}"))
        body_scope = body_scope.with_coord(inner.var, Var(vname))
        body_scope, located = self.resolve(body_scope, _stmt_accesses(inner.body), _lhs_accesses(inner.body))
        body = [Decl("int64_t", vname, coord), *located,
                *self._guarded(inner.body, body_scope, [], {}, self._may_miss(inner.body, body_scope))]
        if k == 0 and self.shared == a and depth == self.shared_levels - 1:
            body = [*self._own_slice_zeroing(f, scope, Var(p), [c.var for c in chain]), *body]
        return [self._for(f, p, lo, hi, body, scope)]

    def _own_slice_zeroing(self, f: Forall, scope: Scope, pos: IRExpr, owned: list[IndexVar]) -> list[IRStmt]:
        """Statements that zero the result values under position ``pos`` of result level
        ``len(owned) - 1``, for the outermost loop ``f`` whose iteration at ``pos`` binds
        the variables ``owned`` of result levels ``0 .. len(owned) - 1``; empty unless that
        iteration owns those values.

        A large result is then written once, by the thread that computes it, instead of
        being zeroed beforehand in a separate pass over memory on one thread (the pool's
        memset or the system's page zeroing); the caller allocates it unzeroed
        (KernelIR.zeroes_result). It holds when ``f`` is the whole program and its loop
        covers every position of that level (the caller's range), the result is stored
        densely below it with sums or stores (it starts at zero), and every write to the
        result is at ``owned`` in those levels: no iteration writes another's values."""
        rdecl = self.decls[self.result]
        fmt = rdecl.format
        below = len(owned)
        if (self.target != "c" or self.mode != "fused" or f is not self.prog.stmt or scope.coords
                or self.result_allocated or fill_key(rdecl.fill) != fill_key(0)
                or any(self.prov.defining(v) is not None for v in owned)
                or not all(fmt.levels[k].full for k in range(below, rdecl.order))):
            return []
        writes = [a for a in _lhs_accesses(f.body) if a.tensor == self.result]
        if not writes or any(self.level_var(a, k) != v for a in writes for k, v in enumerate(owned)):
            return []
        # the slice's start, and its length (the same for every position: full levels),
        # which a specialized kernel knows: GCC then makes the loop a few vector stores (a
        # memset, or a loop over [pos*16, (pos+1)*16), became a rep stos: TTM 2x slower)
        start, count = pos, Const(1)
        for k in range(below, rdecl.order):
            names = self.names(self.result, k)
            start = fmt.levels[k].range_bounds(names, start, add(start, Const(1)))[0]
            count = fmt.levels[k].range_bounds(names, Const(0), count)[1]  # full: from 0
        self.zeroes_result = True
        note = Comment("the result values this iteration owns start at zero (allocated unzeroed)")
        vals = self.vals(self.result)
        if count == Const(1):
            return [note, IRAssign(Load(vals, start), Const(0))]
        q = self._unique("q")
        return [note, For(q, "int64_t", Const(0), count, block(IRAssign(Load(vals, add(start, Var(q))), Const(0))))]

    def _for(self, f: Forall, var: str, lo: IRExpr, hi: IRExpr, body: list[IRStmt], scope: Scope,
             parallel: bool = True) -> IRStmt:
        """The loop of ``f`` over ``var`` in ``[lo, hi)``: its OpenMP pragma (unless it may
        not run in parallel), unroll factor, and GPU unit for the CUDA back end. A parallel
        loop comes with a serial copy for calls that run on one thread: entering an OpenMP
        region costs more than a small call's whole work."""
        pragma = self._loop_pragma(f, scope, body) if parallel else None
        unit = f.unit if f.unit.startswith("GPU") else ""
        loop = For(var, "int64_t", lo, hi, block(body), pragma, f.unroll, unit)
        if pragma is not None and f.unit == "CPUVector" and self._result_races(f):
            # lanes sum into a scalar; where the loop moves across result entries, it stays
            # a plain loop (a simd array reduction copies the whole result per lane)
            summed = scalar_accumulation(loop, self.vals(self.result), self.vtype[self.result],
                                         self._unique(f"{self.vals(self.result)}_lane_sum"))
            return summed if summed is not None else replace(loop, pragma=None)
        if pragma is None or not pragma.startswith("omp parallel"):
            return loop
        serial = For(var, "int64_t", lo, hi, block(body), None, f.unroll, unit)
        head: list[IRStmt] = []
        if CHUNK in pragma:
            name = self._unique(CHUNK)
            loop = replace(loop, pragma=pragma.replace(CHUNK, name))
            rows = hi if lo == Const(0) else Bin("-", hi, lo)
            chunk = Call("coiter_chunk_rows", (rows, Call("COITER_THREADS", ()), Var(WORK_PARAM)))
            head = [Decl("int64_t", name, chunk)]
        parallel = self._bounded_array_reduction(f, loop)
        return If(THREADS_BRANCH, block(*head, parallel), block(serial))

    def _bounded_array_reduction(self, f: Forall, loop: For) -> IRStmt:
        """``loop``, whose threads each sum into a private copy of the result on their stack
        when it reduces into a result array: so only while the result is small, and with
        atomic updates beyond (a 32 MiB result overflowed a thread's stack), or one thread
        for complex results."""
        clause = self._array_reduction_clause()
        if loop.pragma is None or clause not in loop.pragma:
            return loop
        if self.dtypes[self.result].kind == "c":  # OpenMP has no atomic complex update
            unreduced = replace(loop, pragma=None)
        else:
            atomic = atomic_updates(loop.body, self.vals(self.result))
            if atomic is None:
                return loop
            unreduced = replace(loop, body=atomic, pragma=loop.pragma.replace(f" {clause}", ""))
        size: IRExpr = Call("sizeof", (Var(self.vtype[self.result]),))
        for k in range(self.decls[self.result].order):
            size = mul(size, Var(self.names(self.result, k).dimension.name))
        return If(Bin("<=", size, Const(ARRAY_REDUCTION_BYTES)), block(loop), block(unreduced))

    def _array_reduction_clause(self) -> str:
        """OpenMP's reduction of the whole result array (a private copy per thread)."""
        size = " * ".join(self.names(self.result, k).dimension.name
                          for k in range(self.decls[self.result].order)) or "1"
        return f"reduction(+: {self.vals(self.result)}[:{size}])"

    def _loop_pragma(self, f: Forall, scope: Scope, body: list[IRStmt]) -> str | None:
        """The OpenMP pragma for the loop of ``f``: its schedule's parallel unit and race
        strategy, or the default (parallel outermost loop when race-free)."""
        if f.unit == "NotParallel":
            if self.explicit_parallel or not self._parallel(f, scope):
                return None
            # a derived outer loop (blocks of a split) has few, large iterations
            chunking = DEFAULT_CHUNKING if self.prov.defining(f.var) is None else "dynamic, 1"
            return _unless_returns(f"omp parallel for schedule({chunking}) {NUM_THREADS}", body)
        if f.unit.startswith("GPU"):
            if self.target != "cuda":
                raise ScheduleError(f"parallelize({f.var}, {f.unit}): GPU units need the CUDA back "
                                    "end; the C back end runs CPUThread and CPUVector")
            return None  # mapped to the grid by the CUDA back end (For.unit)
        clauses = []
        if f.race in ("Temporary", "ParallelReduction"):
            for r in races(self.prov, f, self.decls):
                decl = self.decls[r.access.tensor]
                if r.role == "temp" and decl.order == 0:
                    if decl.reducer not in OMP_REDUCTIONS:
                        raise ScheduleError(f"parallelize({f.var}, {f.unit}, {f.race}): the reduction "
                                            f"{decl.reducer} is the user's, which OpenMP cannot "
                                            "combine across threads; parallelize a loop outside it")
                    clauses.append(f"reduction({OMP_REDUCTIONS[decl.reducer]}: {self.cn[r.access.tensor]})")
                elif r.role == "result" and f.unit != "CPUVector":  # see _for
                    clauses.append(self._array_reduction_clause())
        if f.unit == "CPUVector":
            pragma = " ".join(["omp simd", *clauses])
        else:
            chunking = (f.chunking or "dynamic, 1").replace(",", ", ").replace(",  ", ", ")
            pragma = " ".join([f"omp parallel for schedule({chunking})", *clauses, NUM_THREADS])
        if _unless_returns(pragma, body) is None:
            raise ScheduleError(f"parallelize({f.var}): the loop allocates memory that may fail "
                                "(a sparse result or a workspace); it cannot run in parallel")
        return pragma

    def _result_races(self, f: Forall) -> bool:
        """Whether iterations of ``f`` sum into shared result entries (a reduction race)."""
        return f.race in ("Temporary", "ParallelReduction") and any(
            r.role == "result" for r in races(self.prov, f, self.decls))

    def _atomic(self, lhs: Access) -> bool:
        """Whether a write to ``lhs`` races in an enclosing loop parallelized with Atomics."""
        return any(r.access == lhs for f in self.atomic_loops for r in races(self.prov, f, self.decls))

    def _parallel(self, f: Forall, scope: Scope) -> bool:
        """TACO's default schedule: run the outermost loop on threads when that is race-free:
        the result is dense, iterations write disjoint parts of it (by the provenance
        graph), temporaries live inside the loop, and no workspace or appended result is
        shared between iterations."""
        rdecl = self.decls[self.result]
        if scope.coords or self.result_allocated or rdecl.order == 0 or self.mode == "assemble":
            return False
        if any(d.role == "workspace" for d in self.decls.values()):
            return False
        return not races(self.prov, f, self.decls)

    def _unique_iter(self, it: Iter) -> bool:
        return it in self.fused or self._level(it).unique

    def _fusable(self, it: Iter, body: Stmt, heads, bottoms) -> bool:
        """Whether a non-unique level over branchless children (COO) can be walked entry by
        entry instead of deduplicated: the paper's iterator fusion. Each entry then binds
        the whole coordinate chain at once, which is valid when nothing below needs the
        entries of one coordinate together: every write goes to a dense result (adding up,
        or storing when entries are distinct), and no temporary or appended result sits in
        between."""
        fmt = self.fmt(it.access.tensor)
        if fmt.levels[it.level].unique or heads or bottoms:
            return False
        if it.level + 1 >= fmt.order or not fmt.levels[it.level + 1].branchless:
            return False
        # entries are distinct coordinates when every level below is unique; then a plain
        # store is as good as accumulating
        distinct = all(lv.unique for lv in fmt.levels[it.level + 1:])
        for s in walk_stmts(body):
            if isinstance(s, (Where, Sequence, Multi)):
                return False
            if isinstance(s, Assign) and not (
                    (s.accumulate or distinct) and self.decls[s.lhs.tensor].role == "result"
                    and self.decls[s.lhs.tensor].format.is_dense):
                return False
        return True

    def _iter_names(self, it: Iter) -> tuple[str, str]:
        return self.iter_names[it]

    def _result_levels_at(self, body: Stmt, scope: Scope, v: IndexVar):
        """Result append groups whose head (resp. bottom) level is indexed by ``v`` here."""
        heads, bottoms = [], []
        # a result variable solved in order from a walked subscript's variable is appended
        # by the loop over that variable (O(i,j) = B(i+j): j = ij - i grows with ij)
        walked_by = {s.var: s.driver for s in self.solved if s.windowed}
        for a in _lhs_accesses(body):
            if a.tensor != self.result:
                continue
            k = self.resolved_depth(scope, a)
            for g in self.groups:
                if g.head < k:
                    continue
                head, bottom = (self.level_var(a, m) for m in (g.head, g.members[-1]))
                if g.head == k and walked_by.get(head, head) == v:
                    heads.append((a, g))
                if walked_by.get(bottom, bottom) == v:
                    bottoms.append((a, g))
        return heads, bottoms

    def _point_loop(self, body: Stmt, scope: Scope, v: IndexVar, lattice: Lattice, point: Point,
                    bottoms) -> IRStmt:
        vname = self.var(v)
        its = sparse_iters(point)
        full = lattice.full_range
        loop_for = not full and len(its) == 1 and its[0].slice is None and self._unique_iter(its[0])
        stmts = self._point_body(body, scope, v, lattice, point, bottoms, not loop_for)
        if not its:  # only full levels left: finish the range
            return For(vname, "int64_t", None, self._span(v)[1], block(stmts))
        if full:
            stmts.append(IRAssign(Var(vname), Const(1), "+="))
        elif loop_for:
            p, pend = self._iter_names(its[0])
            return For(p, "int64_t", None, Var(pend), block(stmts))
        cond = [lt(Var(self._iter_names(it)[0]), Var(self._iter_names(it)[1])) for it in its]
        cond += [lt(Var(self.slice_offsets[it]), self._span(v)[1]) for it in its if it.slice is not None]
        if full:
            cond.append(lt(Var(vname), self._span(v)[1]))
        return While(conj(cond), block(stmts))

    def _point_body(self, body: Stmt, scope: Scope, v: IndexVar, lattice: Lattice, point: Point,
                    bottoms, advance: bool = True) -> list[IRStmt]:
        """Dereference iterators, resolve the coordinate, run the cases, advance."""
        vname = self.var(v)
        its = sparse_iters(point)
        full = lattice.full_range
        merged = full or len(its) > 1 or any(it.slice is not None for it in its)
        out: list[IRStmt] = []
        coord: dict[Iter, IRExpr] = {}
        nxt: dict[Iter, IRExpr] = {}
        seg: dict[Iter, IRExpr | None] = {}
        found: IRExpr | None = None
        for it in its:
            p, pend = self._iter_names(it)
            if it.slice is not None:  # its offset is its coordinate
                coord[it], seg[it] = Var(self.slice_offsets[it]), None
                continue
            level = self._level(it)
            names = self.names(it.access.tensor, it.level)
            ancestors = self._ancestors(scope, it.access, it.level)
            cname = self._unique(f"{vname}{self.cn[it.access.tensor]}") if merged else vname
            out.append(Decl("int64_t", cname, level.pos_access(names, Var(p), ancestors)))
            if not merged:  # a lone iterator skips gaps (merged ones walk sorted scratch arrays)
                found = level.pos_found(names, Var(p))
            coord[it] = Var(cname)
            if self._unique_iter(it):
                nxt[it], seg[it] = add(Var(p), Const(1)), None
            else:  # deduplicate: children of the whole run of equal coordinates
                send = self._unique(f"{p}_segend")
                out.append(Decl("int64_t", send, add(Var(p), Const(1))))
                out.append(While(
                    conj([lt(Var(send), Var(pend)),
                          eq(level.pos_access(names, Var(send), ancestors), Var(cname))]),
                    block(IRAssign(Var(send), Const(1), "+="))))
                nxt[it], seg[it] = Var(send), Var(send)
        # a merge whose iterators each step by one advances them inside the cases: an
        # increment by a comparison's result makes the next coordinate load wait for this
        # one (a dependency chain of ~10 cycles per entry; SpAdd3 ran 1.1-1.5x slower)
        stepped = merged and not full and advance and all(seg[it] is None and it.slice is None for it in its)
        points = lattice.sub_points(point)
        if stepped and v in self.gallop and len(points) == 1 and len(its) > 1:
            return out + self._gallop(body, scope, v, lattice, point, bottoms, its, coord)
        if merged and not full:
            out.append(Decl("int64_t", vname, Min(tuple(coord[it] for it in its))))
        vexpr = Var(vname)
        cases = {q: block(self._case(body, scope, v, vexpr, lattice, q, {it: (coord[it], seg[it]) for it in q},
                                     bottoms)) for q in points}
        if stepped and len(its) <= CASE_TREE_ITERATORS:
            return out + self._case_tree(its, 0, frozenset(), points, cases, coord, vexpr)
        chain: IRStmt | None = block(self._advance_in_case(its, frozenset(), points, coord, vexpr)) if stepped else None
        for n in reversed(range(len(points))):
            q = points[n]
            case = cases[q]
            conds = [eq(coord[it], vexpr) for it in sparse_iters(q)] if merged else []
            if stepped:
                case = block(*case.stmts, *self._advance_in_case(its, q, points[:n], coord, vexpr))
            if not case.stmts and chain is None:
                continue
            if not conds:
                chain = case
            elif stepped and isinstance(chain, Block) and not chain.stmts and len(q) == 1:
                chain = case  # every other case failed, each iterator's alone too: q holds
            elif chain is None or (isinstance(chain, Block) and not chain.stmts):
                chain = If(conj(conds), case)
            else:
                chain = If(conj(conds), case, chain)
        if chain is not None:
            cases = list(chain.stmts) if isinstance(chain, Block) else [chain]
            out += [If(found, block(cases))] if found is not None else cases

        for it in its if advance and not stepped else ():
            p, _ = self._iter_names(it)
            if it.slice is not None:
                off = Var(self.slice_offsets[it])
                out.append(If(eq(off, vexpr), block(*self._next_window(it, scope, add(off, Const(1))))))
            elif not merged:
                out.append(IRAssign(Var(p), nxt[it]))
            elif seg[it] is None:
                out.append(IRAssign(Var(p), Cast("int64_t", eq(coord[it], vexpr)), "+="))
            else:
                out.append(If(eq(coord[it], vexpr), block(IRAssign(Var(p), nxt[it]))))
        return out

    def _gallop(self, body: Stmt, scope: Scope, v: IndexVar, lattice: Lattice, point: Point,
                bottoms, its: list[Iter], coord: Mapping[Iter, IRExpr]) -> list[IRStmt]:
        """An intersection merged by galloping (``mergeby(v,Gallop)``): the coordinate is
        the greatest of the iterators'; where all sit at it the case runs and each steps by
        one, else each one behind jumps to the first position at or past it, by exponential
        then binary search over its level (Baeza-Yates; TACO's gallop)."""
        vname = self.var(v)
        vexpr = Var(vname)
        out: list[IRStmt] = [Decl("int64_t", vname, Max(tuple(coord[it] for it in its)))]
        case = self._case(body, scope, v, vexpr, lattice, point,
                          {it: (coord[it], None) for it in its}, bottoms)
        case += [IRAssign(Var(self._iter_names(it)[0]), Const(1), "+=") for it in its]
        jumps: list[IRStmt] = []
        for it in its:
            p, pend = (Var(n) for n in self._iter_names(it))
            level, names = self._level(it), self.names(it.access.tensor, it.level)
            anc = self._ancestors(scope, it.access, it.level)
            step, q = self._unique(f"{p.name}_step"), self._unique(f"{p.name}_to")
            reach = add(p, Var(step))
            search = [
                Decl("int64_t", step, Const(1)),
                While(conj([lt(reach, pend), lt(level.pos_access(names, reach, anc), vexpr)]),
                      block(IRAssign(Var(step), mul(Var(step), Const(2))))),
                *self.lower_bound(q, level, names, anc, add(p, Bin("/", Var(step), Const(2))),
                                  Min((add(reach, Const(1)), pend)), vexpr),
                IRAssign(p, Var(q)),
            ]
            jumps.append(If(lt(coord[it], vexpr), block(*search)))
        out.append(If(conj([eq(coord[it], vexpr) for it in its]), block(*case), block(*jumps)))
        return out

    def _case_tree(self, its: list[Iter], k: int, at: frozenset, points: list[Point],
                   cases: Mapping[Point, Block], coord: Mapping[Iter, IRExpr], vexpr: IRExpr) -> list[IRStmt]:
        """The cases of a merge as a decision tree on which iterators sit at the coordinate,
        one test per iterator (``its[k:]`` still to test; ``at`` those found there): each
        leaf knows exactly which iterators to advance and runs the first point (most
        specific) they hold. A chain of case tests takes up to one test per point, each
        a branch the processor may mispredict (SpAdd3 1.15-1.3x slower)."""
        if k == len(its):
            q = next((q for q in points if q <= at), None)
            body = list(cases[q].stmts) if q is not None else []
            return body + [IRAssign(Var(self._iter_names(it)[0]), Const(1), "+=") for it in its if it in at]
        here = self._case_tree(its, k + 1, at | {its[k]}, points, cases, coord, vexpr)
        if not at and k == len(its) - 1:  # the coordinate is the least of them: someone's
            return here
        away = self._case_tree(its, k + 1, at, points, cases, coord, vexpr)
        return [If(eq(coord[its[k]], vexpr), block(here), block(away) if away else None)]

    def _advance_in_case(self, its: list[Iter], q: Point, tested: list[Point],
                         coord: Mapping[Iter, IRExpr], vexpr: IRExpr) -> list[IRStmt]:
        """Advance the iterators of a merge inside the case of point ``q``, taken after the
        cases ``tested`` failed: ``q``'s own iterators sit at the coordinate; another one
        may too, unless the case of ``q`` with it was tested (and failed)."""
        out: list[IRStmt] = []
        for it in its:
            p = Var(self._iter_names(it)[0])
            if it in q:
                out.append(IRAssign(p, Const(1), "+="))
            elif q | {it} not in tested:
                out.append(IRAssign(p, Cast("int64_t", eq(coord[it], vexpr)), "+="))
        return out

    def _case(self, body: Stmt, scope: Scope, v: IndexVar, vexpr: IRExpr, lattice: Lattice,
              q: Point, present: Mapping[Iter, tuple[IRExpr, IRExpr | None]], bottoms) -> list[IRStmt]:
        absent = frozenset(it.access for it in lattice.iterators if it not in q)
        restricted = restrict(body, absent, self.absence)
        if restricted is None:
            return []
        scope = scope.with_coord(v, vexpr)
        scope, recovered, guards = self._recover(scope)
        if guards:
            inner = self._case_body(restricted, scope, bottoms, present)
            return recovered + [If(conj(guards), block(inner))] if inner else []
        return recovered + self._case_body(restricted, scope, bottoms, present)

    def _layout_splits(self) -> list[Split]:
        return [r for r in self.prog.env.relations if isinstance(r, Split) and r.layout]

    def _split_bound(self, v: IndexVar, extent: IRExpr, scope: Scope) -> tuple[IRExpr, Scope]:
        """Loop bound of a dense in-block variable: the block, cut where the last block runs
        past the tensor (``min(b, N - i_b * b)``), which makes recovery need no guard."""
        for rel in self._layout_splits():
            outer, inner = rel.derived()
            parent = rel.parents()[0]
            if inner == v and outer in scope.coords and parent in self.extent:
                rest = Bin("-", self.extent[parent], mul(scope.coords[outer], Const(rel.block)))
                return Min((extent, rest)), replace(scope, bounded=scope.bounded | {parent})
        return extent, scope

    def _recover(self, scope: Scope) -> tuple[Scope, list[IRStmt], list[IRExpr]]:
        """Coordinates of split variables whose block and in-block loops are both bound
        (provenance: ``i = i_b * b + i_e``), with guards that they are inside the tensor
        (the last block may run past it)."""
        stmts: list[IRStmt] = []
        guards: list[IRExpr] = []
        for rel in self._layout_splits():
            parent = rel.parents()[0]
            outer, inner = rel.derived()
            if parent in scope.coords or outer not in scope.coords or inner not in scope.coords:
                continue
            name = self.var(parent)
            stmts.append(Decl("int64_t", name, add(mul(scope.coords[outer], Const(rel.block)),
                                                   scope.coords[inner])))
            scope = scope.with_coord(parent, Var(name))
            if parent in self.extent and parent not in scope.bounded:
                guards.append(lt(Var(name), self.extent[parent]))
        scope, solved, more = self.recover_solved(scope)
        return scope, stmts + solved, guards + more

    def _case_body(self, restricted: Stmt, scope: Scope, bottoms,
                   present: Mapping[Iter, tuple[IRExpr, IRExpr | None]]) -> list[IRStmt]:
        items = []
        for it, (c, s) in present.items():
            if it.slice is not None:  # the level is walked inside, in the window
                continue
            p, _ = self._iter_names(it)
            parent = scope.pos.get((it.access, it.level - 1), ParentPos(Const(0))).lo
            lo = self._level(it).child_position(self.names(it.access.tensor, it.level), Var(p), c, parent)
            items.append(((it.access, it.level), ParentPos(lo, s)))
        out: list[IRStmt] = []
        # a group directly above another appends only if its child group produced entries
        starts: dict[str, tuple[_Group, str]] = {}
        for a, g in bottoms:
            for m in g.members:
                items.append(((a, m), ParentPos(Var(g.counter))))
            if self.mode != "compute":
                out += self._ensure_capacity(g)
            child = self._group_of_next_append(g.members[-1] + 1)
            if child is not None:
                start = self._unique(f"{child.counter}_start")
                starts[g.counter] = (child, start)
                out.append(Decl("int64_t", start, Var(child.counter)))
        # dense result levels between groups are located in resolve
        scope = scope.with_pos(items)
        scope, located = self.resolve(scope, _stmt_accesses(restricted), _lhs_accesses(restricted))
        out += located
        out += self._guarded(restricted, scope, bottoms, starts, self._may_miss(restricted, scope))
        return out

    def _may_miss(self, s: Stmt, scope: Scope) -> list[Access]:
        """Operands of ``s`` located (at their last level) by a locate that can miss."""
        out = []
        for a in _stmt_accesses(s):
            decl = self.decls[a.tensor]
            where = scope.pos.get((a, decl.order - 1)) if decl.order else None
            if decl.role == "input" and where is not None and where.may_fail:
                out.append(a)
        return out

    def _guarded(self, s: Stmt, scope: Scope, bottoms, starts, missing: list[Access]) -> list[IRStmt]:
        """``s`` and the appends of this case, branching on operands whose locate may have
        missed: present, the statement as is; absent, the statement without them (nothing
        at all, so no explicit zero is stored, when they are factors)."""
        if not missing:
            out = self._pattern_checks(bottoms, scope) if self.mode == "compute" else []
            out += self.lower(s, scope)
            for a, g in bottoms:
                append = self._append(a, g, scope)
                if g.counter in starts:
                    child, start = starts[g.counter]
                    out.append(If(Bin(">", Var(child.counter), Var(start)), block(append)))
                else:
                    out += append
            return out
        a, rest = missing[0], missing[1:]
        found = Bin(">=", scope.pos[(a, self.decls[a.tensor].order - 1)].lo, Const(0))
        then = self._guarded(s, scope, bottoms, starts, rest)
        absent = restrict(s, frozenset({a}), self.absence)
        other: list[IRStmt] = []
        if absent is not None:
            other = self._guarded(absent, scope, bottoms, starts,
                                  [m for m in rest if m in _stmt_accesses(absent)])
        return [If(found, block(then), block(other) if other else None)]

    def _group_of_next_append(self, k: int) -> _Group | None:
        return next((g for g in self.groups if g.head == k), None)

    def _append(self, a: Access, g: _Group, scope: Scope) -> list[IRStmt]:
        out: list[IRStmt] = []
        if self.mode != "compute":
            for m in g.members:
                level = self.fmt(a.tensor).levels[m]
                out += level.append_coord(self.names(a.tensor, m), Var(g.counter),
                                          scope.coords[self.level_var(a, m)])
        out.append(IRAssign(Var(g.counter), Const(1), "+="))
        return out

    # -- memory --------------------------------------------------------------------------
    def _dense_mult(self, start: int, stop: int) -> IRExpr:
        """Product of the result's dense level dimensions in ``[start, stop)``."""
        m: IRExpr = Const(1)
        for k in range(start, stop):
            m = mul(m, self.names(self.result, k).dimension)
        return m

    def _dependents(self, g: _Group) -> tuple[IRExpr, list[tuple[str, str, IRExpr, IRExpr]]]:
        """Arrays sized by group ``g``'s capacity: (name, ctype, old length, new length)."""
        cap_old = Var(g.cap)
        new_cap = Var(f"{g.cap}_new")
        arrays = []
        itype = self.itype[self.result]
        for m in g.members:
            level = self.fmt(self.result).levels[m]
            for arr in level.position_arrays:  # coordinates, assigned as they are appended
                name = self.names(self.result, m).array(arr)
                arrays.append((name, itype, cap_old, new_cap))
                self.append_written.add(name)
        nxt = next((h for h in self.groups if h.head > g.head), None)
        stop = nxt.head if nxt else self.decls[self.result].order
        mult = self._dense_mult(g.members[-1] + 1, stop)
        if nxt is not None:
            level = self.fmt(self.result).levels[nxt.head]
            for arr in level.parent_arrays:
                arrays.append((self.names(self.result, nxt.head).array(arr), itype,
                               add(mul(cap_old, mult), Const(1)), add(mul(new_cap, mult), Const(1))))
        elif self.mode != "assemble" and self.mode != "compute":
            arrays.append((self.vals(self.result), self.vtype[self.result], mul(cap_old, mult),
                           mul(new_cap, mult)))
            if mult == Const(1):  # one value per appended position, assigned with it
                self.append_written.add(self.vals(self.result))
        return new_cap, arrays

    def _reserve(self, bottoms, walked: list[tuple[IRExpr, IRExpr]]) -> list[IRStmt]:
        """Room for one append per entry of the ``walked`` position ranges in each group of
        ``bottoms``, made before the loop over them (none without ranges, or when values
        go into an assembled structure): one check per loop instead of one per entry."""
        if not walked or self.mode == "compute":
            return []
        entries: IRExpr | None = None
        for begin, end in walked:
            n = Bin("-", end, begin)
            entries = n if entries is None else add(entries, n)
        return [s for _, g in bottoms for s in self._ensure_capacity(g, add(Var(g.counter), entries))]

    @contextmanager
    def _reserved(self, bottoms):
        """Appends to ``bottoms``' groups skip their capacity check (reserved before)."""
        added = {g.counter for _, g in bottoms} - self.reserved
        self.reserved |= added
        try:
            yield
        finally:
            self.reserved -= added

    def _ensure_capacity(self, g: _Group, need: IRExpr | None = None) -> list[IRStmt]:
        """Grow group ``g``'s arrays when full (doubling), or, given ``need``, when they
        cannot hold ``need`` entries (to at least that)."""
        if need is None and g.counter in self.reserved:
            return []
        new_cap, arrays = self._dependents(g)
        doubled = mul(Var(g.cap), Const(2))
        grow: list[IRStmt] = [
            Decl("int64_t", new_cap.name, doubled if need is None else Max((doubled, need))),
            If(Bin(">", new_cap, Var("COITER_INDEX_MAX")), block(Return(Const(2)))),
        ]
        for name, ctype, old, new in arrays:
            grow.append(IRAssign(Var(name), Cast(f"{ctype}*", Call(
                "coiter_grow", (Var(name), old, new, Call("sizeof", (Var(ctype),)))))))
            grow.append(If(Un("!", Var(name)), block(Return(Const(1)))))
        grow.append(IRAssign(Var(g.cap), new_cap))
        full = Bin(">=", Var(g.counter), Var(g.cap)) if need is None else Bin(">", need, Var(g.cap))
        return [If(full, block(grow))]

    def _workspace_reset(self, name: str) -> list[IRStmt]:
        if self.decls[name].policy is not None:
            return self.ism_reset(name)
        names = LevelNames(self.cn[name], 1)
        q = self._unique(f"q{self.cn[name]}")
        crd = Load(names.array("list"), Var(q))
        return [
            For(q, "int64_t", Const(0), Var(names.array("count")), block(
                IRAssign(Load(self.vals(name), crd), Const(0)),
                IRAssign(Load(names.array("set"), crd), Const(0)),
            )),
            IRAssign(Var(names.array("count")), Const(0)),
        ]

    # -- function ------------------------------------------------------------------------
    def build(self) -> KernelIR:
        params: list[ParamSpec] = []
        cparams: list[Param] = []
        prologue: list[IRStmt] = []
        ordered = sorted(self.decls.items(), key=lambda kv: kv[1].role == "result")
        for name, decl in ordered:
            if decl.role not in ("input", "result"):
                continue
            is_result = decl.role == "result"
            cn = self.cn[name]
            for k, level in enumerate(decl.format.levels):
                dim = self.names(name, k).dimension.name
                self.used.add(dim)
                params.append(ParamSpec("dim", name, k))
                cparams.append(Param("int64_t", dim))
            for k, level in enumerate(decl.format.levels):
                if is_result and ((self.result_allocated and self.mode != "compute") or self.shared):
                    continue
                for arr in level.arrays:
                    params.append(ParamSpec("array", name, k, arr))
                    cparams.append(Param(self.itype[name], self.names(name, k).array(arr), 1,
                                         const=True))
            if is_result and self.result_allocated and self.mode != "compute":
                params += [ParamSpec("out", name), ParamSpec("out_len", name),
                           ParamSpec("cap_hint", name)]
                cparams += [Param("void", f"{cn}_out", 2), Param("int64_t", f"{cn}_out_len", 1),
                            Param("int64_t", f"{cn}_cap_hint")]
            elif is_result and self.shared is not None:
                params.append(ParamSpec("shared_vals", name, self.shared_levels, self.shared.tensor))
                cparams.append(Param(self.vtype[name], self.vals(name), 1))
            else:
                params.append(ParamSpec("vals", name))
                cparams.append(Param(self.vtype[name], self.vals(name), 1, const=not is_result))
            self.used.add(self.vals(name))
        # index variable extents: the dimension of the first level any access gives it
        for s in walk_stmts(self.prog.stmt):
            if isinstance(s, Assign):
                for a in [s.lhs] + _stmt_accesses(s):
                    decl = self.decls[a.tensor]
                    if decl.role in ("input", "result"):
                        for k in range(decl.order):
                            level = decl.format.levels[k]
                            v, dim = self.level_var(a, k), level.dimension(self.names(a.tensor, k))
                            # a level that fixes the extent gives loops a constant bound
                            if v not in self.extent or (isinstance(dim, Const) and
                                                        not isinstance(self.extent[v], Const)):
                                self.extent[v] = dim
        # variables only compound subscripts use (a pooling window's) take their extent
        # as a parameter
        for v in dict.fromkeys(w for sol in self.solved for w in (sol.var, *sol.loops)):
            if v not in self.extent:
                name = self._unique(f"{self.var(v)}_extent")
                params.append(ParamSpec("extent", "", array=v.name))
                cparams.append(Param("int64_t", name))
                self.extent[v] = Var(name)
        # rows assembled in parallel: each thread allocates its own workspaces and buffers
        self.region = self.region_loop()
        for name, decl in self.decls.items():
            if decl.role == "workspace" and self.region is None:
                prologue += self._workspace_alloc(name, decl)
        if self.result_allocated and self.mode != "compute":
            prologue += self._result_alloc(buffers=self.region is None)
        for g in self.groups:
            prologue.append(Decl("int64_t", g.counter, Const(0)))
        prologue += self._bound_checks()
        params += [ParamSpec("threads", ""), ParamSpec("work", "")]
        cparams += [Param("int64_t", THREADS_PARAM), Param("int64_t", WORK_PARAM)]
        self.used.update({THREADS_PARAM, WORK_PARAM})
        body = self.lower(self.prog.stmt, Scope())
        if self.target == "c":
            body = prefetch_located_segments(block(body), self._input_array_lengths("crd"))
            inputs = {p.name: p.ctype for p in cparams if p.pointers == 1 and p.const}
            results = {p.name: p.ctype for p in cparams if p.pointers == 1 and not p.const}
            body = split_long_sums(body, self._input_array_lengths("pos"), short_run_sums(inputs),
                                   TinyRunRows(inputs, results, self._dense_bytes()),
                                   vector_run_sums(inputs))
            body = block_dense_rows(body, results, frozenset(p.name for p in cparams))
            body = prefetch_far_gathers(body, self._input_array_lengths("crd"), self._dense_bytes())
            body = vector_scatter_adds(body, self._unique_segments(), self._row_workspaces(), inputs)
        prologue += self.temp_allocs
        epilogue: list[IRStmt] = list(self.temp_frees)
        out_arrays: list[tuple[int, str]] = []
        if self.result_allocated and self.mode != "compute":
            epilogue, out_arrays = self._result_finish()
        if self.region is None:
            epilogue += self._workspace_frees()
        if self.target == "c":  # one thread count for the whole call, and its end (see the C prelude)
            prologue.insert(0, IRAssign(Var(THREADS_PARAM), Call("coiter_call_threads", (Var(THREADS_PARAM), Var(WORK_PARAM)))))
            epilogue.append(ExprStmt(Call("coiter_call_done", ())))
        fn = Function(self.name, tuple(cparams),
                      drop_unread_zero_fill(block(prologue, body, epilogue, Return(Const(0))),
                                            self.append_written))
        return KernelIR(fn, tuple(params), self.mode, self.result, self.result_allocated,
                        tuple(out_arrays), tuple(self.support), self.zeroes_result)

    def _input_array_lengths(self, kind: str) -> dict[str, IRExpr]:
        """The element count of every input's arrays of ``kind`` (``"crd"``, ``"pos"``), in
        generated code."""
        out: dict[str, IRExpr] = {}
        for name, decl in self.decls.items():
            if decl.role == "input":
                for k, arrays, _ in self._level_lengths(name):
                    if kind in arrays:
                        out[self.names(name, k).array(kind)] = arrays[kind]
        return out

    def _unique_segments(self) -> dict[str, str]:
        """The ``crd`` array of every input level that is ordered and unique (validated to
        hold distinct coordinates in each segment) and bounds its segments by a ``pos``
        array, mapped to that ``pos`` array (in generated code)."""
        out: dict[str, str] = {}
        for name, decl in self.decls.items():
            if decl.role == "input":
                for k, level in enumerate(decl.format.levels):
                    if level.ordered and level.unique and {"pos", "crd"} <= set(level.arrays):
                        names = self.names(name, k)
                        out[names.array("crd")] = names.array("pos")
        return out

    def _row_workspaces(self) -> dict[str, Var]:
        """The flag array (``set``) of every dense row workspace, mapped to its dimension
        variable (in generated code)."""
        return {names.array("set"): names.dimension
                for name, decl in self.decls.items() if decl.role == "workspace" and decl.policy is None
                for names in (LevelNames(self.cn[name], 1),)}

    def _dense_bytes(self) -> dict[str, IRExpr]:
        """The size in bytes, in generated code, of the values of every input and result
        stored densely (every level dense: the arrays a coordinate indexes directly)."""
        out: dict[str, IRExpr] = {}
        for name, decl in self.decls.items():
            if decl.role not in ("input", "result"):
                continue
            levels = list(self._level_lengths(name))
            if len(levels) == len(decl.format.levels) and not any(a for _, a, _ in levels):
                size = levels[-1][2] if levels else Const(1)
                out[self.vals(name)] = Bin("*", size, Const(self.dtypes[name].itemsize))
        return out

    def _level_lengths(self, name: str) -> Iterator[tuple[int, dict[str, IRExpr], IRExpr]]:
        """Each of ``name``'s levels, outermost first, while generated code knows their
        lengths: the level, its arrays' element counts and its number of positions."""
        size: IRExpr = Const(1)
        for k, level in enumerate(self.decls[name].format.levels):
            lengths = level.array_lengths(self.names(name, k), size)
            if lengths is None:
                return
            arrays, size = lengths
            yield k, arrays, size

    def _bound_checks(self) -> list[IRStmt]:
        """Return BOUND_ERROR unless the extents meet the schedule's bound() promises."""
        out: list[IRStmt] = []
        ops = {"MaxExact": "==", "MinExact": "==", "MaxConstraint": "<=", "MinConstraint": ">="}
        for rel in self.prog.env.relations:
            if isinstance(rel, Bound):
                holds = Bin(ops[rel.kind], self.extent_of(rel.var), Const(rel.value))
                out.append(If(Un("!", holds), block(Return(Const(BOUND_ERROR)))))
        return out

    def _workspace_frees(self) -> list[IRStmt]:
        out: list[IRStmt] = []
        for name, decl in self.decls.items():
            if decl.role == "workspace" and decl.policy is not None:
                out += self.ism_free(name)
            elif decl.role == "workspace":
                names = LevelNames(self.cn[name], 1)
                for arr in (self.vals(name), names.array("set"), names.array("list")):
                    out.append(ExprStmt(Call("free", (Var(arr),))))
        return out

    def _workspace_alloc(self, name: str, decl: TensorDecl) -> list[IRStmt]:
        if decl.policy is not None:
            return self.ism_alloc(name, decl)
        names = LevelNames(self.cn[name], 1)
        n = self.extent[decl.modes[0]]
        out: list[IRStmt] = []
        for arr, ctype, size in ((self.vals(name), self.vtype[name], add(n, Const(1))),
                                 (names.array("set"), "uint8_t", Call("coiter_row_set_bytes", (n,))),
                                 (names.array("list"), "int64_t", add(n, Const(1)))):
            self.used.add(arr)
            out.append(Decl(f"{ctype}*", arr, Cast(f"{ctype}*", Call(
                "calloc", (size, Call("sizeof", (Var(ctype),)))))))
            out.append(If(Un("!", Var(arr)), block(Return(Const(1)))))
        out.append(Decl("int64_t", names.array("count"), Const(0)))
        out.append(Decl("int64_t", names.dimension.name, n))
        return out

    def _result_alloc(self, buffers: bool = True) -> list[IRStmt]:
        """Allocate every result array; appendable groups start at the capacity hint.
        Without ``buffers`` only the ``pos`` of a CSR-like result's rows is allocated (the
        threads of the parallel region write its disjoint rows): the other arrays come
        from the region's merge."""
        out: list[IRStmt] = [Comment("allocate the result")]
        fmt = self.fmt(self.result)
        itype = self.itype[self.result]
        size: IRExpr = Const(1)
        k = 0
        while k < fmt.order:
            g = self._group_of(k)
            if g is None:
                size = mul(size, self.names(self.result, k).dimension)
                k += 1
                continue
            out.append(Decl("int64_t", g.cap, Call("COITER_MAX", (Var(f"{self.cn[self.result]}_cap_hint"), Const(16)))))
            for m in g.members:
                level = fmt.levels[m]
                for arr, n in [(a, add(size, Const(1))) for a in level.parent_arrays] + \
                              [(a, Var(g.cap)) for a in level.position_arrays]:
                    name = self.names(self.result, m).array(arr)
                    self.used.add(name)
                    shared_rows = arr in level.parent_arrays and g is self.groups[0] and g.head > 0
                    if not buffers and not shared_rows:
                        out.append(Decl(f"{itype}*", name, Const(0)))
                        continue
                    out.append(Decl(f"{itype}*", name, Cast(f"{itype}*", Call(
                        "calloc", (n, Call("sizeof", (Var(itype),)))))))
                    out.append(If(Un("!", Var(name)), block(Return(Const(1)))))
            size = Var(g.cap)
            k = g.members[-1] + 1
        if self.mode != "assemble" and not buffers:
            out.append(Decl(f"{self.vtype[self.result]}*", self.vals(self.result), Const(0)))
        elif self.mode != "assemble":
            vt = self.vtype[self.result]
            out.append(Decl(f"{vt}*", self.vals(self.result), Cast(f"{vt}*", Call(
                "calloc", (Call("COITER_MAX", (size, Const(1))), Call("sizeof", (Var(vt),)))))))
            out.append(If(Un("!", Var(self.vals(self.result))), block(Return(Const(1)))))
        return out

    def _trim(self, g: _Group, names: list[str], ctypes: list[str]) -> list[IRStmt]:
        """Give back the capacity of appended arrays past their entries: the first
        capacity is generous (see ``capacity_hint``). A failed shrink keeps the array."""
        out: list[IRStmt] = []
        for name, ctype in zip(names, ctypes):
            tmp = self._unique(f"{name}_trim")
            size = mul(Call("COITER_MAX", (Var(g.counter), Const(1))), Call("sizeof", (Var(ctype),)))
            out += [Decl(f"{ctype}*", tmp, Cast(f"{ctype}*", Call("realloc", (Var(name), size)))),
                    If(Var(tmp), block(IRAssign(Var(name), Var(tmp))))]
        return [If(Bin(">", Var(g.cap), Var(g.counter)), block(out))] if out else []

    def _result_finish(self) -> tuple[list[IRStmt], list[tuple[int, str]]]:
        """Finalize appended levels and hand every array back through ``out``/``out_len``."""
        fmt = self.fmt(self.result)
        cn = self.cn[self.result]
        out: list[IRStmt] = [Comment("finalize and return the result")]
        slots: list[tuple[int, str]] = []
        lengths: list[IRExpr] = []
        size: IRExpr = Const(1)
        for k, level in enumerate(fmt.levels):
            names = self.names(self.result, k)
            g = self._group_of(k)
            parent_size = size
            if g is None:
                size = mul(size, names.dimension)
            else:
                size = Var(g.counter)
            if g is not None and k == g.head:
                out += level.append_finalize(names, parent_size)
            if g is not None and self.region is None:
                last = k == fmt.order - 1 and self.mode != "assemble"
                out += self._trim(g, [names.array(a) for a in level.position_arrays],
                                  [self.itype[self.result]] * len(level.position_arrays))
                if last:
                    out += self._trim(g, [self.vals(self.result)], [self.vtype[self.result]])
            for arr in level.arrays:
                slots.append((k, arr))
                lengths.append(add(parent_size, Const(1)) if arr in level.parent_arrays else size)
        if self.mode != "assemble":
            slots.append((-1, "vals"))
            lengths.append(size)
        for n, ((k, arr), length) in enumerate(zip(slots, lengths)):
            name = self.vals(self.result) if k < 0 else self.names(self.result, k).array(arr)
            out.append(IRAssign(Load(f"{cn}_out", Const(n)), Cast("void*", Var(name))))
            out.append(IRAssign(Load(f"{cn}_out_len", Const(n)), length))
        return out, slots


def lower(prog: ConcreteProgram, index_types: Mapping[str, np.dtype], mode: str = "fused",
          name: str = "kernel", target: str = "c") -> KernelIR:
    """Lower a concrete program to one IR function for the given index types and mode;
    ``target`` "cuda" keeps GPU-tagged loops (``For.unit``) for the CUDA back end."""
    return Lowerer(prog, index_types, mode, name, target).build()
