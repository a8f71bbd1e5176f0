"""Tests for coiter.read / coiter.write: Matrix Market and FROSTT files, plain and gzip'ed."""
from __future__ import annotations

import gzip
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import coiter
from coiter import Tensor
from coiter.errors import DTypeError, FormatError

DATA = Path("/work/shared/data")
ADD32 = DATA / "matrices" / "add32.mtx.gz"
JF17K = DATA / "tensors" / "jf17k-4ary.tns.gz"


def random_sparse(shape: tuple[int, ...], dtype: Any, seed: int, density: float = 0.2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    if np.dtype(dtype).kind == "c":
        vals = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    elif np.dtype(dtype).kind == "f":
        vals = rng.standard_normal(shape)
    else:
        vals = rng.integers(-50, 50, size=shape)
    a = np.where(mask, vals, 0).astype(dtype)
    a[(-1,) * len(shape)] = 1  # the largest coordinate of every mode is present, so .tns keeps the shape
    return a


# ------------------------------------------------------------------ Matrix Market


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.complex128])
def test_mtx_round_trip(tmp_path: Path, suffix: str, dtype: Any) -> None:
    a = random_sparse((23, 17), dtype, seed=1)
    path = tmp_path / f"m{suffix}"
    coiter.write(path, Tensor.from_numpy(a, format=coiter.csr))
    t = coiter.read(path, name="M")
    assert t.name == "M"
    assert t.format == coiter.csr
    assert t.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(t.to_numpy(), a)
    if suffix.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            assert f.read(14) == b"%%MatrixMarket"


@pytest.mark.parametrize("fmt", [coiter.csc, coiter.dcsr, coiter.coo(2), coiter.dense(2)], ids=str)
def test_mtx_read_into_format_and_write_any_format(tmp_path: Path, fmt: coiter.Format) -> None:
    a = random_sparse((12, 9), np.float64, seed=2)
    path = tmp_path / "m.mtx"
    coiter.write(path, Tensor.from_numpy(a, format=fmt))
    t = coiter.read(path, format=fmt)
    assert t.format == fmt
    np.testing.assert_array_equal(t.to_numpy(), a)


def test_mtx_float32_reads_back_as_float64(tmp_path: Path) -> None:
    a = random_sparse((6, 6), np.float32, seed=3)
    path = tmp_path / "f.mtx"
    coiter.write(path, Tensor.from_numpy(a, format=coiter.csr))
    t = coiter.read(path)
    assert t.dtype == np.float64
    # SciPy writes float32 with the shortest digits that round-trip in float32
    np.testing.assert_array_equal(t.to_numpy().astype(np.float32), a)


def test_mtx_symmetric_is_expanded(tmp_path: Path) -> None:
    path = tmp_path / "s.mtx"
    path.write_text(
        "%%MatrixMarket matrix coordinate real symmetric\n"
        "% a comment\n"
        "3 3 3\n1 1 2.0\n3 1 -1.5\n2 2 4.0\n"
    )
    expected = np.array([[2.0, 0.0, -1.5], [0.0, 4.0, 0.0], [-1.5, 0.0, 0.0]])
    np.testing.assert_array_equal(coiter.read(path).to_numpy(), expected)


def test_mtx_pattern_gets_ones(tmp_path: Path) -> None:
    path = tmp_path / "p.mtx.gz"
    with gzip.open(path, "wt") as f:
        f.write("%%MatrixMarket matrix coordinate pattern general\n2 4 3\n1 4\n2 1\n2 2\n")
    t = coiter.read(path)
    assert t.dtype == np.float64
    np.testing.assert_array_equal(t.to_numpy(), [[0, 0, 0, 1.0], [1.0, 1.0, 0, 0]])


def test_mtx_dense_array_file_reads_dense(tmp_path: Path) -> None:
    path = tmp_path / "d.mtx"
    path.write_text("%%MatrixMarket matrix array integer general\n2 2\n1\n2\n3\n4\n")
    t = coiter.read(path)
    assert t.format == coiter.dense(2)
    np.testing.assert_array_equal(t.to_numpy(), [[1, 3], [2, 4]])
    assert coiter.read(path, format=coiter.csr).format == coiter.csr


def test_mtx_write_needs_a_matrix(tmp_path: Path) -> None:
    path = tmp_path / "v.mtx"
    with pytest.raises(FormatError):
        coiter.write(path, Tensor.from_numpy(np.ones(3)))
    assert not path.exists()


def test_mtx_malformed(tmp_path: Path) -> None:
    path = tmp_path / "bad.mtx"
    path.write_text("not a matrix market file\n")
    with pytest.raises(FormatError, match="bad.mtx"):
        coiter.read(path)


def test_mtx_read_warns_of_nothing(tmp_path: Path) -> None:
    """SciPy 1.18 deprecates mmread's spmatrix default; reading asks for arrays (regression)."""
    path = tmp_path / "m.mtx"
    ref = sp.random_array((7, 5), density=0.4, format="csr", random_state=3)
    scipy.io.mmwrite(path, ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(coiter.read(path).to_numpy(), ref.toarray())


def test_read_add32() -> None:
    with gzip.open(ADD32, "rb") as f:
        ref = sp.csr_array(scipy.io.mmread(f))
    t = coiter.read(ADD32)
    assert t.format == coiter.csr
    assert t.shape == ref.shape == (4960, 4960)
    assert t.nnz == ref.nnz
    got = t.to_scipy()
    np.testing.assert_array_equal(got.indptr, ref.indptr)
    np.testing.assert_array_equal(got.indices, ref.indices)
    np.testing.assert_array_equal(got.data, ref.data)


# ------------------------------------------------------------------ FROSTT


@pytest.mark.parametrize("suffix", [".tns", ".tns.gz"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32, np.bool_])
def test_tns_round_trip(tmp_path: Path, suffix: str, dtype: Any) -> None:
    a = random_sparse((5, 7, 4), dtype, seed=4)
    path = tmp_path / f"t{suffix}"
    coiter.write(path, Tensor.from_numpy(a, format=coiter.csf(3)))
    t = coiter.read(path)
    assert t.format == coiter.coo(3)
    assert t.dtype == np.float64  # .tns values are read as float64
    np.testing.assert_array_equal(t.to_numpy(), a.astype(np.float64))


def test_tns_writes_one_based_lines_exactly(tmp_path: Path) -> None:
    t = Tensor.from_coo(np.array([[1, 0], [2, 0]]), np.array([0.1, 2**60]), (2, 3), format=coiter.csr)
    path = tmp_path / "x.tns"
    coiter.write(path, t)
    assert path.read_text() == "1 1 1.152921504606847e+18\n2 3 0.10000000000000001\n"
    back = coiter.read(path)
    assert back.to_numpy()[1, 2] == 0.1
    assert back.to_numpy()[0, 0] == 2.0**60


def test_tns_dense_tensor_writes_nonzeros_only(tmp_path: Path) -> None:
    a = np.zeros((3, 3), dtype=np.int64)
    a[2, 2] = 7
    a[0, 1] = -2
    path = tmp_path / "d.tns"
    coiter.write(path, Tensor.from_numpy(a))
    assert path.read_text() == "1 2 -2\n3 3 7\n"


def test_tns_comments_blank_lines_duplicates_and_format(tmp_path: Path) -> None:
    path = tmp_path / "c.tns"
    path.write_text("# header\n\n3 1 2.5\n1 2 1.0   # trailing note\n3 1 0.5\n")
    t = coiter.read(path, format=coiter.csr, name="C")
    assert t.name == "C" and t.format == coiter.csr
    np.testing.assert_array_equal(t.to_numpy(), [[0, 1.0], [0, 0], [3.0, 0]])


def test_tns_vector(tmp_path: Path) -> None:
    path = tmp_path / "v.tns"
    path.write_text("4 1.5\n2 -1\n")
    t = coiter.read(path)
    assert t.format == coiter.coo(1)
    np.testing.assert_array_equal(t.to_numpy(), [0, -1.0, 0, 1.5])


@pytest.mark.parametrize(
    "text",
    [
        "1 2 3.0\n1 2\n",  # ragged lines
        "1 x 3.0\n",  # not a number
        "0 1 3.0\n",  # coordinates are 1-based
        "1.5 1 3.0\n",  # fractional coordinate
        "# only a comment\n",  # no entries
        "",
    ],
)
def test_tns_malformed(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.tns"
    path.write_text(text)
    with pytest.raises(FormatError):
        coiter.read(path)


def test_tns_rejects_complex(tmp_path: Path) -> None:
    path = tmp_path / "z.tns"
    with pytest.raises(DTypeError):
        coiter.write(path, Tensor.from_numpy(np.array([1j, 0])))
    assert not path.exists()


def test_read_jf17k() -> None:
    with gzip.open(JF17K, "rt") as f:
        lines = [line.split() for line in f if line.strip() and not line.startswith("#")]
    rows = np.array(lines, dtype=np.float64)
    t = coiter.read(JF17K)
    assert t.order == rows.shape[1] - 1
    assert t.nnz == len(lines)
    assert t.shape == tuple(int(d) for d in rows[:, :-1].max(axis=0))
    coords, vals = t.storage.to_coords()
    stored = {tuple(c): v for c, v in zip(coords.T.tolist(), vals.tolist())}
    for row in rows[[0, 1, len(rows) // 2, -1]]:
        key = tuple(int(c) - 1 for c in row[:-1])
        assert stored[key] == row[-1]


# ------------------------------------------------------------------ file kinds


@pytest.mark.parametrize("name", ["m.txt", "m.npy", "m.gz", "mtx", "m.tns.bz2"])
def test_unknown_extension(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    with pytest.raises(FormatError):
        coiter.read(path)
    with pytest.raises(FormatError):
        coiter.write(path, Tensor.from_numpy(np.eye(2)))


def test_suffix_is_case_insensitive(tmp_path: Path) -> None:
    path = tmp_path / "UPPER.MTX.GZ"
    coiter.write(str(path), Tensor.from_numpy(np.eye(3), format=coiter.csr))
    np.testing.assert_array_equal(coiter.read(str(path)).to_numpy(), np.eye(3))
