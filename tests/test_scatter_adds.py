"""Segments of B added into SpGEMM's row workspace eight lanes at a time
(coiter/lower/scatter_adds.py, ``coiter_scatter_add_*`` in the C prelude).

The helper must give the loop's bits: each workspace entry gets one ``a * b`` rounded and
then added, in A's position order. So every result is compared bit for bit with a Python
Gustavson product in that order, with rows of B shorter and longer than the helper's
threshold (32) and than a lane group, empty rows, both index widths, inf, NaN and signed
zeros, at one and two threads, built with the vector path (AVX-512, fast gathers), without
AVX-512 and with slow gathers (the loop)."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import coiter
from helpers import cflags, csr_with_lengths

SPGEMM = "C(i,j) = A(i,k) * B(k,j)"


@pytest.fixture(scope="module", autouse=True, params=["native", "no-avx512", "plain-loads"])
def helper(request: pytest.FixtureRequest) -> Iterator[str]:
    """Kernels built meanwhile take the vector helper or its loop."""
    with cflags(request.param):
        yield request.param


def gustavson(a: sp.csr_array, b: sp.csr_array) -> sp.csr_array:
    """``a @ b`` with every entry formed as coiter's row workspace forms it: 0.0 plus each
    product ``a[i,k] * b[k,j]`` in A's position order; every structural entry kept, in
    sorted columns."""
    indptr, indices, data = [0], [], []
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(a.shape[0]):
            row: dict[int, float] = {}
            for p in range(a.indptr[i], a.indptr[i + 1]):
                k, x = int(a.indices[p]), a.data[p]
                for q in range(b.indptr[k], b.indptr[k + 1]):
                    j = int(b.indices[q])
                    row[j] = row.get(j, np.float64(0.0)) + x * b.data[q]
            indices += sorted(row)
            data += [row[j] for j in sorted(row)]
            indptr.append(len(indices))
    return sp.csr_array((np.array(data, np.float64), np.array(indices, np.int64),
                         np.array(indptr, np.int64)), shape=(a.shape[0], b.shape[1]))


def assert_same_bits(got: sp.csr_array, want: sp.csr_array) -> None:
    np.testing.assert_array_equal(np.asarray(got.indptr), want.indptr)
    np.testing.assert_array_equal(np.asarray(got.indices), want.indices)
    np.testing.assert_array_equal(np.asarray(got.data).view(np.int64), want.data.view(np.int64))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), average=st.sampled_from([3, 12, 20, 40]),
       rows=st.sampled_from([1, 7, 40]), n=st.sampled_from([30, 200]),
       index=st.sampled_from([np.int32, np.int64]), threads=st.sampled_from([1, 2]),
       special=st.sampled_from([0.0, 0.05]))
def test_spgemm_in_the_loop_s_order(seed: int, average: int, rows: int, n: int, index: type,
                                    threads: int, special: float) -> None:
    """Rows of B around the average (some empty, some as long as the matrix is wide), rows
    of A of up to 12 entries, so that lanes meet coordinates written before and fresh ones."""
    rng = np.random.default_rng(seed)
    b = csr_with_lengths(rng, np.minimum(rng.integers(0, 2 * average + 1, n), n).tolist(),
                         n, index, special)
    a = csr_with_lengths(rng, rng.integers(0, 13, rows).tolist(), n, index, special)
    k = coiter.compile(SPGEMM, formats={"A": "csr", "B": "csr", "C": "csr"})
    got = k(A=coiter.Tensor.from_scipy(a), B=coiter.Tensor.from_scipy(b), threads=threads)
    assert_same_bits(got.to_scipy(), gustavson(a, b))


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_a_dense_row_of_b_fills_the_workspace(index: type) -> None:
    """Every lane fresh (B's first row dense, met first), then every lane written before."""
    rng = np.random.default_rng(7)
    n = 300
    b = csr_with_lengths(rng, [n] + rng.integers(0, 40, n - 1).tolist(), n, index)
    a = csr_with_lengths(rng, [5, 1, 0, 9], n, index)
    a.indices[a.indptr[0]] = 0  # row 0 of A meets B's dense row first
    a.indices[a.indptr[1]] = 0
    a.indices[a.indptr[0]:a.indptr[1]].sort()
    k = coiter.compile(SPGEMM, formats={"A": "csr", "B": "csr", "C": "csr"})
    got = k(A=coiter.Tensor.from_scipy(a), B=coiter.Tensor.from_scipy(b))
    assert_same_bits(got.to_scipy(), gustavson(a, b))


@pytest.mark.parametrize("n", [16384, 16385])
def test_wide_workspaces_keep_the_loop(n: int) -> None:
    """The lanes run up to 16384 columns (COITER_SCATTER_MAX_DIM), the loop past them: both
    give the loop's bits at either side of the limit."""
    rng = np.random.default_rng(n)
    b = csr_with_lengths(rng, rng.integers(0, 60, 50).tolist(), n, np.int32)
    a = csr_with_lengths(rng, [12, 30, 0, 50], 50, np.int32)
    k = coiter.compile(SPGEMM, formats={"A": "csr", "B": "csr", "C": "csr"})
    got = k(A=coiter.Tensor.from_scipy(a), B=coiter.Tensor.from_scipy(b))
    assert_same_bits(got.to_scipy(), gustavson(a, b))


def test_which_loops_take_the_helper() -> None:
    """Double values over an ordered, unique B take the helper; float values and a B whose
    rows are unordered (uniqueness not validated) keep the loop, and still compute A*B."""
    fmt = {"A": "csr", "B": "csr", "C": "csr"}
    src = coiter.compile(SPGEMM, formats=fmt).source
    assert ("w01_count = coiter_scatter_add_i32(w0_vals, w01_set, w01_list, w01_count, "
            "w01_dimension, B2_crd, B_vals, A_vals[pA2], B2_pos[k], B2_pos[k + 1]);") in src
    assert "coiter_scatter_add_i32(" not in coiter.compile(SPGEMM, formats=fmt, dtype=np.float32).source
    unordered = {**fmt, "B": coiter.csr_unordered}
    k = coiter.compile(SPGEMM, formats=unordered)
    assert "coiter_scatter_add_i32(" not in k.source
    rng = np.random.default_rng(3)
    a = csr_with_lengths(rng, [20, 3, 0, 30], 40, np.int32)
    b = csr_with_lengths(rng, rng.integers(0, 30, 40).tolist(), 40, np.int32)
    got = k(A=coiter.Tensor.from_scipy(a), B=coiter.Tensor.from_scipy(b, format=coiter.csr_unordered))
    np.testing.assert_allclose(got.to_scipy().toarray(), (a @ b).toarray(), rtol=1e-12, atol=0)
