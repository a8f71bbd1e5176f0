"""Tensor slicing (NumPy basic indexing) and concatenation of storages, against NumPy on the
same data, in every format (the blocks of coiter.dask are made this way)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import coiter
from coiter import Tensor
from coiter.errors import ArgumentError, ShapeError
from coiter.formats.slicing import concatenate

MATRIX_FORMATS = [coiter.csr, coiter.csc, coiter.coo(), coiter.dcsr, "dd", coiter.ell(),
                  coiter.bcsr((2, 3)), coiter.dia()]
TENSOR_FORMATS = ["sss", "dss", "dsd", "ddd"]
M = sp.random(7, 9, density=0.4, random_state=1, format="csr")
X = np.where((x := np.random.default_rng(0).random((3, 4, 5))) < 0.5, 0, x)


def _index(size: int) -> st.SearchStrategy:
    ints = st.integers(-size, size - 1)
    bounds = st.none() | st.integers(-size - 2, size + 2)
    steps = st.none() | st.integers(1, 3)
    return ints | st.builds(slice, bounds, bounds, steps)


def _key(shape: tuple[int, ...]) -> st.SearchStrategy:
    return st.integers(0, len(shape)).flatmap(
        lambda n: st.tuples(*(_index(d) for d in shape[:n])).flatmap(
            lambda head: st.sampled_from([head, head + (Ellipsis,)]) if head else st.just((Ellipsis,))))


def _same(got: object, want: np.ndarray) -> None:
    dense = got.to_numpy() if isinstance(got, Tensor) else np.asarray(got)
    assert dense.shape == want.shape
    np.testing.assert_array_equal(dense, want)


@pytest.mark.parametrize("fmt", MATRIX_FORMATS, ids=str)
@settings(max_examples=60, deadline=None)
@given(key=_key(M.shape) | st.deferred(lambda: _array_key(M.shape)))
def test_matrix_slices_match_numpy(fmt: object, key: tuple) -> None:
    """Basic indexing, and one integer array or mask beside slices (which keeps the format)."""
    T = Tensor.from_scipy(M, format=fmt)
    got = T[key]
    _same(got, M.toarray()[key])
    if isinstance(got, Tensor) and got.order:
        assert got.format.order == got.order and got.dtype == T.dtype


@pytest.mark.parametrize("fmt", TENSOR_FORMATS)
@settings(max_examples=40, deadline=None)
@given(key=_key(X.shape))
def test_tensor_slices_match_numpy(fmt: str, key: tuple) -> None:
    _same(Tensor.from_numpy(X, format=fmt)[key], X[key])


@pytest.mark.parametrize("T", [Tensor.from_scipy(M), Tensor.from_scipy(M, format=coiter.dcsr),
                               Tensor.from_numpy(X, format="sss"), Tensor.from_numpy(X, format="dsd")],
                         ids=["csr", "dcsr", "csf", "dsd"])
def test_row_ranges_share_the_arrays_below_the_first_level(T: Tensor) -> None:
    rows = T[1:3]
    assert rows.format == T.format
    assert np.shares_memory(rows.storage.vals, T.storage.vals)
    deepest = max(d for d, arrays in enumerate(T.storage.levels) if "crd" in arrays)
    assert deepest > 0
    assert np.shares_memory(rows.storage.levels[deepest]["crd"], T.storage.levels[deepest]["crd"])
    # the view is a valid operand: a kernel reads it
    np.testing.assert_allclose(coiter.evaluate("s = W(i,j)" if T.order == 2 else "s = W(i,j,k)",
                                               W=rows).to_numpy(), T.to_numpy()[1:3].sum())


@pytest.mark.parametrize("fmt", [coiter.csr, coiter.dcsr, "dd", coiter.coo()], ids=str)
@pytest.mark.parametrize("axis", [0, 1])
def test_concatenated_pieces_make_the_whole(fmt: object, axis: int) -> None:
    T = Tensor.from_scipy(M, format=fmt)
    cuts = [0, 2, 2, 5, M.shape[axis]]  # an empty piece among them
    pieces = [T[(slice(None),) * axis + (slice(a, b),)].storage for a, b in zip(cuts, cuts[1:])]
    whole = Tensor._wrap(concatenate(pieces, axis))
    assert whole.format == T.format
    _same(whole, M.toarray())


def test_slice_errors_name_the_culprit() -> None:
    T = Tensor.from_scipy(M)
    with pytest.raises(ShapeError, match="index 9 is out of bounds for mode 1 of size 9"):
        T[0, 9]
    with pytest.raises(ShapeError, match="too many indices for a tensor of order 2"):
        T[0, 1, 2]
    with pytest.raises(ArgumentError, match="negative step"):
        T[::-1]
    with pytest.raises(ShapeError, match="cannot concatenate shapes"):
        concatenate([T.storage, T[:, 1:].storage], 0)


@pytest.mark.parametrize("fmt", ["dss", "dds", "dsd", "ddd"])
def test_row_blocks_of_dense_first_tensors_join_in_their_format(fmt: str) -> None:
    T = Tensor.from_numpy(X, format=fmt)
    pieces = [T[a:b].storage for a, b in [(0, 1), (1, 1), (1, 3)]]
    whole = Tensor._wrap(concatenate(pieces, 0))
    assert whole.format == T.format
    _same(whole, X)
    # the joined arrays are a valid operand: a kernel reads them
    np.testing.assert_allclose(coiter.evaluate("s = W(i,j,k)", W=whole).to_numpy(), X.sum())


def _array_key(shape: tuple[int, ...]) -> st.SearchStrategy:
    """Slices and ``...`` with one integer array (repeats, negatives, any order) or mask."""
    def build(mode: int, slices: tuple, picks: object, ellipsis: bool) -> tuple:
        return slices[:mode] + (picks,) + ((Ellipsis,) if ellipsis else slices[mode + 1:])

    def at(mode: int) -> st.SearchStrategy:
        d = shape[mode]
        picks = st.lists(st.integers(-d, d - 1), max_size=6) | st.builds(
            lambda m: np.asarray(m, dtype=bool), st.lists(st.booleans(), min_size=d, max_size=d))
        slices = st.tuples(*(st.builds(slice, st.none() | st.integers(0, n), st.none() | st.integers(0, n),
                                       st.none() | st.integers(1, 2)) for n in shape))
        return st.builds(build, st.just(mode), slices, picks, st.booleans())
    return st.integers(0, len(shape) - 1).flatmap(at)


@pytest.mark.parametrize("fmt", TENSOR_FORMATS)
def test_index_arrays_of_tensor_modes(fmt: str) -> None:
    T = Tensor.from_numpy(X, format=fmt)
    for key in ([2, 0, 2], (slice(None), [3, -1]), (Ellipsis, np.array([4, 0])),
                (slice(1, 3), slice(None), X[0, 0] > -1)):
        _same(T[key], X[key])


def test_index_array_errors_name_the_culprit() -> None:
    T = Tensor.from_scipy(M)
    with pytest.raises(ShapeError, match="index 7 is out of bounds for mode 0 of size 7"):
        T[[0, 7]]
    with pytest.raises(ArgumentError, match="one integer array"):
        T[[0, 1], [1, 2]]
    with pytest.raises(ArgumentError, match="one integer array"):
        T[0, [1, 2]]
    with pytest.raises(ShapeError, match="a boolean mask of length 3 for a mode of size 9"):
        T[:, np.array([True, False, True])]
    with pytest.raises(ArgumentError, match="1-D list of integers"):
        T[[1.5]]
