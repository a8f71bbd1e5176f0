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
