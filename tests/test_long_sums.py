"""Sums over long runs of positions split into partial sums (coiter/lower/sums.py).

The partial sums change the order of additions, so the tests pin the order itself: with a
vector of ones every product is exact, and the result must equal, bit for bit, a Python sum
in the documented order (four interleaved partial sums added pairwise, then the remainder)
where an operand's runs average SPLIT_MIN_AVERAGE positions or more, and the one-by-one sum
below that. Double and float products of a gathered vector take eight lanes instead where the
runs are long or uneven (coiter/lower/vector_runs.py, tests/test_vector_runs.py): the split
is tested on complex values, whose sums it alone takes, and the lanes' choice on double and
float32 ones. Values are drawn over many magnitudes so that a different order shows."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import coiter
from coiter.lower.sums import LANES, SPLIT_MIN_AVERAGE
from helpers import row_sums_in_lanes, takes_lanes


def _in_order(values: np.ndarray) -> np.generic:
    total = values.dtype.type(0)
    for v in values:
        total += v
    return total


def _split_order(values: np.ndarray) -> np.generic:
    grouped = len(values) // LANES * LANES
    lanes = [_in_order(values[k:grouped:LANES]) for k in range(LANES)]
    total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
    for v in values[grouped:]:
        total += v
    return total


def _row_sums(a: sp.csr_array, split: bool) -> np.ndarray:
    add = _split_order if split else _in_order
    return np.array([add(a.data[a.indptr[i]:a.indptr[i + 1]]) for i in range(a.shape[0])],
                    dtype=a.dtype)


def _matrix(rng: np.random.Generator, lengths: list[int], n: int, dtype: type) -> sp.csr_array:
    """Rows of the given lengths (distinct columns), values spread over 16 orders of magnitude."""
    cols = [np.sort(rng.choice(n, size=k, replace=False)) for k in lengths]
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    size = int(indptr[-1])
    values = rng.standard_normal(size) * 10.0 ** rng.uniform(-8, 8, size)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(size) * 10.0 ** rng.uniform(-8, 8, size)
    indices = np.concatenate(cols).astype(np.int32) if cols else np.zeros(0, np.int32)
    return sp.csr_array((values.astype(dtype), indices, indptr), shape=(len(lengths), n))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), average=st.sampled_from([1, 8, 15, 16, 17, 40, 200]),
       dtype=st.sampled_from([np.float64, np.float32, np.complex128, np.complex64]),
       threads=st.sampled_from([1, 2]))
def test_row_sums_follow_the_documented_order(seed: int, average: int, dtype: type, threads: int) -> None:
    rng = np.random.default_rng(seed)
    rows, n = 30, 400
    # lengths around the average: some rows empty or shorter than one group of LANES
    lengths = rng.integers(0, 2 * average + 1, rows)
    lengths = np.minimum(lengths, n).tolist()
    a = _matrix(rng, lengths, n, dtype)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    got = k(A=a, x=np.ones(n, dtype), threads=threads).to_numpy()
    if np.dtype(dtype).kind == "f" and takes_lanes(np.diff(a.indptr)):
        want = row_sums_in_lanes(a, np.ones(n, dtype))
    else:
        want = _row_sums(a, split=a.nnz >= SPLIT_MIN_AVERAGE * rows)
    assert np.array_equal(got, want)
    # and SciPy's one-by-one sums to rounding: two orders of a row's sum differ by at most
    # (length - 1) * eps * the sum of its magnitudes
    magnitudes = sp.csr_array((np.abs(a.data), a.indices, a.indptr), shape=a.shape) @ np.ones(n)
    bound = np.finfo(dtype).eps * np.maximum(np.diff(a.indptr) - 1, 0) * magnitudes
    assert np.all(np.abs(got - a @ np.ones(n, dtype)) <= bound)


def test_split_is_chosen_per_operand_not_per_row() -> None:
    """An operand averaging 16 a row splits its short rows' sums too (their remainder loop);
    one averaging less never splits, however long a row."""
    rng = np.random.default_rng(8)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    long_first = _matrix(rng, [4 * SPLIT_MIN_AVERAGE - 3, 3, 0, 0], 100, np.complex64)
    sparse_rows = _matrix(rng, [4 * SPLIT_MIN_AVERAGE - 4, 0, 0, 0, 0], 100, np.complex64)
    for a, split in ((long_first, True), (sparse_rows, False)):
        # the data tell the two orders apart
        assert not np.array_equal(_row_sums(a, split=True), _row_sums(a, split=False))
        assert np.array_equal(k(A=a, x=np.ones(100, np.complex64)).to_numpy(), _row_sums(a, split))


@pytest.mark.parametrize("fmt", ["csr", "dcsr", "csc"])
@pytest.mark.parametrize("threads", [1, 2])
def test_formats_with_long_runs(fmt: str, threads: int) -> None:
    """Row sums of DCSR (runs below a compressed level), and CSC's column sums for x^T A."""
    rng = np.random.default_rng(11)
    a = sp.random_array((300, 200), density=0.3, rng=rng, format="csr")
    x = rng.standard_normal(300 if fmt == "csc" else 200) * (1 + 0.5j)
    expr, ref = ("y(j) = A(i,j) * x(i)", x @ a) if fmt == "csc" else ("y(i) = A(i,j) * x(j)", a @ x)
    k = coiter.compile(expr, formats={"A": fmt}, dtype=np.complex64)
    assert "_1 += " in k.source
    got = k(A=a.astype(np.complex64), x=x.astype(np.complex64), threads=threads).to_numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fiber", [3, SPLIT_MIN_AVERAGE, 90])
@pytest.mark.parametrize("formats", [{"B": "sss", "A": "ss"}, {"B": "sss", "A": "ds"},
                                     {"B": "dss", "A": "ss"}])
def test_ttv_fibers(fiber: int, formats: dict[str, str]) -> None:
    """TTV sums each fiber of a CSF tensor: the same loop, split when fibers are long. A
    result with its own pattern is assembled in a parallel region with labels, which must not
    be copied: there each split loop tests its flag itself."""
    rng = np.random.default_rng(fiber)
    dense = rng.standard_normal((20, 15, 120)) * (rng.random((20, 15, 120)) < fiber / 120)
    b = coiter.Tensor.from_numpy(dense.astype(np.complex64), format=formats["B"])
    c = rng.standard_normal(120) * (0.5 - 1j)
    k = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats=formats, dtype=np.complex64)
    assert "_1 += " in k.source
    for threads in (1, 2):
        got = k(B=b, c=c.astype(np.complex64), threads=threads).to_numpy()
        np.testing.assert_allclose(got, np.einsum("ijk,k->ij", dense, c), rtol=1e-4, atol=1e-4)


def test_integer_and_short_loops_are_left_alone() -> None:
    """Integer sums are exact in any order and gain nothing; dense loops have no runs."""
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, dtype=np.int64)
    assert "_1 += " not in k.source
    a = sp.random_array((50, 60), density=0.5, rng=np.random.default_rng(2), format="csr")
    a.data = np.round(a.data * 100).astype(np.int64)
    x = np.arange(60, dtype=np.int64)
    assert np.array_equal(k(A=a, x=x).to_numpy(), a @ x)
    dense = coiter.compile("y(i) = A(i,j) * x(j)")
    assert "_1 += " not in dense.source


@pytest.mark.parametrize("dtype, flag", [(np.complex64, "long"), (np.float64, "vector"),
                                         (np.float32, "vector")])
def test_two_operands_with_their_own_flags(dtype: type, flag: str) -> None:
    """Two sums in one row loop over different operands: each loop tests its operand's flag,
    so a matrix of long rows splits (complex) or takes the lanes (double, float) beside one of
    short rows."""
    rng = np.random.default_rng(5)
    a = sp.random_array((80, 300), density=0.4, rng=rng, format="csr", dtype=dtype)
    b = sp.random_array((80, 200), density=0.02, rng=rng, format="csr", dtype=dtype)
    x, z = rng.standard_normal(300).astype(dtype), rng.standard_normal(200).astype(dtype)
    k = coiter.compile("y(i) = A(i,j) * x(j) + B(i,k) * z(k)", formats={"A": "csr", "B": "csr"},
                       dtype=dtype)
    assert f"if (A2_{flag}_runs) {{" in k.source and f"if (B2_{flag}_runs) {{" in k.source
    tol = 1e-4 if dtype in (np.float32, np.complex64) else 1e-12
    for threads in (1, 2):
        np.testing.assert_allclose(k(A=a, x=x, B=b, z=z, threads=threads).to_numpy(), a @ x + b @ z,
                                   rtol=tol, atol=tol)
