"""Software prefetch for dense arrays read or updated at scattered places, when they are large.

CSR SpMV reads ``x_vals[A2_crd[p]]``: the places are the matrix's column indices, which the
hardware prefetcher cannot foresee. While ``x`` stays in the core's L2 cache that costs
little, but a larger ``x`` makes each read wait for the L3 cache or memory, one row after
another. The places are known ahead, though: they are the next entries of ``A2_crd``. So
the loop over positions fetches the element ``GATHER_AHEAD`` positions ahead
(``__builtin_prefetch(&x_vals[A2_crd[p + 128]])``, for writing where the array is updated,
as CSC SpMV's result is).

On arrays that fit in L2 the extra instructions only cost (SpMV on ego-Twitter, ``x`` of
0.65 MB: 2.71 -> 2.89 ms; on a banded matrix read nearly in order, 2.07 -> 2.29 ms), so the
choice is per array and per call: a flag (``x_far``) computed before the loops says the
array holds at least ``coiter_far_bytes()`` (three times the L2 cache glibc reports, 1 MiB
where it reports none), and each statement of the kernel's body whose loops fetch for one
array is versioned on it (``if (x_far) { loops that prefetch } else { loops }``); statements
with several such arrays, or labels, test the flag in the loop. In a C harness, CSR SpMV
at 1 / 2 threads (ms, plain -> prefetch; L2 of 1 MiB; docs/performance.md has the table):
USA-road-NE (``x`` 12 MB) 15.3 -> 9.9 / 6.6 -> 5.3, USA-road-NW (9.6 MB) 11.7 -> 8.2 /
4.6 -> 4.1, USA-road-COL (3.5 MB) 3.5 -> 2.8 / 1.3 -> 1.4; with ``x`` of 2.0-2.6 MB the change
went either way (USA-road-NY 1.45 -> 1.57, a uniform random matrix 3.9 -> 4.2, a power-law
one 4.1 -> 3.9), hence three times L2. Nor is it fetched where the coordinates directing its
reads stay near each other (the C helper ``coiter_gathers_near`` samples 16 windows of them:
a band matrix's columns, which the hardware prefetcher follows): on a 6M-row band matrix, x
of 48 MB, 63.0 -> 57.2 ms at 1 thread without the fetches, 35.7 -> 31.1 ms at 2.

Runs split into partial sums (:mod:`.sums`) are left alone: their four chains already keep
several reads in flight. Short runs summed by a helper call (:mod:`.short_runs`) fetch, before
the call, the elements at the coordinates ``RUN_AHEAD`` positions past the run's start: three
positions a run, for runs of 1.3 to 6 positions on average. The look-ahead crosses into
later runs, under one test that the farthest lies within the coordinate array, so no load
leaves it; prefetch instructions themselves never fault.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.nodes import (
    Assign, Bin, Block, Call, Const, Decl, ExprStmt, For, If, IRExpr, IRStmt, Label, Load, Un, Var,
    While, add, block, fresh,
)
from ..ir.rewrite import map_loops
from ..ir.visit import declared, exprs, subexprs, used, walk, walk_regions
from .short_runs import run_dot

GATHER_AHEAD = 128  # positions ahead whose element is fetched
# before a short run summed by the helper (.short_runs): the positions ahead of its start
# whose elements are fetched, three for runs of 1.3 to 6 positions (a C harness, SpMV on
# USA-road-NE at 1 thread, ms fetching one, two, three, four: 10.1, 8.2, 6.4, 6.3, and in
# another run none 13.2 against two 8.4; USA-road-FLA 6.1, 5.1, 4.3, 4.3, none 7.4 against 5.0)
RUN_AHEAD = (GATHER_AHEAD, GATHER_AHEAD + 1, GATHER_AHEAD + 2)
FAR_BYTES = "coiter_far_bytes"  # C helper: array size from which reads are fetched ahead
NEAR = "coiter_gathers_near"  # C helper: whether a coordinate array's reads stay near each other


def prefetch_far_gathers(s: IRStmt, crd_lengths: dict[str, IRExpr],
                         dense_bytes: dict[str, IRExpr]) -> IRStmt:
    """``s`` with prefetches in every innermost loop over positions ``p`` whose body reads
    ``j = crd[p]`` (``crd`` in ``crd_lengths``, its element count) and then reads or updates
    an array of ``dense_bytes`` (its size in bytes) at ``[j]``, for the calls where that
    array is large."""
    fetcher = _Fetcher(crd_lengths, dense_bytes, declared(s) | used(s))
    out = [fetcher.version(x) for x in block(s).stmts]
    return block([Decl("bool", flag, fetcher.far(array)) for array, flag in fetcher.flags.items()], out)


class _Fetcher:
    def __init__(self, crd_lengths: dict[str, IRExpr], dense_bytes: dict[str, IRExpr],
                 taken: set[str]) -> None:
        self.crd_lengths = crd_lengths
        self.dense_bytes = dense_bytes
        self.taken = taken
        # per gathered array: the flag declared before the loops that says it is far (see
        # far()), and the coordinate arrays (with their lengths) that direct its reads
        self.flags: dict[str, str] = {}
        self.crds: dict[str, dict[str, IRExpr]] = {}
        # True: each prefetch tests its flag; False: prefetches are unconditional and their
        # arrays gather in ``fetched`` (the caller versions the statement)
        self.conditional = False
        self.fetched: set[str] = set()

    def version(self, s: IRStmt) -> IRStmt:
        """``s`` as ``if (flag) { s with prefetches } else { s }``, looking through blocks and
        branches (the partial-sum versions, the serial/parallel choice) to the outermost
        loops, so that no loop is copied more often than needed."""
        if isinstance(s, Block):
            return replace(s, stmts=tuple(self.version(x) for x in s.stmts))
        if isinstance(s, If):
            other = None if s.otherwise is None else self.version(s.otherwise)
            return replace(s, then=self.version(s.then), otherwise=other)
        self.fetched = set()
        fetching = self.stmt(s)
        if not self.fetched:
            return s
        if len(self.fetched) == 1 and not any(isinstance(x, Label) for x in walk_regions(s)):
            return If(Var(self._flag(next(iter(self.fetched)))), block(fetching), block(s))
        self.conditional = True
        try:
            return self.stmt(s)
        finally:
            self.conditional = False

    def stmt(self, s: IRStmt) -> IRStmt:
        return map_loops(s, lambda f, _: self._fetch(f))

    def _fetch(self, f: For) -> For | None:
        runs = self._fetch_runs(f.body)
        if runs is not f.body:  # the loop's own loops are searched still
            return replace(f, body=map_loops(runs, lambda g, _: self._fetch(g)))
        if f.start is None or f.unit:
            return None  # the remainder of a loop split into partial sums; a GPU loop
        at = next((n for n, x in enumerate(f.body.stmts)
                   if isinstance(x, Decl) and isinstance(x.init, Load)
                   and x.init.index == Var(f.var) and x.init.array in self.crd_lengths), None)
        if at is None:
            return None
        if any(isinstance(x, (For, While)) for x in walk(f.body) if x is not f.body):
            return None  # not innermost: the inner loop's own reads dominate
        coordinate = f.body.stmts[at]
        assert isinstance(coordinate, Decl) and isinstance(coordinate.init, Load)
        crd, j = coordinate.init.array, coordinate.name
        written = {x.target.array for x in walk(f.body)
                   if isinstance(x, Assign) and isinstance(x.target, Load)}
        arrays = sorted({y.array for x in walk(f.body) for e in exprs(x) for y in subexprs(e)
                         if isinstance(y, Load) and y.index == Var(j) and y.array in self.dense_bytes})
        if not arrays:
            return None
        ahead = add(Var(f.var), Const(GATHER_AHEAD))
        fetches: list[IRStmt] = []
        for array in arrays:
            self._directs(array, crd)
            within: IRExpr = Bin("<", ahead, self.crd_lengths[crd])
            if self.conditional:
                within = Bin("&&", Var(self._flag(array)), within)
            else:
                self.fetched.add(array)
            where = Un("&", Load(array, Load(crd, ahead)))
            args = (where, Const(1)) if array in written else (where,)
            fetches.append(If(within, block(ExprStmt(Call("__builtin_prefetch", args)))))
        stmts = f.body.stmts
        return replace(f, body=Block((*stmts[:at + 1], *fetches, *stmts[at + 1:])))

    def _fetch_runs(self, s: IRStmt) -> IRStmt:
        """``s`` (itself if nothing changed) with prefetches before each short-run helper call
        it makes outside loops (:mod:`.short_runs`)."""
        if isinstance(s, Block):
            stmts = tuple(y for x in s.stmts for y in self._run_fetches(x))
            return s if stmts == s.stmts else replace(s, stmts=stmts)
        if isinstance(s, If):
            then = self._fetch_runs(s.then)
            other = None if s.otherwise is None else self._fetch_runs(s.otherwise)
            return s if then is s.then and other is s.otherwise else replace(s, then=then, otherwise=other)
        return s

    def _run_fetches(self, s: IRStmt) -> tuple[IRStmt, ...]:
        """``s`` rewritten by :meth:`_fetch_runs`, or, where it is a short-run helper call,
        preceded by the fetches of the gathered array's elements at the coordinates
        :data:`RUN_AHEAD` positions past the run's start."""
        call = run_dot(s.value) if isinstance(s, Assign) else None
        if call is None:
            return (self._fetch_runs(s),)
        array = call.x
        if array.name not in self.dense_bytes:
            return (s,)
        self._directs(array.name, call.crd.name)
        # one test for all of them (the farthest in range), not one each: SpMV at 2 threads,
        # ms, one test against three: USA-road-FLA 1.77 / 1.89, NW 2.27 / 2.41, NE 3.22 / 3.39
        within: IRExpr = Bin("<", add(call.start, Const(max(RUN_AHEAD))), call.stored)
        if self.conditional:
            within = Bin("&&", Var(self._flag(array.name)), within)
        else:
            self.fetched.add(array.name)
        fetches = [ExprStmt(Call("__builtin_prefetch", (
            Un("&", Load(array.name, Load(call.crd.name, add(call.start, Const(offset))))),)))
            for offset in RUN_AHEAD]
        return (If(within, block(*fetches)), s)

    def _flag(self, array: str) -> str:
        if array not in self.flags:
            self.flags[array] = fresh(f"{array.removesuffix('_vals')}_far", self.taken)
        return self.flags[array]

    def _directs(self, array: str, crd: str) -> None:
        """Note that ``crd`` directs reads of ``array``, for :meth:`far`. Its length is the
        one given for it, an expression of the operand's arrays (the flags are declared before
        any variable the loops' rewrites declare, such as a short-run helper's ``A2_stored``);
        a coordinate array without one is left out of the test, so its reads stay fetched."""
        if crd in self.crd_lengths:
            self.crds.setdefault(array, {})[crd] = self.crd_lengths[crd]

    def far(self, array: str) -> IRExpr:
        """Whether reads of ``array`` are fetched ahead in a call: it holds at least
        ``coiter_far_bytes()``, and the coordinates that direct its reads do not stay near
        each other (``coiter_gathers_near``: a band matrix's columns, which the hardware
        prefetcher follows)."""
        test: IRExpr = Bin(">=", self.dense_bytes[array], Call(FAR_BYTES, ()))
        for crd, length in sorted(self.crds.get(array, {}).items()):
            test = Bin("&&", test, Un("!", Call(NEAR, (Var(crd), length))))
        return test
