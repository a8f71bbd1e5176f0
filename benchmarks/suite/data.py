"""Benchmark inputs: the real matrices and tensors of the data directory, converted once
with ``coiter.read`` and cached as .npz, and generated banded, power-law and uniform ones.

Every input is held in a library-neutral form (a canonical SciPy CSR array, or sorted
unique COO coordinates and values for tensors) from which each system builds its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp

from .settings import QUICK_MATRICES, QUICK_TENSORS, Settings

MATRIX_SUFFIX = ".mtx.gz"
TENSOR_SUFFIX = ".tns.gz"


@dataclass
class Matrix:
    """A sparse matrix input, canonical CSR (sorted, no duplicates)."""

    name: str
    source: str  # "file" or "generated"
    csr: sp.csr_array

    kind = "matrix"

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "source": self.source,
                "shape": list(self.csr.shape), "nnz": int(self.csr.nnz)}


@dataclass
class Tensor:
    """A sparse tensor input: coordinates (order x nnz, int64) sorted lexicographically
    and unique, values, shape."""

    name: str
    source: str
    coords: np.ndarray
    vals: np.ndarray
    shape: tuple[int, ...]

    kind = "tensor"

    @property
    def order(self) -> int:
        return len(self.shape)

    @property
    def nnz(self) -> int:
        return int(self.vals.shape[0])

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "source": self.source,
                "shape": list(self.shape), "nnz": self.nnz}


Input = Matrix | Tensor


@dataclass(frozen=True)
class InputRef:
    """An input by name, loaded on demand (workers hold one input in memory at a time)."""

    name: str
    kind: str  # "matrix" or "tensor"
    load: Callable[[], Input]
    size: int  # about the bytes of its arrays: inputs run smallest first
    path: Path | None = None  # the data file of a real input
    only: tuple[str, ...] = ()  # the kernels that run on it; empty: every kernel of its kind

    def takes(self, kernel: str, kind: str) -> bool:
        """Whether the kernel ``kernel`` of operand kind ``kind`` runs on this input."""
        return kind == self.kind and (not self.only or kernel in self.only)


# --------------------------------------------------------------------------- cache

def cache_dir() -> Path:
    """Where converted inputs are kept: ``<user cache dir of coiter>/benchmarks``."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("coiter")) / "benchmarks"


def _cache_path(path: Path) -> Path:
    # size and mtime in the name: a replaced file gets converted again
    st = path.stat()
    stem = path.name.split(".")[0]
    return cache_dir() / f"{stem}-{st.st_size}-{st.st_mtime_ns}.npz"


def convert(path: Path) -> Path:
    """Convert one Matrix Market / FROSTT file to its cached .npz (once) and return it."""
    out = _cache_path(path)
    if out.exists():
        return out
    import coiter

    out.parent.mkdir(parents=True, exist_ok=True)
    t = coiter.read(path)
    if t.order == 2:
        csr = sp.csr_array(t.to_scipy())
        csr.sum_duplicates()
        csr.sort_indices()
        arrays = {"indptr": csr.indptr, "indices": csr.indices, "data": csr.data}
    else:
        coords, vals = t.storage.to_coords()
        coords, vals = canonical_coords(coords, vals, t.shape)
        arrays = {"coords": coords, "vals": vals}
    tmp = out.with_suffix(".tmp.npz")
    np.savez(tmp, shape=np.array(t.shape, dtype=np.int64), **arrays)
    tmp.replace(out)  # atomic: a concurrent reader never sees half a file
    return out


def _load_file(path: Path) -> Input:
    name = path.name.split(".")[0]
    with np.load(convert(path)) as z:
        shape = tuple(int(s) for s in z["shape"])
        if "indptr" in z:
            csr = sp.csr_array((z["data"], z["indices"], z["indptr"]), shape=shape)
            return Matrix(name, "file", csr)
        return Tensor(name, "file", z["coords"], z["vals"], shape)


def canonical_coords(coords: np.ndarray, vals: np.ndarray,
                     shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates sorted lexicographically with duplicates summed."""
    keys = np.ravel_multi_index(tuple(coords), shape)
    uniq, inverse = np.unique(keys, return_inverse=True)
    summed = np.bincount(inverse, weights=vals, minlength=uniq.shape[0])
    return np.array(np.unravel_index(uniq, shape), dtype=np.int64), summed


# --------------------------------------------------------------------------- generated

def banded(n: int, row_nnz: int, seed: int = 0) -> sp.csr_array:
    """n x n band matrix, every entry within ``row_nnz // 2`` of the diagonal stored."""
    w = row_nnz // 2
    rows = np.repeat(np.arange(n), 2 * w + 1)
    cols = rows + np.tile(np.arange(-w, w + 1), n)
    keep = (cols >= 0) & (cols < n)
    vals = np.random.default_rng(seed).random(int(keep.sum()))
    return _csr(rows[keep], cols[keep], vals, (n, n))


def power_law(n: int, row_nnz: int, seed: int = 1) -> sp.csr_array:
    """n x n matrix whose row lengths follow a Pareto law (a few rows thousands long) and
    whose columns are drawn with power-law popularity, mean ``row_nnz`` per row."""
    rng = np.random.default_rng(seed)
    raw = rng.pareto(1.5, n) + 1.0
    lengths = np.minimum(np.rint(raw * row_nnz / raw.mean()), n // 4).astype(np.int64)
    rows = np.repeat(np.arange(n), lengths)
    popularity = 1.0 / np.arange(1, n + 1) ** 0.8
    cols = rng.permutation(n)[rng.choice(n, rows.shape[0], p=popularity / popularity.sum())]
    return _csr(rows, cols, rng.random(rows.shape[0]), (n, n))


def uniform(n: int, row_nnz: int, seed: int = 2) -> sp.csr_array:
    """n x n matrix with ``n * row_nnz`` entries at uniformly random positions."""
    rng = np.random.default_rng(seed)
    m = n * row_nnz
    return _csr(rng.integers(0, n, m), rng.integers(0, n, m), rng.random(m), (n, n))


def _csr(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, shape: tuple[int, int]) -> sp.csr_array:
    """Canonical CSR with 32-bit indices, as the files' matrices have. SciPy keeps the int64
    of the coordinates given, and a peer that narrows them in place (sparse_dot_mkl does)
    changed every later system's operands in the middle of a run."""
    csr = sp.csr_array(sp.coo_array((vals, (rows.astype(np.int32), cols.astype(np.int32))), shape=shape))
    csr.sum_duplicates()
    csr.sort_indices()
    return csr


def random_tensor(dim: int, nnz: int, skewed: bool, seed: int = 3) -> Tensor:
    """dim^3 tensor with ``nnz`` random entries; ``skewed`` draws the first mode with
    power-law popularity (long slices), otherwise every mode is uniform."""
    rng = np.random.default_rng(seed)
    coords = rng.integers(0, dim, (3, nnz))
    if skewed:
        popularity = 1.0 / np.arange(1, dim + 1) ** 1.1
        coords[0] = rng.choice(dim, nnz, p=popularity / popularity.sum())
    shape = (dim, dim, dim)
    coords, vals = canonical_coords(coords, rng.random(nnz), shape)
    name = f"gen-{'powerlaw' if skewed else 'uniform'}3-{dim}"
    return Tensor(name, "generated", coords, vals, shape)


def generated(settings: Settings) -> list[InputRef]:
    """Generated inputs: banded, power-law and uniform matrices with ``gen_size`` rows,
    uniform and power-law 3-tensors of size (gen_size/10)^3 with 2*gen_size nonzeros, and
    for SpMV alone the three matrices again with ``large_size`` rows (none when it is 0)."""
    n, k = settings.gen_size, settings.gen_row_nnz
    refs = _matrices(n, k)
    dim = max(n // 10, 10)
    for skewed in (False, True):
        name = f"gen-{'powerlaw' if skewed else 'uniform'}3-{dim}"
        refs.append(InputRef(name, "tensor", lambda s=skewed: random_tensor(dim, 2 * n, s), 64 * n))
    if settings.large_size:
        # SpMV only: its bandwidth target is over inputs larger than the last-level cache,
        # and every other kernel would take seconds a call on them
        refs += _matrices(settings.large_size, k, only=("spmv",))
    return refs


def _matrices(n: int, k: int, only: tuple[str, ...] = ()) -> list[InputRef]:
    """The banded, power-law and uniform n x n matrices of about k entries a row."""
    return [InputRef(f"gen-{label}-{n}", "matrix",
                     lambda f=f, label=label: Matrix(f"gen-{label}-{n}", "generated", f(n, k)),
                     12 * n * k, only=only)
            for label, f in (("banded", banded), ("powerlaw", power_law), ("uniform", uniform))]


# --------------------------------------------------------------------------- selection

def real_files(settings: Settings) -> list[Path]:
    """The data directory's matrix and tensor files of this run (quick: a small few)."""
    if not settings.data_dir:
        return []
    root = Path(settings.data_dir)
    files = sorted((root / "matrices").glob(f"*{MATRIX_SUFFIX}")) + \
        sorted((root / "tensors").glob(f"*{TENSOR_SUFFIX}"))
    if settings.quick:
        wanted = set(QUICK_MATRICES) | set(QUICK_TENSORS)
        files = [f for f in files if f.name.split(".")[0] in wanted]
    return files


def _size(path: Path) -> int:
    # the converted file's size once it exists (the parent converts before workers start)
    cached = _cache_path(path)
    return cached.stat().st_size if cached.exists() else 4 * path.stat().st_size


def selected(settings: Settings) -> list[InputRef]:
    """Every input of this run filtered by ``settings.inputs``: matrices then tensors,
    each smallest first (so a peer too slow on one input is not run on larger ones)."""
    refs = [InputRef(f.name.split(".")[0],
                     "matrix" if f.name.endswith(MATRIX_SUFFIX) else "tensor",
                     lambda f=f: _load_file(f), _size(f), f)
            for f in real_files(settings)]
    refs += generated(settings)
    if settings.inputs:
        refs = [r for r in refs if any(s in r.name for s in settings.inputs)]
    return sorted(refs, key=lambda r: (r.kind != "matrix", r.size))


def tiny_matrix(n: int = 10) -> sp.csr_array:
    """The n x n matrix of the per-call overhead rows: tridiagonal, so every row is used."""
    return banded(n, 2)

