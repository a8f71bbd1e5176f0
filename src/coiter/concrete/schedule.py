"""The scheduling language: transformations of concrete index notation.

Each command is a pure function from a :class:`ConcreteProgram` to a new one. It
checks its preconditions when applied and raises :class:`ScheduleError` saying
why it cannot (an unknown variable, a reorder that breaks a format's order, a race
under ``NoRaces``...). Derived variables are recorded as relations in the
program's environment (:mod:`coiter.concrete.provenance`); data structures are
never rewritten.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import Any, Callable

from ..errors import ScheduleError
from ..formats.format import Format, coo, dense
from ..formats.levels.workspace import WorkspaceList
from ..formats.workspaces import DENSE, policy_names
from ..notation.ast import (
    Access, Add, Call, Div, Expr, IndexVar, Literal, Mul, Neg, Sub, accesses, children, factors,
    map_accesses, rename_index, walk, with_children,
)
from ..notation.functions import zero_at
from .provenance import BOUND_KINDS, Bound, Coord, Divide, Fuse, Pos, Precomputed, Provenance, Solved, Split
from .races import races, row_assembly, scatter_loops, shared_pattern
from .commands import Command
from .stmt import (
    PARALLEL_UNITS, RACE_STRATEGIES, Assign, ConcreteProgram, Forall, Multi, Sequence, Stmt,
    TensorDecl, Where, walk_stmts,
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*\Z")
# commands that may follow a parallelize (the others assume serial loops)
_AFTER_PARALLEL = ("parallelize", "unroll", "mergeby")


def apply(prog: ConcreteProgram, cmd: Command) -> ConcreteProgram:
    """``prog`` transformed by ``cmd`` (preconditions checked)."""
    if any(c.name == "parallelize" for c in prog.commands) and cmd.name not in _AFTER_PARALLEL:
        raise ScheduleError(f"{cmd}: no transformation may follow parallelize except another "
                            "parallelize, unroll or mergeby (they assume serial loops); apply it last")
    try:
        new = TRANSFORMS[cmd.name](prog, cmd, *cmd.args)
    except TypeError as e:  # wrong number of arguments
        raise ScheduleError(f"{cmd}: wrong arguments ({e})") from None
    except ScheduleError as e:
        if str(e).startswith(str(cmd)):
            raise
        raise ScheduleError(f"{cmd}: {e}") from None
    return replace(new, commands=prog.commands + (cmd,))


# ------------------------------------------------------------------ argument helpers


def _all_vars(prog: ConcreteProgram) -> set[str]:
    names: set[str] = set()
    for s in walk_stmts(prog.stmt):
        if isinstance(s, Forall):
            names.add(s.var.name)
        elif isinstance(s, Assign):
            names |= {v.name for a in [s.lhs, *accesses(s.rhs)] for v in a.indices}
    for r in prog.env.relations:
        names |= {v.name for v in r.derived() + r.parents()}
    return names


def _loop(prog: ConcreteProgram, cmd: Command, name: Any) -> IndexVar:
    if not isinstance(name, str) or not any(
            isinstance(s, Forall) and s.var.name == name for s in walk_stmts(prog.stmt)):
        loops = [s.var.name for s in walk_stmts(prog.stmt) if isinstance(s, Forall)]
        raise ScheduleError(f"{cmd}: no loop over index variable {name!r} (loops: {', '.join(loops)})")
    return IndexVar(name)


def _fresh(prog: ConcreteProgram, cmd: Command, *names: Any) -> tuple[IndexVar, ...]:
    taken = _all_vars(prog)
    for n in names:
        if not isinstance(n, str) or not _NAME.match(n):
            raise ScheduleError(f"{cmd}: {n!r} is not a valid index variable name")
        if n in taken:
            raise ScheduleError(f"{cmd}: index variable {n} is already used")
    if len(set(names)) != len(names):
        raise ScheduleError(f"{cmd}: new index variables must have distinct names")
    return tuple(IndexVar(n) for n in names)


# Integers a schedule prints into C: factors multiply coordinates in int64_t arithmetic
# (2**31 keeps every product in range), GCC unrolls at most 65534 times and a body copied more
# than a few thousand times only slows the compiler down.
MAX_FACTOR = 2**31 - 1
MAX_UNROLL = 4096
MAX_BOUND = 2**62


def _positive(cmd: Command, value: Any, what: str, most: int = MAX_FACTOR) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ScheduleError(f"{cmd}: {what} must be an integer from 1 to {most}, got {value!r}")
    return value


def _map_loops(s: Stmt, v: IndexVar, fn: Callable[[Forall], Stmt]) -> Stmt:
    """``s`` with every loop over ``v`` replaced by ``fn(loop)``."""
    if isinstance(s, Forall):
        body = _map_loops(s.body, v, fn)
        s = replace(s, body=body)
        return fn(s) if s.var == v else s
    if isinstance(s, Where):
        return Where(_map_loops(s.consumer, v, fn), _map_loops(s.producer, v, fn))
    if isinstance(s, Sequence):
        return Sequence(_map_loops(s.define, v, fn), _map_loops(s.mutate, v, fn))
    if isinstance(s, Multi):
        return Multi(_map_loops(s.left, v, fn), _map_loops(s.right, v, fn))
    return s


def _with(prog: ConcreteProgram, stmt: Stmt, *relations: Any, **changes: Any) -> ConcreteProgram:
    env = replace(prog.env, relations=prog.env.relations + relations)
    new = replace(prog, stmt=stmt, env=env, **changes)
    check_concordant(new)
    return new


# ------------------------------------------------------------------ dissolving temporaries


def random_writes(decl: TensorDecl) -> bool:
    """Whether a result can be written in any order: every level inserts, or it shares
    an operand's pattern (written in place at that operand's positions)."""
    whole = decl.pattern_of is not None and decl.pattern_levels == decl.order
    return whole or all(lv.has_insert for lv in decl.format.levels)


def _product(fs: list[Expr]) -> Expr:
    out = fs[0]
    for f in fs[1:]:
        out = Mul(out, f)
    return out


def dissolve(prog: ConcreteProgram, w: Where, why: str) -> Stmt:
    """``where(R(I) = f * t, forall(..., t += e))`` as ``forall(..., R(I) += f * e)``:
    the scalar temporary of a reduction inlined, so loops can move across it. Valid when
    the consumer is a product with ``t`` (it distributes over the sum) and ``R`` can be
    written at random (every level inserts)."""
    c = w.consumer
    temps = {a.lhs.tensor for a in walk_stmts(w.producer) if isinstance(a, Assign)}
    if not isinstance(c, Assign) or len(temps) != 1:
        raise ScheduleError(f"{why}: a loop would cross the computation of a temporary in {w}")
    (t,) = temps
    tdecl = prog.tensors[t]
    target = prog.tensors[c.lhs.tensor]
    fs = factors(c.rhs)
    uses = [f for f in fs if isinstance(f, Access) and f.tensor == t]
    if tdecl.order != 0 or len(uses) != 1 or any(t in {a.tensor for a in accesses(f)} for f in fs if f not in uses):
        raise ScheduleError(f"{why}: {c} does not distribute over the sum computing {t}; "
                            "the loops cannot move across it")
    if not random_writes(target):
        raise ScheduleError(f"{why}: moving a loop out of the reduction into {t} makes {c.lhs} "
                            f"accumulate at random, which its format ({target.format}) cannot")
    rest = [f for f in fs if f not in uses]

    def inline(s: Stmt) -> Stmt:
        if isinstance(s, Assign):
            return Assign(c.lhs, _product(rest + [s.rhs]) if rest else s.rhs, True)
        if isinstance(s, Forall):
            return replace(s, body=inline(s.body))
        raise ScheduleError(f"{why}: the temporary {t} is computed by more than a loop nest")

    return inline(w.producer)


# ------------------------------------------------------------------ concordance


def _paths(s: Stmt, loops: tuple[IndexVar, ...] = ()):
    """(enclosing loops, assignment) for every assignment."""
    if isinstance(s, Assign):
        yield loops, s
    elif isinstance(s, Forall):
        yield from _paths(s.body, loops + (s.var,))
    elif isinstance(s, Where):
        yield from _paths(s.consumer, loops)
        yield from _paths(s.producer, loops)
    elif isinstance(s, Sequence):
        yield from _paths(s.define, loops)
        yield from _paths(s.mutate, loops)
    elif isinstance(s, Multi):
        yield from _paths(s.left, loops)
        yield from _paths(s.right, loops)


def check_concordant(prog: ConcreteProgram) -> None:
    """Raise ScheduleError when some tensor would be iterated out of its storage order: a
    level that cannot be reached by coordinate (no locate, or no insert for the result)
    must be bound no earlier than the levels above it."""
    prov = Provenance(prog.env.relations)
    for loops, s in _paths(prog.stmt):
        depth: dict[IndexVar, int] = {}
        for d, v in enumerate(loops):
            for u in prov.underived(v):
                depth[u] = d
        solved = [r for r in prog.env.relations if isinstance(r, Solved)]
        for _ in solved:  # a solved variable is known once the loops it is computed from are
            for r in solved:
                if r.var not in depth and all(u in depth for u in r.loops):
                    depth[r.var] = max(depth[u] for u in r.loops)
        for a in [s.lhs, *accesses(s.rhs)]:
            decl = prog.tensors[a.tensor]
            if decl.role in ("temp", "workspace"):
                continue
            fmt = decl.format
            deepest = -1
            for k, level in enumerate(fmt.levels):
                u = a.indices[fmt.ordering[k]]
                reach = random_writes(decl) if a == s.lhs else (level.has_locate and level.full)
                if u not in depth:
                    raise ScheduleError(f"{a}: no loop binds index variable {u}")
                if not reach and depth[u] < deepest:
                    raise ScheduleError(
                        f"{a} would be iterated out of its storage order: level {k + 1} "
                        f"({level}, index {u}) cannot be reached before the levels above it")
                deepest = max(deepest, depth[u])


# ------------------------------------------------------------------ the transformations


def _split(prog: ConcreteProgram, cmd: Command, i: Any, outer: Any, inner: Any, factor: Any,
           relation: type = Split) -> ConcreteProgram:
    v = _loop(prog, cmd, i)
    o, n = _fresh(prog, cmd, outer, inner)
    size = _positive(cmd, factor, "the split factor" if relation is Split else "the number of parts")
    stmt = _map_loops(prog.stmt, v, lambda f: replace(f, var=o, body=replace(f, var=n)))
    return _with(prog, stmt, relation(v, o, n, size))


def _divide(prog: ConcreteProgram, cmd: Command, i: Any, outer: Any, inner: Any, parts: Any) -> ConcreteProgram:
    return _split(prog, cmd, i, outer, inner, parts, Divide)


def _body_loop(prog: ConcreteProgram, f: Forall, j: IndexVar, why: str) -> Forall:
    """The loop over ``j`` directly inside ``f`` (dissolving a temporary in between)."""
    body = f.body
    if isinstance(body, Where) and any(isinstance(s, Forall) and s.var == j for s in walk_stmts(body.producer)):
        body = dissolve(prog, body, why)
    if not (isinstance(body, Forall) and body.var == j):
        raise ScheduleError(f"{why}: the loop over {j} is not directly nested in the loop over {f.var}")
    return body


def _fuse(prog: ConcreteProgram, cmd: Command, i: Any, j: Any, f: Any) -> ConcreteProgram:
    vi, vj = _loop(prog, cmd, i), _loop(prog, cmd, j)
    (vf,) = _fresh(prog, cmd, f)
    prov = Provenance(prog.env.relations)
    if prov.is_position(vi):
        raise ScheduleError(f"{cmd}: the outer variable {vi} must be in coordinate space")

    def fuse(loop: Forall) -> Stmt:
        inner = _body_loop(prog, loop, vj, str(cmd))
        return replace(inner, var=vf)

    return _with(prog, _map_loops(prog.stmt, vi, fuse), Fuse(vi, vj, vf))


def _access_arg(prog: ConcreteProgram, cmd: Command, a: Any) -> Access:
    if isinstance(a, str):
        from ..notation.parser import parse_expr

        a = parse_expr(a)
    found = [x for s in walk_stmts(prog.stmt) if isinstance(s, Assign) for x in accesses(s.rhs)]
    if not isinstance(a, Access) or a not in found:
        raise ScheduleError(f"{cmd}: {a} is not an operand access of {prog.stmt}")
    return a


def _pos(prog: ConcreteProgram, cmd: Command, i: Any, p: Any, access: Any) -> ConcreteProgram:
    v = _loop(prog, cmd, i)
    (vp,) = _fresh(prog, cmd, p)
    a = _access_arg(prog, cmd, access)
    prov = Provenance(prog.env.relations)
    rel = prov.defining(v)
    # the inner piece of a split walks the positions of its coordinate range (found by binary
    # search per piece: TACO's split(i,i0,i1,4),pos(i1,ip,A(i)))
    piece = isinstance(rel, (Split, Divide)) and v == rel.inner and prov.defining(rel.parent) is None
    if rel is not None and not isinstance(rel, Fuse) and not piece:
        raise ScheduleError(f"{cmd}: {v} must be an original or fused index variable, or the "
                            "inner piece of a split of an original one")
    decl = prog.tensors[a.tensor]
    covered = prov.underived(v)
    fmt = decl.format
    levels = [k for k in range(fmt.order) if a.indices[fmt.ordering[k]] in covered]
    if not levels:
        raise ScheduleError(f"{cmd}: {a} is not indexed by {v}")
    if levels != list(range(levels[0], levels[0] + len(levels))) or \
            [a.indices[fmt.ordering[k]] for k in levels] != list(covered):
        raise ScheduleError(f"{cmd}: {', '.join(map(str, covered))} are not consecutive levels of "
                            f"{a.tensor} ({fmt}) in storage order")
    for k in levels[1:] if len(levels) > 1 else levels:
        level = fmt.levels[k]
        if not level.has_pos_iter or level.has_coord_iter:
            raise ScheduleError(f"{cmd}: level {k + 1} of {a.tensor} ({level}) has no positions to iterate")
        if piece and not level.ordered:
            raise ScheduleError(f"{cmd}: level {k + 1} of {a.tensor} ({level}) is unordered, so the "
                                f"positions of a piece of {rel.parent} are not one range")
    for k in levels:
        if not fmt.levels[k].unique:
            raise ScheduleError(f"{cmd}: level {k + 1} of {a.tensor} ({fmt.levels[k]}) repeats coordinates")
    for loop in (s for s in walk_stmts(prog.stmt) if isinstance(s, Forall) and s.var == v):
        _check_covered(prog, loop, a, str(cmd))
    stmt = _map_loops(prog.stmt, v, lambda f: replace(f, var=vp))
    return _with(prog, stmt, Pos(v, vp, a))


def _vanishes(e: Expr, zero: set[str], a: Access) -> bool:
    """Whether ``e`` is zero wherever ``a`` (and the temporaries in ``zero``) are."""
    if isinstance(e, Access):
        return e == a or e.tensor in zero
    if isinstance(e, Mul):
        return _vanishes(e.a, zero, a) or _vanishes(e.b, zero, a)
    if isinstance(e, (Add, Sub)):
        return _vanishes(e.a, zero, a) and _vanishes(e.b, zero, a)
    if isinstance(e, Div):  # 0 / 0 is NaN
        return _vanishes(e.a, zero, a) and not _vanishes(e.b, zero, a)
    if isinstance(e, Neg):
        return _vanishes(e.operand, zero, a)
    if isinstance(e, Call):  # zero when the function is, at its vanishing arguments
        args = [0 if _vanishes(x, zero, a) else x.value if isinstance(x, Literal) else None
                for x in e.args]
        return None not in args and zero_at(e.fn, tuple(args))
    return isinstance(e, Literal) and e.value == 0


def _check_covered(prog: ConcreteProgram, loop: Forall, a: Access, why: str) -> None:
    """Positions of ``a`` cover the loop only if every write inside is zero where ``a`` is
    absent (an intersection with ``a``, not a union)."""
    writes = [s for s in walk_stmts(loop.body) if isinstance(s, Assign)]
    zero: set[str] = set()
    # a reduction whose identity is not zero (min, prod...) is changed by a zero
    changed_by_zero = {t for t, d in prog.tensors.items() if d.reducer not in ("sum", "any")}
    for _ in writes:  # temporaries feed each other: iterate to a fixed point
        zero |= {t for t in {s.lhs.tensor for s in writes}
                 if prog.tensors[t].role == "temp" and t not in changed_by_zero
                 and all(_vanishes(s.rhs, zero, a) for s in writes if s.lhs.tensor == t)}
    for s in writes:
        if s.lhs.tensor in changed_by_zero or not _vanishes(s.rhs, zero, a):
            raise ScheduleError(f"{why}: {s} does not vanish where {a} is absent; the loop over "
                                f"{loop.var} covers more than the positions of {a.tensor}")


def _coord(prog: ConcreteProgram, cmd: Command, p: Any, i: Any) -> ConcreteProgram:
    vp = _loop(prog, cmd, p)
    (vi,) = _fresh(prog, cmd, i)
    rel = Provenance(prog.env.relations).defining(vp)
    if not isinstance(rel, Pos):
        raise ScheduleError(f"{cmd}: {vp} is not a position variable made by pos")
    return _with(prog, _map_loops(prog.stmt, vp, lambda f: replace(f, var=vi)), Coord(vp, vi))


def _reorder(prog: ConcreteProgram, cmd: Command, *names: Any) -> ConcreteProgram:
    if len(names) == 1 and isinstance(names[0], (list, tuple)):
        names = tuple(names[0])
    vs = [_loop(prog, cmd, n) for n in names]
    if len(set(vs)) != len(vs) or len(vs) < 2:
        raise ScheduleError(f"{cmd}: give two or more distinct loop variables")
    stmt = _reorder_stmt(prog, prog.stmt, vs, str(cmd))
    return _with(prog, stmt)


def _chain(prog: ConcreteProgram, s: Stmt, wanted: set[IndexVar], why: str, dissolve_wheres: bool):
    """Loops from ``s`` down to the last of ``wanted`` (None if ``s`` is not on that path)."""
    frames: list[Forall] = []
    found = 0
    while found < len(wanted):
        if isinstance(s, Forall):
            frames.append(s)
            found += s.var in wanted
            if found == len(wanted):
                return frames, s.body
            s = s.body
        elif isinstance(s, Where) and dissolve_wheres:
            s = dissolve(prog, s, why)
        elif isinstance(s, Where):
            s = s.producer
        else:
            missing = wanted - {f.var for f in frames}
            raise ScheduleError(f"{why}: loops over {', '.join(sorted(v.name for v in missing))} "
                                "are not nested on one path with the others")
    raise AssertionError("unreachable")


def _reorder_stmt(prog: ConcreteProgram, s: Stmt, vs: list[IndexVar], why: str) -> Stmt:
    if isinstance(s, Forall) and s.var in vs:
        frames, _ = _chain(prog, s, set(vs), why, False)
        current = [f.var for f in frames if f.var in vs]
        if current == vs:
            return s
        frames, body = _chain(prog, s, set(vs), why, True)
        order = iter(vs)
        by_var = {f.var: f for f in frames}
        new = [by_var[next(order)] if f.var in vs else f for f in frames]
        for f in reversed(new):
            body = replace(f, body=body)
        return body
    if isinstance(s, Forall):
        return replace(s, body=_reorder_stmt(prog, s.body, vs, why))
    if isinstance(s, Where):
        return Where(_reorder_stmt(prog, s.consumer, vs, why), _reorder_stmt(prog, s.producer, vs, why))
    if isinstance(s, Sequence):
        return Sequence(_reorder_stmt(prog, s.define, vs, why), _reorder_stmt(prog, s.mutate, vs, why))
    if isinstance(s, Multi):
        return Multi(_reorder_stmt(prog, s.left, vs, why), _reorder_stmt(prog, s.right, vs, why))
    return s


def _bound(prog: ConcreteProgram, cmd: Command, i: Any, ib: Any, value: Any, kind: Any) -> ConcreteProgram:
    v = _loop(prog, cmd, i)
    (vb,) = _fresh(prog, cmd, ib)
    if kind not in BOUND_KINDS:
        raise ScheduleError(f"{cmd}: bound kind must be one of {', '.join(BOUND_KINDS)}, got {kind!r}")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BOUND:
        raise ScheduleError(f"{cmd}: the bound must be an integer from 0 to {MAX_BOUND}, got {value!r}")
    if isinstance(Provenance(prog.env.relations).defining(v), (Pos, Fuse, Coord)):
        raise ScheduleError(f"{cmd}: {v} walks positions or fused pairs, whose extent is not known "
                            "before the kernel runs; bound a coordinate or a split piece")
    return _with(prog, _map_loops(prog.stmt, v, lambda f: replace(f, var=vb)), Bound(v, vb, value, kind))


def _unroll(prog: ConcreteProgram, cmd: Command, i: Any, factor: Any) -> ConcreteProgram:
    v = _loop(prog, cmd, i)
    n = _positive(cmd, factor, "the unroll factor", MAX_UNROLL)
    return _with(prog, _map_loops(prog.stmt, v, lambda f: replace(f, unroll=n)))


MERGE_STRATEGIES = ("TwoFinger", "Gallop")


def _mergeby(prog: ConcreteProgram, cmd: Command, i: Any, strategy: Any) -> ConcreteProgram:
    v = _loop(prog, cmd, i)
    if strategy not in MERGE_STRATEGIES:
        raise ScheduleError(f"{cmd}: the merge strategy must be one of {', '.join(MERGE_STRATEGIES)}")
    return _with(prog, _map_loops(prog.stmt, v, lambda f: replace(f, merge=strategy)))


_CHUNKING = re.compile(r"(static|dynamic)(,\s*[1-9][0-9]*)?\Z")


def _parallelize(prog: ConcreteProgram, cmd: Command, i: Any, unit: Any, race: Any,
                 chunking: Any = "", chunk: Any = None) -> ConcreteProgram:
    v = _loop(prog, cmd, i)
    if unit not in PARALLEL_UNITS:
        raise ScheduleError(f"{cmd}: parallel unit must be one of {', '.join(PARALLEL_UNITS)}")
    if race not in RACE_STRATEGIES:
        raise ScheduleError(f"{cmd}: race strategy must be one of {', '.join(RACE_STRATEGIES)}")
    if chunk is not None:
        chunking = f"{chunking},{chunk}"
    if chunking and not _CHUNKING.match(str(chunking)):
        raise ScheduleError(f"{cmd}: chunking must be 'static', 'dynamic' or 'dynamic,N', got {chunking!r}")
    prov = Provenance(prog.env.relations)
    scattering = scatter_loops(prog.stmt, prog.tensors)
    shared = shared_pattern(prog) is not None
    for loop in (s for s in walk_stmts(prog.stmt) if isinstance(s, Forall) and s.var == v):
        check_races(prov, loop, prog.tensors, unit, race, str(cmd), scatters=id(loop) in scattering,
                    shared=shared)
        inner = {s.unit for s in walk_stmts(loop.body) if isinstance(s, Forall)}
        if unit == "CPUVector" and "CPUThread" in inner:
            raise ScheduleError(f"{cmd}: a vector loop cannot contain a thread-parallel loop")
    for path, loop in _loops_with_paths(prog.stmt):
        if loop.var == v and unit == "CPUThread" and any(f.unit == "CPUVector" for f in path):
            raise ScheduleError(f"{cmd}: a thread-parallel loop cannot run inside a vector loop")
    stmt = _map_loops(prog.stmt, v, lambda f: replace(f, unit=unit, race=race, chunking=str(chunking)))
    return _with(prog, stmt)


def _loops_with_paths(s: Stmt, path: tuple[Forall, ...] = ()):
    """(enclosing loops, loop) for every loop."""
    if isinstance(s, Forall):
        yield path, s
        yield from _loops_with_paths(s.body, path + (s,))
    for child in _children(s):
        yield from _loops_with_paths(child, path)


def check_races(prov: Provenance, loop: Forall, decls, unit: str, race: str, why: str,
                scatters: bool = False, shared: bool = False) -> None:
    """The race strategy's preconditions for running ``loop`` in parallel; ``scatters``:
    the loop may give its threads sparse workspaces of their own (:func:`scatter_loops`);
    ``shared``: the result is written at an operand's positions (:func:`shared_pattern`, on
    the C back end's threads)."""
    if unit == "NotParallel":
        return
    # rows of a CSR-like, DCSR, COO or CSF result are assembled into per-thread buffers
    # (workspaces too)
    rows = unit == "CPUThread" and prov.defining(loop.var) is None and row_assembly(loop, decls)
    shared = shared and unit == "CPUThread"
    for s in walk_stmts(loop.body):
        decl = decls[s.lhs.tensor] if isinstance(s, Assign) else None
        if decl is not None and decl.role == "result" and not (rows or shared or random_writes(decl)):
            raise ScheduleError(f"{why}: iterations would append to the sparse result "
                                f"{decl.name} ({decl.format}) concurrently; results are assembled "
                                "in parallel only by the loop over their first mode, when that "
                                "level is compressed (DCSR, COO, CSF) or dense above a compressed one (CSR)")
    for r in races(prov, loop, decls):
        if r.role == "workspace" and (rows or (scatters and unit == "CPUThread"
                                               and decls[r.access.tensor].policy is not None)):
            continue
        if r.role == "workspace":
            raise ScheduleError(f"{why}: the workspace {r.access.tensor} is shared by all iterations")
        if race == "NoRaces":
            raise ScheduleError(f"{why}: iterations race on {r.access}, which is reduced over "
                                f"{loop.var} (use Atomics, Temporary or ParallelReduction)")
        if race != "IgnoreRaces" and not r.accumulate:
            raise ScheduleError(f"{why}: iterations race on {r.access}, which is assigned, not reduced")


def _precompute(prog: ConcreteProgram, cmd: Command, expr: Any, i: Any, iw: Any, ws: Any,
                fmt: Any = "") -> ConcreteProgram:
    if isinstance(expr, str):
        from ..notation.parser import parse_expr

        expr = parse_expr(expr)
    if fmt not in ("", DENSE, *policy_names()):
        raise ScheduleError(f"{cmd}: unknown workspace format {fmt!r}; choose one of "
                            f"{', '.join(policy_names())}")
    # TACO's precompute(e, {i,j}, {iw,jw}, w) takes sets of variables; one may go bare
    vs, ws_vars = _var_names(i), _var_names(iw)
    if not vs or len(vs) != len(ws_vars):
        raise ScheduleError(f"{cmd}: give as many workspace variables as loop variables "
                            f"({len(vs)} and {len(ws_vars)})")
    inserted = _inserted_workspace(prog, expr)
    if inserted is not None:
        return _take_workspace(prog, cmd, inserted, vs, ws_vars, ws, fmt)
    loop_vars = [_loop(prog, cmd, n) for n in vs]
    if len(set(loop_vars)) != len(loop_vars):
        raise ScheduleError(f"{cmd}: the loop variables must be distinct")
    renamed = [n for n, m in zip(vs, ws_vars) if n != m]
    fresh = dict(zip(renamed, _fresh(prog, cmd, *[m for n, m in zip(vs, ws_vars) if n != m])))
    w_vars = [fresh.get(n, IndexVar(n)) for n in vs]
    prov = Provenance(prog.env.relations)
    if any(prov.defining(v) is not None for v in loop_vars):
        if len(loop_vars) != 1 or fmt not in ("", DENSE):
            raise ScheduleError(f"{cmd}: a workspace over a derived variable is dense and takes "
                                "that one variable")
        return _precompute_derived(prog, cmd, expr, loop_vars[0], w_vars[0], ws)
    if not isinstance(ws, str) or not _NAME.match(ws) or ws in prog.tensors:
        raise ScheduleError(f"{cmd}: the workspace needs a new tensor name, got {ws!r}")
    over = set(loop_vars)
    names = ", ".join(v.name for v in loop_vars)
    rhs_ws = Access(ws, tuple(loop_vars))
    hits = [(loops, s, rhs) for loops, s in _paths(prog.stmt)
            if over <= set(loops) and (rhs := _with_workspace(s.rhs, expr, rhs_ws)) is not None]
    if len(hits) != 1:
        raise ScheduleError(f"{cmd}: {expr} must be a product of factors, or a sub-expression, of "
                            f"exactly one assignment inside the loops over {names} (found {len(hits)})")
    loops, target, consumer_rhs = hits[0]
    vars_expr = {u for a in accesses(expr) for u in a.indices}
    vars_rest = set(target.lhs.indices) | {u for a in accesses(consumer_rhs) if a.tensor != ws for u in a.indices}
    if not over <= vars_expr:
        raise ScheduleError(f"{cmd}: {expr} is not indexed by {', '.join(sorted(v.name for v in over - vars_expr))}")
    # the where goes around the perfect nest of loops right above the target; loops above
    # that nest (outside a scalar temporary's where, say) enclose it, and their variables
    # are fixed for the producer (a workspace variable among them indexes a slice per
    # iteration)
    enclosing = _frames_to(prog.stmt, target, str(cmd))
    nest = len(enclosing)
    while nest > 0 and enclosing[nest - 1].body is (enclosing[nest] if nest < len(enclosing) else target):
        nest -= 1
    nested = {f.var for f in enclosing[nest:]}
    # summed inside the workspace's producer; never a workspace variable, which indexes the
    # workspace the consumer reads (a whole dot product precomputed: the consumer still
    # sums w(i) over i)
    reduced = vars_expr - vars_rest - over - {f.var for f in enclosing[:nest]}
    shared = (vars_expr & vars_rest) - over
    start = min((loops.index(u) for u in reduced | (over & nested)), default=len(loops))
    if shared & set(loops[start:]):
        # the producer cannot sum inside: TACO's placement, the where at the workspace
        # variables' loops, every other variable of the expression bound above them
        start = min((loops.index(u) for u in over & nested), default=len(loops))
        reduced = set()
        inner = {u for u in vars_expr - over if loops.index(u) >= start}
        if inner:
            raise ScheduleError(f"{cmd}: {expr} and the rest of {target} share the inner loop(s) "
                                f"{', '.join(sorted(u.name for u in shared & set(loops[start:]) or inner))}")
    consumer: Stmt = Assign(target.lhs, consumer_rhs, target.accumulate)
    frames = enclosing[start:]
    # the producer's own loops take the workspace variables; a variable whose loop
    # encloses the where keeps its name (the producer runs inside that loop)
    to_w = {v: w for v, w in zip(loop_vars, w_vars) if v in {f.var for f in frames}}
    w_vars = [to_w.get(v, v) for v in loop_vars]
    producer_expr = expr
    for v, w in to_w.items():
        producer_expr = rename_index(producer_expr, v, w)
    producer: Stmt = Assign(Access(ws, tuple(w_vars)), producer_expr, True)
    for f in reversed(frames):
        if f.var not in reduced:
            consumer = replace(f, body=consumer)
        if f.var in vars_expr:
            producer = replace(f, var=to_w.get(f.var, f.var), body=producer)
    new = Where(consumer, producer)
    stmt = _replace_at(prog.stmt, frames[0] if frames else target, new)
    result = prog.tensors[prog.result]
    if fmt in ("", DENSE):
        decl = TensorDecl(ws, dense(len(w_vars)), result.dtype, "temp", tuple(w_vars))
    else:
        decl = TensorDecl(ws, coo(len(w_vars)), result.dtype, "workspace", tuple(w_vars), policy=fmt)
    return _with(prog, stmt, tensors={**prog.tensors, ws: decl})


def _with_workspace(rhs: Expr, expr: Expr, ws: Access) -> Expr | None:
    """``rhs`` with ``expr`` read from the workspace access ``ws``: when ``expr``'s factors
    are among ``rhs``'s (in any order), the remaining factors times ``ws``; else when
    ``expr`` is a sub-expression of ``rhs`` (a sum's terms, say), ``rhs`` with it replaced;
    else None."""
    want = Counter(str(f) for f in factors(expr))
    if not want - Counter(str(f) for f in factors(rhs)):
        rest = list(factors(rhs))
        for f in factors(expr):
            rest.remove(next(x for x in rest if str(x) == str(f)))
        return _product(rest + [ws]) if rest else ws
    if not any(str(x) == str(expr) for x in walk(rhs)):
        return None

    def swap(e: Expr) -> Expr:
        return ws if str(e) == str(expr) else with_children(e, [swap(c) for c in children(e)])

    return swap(rhs)


def _var_names(arg: Any) -> tuple[Any, ...]:
    """A precompute's variable argument as a tuple: one name, or a set of them."""
    return tuple(arg) if isinstance(arg, (tuple, list)) else (arg,)


def _inserted_workspace(prog: ConcreteProgram, expr: Expr) -> TensorDecl | None:
    """The workspace coiter inserted for a scattered result (see concretize) whose producer
    computes ``expr``, if there is one."""
    want = Counter(str(f) for f in factors(expr))
    for s in walk_stmts(prog.stmt):
        if not isinstance(s, Where):
            continue
        for a in walk_stmts(s.producer):
            decl = prog.tensors[a.lhs.tensor] if isinstance(a, Assign) else None
            if decl is not None and decl.role == "workspace" and \
                    Counter(str(f) for f in factors(a.rhs)) == want:
                return decl
    return None


def _take_workspace(prog: ConcreteProgram, cmd: Command, decl: TensorDecl, vs: tuple[Any, ...],
                    ws_vars: tuple[Any, ...], ws: Any, fmt: str) -> ConcreteProgram:
    """``precompute`` of an expression that already sits in the workspace coiter inserts
    for a scattered result (SpGEMM's row, or the outer product's whole result): that
    workspace takes the name ``ws`` and, when given, the format ``fmt`` (dense, or an
    insert-sort-merge policy); its loops stay."""
    if not isinstance(ws, str) or not _NAME.match(ws) or ws in prog.tensors:
        raise ScheduleError(f"{cmd}: the workspace needs a new tensor name, got {ws!r}")
    modes = ", ".join(m.name for m in decl.modes)
    if ws_vars != vs or not set(vs) <= {m.name for m in decl.modes}:
        raise ScheduleError(f"{cmd}: {cmd.args[0]} is already computed into a workspace over "
                            f"({modes}); precompute it over one of those variables, unrenamed")
    new = replace(decl, name=ws)
    if fmt == DENSE and decl.policy is not None:
        last = prog.tensors[prog.result].format.levels[-1]
        if len(decl.modes) != 1 or not last.unique:
            raise ScheduleError(f"{cmd}: a dense workspace over ({modes}) would be the whole "
                                "result; choose a sparse one (" + ", ".join(p for p in policy_names() if p != DENSE) + ")")
        new = replace(new, format=Format([WorkspaceList(ordered=last.ordered)]), policy=None)
    elif fmt not in ("", DENSE):
        new = replace(new, format=coo(len(decl.modes)), policy=fmt)
    stmt = _rename_tensor(prog.stmt, decl.name, ws)
    tensors = {(ws if n == decl.name else n): (new if n == decl.name else d) for n, d in prog.tensors.items()}
    return _with(prog, stmt, tensors=tensors)


def _rename_tensor(s: Stmt, old: str, new: str) -> Stmt:
    """``s`` with every access of tensor ``old`` naming ``new``."""
    def expr(e: Expr) -> Expr:
        return map_accesses(e, lambda a: replace(a, tensor=new) if a.tensor == old else a)

    if isinstance(s, Assign):
        return replace(s, lhs=expr(s.lhs), rhs=expr(s.rhs))
    if isinstance(s, Forall):
        return replace(s, body=_rename_tensor(s.body, old, new))
    return type(s)(*(_rename_tensor(c, old, new) for c in _children(s)))


def _precompute_derived(prog: ConcreteProgram, cmd: Command, expr: Expr, v: IndexVar,
                        vw: IndexVar, ws: Any) -> ConcreteProgram:
    """``expr`` over a derived loop ``v`` (a piece of positions, say) into a workspace indexed
    by ``v``'s values: the producer loop ``vw`` walks them again, recovering the same
    coordinates (the GPU SpMV's per-thread registers). Exactly one loop over ``v`` must
    directly hold an assignment with ``expr`` among its factors (after one precompute, the
    producer's loop over ``v`` is another: TACO's tile_dotProduct precomputes both factors)."""
    if not isinstance(ws, str) or not _NAME.match(ws) or ws in prog.tensors:
        raise ScheduleError(f"{cmd}: the workspace needs a new tensor name, got {ws!r}")
    wanted = Counter(str(f) for f in factors(expr))
    loops = [s for s in walk_stmts(prog.stmt) if isinstance(s, Forall) and s.var == v
             and isinstance(s.body, Assign) and not wanted - Counter(str(f) for f in factors(s.body.rhs))]
    if len(loops) != 1:
        raise ScheduleError(f"{cmd}: the loop over the derived variable {v} must directly hold one "
                            f"assignment with the factors of {expr}")
    target = loops[0].body
    assert isinstance(target, Assign)
    rest = list(factors(target.rhs))
    for f in factors(expr):
        rest.remove(next(x for x in rest if str(x) == str(f)))
    w_v = Access(ws, (v,))
    consumer = replace(loops[0], body=Assign(target.lhs, _product(rest + [w_v]) if rest else w_v,
                                             target.accumulate))
    producer = Forall(vw, Assign(Access(ws, (vw,)), expr, True))
    stmt = _replace_at(prog.stmt, loops[0], Where(consumer, producer))
    decl = TensorDecl(ws, dense(1), prog.tensors[prog.result].dtype, "temp", (v,))
    relations = (Precomputed(v, vw),) if vw != v else ()
    return _with(prog, stmt, *relations, tensors={**prog.tensors, ws: decl})


def _frames_to(s: Stmt, target: Assign, why: str) -> list[Forall]:
    """The loops enclosing ``target``, which must form a perfect nest below where the
    precomputation goes."""
    if s is target:
        return []
    if isinstance(s, Forall):
        inner = _frames_to(s.body, target, why)
        return [s] + inner if inner is not None else None  # type: ignore[return-value]
    for child in _children(s):
        inner = _frames_to(child, target, why)
        if inner is not None:
            return inner
    return None  # type: ignore[return-value]


def _children(s: Stmt) -> tuple[Stmt, ...]:
    if isinstance(s, Where):
        return (s.consumer, s.producer)
    if isinstance(s, Sequence):
        return (s.define, s.mutate)
    if isinstance(s, Multi):
        return (s.left, s.right)
    return ()


def _replace_at(s: Stmt, old: Stmt, new: Stmt) -> Stmt:
    if s is old:
        return new
    if isinstance(s, Forall):
        return replace(s, body=_replace_at(s.body, old, new))
    if isinstance(s, (Where, Sequence, Multi)):
        return type(s)(*(_replace_at(c, old, new) for c in _children(s)))
    return s


TRANSFORMS: dict[str, Callable[..., ConcreteProgram]] = {
    "reorder": _reorder, "split": _split, "divide": _divide, "fuse": _fuse, "pos": _pos,
    "coord": _coord, "precompute": _precompute, "bound": _bound, "unroll": _unroll,
    "mergeby": _mergeby, "parallelize": _parallelize,
}
