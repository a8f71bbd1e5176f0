"""Choosing a kernel's workspace per call: dense or a sparse policy, under a memory cap.

Concretize knows the loops and formats, so it knows whether a result is scattered and how
many modes the workspace needs; only the call knows the extents. With ``workspace="auto"``:

- a workspace of more than one mode is sparse, with concretize's default policy (bucket).
  The dense alternative (a dense result converted afterwards) was at best even with it
  on every input of ``benchmarks/workspaces.py`` and takes the whole dense result's
  memory (docs/workspaces.md);
- a one-mode (row) workspace is dense (Gustavson's), unless it would take more than the
  memory cap (:func:`memory_cap`): then it is ``SPARSE`` (a hash table's memory follows
  the row's entries, not the extent). A dense workspace is never allocated above the cap;
- the sparse workspace of an outer product (SpGEMM CSC x CSR, SpTTM: one loop over the
  contracted index k above the workspace's producer, the factors sharing nothing below k)
  is ``hash`` when the products it takes, counted from the operands at call time (the sum
  over k of each factor's entries under k), are at least ``HASH_SHARE`` of the
  coordinates they can land on (the workspace's dense size, or less: the product of the
  distinct coordinates of each factor's modes but k): many products then share
  coordinates, which a hash table combines as they arrive while bucket sorts every one.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ..concrete.stmt import Assign, ConcreteProgram, Forall, TensorDecl, Where, walk_stmts
from ..errors import FormatError
from ..formats.storage import Storage
from ..notation.ast import Access, IndexVar, factors
from .settings import env_bytes, physical_memory

AUTO = "auto"
SPARSE = "hash"
# products per reachable workspace coordinate from which an outer product's workspace is
# hash: benchmarks/workspaces.py's outer-product study (docs/workspace-studies.md) has the
# inputs where hash won (FEM matrices, 0.28 to 0.73) well above those where bucket won (< 0.07)
HASH_SHARE = 0.25
ROW_OVERHEAD = 9  # bytes per dense row workspace entry besides the value: list entry, bits (rounded up)


def memory_cap(override: int | None = None) -> int:
    """Bytes a dense workspace may take: ``override``, else ``COITER_WORKSPACE_MEMORY``
    (bytes, or with a K/M/G suffix), else a quarter of the machine's memory."""
    if override is not None:
        return int(override)
    from_env = env_bytes("COITER_WORKSPACE_MEMORY", FormatError)
    return from_env if from_env is not None else physical_memory() // 4


def workspace_decl(prog: ConcreteProgram) -> TensorDecl | None:
    return next((d for d in prog.tensors.values() if d.role == "workspace"), None)


def row_entry_bytes(decl: TensorDecl) -> int:
    """Bytes per coordinate of a dense row workspace: the value, a flag and a list entry."""
    return np.dtype(decl.dtype).itemsize + ROW_OVERHEAD


def dense_bytes(prog: ConcreteProgram, dims: Mapping[IndexVar, int], rshape: tuple[int, ...]) -> int:
    """Bytes of ``prog``'s dense workspace: its row workspace, or else the whole result
    computed densely."""
    decl = workspace_decl(prog)
    if decl is not None and decl.policy is None:
        return dims[decl.modes[0]] * row_entry_bytes(decl)
    return math.prod(rshape) * np.dtype(prog.tensors[prog.result].dtype).itemsize


def outer_factors(prog: ConcreteProgram) -> tuple[IndexVar, list[Access]] | None:
    """The contracted index and the factors of ``prog``'s outer product into a sparse
    workspace, or None when ``prog`` has no such workspace."""
    decl = workspace_decl(prog)
    if decl is None or decl.policy is None or not isinstance(prog.stmt, Where):
        return None
    producer = prog.stmt.producer
    assigns = [s for s in walk_stmts(producer) if isinstance(s, Assign)]
    if not isinstance(producer, Forall) or producer.var in decl.modes or len(assigns) != 1:
        return None
    k, out, below = producer.var, [], set()
    for e in factors(assigns[0].rhs):
        if not isinstance(e, Access) or k not in e.indices or (set(e.indices) - {k}) & below:
            return None
        below |= set(e.indices) - {k}
        out.append(e)
    return k, out


def outer_products(prog: ConcreteProgram, storages: Mapping[str, Storage]) -> tuple[int, int] | None:
    """Products the sparse workspace of ``prog``'s outer product takes on ``storages`` (the
    sum over the contracted index of each factor's entries there) and a bound on the
    coordinates they land on (the product, over each factor's modes but the contracted
    one, of the distinct coordinates in that mode); None when ``prog`` is not an outer
    product into a sparse workspace."""
    found = outer_factors(prog)
    if found is None:
        return None
    k, accesses = found
    total: np.ndarray | None = None
    targets = 1
    for a in accesses:
        storage = storages.get(prog.tensors[a.tensor].converted_from or a.tensor)
        # an operand seen through its layout's levels (DIA, ELL) is indexed by level, not mode
        if storage is None or len(a.indices) != len(storage.shape):
            return None
        mode = a.indices.index(k)
        coords, _ = storage.to_coords()
        counts = np.bincount(coords[mode], minlength=storage.shape[mode]).astype(np.float64)
        total = counts if total is None else total * counts
        for m in range(len(a.indices)):
            if m != mode:  # distinct coordinates per mode: a bincount, where tuples would sort
                targets *= int(np.count_nonzero(np.bincount(coords[m], minlength=storage.shape[m])))
    return (int(total.sum()), targets) if total is not None else None


def choose(prog: ConcreteProgram, dims: Mapping[IndexVar, int], rshape: tuple[int, ...],
           cap: int, storages: Mapping[str, Storage] | None = None) -> str:
    """The workspace for a call of ``prog`` (concretized with ``"auto"``) on ``storages``:
    SPARSE when its dense row workspace would exceed ``cap``, or for an outer product whose
    products are at least HASH_SHARE of the coordinates they can reach; else AUTO
    (``prog``'s own)."""
    decl = workspace_decl(prog)
    if decl is None:
        return AUTO
    if decl.policy is not None:
        counted = outer_products(prog, storages) if storages is not None else None
        if counted is None:
            return AUTO
        products, targets = counted
        targets = min(targets, math.prod(dims[m] for m in decl.modes))
        return SPARSE if products >= HASH_SHARE * targets else AUTO
    return AUTO if dense_bytes(prog, dims, rshape) <= cap else SPARSE


def check_dense(prog: ConcreteProgram, dims: Mapping[IndexVar, int], rshape: tuple[int, ...],
                cap: int) -> None:
    """FormatError when ``prog`` was asked for a dense workspace larger than ``cap``."""
    decl = workspace_decl(prog)
    row = decl is not None and decl.policy is None
    converted = decl is None and prog.result_conversion is not None and \
        prog.tensors[prog.result].format.is_dense
    need = dense_bytes(prog, dims, rshape)
    if row and need > cap:
        raise FormatError(f"the dense workspace of {prog.result} needs {need} bytes, more than the "
                          f"workspace memory cap of {cap} bytes; use a sparse workspace "
                          "(workspace='hash', 'coord' or 'bucket') or raise the cap")
    if converted and need > cap:
        raise FormatError(f"{prog.result} is computed densely and converted to "
                          f"{prog.result_conversion}, which needs {need} bytes, more than the "
                          f"workspace memory cap of {cap} bytes; use a sparse workspace "
                          "(workspace='hash', 'coord' or 'bucket'), add fewer sparse terms per "
                          "call, or raise the cap")
