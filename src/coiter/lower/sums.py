"""Partial sums for operands whose runs of positions are long.

A sparse row sum ``t += A_vals[p] * x_vals[A2_crd[p]]`` is a chain of dependent additions:
each waits for the one before, so on long rows the adder's latency, not memory, bounds the
loop. Four partial sums (position ``p + k`` of each group of four adds into partial ``k``),
added as ``(t + t_1) + (t_2 + t_3)`` after the row, let four chains run at once.

The order of every sum is still fixed by the operand alone (its positions, never threads,
addresses or alignment), so results repeat bit for bit at any thread count; they may differ
from a one-by-one sum in the last bits, as a different fixed order does.

On short rows the grouped loop's test and exit cost more than the chains save: a per-row
test (split rows of 16 entries or more) made power-law graphs with ~12 entries a row 10-20%
slower, its branch mispredicted. So the choice is per operand: runs that average at least
``SPLIT_MIN_AVERAGE`` positions take the grouped loop, every run. The test is a flag computed
before the loops, and each statement of the kernel's body whose loops split on one flag is
versioned on it (``if (A2_long_runs) { split loops } else { plain loops }``): testing the
flag in every row still cost SpMV on rows of ~8 entries 5-7%. In a C harness, CSR SpMV at 1 thread (microseconds, plain -> split):
bcsstk33 342 -> 220, bcsstk16 163 -> 110, mbeacxc 41 -> 24, lp_fit2d 124 -> 70, ego-Facebook
118 -> 80, s3rmt3m3 102 -> 85; inputs averaging under 16 a row take the plain loop.

Operands whose runs are short (1.3 to 6 positions on average) get a third version of the
statement, whose runs of up to four positions are summed without a loop (:mod:`.short_runs`);
where they average under 2.25 a fourth version, tested before it, sums eight rows at once
(:mod:`.tiny_runs`) where the loop around the runs does nothing else. Each flag also
requires what makes its helper pay (C prelude): the eight-row helper AVX-512
(``COITER_TINY_RUNS``; it gathers x where gathers are fast and reads it by scalar loads on AMD
Zen), the short-run one fast gathers or AVX2's plain loads (``COITER_SHORT_RUNS``), and with
plain loads run lengths that repeated calls would not teach the loop's exit branch
(``coiter_runs_unlearned``).

Sums of double or float products of a gathered vector (SpMV's, TTV's) whose runs average
7.5 or more and vary in length, or average 16 or more, take a fifth version, tested first,
instead of the split: each run summed in eight vector lanes by a helper call (:mod:`.vector_runs`),
faster than the plain loop there and than the four partial sums on every input measured.
"""
from __future__ import annotations

from fractions import Fraction

from ..ir.nodes import (
    Assign, Bin, Block, Call, Const, Decl, For, If, IRExpr, IRStmt, Label, Load, Un, Var, While,
    add, block,
)
from ..ir.rewrite import map_loops
from ..ir.visit import declared, names, subexprs, substitute, used, walk, walk_regions
from .short_runs import ShortRunSums
from .tiny_runs import TINY_AVERAGE, TinyRunRows
from .vector_runs import VECTOR_MIN_AVERAGE, VectorRunSums

LANES = 4  # partial sums
SPLIT_MIN_AVERAGE = 16  # positions per run, on average, from which an operand's sums split
# positions per run, on average, from and below which runs of up to four positions are summed
# without a loop (.short_runs): under 1.3 nearly every run holds one position, which the loop
# predicts (100k runs, a random 10% of them 2-4 long and the rest single, 1.2 a run: the loop
# 1.2x faster at 1 thread; 15%, 1.3 a run: even; 20%: the helper 1.4x faster); from 6, few runs
# are that short and testing them cost bayer10's SpMV (7.1 a row) 6% at 1 thread
SHORT_AVERAGES = (Fraction(13, 10), 6)
FLOATING = ("float", "double", "float _Complex", "double _Complex")


def split_long_sums(s: IRStmt, pos_lengths: dict[str, IRExpr],
                    short: ShortRunSums | None = None, tiny: TinyRunRows | None = None,
                    vector: VectorRunSums | None = None) -> IRStmt:
    """``s`` with every innermost loop over a run ``pos[e] .. pos[e+1]`` of an array in
    ``pos_lengths`` (its element count) whose body declares values and adds one into a
    floating-point scalar split into :data:`LANES` partial sums, when the runs of that array
    average at least :data:`SPLIT_MIN_AVERAGE` positions. Where their average lies within
    :data:`SHORT_AVERAGES`, ``short`` (if given) rewrites those loops instead
    (:mod:`.short_runs`), and below :data:`.tiny_runs.TINY_AVERAGE` ``tiny`` (if given)
    rewrites the loops around them (:mod:`.tiny_runs`; that version runs only where the vectors
    it gathers are near). From :data:`.vector_runs.VECTOR_MIN_AVERAGE` on, ``vector`` (if
    given) rewrites the loops it takes (double products of a gathered vector,
    :mod:`.vector_runs`) instead of splitting them: a statement all of whose loops over the
    operand's runs it takes loses its split version."""
    splitter = _Splitter(pos_lengths, declared(s) | used(s), short, tiny, vector)
    scope: dict[str, str] = {}
    out: list[IRStmt] = []
    for x in block(s).stmts:
        out.append(splitter.version(x, scope))
        if isinstance(x, Decl):
            scope[x.name] = x.ctype
    return block([Decl("int64_t", name, count) for name, count in splitter.stored.values()],
                 [Decl("bool", flag, test) for flag, test in splitter.flags.values()], out)


class _Splitter:
    def __init__(self, pos_lengths: dict[str, IRExpr], taken: set[str],
                 short: ShortRunSums | None, tiny: TinyRunRows | None,
                 vector: VectorRunSums | None) -> None:
        self.pos_lengths = pos_lengths
        self.taken = taken
        self.short = short
        self.tiny = tiny
        self.vector = vector
        # per pos array and kind ("vector", "long", "short", "tiny"): the flag declared before
        # the loops that says its runs are that long
        self.flags: dict[tuple[str, str], tuple[str, IRExpr]] = {}
        # per pos array whose short runs the helper sums: the variable declared before the
        # loops that holds the positions its runs cover (the helper's bound; read once, not
        # per run: a CSF tensor's is a chain of loads)
        self.stored: dict[str, tuple[str, IRExpr]] = {}
        # True: each split loop tests its flag; False: loops split unconditionally and
        # their pos arrays gather in ``split_on`` (the caller versions the statement)
        self.conditional = False
        self.split_on: set[str] = set()

    def version(self, s: IRStmt, scope: dict[str, str]) -> IRStmt:
        """``s`` as ``if (vector flag) { s's runs summed in lanes } else if (long flag) { s
        split } else if (tiny flag) { s's rows eight at once } else if (short flag) { s's short
        runs rewritten } else { s }`` when its loops split on one operand's flag (without the
        long version where the lanes take every loop); with several, or labels (which must not
        repeat), each split loop tests its own flags and short runs keep their loops."""
        self.split_on = set()
        split = self.stmt(s, scope)
        if not self.split_on:
            return s
        if len(self.split_on) == 1 and not any(isinstance(x, Label) for x in walk_regions(s)):
            pos = next(iter(self.split_on))
            plain = s
            if self.short is not None:
                rewrite = self.short  # only loops over this operand's runs (others: no flag)
                stored = self.stored[pos][0] if pos in self.stored \
                    else self._fresh(f"{pos.removesuffix('_pos')}_stored")
                short = map_loops(
                    s, lambda f, sc: rewrite(f, sc, Var(stored)) if _walks(f, pos) else None, scope)
                if short != s:
                    self.taken.add(stored)
                    self.stored[pos] = (stored, Load(pos, _minus_one(self.pos_lengths[pos])))
                    plain = If(Var(self._flag(pos, "short")), block(short), block(s))
            if self.tiny is not None:  # tested first: its range overlaps short's
                rows = self.tiny
                tiny = map_loops(s, lambda f, sc: rows(f, sc) if _around(f, pos) else None, scope)
                if tiny != s:
                    plain = If(Bin("&&", Var(self._flag(pos, "tiny")), rows.near(tiny)),
                               block(tiny), block(plain))
            lanes = self.vector
            vec = s if lanes is None else \
                map_loops(s, lambda f, sc: lanes(f, sc) if _walks(f, pos) else None, scope)
            # the lanes' flag holds wherever the split's does (runs of 16 or more on average):
            # the split version stays only for loops the lanes left
            if vec == s or any(isinstance(x, For) and _walks(x, pos) for x in walk(vec)):
                plain = If(Var(self._flag(pos, "long")), block(split), block(plain))
            if vec == s:
                return plain
            return If(Var(self._flag(pos, "vector")), block(vec), block(plain))
        self.conditional = True
        try:
            return self.stmt(s, scope)
        finally:
            self.conditional = False

    def stmt(self, s: IRStmt, scope: dict[str, str]) -> IRStmt:
        """``s`` transformed; ``scope`` maps the variables declared around it to their types."""
        return map_loops(s, self._split, scope)

    def _split(self, f: For, scope: dict[str, str]) -> IRStmt | None:
        start, end = f.start, f.end
        if f.pragma or f.unroll or f.unit or not isinstance(start, Load) \
                or start.array not in self.pos_lengths or not _walks(f, start.array):
            return None
        if self.conditional and self.vector is not None \
                and (lanes := self.vector(f, scope)) is not None:
            # runs of 16 or more on average take the lanes too: no split version
            return If(Var(self._flag(start.array, "vector")), block(lanes), Block((f,)))
        *values, last = f.body.stmts or (None,)
        if not (isinstance(last, Assign) and last.op == "+=" and isinstance(last.target, Var)
                and scope.get(last.target.name) in FLOATING):
            return None
        total = last.target.name
        if not all(isinstance(d, Decl) and d.init is not None and d.name != total for d in values):
            return None
        read = [d.init for d in values] + [last.value]
        if any(isinstance(x, Call) for e in read for x in subexprs(e)) \
                or any(total in names(e) for e in read):
            return None  # a call may have effects; the sum must not read itself
        lanes = [total] + [self._fresh(f"{total}_{k}") for k in range(1, LANES)]
        copies = [self._lane(f.body, f.var, k, total, lanes[k]) for k in range(LANES)]
        grouped = While(Bin("<", add(Var(f.var), Const(LANES - 1)), end),
                        block(copies, Assign(Var(f.var), Const(LANES), "+=")))
        tree: list[IRExpr] = [Var(lane) for lane in lanes]
        while len(tree) > 1:  # pairwise: (t + t_1) + (t_2 + t_3)
            tree = [Bin("+", *tree[i:i + 2]) if i + 1 < len(tree) else tree[i]
                    for i in range(0, len(tree), 2)]
        split = block(Decl(f.ctype, f.var, start),
                      [Decl(scope[total], lane, Const(0)) for lane in lanes[1:]],
                      grouped,
                      Assign(Var(total), tree[0]),
                      For(f.var, f.ctype, None, end, f.body))
        if self.conditional:
            return If(Var(self._flag(start.array)), split, Block((f,)))
        self.split_on.add(start.array)
        return split

    def _flag(self, pos: str, kind: str = "long") -> str:
        if (pos, kind) not in self.flags:
            runs = _minus_one(self.pos_lengths[pos])
            stored = Bin("-", Load(pos, runs), Load(pos, Const(0)))
            if kind == "long":
                test = Bin(">=", stored, Bin("*", Const(SPLIT_MIN_AVERAGE), runs))
            elif kind == "vector":  # from 16 always; from VECTOR_MIN_AVERAGE where runs vary
                # and gathers are fast (elsewhere the loop was faster on such runs)
                least = Bin(">=", Bin("*", Const(VECTOR_MIN_AVERAGE.denominator), stored),
                            Bin("*", Const(VECTOR_MIN_AVERAGE.numerator), runs))
                uneven = Un("!", Call("coiter_runs_even", (Var(pos), runs)))
                test = Bin("||", Bin(">=", stored, Bin("*", Const(SPLIT_MIN_AVERAGE), runs)),
                           Bin("&&", Var("COITER_FAST_GATHER"), Bin("&&", least, uneven)))
            elif kind == "tiny":
                test = Bin("<", Bin("*", Const(TINY_AVERAGE.denominator), stored),
                           Bin("*", Const(TINY_AVERAGE.numerator), runs))
            else:  # SHORT_AVERAGES, in integers
                low, high = SHORT_AVERAGES
                test = Bin("&&", Bin(">=", Bin("*", Const(low.denominator), stored),
                                     Bin("*", Const(low.numerator), runs)),
                           Bin("<", stored, Bin("*", Const(high), runs)))
            if kind == "short":  # runs the loop does not learn (C prelude)
                test = Bin("&&", test, Call("coiter_runs_unlearned",
                                            (runs, stored, Call("COITER_THREADS", ()))))
            if kind in ("short", "tiny"):  # where the helpers pay (C prelude)
                pays = "COITER_TINY_RUNS" if kind == "tiny" else "COITER_SHORT_RUNS"
                test = Bin("&&", Var(pays), test)
            flag = self._fresh(f"{pos.removesuffix('_pos')}_{kind}_runs")
            self.taken.add(flag)
            self.flags[pos, kind] = (flag, test)
        return self.flags[pos, kind][0]

    def _lane(self, body: Block, p: str, k: int, total: str, lane: str) -> list[IRStmt]:
        """The loop body for position ``p + k``, adding into ``lane``; the values it declares
        are renamed apart from the other lanes' (``block`` flattens, so no braces part them)."""
        m: dict[str, IRExpr] = {p: add(Var(p), Const(k)), total: Var(lane)}
        out: list[IRStmt] = []
        for x in body.stmts:
            if isinstance(x, Decl):
                name = x.name if k == 0 else self._fresh(f"{x.name}_{k}")
                out.append(Decl(x.ctype, name, substitute(x.init, m)))
                m[x.name] = Var(name)
            else:
                assert isinstance(x, Assign)
                out.append(Assign(Var(lane), substitute(x.value, m), x.op))
        return out

    def _fresh(self, name: str) -> str:
        """``name``, or with underscores added until no name of the function or flag has it
        (names local to one split loop may repeat in the next)."""
        while name in self.taken:
            name += "_"
        return name


def _walks(f: For, pos: str) -> bool:
    """Whether ``f`` walks one run of ``pos``: ``pos[e] .. pos[e+1]``."""
    return isinstance(f.start, Load) and f.start.array == pos \
        and f.end == Load(pos, add(f.start.index, Const(1)))


def _around(f: For, pos: str) -> bool:
    """Whether a loop right inside ``f``'s body walks one run of ``pos``."""
    return any(isinstance(x, For) and _walks(x, pos) for x in f.body.stmts)


def _minus_one(e: IRExpr) -> IRExpr:
    """``e - 1``, folding an array length written ``n + 1`` back to ``n``."""
    if isinstance(e, Bin) and e.op == "+" and e.b == Const(1):
        return e.a
    return Bin("-", e, Const(1))
