"""Packed storages in one block advised for huge pages (coiter.formats.memory): the block's
size, the arrays' copies, and kernels and pickles over them, against NumPy."""
from __future__ import annotations

import mmap
import pickle

import numpy as np
import pytest

import coiter
from coiter.formats import memory
from coiter.formats.memory import ALIGN, HUGE_PAGE, block_length, place

MIB = 1 << 20


@pytest.fixture
def offered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Huge pages offered whatever this machine's setting (the block is made all the same)."""
    monkeypatch.setattr(memory, "huge_pages_offered", lambda: True)


@pytest.mark.parametrize("nbytes,length", [
    (0, 0), (MIB, 0), (4 * MIB // 3, 0),         # rounding up would more than add half
    (4 * MIB // 3 + 1, 2 * MIB), (2 * MIB, 2 * MIB),  # at most half again: whole pages
    (5 * MIB // 2, 5 * MIB // 2),                 # 4 MiB would add 60%: the last page small
    (7 * MIB // 2, 4 * MIB), (5 * MIB, 6 * MIB),
])
def test_block_length(nbytes: int, length: int) -> None:
    assert block_length(nbytes) == length


def _levels(rng: np.random.Generator, n: int) -> tuple[tuple[dict[str, np.ndarray], ...], np.ndarray]:
    pos = np.r_[0, np.cumsum(rng.integers(1, 4, n))].astype(np.int32)
    crd = rng.integers(0, 1000, pos[-1]).astype(np.int32)
    return ({}, {"pos": pos, "crd": crd}), rng.standard_normal(pos[-1])


def test_placed_arrays_are_copies_in_one_aligned_block(offered: None) -> None:
    rng = np.random.default_rng(0)
    levels, vals = _levels(rng, 200_000)
    placed, pvals = place(levels, vals)
    arrays = [levels[1]["pos"], levels[1]["crd"], vals]
    copies = [placed[1]["pos"], placed[1]["crd"], pvals]
    assert placed[0] == {} and list(placed[1]) == ["pos", "crd"]
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(c, a)
        assert c.dtype == a.dtype and c.flags.c_contiguous and c.flags.writeable
        assert not np.shares_memory(a, c)
        assert c.ctypes.data % ALIGN == 0
    # one block from a huge-page boundary, the arrays in order, each from the next cache line
    assert copies[0].ctypes.data % HUGE_PAGE == 0
    for a, b in zip(copies, copies[1:]):
        assert b.ctypes.data == a.ctypes.data + -(-a.nbytes // ALIGN) * ALIGN
    del levels, vals, arrays
    pvals[:] = 1.0  # the block outlives the originals and is the copies' own
    assert placed[1]["crd"].sum() >= 0 and pvals.sum() == pvals.shape[0]


def test_small_arrays_or_no_huge_pages_stay_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    small = _levels(rng, 1000)
    placed, pvals = place(*small)
    assert placed[1]["pos"] is small[0][1]["pos"] and pvals is small[1]
    monkeypatch.setattr(memory, "huge_pages_offered", lambda: False)
    large = _levels(rng, 200_000)
    placed, pvals = place(*large)
    assert placed is large[0] and pvals is large[1]


def test_huge_pages_offered_reads_the_setting(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    setting = tmp_path / "enabled"
    monkeypatch.setattr(memory, "THP_SETTING", setting)
    for text, offered in [("always [madvise] never\n", True), ("[always] madvise never\n", True),
                          ("always madvise [never]\n", False)]:
        setting.write_text(text)
        memory.huge_pages_offered.cache_clear()
        assert memory.huge_pages_offered() is offered
    setting.unlink()
    memory.huge_pages_offered.cache_clear()
    assert memory.huge_pages_offered() is False
    monkeypatch.undo()
    memory.huge_pages_offered.cache_clear()


def _owner(a: np.ndarray) -> object:
    """What holds an array's memory: the end of its chain of bases."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_kernels_on_a_placed_tensor(offered: None, dtype: type) -> None:
    """A tensor packed into a block (over 2 MiB of arrays): TTV at 1 and 2 threads, and the
    tensor after a pickle round trip (as Dask sends it), against NumPy."""
    rng = np.random.default_rng(2)
    shape, nnz = (60, 70, 100), 300_000
    coords = np.array(np.unravel_index(rng.choice(np.prod(shape), nnz, replace=False), shape))
    vals = (rng.integers(-9, 10, nnz) if dtype == np.int64 else rng.standard_normal(nnz)).astype(dtype)
    b = coiter.Tensor.from_coo(coords, vals, shape, format=coiter.csf(3))
    assert b.storage.vals.ctypes.data % ALIGN == 0
    assert isinstance(_owner(b.storage.vals), mmap.mmap)
    dense = np.zeros(shape, dtype)
    dense[tuple(coords)] = vals
    c = (rng.integers(-9, 10, 100) if dtype == np.int64 else rng.standard_normal(100)).astype(dtype)
    k = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats={"B": coiter.csf(3), "A": coiter.csf(2)},
                       dtype=dtype)
    want = np.einsum("ijk,k->ij", dense, c)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for t in (b, pickle.loads(pickle.dumps(b))):
        for threads in (1, 2):
            np.testing.assert_allclose(k(B=t, c=c, threads=threads).to_numpy(), want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(b.to_numpy(), dense)
