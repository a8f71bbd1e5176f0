"""Tensors over other libraries' arrays, for the interop modules (pydata/sparse, torch):
their CSR/CSC and COO index arrays become coiter levels without copies, and back."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..formats.format import Format, coo
from ..tensor import Tensor, index_pair


def compressed_matrix(shape: tuple[int, ...], fmt: Format, pos: Any, crd: Any, vals: Any,
                      name: str | None) -> Tensor:
    """A CSR/CSC Tensor over ``pos``/``crd``/``vals`` (validated; FormatError otherwise),
    sharing them unless their index types differ or are not int32/int64."""
    pos, crd = index_pair(np.asarray(pos), np.asarray(crd))
    return Tensor.from_arrays(shape, fmt, [{}, {"pos": pos, "crd": crd}], np.asarray(vals), name)


def coo_tensor(shape: tuple[int, ...], coords: np.ndarray, vals: np.ndarray, name: str | None) -> Tensor:
    """A Tensor in coiter's COO over coordinate rows ``coords`` (order x nnz) and ``vals``,
    sharing them; FormatError unless the entries are in order and unique."""
    levels: list[dict[str, Any]] = [{"pos": np.array([0, vals.shape[0]], dtype=np.int64), "crd": coords[0]}]
    levels += [{"crd": coords[m]} for m in range(1, coords.shape[0])]
    return Tensor.from_arrays(shape, coo(coords.shape[0]), levels, vals, name)


def compressed_arrays(t: Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``pos``, ``crd`` and values of a CSR/CSC tensor, cut to its stored entries."""
    s = t.storage
    level = s.levels[1]
    nnz = int(level["pos"][-1])
    return level["pos"], level["crd"][:nnz], s.vals[:nnz]
