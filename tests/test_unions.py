"""Rows of sums of sparse operands formed by a sorting network (``coiter_union_sum3`` in the
C prelude, coiter/lower/unions.py) instead of a merge loop.

The values must be bit for bit the merge's: each coordinate's stored values added in the
sum's order, nothing added for an operand without the coordinate (so -0.0 stays -0.0, and
inf and NaN propagate as the merge's additions do). The reference here adds them one by one
in Python. Row sizes straddle the helper's register counts (8, 16, 32 and 64 entries in
all) and pass them (longer rows take its windows of columns where they span few columns an
entry, the merge where not); column counts straddle its coordinate limit for short rows
(2^25); operands have 32- or 64-bit indices (the helper narrows the latter's coordinates);
rows of operands that share a pattern merge; every case runs with and without AVX-512
(``-mno-avx512f``: the merge only) and at 1 and 2 threads."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import coiter
from helpers import CFLAGS, cflags

SUMS = {2: "D(i,j) = A(i,j) + B(i,j)", 3: "D(i,j) = A(i,j) + B(i,j) + C(i,j)"}
VALUES = [-0.0, 0.0, 1.5, -2.25, 1e300, np.inf, -np.inf, np.nan, 0.1, -0.7]
# row lengths of one operand: totals over two or three operands fall on both sides of 16,
# 32 and 64
LENGTHS = [0, 1, 2, 5, 8, 11, 16, 17, 21, 22, 30, 40]
# longer rows: totals past 64 that span both fewer and more than 8 columns an entry
LONG_LENGTHS = [0, 3, 30, 65, 120, 400, 900]
# operands' index types: the helper narrows int64 runs' coordinates
INDICES = [np.int32, np.int64]


def _kernel(n: int, result: str = "csr", operands: str = "csr") -> coiter.Kernel:
    formats = {t: operands for t in "ABC"[:n]} | {"D": result}
    return coiter.compile(SUMS[n], formats=formats)


def _matrix(rng: np.random.Generator, lengths: list[int], cols: int, pool: np.ndarray,
            index: type = np.int32) -> sp.csr_array:
    """Rows of the given lengths, columns drawn from ``pool`` (a few columns, so that the
    operands share many), values random and a quarter from VALUES."""
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([np.sort(rng.choice(pool, size=n, replace=False)) for n in lengths] +
                             [np.zeros(0, np.int64)])
    special = rng.choice(np.array(VALUES), size=len(indices))
    data = np.where(rng.random(len(indices)) < 0.25, special, rng.standard_normal(len(indices)))
    return sp.csr_array((data, indices.astype(index), indptr.astype(index)), shape=(len(lengths), cols))


def _reference(ops: list[sp.csr_array]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR arrays of the operands' union, each coordinate's values added in operand order."""
    rows = len(ops[0].indptr) - 1
    entries = sorted((i, int(m.indices[p]), s, float(m.data[p]))
                     for s, m in enumerate(ops) for i in range(rows)
                     for p in range(m.indptr[i], m.indptr[i + 1]))
    indptr, indices, data = np.zeros(rows + 1, np.int64), [], []
    for (i, j), group in itertools.groupby(entries, key=lambda e: (e[0], e[1])):
        values = [e[3] for e in group]
        total = values[0]
        for x in values[1:]:
            total = total + x
        indptr[i + 1] += 1
        indices.append(j)
        data.append(total)
    return np.cumsum(indptr), np.array(indices, np.int64), np.array(data, np.float64)


def _takes_helper(k: coiter.Kernel) -> bool:
    """Whether the code of every variant ``k`` has built calls the helper (all variants
    here have 32-bit indices and double values)."""
    return all("coiter_union_sum3(" in v.source.split("int coiter_fused(")[1] for v in k.core.variants())


def _check(got: coiter.Tensor, ops: list[sp.csr_array]) -> None:
    indptr, indices, data = _reference(ops)
    out = got.to_scipy().tocsr()
    np.testing.assert_array_equal(out.indptr, indptr)
    np.testing.assert_array_equal(out.indices, indices)
    # bit for bit: -0.0 against 0.0 and NaN against NaN too
    np.testing.assert_array_equal(out.data.view(np.int64), data.view(np.int64))


def _sum_and_check(flags: str, ops: list[sp.csr_array], threads: int = 1) -> None:
    """The operands' sum by a kernel built with ``CFLAGS[flags]``, on ``threads`` threads,
    checked bit for bit; the kernel's code calls the helper."""
    kernel = _kernel(len(ops))
    with cflags(flags):
        got = kernel(threads=threads, **dict(zip("ABC", ops)))
    _check(got, ops)
    assert _takes_helper(kernel)


@pytest.mark.parametrize("flags", list(CFLAGS))
@settings(max_examples=25, deadline=None)
@given(n=st.sampled_from([2, 3]), seed=st.integers(0, 2**32 - 1),
       lengths=st.lists(st.tuples(*[st.sampled_from(LENGTHS)] * 3), min_size=1, max_size=10),
       cols=st.sampled_from([50, 3000, 2**25 - 1, 2**25, 2**27 + 48]), threads=st.sampled_from([1, 2]),
       indices=st.tuples(*[st.sampled_from(INDICES)] * 3))
def test_sum_rows_bit_for_bit(flags: str, n: int, seed: int, lengths: list[tuple[int, int, int]],
                              cols: int, threads: int, indices: tuple[type, type, type]) -> None:
    rng = np.random.default_rng(seed)
    # the last 48 columns: both sides of the helper's coordinate limit (2^25), and past
    # where keys of one register would overflow (2^27)
    pool = np.arange(cols - 48, cols)
    ops = [_matrix(rng, [row[s] for row in lengths], cols, pool, indices[s]) for s in range(n)]
    _sum_and_check(flags, ops, threads)


@pytest.mark.parametrize("flags", list(CFLAGS))
@settings(max_examples=25, deadline=None)
@given(n=st.sampled_from([2, 3]), seed=st.integers(0, 2**32 - 1),
       lengths=st.lists(st.tuples(*[st.sampled_from(LONG_LENGTHS)] * 3), min_size=1, max_size=6),
       width=st.sampled_from([90, 511, 512, 513, 1500, 6000]), last=st.booleans(),
       threads=st.sampled_from([1, 2]), indices=st.tuples(*[st.sampled_from(INDICES)] * 3))
def test_long_rows_bit_for_bit(flags: str, n: int, seed: int, lengths: list[tuple[int, int, int]],
                               width: int, last: bool, threads: int,
                               indices: tuple[type, type, type]) -> None:
    """Rows of more than 64 entries: within 8 columns an entry they take the helper's
    windows of 512 columns (spans across several windows, and up to the greatest int32
    coordinate), wider ones the merge, as do all such rows of operands with int64 indices."""
    rng = np.random.default_rng(seed)
    cols = 2**31 - 2 if last else width + 7  # the most columns int32 results take
    pool = np.arange(cols - width, cols)
    ops = [_matrix(rng, [min(row[s], width) for row in lengths], cols, pool, indices[s])
           for s in range(n)]
    _sum_and_check(flags, ops, threads)


@pytest.mark.parametrize("flags", list(CFLAGS))
@pytest.mark.parametrize("index", INDICES)
def test_rows_alike(flags: str, index: type) -> None:
    """Operands of one pattern (A + 2A + A'), whose rows of more than 16 entries merge, and
    rows that only begin and end alike."""
    rng = np.random.default_rng(13)
    lengths = [0, 1, 5, 6, 17, 40, 100, 300]
    a = _matrix(rng, lengths, 400, np.arange(400), index)
    b = sp.csr_array((2 * a.data, a.indices, a.indptr), shape=a.shape)
    c = sp.csr_array((rng.standard_normal(a.nnz), a.indices, a.indptr), shape=a.shape)
    # same lengths, first and last columns, other columns between
    d = a.copy()
    for i, n in enumerate(lengths):
        if n > 2:
            inner = np.sort(rng.choice(np.arange(d.indices[d.indptr[i]] + 1, d.indices[d.indptr[i + 1] - 1]),
                                       size=n - 2, replace=False))
            d.indices[d.indptr[i] + 1:d.indptr[i + 1] - 1] = inner
    kernel, pair = _kernel(3), _kernel(2)
    with cflags(flags):
        for ops in ([a, b, c], [a, d, c], [a, b, d]):
            _check(kernel(**dict(zip("ABC", ops))), ops)
        _check(pair(A=a, B=b), [a, b])
    assert _takes_helper(kernel) and _takes_helper(pair)


@pytest.mark.parametrize("flags", list(CFLAGS))
@pytest.mark.parametrize("width", [65, 511, 512, 513, 1024, 1025])
def test_window_edges(flags: str, width: int) -> None:
    """Rows filling every column of [0, width): the helper's last window of 512 columns
    holds from width - 1 columns down to just one."""
    rng = np.random.default_rng(width)
    full = _matrix(rng, [width], width, np.arange(width))
    sparse = _matrix(rng, [width // 3], width, np.arange(width))
    _sum_and_check(flags, [sparse, full, sparse])


@pytest.mark.parametrize("flags", list(CFLAGS))
@pytest.mark.parametrize("length", [1, 5, 10, 21, 22, 30, 40])
def test_order_of_additions(flags: str, length: int) -> None:
    """Every column in all three operands: (1e16 + 1) - 1e16 is 0.0 in the sum's order and
    1.0 in another; a lone -0.0 stays -0.0, and -0.0 + 0.0 is 0.0."""
    cols = np.arange(length, dtype=np.int32)
    row = lambda values, k: sp.csr_array((values, k, np.array([0, len(k)], np.int32)), shape=(1, 40))
    a, b, c = (row(np.full(length, x), cols) for x in (1e16, 1.0, -1e16))
    zeros = [row(np.full(len(k), x), k) for x, k in ((-0.0, cols), (0.0, cols[::2]), (-0.0, cols[1::3]))]
    kernel = _kernel(3)
    with cflags(flags):
        got = kernel(A=a, B=b, C=c)
        signed = kernel(A=zeros[0], B=zeros[1], C=zeros[2])
    np.testing.assert_array_equal(got.to_scipy().data.view(np.int64), np.zeros(length).view(np.int64))
    _check(signed, zeros)
    assert _takes_helper(kernel)


@pytest.mark.parametrize("flags", list(CFLAGS))
@pytest.mark.parametrize("result, operands", [("dcsr", "csr"), ("csr", "dcsr"), ("dcsr", "dcsr")])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_other_formats(flags: str, result: str, operands: str, index: type) -> None:
    """DCSR results and operands; 64-bit indices."""
    rng = np.random.default_rng(7)
    lengths = [[rng.choice(LENGTHS) if rng.random() < 0.8 else 0 for _ in range(40)] for _ in range(3)]
    ops = [_matrix(rng, lengths[s], 200, np.arange(200), index) for s in range(3)]
    kernel = _kernel(3, result, operands)
    with cflags(flags):
        got = kernel(**dict(zip("ABC", ops)))
    _check(got, ops)
    assert _takes_helper(kernel)


def test_tensor_fibers() -> None:
    """A sum of CSF 3-tensors forms its last level's fibers the same way."""
    rng = np.random.default_rng(3)
    shape = (6, 7, 90)
    arrays = [np.where(rng.random(shape) < p, rng.standard_normal(shape), 0.0) for p in (0.1, 0.3, 0.5)]
    k = coiter.compile("D(i,j,k) = A(i,j,k) + B(i,j,k) + C(i,j,k)",
                       formats={t: "sss" for t in "ABCD"})
    got = k(**{t: coiter.Tensor.from_numpy(a, format="sss") for t, a in zip("ABC", arrays)})
    assert all("coiter_union_sum3(" in v.source.split("int coiter_fused(")[1] for v in k.core.variants())
    np.testing.assert_array_equal(got.to_numpy(), arrays[0] + arrays[1] + arrays[2])


@pytest.mark.parametrize("expr, formats", [
    (SUMS[3], {"A": "csr", "B": "csr", "C": "csr", "D": "csr"}),
    (SUMS[2], {"A": "csr", "B": "csr", "D": "csr"}),
])
def test_sums_take_the_helper(expr: str, formats: dict[str, str]) -> None:
    k = coiter.compile(expr, formats=formats)
    assert "coiter_union_sum3(" in k.source.split("int coiter_fused(")[1]


@pytest.mark.parametrize("expr, dtype", [
    ("D(i,j) = A(i,j) + (B(i,j) + C(i,j))", np.float64),  # adds in another order
    ("D(i,j) = A(i,j) + 2 * B(i,j) + C(i,j)", np.float64),
    ("D(i,j) = A(i,j) + B(i,j) + C(i,j)", np.float32),
    ("D(i,j) = A(i,j) * B(i,j) + C(i,j)", np.float64),
])
def test_other_sums_merge(expr: str, dtype: type) -> None:
    """Sums the helper does not compute keep the merge, and their values."""
    rng = np.random.default_rng(11)
    ops = [sp.random_array((30, 40), density=0.3, format="csr", random_state=rng, dtype=dtype)
           for _ in range(3)]
    k = coiter.compile(expr, formats={t: "csr" for t in "ABCD"})
    got = k(**dict(zip("ABC", ops)))
    assert not any("coiter_union_sum3(" in v.source.split("int coiter_fused(")[1] for v in k.core.variants())
    a, b, c = (m.toarray() for m in ops)
    want = {"D(i,j) = A(i,j) + (B(i,j) + C(i,j))": a + (b + c), "D(i,j) = A(i,j) + 2 * B(i,j) + C(i,j)": a + 2 * b + c,
            "D(i,j) = A(i,j) + B(i,j) + C(i,j)": a + b + c, "D(i,j) = A(i,j) * B(i,j) + C(i,j)": a * b + c}[expr]
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-6)


def test_operands_with_fills_merge() -> None:
    """Fills 1 and -1 leave the sum's absent entries 0, but an entry of A alone adds B's
    -1: such sums keep the merge."""
    rng = np.random.default_rng(5)
    a, b = (np.where(rng.random((8, 9)) < 0.4, rng.integers(2, 9, (8, 9)), f).astype(float) for f in (1.0, -1.0))
    k = coiter.compile("D(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr", "D": "csr"},
                       fill_values={"A": 1.0, "B": -1.0})
    got = k(A=coiter.Tensor.from_numpy(a, format="csr", fill_value=1.0),
            B=coiter.Tensor.from_numpy(b, format="csr", fill_value=-1.0))
    assert not any("coiter_union_sum3(" in v.source.split("int coiter_fused(")[1] for v in k.core.variants())
    np.testing.assert_array_equal(got.to_numpy(), a + b)
