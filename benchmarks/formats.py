"""Format studies of Chou et al., "Unified sparse formats for tensor algebra compilers" (§7).

    python benchmarks/formats.py [--study coo|dia|vector|spmv|all] [--data DIR]
                                 [--repeat N] [--quick] [--out DIR]

Studies (the paper's figure in brackets):

* ``coo``    [Fig. 14] data arrives as COO: one COO SpMV vs. converting COO->CSR and
  running one CSR SpMV (and CSR SpMV alone), on real matrices.
* ``dia``    [Fig. 15] DIA vs. CSR SpMV on generated banded/stencil matrices and on
  real matrices, with scipy's dia/csr as peers.
* ``vector`` [Fig. 16] CSR SpMV with the input vector stored dense, sparse or hashed,
  over a grid of vector density x matrix density (random matrices); heat map PNG.
* ``spmv``   [Fig. 10] SpMV in every coiter matrix format against scipy.sparse and
  Intel MKL (``sparse_dot_mkl``).

Every timing is single-threaded, verified against scipy/NumPy before it counts, and
reported as the median [min-max] of ``--repeat`` runs after warm-up (see ``_common``).
A peer library that is not installed prints as ``n/a``; a format coiter refuses for a
matrix (padding limits) prints as ``refused``. Results go to the terminal and to
``<out>/format-studies.md`` (one section per study, replaced on rerun). Nothing here
asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import (
    DEFAULT_DATA, REPO_ROOT, Case, Check, Result, Skipped, Timing, bench_group, close_to,
    failure, machine_info, markdown_table, ratio, short_error, text_table,
)

import argparse
import datetime
import os
import re
import shlex
import sys
import time
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import scipy.sparse as sp

import coiter

SPMV = "y(i) = A(i,j) * x(j)"
REPORT_NAME = "format-studies.md"
HEATMAP_NAME = "format-study-vector.png"
STUDIES = ("coo", "dia", "vector", "spmv")
# Largest padded DIA/ELL array (entries) a study builds; beyond it the row is skipped.
PAD_LIMIT = {False: 2e8, True: 2e7}
BCSR_BLOCKS = ((4, 4), (3, 3), (2, 2))
BCSR_MAX_FILL = 2.0

# scipy warns when building DIA with many diagonals: the studies do that on purpose
warnings.filterwarnings("ignore", category=sp.SparseEfficiencyWarning)


# --------------------------------------------------------------------------- formats

def coiter_format(name: str, block: tuple[int, int] | None = None) -> Any:
    """The coiter format called ``name`` (matrix: coo coo_aos csr dia ell bcsr; vector:
    dense_vector sparse_vector hash_vector)."""
    formats: dict[str, Callable[[], Any]] = {
        "coo": lambda: coiter.coo(2), "coo_aos": lambda: coiter.coo_aos(2),
        "csr": lambda: coiter.csr, "dia": coiter.dia, "ell": coiter.ell,
        "bcsr": lambda: coiter.bcsr(block), "dense_vector": lambda: "d",
        "sparse_vector": coiter.sparse_vector, "hash_vector": coiter.hash_vector,
    }
    if name not in formats:
        raise ValueError(f"unknown format name {name!r}")
    return formats[name]()


def format_label(name: str) -> str:
    """How a vector format appears in tables."""
    return {"dense_vector": 'dense ("d")', "sparse_vector": "sparse", "hash_vector": "hash"}.get(name, name)


def to_tensor(m: Any, fmt: Any) -> coiter.Tensor:
    """coiter Tensor of SciPy matrix or NumPy array ``m`` in ``fmt``."""
    make = coiter.Tensor.from_scipy if sp.issparse(m) else coiter.Tensor.from_numpy
    return make(m, format=fmt)


@lru_cache(maxsize=None)
def spmv_kernel(a_fmt: Any, x_fmt: Any = "d") -> Any:
    """``y = A x`` kernel for these formats of A and x (one per pair; compiled on first call)."""
    return coiter.compile(SPMV, formats={"A": a_fmt, "x": x_fmt, "y": "d"})


def spmv_case(m: sp.csr_array, x: np.ndarray, verify: Check, a_fmt: str = "csr",
              x_fmt: str = "dense_vector", block: tuple[int, int] | None = None) -> Case | Skipped:
    """coiter ``y = A x`` with matrix ``m`` stored as ``a_fmt`` and vector ``x`` as ``x_fmt``
    (names as in :func:`coiter_format`), ready for :func:`bench_group`; a failure when this
    coiter refuses the format for this matrix or fails."""
    try:
        fa, fx = coiter_format(a_fmt, block), coiter_format(x_fmt)
        A = to_tensor(m, fa)
        X = x if x_fmt == "dense_vector" else to_tensor(x, fx)
        kernel = spmv_kernel(fa, fx)
    except coiter.FormatError as exc:  # e.g. padded storage refused for an irregular matrix
        return failure(exc, "refused")
    except Exception as exc:  # noqa: BLE001 - reported in the table rather than stopping the run
        return failure(exc)
    return (lambda: kernel(A=A, x=X)), verify


def mkl_dot() -> tuple[Callable[[Any, np.ndarray], np.ndarray] | None, str]:
    """``sparse_dot_mkl.dot_product_mkl`` pinned to one thread, or None and why not."""
    try:
        import sparse_dot_mkl
        sparse_dot_mkl.mkl_set_num_threads(1)
        return sparse_dot_mkl.dot_product_mkl, sparse_dot_mkl.mkl_get_version_string()
    except Exception as exc:  # noqa: BLE001 - ImportError, OSError (no libmkl_rt), ...
        return None, f"n/a: {short_error(exc, 60)}"


# -------------------------------------------------------------------------- matrices

@dataclass(frozen=True)
class MatrixSpec:
    """A named matrix: a real one from the data directory or a generated one."""

    name: str
    load: Callable[[], sp.csr_array]
    generated: bool


def canonical(m: Any) -> sp.csr_array:
    """Canonical float64 CSR with int32 indices where they fit (as scipy and MKL use)."""
    m = sp.csr_array(m, dtype=np.float64)
    m.sum_duplicates()
    m.sort_indices()
    idx = np.int32 if max(m.nnz, *m.shape) < 2**31 else np.int64
    return sp.csr_array((m.data, m.indices.astype(idx), m.indptr.astype(idx)), shape=m.shape)


def real(data: Path, name: str) -> MatrixSpec:
    """Matrix ``<data>/matrices/<name>.mtx.gz``, read with ``coiter.read``."""
    path = data / "matrices" / f"{name}.mtx.gz"
    return MatrixSpec(name, lambda: canonical(coiter.read(path).to_scipy()), False)


def _randomised(m: sp.sparray, seed: int) -> sp.csr_array:
    """``m``'s pattern with random values in [0.5, 1.5) (catches mixed-up entries)."""
    m = canonical(m)
    m.data = np.random.default_rng(seed).random(m.nnz) + 0.5
    return m


def tridiagonal(n: int) -> MatrixSpec:
    """n x n tridiagonal matrix."""
    return MatrixSpec(f"tridiag n={n:.0e}".replace("e+0", "e"),
                      lambda: _randomised(sp.diags_array([1.0, 2.0, 1.0], offsets=[-1, 0, 1],
                                                         shape=(n, n)), 1), True)


def _laplacian_1d(g: int) -> sp.sparray:
    return sp.diags_array([1.0, 2.0, 1.0], offsets=[-1, 0, 1], shape=(g, g))


def stencil_2d(g: int) -> MatrixSpec:
    """5-point stencil on a g x g grid (n = g^2, 5 diagonals with boundary gaps)."""
    def load() -> sp.csr_array:
        t, i = _laplacian_1d(g), sp.eye_array(g)
        return _randomised(sp.kron(i, t) + sp.kron(t, i), 2)
    return MatrixSpec(f"5-pt stencil {g}x{g}", load, True)


def stencil_3d(g: int) -> MatrixSpec:
    """7-point stencil on a g x g x g grid (n = g^3, 7 diagonals with boundary gaps)."""
    def load() -> sp.csr_array:
        t, i = _laplacian_1d(g), sp.eye_array(g)
        m = sp.kron(sp.kron(i, i), t) + sp.kron(sp.kron(i, t), i) + sp.kron(sp.kron(t, i), i)
        return _randomised(m, 3)
    return MatrixSpec(f"7-pt stencil {g}^3", load, True)


def random_band(n: int, k: int, width: int) -> MatrixSpec:
    """n x n matrix with the main diagonal and k-1 more full diagonals at random offsets
    in [-width, width] (the paper's synth1/synth2 are of this kind)."""
    def load() -> sp.csr_array:
        rng = np.random.default_rng(4)
        others = rng.choice(np.setdiff1d(np.arange(-width, width + 1), [0]), k - 1, replace=False)
        offsets = np.sort(np.concatenate([[0], others]))
        return _randomised(sp.diags_array([1.0] * k, offsets=offsets, shape=(n, n)), 5)
    return MatrixSpec(f"band n={n:.0e} k={k} w={width}".replace("e+0", "e"), load, True)


def random_matrix(n: int, density: float, seed: int) -> sp.csr_array:
    """n x n matrix with about density * n^2 uniformly placed random entries."""
    rng = np.random.default_rng(seed)
    nnz = max(1, round(density * n * n))
    rows, cols = rng.integers(0, n, nnz), rng.integers(0, n, nnz)
    return canonical(sp.coo_array((rng.random(nnz) + 0.5, (rows, cols)), shape=(n, n)))


def random_vector(n: int, density: float, seed: int) -> np.ndarray:
    """Dense length-n array with max(1, density * n) random nonzeros at random positions."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    x[rng.choice(n, max(1, round(density * n)), replace=False)] = rng.random(max(1, round(density * n))) + 0.5
    return x


def diagonal_count(m: sp.csr_array) -> int:
    """Number of distinct diagonals (j - i) holding entries."""
    c = m.tocoo()
    return int(np.unique(c.col.astype(np.int64) - c.row).size)


def dia_padded(m: sp.csr_array) -> int:
    """Entries a DIA array holds (diagonals x longest diagonal)."""
    return diagonal_count(m) * max(m.shape)


def ell_padded(m: sp.csr_array) -> int:
    """Entries an ELL array holds (rows x longest row)."""
    return int(np.diff(m.indptr).max(initial=0)) * m.shape[0]


def bcsr_block(m: sp.csr_array) -> tuple[tuple[int, int] | None, float, str]:
    """Largest block size in BCSR_BLOCKS that divides the shape with fill <= BCSR_MAX_FILL.

    Returns (block, fill, note); block is None (with the reason in note) if none fits.
    Fill is stored entries (blocks x block area) over nonzeros.
    """
    c = m.tocoo()
    tried = []
    for bi, bj in BCSR_BLOCKS:
        if m.shape[0] % bi or m.shape[1] % bj:
            tried.append(f"{bi}x{bj}: shape")
            continue
        keys = (c.row.astype(np.int64) // bi) * (m.shape[1] // bj) + c.col // bj
        fill = np.unique(keys).size * bi * bj / max(m.nnz, 1)
        if fill <= BCSR_MAX_FILL:
            return (bi, bj), fill, f"{bi}x{bj}"
        tried.append(f"{bi}x{bj}: fill {fill:.1f}")
    return None, float("nan"), "no block fits (" + "; ".join(tried) + ")"


# ---------------------------------------------------------------------------- report

@dataclass
class Context:
    """Command-line settings shared by the studies."""

    data: Path
    repeat: int
    quick: bool
    out: Path
    command: str
    pad_limit: float = field(init=False)

    def __post_init__(self) -> None:
        self.pad_limit = PAD_LIMIT[self.quick]


@dataclass
class Section:
    """One study's part of the markdown report."""

    study: str
    title: str
    paper: str
    body: list[str] = field(default_factory=list)
    failures: dict[str, None] = field(default_factory=dict)  # ordered set of messages

    def collect(self, results: Iterable[Result]) -> None:
        """Remember the error messages of failed cells, for a note at the section's end."""
        for r in results:
            if isinstance(r, Skipped) and r.detail:
                self.failures[f"{r.reason}: {r.detail}"] = None

    def table(self, caption: str, headers: list[str], rows: list[list[Any]]) -> None:
        """Print a table to the terminal and add it to the report."""
        print(f"\n{caption}\n{text_table(headers, rows)}\n", flush=True)
        self.body += [f"**{caption}**", "", markdown_table(headers, rows), ""]

    def note(self, text: str) -> None:
        """Print a paragraph and add it to the report."""
        print(text, flush=True)
        self.body += [text, ""]

    def render(self, ctx: Context, info: dict[str, str], seconds: float) -> str:
        """The section as markdown between ``study:<name>`` markers (see write_report)."""
        head = [
            f"<!-- study:{self.study} begin -->",
            f"## {self.title}",
            "",
            f"Command: `{ctx.command}`{' (quick mode: small inputs)' if ctx.quick else ''}; "
            f"run {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, took {seconds:.0f} s; "
            f"{ctx.repeat} timed runs per cell after 2 warm-up runs; load average at the end "
            f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}.",
            "",
            "Machine: " + "; ".join(f"{k}: {v}" for k, v in info.items()) + ".",
            "",
            f"Paper: {self.paper}",
            "",
        ]
        tail = ["Messages of failed or refused cells:", ""] + [f"- {m}" for m in self.failures] + [""]
        body = self.body + (tail if self.failures else [])
        return "\n".join(head + body).rstrip() + f"\n<!-- study:{self.study} end -->\n"


REPORT_HEADER = """# Format studies

Reproduction of the format studies (§7, Figs. 10 and 14-16) of Chou, Kjolstad and
Amarasinghe, "Unified Sparse Formats for Tensor Algebra Compilers" (preprint of "Format
Abstraction for Sparse Tensor Algebra Compilers", OOPSLA 2018; notes in
`shared/papers/notes/formats.md` beside the repository) with coiter, scipy.sparse and Intel
MKL. Generated by `benchmarks/formats.py`; each section below says how it was made and is
replaced when that study is rerun.

Method: all timings are single-threaded (OMP/MKL/OpenBLAS threads = 1). Each cell is a
coiter kernel or library call whose result was first checked against scipy/NumPy with
`numpy.testing.assert_allclose` (conversions: compared entry by entry), then run twice
untimed (warm-up; the first coiter call also generates and compiles the kernel), then
timed `--repeat` times with `time.perf_counter`. The timed calls of the cells in one table
row (one grid cell in study (c)) are made round-robin, so that load changes on the shared
machine hit them alike; tables give the median in milliseconds, `[min-max]` where shown.
Caches are not flushed between calls (the paper flushed them), but round-robin timing
means a call's data is often not left in cache by the call before it. coiter times
include its per-call Python overhead (argument checks, allocating the result), tens of
microseconds, which matters only for the smallest matrices. Cells that say `n/a` are
libraries that were not available when the section was made.
"""


def write_report(out: Path, sections: dict[str, str]) -> Path:
    """Put ``sections`` (study -> rendered markdown) into ``out/format-studies.md``,
    keeping the sections of other studies already there."""
    path = out / REPORT_NAME
    old = path.read_text() if path.exists() else ""
    blocks = {b.group(1): b.group(0) for b in
              re.finditer(r"<!-- study:(\w+) begin -->.*?<!-- study:\1 end -->\n", old, re.S)}
    blocks.update(sections)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(REPORT_HEADER + "".join("\n" + blocks[s] for s in STUDIES if s in blocks))
    return path


def cells(results: Iterable[Result], ranges: bool = False) -> list[str]:
    """Table cells (ms) of results."""
    return [r.ms_range() if ranges else r.ms() for r in results]


def speedup_range(values: list[float]) -> str:
    """``min-max (median)`` of a list of ratios, or ``-``."""
    if not values:
        return "-"
    return f"{min(values):.2f}x-{max(values):.2f}x (median {np.median(values):.2f}x)"


def med(r: Result) -> float | None:
    """Median seconds, or None for a skipped cell."""
    return r.median if isinstance(r, Timing) else None


# -------------------------------------------------------------------- (a) COO study

def study_coo(ctx: Context) -> Section:
    """Fig. 14: when data arrives as COO, one COO SpMV vs. COO->CSR conversion + CSR SpMV."""
    names = (["bcsstk16", "cit-HepTh", "email-Enron", "luxembourg_osm"] if ctx.quick else
             ["bcsstk33", "s3rmt3m3", "cit-HepTh", "email-Enron", "ca-AstroPh-cc1",
              "soc-Slashdot0902", "ego-Twitter-undirected", "USA-road-NY", "USA-road-FLA"])
    sec = Section("coo", "(a) COO SpMV vs. COO->CSR conversion + CSR SpMV (Fig. 14)",
                  "COO SpMV up to 3.6x faster than converting to CSR and running one CSR SpMV; "
                  "without the conversion, COO SpMV takes up to 2x as long as CSR SpMV.")
    coo_fmt, csr_fmt = coiter.coo(2), coiter.csr
    k_coo, k_csr = spmv_kernel(coo_fmt), spmv_kernel(csr_fmt)
    rows, ratio_rows, conv_over_coo, coo_over_csr = [], [], [], []
    for name in names:
        m = real(ctx.data, name).load()
        print(f"  {name}: {m.shape[0]}x{m.shape[1]}, nnz {m.nnz}", flush=True)
        x = np.random.default_rng(0).random(m.shape[1])
        verify = close_to(m @ x)
        coo_s = m.tocoo()  # row-major ordered COO, as the data "arrives"
        A_coo = coiter.Tensor.from_scipy(coo_s, format=coo_fmt)

        def same_matrix(t: coiter.Tensor, ref: sp.csr_array = m) -> None:
            assert t.format == csr_fmt, f"converted to {t.format}"
            diff = abs(sp.csr_array(t.to_scipy()) - ref)
            assert diff.nnz == 0 or diff.max() == 0, "conversion changed entries"

        A_csr = A_coo.asformat(csr_fmt)
        res = bench_group({
            "coo": (lambda: k_coo(A=A_coo, x=x), verify),
            "convert": (lambda: A_coo.asformat(csr_fmt), same_matrix),
            "csr": (lambda: k_csr(A=A_csr, x=x), verify),
            "convert+csr": (lambda: k_csr(A=A_coo.asformat(csr_fmt), x=x), verify),
            "scipy coo": (lambda: coo_s @ x, verify),
            "scipy tocsr+csr": (lambda: coo_s.tocsr() @ x, verify),
        }, ctx.repeat)
        sec.collect(res.values())
        t_coo, t_conv, t_csr, t_both, s_coo, s_both = res.values()
        rows.append([name, f"{m.shape[0]}", f"{m.nnz}", *cells(res.values(), True)])
        if (c := med(t_coo)) and (b := med(t_both)) and (r := med(t_csr)) and (v := med(t_conv)):
            conv_over_coo.append(b / c)
            coo_over_csr.append(c / r)
            breakeven = f"{v / (c - r):.1f}" if c > r else "never (COO not slower)"
        else:
            breakeven = "-"
        ratio_rows.append([name, ratio(t_both, t_coo), ratio(t_coo, t_csr), ratio(t_conv, t_csr),
                           breakeven, ratio(s_both, s_coo)])
    sec.table("SpMV times, ms: median [min-max]",
              ["matrix", "rows", "nnz", "coiter COO SpMV", "coiter COO->CSR", "coiter CSR SpMV",
               "coiter convert+CSR SpMV", "scipy coo@x", "scipy tocsr()+csr@x"], rows)
    sec.table("Ratios (of medians)",
              ["matrix", "(convert+CSR)/COO", "COO/CSR (no conversion)", "convert/CSR SpMV",
               "SpMVs to amortise conversion", "scipy (tocsr+csr)/coo"], ratio_rows)
    sec.note(f"coiter: convert+CSR over COO SpMV {speedup_range(conv_over_coo)}; "
             f"COO over CSR SpMV (conversion ignored) {speedup_range(coo_over_csr)}. "
             "'SpMVs to amortise conversion' = conversion time / (COO SpMV - CSR SpMV): how many "
             "SpMVs on the same matrix make converting to CSR pay off.")
    return sec


# -------------------------------------------------------------------- (b) DIA study

def study_dia(ctx: Context) -> Section:
    """Fig. 15: DIA vs. CSR SpMV on banded/stencil matrices and on real matrices."""
    if ctx.quick:
        specs = [tridiagonal(50_000), stencil_2d(200), stencil_3d(30), random_band(50_000, 4, 500)]
        names = ["bcsstk16", "add32", "cit-HepTh"]
    else:
        specs = [tridiagonal(1_000_000), stencil_2d(1000), stencil_3d(100),
                 random_band(500_000, 4, 1000), random_band(200_000, 16, 5000)]
        names = ["lp_maros_r7", "bcsstk16", "ex6", "bcsstk33", "s3rmt3m3", "add32", "cit-HepTh",
                 "email-Enron"]
    specs += [real(ctx.data, n) for n in names]
    sec = Section("dia", "(b) DIA vs. CSR SpMV (Fig. 15)",
                  "DIA up to 22% faster than CSR on stencil-like matrices (Lin, synth1); "
                  "significantly slower on matrices with many sparsely filled diagonals (rma10); "
                  "scipy's DIA uses the same algorithm and performs the same.")
    rows, ratio_rows, wins, skipped = [], [], [], []
    for spec in specs:
        m = spec.load()
        ndiag = diagonal_count(m)
        padded = ndiag * max(m.shape)
        print(f"  {spec.name}: {m.shape[0]}x{m.shape[1]}, nnz {m.nnz}, {ndiag} diagonals", flush=True)
        head = [spec.name, "generated" if spec.generated else "real", f"{m.shape[0]}x{m.shape[1]}",
                f"{m.nnz}", f"{ndiag}", f"{padded / m.nnz:.2f}"]
        if padded > ctx.pad_limit:
            skipped.append(f"{spec.name} skipped: its DIA array would hold {padded:.2e} entries, "
                           f"over the limit of {ctx.pad_limit:.0e}.")
            print(f"    {skipped[-1]}")
            rows.append(head + ["skipped (DIA too large)"] * 4)
            ratio_rows.append([spec.name, "-", "-", "-"])
            continue
        x = np.random.default_rng(0).random(m.shape[1])
        verify = close_to(m @ x)
        res = bench_group({
            "csr": spmv_case(m, x, verify, "csr"),
            "dia": spmv_case(m, x, verify, "dia"),
            "scipy csr": (lambda: m @ x, verify),
            "scipy dia": (lambda d=m.todia(): d @ x, verify),
        }, ctx.repeat)
        sec.collect(res.values())
        t_csr, t_dia, s_csr, s_dia = res.values()
        rows.append(head + cells(res.values(), True))
        ratio_rows.append([spec.name, ratio(t_csr, t_dia), ratio(s_csr, s_dia), ratio(s_dia, t_dia)])
        if (c := med(t_csr)) and (d := med(t_dia)):
            wins.append((c / d, spec.name))
    sec.table("SpMV times, ms: median [min-max] (fill = DIA entries / nnz)",
              ["matrix", "kind", "shape", "nnz", "diagonals", "fill", "coiter CSR", "coiter DIA",
               "scipy csr", "scipy dia"], rows)
    sec.table("Ratios (of medians; > 1 means the second-named is faster)",
              ["matrix", "coiter CSR/DIA", "scipy csr/dia", "scipy dia / coiter DIA"], ratio_rows)
    for text in skipped:
        sec.note(text)
    if wins:
        best, worst = max(wins), min(wins)
        sec.note(f"coiter DIA vs. CSR: best {best[0]:.2f}x ({best[1]}), worst {worst[0]:.2f}x ({worst[1]}).")
    return sec


# ----------------------------------------------------------------- (c) vector study

VECTOR_FORMATS = ("dense_vector", "sparse_vector", "hash_vector")


def study_vector(ctx: Context) -> Section:
    """Fig. 16: CSR SpMV with x dense, sparse or hashed over vector x matrix density."""
    n = 5000 if ctx.quick else 20_000
    mat_dens = [1e-3, 1e-2] if ctx.quick else [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
    vec_dens = [1e-3, 1e-2, 1e-1, 1.0] if ctx.quick else [1e-4, 1e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0]
    sec = Section("vector", "(c) CSR SpMV with a dense, sparse or hashed input vector (Fig. 16)",
                  "dense x wins when x is mostly nonzero; a sparse vector when x is very sparse "
                  "and the matrix denser; a hash map when x is large and sparse but denser than "
                  "the matrix (qualitative; the paper prints no cell values).")
    sec.note(f"Random {n}x{n} matrices (CSR, uniformly placed entries) and random vectors; "
             "times are of the SpMV only, x already stored in its format.")
    times: dict[tuple[float, float, str], Result] = {}
    for i, dm in enumerate(mat_dens):
        m = random_matrix(n, dm, seed=10 + i)
        for j, dv in enumerate(vec_dens):
            xd = random_vector(n, dv, seed=100 + j)
            verify = close_to(m @ xd)
            res = bench_group({name: spmv_case(m, xd, verify, "csr", name) for name in VECTOR_FORMATS},
                              ctx.repeat)
            sec.collect(res.values())
            times.update({(dm, dv, name): r for name, r in res.items()})
            print(f"  matrix density {dm:g} (nnz {m.nnz}), vector density {dv:g}: " +
                  ", ".join(f"{n_}={times[dm, dv, n_].ms()}" for n_ in VECTOR_FORMATS), flush=True)
    col = [f"x {dv:g}" for dv in vec_dens]
    for name in VECTOR_FORMATS:
        sec.table(f"x {format_label(name)}: SpMV ms (rows: matrix density, columns: vector density)",
                  ["A density"] + col,
                  [[f"{dm:g}"] + [times[dm, dv, name].ms() for dv in vec_dens] for dm in mat_dens])
    best = best_formats(times, mat_dens, vec_dens)
    sec.table("Best x format per cell (its time relative to the runner-up; fastest = 1/x of it)",
              ["A density"] + col,
              [[f"{dm:g}"] + [best[dm, dv][2] for dv in vec_dens] for dm in mat_dens])
    sec.table("Sparse vs. hash x (the paper's regions compare these two): faster one, and "
              "slower time / faster time",
              ["A density"] + col,
              [[f"{dm:g}"] + [faster_of(times[dm, dv, "sparse_vector"], times[dm, dv, "hash_vector"])
                              for dv in vec_dens] for dm in mat_dens])
    png = plot_vector_heatmap(ctx.out, times, best, mat_dens, vec_dens, n)
    if png:
        sec.body += [f"![best input-vector format]({png.name})", ""]
    regions: dict[str, list[str]] = {}
    for (dm, dv), (fmt, gain, _) in best.items():
        regions.setdefault(format_label(fmt) if fmt else "none", []).append(
            f"(A {dm:g}, x {dv:g}: {gain:.2f}x)")
    sec.note("Best x format: " + "; ".join(
        f"{k} in {len(v)} of {len(best)} cells" + (f" {', '.join(v)}" if 2 * len(v) < len(best) else "")
        for k, v in regions.items()) + " (number: runner-up time / best time).")
    return sec


def faster_of(sparse: Result, hashed: Result) -> str:
    """``sparse 1.23x`` / ``hash 1.23x``: the faster of the two non-dense x formats."""
    if not (isinstance(sparse, Timing) and isinstance(hashed, Timing)):
        return "-"
    if sparse.median <= hashed.median:
        return f"sparse {hashed.median / sparse.median:.2f}x"
    return f"hash {sparse.median / hashed.median:.2f}x"


def best_formats(times: dict[tuple[float, float, str], Result], mat_dens: list[float],
                 vec_dens: list[float]) -> dict[tuple[float, float], tuple[str | None, float, str]]:
    """Per (matrix density, vector density): best format, runner-up/best ratio, label."""
    best = {}
    for dm in mat_dens:
        for dv in vec_dens:
            ranked = sorted((r.median, name) for name in VECTOR_FORMATS
                            if isinstance(r := times[dm, dv, name], Timing))
            if not ranked:
                best[dm, dv] = (None, float("nan"), "-")
            elif len(ranked) == 1:
                best[dm, dv] = (ranked[0][1], float("nan"), format_label(ranked[0][1]))
            else:
                gain = ranked[1][0] / ranked[0][0]
                best[dm, dv] = (ranked[0][1], gain,
                                f"{format_label(ranked[0][1])} ({gain:.2f}x vs {format_label(ranked[1][1])})")
    return best


def plot_vector_heatmap(out: Path, times: dict[tuple[float, float, str], Result],
                        best: dict[tuple[float, float], tuple[str | None, float, str]],
                        mat_dens: list[float], vec_dens: list[float], n: int) -> Path | None:
    """Heat map PNG: best x format per cell, and sparse/hash times relative to dense."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import ListedColormap
    except ImportError as exc:
        print(f"  no heat map: {short_error(exc)}")
        return None
    colours = ["#4c72b0", "#dd8452", "#55a868"]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), constrained_layout=True)
    code = np.full((len(mat_dens), len(vec_dens)), np.nan)
    for (dm, dv), (fmt, gain, _) in best.items():
        i, j = mat_dens.index(dm), vec_dens.index(dv)
        if fmt is not None:
            code[i, j] = VECTOR_FORMATS.index(fmt)
            axes[0].text(j, i, f"{format_label(fmt).split()[0]}\n{gain:.2f}x" if gain == gain
                         else format_label(fmt).split()[0], ha="center", va="center", fontsize=8)
    axes[0].imshow(code, cmap=ListedColormap(colours), vmin=0, vmax=2, origin="lower", aspect="auto")
    axes[0].set_title(f"best x format (n={n}); number: runner-up time / best time", fontsize=9)
    for ax, name in zip(axes[1:], VECTOR_FORMATS[1:]):
        rel = np.full(code.shape, np.nan)
        for i, dm in enumerate(mat_dens):
            for j, dv in enumerate(vec_dens):
                a, d = times[dm, dv, name], times[dm, dv, "dense_vector"]
                if isinstance(a, Timing) and isinstance(d, Timing):
                    rel[i, j] = np.log2(a.median / d.median)
        lim = max(1.0, float(np.nanmax(np.abs(rel)))) if np.isfinite(rel).any() else 1.0
        for (i, j), r in np.ndenumerate(rel):
            if np.isfinite(r):
                ax.text(j, i, f"{2.0 ** r:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if abs(r) > 0.6 * lim else "black")
        img = ax.imshow(rel, cmap="RdBu_r", vmin=-lim, vmax=lim, origin="lower", aspect="auto")
        fig.colorbar(img, ax=ax, label="log2(time / dense time)")
        ax.set_title(f"x {format_label(name)}: time / dense-x time (<1: faster than dense)", fontsize=9)
    for ax in axes:
        ax.set_xticks(range(len(vec_dens)), [f"{d:g}" for d in vec_dens])
        ax.set_yticks(range(len(mat_dens)), [f"{d:g}" for d in mat_dens])
        ax.set_xlabel("vector density")
        ax.set_ylabel("matrix density")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours]
    axes[0].legend(handles, [format_label(f) for f in VECTOR_FORMATS], fontsize=7,
                   loc="upper left", bbox_to_anchor=(0, -0.15), ncol=3)
    out.mkdir(parents=True, exist_ok=True)
    path = out / HEATMAP_NAME
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"  wrote {path}")
    return path


# ------------------------------------------------------------------ (d) SpMV study

COITER_MATRIX_FORMATS = ("coo", "coo_aos", "csr", "dia", "ell", "bcsr")
MATRIX_LABELS = {"coo": "COO", "coo_aos": "COO-AoS", "csr": "CSR", "dia": "DIA", "ell": "ELL",
                 "bcsr": "BCSR"}
PEERS = ("scipy coo", "scipy csr", "scipy dia", "scipy bsr", "MKL csr", "MKL bsr")


def study_spmv(ctx: Context) -> Section:
    """Fig. 10: SpMV in each coiter format vs. scipy.sparse and MKL."""
    if ctx.quick:
        specs = [real(ctx.data, n) for n in ["bcsstk16", "cit-HepTh"]] + [stencil_2d(200), stencil_3d(30)]
    else:
        specs = [real(ctx.data, n) for n in ["bcsstk16", "bcsstk33", "cit-HepTh", "email-Enron",
                                             "USA-road-NY"]] + [stencil_2d(1000), stencil_3d(80)]
    mkl, mkl_note = mkl_dot()
    sec = Section("spmv", "(d) SpMV per format: coiter vs. scipy.sparse and MKL (Fig. 10)",
                  "fmtaco's SpMV is similar to SciPy's, competitive with MKL on the whole, "
                  "and about 21% slower than MKL for DIA; MKL vectorises CSR (helps on some "
                  "matrices, e.g. rma10).")
    sec.note(f"MKL: {mkl_note} via sparse_dot_mkl.dot_product_mkl (a handle is made per call, "
             "no mkl_sparse_optimize). DIA/ELL are run when their padded array has at most "
             f"{ctx.pad_limit:.0e} entries; BCSR/BSR use the largest block in "
             f"{', '.join(f'{a}x{b}' for a, b in BCSR_BLOCKS)} that divides the shape with fill "
             f"<= {BCSR_MAX_FILL}.")
    rows, ratio_rows, csr_scipy, csr_mkl = [], [], [], []
    for spec in specs:
        m = spec.load()
        block, fill, block_note = bcsr_block(m)
        pads = {"dia": dia_padded(m), "ell": ell_padded(m)}
        print(f"  {spec.name}: {m.shape[0]}x{m.shape[1]}, nnz {m.nnz}, DIA fill "
              f"{pads['dia'] / m.nnz:.1f}, ELL fill {pads['ell'] / m.nnz:.1f}, BCSR {block_note}", flush=True)
        x = np.random.default_rng(0).random(m.shape[1])
        verify = close_to(m @ x)
        cases: dict[str, Case | Skipped] = {}
        for name in COITER_MATRIX_FORMATS:
            if name in pads and pads[name] > ctx.pad_limit:
                cases[name] = Skipped(f"skipped: fill {pads[name] / m.nnz:.0f}")
            elif name == "bcsr" and block is None:
                cases[name] = Skipped("skipped: no block")
            else:
                cases[name] = spmv_case(m, x, verify, name, block=block)
        bsr = sp.bsr_array(m, blocksize=block) if block else None
        cases["scipy coo"] = (lambda c=m.tocoo(): c @ x), verify
        cases["scipy csr"] = (lambda: m @ x), verify
        cases["scipy dia"] = ((lambda d=m.todia(): d @ x), verify) if pads["dia"] <= ctx.pad_limit else Skipped("skipped")
        cases["scipy bsr"] = ((lambda: bsr @ x), verify) if block else Skipped("skipped")
        if mkl is None:
            cases["MKL csr"] = cases["MKL bsr"] = Skipped(mkl_note)
        else:
            cases["MKL csr"] = (lambda: mkl(m, x)), verify
            cases["MKL bsr"] = ((lambda: mkl(bsr, x)), verify) if block and block[0] == block[1] else Skipped("skipped")
        res = bench_group(cases, ctx.repeat)
        sec.collect(res.values())
        ours = {name: res[name] for name in COITER_MATRIX_FORMATS}
        peers = {name: res[name] for name in PEERS}
        rows.append([spec.name, f"{m.shape[0]}", f"{m.nnz}", f"{block_note} ({fill:.2f})" if block else "-",
                     *cells(ours.values()), *cells(peers[p] for p in PEERS)])
        ratio_rows.append([spec.name, ratio(peers["scipy coo"], ours["coo"]), ratio(ours["coo_aos"], ours["coo"]),
                           ratio(peers["scipy csr"], ours["csr"]),
                           ratio(peers["MKL csr"], ours["csr"]), ratio(peers["scipy dia"], ours["dia"]),
                           ratio(peers["scipy bsr"], ours["bcsr"]), ratio(peers["MKL bsr"], ours["bcsr"]),
                           best_ratio(ours, peers)])
        if (c := med(ours["csr"])) and (s := med(peers["scipy csr"])):
            csr_scipy.append(s / c)
        if (c := med(ours["csr"])) and (k := med(peers["MKL csr"])):
            csr_mkl.append(k / c)
    sec.table("SpMV times, ms (median); BCSR block (fill) as chosen",
              ["matrix", "rows", "nnz", "BCSR block", *[f"coiter {MATRIX_LABELS[f]}" for f in COITER_MATRIX_FORMATS],
               *PEERS], rows)
    sec.table("Ratios peer time / coiter time (of medians; > 1 means coiter is faster)",
              ["matrix", "scipy coo / COO", "coiter COO-AoS / COO", "scipy csr / CSR", "MKL csr / CSR", "scipy dia / DIA",
               "scipy bsr / BCSR", "MKL bsr / BCSR", "best peer / best coiter"], ratio_rows)
    sec.note(f"CSR: scipy/coiter {speedup_range(csr_scipy)}; MKL/coiter {speedup_range(csr_mkl)}.")
    return sec


def best_ratio(ours: dict[str, Result], peers: dict[str, Result]) -> str:
    """Fastest peer over fastest coiter format, with the winners' names."""
    o = min(((r.median, k) for k, r in ours.items() if isinstance(r, Timing)), default=None)
    p = min(((r.median, k) for k, r in peers.items() if isinstance(r, Timing)), default=None)
    if o is None or p is None:
        return "-"
    return f"{p[0] / o[0]:.2f} ({p[1]} / {MATRIX_LABELS[o[1]]})"


# ----------------------------------------------------------------------------- main

RUNNERS: dict[str, Callable[[Context], Section]] = {
    "coo": study_coo, "dia": study_dia, "vector": study_vector, "spmv": study_spmv,
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", choices=[*STUDIES, "all"], default="all")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory holding matrices/")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timed runs per cell (>= 7; default 15, or 7 with --quick)")
    ap.add_argument("--quick", action="store_true", help="small inputs and few repeats (< 1 minute)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "docs",
                    help="directory for format-studies.md and the heat map PNG")
    args = ap.parse_args(argv)
    repeat = args.repeat if args.repeat is not None else (7 if args.quick else 15)
    if repeat < 7:
        ap.error("--repeat must be at least 7")
    command = "python benchmarks/formats.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    ctx = Context(args.data, repeat, args.quick, args.out, command.strip())
    _, mkl_note = mkl_dot()
    info = machine_info({"MKL": mkl_note})
    print("\n".join(f"{k}: {v}" for k, v in info.items()), flush=True)
    rendered = {}
    for study in STUDIES if args.study == "all" else [args.study]:
        print(f"\n=== study {study} ===", flush=True)
        t0 = time.perf_counter()
        section = RUNNERS[study](ctx)
        rendered[study] = section.render(ctx, info, time.perf_counter() - t0)
    print(f"\nwrote {write_report(args.out, rendered)}")


if __name__ == "__main__":
    main()
