"""CUDA back end: prints a lowered kernel as one CUDA C++ translation unit.

The loop a schedule parallelized over ``GPUBlock`` (it must be the function's outermost
GPU loop, at its top level) becomes a ``__global__`` kernel launched with one thread
block per iteration (a lone ``GPUThread`` loop, with no ``GPUBlock`` loop, is spread over
blocks of 256 of its iterations, or of 32 when they add into one location: TACO's
``split(i,i0,i1,32),parallelize(i0,GPUThread,...)``); ``GPUWarp`` and ``GPUThread`` loops
inside it become the warp index (``threadIdx.x / 32``) and the lane (``threadIdx.x % 32``;
``threadIdx.x`` without warp loops), guarded by the loop's bound; a GPUThread loop without a
constant bound strides over the lanes instead. Every hardware thread runs the statements
between GPU loops, so stores there are made by the first thread of the unbound units only.
Atomic updates become ``atomicAdd``; a ``+=`` inside a ``GPUThread`` loop to a location
that does not depend on the thread (the Temporary / ParallelReduction strategies)
accumulates per lane and is combined with warp shuffles.

Statements before the kernel loop (bound checks, initialisation) and after it run on
the host; the ``extern "C"`` host function has the C kernel's signature: it copies every
array to the device, launches, copies the result's values back and frees.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace

from ..errors import ScheduleError
from ..formats.format import Format
from ..formats.levels import LevelNames
from ..ir.nodes import (
    Assign, Bin, Block, Break, Call, Const, Decl, ExprStmt, For, Function, If, IRExpr, IRStmt, Load,
    Max, Min, Param, Pragma, Return, Select, Un, Var, While, add, block, conj, eq, lt,
)
from ..ir.visit import assigned, children, declared, exprs, names, subexprs, used, walk
from ..lower.lower import KernelIR
from ..notation.functions import FUNCTIONS
from .c import function, packed_entry

WARP = 32
MAX_BLOCK = 1024  # threads per block
GRID_BLOCK = 256  # threads per block of a GPUThread loop that no GPUBlock loop encloses (no sums)
CUDA_ERROR = 4  # host function's return code when a CUDA runtime call fails
ACCUMULATE = frozenset({"double", "float", "int32_t", "int64_t"})  # atomicAdd and shuffles
DEVICE_CALLS = frozenset({"COITER_MIN", "COITER_MAX", "coiter_sum", "coiter_hash_locate"})
# C99's real math functions (sqrt, expf...), which CUDA's device code has too; not its
# complex ones (csqrt...), which CUDA C++ has none of
MATH_CALLS = frozenset(f.c_name + suffix for f in FUNCTIONS.values() if f.c_name for suffix in ("", "f"))
GRID = "coiter_grid"
_HELPER = re.compile(r"^static inline [^(]*?(\w+)\(", re.MULTILINE)
VALUES = ("vals", "shared_vals")  # kinds of ParamSpec holding a tensor's values

PREAMBLE = """\
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cuda_runtime.h>
#define restrict __restrict__
#define COITER_MIN(a, b) ((a) < (b) ? (a) : (b))
#define COITER_MAX(a, b) ((a) > (b) ? (a) : (b))
#define COITER_INDEX_MAX {index_max}
#define COITER_SCALAR_SUM /* see c.py; nvcc decides for itself */
/* host allocations as the C back end prints them (see c.py) */
static inline void* coiter_malloc(size_t n) {{ return malloc(n); }}
static inline void* coiter_calloc(size_t n, size_t e) {{ return calloc(n, e); }}
static inline void* coiter_realloc(void* p, size_t n) {{ return realloc(p, n); }}
static inline void* coiter_expand(void* p, size_t n) {{ return realloc(p, n ? n : 1); }}  /* see c.py */
static inline void coiter_free(void* p) {{ free(p); }}

/* sum of vals[lo..hi): the value of a coordinate stored several times (a non-unique level) */
template <typename T>
__host__ __device__ inline T coiter_sum(const T* v, int64_t lo, int64_t hi) {{
  T s = 0;
  for (int64_t q = lo; q < hi; q++) s += v[q];
  return s;
}}
__host__ __device__ inline bool coiter_sum(const bool* v, int64_t lo, int64_t hi) {{
  for (int64_t q = lo; q < hi; q++) if (v[q]) return 1;
  return 0;
}}

/* hashed level: bucket of coordinate c under parent position `parent` (-1 when absent) */
template <typename T>
__host__ __device__ inline int64_t coiter_hash_locate(const T* crd, int64_t W, int64_t parent, int64_t c) {{
  if (parent < 0 || W <= 0) return -1;
  int64_t mask = (W & (W - 1)) ? -1 : W - 1;
  int64_t base = parent * W, b = mask >= 0 ? (c & mask) : c % W;
  for (int64_t n = 0; n < W; n++) {{
    T v = crd[base + b];
    if (v == c) return base + b;
    if (v < 0) return -1;
    if (++b == W) b = 0;
  }}
  return -1;
}}

/* sum over the 32 lanes of a warp; every lane gets the total */
template <typename T>
__device__ inline T coiter_warp_sum(T v) {{
  for (int d = {warp} / 2; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}}

__device__ inline void coiter_atomic_add(double* p, double v) {{ atomicAdd(p, v); }}
__device__ inline void coiter_atomic_add(float* p, float v) {{ atomicAdd(p, v); }}
__device__ inline void coiter_atomic_add(int32_t* p, int32_t v) {{ atomicAdd((int*)p, (int)v); }}
__device__ inline void coiter_atomic_add(int64_t* p, int64_t v) {{
  /* two's complement: an unsigned add is the signed add */
  atomicAdd((unsigned long long*)p, (unsigned long long)v);
}}

/* host side: leave the enclosing loop when a CUDA runtime call fails (error in coiter_err) */
#define COITER_CUDA(call) if ((coiter_err = (call)) != cudaSuccess) break

template <typename T>
static cudaError_t coiter_to_device(T** device, const T* host, int64_t n) {{
  cudaError_t e = cudaMalloc((void**)device, n > 0 ? (size_t)n * sizeof(T) : 1);
  if (e != cudaSuccess || n <= 0) return e;
  return cudaMemcpy(*device, host, (size_t)n * sizeof(T), cudaMemcpyHostToDevice);
}}

template <typename T>
static cudaError_t coiter_to_host(T* host, const T* device, int64_t n) {{
  return n > 0 ? cudaMemcpy(host, device, (size_t)n * sizeof(T), cudaMemcpyDeviceToHost) : cudaSuccess;
}}

static int coiter_cuda_failed(cudaError_t e) {{
  fprintf(stderr, "coiter: CUDA error: %s\\n", cudaGetErrorString(e));
  return {error};
}}
"""


def module(ir: KernelIR, formats: Mapping[str, Format], index_max: str) -> str:
    """The CUDA translation unit for ``ir``: the kernel and the host function named like
    ``ir.function``. ``formats`` gives every tensor's format (array lengths on the host).

    Raises :class:`ScheduleError` for what the back end cannot map (see the module doc)."""
    if ir.result_allocated:
        raise ScheduleError(f"the CUDA back end cannot assemble the sparse result {ir.result}; "
                            "give it a dense format or run this schedule on the CPU")
    fn = ir.function
    for p in fn.params:
        if "_Complex" in p.ctype:
            raise ScheduleError(f"{p.name}: the CUDA back end has no complex values")
    pre, loop, post = _split(fn)
    kernel = _Kernel(fn, loop, pre, _defined(ir.support))
    device = kernel.function()
    host = Function(fn.name, fn.params, block(
        [_host(s) for s in pre],
        _launch(ir, formats, loop, kernel, device),
        [_host(s) for s in post],
    ), returns='extern "C" int')
    preamble = PREAMBLE.format(index_max=index_max, warp=WARP, error=CUDA_ERROR)
    # the C helpers intrinsics call (coiter_max_double...), for the device as for the host
    support = "".join(text.replace("static inline", "__host__ __device__ static inline")
                      for text in ir.support)
    packed = packed_entry(host, returns='extern "C" int')
    return f"{preamble}\n{support}\n{function(device)}\n\n{function(host)}\n\n{packed}\n"


def _defined(support: tuple[str, ...]) -> frozenset[str]:
    """The functions the C helpers in ``support`` define (intrinsics' coiter_max_double...),
    which the module defines for the device too."""
    return frozenset(m.group(1) for text in support for m in _HELPER.finditer(text))


def _split(fn: Function) -> tuple[list[IRStmt], For, list[IRStmt]]:
    """The statements before the GPUBlock loop, the loop, and the statements after it."""
    stmts = list(fn.body.stmts)
    tops = [n for n, s in enumerate(stmts) if isinstance(s, For) and s.unit == "GPUBlock"]
    nested = [s for s in walk(fn.body) if isinstance(s, For) and s.unit]
    threads = [n for n, s in enumerate(stmts) if isinstance(s, For) and s.unit == "GPUThread"]
    if not tops and len(threads) == 1 and len(nested) == 1:
        # a lone GPUThread loop (no GPUBlock): its iterations spread over a grid of blocks
        stmts[threads[0]] = _thread_grid(stmts[threads[0]])  # type: ignore[arg-type]
        tops = threads
        nested = [s for s in walk(block(stmts)) if isinstance(s, For) and s.unit]
    if len(tops) != 1 or any(s.unit == "GPUBlock" and s is not stmts[tops[0]] for s in nested):
        raise ScheduleError("the CUDA back end needs exactly one loop parallelized over GPUBlock, "
                            "outermost (parallelize(v, GPUBlock, ...) on the outer loop)")
    top = stmts[tops[0]]
    if any(s.unit and not _inside(s, top) for s in nested):
        raise ScheduleError("GPUWarp and GPUThread loops must be inside the GPUBlock loop")
    if top.start is None:
        raise ScheduleError(f"the GPUBlock loop over {top.var} continues a variable; it must start it")
    return stmts[: tops[0]], top, stmts[tops[0] + 1:]


def _thread_grid(f: For) -> For:
    """``f`` (a GPUThread loop outside any GPUBlock loop) as a GPUBlock loop over blocks of
    ``GRID_BLOCK`` iterations, each a GPUThread loop over its lanes: iteration
    ``start + block * GRID_BLOCK + lane``, guarded by ``f``'s bound."""
    if f.start is None:
        raise ScheduleError(f"the GPUThread loop over {f.var} continues a variable; it must start it")
    # lanes that add into one location combine by warp shuffles: blocks of one warp then
    size = WARP if _shared_sums(f) else GRID_BLOCK
    blk, lane = f"{f.var}_block", f"{f.var}_lane"
    value = add(f.start, add(Bin("*", Var(blk), Const(size)), Var(lane)))
    lanes = For(lane, "int64_t", Const(0), Const(size), block(
        Decl("int64_t", f.var, value), If(lt(Var(f.var), f.end), f.body)), unit="GPUThread")
    span = f.end if f.start == Const(0) else Bin("-", f.end, f.start)
    count = Bin("/", add(span, Const(size - 1)), Const(size))
    return For(blk, "int64_t", Const(0), count, block(lanes), unit="GPUBlock")


def _shared_sums(f: For) -> bool:
    """Whether ``f`` adds into a location that is the same for all its iterations."""
    for s in walk(f.body):
        a = s.stmt if isinstance(s, Pragma) else s
        if isinstance(a, Assign) and a.op == "+=" and not _per_iteration(a.target, f):
            return True
    return False


def _per_iteration(target: IRExpr, f: For) -> bool:
    """Whether ``target`` (a variable or an array element) differs between iterations of
    ``f``: declared in its body, or indexed by what its body declares or assigns."""
    local = declared(f.body) | {f.var}
    if isinstance(target, Var):
        return target.name in local
    return bool(names(target.index) & (local | assigned(f.body)))


def _inside(s: IRStmt, outer: IRStmt) -> bool:
    return any(x is s for x in walk(outer))


# ---------------------------------------------------------------- the device kernel


class _Kernel:
    """The ``__global__`` function for the GPUBlock loop ``loop`` of ``fn``."""

    def __init__(self, fn: Function, loop: For, pre: list[IRStmt], helpers: frozenset[str]) -> None:
        self.fn = fn
        self.device_calls = DEVICE_CALLS | MATH_CALLS | helpers
        self.types = {p.name: p.ctype for p in fn.params}
        self.types.update({s.name: s.ctype for s in walk(fn.body) if isinstance(s, Decl)})
        self.host_decls = {s.name: s for x in pre for s in walk(x) if isinstance(s, Decl)}
        self.sums = self._sums(loop)
        for name, acc in self.sums.items():
            self.types[acc] = self.types[name]
        self.loop = _map(loop, self._to_device_sum)
        gpu = [s for s in walk(loop.body) if isinstance(s, For) and s.unit]
        self.warps = max((_extent(s) for s in gpu if s.unit == "GPUWarp"), default=0)
        lanes = [_constant_extent(s) for s in gpu if s.unit == "GPUThread"]
        self.threads = max((n for n in lanes if n is not None), default=0)
        if None in lanes:  # a thread loop of no constant extent strides over a warp's lanes
            self.threads = max(self.threads, WARP)
        if self.warps and self.threads > WARP:
            raise ScheduleError(f"a GPUThread loop inside a GPUWarp loop has at most {WARP} "
                                f"iterations (the lanes of a warp), not {self.threads}")
        self.block_dim = self._block_dim()
        self.reductions = 0

    def _sums(self, loop: For) -> dict[str, str]:
        """Host scalars that the loop only adds to (a scalar result's temporary), each with
        the name of its copy in device memory."""
        out: dict[str, str] = {}
        for name in sorted((assigned(loop.body) - declared(loop.body)) & set(self.host_decls)):
            updates = [a for a in walk(loop.body) if isinstance(a, Assign) and a.target == Var(name)]
            if self.types[name] in ACCUMULATE and all(a.op == "+=" for a in updates) \
                    and not _reads(loop.body, Var(name)):
                out[name] = f"coiter_acc_{name}"
        return out

    def _to_device_sum(self, s: IRStmt) -> IRStmt | None:
        """``acc[0] += v`` for ``t += v`` when ``t`` is a host sum (see :meth:`_sums`)."""
        if isinstance(s, Assign) and isinstance(s.target, Var) and s.target.name in self.sums:
            return Assign(Load(self.sums[s.target.name], Const(0)), s.value, s.op)
        return None

    def _block_dim(self) -> int:
        if self.warps and self.threads:
            n = self.warps * WARP
        elif self.threads:  # whole warps, so that warp shuffles see every lane
            n = -(-self.threads // WARP) * WARP
        else:
            n = max(self.warps, 1)
        if n > MAX_BLOCK:
            raise ScheduleError(f"the GPU loops need {n} threads per block; at most {MAX_BLOCK}")
        return n

    def function(self) -> Function:
        """The kernel: hardware indices, the block's loop variable, the mapped body."""
        top = self.loop
        hw: list[IRStmt] = []
        tid = Var("threadIdx.x")
        if self.warps:
            hw.append(Decl("const int64_t", "coiter_warp", Bin("/", tid, Const(WARP)) if self.threads else tid))
        if self.threads:
            hw.append(Decl("const int64_t", "coiter_thread", Bin("%", tid, Const(WARP)) if self.warps else tid))
        start = top.start if isinstance(top.start, Const) else Var("coiter_block_lo")
        self._check_private(top, top.body, set())
        body = self.stmts(top.body, frozenset({"GPUBlock"}))
        stmts = block(hw, Decl("int64_t", top.var, add(start, Var("blockIdx.x"))), body)
        return Function(f"{self.fn.name}_kernel", self.params(stmts), stmts, returns="__global__ void")

    def params(self, body: Block) -> tuple[Param, ...]:
        """The function's parameters the kernel reads, then host scalars it reads."""
        free = used(body) - declared(body)
        out = [p for p in self.fn.params if p.name in free]
        out += [Param(self.types[acc], acc, 1) for acc in self.sums.values()]
        for name in sorted(free & set(self.host_decls)):
            d = self.host_decls[name]
            if "*" in d.ctype:
                raise ScheduleError(f"{name}: memory allocated outside the GPU loops (a precompute "
                                    "temporary or workspace) cannot be used on the GPU")
            out.append(Param(d.ctype.replace("const ", ""), name))
        if not isinstance(self.loop.start, Const):
            out.append(Param("int64_t", "coiter_block_lo"))
        return tuple(out)

    # -- statements
    def stmts(self, b: Block, bound: frozenset[str]) -> Block:
        return replace(b, stmts=block([self.stmt(s, bound) for s in b.stmts]).stmts)

    def stmt(self, s: IRStmt, bound: frozenset[str]) -> IRStmt:
        """``s`` as device code where the GPU units ``bound`` are mapped."""
        for x in (e for e in exprs(s) for e in subexprs(e)):
            if isinstance(x, Call) and x.fn not in self.device_calls:
                raise ScheduleError(f"{x.fn}() cannot run in a GPU loop (allocation or sorting: a "
                                    "workspace, a sparse result or an unordered operand)")
        if isinstance(s, For) and s.unit:
            return self.gpu_loop(s, bound)
        if isinstance(s, For):
            if s.pragma:
                raise ScheduleError(f"the loop over {s.var} runs on CPU threads inside a GPU loop")
            return _unrolled(s, self.stmts(s.body, bound))
        if isinstance(s, While):
            return While(s.cond, self.stmts(s.body, bound))
        if isinstance(s, If):
            other = None if s.otherwise is None else self.stmt(s.otherwise, bound)
            return If(s.cond, self.stmts(s.then, bound), other)
        if isinstance(s, Block):
            return self.stmts(s, bound)
        if isinstance(s, Pragma):
            if s.text != "omp atomic":
                raise ScheduleError(f"#pragma {s.text} inside a GPU loop")
            return self.store(_atomic_add(s.stmt, self.types), bound)
        if isinstance(s, Assign) and isinstance(s.target, Load):
            return self.store(s, bound)
        if isinstance(s, Return):
            raise ScheduleError("a kernel that may fail (allocation) cannot run in a GPU loop")
        if isinstance(s, Decl) and "*" in s.ctype:
            raise ScheduleError(f"{s.name}: a precompute temporary inside a GPU loop is not supported")
        return s

    def store(self, s: IRStmt, bound: frozenset[str]) -> IRStmt:
        """A store run by the first hardware thread of each unit not bound here, since
        every thread of the block executes it."""
        first = []
        if self.threads and "GPUThread" not in bound:
            first.append(eq(Var("coiter_thread"), Const(0)))
        if self.warps and "GPUWarp" not in bound:
            first.append(eq(Var("coiter_warp"), Const(0)))
        return If(conj(first), block(s)) if first else s

    def gpu_loop(self, f: For, bound: frozenset[str]) -> IRStmt:
        """``{ v = start + hardware index; if (v < end) body }`` plus warp reductions."""
        finer = {"GPUWarp": {"GPUWarp", "GPUThread"}, "GPUThread": {"GPUThread"}}[f.unit]
        if bound & finer or f.start is None:
            raise ScheduleError(f"the {f.unit} loop over {f.var} is nested in a loop over the same "
                                "or a finer GPU unit (nest them GPUBlock > GPUWarp > GPUThread)")
        hw = Var("coiter_warp" if f.unit == "GPUWarp" else "coiter_thread")
        body, before, after = f.body, [], []
        if f.unit == "GPUThread":
            body, before, after = self.reduce(f)
        self._check_private(f, body, {d.name for d in before})
        mapped = self.stmts(body, bound | {f.unit})
        if _breaks(mapped):  # `break` leaves this iteration: give it a loop to leave
            mapped = block(For("coiter_once", "int", Const(0), Const(1), mapped))
        # the totals are in every lane; the shared location is updated once
        tail = [s if isinstance(s, Assign) and isinstance(s.target, Var) else self.store(s, bound)
                for s in after]
        if f.unit == "GPUThread" and _constant_extent(f) is None:
            # no constant extent (the outer piece of a split, TACO's SpMM rows): each lane
            # strides over the iterations, the warp's or block's width apart
            stride = Const(self._lanes(f))
            walk_ = While(lt(Var(f.var), f.end), block(mapped, Assign(Var(f.var), stride, "+=")))
            return block(Decl("int64_t", f.var, add(f.start, hw)), before, walk_, tail)
        return block(Decl("int64_t", f.var, add(f.start, hw)), before,
                     If(lt(Var(f.var), f.end), mapped), tail)

    def _lanes(self, f: For) -> int:
        """How many hardware threads run the GPUThread loop ``f`` side by side."""
        n = _constant_extent(f)
        if n is not None:
            return n
        return WARP if self.warps else self.block_dim

    def reduce(self, f: For) -> tuple[Block, list[IRStmt], list[IRStmt]]:
        """Accumulations in ``f`` to a location every thread shares: the body adding into
        per-lane accumulators, their declarations, and the warp sums and updates after."""
        shared: dict[IRExpr, tuple[str, bool]] = {}
        for s in walk(f.body):
            atomic = isinstance(s, Pragma)
            a = s.stmt if atomic else s
            if not (isinstance(a, Assign) and a.op == "+=") or a.target in shared:
                continue
            if _per_iteration(a.target, f):
                continue  # a different location per iteration
            if _reads(f.body, a.target):
                continue  # the partial value is used inside the loop: not a reduction
            ctype = self.types.get(_name(a.target), "")
            if ctype not in ACCUMULATE:
                raise ScheduleError(f"{f.var}: no warp reduction of {ctype} values")
            if self._lanes(f) > WARP and not self.warps:
                raise ScheduleError(f"{f.var}: a reduction across GPU threads is a warp reduction; "
                                    f"the GPUThread loop has more than {WARP} iterations")
            shared[a.target] = (f"coiter_red{self.reductions}", atomic)
            self.reductions += 1
        if not shared:
            return f.body, [], []

        def accumulate(s: IRStmt) -> IRStmt | None:
            a = s.stmt if isinstance(s, Pragma) else s
            if isinstance(a, Assign) and a.op == "+=" and a.target in shared:
                return Assign(Var(shared[a.target][0]), a.value, "+=")
            return None

        before, after = [], []
        for target, (acc, atomic) in shared.items():
            ctype = self.types[_name(target)]
            self.types[acc] = ctype
            before.append(Decl(ctype, acc, Const(0)))
            after.append(Assign(Var(acc), Call("coiter_warp_sum", (Var(acc),))))
            update = Assign(target, Var(acc), "+=")
            # a scalar variable is each thread's own (every lane holds the warp's total)
            shared_memory = not isinstance(update.target, Var)
            after.append(_atomic_add(update, self.types) if atomic and shared_memory else update)
        return _map(f.body, accumulate), before, after

    def _check_private(self, f: For, body: Block, accumulators: set[str]) -> None:
        """Variables declared outside GPU loop ``f`` exist once per hardware thread: a
        write inside ``f`` that is not a reduction would leave them different."""
        escaped = sorted(assigned(body) - declared(body) - {f.var} - accumulators)
        if escaped:
            raise ScheduleError(f"{escaped[0]} is updated by every iteration of the {f.unit} loop "
                                f"over {f.var}; the CUDA back end cannot combine it")


def _extent(f: For) -> int:
    """A constant upper bound on the iterations of GPU loop ``f`` (its hardware size)."""
    n = _constant_extent(f)
    if n is None:
        raise ScheduleError(f"parallelize({f.var}, {f.unit}): the loop has no constant number of "
                            "iterations; split it by a constant and parallelize a piece")
    return n


def _constant_extent(f: For) -> int | None:
    """A constant upper bound on the iterations of ``f``; None when there is none."""
    lo = _constant(f.start) if f.start is not None else None
    hi = _constant(f.end)
    return None if lo is None or hi is None else max(hi - lo, 0)


def _constant(e: IRExpr) -> int | None:
    """An upper bound of ``e`` from its constants (None when there is none)."""
    if isinstance(e, Const) and isinstance(e.value, int):
        return e.value
    if isinstance(e, Min):
        known = [c for c in map(_constant, e.args) if c is not None]
        return min(known) if known else None
    if isinstance(e, Max):
        known = [_constant(a) for a in e.args]
        return None if None in known else max(known)
    if isinstance(e, Bin) and e.op in ("+", "*", "/"):
        a, b = _constant(e.a), _constant(e.b)
        if a is None or b is None or a < 0 or b < 0:  # C division truncates; keep to >= 0
            return None
        if e.op == "/":
            return a // b if b else None
        return a + b if e.op == "+" else a * b
    return None


def _breaks(b: Block) -> bool:
    """Whether ``b`` has a ``break`` that leaves it (not one of an inner loop)."""
    stack: list[IRStmt] = list(b.stmts)
    while stack:
        s = stack.pop()
        if isinstance(s, Break):
            return True
        if not isinstance(s, (For, While)):
            stack.extend(children(s))
    return False


def _name(target: IRExpr) -> str:
    """The variable or array that an assignment target names."""
    return target.array if isinstance(target, Load) else target.name


def _reads(body: Block, target: IRExpr) -> bool:
    """Whether ``body`` reads ``target``'s variable or array outside ``+=`` updates of it."""
    name = _name(target)
    for s in walk(body):
        a = s.stmt if isinstance(s, Pragma) else s
        if isinstance(a, Assign) and a.op == "+=" and a.target == target:
            if name in names(a.value):
                return True
            continue
        if any(name in names(e) for e in exprs(s)):
            return True
    return False


def _map(s: IRStmt, fn: Callable[[IRStmt], IRStmt | None]) -> IRStmt:
    """``s`` with every statement that ``fn`` replaces (non-None) replaced."""
    new = fn(s)
    if new is not None:
        return new
    if isinstance(s, Block):
        return replace(s, stmts=tuple(_map(x, fn) for x in s.stmts))
    if isinstance(s, For):
        return For(s.var, s.ctype, s.start, s.end, _map(s.body, fn), s.pragma, s.unroll, s.unit)
    if isinstance(s, While):
        return While(s.cond, _map(s.body, fn))
    if isinstance(s, If):
        return If(s.cond, _map(s.then, fn), None if s.otherwise is None else _map(s.otherwise, fn))
    if isinstance(s, Pragma):
        return Pragma(s.text, _map(s.stmt, fn))
    return s


def _atomic_add(s: IRStmt, types: Mapping[str, str]) -> IRStmt:
    """``coiter_atomic_add(&target, value)`` for the update ``target += value``."""
    if not (isinstance(s, Assign) and s.op == "+=" and isinstance(s.target, Load)):
        raise ScheduleError(f"no atomic form on the GPU for {s}")
    ctype = types.get(s.target.array, "")
    if ctype not in ACCUMULATE:
        raise ScheduleError(f"{s.target.array}: the GPU has no atomic add of {ctype or 'these'} values")
    return ExprStmt(Call("coiter_atomic_add", (Un("&", s.target), s.value)))


def _unrolled(f: For, body: Block) -> For:
    """Serial loop ``f``; its unroll request as CUDA's ``#pragma unroll``."""
    pragma = f"unroll {f.unroll}" if f.unroll and not f.pragma else f.pragma
    return For(f.var, f.ctype, f.start, f.end, body, pragma, 0, f.unit)


def _host(s: IRStmt) -> IRStmt:
    """Host statement ``s`` with unroll requests in the form nvcc knows."""
    return _map(s, lambda x: _unrolled(x, _host(x.body)) if isinstance(x, For) else None)


# ---------------------------------------------------------------- the host side


def _launch(ir: KernelIR, formats: Mapping[str, Format], loop: For, kernel: _Kernel,
            device: Function) -> list[IRStmt]:
    """Copy the arrays in, launch ``device`` once per iteration of ``loop``, copy the
    result's values out, free; return the error code when a CUDA call fails."""
    fn = ir.function
    lengths = _lengths(ir, formats)
    dev = {p.name: f"coiter_d_{p.name}" for p in device.params if p.pointers}
    # (device pointer, element type, host address, elements, copied back) of what the kernel uses
    copies: list[tuple[str, str, IRExpr, IRExpr, bool]] = [
        (dev[p.name], p.ctype, Var(p.name), lengths[p.name], spec.kind in VALUES and spec.tensor == ir.result)
        for p, spec in zip(fn.params, ir.params) if p.name in dev]
    copies += [(dev[acc], kernel.types[acc], Un("&", Var(name)), Const(1), True)
               for name, acc in kernel.sums.items()]

    def check(call: IRExpr) -> IRStmt:
        return ExprStmt(Call("COITER_CUDA", (call,)))

    # gridDim.x is at most 2^31 - 1
    run = [check(Select(Bin(">", Var(GRID), Var("INT32_MAX")), Var("cudaErrorInvalidConfiguration"),
                        Var("cudaSuccess")))]
    run += [check(Call("coiter_to_device", (Un("&", Var(d)), host, n))) for d, _, host, n, _ in copies]
    args = tuple(Var(dev.get(p.name, p.name)) for p in device.params)
    run.append(ExprStmt(Call(f"{device.name}<<<(unsigned int){GRID}, {kernel.block_dim}>>>", args)))
    run.append(check(Call("cudaGetLastError", ())))
    # the copies back wait for the kernel
    run += [check(Call("coiter_to_host", (host, Var(d), n))) for d, _, host, n, back in copies if back]
    err = Var("coiter_err")
    lo = [] if isinstance(loop.start, Const) else [Decl("const int64_t", "coiter_block_lo", loop.start)]
    start = loop.start if isinstance(loop.start, Const) else Var("coiter_block_lo")
    count = loop.end if start == Const(0) else Bin("-", loop.end, start)
    return [*lo, Decl("const int64_t", GRID, count), If(Bin(">", Var(GRID), Const(0)), block(
        [Decl(f"{ctype}*", d, Var("NULL")) for d, ctype, _, _, _ in copies],
        Decl("cudaError_t", err.name, Var("cudaSuccess")),
        For("coiter_once", "int", Const(0), Const(1), block(run)),  # COITER_CUDA breaks out
        [ExprStmt(Call("cudaFree", (Var(d),))) for d, _, _, _, _ in copies],
        If(Bin("!=", err, Var("cudaSuccess")), block(Return(Call("coiter_cuda_failed", (err,))))),
    ))]


def _lengths(ir: KernelIR, formats: Mapping[str, Format]) -> dict[str, IRExpr]:
    """Element count of every array parameter, from its tensor's format and dimensions."""
    fn = ir.function
    prefix = {spec.tensor: p.name[: -len("_vals")] for p, spec in zip(fn.params, ir.params)
              if spec.kind == "vals"}
    out: dict[str, IRExpr] = {}
    for tensor, cn in prefix.items():
        size: IRExpr = Const(1)
        for k, level in enumerate(formats[tensor].levels):
            names_k = LevelNames(cn, k + 1)
            lengths = level.array_lengths(names_k, size)
            if lengths is None:
                raise ScheduleError(f"the CUDA back end cannot copy {tensor}'s {level.kind} level "
                                    "to the GPU: the level does not say how long its arrays are")
            arrays, size = lengths
            out.update({names_k.array(a): n for a, n in arrays.items()})
        out[f"{cn}_vals"] = size
    for p, spec in zip(fn.params, ir.params):
        if spec.kind == "shared_vals":  # values over operand spec.array's positions
            out[p.name] = out[f"{prefix[spec.array]}_vals"]
    return out
