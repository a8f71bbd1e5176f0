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
"""
from __future__ import annotations

import re
from dataclasses import replace

from ..ir.nodes import (
    THREADS_BRANCH, Block, Call, Decl, ExprStmt, For, Function, Goto, If, IRStmt, Label, Param,
    Pragma, Region, Return, Var, While,
)
from ..ir.visit import assigned, declared, exprs, subexprs, used, walk_regions

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# macros of the C prelude that read the kernel's parameters
_MACRO_PARAMS = {"COITER_THREADS": ("coiter_nthreads", "coiter_work")}


def outline_parallel_bodies(fn: Function) -> tuple[list[Function], Function]:
    """The helper functions and ``fn`` with each parallel loop's body calling its helper,
    and each parallel loop's serial copy calling one. Loops whose body assigns a variable
    declared outside it (a scalar reduction) or jumps keep their body."""
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

    def rewrite(s: IRStmt) -> IRStmt:
        if isinstance(s, Block):
            return Block(tuple(rewrite(x) for x in s.stmts))
        if isinstance(s, For) and s.pragma and s.pragma.startswith("omp parallel for"):
            helper = _helper(fn, s, params, local_arrays, len(helpers))
            if helper is None:
                return s
            helpers.append(helper)
            return replace(s, body=Block((ExprStmt(_call(helper)),)))
        if isinstance(s, If) and s.cond == THREADS_BRANCH and isinstance(s.otherwise, Block):
            serial = _serial(fn, s.otherwise, params, local_arrays, len(serials))
            if serial is not None:
                serials.append(serial)
                return If(s.cond, rewrite(s.then), Block((ExprStmt(_call(serial)),)))
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
    return helpers + serials, replace(fn, body=body)


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
    return Function(f"{fn.name}_serial{n}", tuple(args), body,
                    returns="static __attribute__((noinline)) void")


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
            for sub in subexprs(e):
                if isinstance(sub, Call):
                    out.update(_MACRO_PARAMS.get(sub.fn, ()))
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
