"""Choosing a kernel's workspace per call: dense or a sparse policy, under a memory cap.

Concretize knows the loops and formats, so it knows whether a result is scattered and how
many modes the workspace needs; only the call knows the extents. With ``workspace="auto"``:

- a workspace of more than one mode is sparse, with concretize's default policy (bucket).
  The dense alternative (a dense result converted afterwards) was at best even with it
  on every input of ``benchmarks/workspaces.py`` and takes the whole dense result's
  memory (docs/workspaces.md);
- a one-mode (row) workspace is dense (Gustavson's), unless it would take more than the
  memory cap (:func:`memory_cap`): then it is ``SPARSE`` (a hash table's memory follows
  the row's entries, not the extent). A dense workspace is never allocated above the cap.
"""
from __future__ import annotations

import math
import os
from typing import Mapping

import numpy as np

from ..concrete.stmt import ConcreteProgram, TensorDecl
from ..errors import FormatError
from ..notation.ast import IndexVar

AUTO = "auto"
SPARSE = "hash"
ROW_OVERHEAD = 9  # bytes per dense row workspace entry besides the value: list entry, bits (rounded up)


def memory_cap(override: int | None = None) -> int:
    """Bytes a dense workspace may take: ``override``, else ``COITER_WORKSPACE_MEMORY``
    (bytes, or with a K/M/G suffix), else a quarter of the machine's memory."""
    if override is not None:
        return int(override)
    text = os.environ.get("COITER_WORKSPACE_MEMORY", "").strip()
    if text:
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
        digits = text[:-1] if scale > 1 else text
        try:
            return int(float(digits) * scale)
        except ValueError:
            raise FormatError(f"COITER_WORKSPACE_MEMORY must be a byte count such as 512M, got {text!r}") from None
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4


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


def choose(prog: ConcreteProgram, dims: Mapping[IndexVar, int], rshape: tuple[int, ...],
           cap: int) -> str:
    """The workspace for a call of ``prog`` (concretized with ``"auto"``): SPARSE when its
    dense row workspace would exceed ``cap``, else AUTO (``prog``'s own)."""
    decl = workspace_decl(prog)
    if decl is None or decl.policy is not None or dense_bytes(prog, dims, rshape) <= cap:
        return AUTO
    return SPARSE


def check_dense(prog: ConcreteProgram, dims: Mapping[IndexVar, int], rshape: tuple[int, ...],
                cap: int) -> None:
    """FormatError when ``prog`` was asked for a dense workspace larger than ``cap``."""
    decl = workspace_decl(prog)
    row = decl is not None and decl.policy is None
    converted = decl is None and prog.result_conversion is not None and \
        prog.tensors[prog.result].format.is_dense
    need = dense_bytes(prog, dims, rshape)
    if (row or converted) and need > cap:
        raise FormatError(f"the dense workspace of {prog.result} needs {need} bytes, more than the "
                          f"workspace memory cap of {cap} bytes; use a sparse workspace "
                          "(workspace='hash', 'coord' or 'bucket') or raise the cap")
