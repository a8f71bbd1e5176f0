"""Random test data and the numpy reference used by the differential tests."""
from __future__ import annotations

import numpy as np

import coiter


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
