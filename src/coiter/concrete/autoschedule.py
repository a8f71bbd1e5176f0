"""The heuristic autoscheduler (Senanayake et al. 2020, §6): schedule templates.

Two stages, as in the paper, with its CPU pruning rules:

1. *partition* — no split; a coordinate split of the outermost loop (never of a
   compressed dimension); or, when the loop below it walks a sparse operand, a
   collapse of the two into that operand's position space, always split (static
   load balance). No double splits.
2. *order and parallelize* — only the outermost loop runs on threads (the split's
   outer piece), with the cheapest race strategy that is legal: NoRaces, else
   Atomics; sparse tensors are never iterated out of order (reorders that would are
   refused by the transformations' own preconditions).

For GPUs (``target="cuda"``) the paper's GPU rules keep only load-balanced templates
with constant-size thread and warp loops: the collapsed position space cut into
blocks, warps and threads with a fixed number of nonzeros per thread (Fig. 2e).

A template leaves its sizes open; :func:`templates` instantiates each with a few
sizes. Invalid instances are pruned by applying them: every command checks its
preconditions.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScheduleError
from .commands import Command, parse_commands
from .schedule import apply
from .stmt import Assign, ConcreteProgram, Forall, Where, walk_stmts

SPLIT_SIZES = (16, 256)
NNZ_PER_THREAD = (4, 8, 16)
WARPS_PER_BLOCK = 8
POS_SIZES = (512, 4096)
CHUNKINGS = ("dynamic,1", "static")


@dataclass(frozen=True)
class Candidate:
    """One instantiated template: its commands and the program they give."""

    commands: tuple[Command, ...]
    program: ConcreteProgram

    def __str__(self) -> str:
        return ",".join(str(c) for c in self.commands) or "default"


def _nested(f: Forall) -> Forall | None:
    """The loop directly inside ``f`` (through the consumer or producer of a where)."""
    body = f.body
    if isinstance(body, Forall):
        return body
    if isinstance(body, Where) and isinstance(body.producer, Forall):
        return body.producer
    return None


def _sparse_operand(prog: ConcreteProgram, i, j) -> str | None:
    """An input access whose first two storage levels are ``i`` then a walked ``j``."""
    for s in walk_stmts(prog.stmt):
        if not isinstance(s, Assign):
            continue
        from ..notation.ast import accesses

        for a in accesses(s.rhs):
            decl = prog.tensors[a.tensor]
            fmt = decl.format
            if decl.role != "input" or fmt.order < 2 or fmt.layout is not None:
                continue
            if a.indices[fmt.ordering[0]] == i and a.indices[fmt.ordering[1]] == j \
                    and fmt.levels[1].has_pos_iter and not fmt.levels[1].full:
                return str(a)
    return None


def _spellings(prog: ConcreteProgram) -> list[str]:
    f = prog.stmt
    if not isinstance(f, Forall):
        return []
    i = f.var.name
    out = []
    for race in ("NoRaces", "Atomics"):
        for b in SPLIT_SIZES:
            for chunk in CHUNKINGS:
                out.append(f"split({i},{i}0,{i}1,{b}),parallelize({i}0,CPUThread,{race},{chunk})")
    inner = _nested(f)
    access = _sparse_operand(prog, f.var, inner.var) if inner is not None else None
    if access is not None:
        j = inner.var.name
        for race in ("NoRaces", "Atomics"):
            for b in POS_SIZES:
                out.append(f"fuse({i},{j},coiter_f),pos(coiter_f,coiter_fp,{access}),"
                           f"split(coiter_fp,coiter_fp0,coiter_fp1,{b}),"
                           f"parallelize(coiter_fp0,CPUThread,{race},static)")
    return out


def _gpu_spellings(prog: ConcreteProgram) -> list[str]:
    f = prog.stmt
    inner = _nested(f) if isinstance(f, Forall) else None
    access = _sparse_operand(prog, f.var, inner.var) if inner is not None else None
    if access is None:
        return []
    i, j = f.var.name, inner.var.name
    out = []
    for n in NNZ_PER_THREAD:
        out.append(f"fuse({i},{j},coiter_f),pos(coiter_f,coiter_fp,{access}),"
                   f"split(coiter_fp,block,coiter_fp1,{n * 32 * WARPS_PER_BLOCK}),"
                   f"split(coiter_fp1,warp,coiter_fp2,{n * 32}),split(coiter_fp2,thread,thread_nz,{n}),"
                   "reorder(block,warp,thread,thread_nz),parallelize(block,GPUBlock,IgnoreRaces),"
                   "parallelize(warp,GPUWarp,IgnoreRaces),parallelize(thread,GPUThread,Atomics)")
    return out


def templates(prog: ConcreteProgram, target: str = "c") -> list[Candidate]:
    """Every legal instance of the templates for ``prog`` on ``target``, after the default
    schedule on the CPU (a GPU kernel needs a GPU schedule).

    Where NoRaces is legal the Atomics variant is redundant and dropped."""
    out = [Candidate((), prog)] if target == "c" else []
    seen: set[str] = set()
    for text in _spellings(prog) if target == "c" else _gpu_spellings(prog):
        key = text.replace("Atomics", "NoRaces")
        if key in seen:
            continue
        commands = parse_commands(text)
        try:
            p = prog
            for c in commands:
                p = apply(p, c)
        except ScheduleError:
            continue
        seen.add(key)
        out.append(Candidate(commands, p))
    return out
