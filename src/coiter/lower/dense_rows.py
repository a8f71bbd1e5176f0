"""Dense result rows accumulated in registers, a block of columns at a time.

TTM's ``A(i,j,l) = B(i,j,k) * C(k,l)`` and SpMM's ``C(i,k) = A(i,j) * B(j,k)`` lower to a loop
over the stored positions ``p`` of a row that adds a product into every entry of a dense row
of the result::

    for (p = pos[r]; p < pos[r + 1]; p++) {
      int64_t m = crd[p];
      for (l = 0; l < n; l++) A_vals[base + l] += B_vals[p] * C_vals[m * n + l];
    }

The row's length ``n`` is a run-time value, so the C compiler cannot keep the row in
registers: every position loads and stores all of it, through a vector loop whose trip count
it tests. Blocked, the row goes :data:`ROW_BLOCK` entries at a time through a local array of
constant length, which the compiler keeps in registers: loaded once, every position adds into
registers, stored once; the columns past the last whole block take the loop as it was. A row
of a constant length under a block is one block of its own length. Each entry still adds the
same terms in the same order, starting from its value before the loop, so results are the
same bit for bit. (The C generator marks every loop over positions that ends in such a row
``COITER_ROW_SUM``, so that GCC vectorizes the row and not the positions.)

In a C harness at one thread (rank 16, ms, loop -> blocked; warm caches / flushed caches):
TTM on jf17k-3ary 0.151 -> 0.047 / 0.40 -> 0.17, on wn18rr 0.67 -> 0.42 / 1.97 -> 0.79, on
fb15k-237 2.60 -> 1.29 / 2.80 -> 1.26. Blocks of 16 entries won for float rows too, against
blocks of 32 (the same 128 bytes as 16 doubles) and of 8: SpMM with 32 float columns on a
random 60000-row matrix, 7.9 -> 3.9 ms, 64 columns 16.0 -> 9.2 ms; 8 columns as one block
of 8, 2.3 -> 0.95 ms (docs/performance.md, "Single precision").

A loop whose every iteration zeroes its own row and then sums into it writes the row without
reading it. Where the kernel's parameters give the loop's extent and the row's length, its
blocked loop has a second copy that stores each block by the C prelude's streaming stores
(``coiter_stream_*``), past the caches; a flag computed once per call before the loops
(``coiter_streams``: whether the whole result is large) picks the copy. The C prelude says
when streaming pays and what it saves.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.nodes import (
    ZEROED, Assign, Bin, Block, Call, Const, Decl, ExprStmt, For, If, IRExpr, IRStmt, Load, Var,
    add, block, fresh, mul, sub,
)
from ..ir.rewrite import map_loops
from ..ir.visit import declared, names, subexprs, substitute, used

ROW_BLOCK = 16  # entries per block: two AVX-512 registers of doubles, one of floats
ELEMENT_BYTES = {"double": 8, "float": 4}  # result types whose sums vectorize
STREAM_BYTES = 16  # a streaming store writes 16 aligned bytes: blocks stream in whole ones
# a row sum: (array, row start, row length, update, block width)
RowSums = tuple[str, IRExpr, IRExpr, Assign, int]


def block_dense_rows(s: IRStmt, results: dict[str, str],
                     params: frozenset[str] = frozenset()) -> IRStmt:
    """``s`` with every loop over positions that adds into a dense row of a result array in
    ``results`` (its element type) blocked by :data:`ROW_BLOCK` entries; the rows of a loop
    whose extent and row length ``params`` (the kernel's parameters) give may stream, decided
    at the start of ``s`` (see the module's docstring)."""
    taken = declared(s, regions=True) | used(s, regions=True)
    flags: dict[IRExpr, str] = {}  # whether a loop streams -> the variable that says so

    def rewrite(loop: For, _: dict[str, str]) -> IRStmt | None:
        sums = _row_sums(loop, results)
        if sums is not None:
            return _blocked(loop, sums, results, taken, zeroed=False)
        body = map_loops(_zeroed_rows(loop, results, taken, params, flags), rewrite)
        return replace(loop, body=body)

    out = map_loops(s, rewrite)
    if not flags:
        return out
    return block([Decl("int", name, cond) for cond, name in flags.items()], out,
                 [ExprStmt(Call("coiter_stream_fence", (Var(name),))) for name in flags.values()])


def _stream_flag(loop: For, sums: RowSums, results: dict[str, str], params: frozenset[str],
                 taken: set[str], flags: dict[IRExpr, str]) -> Var | None:
    """The variable that says whether ``loop``, which writes a row of :func:`_row_sums`
    ``sums`` in each iteration, streams its rows; None where the kernel's parameters do not
    give its extent and the row's length, rows of a known length are not whole blocks, or
    a block is not whole streaming stores. Copies of a loop (its parallel and serial copies)
    share one."""
    vals, _, n, _, width = sums
    if loop.start is None or not names(loop.start) | names(loop.end) | names(n) <= params \
            or isinstance(n, Const) and n.value % width \
            or width * ELEMENT_BYTES[results[vals]] % STREAM_BYTES:
        return None  # (coiter_streams would say no to rows that are not whole blocks)
    cond = Call("coiter_streams", (Var(vals), sub(loop.end, loop.start), n,
                                   Const(ELEMENT_BYTES[results[vals]]), Const(width)))
    if cond not in flags:
        flags[cond] = fresh(f"{vals}_stream", taken)
    return Var(flags[cond])


def _zeroed_rows(loop: For, results: dict[str, str], taken: set[str], params: frozenset[str],
                 flags: dict[IRExpr, str]) -> Block:
    """The body of ``loop`` with each row-sum loop whose row an earlier statement of the body
    zeroes, with nothing between reading the row, blocked from zero (its rows streaming
    where :func:`_stream_flag` gives a flag), and the zeroing left to the columns past the
    last whole block."""
    body = loop.body
    stmts: list[IRStmt | None] = list(body.stmts)
    for i, zero in enumerate(body.stmts):
        fill = _zero_fill(zero)
        if fill is None:
            continue
        for j in range(i + 1, len(stmts)):
            x = stmts[j]
            sums = _row_sums(x, results) if isinstance(x, For) else None
            if sums is not None and sums[:3] == fill:
                # a row of a known length is all blocks (its tail one of its own length)
                start = sums[2] if isinstance(sums[2], Const) else _whole_blocks(sums[2], sums[4])
                stmts[i] = None if start == sums[2] else replace(zero, start=start)
                stream = _stream_flag(loop, sums, results, params, taken, flags)
                stmts[j] = _blocked(x, sums, results, taken, zeroed=True, stream=stream)
                break
            if fill[0] in used(x, regions=True):
                break
    # only the statements replaced change: nested blocks keep their C scopes
    return replace(body, stmts=tuple(x for x in stmts if x is not None))


def _zero_fill(s: IRStmt) -> tuple[str, IRExpr, IRExpr] | None:
    """(array, row start, row length) of a loop ``for (q = 0; q < n; q++) vals[base + q] = 0``."""
    if not (isinstance(s, For) and s.pragma is None and s.start == Const(0)
            and len(s.body.stmts) == 1):
        return None
    (fill,) = s.body.stmts
    if not (isinstance(fill, Assign) and fill.op == "=" and isinstance(fill.target, Load)
            and isinstance(fill.value, Const) and fill.value.value == 0):
        return None
    index = fill.target.index
    if not (isinstance(index, Bin) and index.op == "+" and index.b == Var(s.var)) \
            or s.var in names(index.a) | names(s.end):
        return None
    return fill.target.array, index.a, s.end


def _pure(e: IRExpr) -> bool:
    """Whether evaluating ``e`` again changes nothing (no call)."""
    return not any(isinstance(x, Call) for x in subexprs(e))


def _blocks(n: IRExpr, width: int) -> IRExpr:
    """The whole blocks of ``width`` columns in a row of ``n``."""
    return Const(n.value // width) if isinstance(n, Const) else Bin("/", n, Const(width))


def _whole_blocks(n: IRExpr, width: int) -> IRExpr:
    """The first column past the whole blocks of ``width`` columns of a row of ``n``."""
    return mul(_blocks(n, width), Const(width))


def _row_sums(loop: For, results: dict[str, str]) -> RowSums | None:
    """(array, row start, row length, update, block width) of a loop over positions that
    declares values and then adds into one dense row of a result array in ``results``, its
    loop over the row innermost and last (a row of a known length under :data:`ROW_BLOCK` is
    one block); None for any other loop."""
    if loop.pragma is not None or loop.start is None or not loop.body.stmts:
        return None
    *prefix, row = loop.body.stmts
    if not (isinstance(row, For) and row.pragma is None and row.start == Const(0)
            and len(row.body.stmts) == 1):
        return None
    (update,) = row.body.stmts
    if not (isinstance(update, Assign) and update.op == "+=" and isinstance(update.target, Load)):
        return None
    vals, index = update.target.array, update.target.index
    if results.get(vals) not in ELEMENT_BYTES \
            or not (isinstance(index, Bin) and index.op == "+" and index.b == Var(row.var)):
        return None
    base, n = index.a, row.end
    varying = {loop.var, row.var} | declared(loop.body)
    if (names(base) | names(n)) & varying:
        return None  # the row moves, or changes length, within the loop
    # the blocked loops evaluate all of these more often than the loop did
    reads = [update.value, base, n, loop.start, loop.end,
             *(x.init for x in prefix if isinstance(x, Decl))]
    if not all(isinstance(x, Decl) and x.init is not None for x in prefix) \
            or not all(_pure(e) and vals not in names(e) for e in reads):
        return None
    width = n.value if isinstance(n, Const) and n.value < ROW_BLOCK else ROW_BLOCK
    return vals, base, n, update, width


def _blocked(loop: For, sums: RowSums, results: dict[str, str], taken: set[str],
             zeroed: bool, stream: Var | None = None) -> IRStmt:
    """A row-sum loop and its :func:`_row_sums` by blocks of columns summed in a local array, which
    starts from zero where the row was ``zeroed`` before the loop, else from the row, and
    is stored in the row, by the prelude's streaming stores where ``stream`` says so (the
    loop is copied: one copy streams, the other does not); then the columns past the last
    whole block: one block of their number where the row's length is known, else the loop
    as it was."""
    vals, base, n, update, width = sums
    *prefix, row = loop.body.stmts
    # the same names in every copy of a loop: a parallel loop and its serial copy stay alike
    # (codegen/outline.py compiles them once); each block loop scopes its own
    acc, blk = fresh(f"{vals}_row", set(taken)), fresh(f"{row.var}_block", set(taken))
    col = add(mul(Var(blk), Const(width)), Var(row.var))  # the column of block entry row.var

    def over_block(stmt: IRStmt) -> For:
        return For(row.var, row.ctype, Const(0), Const(width), Block((stmt,)))

    entry, local = Load(vals, add(base, col)), Load(acc, Var(row.var))
    added = Assign(local, substitute(update.value, {row.var: col}), "+=")

    def blocks(store: IRStmt) -> For:
        # GCC keeps the local array in registers when it starts from zero; loading the row
        # that a loop just zeroed instead, it shuffled lanes and ran 1.5x slower than no blocking
        return For(blk, "int64_t", Const(0), _blocks(n, width), block(
            Decl(results[vals], f"{acc}[{width}]", ZEROED) if zeroed
            else [Decl(results[vals], f"{acc}[{width}]"), over_block(Assign(local, entry))],
            replace(loop, body=block(prefix, over_block(added))),
            store))

    plain = blocks(over_block(Assign(entry, local)))
    whole = plain if stream is None else If(stream, Block((blocks(ExprStmt(Call(
        f"coiter_stream_{results[vals]}",
        (Var(vals), add(base, mul(Var(blk), Const(width))), Var(acc), Const(width))))),)),
        Block((plain,)))
    if isinstance(n, Const):
        rest = n.value % width
        if not rest:
            return whole
        # the last columns as one block: SpMM's 24 float columns took 2.7 ms with the loop
        # over the last 8, 1.0 ms so (bcsstk33); a loop over fewer than a block's columns
        # into the result itself is what GCC vectorized across positions
        first = add(base, Const(n.value - rest))
        shifted = {row.var: add(Var(row.var), Const(n.value - rest))}
        moved = Assign(Load(vals, add(first, Var(row.var))), substitute(update.value, shifted), "+=")
        last = replace(loop, body=block(prefix, replace(row, end=Const(rest), body=Block((moved,)))))
        return block(whole, _blocked(last, (vals, first, Const(rest), moved, rest), results, taken,
                                     zeroed))
    tail = replace(loop, body=block(prefix, replace(row, start=_whole_blocks(n, width))))
    return block(whole, If(Bin("!=", Bin("%", n, Const(width)), Const(0)), Block((tail,))))
