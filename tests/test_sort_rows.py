"""Ordering a row workspace's coordinates (the C helper ``coiter_sort_index``): insertion
sort up to 16 entries, sorting networks up to 128 where the processor has AVX-512 (quicksort
up to 32 elsewhere), a bitmap read back in order beyond (with AVX-512 by a scan of every
word the row's range spans where it spans fewer than eight a coordinate, else through
summary bits). Every path runs with and without AVX-512 (``-mno-avx512f`` in
``COITER_CFLAGS``).

Each output row is built as the union of disjoint sorted chunks (rows of B), so the
workspace receives its coordinates unsorted and the row's length is exact; lengths sit on
both sides of every threshold, over column ranges one to many bitmap summary words wide."""
from __future__ import annotations


import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import coiter
from helpers import CFLAGS, cflags

LENGTHS = [0, 1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 300, 2000]
KERNELS = {flags: coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
           for flags in CFLAGS}  # one per flags: a kernel builds its code at its first call


def _operands(lengths: list[int], dim: int, seed: int) -> tuple[sp.csr_array, sp.csr_array]:
    """A and B whose product's row i holds lengths[i] random columns below dim, arriving in
    up to eight sorted chunks."""
    rng = np.random.default_rng(seed)
    a_rows, a_cols, chunks = [], [], []
    for i, n in enumerate(lengths):
        columns = rng.choice(dim, size=min(n, dim), replace=False)
        for part in np.array_split(columns, min(8, max(1, len(columns)))):
            if len(part):
                a_rows.append(i)
                a_cols.append(len(chunks))
                chunks.append(np.sort(part))
    b_rows = np.repeat(np.arange(len(chunks)), [len(c) for c in chunks])
    b_cols = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    a = sp.csr_array((rng.random(len(a_rows)) + 0.5, (a_rows, a_cols)),
                     shape=(len(lengths), max(1, len(chunks))))
    b = sp.csr_array((rng.random(len(b_cols)) + 0.5, (b_rows, b_cols)),
                     shape=(max(1, len(chunks)), dim))
    return a, b


@pytest.mark.parametrize("flags", list(CFLAGS))
@settings(max_examples=20, deadline=None)
@given(lengths=st.lists(st.sampled_from(LENGTHS), min_size=1, max_size=12),
       dim=st.sampled_from([3000, 70000, 1_000_000]), seed=st.integers(0, 2**32 - 1),
       threads=st.sampled_from([1, 2]))
def test_rows_come_out_sorted(flags: str, lengths: list[int], dim: int, seed: int, threads: int) -> None:
    a, b = _operands(lengths, dim, seed)
    with cflags(flags):
        got = sp.csr_array(KERNELS[flags](A=a, B=b, threads=threads).to_scipy())
    want = sp.csr_array(a @ b)
    want.sort_indices()
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)  # each row strictly increasing
    np.testing.assert_allclose(got.data, want.data, rtol=1e-14)


@pytest.mark.parametrize("flags", list(CFLAGS))
@pytest.mark.parametrize("length, dim", [
    (300, 3000),         # a range of 47 words: scanned
    (2000, 70000),       # 1094 words, fewer than 8 a coordinate: scanned 512 words at a time
    (129, 70000),        # more than 8 a coordinate: read through summary bits
    (300, 1_000_000),    # summary bits
    (2000, 1_000_000),   # 15625 words, scanned in 31 pieces
    (40000, 40000),      # every word nonzero: each piece's list of words fills to its end
])
def test_long_rows_either_read(flags: str, length: int, dim: int) -> None:
    """Rows past the sorting networks, on both sides of the choice between scanning the
    range's bitmap words and following summary bits, next to short rows."""
    a, b = _operands([length, 3, length, 0, length], dim, seed=length + dim)
    with cflags(flags):
        got = sp.csr_array(KERNELS[flags](A=a, B=b).to_scipy())
    want = sp.csr_array(a @ b)
    want.sort_indices()
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_allclose(got.data, want.data, rtol=1e-14)
