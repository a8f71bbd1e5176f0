"""Software prefetch of segments located through another operand's coordinates
(coiter/lower/prefetch.py): SpGEMM's rows of B chosen by A's coordinates, SpMSpV's columns
chosen by the vector's. The look-ahead reads the outer coordinate array only below its
length; values are checked against SciPy on inputs shorter and longer than the distance."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter.lower.prefetch import PREFETCH_POS
from helpers import generated_functions


@pytest.mark.parametrize("nnz", [1, PREFETCH_POS - 1, PREFETCH_POS, PREFETCH_POS + 1, 3000])
@pytest.mark.parametrize("result", ["csr", coiter.csr_unordered])
def test_spgemm_prefetches_rows_of_b(nnz: int, result) -> None:
    rng = np.random.default_rng(nnz)
    n = 200
    a = sp.csr_array((rng.random(nnz), (rng.integers(0, n, nnz), rng.integers(0, n, nnz))), shape=(n, n))
    b = sp.random_array((n, n), density=0.05, rng=rng, format="csr")
    k = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": result})
    assert "__builtin_prefetch(&B2_pos[A2_crd[pA2 + 8]])" in k.source
    assert "pA2 + 8 < A2_pos[A1_dimension]" in k.source  # the look-ahead stays in A2_crd
    for threads in (1, 2):
        got = k(A=a, B=b, threads=threads).to_scipy()
        np.testing.assert_allclose(got.toarray(), (a @ b).toarray(), rtol=1e-12, atol=1e-12)


def test_spmspv_prefetches_columns() -> None:
    """CSC times a sparse vector walks the vector's coordinates and each one's column."""
    rng = np.random.default_rng(3)
    a = sp.random_array((300, 400), density=0.02, rng=rng, format="csc")
    x = np.where(rng.random(400) < 0.1, rng.random(400), 0.0)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csc", "x": "s", "y": "d"})
    assert "__builtin_prefetch" in generated_functions(k.source)
    got = k(A=a, x=coiter.Tensor.from_numpy(x, format="s")).to_numpy()
    np.testing.assert_allclose(got, a @ x, rtol=1e-12, atol=1e-12)


def test_nothing_prefetched_without_located_segments() -> None:
    """CSR SpMV reads its rows in order: no segment is prefetched (only x's elements, when x
    is large: tests/test_gathers.py; the prelude's eight-row helper fetches its own streams
    a page ahead: tests/test_tiny_runs.py)."""
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    fetches = [line for line in generated_functions(k.source).splitlines()
               if "__builtin_prefetch" in line]
    assert fetches and all("__builtin_prefetch(&x_vals[" in line for line in fetches)
    a = sp.random_array((50, 60), density=0.1, rng=np.random.default_rng(4), format="csr")
    x = np.arange(60.0)
    np.testing.assert_allclose(k(A=a, x=x).to_numpy(), a @ x)
