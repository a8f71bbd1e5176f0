"""Bodies of OpenMP parallel loops moved into ``static inline`` functions.

GCC outlines an ``omp parallel for`` into a function that receives the variables it uses
through a struct, and the ``restrict`` qualifiers of the kernel's pointers are lost there:
a loop that kept a result row in registers now loads and stores it for every entry. CSR
SpMM with 16 dense columns ran 4.6x slower inside a 1-thread region than serially. Moving
the loop body into a function whose pointer parameters are ``restrict``, called once per
iteration, restores the information (GCC keeps it when it inlines the call) and leaves the
loop, its schedule and its clauses as they were.

The serial copy of such a loop (the branch calls that run on one thread take) moves into a
function of its own too, kept out of line: in the function that holds a parallel region
GCC's alias analysis sees the kernel's pointers escape into the region's struct and drops
their ``restrict`` there as well. The same SpMM's serial loop ran 2.4x slower beside the
region (6.1 vs 2.5 ms on cit-HepPh) than in a function of its own, and which loops GCC
still vectorized there changed with unrelated code around the region.

A loop under a dynamic schedule whose serial copy is the same loop compiles once: its
iterations ``[lo, hi)`` go into an out-of-line chunk function, the region hands chunks of
the schedule's size to it and the serial copy calls it on the whole range. Inlined into
both, every version of CSR SpMV was compiled twice: 0.49 of the 0.67 s GCC took on the
kernel beside its prelude, against 0.32 s compiled once.
"""
from __future__ import annotations

import re
from dataclasses import replace

from ..ir.nodes import (
    THREADS_BRANCH, Block, Call, Const, Decl, ExprStmt, For, Function, Goto, If, IRExpr, IRStmt,
    Label, Min, Param, Pragma, Region, Return, Var, While, add, ceil_div, fresh, mul, sub,
)
from ..ir.visit import assigned, declared, exprs, subexprs, used, walk_regions

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
OUT_OF_LINE = "static COITER_OUT_OF_LINE void"  # the prelude's macro: never inlined nor cloned

# macros of the C prelude that read the kernel's parameters
_MACRO_PARAMS = {"COITER_THREADS": ("coiter_nthreads", "coiter_work")}


def outline_parallel_bodies(fn: Function) -> tuple[list[Function], Function]:
    """The helper functions and ``fn`` with each parallel loop running by chunks of its
    chunk function (which its serial copy calls on the whole range) where its schedule is
    dynamic, else with its body calling its helper and its serial copy calling one. Loops
    whose body assigns a variable declared outside it (a scalar reduction) or jumps keep
    their body."""
    params = {p.name: p for p in fn.params}
    local_arrays: set[str] = set()  # declared with their size: no parameter passes them
    for s in walk_regions(fn.body):  # variables a loop body may use: declared, or enclosing loops'
        if isinstance(s, Decl) and "[" in s.name:
            local_arrays.add(s.name.split("[")[0])
        elif isinstance(s, Decl):
            params.setdefault(s.name, _decl_param(s))
        elif isinstance(s, For) and s.start is not None:
            params.setdefault(s.var, Param(s.ctype, s.var))
    helpers: list[Function] = []
    serials: list[Function] = []
    chunks: list[tuple[For, Function]] = []  # a parallel loop without its pragma, its chunk function

    def rewrite(s: IRStmt) -> IRStmt:
        if isinstance(s, Block):
            return replace(s, stmts=tuple(rewrite(x) for x in s.stmts))
        if isinstance(s, For) and s.pragma and s.pragma.startswith("omp parallel for"):
            chunked = _by_chunks(fn, s, params, local_arrays, chunks)
            if chunked is not None:
                return chunked
            helper = _helper(fn, s, params, local_arrays, len(helpers))
            if helper is None:
                return s
            helpers.append(helper)
            return replace(s, body=Block((ExprStmt(_call(helper)),)))
        if isinstance(s, If) and s.cond == THREADS_BRANCH and isinstance(s.otherwise, Block):
            then = rewrite(s.then)  # first: it makes the chunk functions the serial copy calls
            otherwise = _call_chunks(s.otherwise, chunks)
            if _calls_only(otherwise, {f.name for _, f in chunks}):
                return If(s.cond, then, otherwise)
            serial = _serial(fn, otherwise, params, local_arrays, len(serials))
            if serial is not None:
                serials.append(serial)
                return If(s.cond, then, Block((ExprStmt(_call(serial)),)))
            return If(s.cond, then, otherwise)
        if isinstance(s, For):
            return replace(s, body=rewrite(s.body))
        if isinstance(s, While):
            return replace(s, body=rewrite(s.body))
        if isinstance(s, If):
            other = None if s.otherwise is None else rewrite(s.otherwise)
            return replace(s, then=rewrite(s.then), otherwise=other)
        if isinstance(s, Region):
            return replace(s, body=rewrite(s.body))
        if isinstance(s, Pragma):
            return replace(s, stmt=rewrite(s.stmt))
        return s

    body = rewrite(fn.body)
    return [f for _, f in chunks] + helpers + serials, replace(fn, body=body)


def _call(helper: Function) -> Call:
    return Call(helper.name, tuple(Var(p.name) for p in helper.params))


def _serial(fn: Function, body: Block, params: dict[str, Param], local_arrays: set[str],
            n: int) -> Function | None:
    """The serial copy ``body`` of a parallel loop as a function of its own (None where
    :func:`_free_params` finds none)."""
    args = _free_params(body, params, local_arrays)
    if args is None:
        return None
    # out of line: inlined, it would be back beside the region
    return Function(f"{fn.name}_serial{n}", tuple(args), body, returns=OUT_OF_LINE)


# a parallel loop under a dynamic schedule, its chunk size (a name or a number) and threads
_DYNAMIC = re.compile(r"omp parallel for schedule\(dynamic(?:, (\w+))?\) (num_threads\([^ ]*\))\Z")
_LO, _HI = "coiter_lo", "coiter_hi"


def _by_chunks(fn: Function, loop: For, params: dict[str, Param], local_arrays: set[str],
               chunks: list[tuple[For, Function]]) -> For | None:
    """``loop`` (a parallel loop under a dynamic schedule of chunks larger than one and no
    other clause) as a parallel loop over its chunks, each run by the chunk function of its
    iterations, which is added to ``chunks``; None for other loops and where a function
    cannot hold their body."""
    match = _DYNAMIC.match(loop.pragma or "")
    size = Const(1) if match is None or match[1] is None else _word(match[1])
    # chunks of one iteration (a split's blocks, the tiny-run helper's chunks) would cost a
    # call each: their body is inlined instead
    if match is None or loop.start is None or size == Const(1):
        return None
    args = _free_params(loop.body, params, local_arrays, loop.var)
    if args is None:
        return None
    serial = replace(loop, pragma=None)
    helper = next((f for key, f in chunks if key == serial), None)
    if helper is None:
        helper = Function(f"{fn.name}_chunk{len(chunks)}",
                          (Param("int64_t", _LO), Param("int64_t", _HI), *args),
                          Block((replace(serial, start=Var(_LO), end=Var(_HI)),)), returns=OUT_OF_LINE)
        chunks.append((serial, helper))
    taken = used(loop) | {p.name for p in helper.params}
    chunk, lo = fresh(f"{loop.var}_chunk", taken), fresh(f"{loop.var}_lo", taken)
    call = Call(helper.name, (Var(lo), Min((add(Var(lo), size), loop.end)),
                              *(Var(p.name) for p in helper.params[2:])))
    body = Block((Decl("int64_t", lo, add(loop.start, mul(Var(chunk), size))), ExprStmt(call)))
    return For(chunk, "int64_t", Const(0), ceil_div(sub(loop.end, loop.start), size), body,
               f"omp parallel for schedule(dynamic, 1) {match[2]}")


def _word(text: str) -> IRExpr:
    return Const(int(text)) if text.isdigit() else Var(text)


def _calls_only(s: IRStmt, functions: set[str]) -> bool:
    """Whether ``s`` is nothing but calls of ``functions``, under if statements: no code
    that would have to be kept away from the parallel region."""
    if isinstance(s, Block):
        return all(_calls_only(x, functions) for x in s.stmts)
    if isinstance(s, If):
        return all(_calls_only(x, functions) for x in (s.then, s.otherwise) if x is not None)
    return isinstance(s, ExprStmt) and isinstance(s.expr, Call) and s.expr.fn in functions


def _call_chunks(s: IRStmt, chunks: list[tuple[For, Function]]) -> IRStmt:
    """``s`` with each loop that a chunk function holds calling it on the loop's range."""
    if isinstance(s, For):
        for key, helper in chunks:
            if key == s:
                return ExprStmt(Call(helper.name, (s.start, s.end,
                                                   *(Var(p.name) for p in helper.params[2:]))))
        return replace(s, body=_call_chunks(s.body, chunks))
    if isinstance(s, Block):
        return replace(s, stmts=tuple(_call_chunks(x, chunks) for x in s.stmts))
    if isinstance(s, If):
        other = None if s.otherwise is None else _call_chunks(s.otherwise, chunks)
        return replace(s, then=_call_chunks(s.then, chunks), otherwise=other)
    if isinstance(s, While):
        return replace(s, body=_call_chunks(s.body, chunks))
    return s


def _helper(fn: Function, loop: For, params: dict[str, Param], local_arrays: set[str],
            n: int) -> Function | None:
    args = _free_params(loop.body, params, local_arrays, loop.var)
    if args is None:
        return None
    return Function(f"{fn.name}_body{n}", (Param("int64_t", loop.var), *args), loop.body,
                    returns="static inline void")


def _free_params(body: IRStmt, params: dict[str, Param], local_arrays: set[str],
                 bound: str | None = None) -> list[Param] | None:
    """The parameters a function holding ``body`` takes: the variables it reads from outside
    (``bound`` aside), by name. None where it jumps, or assigns or reads a variable that a
    parameter cannot carry (an outer scalar it sums into, a local array)."""
    if any(isinstance(x, (Goto, Label, Return, Region)) for x in walk_regions(body)):
        return None
    names = used(body) | _macro_names(body) | _pragma_names(body)
    free = names - declared(body) - {bound}
    if assigned(body) & free or free & local_arrays:
        return None
    return [params[name] for name in sorted(free & set(params))]


def _macro_names(s: IRStmt) -> set[str]:
    """Kernel parameters that prelude macros called in ``s`` read."""
    out: set[str] = set()
    for x in walk_regions(s):
        for e in exprs(x):
            for inner in subexprs(e):
                if isinstance(inner, Call):
                    out.update(_MACRO_PARAMS.get(inner.fn, ()))
    return out


def _pragma_names(s: IRStmt) -> set[str]:
    """Identifiers in the pragmas of ``s``: clauses such as ``reduction(+: A_vals[:A1_dimension])``
    read variables the expression trees do not show."""
    out: set[str] = set()
    for x in walk_regions(s):
        text = x.pragma if isinstance(x, (For, Region)) else x.text if isinstance(x, Pragma) else None
        if text:
            out.update(_IDENTIFIER.findall(text))
    return out


def _decl_param(d: Decl) -> Param:
    """The parameter passing the variable ``d`` declares: its type, pointers and const;
    restrict only where the declaration has it (other local pointers may alias)."""
    ctype = d.ctype.replace("restrict", "").strip()
    pointers = ctype.count("*")
    base = ctype.replace("*", "").strip()
    const = base.startswith("const ")
    base = base.removeprefix("const ").strip()
    return Param(base, d.name, pointers, const, restrict="restrict" in d.ctype or not pointers)
