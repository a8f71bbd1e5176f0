"""Library-neutral kernel results and the check that every system's result must pass
before its time counts.

A result is either a dense ndarray (a scalar is a 0-d array) or a :class:`SparseResult`:
sorted unique linear indices and values. Sparse results are compared on the union of both
patterns, so an explicit zero on one side matches a missing entry on the other.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass
class SparseResult:
    shape: tuple[int, ...]
    keys: np.ndarray  # linear (row-major) indices, sorted, unique, int64
    vals: np.ndarray

    @property
    def nnz(self) -> int:
        return int(self.keys.shape[0])


Result = np.ndarray | SparseResult


def from_coords(coords: np.ndarray, vals: np.ndarray, shape: tuple[int, ...]) -> SparseResult:
    """SparseResult of entries at ``coords`` (order x n, any order, duplicates summed)."""
    keys = np.ravel_multi_index(tuple(np.asarray(c, dtype=np.int64) for c in coords), shape)
    vals = np.asarray(vals)
    if np.all(keys[1:] > keys[:-1]):  # every library here emits sorted entries: no sort
        return SparseResult(shape, keys, vals)
    uniq, inverse = np.unique(keys, return_inverse=True)
    return SparseResult(shape, uniq, np.bincount(inverse, weights=vals, minlength=uniq.shape[0]))


def from_scipy(m: sp.sparray | sp.spmatrix) -> SparseResult:
    coo = sp.coo_array(m)
    return from_coords(np.vstack([coo.row, coo.col]), coo.data, coo.shape)


def from_dense(a: np.ndarray) -> SparseResult:
    coords = np.nonzero(a)
    return from_coords(np.array(coords), a[coords], a.shape)


def _aligned(got: SparseResult, ref: SparseResult) -> tuple[np.ndarray, np.ndarray]:
    """Values of both results on the union of their patterns (zero where absent)."""
    if np.array_equal(got.keys, ref.keys):
        return got.vals, ref.vals
    # both key arrays are sorted: a stable sort (timsort) of the two runs merges them in
    # linear time, where np.union1d hashes (seconds for millions of keys)
    union = np.concatenate([got.keys, ref.keys])
    union.sort(kind="stable")
    union = union[np.r_[True, union[1:] != union[:-1]]]
    a, b = np.zeros(union.shape[0]), np.zeros(union.shape[0])
    a[np.searchsorted(union, got.keys)] = got.vals
    b[np.searchsorted(union, ref.keys)] = ref.vals
    return a, b


def assert_matches(got: Result, ref: Result, rtol: float) -> None:
    """Raise AssertionError unless ``got`` equals ``ref`` to ``rtol`` (with an absolute
    tolerance of ``rtol * max|ref|``, so entries that cancel to near zero still pass)."""
    if isinstance(ref, SparseResult) and not isinstance(got, SparseResult):
        got = from_dense(np.asarray(got).reshape(ref.shape))
    if isinstance(ref, SparseResult):
        assert isinstance(got, SparseResult)
        if tuple(got.shape) != tuple(ref.shape):
            raise AssertionError(f"shape {got.shape} != reference {ref.shape}")
        actual, expected = _aligned(got, ref)
    else:
        if isinstance(got, SparseResult):
            dense = np.zeros(got.shape)
            dense.ravel()[got.keys] = got.vals
            got = dense
        actual = np.asarray(got, dtype=np.float64)
        expected = np.asarray(ref, dtype=np.float64)
        if actual.size != expected.size:
            raise AssertionError(f"shape {actual.shape} != reference {expected.shape}")
        actual = actual.reshape(expected.shape)
    scale = float(np.max(np.abs(expected))) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * max(scale, 1e-300))
