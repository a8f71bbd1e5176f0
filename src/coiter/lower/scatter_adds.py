"""Segments of an operand added into a row workspace eight lanes at a time.

Row-wise SpGEMM (Gustavson's algorithm) adds, for each stored ``k`` of A's row, B's row
``k`` scaled by ``A(i,k)`` into a dense row workspace, and appends each coordinate it
writes first to the workspace's list::

    for (pB2 = B2_pos[k]; pB2 < B2_pos[k+1]; pB2++) {
      j = B2_crd[pB2];
      w_list[w_count] = j; w_count += !w_set[j]; w_set[j] = 1;
      w_vals[j] += A_vals[pA2] * B_vals[pB2];
    }

One entry at a time that is some 6 cycles an entry of B. Where B's level is ordered and
unique (validated: each segment's coordinates increase strictly), the segment's coordinates
are distinct, so eight of them can be gathered, added to and scattered back at once without
two lanes writing one entry. Each such loop becomes one call, ``w_count =
coiter_scatter_add_i32(w_vals, w_set, w_list, w_count, w_dimension, B2_crd, B_vals, a, start,
end)`` (C prelude, ``_i64`` for 64-bit coordinates). Where gathers are fast
(``COITER_FAST_GATHER``) it runs segments of ``COITER_SCATTER_MIN`` (32) entries or more
eight lanes a step, unless the workspace is wider than ``COITER_SCATTER_MAX_DIM`` (16384)
columns; elsewhere the plain loop. Every workspace entry gets the same one addition as in
the loop, in the same order across segments, so the result is the loop's bit for bit.

Measurements, and why shorter rows and wider workspaces keep the loop: docs/performance.md,
"SpGEMM: rows of B in eight lanes".

Only double values qualify, with ``int32_t`` or ``int64_t`` coordinates, a workspace whose
flags are the bytes ``coiter_row_set_bytes`` allocates (the helper reads each flag as part of
a 4-byte word: the allocation holds more than 3 bytes past the last flag), and a segment of a
unique level's ``crd`` bounded by its own ``pos`` at ``k`` and ``k + 1``.
"""
from __future__ import annotations

from collections.abc import Mapping

from ..ir.nodes import Assign, Bin, Call, Const, Decl, For, IRExpr, IRStmt, Load, Un, Var, add
from ..ir.rewrite import map_loops
from ..ir.visit import subexprs
from .short_runs import INDEX_SUFFIX

SCATTER_ADD = "coiter_scatter_add"  # the helper's name, before its index suffix


def vector_scatter_adds(s: IRStmt, segments: Mapping[str, str], workspaces: Mapping[str, Var],
                        inputs: Mapping[str, str]) -> IRStmt:
    """``s`` with every loop that adds a scaled segment of a unique level into a row
    workspace (the module's pattern) replaced by a helper call. ``segments`` maps each unique
    level's ``crd`` array to its ``pos`` array, ``workspaces`` each row workspace's flag
    array to its dimension, ``inputs`` the kernel's read-only array parameters to their
    element types."""
    def rewrite(f: For, scope: dict[str, str]) -> IRStmt | None:
        return _scatter_add(f, scope, segments, workspaces, inputs)

    return map_loops(s, rewrite)


def _scatter_add(f: For, scope: dict[str, str], segments: Mapping[str, str],
                 workspaces: Mapping[str, Var], inputs: Mapping[str, str]) -> IRStmt | None:
    if f.pragma or f.unroll or f.unit or f.start is None or len(f.body.stmts) != 5:
        return None
    p = Var(f.var)
    coord, append, count_new, flag, add_in = f.body.stmts
    if not (isinstance(coord, Decl) and isinstance(coord.init, Load) and coord.init.index == p):
        return None
    crd, j = coord.init.array, Var(coord.name)
    pos = segments.get(crd)
    if pos is None or inputs.get(crd) not in INDEX_SUFFIX or not _one_segment(f, pos):
        return None
    if not (isinstance(append, Assign) and append.op == "=" and isinstance(append.target, Load)
            and append.value == j and isinstance(append.target.index, Var)):
        return None
    lst, count = append.target.array, append.target.index
    if not (isinstance(flag, Assign) and flag.op == "=" and flag.target == Load(flag.target.array, j)
            and flag.value == Const(1)):
        return None
    set_ = flag.target.array
    if set_ not in workspaces or count_new != Assign(count, Un("!", Load(set_, j)), "+="):
        return None
    if not (isinstance(add_in, Assign) and add_in.op == "+=" and isinstance(add_in.target, Load)
            and add_in.target.index == j and isinstance(add_in.value, Bin) and add_in.value.op == "*"):
        return None
    w = add_in.target.array
    types = {w: "double*", set_: "uint8_t*", lst: "int64_t*", count.name: "int64_t"}
    if any(scope.get(name) != ctype for name, ctype in types.items()):
        return None
    scale = _scale(add_in.value, p, j, scope, inputs)
    if scale is None:
        return None
    vals, a = scale
    call = Call(f"{SCATTER_ADD}_{INDEX_SUFFIX[inputs[crd]]}",
                (Var(w), Var(set_), Var(lst), count, workspaces[set_], Var(crd), Var(vals), a,
                 f.start, f.end))
    return Assign(count, call)


def _one_segment(f: For, pos: str) -> bool:
    """Whether ``f`` runs over positions ``pos[k] .. pos[k+1]`` of one parent position."""
    return isinstance(f.start, Load) and f.start.array == pos \
        and f.end == Load(pos, add(f.start.index, Const(1)))


def _scale(product: Bin, p: Var, j: Var, scope: Mapping[str, str],
           inputs: Mapping[str, str]) -> tuple[str, IRExpr] | None:
    """``(vals, a)`` when ``product`` is ``a * vals[p]`` (either factor first) with ``vals``
    a read-only double input and ``a`` a double variable or an element of a double input
    at neither the loop's position nor its coordinate."""
    for v, a in ((product.b, product.a), (product.a, product.b)):
        if not (isinstance(v, Load) and v.index == p and inputs.get(v.array) == "double"):
            continue
        double = scope.get(a.name) == "double" if isinstance(a, Var) else \
            isinstance(a, Load) and inputs.get(a.array) == "double"
        if double and all(x not in (p, j) for x in subexprs(a)):
            return v.array, a
    return None
