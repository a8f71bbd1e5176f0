"""Random test data and the numpy reference used by the differential tests."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import scipy.sparse as sp

import coiter
from coiter.runtime.compiler import DEFAULT_CFLAGS

# C flags of kernels built with and without AVX-512 (prelude helpers that use it have a
# plain C path for other processors)
CFLAGS = {"native": DEFAULT_CFLAGS, "no-avx512": DEFAULT_CFLAGS + " -mno-avx512f"}


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
    coiter's row loops add them (the reference of the tests that compare bits)."""
    out = np.zeros(a.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(a.shape[0]):
            total = np.float64(0.0)
            for p in range(a.indptr[i], a.indptr[i + 1]):
                total += a.data[p] * x[a.indices[p]]
            out[i] = total
    return out
