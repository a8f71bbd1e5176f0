"""The default schedule: the outermost loop runs on OpenMP threads when that is race-free.

Results are checked against SciPy/NumPy on inputs large enough that several chunks of
rows run on different threads; the generated C is checked for the pragma where rows are
written disjointly and for its absence where iterations would race.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import coiter

PRAGMA = "#pragma omp parallel for"


def kernel_source(expr: str, formats: dict) -> str:
    return coiter.compile(expr, formats=formats).source.split("int coiter_fused")[1]


@pytest.mark.parametrize("expr,formats", [
    ("y(i) = A(i,j) * x(j)", {"A": "csr"}),
    ("y(i) = A(i,j) * x(j)", {"A": "dcsr"}),
    ("y(i) = A(i,j) * x(j)", {"A": coiter.bcsr((2, 2))}),
    ("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", {"B": coiter.csf(3)}),
    ("C(i,k) = A(i,j) * B(j,k)", {"A": "csr"}),
])
def test_race_free_outer_loops_are_parallel(expr: str, formats: dict) -> None:
    assert PRAGMA in kernel_source(expr, formats)


@pytest.mark.parametrize("expr,formats", [
    ("y(i) = A(i,j) * x(j)", {"A": "dia"}),  # diagonals scatter into every row
    ("y(j) = A(i,j) * x(i)", {"A": "csr"}),  # rows of A scatter into y
    ("C(i,j) = A(i,j) * B(i,j)", {"A": "coo", "C": "dd"}),  # fused entries may share a row
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr", "C": "csr"}),  # appended result
    ("a = A(i,j) * B(i,j)", {"A": "csr", "B": "csr"}),  # one scalar
])
def test_racy_loops_stay_serial(expr: str, formats: dict) -> None:
    assert PRAGMA not in kernel_source(expr, formats)


def test_parallel_results_match_scipy() -> None:
    rng = np.random.default_rng(0)
    a = sp.random(20000, 3000, density=0.002, random_state=1, format="csr")
    x = rng.standard_normal(3000)
    np.testing.assert_allclose(coiter.evaluate("y(i) = A(i,j) * x(j)", A=a, x=x).to_numpy(), a @ x,
                               rtol=1e-12, atol=1e-12)
    b = rng.standard_normal((3000, 8))
    np.testing.assert_allclose(coiter.evaluate("C(i,k) = A(i,j) * B(j,k)", A=a, B=b).to_numpy(),
                               a @ b, rtol=1e-12, atol=1e-12)


def test_parallel_loop_bodies_move_into_restrict_helpers() -> None:
    """GCC's outlining of an OpenMP loop drops restrict (SpMM in a region ran 4.6x slower):
    the body goes into a static inline helper with restrict pointers; results unchanged."""
    a = sp.random(3000, 2000, density=0.01, random_state=3, format="csr")
    b = np.random.default_rng(3).standard_normal((2000, 16))
    k = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"})
    for threads in (1, 2):
        np.testing.assert_allclose(k(A=a, B=b, threads=threads).to_numpy(), a @ b, rtol=1e-12, atol=1e-12)
    source = k.core.variants()[-1].source
    helper = source.split("static inline void coiter_fused_body0(", 1)[1].split(") {", 1)[0]
    assert "double* restrict C_vals" in helper and "int64_t i," in helper
    assert "coiter_fused_body0(i, " in source


def test_parallel_loops_writing_outer_scalars_keep_their_body() -> None:
    """A loop reducing into a scalar declared outside it (OpenMP reduction clause) is not
    moved: a helper could not write the scalar."""
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(5000), rng.standard_normal(5000)
    k = coiter.compile("a = x(i) * y(i)", schedule="parallelize(i,CPUThread,ParallelReduction)")
    np.testing.assert_allclose(k(x=x, y=y, threads=2).to_numpy(), x @ y, rtol=1e-12)
    assert "reduction(+: t0)" in k.source and "coiter_fused_body" not in k.source
