"""Prefetch for dense arrays read or updated at scattered places (coiter/lower/gathers.py).

The fetch ahead happens only when the array holds at least three times the core's L2 cache
(a flag computed per call), so every kernel runs with a small array (plain loops) and with
one of 2^21 doubles (16 MiB: more than three times any current core's L2). Inputs shorter
and longer than the look-ahead distance check that it stays inside the coordinate array;
values are compared with SciPy / NumPy. Coordinates that stay near each other (a band
matrix's columns) skip the fetch whatever the array's size: the C helper's judgement is
checked on its own."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter.codegen.c import preamble
from coiter.lower.gathers import GATHER_AHEAD, RUN_AHEAD
from coiter.runtime.compiler import load_library
from helpers import cflags

LARGE = 1 << 21  # elements of a dense operand that takes the prefetching loops
TOL = {"rtol": 1e-12, "atol": 1e-12}


def _random_csr(rows: int, cols: int, nnz: int, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    a = sp.csr_array((rng.random(nnz), (rng.integers(0, rows, nnz), rng.integers(0, cols, nnz))),
                     shape=(rows, cols))
    a.sum_duplicates()
    return a


@pytest.mark.parametrize("nnz", [1, GATHER_AHEAD - 1, GATHER_AHEAD, GATHER_AHEAD + 1, 5000])
@pytest.mark.parametrize("cols", [60, LARGE])
def test_spmv_fetches_x_ahead(nnz: int, cols: int) -> None:
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    assert f"__builtin_prefetch(&x_vals[A2_crd[pA2 + {GATHER_AHEAD}]])" in k.source
    assert f"pA2 + {GATHER_AHEAD} < A2_pos[A1_dimension]" in k.source  # stays in A2_crd
    assert ("bool x_far = x1_dimension * 8 >= coiter_far_bytes() && "
            "!coiter_gathers_near(A2_crd, A2_pos[A1_dimension]);") in k.source
    a = _random_csr(300, cols, nnz, seed=nnz)
    x = np.random.default_rng(1).random(cols)
    for threads in (1, 2):
        np.testing.assert_allclose(k(A=a, x=x, threads=threads).to_numpy(), a @ x, **TOL)


@pytest.mark.parametrize("nnz", [3, GATHER_AHEAD + 2, 20000])
def test_short_runs_fetch_x_ahead(nnz: int) -> None:
    """Rows of 1.5 to 6 entries on average, summed by the short-run helper: before each call,
    x at the coordinates RUN_AHEAD positions past the row's start, under one test that the
    farthest lies below the positions stored."""
    rows = max(1, nnz // 3)
    with cflags("plain-loads"):
        k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
        for cols in (60, LARGE):
            a = _random_csr(rows, cols, nnz, seed=nnz)
            x = np.random.default_rng(3).random(cols)
            for threads in (1, 2):
                np.testing.assert_allclose(k(A=a, x=x, threads=threads).to_numpy(), a @ x, **TOL)
    source = "".join(v.source for v in k.core.variants())
    fetches = "".join(f"        __builtin_prefetch(&x_vals[A2_crd[A2_pos[i] + {ahead}]]);\n"
                      for ahead in RUN_AHEAD)
    assert f"if (A2_pos[i] + {max(RUN_AHEAD)} < A2_stored) {{\n{fetches}      }}\n" in source


def test_csc_result_fetched_for_writing() -> None:
    """CSC SpMV adds into y at the matrix's row indices: y is fetched for writing."""
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csc"})
    assert f"__builtin_prefetch(&y_vals[A2_crd[pA2 + {GATHER_AHEAD}]], 1)" in k.source
    for rows in (50, LARGE):
        a = _random_csr(rows, 400, 6000, seed=rows).tocsc()
        x = np.random.default_rng(2).random(400)
        for threads in (1, 2):
            np.testing.assert_allclose(k(A=a, x=x, threads=threads).to_numpy(), a @ x, **TOL)


def test_two_arrays_test_their_own_flags() -> None:
    """Two gathered arrays in one loop: each prefetch tests its array's flag."""
    k = coiter.compile("y(i) = A(i,j) * x(j) * z(j)", formats={"A": "csr"})
    assert "if (x_far && " in k.source and "if (z_far && " in k.source
    a = _random_csr(200, LARGE, 4000, seed=5)
    rng = np.random.default_rng(6)
    x, z = rng.random(LARGE), rng.random(LARGE)
    for threads in (1, 2):
        np.testing.assert_allclose(k(A=a, x=x, z=z, threads=threads).to_numpy(), a @ (x * z), **TOL)


def test_long_runs_keep_their_partial_sums() -> None:
    """Rows averaging 16 entries or more take the partial sums, without prefetch."""
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    a = _random_csr(40, LARGE, 40 * 64, seed=7)
    x = np.random.default_rng(8).random(LARGE)
    for threads in (1, 2):
        np.testing.assert_allclose(k(A=a, x=x, threads=threads).to_numpy(), a @ x, **TOL)


@pytest.mark.parametrize("threads", [1, 2])
def test_result_assembled_in_labelled_regions(threads: int) -> None:
    """A COO result assembled in parallel (regions with labels, which must not be copied):
    the prefetch tests the flag in the loop."""
    k = coiter.compile("C(i,j) = A(i,j) * x(j)", formats={"A": "csr", "C": "coo"})
    assert "if (x_far && " in k.source
    for cols in (60, LARGE):
        a = _random_csr(500, cols, 20000, seed=cols)
        x = np.random.default_rng(9).random(cols)
        got = sp.csr_array(k(A=a, x=x, threads=threads).to_scipy())
        expected = sp.csr_array(a.multiply(x[None, :]))
        assert got.shape == expected.shape and got.nnz == expected.nnz
        assert abs(got - expected).max() <= 1e-12


def _near_helper() -> ctypes.CDLL:
    lib = load_library(preamble("INT32_MAX") + """
int near32(const int32_t* crd, int64_t stored) { return coiter_gathers_near(crd, stored); }
int near64(const int64_t* crd, int64_t stored) { return coiter_gathers_near(crd, stored); }
""")
    for name in ("near32", "near64"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_int64]
    return lib


def _near_in_python(crd: np.ndarray) -> bool:
    """The helper's rule: of 16 windows of 256 positions from the first to the last, each
    spans fewer than 8192 coordinates; never with under 4096 positions."""
    stored = len(crd)
    if stored < 16 * 256:
        return False
    windows = [crd[j * ((stored - 256) // 15):][:256].astype(np.int64) for j in range(16)]
    return all(w.max() - w.min() < 8192 for w in windows)


def test_the_near_judgement_follows_its_rule() -> None:
    lib = _near_helper()
    rng = np.random.default_rng(10)
    band = sp.diags([1.0] * 9, list(range(-4, 5)), shape=(50000, 50000), format="csr")
    one_far = band.indices.copy()
    one_far[8 * ((len(one_far) - 256) // 15) + 100] = 49999  # the ninth window reaches the last column
    cases = {
        "band": (band.indices, True),
        "band, 4095 positions": (band.indices[:4095], False),
        "band, 4096 positions": (band.indices[:4096], True),
        "one far entry": (one_far, False),
        "uniform": (rng.integers(0, 10**6, 10**5).astype(np.int32), False),
        "span 8191": (np.tile(np.array([0, 8191]), 5000), True),
        "span 8192": (np.tile(np.array([0, 8192]), 5000), False),
    }
    for name, (crd, expected) in cases.items():
        assert _near_in_python(crd) == expected, name
        for fn, dtype in ((lib.near32, np.int32), (lib.near64, np.int64)):
            array = np.ascontiguousarray(crd, dtype=dtype)
            assert bool(fn(array.ctypes.data, len(array))) == expected, (name, dtype)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_a_band_matrix_of_large_vectors_is_right(fmt: str) -> None:
    """SpMV on a band matrix whose x (CSR) or y (CSC) is large: the kernel asks the helper,
    whose rule finds the band's coordinates near, so the loops without fetches run; values
    as SciPy's."""
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": fmt})
    assert "coiter_gathers_near(A2_crd, A2_pos[A1_dimension])" in k.source
    a = sp.diags([1.0, 2.0, -1.0], [-1, 0, 1], shape=(LARGE, LARGE), format=fmt)
    a.data = np.random.default_rng(11).random(a.data.shape)
    x = np.random.default_rng(12).random(LARGE)
    assert _near_in_python(a.indices)
    for threads in (1, 2):
        np.testing.assert_allclose(k(A=a, x=x, threads=threads).to_numpy(), a @ x, **TOL)
