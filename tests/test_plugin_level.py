"""Extensibility, demonstrated: a brand-new level format defined entirely in this file.

``Bitmap`` is a level the compiler has never heard of: a dense bit vector with one
bit per (parent position, coordinate) slot, plus packed values (only set bits have
one). It is written against the public plugin interface (:class:`coiter.Level`, the
IR nodes of :mod:`coiter.ir.nodes`), registered with :func:`coiter.register_level`,
and then used for SpMV, SpAdd and element-wise products whose results are checked
against NumPy/SciPy on the same data.

Nothing here may need a change to the compiler's own files: if a test in this file
fails, the plugin API is what is broken.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter import FormatError, Level, LevelNames, Packed, ParentPos
from coiter.ir.nodes import Bin, Const, IRExpr, Load, Select, add, mul


@dataclass(frozen=True)
class Bitmap(Level):
    """Bitmap level: ``bits`` flags every slot ``parent * dim + coord`` (0 or 1) and
    ``rank[s]`` counts the set bits before slot ``s`` (``parent_size * dim + 1`` entries),
    so the set slot ``s`` holds its value at packed position ``rank[s]``.

    Iteration walks the parent's slots ``[parent * dim, (parent + 1) * dim)`` in order,
    skipping clear bits; locate reads one bit and misses (-1) when it is clear.
    """

    kind: ClassVar[str] = "bitmap"
    letter: ClassVar[str] = "b"
    arrays: ClassVar[tuple[str, ...]] = ("bits", "rank")
    has_coord_iter: ClassVar[bool] = True  # the iterator is a slot: parent * dim + coordinate
    has_locate: ClassVar[bool] = True
    locate_may_fail: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not (self.ordered and self.unique):
            raise FormatError("a bitmap level is always ordered and unique")

    def __str__(self) -> str:
        return self.kind

    # -- iteration and locate (IR)
    def pos_bounds(
        self, names: LevelNames, parent: ParentPos, ancestors: tuple[IRExpr, ...] = ()
    ) -> tuple[IRExpr, IRExpr]:
        if parent.hi is not None:
            raise FormatError("a bitmap level cannot sit below a non-unique level")
        begin = mul(parent.lo, names.dimension)
        return begin, add(begin, names.dimension)

    def pos_access(self, names: LevelNames, p: IRExpr, ancestors: tuple[IRExpr, ...] = ()) -> IRExpr:
        return Bin("%", p, names.dimension)

    def pos_found(self, names: LevelNames, p: IRExpr) -> IRExpr:
        return Bin("!=", Load(names.array("bits"), p), Const(0))

    def child_position(self, names: LevelNames, p: IRExpr, coord: IRExpr, parent: IRExpr) -> IRExpr:
        return Load(names.array("rank"), p)

    def locate(self, names: LevelNames, parent: IRExpr, coord: IRExpr) -> IRExpr:
        slot = add(mul(parent, names.dimension), coord)
        # a parent located by a level that missed is negative: so is its child
        present = Bin("&&", Bin(">=", parent, Const(0)),
                      Bin("!=", Load(names.array("bits"), slot), Const(0)))
        return Select(present, Load(names.array("rank"), slot), Const(-1))

    # -- NumPy side
    def size(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int) -> int:
        return int(arrays["rank"][parent_size * dim])

    def validate(self, arrays: dict[str, np.ndarray], parent_size: int, dim: int, where: str) -> int:
        bits, rank = arrays["bits"], arrays["rank"]
        slots = parent_size * dim
        if bits.shape[0] != slots:
            raise FormatError(f"{where}: bits has length {bits.shape[0]}, expected {slots}")
        if rank.shape[0] != slots + 1:
            raise FormatError(f"{where}: rank has length {rank.shape[0]}, expected {slots + 1}")
        if np.any((bits != 0) & (bits != 1)):
            raise FormatError(f"{where}: bits holds a value other than 0 and 1")
        if rank[0] != 0 or np.any(np.diff(rank.astype(np.int64)) != bits):
            raise FormatError(f"{where}: rank is not the running count of set bits")
        return int(rank[slots])

    def pack(
        self, parent_pos: np.ndarray, crd: np.ndarray, parent_size: int, dim: int, itype: np.dtype
    ) -> Packed:
        slot = parent_pos.astype(np.int64) * dim + crd.astype(np.int64)
        bits = np.zeros(parent_size * dim, dtype=itype)
        bits[slot] = 1
        rank = np.zeros(parent_size * dim + 1, dtype=itype)
        np.cumsum(bits, out=rank[1:])
        return Packed({"bits": bits, "rank": rank}, rank[slot].astype(np.int64), int(rank[-1]))

    def unpack(
        self, arrays: dict[str, np.ndarray], parent_pos: np.ndarray, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = parent_pos.shape[0]
        slots = (parent_pos.astype(np.int64)[:, None] * dim + np.arange(dim)).reshape(-1)
        keep = arrays["bits"][slots] != 0
        parent_index = np.repeat(np.arange(n, dtype=np.int64), dim)[keep]
        crd = np.tile(np.arange(dim, dtype=np.int64), n)[keep]
        return arrays["rank"][slots[keep]].astype(np.int64), parent_index, crd


BITMAP_ROWS = coiter.Format([coiter.Dense(), Bitmap()])  # dense rows, bitmap columns
BITMAP_VECTOR = coiter.Format([Bitmap()])
# every place a bitmap level can take in a matrix format
MATRIX_FORMATS = {
    "db": BITMAP_ROWS,
    "db:1,0": coiter.Format([coiter.Dense(), Bitmap()], ordering=(1, 0)),
    "bb": coiter.Format([Bitmap(), Bitmap()]),
    "sb": coiter.Format([coiter.Compressed(), Bitmap()]),
    "bs": coiter.Format([Bitmap(), coiter.Compressed()]),
}

# (rows, cols, density): the first row of every matrix with more than one row is empty
SHAPES = [(6, 9, 0.3), (12, 5, 0.6), (30, 40, 0.1), (1, 1, 1.0), (4, 6, 0.0)]


def sparse_matrix(rows: int, cols: int, density: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, cols))
    a[rng.random((rows, cols)) >= density] = 0.0
    if rows > 1:
        a[0] = 0.0
    return a


def dense_vector(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n)


def assert_matches(result: coiter.Tensor, expected: np.ndarray) -> None:
    got = result.to_numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def bitmap_arrays(a: np.ndarray, itype: type) -> dict[str, np.ndarray]:
    """The bitmap level of ``a`` in format "db", built by hand."""
    bits = (a != 0).reshape(-1).astype(itype)
    return {"bits": bits, "rank": np.concatenate([[0], np.cumsum(bits)]).astype(itype)}


# ------------------------------------------------------------------ storage


@pytest.mark.parametrize("shape", SHAPES)
def test_packed_layout(shape: tuple[int, int, float]) -> None:
    a = sparse_matrix(*shape, seed=1)
    t = coiter.Tensor.from_numpy(a, format=BITMAP_ROWS)
    arrays = t.storage.levels[1]
    expected = bitmap_arrays(a, np.int32)
    np.testing.assert_array_equal(arrays["bits"], expected["bits"])
    np.testing.assert_array_equal(arrays["rank"], expected["rank"])
    np.testing.assert_array_equal(t.storage.vals, a[a != 0])  # packed, row-major
    assert t.nnz == np.count_nonzero(a)
    t.storage.validate()


@pytest.mark.parametrize("fmt", MATRIX_FORMATS.values(), ids=MATRIX_FORMATS.keys())
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip(shape: tuple[int, int, float], fmt: coiter.Format) -> None:
    a = sparse_matrix(*shape, seed=2)
    t = coiter.Tensor.from_numpy(a, format=fmt)
    t.storage.validate()
    np.testing.assert_array_equal(t.to_numpy(), a)


@pytest.mark.parametrize("fmt", MATRIX_FORMATS.values(), ids=MATRIX_FORMATS.keys())
@pytest.mark.parametrize("shape", SHAPES)
def test_convert_to_and_from_csr(shape: tuple[int, int, float], fmt: coiter.Format) -> None:
    a = sparse_matrix(*shape, seed=3)
    as_csr = coiter.Tensor.from_numpy(a, format=fmt).asformat(coiter.csr)  # generated kernels
    assert as_csr.format == coiter.csr
    expected = sp.csr_array(a)
    got = as_csr.to_scipy()
    np.testing.assert_array_equal(got.indptr, expected.indptr)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_array_equal(got.data, expected.data)
    back = coiter.Tensor.from_scipy(expected).asformat(fmt)
    assert back.format == fmt
    back.storage.validate()
    np.testing.assert_array_equal(back.to_numpy(), a)


# ------------------------------------------------------------------ kernels


@pytest.mark.parametrize("fmt", MATRIX_FORMATS.values(), ids=MATRIX_FORMATS.keys())
@pytest.mark.parametrize("shape", SHAPES)
def test_spmv(shape: tuple[int, int, float], fmt: coiter.Format) -> None:
    a = sparse_matrix(*shape, seed=4)
    x = dense_vector(a.shape[1], seed=5)
    kernel = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": fmt})
    y = kernel(A=coiter.Tensor.from_numpy(a, format=fmt), x=x)
    assert_matches(y, a @ x)


@pytest.mark.parametrize("out", ["ds", "dd"])
@pytest.mark.parametrize("shape", SHAPES)
def test_spadd_bitmap_plus_csr(shape: tuple[int, int, float], out: str) -> None:
    a = sparse_matrix(*shape, seed=6)
    b = sparse_matrix(*shape, seed=7)
    kernel = coiter.compile("C(i,j) = A(i,j) + B(i,j)",
                            formats={"A": BITMAP_ROWS, "B": coiter.csr, "C": out})
    c = kernel(A=coiter.Tensor.from_numpy(a, format=BITMAP_ROWS),
               B=coiter.Tensor.from_scipy(sp.csr_array(b)))
    assert_matches(c, a + b)
    if out == "ds":
        assert c.nnz == (sp.csr_array(a) + sp.csr_array(b)).nnz


@pytest.mark.parametrize("shape", SHAPES)
def test_spadd_bitmap_plus_bitmap(shape: tuple[int, int, float]) -> None:
    a = sparse_matrix(*shape, seed=8)
    b = sparse_matrix(*shape, seed=9)
    kernel = coiter.compile("C(i,j) = A(i,j) + B(i,j)",
                            formats={"A": BITMAP_ROWS, "B": BITMAP_ROWS, "C": coiter.csr})
    c = kernel(A=coiter.Tensor.from_numpy(a, format=BITMAP_ROWS),
               B=coiter.Tensor.from_numpy(b, format=BITMAP_ROWS))
    assert_matches(c, a + b)
    assert c.nnz == (sp.csr_array(a) + sp.csr_array(b)).nnz


@pytest.mark.parametrize("b_format", [coiter.csr, BITMAP_ROWS], ids=["csr", "bitmap"])
@pytest.mark.parametrize("shape", SHAPES)
def test_elementwise_product(shape: tuple[int, int, float], b_format: coiter.Format) -> None:
    """With CSR the bitmap is located; with two bitmaps both are co-iterated."""
    a = sparse_matrix(*shape, seed=10)
    b = sparse_matrix(*shape, seed=11)
    kernel = coiter.compile("C(i,j) = A(i,j) * B(i,j)",
                            formats={"A": BITMAP_ROWS, "B": b_format, "C": coiter.csr})
    c = kernel(A=coiter.Tensor.from_numpy(a, format=BITMAP_ROWS),
               B=coiter.Tensor.from_numpy(b, format=b_format))
    assert_matches(c, a * b)


@pytest.mark.parametrize("shape", SHAPES)
def test_csr_times_bitmap_vector(shape: tuple[int, int, float]) -> None:
    a = sparse_matrix(*shape, seed=12)
    x = sparse_matrix(1, shape[1], 0.5, seed=13)[0]
    xt = coiter.Tensor.from_numpy(x, format=BITMAP_VECTOR)
    np.testing.assert_array_equal(xt.to_numpy(), x)
    kernel = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr, "x": BITMAP_VECTOR})
    y = kernel(A=coiter.Tensor.from_scipy(sp.csr_array(a)), x=xt)
    assert_matches(y, a @ x)


def test_locate_below_a_bitmap_row_that_misses() -> None:
    """Locating row i of B misses where B's row is empty, and locating (i, j) below it
    must then miss too. (Without the ``parent >= 0`` guard in ``Bitmap.locate`` the
    kernel reads before ``B2_bits``: only a memory checker such as valgrind sees that.)"""
    a = sparse_matrix(10, 8, 0.5, seed=14)
    b = sparse_matrix(10, 8, 0.5, seed=15)
    b[3] = 0.0
    a[3] = 1.0  # a row A has and B lacks
    b_fmt = MATRIX_FORMATS["bb"]
    kernel = coiter.compile("C(i,j) = A(i,j) * B(i,j)",
                            formats={"A": coiter.dcsr, "B": b_fmt, "C": coiter.csr})
    c = kernel(A=coiter.Tensor.from_numpy(a, format=coiter.dcsr),
               B=coiter.Tensor.from_numpy(b, format=b_fmt))
    assert_matches(c, a * b)


# ------------------------------------------------------------------ registration


def test_register_letter_and_use_it_in_format_strings() -> None:
    coiter.register_level("b", Bitmap)
    fmt = coiter.parse_format("db")
    assert fmt == BITMAP_ROWS
    assert fmt.to_string() == "db"
    a = sparse_matrix(7, 11, 0.3, seed=16)
    b = sparse_matrix(7, 11, 0.3, seed=17)
    x = dense_vector(11, seed=18)
    t = coiter.Tensor.from_numpy(a, format="db")
    assert t.format == BITMAP_ROWS
    y = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "db"})(A=t, x=x)
    assert_matches(y, a @ x)
    c = coiter.evaluate("C(i,j) = A(i,j) + B(i,j)", out_format="ds", A=t,
                        B=coiter.Tensor.from_numpy(b, format="db"))
    assert_matches(c, a + b)


# ------------------------------------------------------------------ arrays from outside


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_from_arrays(itype: type) -> None:
    a = sparse_matrix(9, 13, 0.3, seed=19)
    x = dense_vector(13, seed=20)
    t = coiter.Tensor.from_arrays(a.shape, BITMAP_ROWS, [{}, bitmap_arrays(a, itype)], a[a != 0])
    np.testing.assert_array_equal(t.to_numpy(), a)
    y = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": BITMAP_ROWS})(A=t, x=x)
    assert_matches(y, a @ x)


def _set(arrays: dict[str, np.ndarray], name: str, index: int, value: int) -> dict[str, np.ndarray]:
    out = {k: v.copy() for k, v in arrays.items()}
    out[name][index] = value
    return out


def _drop_last(arrays: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    return {**arrays, name: arrays[name][:-1].copy()}


@pytest.mark.parametrize("corrupt, message", [
    (lambda arr: _set(arr, "bits", 4, 2), "other than 0 and 1"),
    (lambda arr: _set(arr, "bits", 4, 1 - arr["bits"][4]), "running count"),
    (lambda arr: _set(arr, "rank", 0, 1), "running count"),
    (lambda arr: _drop_last(arr, "bits"), "bits has length"),
    (lambda arr: _drop_last(arr, "rank"), "rank has length"),
], ids=["bit-is-2", "bit-flipped", "rank-not-zero-based", "bits-short", "rank-short"])
def test_from_arrays_rejects_corrupt_bitmaps(
    corrupt: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]], message: str
) -> None:
    a = sparse_matrix(5, 6, 0.5, seed=21)
    arrays = corrupt(bitmap_arrays(a, np.int32))
    with pytest.raises(FormatError, match=message):
        coiter.Tensor.from_arrays(a.shape, BITMAP_ROWS, [{}, arrays], a[a != 0])


def test_from_arrays_rejects_too_few_values() -> None:
    a = sparse_matrix(5, 6, 0.5, seed=22)
    with pytest.raises(FormatError, match="values array"):
        coiter.Tensor.from_arrays(a.shape, BITMAP_ROWS, [{}, bitmap_arrays(a, np.int32)],
                                  a[a != 0][:-1])


def test_bitmap_is_always_ordered_and_unique() -> None:
    with pytest.raises(FormatError, match="ordered and unique"):
        Bitmap(ordered=False)
    with pytest.raises(FormatError, match="ordered and unique"):
        Bitmap(unique=False)
