"""coiter's binary tensor files (coiter/interop/npz.py): every format round-trips with its
values, type, index width and fill; damaged or hostile files are FormatErrors."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter.errors import FormatError
from coiter.formats.format import NAMED, as_format

RNG = np.random.default_rng(3)
SHAPES = {1: (7,), 2: (6, 8), 3: (4, 5, 6)}


def _formats() -> list[tuple[str, coiter.Format]]:
    out = []
    for name in NAMED:
        for order in SHAPES:
            try:
                fmt = as_format(name, order)
            except FormatError:
                continue
            if fmt.order == order:
                out.append((f"{name}-{order}", fmt))
    out += [("bcsr 2x4", coiter.bcsr((2, 4))), ("bcoo", coiter.bcoo()), ("csb", coiter.csb()),
            ("column-major dense", coiter.dense(2, (1, 0))), ("dsd", coiter.parse_format("dsd")),
            ("sds:2,0,1", coiter.parse_format("sds:2,0,1"))]
    return out


FORMATS = _formats()


def _sparse_array(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.standard_normal(shape) * (RNG.random(shape) < 0.4)


@pytest.mark.parametrize("label, fmt", FORMATS, ids=[f[0] for f in FORMATS])
@pytest.mark.parametrize("compressed", [False, True])
def test_every_format_round_trips(tmp_path: Path, label: str, fmt: coiter.Format, compressed: bool) -> None:
    a = _sparse_array(SHAPES[fmt.order])
    t = coiter.Tensor.from_numpy(a, format=fmt)
    path = tmp_path / "t.npz"
    coiter.write(path, t, compressed=compressed)
    back = coiter.read(path)
    assert back.format == t.format and back.shape == t.shape and back.dtype == t.dtype
    np.testing.assert_array_equal(back.to_numpy(), a)
    for mine, theirs in zip(t.storage.levels, back.storage.levels):
        assert mine.keys() == theirs.keys()
        for name in mine:
            np.testing.assert_array_equal(mine[name], theirs[name])
            assert mine[name].dtype == theirs[name].dtype


@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.int8, np.uint64, np.bool_, np.float16])
def test_value_types_and_fills_round_trip(tmp_path: Path, dtype: type) -> None:
    a = (_sparse_array((5, 6)) * 3).astype(dtype)
    t = coiter.Tensor.from_numpy(a, format="csr")
    coiter.write(tmp_path / "t.npz", t)
    back = coiter.read(tmp_path / "t.npz")
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back.to_numpy(), a)
    g = coiter.Tensor.from_scipy(sp.csr_array(np.abs(_sparse_array((5, 5)))), fill_value=np.inf)
    coiter.write(tmp_path / "g.npz", g)
    back = coiter.read(tmp_path / "g.npz")
    assert back.fill_value == np.inf
    np.testing.assert_array_equal(back.to_numpy(), g.to_numpy())
    z = coiter.Tensor.from_numpy(np.array([1 + 2j, 0]), format="s").with_fill(1j)
    coiter.write(tmp_path / "z.npz", z)
    assert coiter.read(tmp_path / "z.npz").fill_value == 1j


def test_int64_indices_empty_tensors_scalars_and_conversion_on_read(tmp_path: Path) -> None:
    m = sp.csr_array(sp.random(40, 30, density=0.1, random_state=4))
    m.indptr, m.indices = m.indptr.astype(np.int64), m.indices.astype(np.int64)
    t = coiter.Tensor.from_scipy(m)
    coiter.write(tmp_path / "m.npz", t)
    back = coiter.read(tmp_path / "m.npz")
    assert back.storage.index_dtype == np.int64
    np.testing.assert_array_equal(back.to_numpy(), m.toarray())
    as_csc = coiter.read(tmp_path / "m.npz", format="csc")
    assert as_csc.format == coiter.csc
    np.testing.assert_array_equal(as_csc.to_numpy(), m.toarray())
    for t in (coiter.Tensor((0, 5), format="csr"), coiter.Tensor((3, 4), format="coo"),
              coiter.Tensor.from_numpy(np.array(2.5))):
        coiter.write(tmp_path / "e.npz", t)
        np.testing.assert_array_equal(coiter.read(tmp_path / "e.npz").to_numpy(), t.to_numpy())


def _rewrite(path: Path, change) -> None:
    """Rewrite the archive at ``path`` with ``change(files)`` applied to its arrays."""
    with np.load(path) as z:
        files = {k: z[k] for k in z.files}
    change(files)
    with open(path, "wb") as f:
        np.savez(f, **files)


def test_damaged_and_hostile_files_are_format_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.npz"
    t = coiter.Tensor.from_numpy(_sparse_array((6, 8)), format="csr")

    def fresh() -> None:
        coiter.write(path, t)

    def meta(edit) -> None:
        def change(files: dict) -> None:
            m = json.loads(str(files["meta"]))
            edit(m)
            files["meta"] = np.array(json.dumps(m))
        _rewrite(path, change)

    fresh()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="not a coiter .npz file"):
        coiter.read(path)
    fresh()
    _rewrite(path, lambda files: files.__setitem__("level1.crd", files["level1.crd"] + 100))
    with pytest.raises(FormatError, match="level 2"):
        coiter.read(path)
    fresh()
    meta(lambda m: m["format"]["levels"][0].__setitem__("class", "subprocess:Popen"))
    with pytest.raises(FormatError, match="'subprocess:Popen'"):
        coiter.read(path)
    fresh()
    meta(lambda m: m.__setitem__("coiter", 99))
    with pytest.raises(FormatError, match="version 99"):
        coiter.read(path)
    fresh()
    _rewrite(path, lambda files: files.pop("meta"))
    with pytest.raises(FormatError, match="unreadable"):
        coiter.read(path)
    fresh()
    _rewrite(path, lambda files: files.__setitem__("level9.pos", files["level1.pos"]))
    with pytest.raises(FormatError, match="unreadable"):
        coiter.read(path)
    with pytest.raises(FileNotFoundError):
        coiter.read(tmp_path / "missing.npz")
    with zipfile.ZipFile(tmp_path / "pickled.npz", "w") as z:  # an object array needs pickle
        with z.open("vals.npy", "w") as f:
            np.lib.format.write_array(f, np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(FormatError, match="not a coiter .npz file"):
        coiter.read(tmp_path / "pickled.npz")
