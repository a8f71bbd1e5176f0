"""Tests for coiter.Tensor: constructors, conversions back to NumPy/SciPy, validation, DSL accesses."""
from __future__ import annotations

import dataclasses
import pickle
import re
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter import Tensor, index_vars
from coiter.errors import DTypeError, FormatError, ShapeError
from coiter.formats.format import Format, as_format
from coiter.notation.ast import Access, Add, Assignment, IndexVar

DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32,
          np.uint16, np.uint8, np.complex128, np.complex64, np.bool_]

MATRIX_FORMATS: list[Any] = [
    coiter.csr, coiter.csc, coiter.dcsr, coiter.dcsc, coiter.coo(2), coiter.dense(2),
    "ds:1,0", "dd:1,0", "ss", "sd", "uq:1,0",
]
ORDER3_FORMATS: list[Any] = [
    coiter.csf(3), coiter.coo(3), coiter.dense(3), "sss:2,0,1", "dsd", "dds:1,2,0", "ucq:2,1,0",
]
VECTOR_FORMATS: list[Any] = ["d", "s", coiter.coo(1)]
ALL_FORMATS = MATRIX_FORMATS + ORDER3_FORMATS + VECTOR_FORMATS


def fmt_id(f: Any) -> str:
    return f if isinstance(f, str) else f.to_string()


def order_of(f: Any) -> int:
    return as_format(f, len(f.partition(":")[0])).order if isinstance(f, str) else f.order


def random_array(shape: tuple[int, ...], dtype: Any, seed: int, density: float = 0.3) -> np.ndarray:
    """Random values of ``dtype`` with about ``density`` of the entries nonzero."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return mask
    if dt.kind == "c":
        vals = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    elif dt.kind == "f":
        vals = rng.standard_normal(shape)
    else:
        vals = rng.integers(1, 100, size=shape)
    return np.where(mask, vals, 0).astype(dt)


def shape_for(order: int) -> tuple[int, ...]:
    return {1: (11,), 2: (7, 9), 3: (4, 5, 6)}[order]


def assert_same(t: Tensor, expected: np.ndarray) -> None:
    """Values, dtype, shape and storage invariants all agree with ``expected``."""
    t.storage.validate(t.name)
    assert t.shape == expected.shape
    assert t.dtype == expected.dtype
    got = t.to_numpy()
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


# ------------------------------------------------------------------ from_numpy


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=fmt_id)
def test_from_numpy_round_trip(fmt: Any, dtype: Any) -> None:
    a = random_array(shape_for(order_of(fmt)), dtype, seed=1)
    t = Tensor.from_numpy(a, format=fmt)
    assert t.format == as_format(fmt, a.ndim)
    assert_same(t, a)
    if t.format.is_dense:
        assert t.nnz == a.size
    elif not any(isinstance(level, coiter.Dense) for level in t.format.levels):
        assert t.nnz == np.count_nonzero(a)


def test_from_numpy_defaults_to_dense_and_shares_memory() -> None:
    a = random_array((6, 8), np.float64, seed=2)
    t = Tensor.from_numpy(a)
    assert t.format == coiter.dense(2)
    assert t.storage.levels == ({}, {})
    assert np.shares_memory(t.storage.vals, a)
    assert np.shares_memory(t.to_numpy(), a)


def test_from_numpy_permuted_dense_shares_fortran_array() -> None:
    a = np.asfortranarray(random_array((5, 7), np.float32, seed=3))
    t = Tensor.from_numpy(a, format="dd:1,0")
    assert np.shares_memory(t.storage.vals, a)
    assert_same(t, a)


def test_from_numpy_non_contiguous_is_copied_correctly() -> None:
    base = random_array((8, 10), np.int64, seed=4)
    a = base[::2, 1::3]
    t = Tensor.from_numpy(a)
    assert not np.shares_memory(t.storage.vals, base)
    assert_same(t, a)


def test_from_numpy_accepts_lists() -> None:
    t = Tensor.from_numpy([[1.0, 0.0], [0.0, 2.0]], format=coiter.csr)
    assert_same(t, np.array([[1.0, 0.0], [0.0, 2.0]]))


def test_from_numpy_order_zero() -> None:
    a = np.array(2.5)
    t = Tensor.from_numpy(a)
    assert t.order == 0 and t.shape == ()
    assert t.format == Format([])
    assert t.storage.vals.shape == (1,)
    assert t.nnz == 1
    assert t.to_numpy().shape == ()
    assert t.to_numpy()[()] == 2.5


def test_csc_from_numpy_matches_scipy_arrays() -> None:
    a = random_array((6, 9), np.float64, seed=5)
    t = Tensor.from_numpy(a, format=coiter.csc)
    ref = sp.csc_array(a)
    np.testing.assert_array_equal(t.storage.levels[1]["pos"], ref.indptr)
    np.testing.assert_array_equal(t.storage.levels[1]["crd"], ref.indices)
    np.testing.assert_array_equal(t.storage.vals, ref.data)


# ------------------------------------------------------------------ from_scipy

SCIPY_KINDS = {
    "csr_array": sp.csr_array, "csc_array": sp.csc_array, "coo_array": sp.coo_array,
    "csr_matrix": sp.csr_matrix, "csc_matrix": sp.csc_matrix, "coo_matrix": sp.coo_matrix,
    "lil_array": sp.lil_array, "dok_array": sp.dok_array, "bsr_array": sp.bsr_array,
    "dia_array": sp.dia_array,
}


@pytest.mark.parametrize("kind", list(SCIPY_KINDS))
def test_from_scipy_default_format_follows_layout(kind: str) -> None:
    a = random_array((8, 6), np.float64, seed=6)
    m = SCIPY_KINDS[kind](a)
    t = Tensor.from_scipy(m)
    expected = {"csc": coiter.csc, "coo": coiter.coo(2), "dia": coiter.dia()}.get(m.format, coiter.csr)
    if m.format == "bsr":
        expected = coiter.bcsr(m.blocksize)
    assert t.format == expected
    assert_same(t, a)


@pytest.mark.parametrize("fmt", MATRIX_FORMATS, ids=fmt_id)
@pytest.mark.parametrize("kind", ["csr_array", "csc_array", "coo_array", "lil_array"])
def test_from_scipy_into_every_format(kind: str, fmt: Any) -> None:
    a = random_array((9, 7), np.float64, seed=7)
    t = Tensor.from_scipy(SCIPY_KINDS[kind](a), format=fmt)
    assert t.format == as_format(fmt, 2)
    assert_same(t, a)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != np.float16],  # SciPy has no float16
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", ["csr_array", "csc_array", "coo_array"])
def test_from_scipy_dtypes(kind: str, dtype: Any) -> None:
    a = random_array((10, 12), dtype, seed=8)
    assert_same(Tensor.from_scipy(SCIPY_KINDS[kind](a)), a)


@pytest.mark.parametrize("kind", ["csr_array", "csc_array", "csr_matrix", "csc_matrix"])
def test_from_scipy_compressed_is_zero_copy(kind: str) -> None:
    m = SCIPY_KINDS[kind](random_array((20, 30), np.float64, seed=9))
    t = Tensor.from_scipy(m)
    level = t.storage.levels[1]
    assert level["pos"] is m.indptr or np.shares_memory(level["pos"], m.indptr)
    assert np.shares_memory(level["crd"], m.indices)
    assert np.shares_memory(t.storage.vals, m.data)


@pytest.mark.parametrize("kind", ["csr_array", "csc_array"])
def test_to_scipy_shares_compressed_arrays(kind: str) -> None:
    a = random_array((15, 11), np.float64, seed=10)
    m = SCIPY_KINDS[kind](a)
    back = Tensor.from_scipy(m).to_scipy()
    assert back.format == m.format
    assert np.shares_memory(back.data, m.data)
    assert np.shares_memory(back.indices, m.indices)
    np.testing.assert_array_equal(back.toarray(), a)


@pytest.mark.parametrize("fmt", MATRIX_FORMATS, ids=fmt_id)
def test_to_scipy_every_format(fmt: Any) -> None:
    a = random_array((9, 13), np.complex128, seed=11)
    m = Tensor.from_numpy(a, format=fmt).to_scipy()
    assert sp.issparse(m)
    assert m.dtype == a.dtype
    np.testing.assert_array_equal(m.toarray(), a)


def test_to_scipy_needs_a_matrix() -> None:
    with pytest.raises(FormatError):
        Tensor.from_numpy(np.ones(3)).to_scipy()
    with pytest.raises(FormatError):
        Tensor.from_numpy(np.ones((2, 2, 2))).to_scipy()


def test_from_scipy_unsorted_and_duplicate_csr_is_canonicalised() -> None:
    # row 0: columns 3, 1, 3 (unsorted, duplicate 3); row 2: columns 2, 0
    indptr = np.array([0, 3, 3, 5], dtype=np.int32)
    indices = np.array([3, 1, 3, 2, 0], dtype=np.int32)
    data = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    m = sp.csr_array((data, indices, indptr), shape=(3, 4))
    expected = m.toarray()  # SciPy sums duplicates when densifying
    t = Tensor.from_scipy(m)
    assert t.format == coiter.csr
    assert t.nnz == 4
    assert_same(t, expected)
    assert not np.shares_memory(t.storage.vals, data)


@pytest.mark.parametrize("fmt", [coiter.csr, coiter.csc, coiter.dcsr, coiter.coo(2)], ids=fmt_id)
def test_from_scipy_unsorted_csc_into_other_formats(fmt: Format) -> None:
    rng = np.random.default_rng(12)
    indptr = np.array([0, 4, 4, 7], dtype=np.int64)
    indices = rng.permutation(np.array([5, 1, 0, 1, 3, 2, 4], dtype=np.int64))
    data = rng.standard_normal(7)
    m = sp.csc_array((data, indices, indptr), shape=(6, 3))
    assert_same(Tensor.from_scipy(m, format=fmt), m.toarray())


def test_from_scipy_mixed_index_dtypes() -> None:
    a = random_array((5, 5), np.float64, seed=13)
    m = sp.csr_array(a)
    m.indptr = m.indptr.astype(np.int64)
    m.indices = m.indices.astype(np.int32)
    t = Tensor.from_scipy(m)
    assert_same(t, a)
    assert {arr.dtype for arr in t.storage.levels[1].values()} == {np.dtype(np.int64)}


def test_from_scipy_coo_sums_duplicates() -> None:
    row = np.array([2, 0, 2, 1, 0])
    col = np.array([1, 3, 1, 0, 3])
    data = np.array([1, 2, 3, 4, 5], dtype=np.int32)
    m = sp.coo_array((data, (row, col)), shape=(3, 4))
    expected = np.zeros((3, 4), dtype=np.int32)
    np.add.at(expected, (row, col), data)
    t = Tensor.from_scipy(m)
    assert t.nnz == 3
    assert_same(t, expected)


def test_from_scipy_vector_coo() -> None:
    a = random_array((17,), np.float64, seed=14)
    t = Tensor.from_scipy(sp.coo_array(a))
    assert t.format == coiter.coo(1)
    assert_same(t, a)


def test_from_scipy_rejects_non_sparse() -> None:
    with pytest.raises(TypeError):
        Tensor.from_scipy(np.ones((2, 2)))


# ------------------------------------------------------------------ malformed SciPy data


def _csr() -> sp.csr_array:
    a = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [4.0, 0.0, 5.0]])
    return sp.csr_array(a)


def _corrupt_pos_not_monotone(m: sp.csr_array) -> None:
    m.indptr[1] = 4  # [0, 4, 3, 5]


def _corrupt_pos_start(m: sp.csr_array) -> None:
    m.indptr[0] = 1


def _corrupt_pos_too_large(m: sp.csr_array) -> None:
    m.indptr[-1] = 40


def _corrupt_crd_out_of_range(m: sp.csr_array) -> None:
    m.indices[1] = 100


def _corrupt_crd_negative(m: sp.csr_array) -> None:
    m.indices[0] = -1


def _corrupt_pos_length(m: sp.csr_array) -> None:
    m.indptr = m.indptr[:-1].copy()


def _corrupt_crd_length(m: sp.csr_array) -> None:
    m.indices = m.indices[:-2].copy()


def _corrupt_data_length(m: sp.csr_array) -> None:
    m.data = m.data[:-1].copy()


CORRUPTIONS = [
    _corrupt_pos_not_monotone, _corrupt_pos_start, _corrupt_pos_too_large, _corrupt_crd_out_of_range,
    _corrupt_crd_negative, _corrupt_pos_length, _corrupt_crd_length, _corrupt_data_length,
]


@pytest.mark.parametrize("fmt", [None, coiter.csc, coiter.coo(2), coiter.dense(2)], ids=str)
@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__[9:])
def test_from_scipy_corrupted_csr_raises(corrupt: Any, fmt: Format | None) -> None:
    m = _csr()
    corrupt(m)
    with pytest.raises(FormatError):
        Tensor.from_scipy(m, format=fmt, name="A")


def test_from_scipy_corrupted_csc_raises() -> None:
    m = sp.csc_array(np.eye(4))
    m.indices[2] = 9
    with pytest.raises(FormatError, match="B"):
        Tensor.from_scipy(m, name="B")


@pytest.mark.parametrize("fmt", [None, coiter.csr], ids=str)
def test_from_scipy_corrupted_coo_raises(fmt: Format | None) -> None:
    m = sp.coo_array(np.eye(4))
    m.coords[1][0] = 7
    with pytest.raises(FormatError):
        Tensor.from_scipy(m, format=fmt)


# ------------------------------------------------------------------ from_coo


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=fmt_id)
def test_from_coo_unsorted_with_duplicates(fmt: Any, dtype: Any) -> None:
    order = order_of(fmt)
    shape = shape_for(order)
    rng = np.random.default_rng(15)
    nnz = 40
    coords = np.stack([rng.integers(0, d, size=nnz) for d in shape])
    coords = np.concatenate([coords, coords[:, :10]], axis=1)  # guaranteed duplicates
    # small integers so that summing duplicates is exact in every dtype, whatever the order
    ints = rng.integers(1, 10, size=coords.shape[1])
    values = (ints * (1 + 2j) if np.dtype(dtype).kind == "c" else ints).astype(dtype)
    expected = np.zeros(shape, dtype=dtype)
    np.add.at(expected, tuple(coords), values)
    t = Tensor.from_coo(coords, values, shape, format=fmt)
    assert_same(t, expected)


def test_from_coo_defaults_to_coo() -> None:
    t = Tensor.from_coo(np.array([[0, 2], [1, 1], [3, 0]]), np.array([1.0, 2.0]), (3, 2, 4))
    assert t.format == coiter.coo(3)
    assert t.nnz == 2


def test_from_coo_order_zero_sums_values() -> None:
    t = Tensor.from_coo(np.zeros((0, 3), dtype=np.int64), np.array([1.0, 2.0, 4.0]), ())
    assert t.order == 0
    assert t.to_numpy()[()] == 7.0


@pytest.mark.parametrize(
    "coords, values, shape",
    [
        ([[0, 3]], [1.0, 2.0], (3,)),  # coordinate past the end
        ([[0, -1]], [1.0, 2.0], (3,)),  # negative coordinate
        ([[0, 1], [0, 1]], [1.0, 2.0], (3,)),  # two rows of coordinates for a vector
        ([0, 1], [1.0, 2.0], (3,)),  # coordinates not 2-D
        ([[0, 1]], [1.0, 2.0, 3.0], (3,)),  # more values than coordinates
        ([[0, 1]], [[1.0, 2.0]], (3,)),  # values not 1-D
        ([[0]], [1.0], (-2,)),  # negative dimension
    ],
)
def test_from_coo_shape_errors(coords: Any, values: Any, shape: tuple[int, ...]) -> None:
    with pytest.raises(ShapeError):
        Tensor.from_coo(np.asarray(coords), np.asarray(values), shape)


def test_from_coo_rejects_fractional_coordinates() -> None:
    with pytest.raises(DTypeError):
        Tensor.from_coo(np.array([[0.5, 1.0]]), np.array([1.0, 2.0]), (3,))


# ------------------------------------------------------------------ empty and zero-size


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=fmt_id)
def test_zero_constructor(fmt: Any, dtype: Any) -> None:
    shape = shape_for(order_of(fmt))
    t = Tensor(shape, format=fmt, dtype=dtype)
    assert t.nnz == (np.prod(shape) if t.format.is_dense else 0)
    assert_same(t, np.zeros(shape, dtype=dtype))


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=fmt_id)
def test_all_zero_array(fmt: Any) -> None:
    a = np.zeros(shape_for(order_of(fmt)))
    t = Tensor.from_numpy(a, format=fmt)
    assert t.nnz == (a.size if t.format.is_dense else 0)
    assert_same(t, a)


@pytest.mark.parametrize("fmt", MATRIX_FORMATS, ids=fmt_id)
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)], ids=str)
def test_zero_size_dimensions(fmt: Any, shape: tuple[int, int]) -> None:
    a = np.zeros(shape, dtype=np.float32)
    for t in (
        Tensor(shape, format=fmt, dtype=np.float32),
        Tensor.from_numpy(a, format=fmt),
        Tensor.from_scipy(sp.csr_array(a), format=fmt),
        Tensor.from_coo(np.zeros((2, 0), dtype=np.int64), np.zeros(0, np.float32), shape, format=fmt),
    ):
        assert t.nnz == 0
        assert_same(t, a)
        assert t.to_scipy().shape == shape


def test_empty_scipy_matrix_is_zero_copy() -> None:
    m = sp.csr_array((4, 6))
    t = Tensor.from_scipy(m)
    assert t.nnz == 0
    assert np.shares_memory(t.storage.levels[1]["pos"], m.indptr)
    assert_same(t, np.zeros((4, 6)))


def test_order_three_zero_size() -> None:
    t = Tensor.from_coo(np.zeros((3, 0), dtype=np.int64), np.zeros(0), (2, 0, 3), format=coiter.csf(3))
    assert_same(t, np.zeros((2, 0, 3)))


# ------------------------------------------------------------------ types, names, misc


@pytest.mark.parametrize("bad", [np.longdouble, "m8[s]", object])
def test_unsupported_dtypes(bad: Any) -> None:
    name = re.escape(str(np.dtype(bad)))
    with pytest.raises(DTypeError, match=name):
        Tensor.from_numpy(np.zeros((2, 2), dtype=bad))
    with pytest.raises(DTypeError, match=name):
        Tensor((2, 2), dtype=bad)
    with pytest.raises(DTypeError, match=name):
        Tensor.from_coo(np.array([[0]]), np.array([1], dtype=bad), (2,))


def test_unsupported_scipy_dtype() -> None:
    m = sp.csr_array(np.eye(3, dtype=np.longdouble))
    with pytest.raises(DTypeError, match=np.dtype(np.longdouble).name):
        Tensor.from_scipy(m)


def test_format_order_mismatch() -> None:
    with pytest.raises(FormatError):
        Tensor((3, 3), format="d")
    with pytest.raises(FormatError):
        Tensor.from_numpy(np.ones(3), format=coiter.csr)


def test_properties_and_shape_forms() -> None:
    t = Tensor(5, format="s", dtype=np.int32)
    assert t.shape == (5,) and t.order == 1 and t.dtype == np.dtype(np.int32)
    assert t.format == coiter.Format([coiter.Compressed()])
    assert Tensor([np.int64(2), 3]).shape == (2, 3)
    with pytest.raises(ShapeError):
        Tensor((2.5, 3))


def test_default_names_are_unique() -> None:
    names = {Tensor((2,)).name for _ in range(5)}
    names |= {Tensor.from_numpy(np.ones(2)).name, Tensor.from_scipy(sp.csr_array(np.eye(2))).name}
    assert len(names) == 7
    assert all(n.startswith("T") for n in names)


def test_user_names() -> None:
    assert Tensor((2,), name="my tensor!").name == "my tensor!"
    assert Tensor.from_coo(np.array([[0]]), np.array([1.0]), (1,), name="B").name == "B"
    with pytest.raises(ValueError):
        Tensor((2,), name="")
    with pytest.raises(TypeError):
        Tensor((2,), name=3)  # type: ignore[arg-type]


def test_repr_mentions_shape_dtype_format_nnz() -> None:
    t = Tensor.from_numpy(np.eye(3), format=coiter.csr, name="A")
    text = repr(t)
    for part in ("'A'", "(3, 3)", "float64", "'ds'", "nnz=3"):
        assert part in text


def test_numpy_protocol() -> None:
    a = random_array((4, 6), np.float64, seed=17)
    t = Tensor.from_numpy(a, format=coiter.dcsc)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert np.asarray(t, dtype=np.complex128).dtype == np.complex128


def test_to_numpy_sums_duplicates_of_non_unique_storage() -> None:
    # a hand-built storage holding coordinate (1, 2) twice: its column level must say it is
    # non-unique ("uc"); COO's unique singleton ("uq") refuses the repeat
    from coiter.formats.storage import Storage

    levels = (
        {"pos": np.array([0, 3], dtype=np.int32), "crd": np.array([0, 1, 1], dtype=np.int32)},
        {"crd": np.array([0, 2, 2], dtype=np.int32)},
    )
    with pytest.raises(FormatError, match=r"declared unique.*\(1, 2\)"):
        Storage(coiter.coo(2), (2, 3), levels, np.array([1.0, 2.0, 3.0])).validate()
    storage = Storage(coiter.parse_format("uc"), (2, 3), levels, np.array([1.0, 2.0, 3.0]))
    storage.validate()
    t = Tensor._wrap(storage)
    np.testing.assert_array_equal(t.to_numpy(), [[1.0, 0.0, 0.0], [0.0, 0.0, 5.0]])


def test_wrap_shares_storage() -> None:
    s = Tensor.from_numpy(np.eye(2), format=coiter.csr).storage
    t = Tensor._wrap(s, name="W")
    assert t.storage is s and t.name == "W"


def test_pickle_round_trip() -> None:
    a = random_array((5, 4), np.float32, seed=18)
    t = Tensor.from_numpy(a, format=coiter.dcsr, name="P")
    u = pickle.loads(pickle.dumps(t))
    assert u.name == "P" and u.format == coiter.dcsr
    assert_same(u, a)


def test_asformat_to_same_format_is_identity() -> None:
    t = Tensor.from_numpy(np.eye(3), format=coiter.csr)
    assert t.asformat("ds") is t


# ------------------------------------------------------------------ DSL accesses


def test_index_vars_forms() -> None:
    i, j, k = index_vars("i j k")
    assert (i, j, k) == (IndexVar("i"), IndexVar("j"), IndexVar("k"))
    assert index_vars("i, j,k") == (i, j, k)
    assert index_vars("i", "j k") == (i, j, k)
    assert index_vars("i") == (i,)
    for bad in ("", "i i", "1x", "i-j"):
        with pytest.raises(ValueError):
            index_vars(bad)


def test_getitem_builds_access() -> None:
    i, j = index_vars("i j")
    t = Tensor((3, 4), format=coiter.csr, name="A")
    access = t[i, j]
    assert isinstance(access, Access)
    assert access == Access("A", (i, j))
    assert access.source is t


def test_getitem_vector_and_scalar() -> None:
    (i,) = index_vars("i")
    v = Tensor((3,))
    assert v[i].indices == (i,)
    s = Tensor(())
    assert s[()].indices == ()


def test_getitem_wrong_arity_or_type() -> None:
    i, j, k = index_vars("i j k")
    t = Tensor((3, 4))
    with pytest.raises(ShapeError):
        t[i]
    with pytest.raises(ShapeError):
        t[i, j, k]
    with pytest.raises(ShapeError):
        t[()]
    # integers select entries (tests/test_slicing.py) but do not mix with index variables
    with pytest.raises(TypeError, match="integers, slices and ... alone"):
        t[i, 0]
    with pytest.raises(TypeError):
        t["i", "j"]


def test_setitem_wrong_arity() -> None:
    i, j = index_vars("i j")
    t = Tensor((3, 4))
    with pytest.raises(ShapeError):
        t[i] = Tensor((3,))[i]


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the Tensor's assignment runner (coiter.api.run_assignment) by a NumPy evaluator
    of copies and sums, so the deferral protocol is tested without the compiler; returns the
    assignments it ran."""
    calls: list[str] = []

    def value(e: Any) -> np.ndarray:
        if isinstance(e, Access):
            return e.source.to_numpy()
        assert isinstance(e, Add)
        return value(e.a) + value(e.b)

    def run(assignment: Assignment, out_format: Format) -> Any:
        calls.append(str(assignment))
        result = np.ascontiguousarray(value(assignment.rhs))
        return Tensor.from_numpy(result, format=out_format).storage

    monkeypatch.setattr(Tensor, "frontend", dataclasses.replace(Tensor.frontend, run_assignment=run))
    return calls


def test_setitem_defers_until_data_is_needed(fake_runner: list[str]) -> None:
    i, j = index_vars("i j")
    b = Tensor.from_numpy(np.arange(6.0).reshape(2, 3), name="B")
    a = Tensor((2, 3), format=coiter.csr, name="A")
    a[i, j] = b[i, j] + b[i, j]
    assert fake_runner == [] and "pending" in repr(a)
    assert a.format == coiter.csr and a.shape == (2, 3)
    np.testing.assert_array_equal(a.to_numpy(), 2 * np.arange(6.0).reshape(2, 3))
    assert fake_runner == ["A(i,j) = B(i,j) + B(i,j)"]
    a.evaluate()
    assert len(fake_runner) == 1


def test_self_reference_reads_previous_value(fake_runner: list[str]) -> None:
    (i,) = index_vars("i")
    b = Tensor.from_numpy(np.array([1.0, 2.0]), name="B")
    a = Tensor((2,), name="A")
    a[i] = b[i]
    a[i] = a[i] + b[i]
    np.testing.assert_array_equal(a.to_numpy(), [2.0, 4.0])


def test_readers_are_computed_before_an_operand_changes(fake_runner: list[str]) -> None:
    (i,) = index_vars("i")
    b = Tensor.from_numpy(np.array([1.0, 2.0]), name="B")
    c = Tensor.from_numpy(np.array([10.0, 20.0]), name="C")
    d = Tensor((2,), name="D")
    a = Tensor((2,), name="A")
    d[i] = b[i]
    a[i] = d[i]
    d[i] = c[i]
    np.testing.assert_array_equal(a.to_numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(d.to_numpy(), [10.0, 20.0])


def test_result_shape_mismatch_raises_and_stays_pending(fake_runner: list[str]) -> None:
    (i,) = index_vars("i")
    b = Tensor.from_numpy(np.array([1.0, 2.0]), name="B")
    a = Tensor((3,), name="A")
    a[i] = b[i]
    for _ in range(2):
        with pytest.raises(ShapeError, match="A"):
            a.to_numpy()
    assert len(fake_runner) == 2


def test_scipy_structure_checked_once_per_matrix(monkeypatch) -> None:
    """Calling a kernel again on the same SciPy matrix skips the O(nnz) index checks, but a
    matrix whose values array no longer covers its entries is still refused."""
    import coiter.tensor as tensor_module

    calls = []
    original = tensor_module._segments_canonical
    monkeypatch.setattr(tensor_module, "_segments_canonical", lambda p, c: calls.append(1) or original(p, c))
    A = sp.random_array((50, 40), density=0.1, format="csr", random_state=3)
    x = np.arange(40.0)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    for _ in range(3):
        np.testing.assert_allclose(k(A=A, x=x).to_numpy(), A @ x)
    assert len(calls) == 1
    A.data = A.data[:-1]
    with pytest.raises(coiter.FormatError, match="values for"):
        k(A=A, x=x)


@pytest.mark.parametrize("fmt", ["csr", "csc", "dcsr"])
def test_dropped_scipy_matrices_are_freed(fmt: str) -> None:
    """Regression: the caches that let a kernel called again on the same SciPy matrix skip
    its index checks and reuse its storage held the last 32 matrices' arrays, so a program
    that dropped its matrices kept up to 32 of them in memory (a benchmark worker grew 53 MB
    per case on 2M-nonzero inputs)."""
    import gc
    import weakref

    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": fmt})
    x = np.arange(40.0)
    arrays = []
    for seed in range(3):
        a = sp.random_array((50, 40), density=0.1, format="csr", random_state=seed)
        for _ in range(2):  # the second call finds the cached checks and storage
            np.testing.assert_allclose(k(A=a, x=x).to_numpy(), a @ x)
        arrays += [weakref.ref(a.data), weakref.ref(a.indices), weakref.ref(a.indptr)]
        del a
    gc.collect()
    assert [r() is None for r in arrays] == [True] * len(arrays)


def test_pickled_tensor_does_not_carry_this_process_addresses() -> None:
    """Regression: Storage cached the addresses of its arrays (and a process-local signature
    id) and pickled them, so a Tensor a kernel had read, unpickled in another process (a Dask
    worker), handed kernels the old process's pointers and crashed it."""
    import pickle
    import subprocess
    import sys

    a = sp.random_array((30, 20), density=0.2, random_state=4, format="csr")
    x = np.arange(20.0)
    A = Tensor.from_scipy(a)
    np.testing.assert_allclose(coiter.evaluate("y(i) = A(i,j) * x(j)", A=A, x=x).to_numpy(), a @ x)
    copy = pickle.loads(pickle.dumps(A))
    assert copy.storage.addresses[(-1, "vals")] == copy.storage.vals.ctypes.data
    script = ("import pickle, sys, numpy as np, coiter\n"
              "coiter.evaluate('z(i) = B(i) * 2', B=np.ones(3))  # other signatures first\n"
              "A = pickle.loads(sys.stdin.buffer.read())\n"
              "y = coiter.evaluate('y(i) = A(i,j) * x(j)', A=A, x=np.arange(20.0))\n"
              "sys.stdout.write(repr(y.to_numpy().tolist()))\n")
    out = subprocess.run([sys.executable, "-c", script], input=pickle.dumps(A),
                         capture_output=True, check=True)
    np.testing.assert_allclose(eval(out.stdout.decode()), a @ x)


@pytest.mark.parametrize("text", ["dsss", "ds:1,0", "dd", "csr", "dia", "ell", "uq"])
def test_format_answers_cached_on_first_use_agree_with_a_fresh_format(text: str) -> None:
    """Formats cache their string, hash and density (asked on every call): equal formats,
    built again, pickled or cached first, still compare, hash and print alike."""
    a = as_format(text, 2 if text in ("ds:1,0", "dd", "csr", "dia", "ell", "uq") else 4)
    first = (a.to_string(), hash(a), a.is_dense)
    b = pickle.loads(pickle.dumps(a))
    c = Format(a.levels, None if a.layout is not None or a.is_identity_ordered else a.ordering, a.layout)
    for f in (a, b, c):
        assert f == a and (f.to_string(), hash(f), f.is_dense) == first
    assert first[2] == (text == "dd")
    assert {a: 1}[c] == 1


def test_tensors_act_as_numpy_arrays_do_in_python() -> None:
    """len, iteration, size, astype, dot, truth and conversion to Python scalars, against
    NumPy on the densified matrix."""
    rng = np.random.default_rng(5)
    dense = np.where(rng.random((6, 5)) < 0.4, rng.random((6, 5)), 0.0)
    T = Tensor.from_numpy(dense, format="csr")
    assert len(T) == 6 and T.size == 30
    rows = list(T)  # Python's iteration stops at the first index past the end
    assert len(rows) == 6
    for row, want in zip(rows, dense):
        np.testing.assert_array_equal(row.to_numpy(), want)
    with pytest.raises(IndexError, match="index 6 is out of bounds for mode 0 of size 6"):
        T[6]
    with pytest.raises(coiter.OutOfBoundsError):
        T[:, [0, 5]]
    as_int = T.astype(np.int32)
    assert as_int.dtype == np.int32 and as_int.format == T.format and as_int.nnz == T.nnz
    np.testing.assert_array_equal(as_int.to_numpy(), dense.astype(np.int32))
    with pytest.raises(DTypeError, match="unsupported dtype object"):
        T.astype(object)
    filled = T.with_fill(np.inf).astype(np.float32)
    assert filled.fill_value == np.inf and filled.dtype == np.float32
    np.testing.assert_allclose(T.dot(np.ones(5)).to_numpy(), dense @ np.ones(5), rtol=1e-14)
    assert float(T.max()) == dense.max() and int((T > 0.5).sum()) == np.count_nonzero(dense > 0.5)
    assert complex(T.sum()) == pytest.approx(dense.sum(), rel=1e-14)
    with pytest.raises(TypeError, match="order 0 converts to float, not one of shape \\(6, 5\\)"):
        float(T)
    with pytest.raises(ValueError, match="truth value of a tensor of shape \\(6, 5\\) is ambiguous"):
        bool(T > 0.5)
    with pytest.raises(ValueError, match="ambiguous"):
        0 < T < 1  # noqa: B015 (Python asks for the truth of 0 < T)
    assert bool(T.max() > 0.1) == bool(dense.max() > 0.1)
    assert bool(T[0:1, 0:1]) == bool(dense[0, 0])
    with pytest.raises(TypeError, match="len"):
        len(T.sum())
