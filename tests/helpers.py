"""Random test data and the numpy reference used by the differential tests."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import scipy.sparse as sp

import coiter
from coiter.codegen.c import preamble
from coiter.lower.sums import SPLIT_MIN_AVERAGE
from coiter.lower.vector_runs import VECTOR_MIN_AVERAGE
from coiter.runtime.compiler import DEFAULT_CFLAGS, load_library

# C flags of kernels built with and without AVX-512 (prelude helpers that use it have a
# plain C path for other processors), the short- and tiny-run helpers taken where they apply
# even on a processor whose gathers are slow (COITER_FAST_GATHER, C prelude)
_HELPERS = " -DCOITER_FAST_GATHER=1"
CFLAGS = {"native": DEFAULT_CFLAGS + _HELPERS,
          "no-avx512": DEFAULT_CFLAGS + " -mno-avx512f" + _HELPERS,
          # slow gathers: the short-run helper reads whole runs with plain loads (where the
          # processor has AVX2, as this project's machines do; the loop elsewhere) however
          # few the runs (COITER_SHORT_RUNS_BITS), the eight-row one x by scalar loads
          "plain-loads": DEFAULT_CFLAGS + " -DCOITER_FAST_GATHER=0 -DCOITER_SHORT_RUNS_BITS=0",
          # dense result rows stored by streaming stores however small the result
          "streaming": DEFAULT_CFLAGS + " -DCOITER_STREAM_MIN_BYTES=0"}


@contextmanager
def cflags(flags: str) -> Iterator[None]:
    """Kernels built meanwhile get the C flags ``CFLAGS[flags]`` (part of the kernel
    cache's key)."""
    old = os.environ.get("COITER_CFLAGS")
    os.environ["COITER_CFLAGS"] = CFLAGS[flags]
    try:
        yield
    finally:
        if old is None:
            del os.environ["COITER_CFLAGS"]
        else:
            os.environ["COITER_CFLAGS"] = old


def random_array(rng: np.random.Generator, shape: tuple[int, ...], density: float) -> np.ndarray:
    """Random values with the given fraction of nonzeros (some rows/cols end up empty)."""
    a = rng.standard_normal(shape)
    a[rng.random(shape) >= density] = 0.0
    return a


def tensor(a: np.ndarray, fmt: str | coiter.Format) -> coiter.Tensor:
    return coiter.Tensor.from_numpy(a, format=fmt)


def check(result: coiter.Tensor, expected: np.ndarray) -> None:
    got = result.to_numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def generated_functions(source: str) -> str:
    """A kernel's C source without the prelude: the parallel loop bodies' helpers, the serial
    copies' functions and the kernel (loops may sit in any of them)."""
    return source[source.index("coiter_fused"):]


def row_sums_in_order(a: sp.csr_array, x: np.ndarray) -> np.ndarray:
    """``a @ x`` with each row's products added one by one from 0.0 in position order, as
    coiter's row loops add them, in ``a``'s value type (the reference of the tests that
    compare bits)."""
    out = np.zeros(a.shape[0], a.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(a.shape[0]):
            total = a.dtype.type(0)
            for p in range(a.indptr[i], a.indptr[i + 1]):
                total += a.data[p] * x[a.indices[p]]
            out[i] = total
    return out


def lanes_sum(products: np.ndarray) -> np.floating:
    """A run's products added as coiter_run_vdot adds them (coiter/lower/vector_runs.py), in
    their own type: lane j adds positions j, j + 8, ... from 0.0, and the lanes are added as
    ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))."""
    lanes = [products.dtype.type(0)] * 8
    for q, v in enumerate(products):
        lanes[q % 8] += v
    low = (lanes[0] + lanes[4]) + (lanes[2] + lanes[6])
    high = (lanes[1] + lanes[5]) + (lanes[3] + lanes[7])
    return low + high


def fast_gathers() -> bool:
    """The C prelude's COITER_FAST_GATHER for kernels built now: by $COITER_CFLAGS, or else by
    the processor (a function returning it, compiled like a kernel)."""
    lib = load_library(preamble("INT32_MAX") + "int fast_gather(void) { return COITER_FAST_GATHER; }\n")
    return bool(lib.fast_gather())


def takes_lanes(lengths: np.ndarray) -> bool:
    """Whether a double or float operand with these run lengths has its runs summed in lanes
    (the kernel's flag) by kernels built now: from 16 a run on average, or from 7.5 where
    gathers are fast (:func:`fast_gathers`) and coiter_runs_even (C prelude: of 16 runs spread
    over all, 14 as long as the middle one) finds them uneven."""
    stored, runs = int(np.sum(lengths)), len(lengths)
    even = runs >= 16 and sum(lengths[j * (runs // 16) + runs // 32] == lengths[runs // 2]
                              for j in range(16)) >= 14
    return stored >= SPLIT_MIN_AVERAGE * runs or (
        stored >= VECTOR_MIN_AVERAGE * runs and not even and fast_gathers())


def row_sums_in_lanes(a: sp.csr_array, x: np.ndarray) -> np.ndarray:
    """``a @ x`` with each row's products summed as :func:`lanes_sum` adds them, added to
    the row's 0.0, in ``a``'s value type."""
    zero = a.dtype.type(0)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.array([zero + lanes_sum(a.data[s:e] * x[a.indices[s:e]])
                         for s, e in zip(a.indptr[:-1], a.indptr[1:])], a.dtype)


def row_sums_as_coiter(a: sp.csr_array, x: np.ndarray) -> np.ndarray:
    """``a @ x`` in the order coiter's double or float SpMV adds each row: in lanes where the matrix's
    rows take them (:func:`takes_lanes`), else one by one (the short-run, eight-row and loop
    versions all keep that order)."""
    return (row_sums_in_lanes if takes_lanes(np.diff(a.indptr)) else row_sums_in_order)(a, x)


SPECIAL_VALUES = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0])


def spread_values(rng: np.random.Generator, size: int, special: float = 0.0) -> np.ndarray:
    """Random values over 16 orders of magnitude (so that a sum in another order shows), a
    fraction ``special`` of them replaced by inf, NaN or signed zeros."""
    v = rng.standard_normal(size) * 10.0 ** rng.uniform(-8, 8, size)
    if special:
        v = np.where(rng.random(size) < special, rng.choice(SPECIAL_VALUES, size), v)
    return v


def csr_with_lengths(rng: np.random.Generator, lengths: list[int], n: int, index: type,
                     special: float = 0.0) -> sp.csr_array:
    """An ``len(lengths) x n`` CSR matrix whose rows hold the given numbers of entries (sorted
    distinct columns, ``index`` arrays, values from :func:`spread_values`)."""
    cols = [np.sort(rng.choice(n, size=k, replace=False)) for k in lengths]
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(index)
    indices = np.concatenate(cols).astype(index) if cols else np.zeros(0, index)
    data = spread_values(rng, int(indptr[-1]), special)
    return sp.csr_array((data, indices, indptr), shape=(len(lengths), n))
