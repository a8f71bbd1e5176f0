"""Assignments over Dask arrays: one coiter kernel per block, partial results merged sparsely.

An assignment maps onto :func:`dask.array.blockwise` with the index variables as Dask's
indices: a block of the result is computed from the blocks of the operands it reads, with
the kernel that :func:`coiter.evaluate` compiles once per process for the blocks' formats
and types (each worker compiles it once; the on-disk cache lets the workers of one machine
share the compiled library). Operands that are not Dask arrays are broadcast to every block.

A summed variable that is split into several blocks (``j`` in ``y(i) = A(i,j) * x(j)`` when
``A`` is partitioned by columns) gives one partial result per block; the partials are added
in a tree, sparse ones by a coiter kernel (never densely). Splitting is only correct where the
sum distributes over the whole right-hand side; where it does not
(``y(i) = A(i,j) * x(j) + b(i)``) the operands are rechunked to one block of that variable.
"""
from __future__ import annotations

import functools
import itertools
import math
import uuid
from typing import Any, Mapping, Sequence

import dask.array as da
import numpy as np
from dask.highlevelgraph import HighLevelGraph

from ..api import evaluate as evaluate_block
from ..errors import ArgumentError, ShapeError
from ..formats.format import FormatLike, as_format
from ..notation.ast import (
    Access, Add, Assignment, Coordinate, IndexVar, Mul, Neg, Reduction, Sub, accesses, walk,
)
from ..notation.parser import parse
from ..notation.reductions import insert_reductions
from ..operands import as_tensor
from ..tensor import Tensor
from .chunks import empty_like_chunks

# partial results added per task of the merging tree
SPLIT_EVERY = 8


def evaluate(assignment: str | Assignment, out_format: FormatLike | None = None,
             **operands: Any) -> da.Array:
    """``assignment`` over Dask arrays, as a Dask array (lazy: ``.compute()`` or ``.persist()``).

    Operands are Dask arrays whose chunks are coiter Tensors (:func:`coiter.dask.from_array`),
    NumPy arrays, SciPy or pydata/sparse arrays, or any in-memory operand of
    :func:`coiter.evaluate` (broadcast to every block). The result is partitioned like the
    operands along its modes; its chunks are NumPy arrays when ``out_format`` is dense and
    coiter Tensors otherwise. ``out_format`` defaults to :func:`coiter.evaluate`'s choice.
    """
    a = parse(assignment) if isinstance(assignment, str) else assignment
    if not isinstance(a, Assignment):
        raise ArgumentError(f"expected an index-notation string or Assignment, "
                            f"got {type(assignment).__name__}")
    if a.accumulate:
        raise ArgumentError(f"{a}: coiter.dask computes new results; write the sum out "
                            "(A(i) = A(i) + ...) instead of +=")
    indices = _operand_indices(a, operands)
    arrays = {n: _as_dask(v) for n, v in operands.items()}
    extents = _extents(a, indices, arrays)
    out_vars = tuple(v.name for v in a.lhs.index_vars)
    missing = [v for v in out_vars if v not in extents]
    if missing:
        raise ShapeError(f"{a}: result index {missing[0]} appears on no operand, so no block "
                         "sizes it")
    arrays = _one_block_where_needed(a, indices, arrays)
    text = str(a)
    meta, fmt = _meta(text, out_format, arrays)
    names = tuple(arrays)
    args: list[Any] = []
    for n in names:
        args += [arrays[n], indices[n]]
    split = _split_sums(a, indices, arrays)
    block = functools.partial(_run_block, text, fmt, isinstance(meta, np.ndarray), names)
    if not split:
        return da.blockwise(block, out_vars, *args, concatenate=False, meta=meta,
                            dtype=meta.dtype)
    partials = da.blockwise(block, out_vars + split, *args, concatenate=False, meta=meta,
                            dtype=meta.dtype, adjust_chunks={v: 1 for v in split})
    return _merge(partials, len(out_vars), meta)


def _operand_indices(a: Assignment, operands: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each operand's index variables, checking what a blockwise computation can express."""
    seen: dict[str, tuple[str, ...]] = {}
    for x in accesses(a.rhs):
        if not all(isinstance(s, IndexVar) for s in x.indices):
            raise ArgumentError(f"{a}: coiter.dask partitions operands indexed by index "
                                f"variables; {x} has a compound subscript or a window")
        names = tuple(s.name for s in x.indices)  # type: ignore[union-attr]
        if len(set(names)) != len(names):
            raise ArgumentError(f"{a}: {x} repeats an index variable (a diagonal), which "
                                "coiter.dask cannot partition")
        if seen.setdefault(x.tensor, names) != names:
            raise ArgumentError(f"{a}: {x.tensor} is read with two index orders; pass its "
                                "transpose as another operand")
    if any(isinstance(e, Coordinate) for e in walk(a.rhs)):
        raise ArgumentError(f"{a}: coordinate values of index variables depend on the block; "
                            "coiter.dask cannot evaluate them")
    unknown = sorted(set(operands) - set(seen))
    if unknown:
        raise ShapeError(f"{a}: unexpected operand(s) {', '.join(unknown)}")
    absent = sorted(set(seen) - set(operands))
    if absent:
        raise ArgumentError(f"{a}: no operand given for {', '.join(absent)}")
    return seen


def _as_dask(value: Any) -> da.Array:
    """A Dask array as it is; anything else as one block (sparse operands as a coiter Tensor)."""
    if isinstance(value, da.Array):
        return value
    t = as_tensor(value)
    chunk: Any = t.to_numpy() if t.format.is_dense else t
    return da.Array(HighLevelGraph.from_collections(name := f"coiter-operand-{uuid.uuid4().hex}",
                                                    {(name,) + (0,) * t.order: chunk},
                                                    dependencies=()),
                    name, tuple((d,) for d in t.shape), meta=empty_like_chunks(chunk))


def _extents(a: Assignment, indices: Mapping[str, tuple[str, ...]],
             arrays: Mapping[str, da.Array]) -> dict[str, int]:
    extents: dict[str, tuple[int, str]] = {}
    for n, vars_ in indices.items():
        if arrays[n].ndim != len(vars_):
            raise ShapeError(f"{a}: operand {n} has order {arrays[n].ndim}, the expression "
                             f"indexes it by {len(vars_)} variable(s)")
        for v, d in zip(vars_, arrays[n].shape):
            if math.isnan(d):
                raise ShapeError(f"{a}: operand {n} has unknown chunk sizes; call "
                                 "compute_chunk_sizes() on it first")
            known = extents.setdefault(v, (d, n))
            if known[0] != d:
                raise ShapeError(f"{a}: index {v} has extent {known[0]} in {known[1]} but {d} "
                                 f"in {n}")
    return {v: d for v, (d, _) in extents.items()}


def _distributes(e: Any, var: str) -> bool:
    """Whether ``e`` (with explicit reductions) is a sum over ``var`` up to additions of such
    sums, other sums and factors free of ``var``: then partial sums over blocks add up."""
    if isinstance(e, Reduction):
        return e.op == "sum" and (e.var.name == var or _distributes(e.body, var))
    if isinstance(e, Neg):
        return _distributes(e.operand, var)
    if isinstance(e, (Add, Sub)):
        return _distributes(e.a, var) and _distributes(e.b, var)
    if isinstance(e, Mul):
        free = [not _mentions(x, var) for x in (e.a, e.b)]
        return (free[0] and _distributes(e.b, var)) or (free[1] and _distributes(e.a, var))
    return False


def _mentions(e: Any, var: str) -> bool:
    return any(isinstance(x, Access) and any(getattr(s, "name", None) == var for s in x.indices)
               for x in walk(e))


def _summed(a: Assignment, indices: Mapping[str, tuple[str, ...]]) -> list[str]:
    out = {v.name for v in a.lhs.index_vars}
    return list(dict.fromkeys(v for vars_ in indices.values() for v in vars_ if v not in out))


def _one_block_where_needed(a: Assignment, indices: Mapping[str, tuple[str, ...]],
                            arrays: dict[str, da.Array]) -> dict[str, da.Array]:
    """Rechunk to one block every summed variable that is split but over which the sum does
    not distribute."""
    explicit = insert_reductions(a).rhs
    whole = {v for v in _summed(a, indices) if not _distributes(explicit, v)}
    out = {}
    for n, arr in arrays.items():
        wanted = {m: -1 for m, v in enumerate(indices[n]) if v in whole and len(arr.chunks[m]) > 1}
        out[n] = arr.rechunk(wanted) if wanted else arr
    return out


def _split_sums(a: Assignment, indices: Mapping[str, tuple[str, ...]],
                arrays: Mapping[str, da.Array]) -> tuple[str, ...]:
    """Summed variables that some operand splits into several blocks."""
    return tuple(v for v in _summed(a, indices)
                 if any(len(arrays[n].chunks[m]) > 1 for n in indices
                        for m, w in enumerate(indices[n]) if w == v))


def _meta(text: str, out_format: FormatLike | None, arrays: Mapping[str, da.Array],
          ) -> tuple[Any, str]:
    """An empty block of the result (a NumPy array for dense results) and the result's
    format: the assignment run on the operands' empty metas, which also checks it (and
    compiles its kernel once here)."""
    metas = {n: as_tensor(arr._meta) for n, arr in arrays.items()}
    order = len(parse(text).lhs.indices)
    fmt = None if out_format is None else as_format(out_format, order)
    result = evaluate_block(text, fmt, **metas)
    block = result.to_numpy() if result.format.is_dense else result
    return empty_like_chunks(block), result.format.to_string()


def _unwrap(block: Any) -> Any:
    """The one block in the nested lists that blockwise passes for single-block sums."""
    while isinstance(block, list):
        if len(block) != 1:
            raise AssertionError("a split sum reached a block function")  # _split_sums' job
        block = block[0]
    return block


def _run_block(text: str, fmt: str, dense: bool, names: Sequence[str], *blocks: Any) -> Any:
    """One block of the result (a NumPy array when ``dense``) from one block of each operand."""
    operands = {n: _unwrap(b) for n, b in zip(names, blocks)}
    result = evaluate_block(text, fmt, **operands)
    return result.to_numpy() if dense else result


def _merge(partials: da.Array, order: int, meta: Any) -> da.Array:
    """Add the partial results along ``partials``' trailing (split-sum) block axes in a tree
    of tasks, ``SPLIT_EVERY`` partials per task."""
    name = f"coiter-merge-{uuid.uuid4().hex}"
    graph: dict[tuple, Any] = {}
    out_blocks = partials.numblocks[:order]
    split_blocks = partials.numblocks[order:]
    for idx in itertools.product(*(range(n) for n in out_blocks)):
        level = [(partials.name,) + idx + k for k in itertools.product(*(range(n) for n in split_blocks))]
        depth = 0
        while len(level) > SPLIT_EVERY:
            nxt = []
            for g in range(0, len(level), SPLIT_EVERY):
                key = (f"{name}-{depth}",) + idx + (g,)
                graph[key] = (_add_blocks, level[g:g + SPLIT_EVERY])
                nxt.append(key)
            level, depth = nxt, depth + 1
        graph[(name,) + idx] = (_add_blocks, level)
    hlg = HighLevelGraph.from_collections(name, graph, dependencies=[partials])
    return da.Array(hlg, name, partials.chunks[:order], meta=meta)


def _add_blocks(parts: list[Any]) -> Any:
    """The sum of partial result blocks: NumPy's for dense ones; for sparse ones a two-way
    coiter merge in their format, folded over the parts (an n-way merge's lattice, and its
    C, grows as 2**n)."""
    if not isinstance(parts[0], Tensor):
        return functools.reduce(np.add, parts)
    order, fmt = parts[0].order, parts[0].format.to_string()
    subs = ",".join(f"i{m}" for m in range(order))
    text = f"S({subs}) = P({subs}) + Q({subs})"
    return functools.reduce(lambda p, q: evaluate_block(text, fmt, P=p, Q=q), parts)
