"""Sparse workspace studies of Zhang, Hsu & Kjolstad, "Compilation of modular and general
sparse workspaces" (PLDI 2024, §7).

    python benchmarks/workspaces.py [--study outer|tensor|policy|threads|all] [--data DIR]
                                    [--repeat N] [--quick] [--out DIR]

Studies (the paper's figure in brackets):

* ``outer``  [Figs. 16-18] outer-product SpGEMM ``X = B C``, B in CSC, C in CSR, X in CSR:
  B is a real matrix and C its transpose with the columns shifted by one (the paper's
  inputs), then generated matrices with a growing number of nonzero columns. Time and
  peak memory of the dense workspace (a dense result, converted) and of every sparse
  policy.
* ``tensor`` [Fig. 19] SpTTM ``A(i,j,l) = B(k,i,j) C(k,l)`` and SpMTTKRP
  ``A(i,j) = B(k,l,i) C(k,j) D(l,j)`` with sparse results on FROSTT tensors, the matrices
  10% dense: dense against sparse workspaces.
* ``policy`` [Table 3] SpMTTKRP over the rank J with 1%-dense matrices, per policy.
* ``threads`` (beyond the paper, whose code is serial) the outer-product SpGEMM of
  ``outer`` on 1 and 2 threads: each thread scatters a block of k into its own workspace.

Every table also runs ``workspace="auto"`` and reports it against the best hand-chosen
workspace of its row. Times are single-threaded medians of ``--repeat`` runs after
warm-up, each result first checked against SciPy/NumPy; peak memory is the growth of the
peak resident set of a forked process over one call (``/proc/self/clear_refs``). A dense
workspace above the memory cap (``--cap``, 4 GiB) is not run: its cell says how much it
would need. Results go to ``<out>/workspace-studies.md``. Nothing here asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import (
    DEFAULT_DATA, REPO_ROOT, Result, Skipped, Timing, bench_group, close_to, machine_info,
    markdown_table,
)

import argparse
import math
import multiprocessing
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

import coiter

POLICIES = ("dense", "coord", "bucket", "hash")
CAP = 4 << 30
REPORT_NAME = "workspace-studies.md"


@dataclass(frozen=True)
class Problem:
    """One kernel on one input: how to compile it (per workspace) and call it."""

    label: str
    expr: str
    formats: dict[str, Any]
    operands: dict[str, Any]
    reference: np.ndarray | sp.sparray
    dense_bytes: int

    def kernel(self, workspace: str, cap: int) -> coiter.Kernel:
        return coiter.compile(self.expr, formats=self.formats, workspace=workspace, workspace_memory=cap)


def _peak_growth(fn: Callable[[], Any]) -> float:
    """MiB the peak resident set grows by while ``fn`` runs, in a forked process."""
    def child(conn: Any) -> None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak resident set restarts from the current one
        before = _status("VmRSS")
        fn()
        conn.send((_status("VmHWM") - before) / 1024)

    ctx = multiprocessing.get_context("fork")
    parent, child_end = ctx.Pipe()
    proc = ctx.Process(target=child, args=(child_end,))
    proc.start()
    growth = parent.recv() if parent.poll(600) else float("nan")
    proc.join()
    return growth


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _check(ref: Any) -> Callable[[Any], None]:
    """Checker of a result against ``ref``; sparse references stay sparse (a dense copy of
    cit-HepTh's product would take 6 GB)."""
    if not sp.issparse(ref):
        near = close_to(np.asarray(ref), rtol=1e-9)
        return lambda out: near(out.to_numpy())
    scale = max(float(abs(ref).max()), 1.0) if ref.nnz else 1.0

    def verify(out: Any) -> None:
        err = abs(sp.csr_array(out.to_scipy()) - ref).max() if ref.nnz else 0.0
        assert err <= 1e-9 * scale, f"largest difference {err} (values up to {scale})"

    return verify


def measure(problem: Problem, repeat: int, cap: int) -> dict[str, tuple[Result, float]]:
    """Time and peak memory of ``problem`` per workspace (and "auto")."""
    cases: dict[str, Any] = {}
    kernels = {}
    for ws in (*POLICIES, "auto"):
        if ws == "dense" and problem.dense_bytes > cap:
            cases[ws] = Skipped(f"over cap ({problem.dense_bytes / 2**30:.1f} GiB)")
            continue
        k = kernels[ws] = problem.kernel(ws, cap)
        cases[ws] = (lambda k=k: k(**problem.operands), _check(problem.reference))
    times = bench_group(cases, repeat, warmup=1)
    out = {}
    for ws, t in times.items():
        mem = _peak_growth(lambda k=kernels[ws]: k(**problem.operands)) if isinstance(t, Timing) else math.nan
        out[ws] = (t, mem)
    return out


def _shifted_transpose(a: sp.csr_array) -> sp.csr_array:
    """``a^T`` with its columns shifted by one (cyclically), as the paper's SpGEMM inputs."""
    t = sp.coo_array(a.T)
    return sp.csr_array((t.data, (t.row, (t.col + 1) % t.shape[1])), shape=t.shape)


def outer_problem(label: str, b: sp.sparray, c: sp.sparray) -> Problem:
    ref = sp.csr_array(b @ c)
    return Problem(label, "X(i,j) = B(i,k) * C(k,j)", {"X": "csr", "B": "csc", "C": "csr"},
                   {"B": sp.csc_array(b), "C": sp.csr_array(c)}, ref, b.shape[0] * c.shape[1] * 8)


def generated_outer(columns: int, per_column: int = 100, n: int = 10_000) -> Problem:
    """B (n x n) with ``columns`` nonzero columns of ``per_column`` entries, C = B^T shifted."""
    rng = np.random.default_rng(columns)
    cols = rng.choice(n, columns, replace=False)
    rows = np.concatenate([rng.choice(n, per_column, replace=False) for _ in cols])
    b = sp.csc_array((rng.random(rows.size), (rows, np.repeat(cols, per_column))), shape=(n, n))
    return outer_problem(f"generated, {columns} columns x {per_column}", b, _shifted_transpose(sp.csr_array(b)))


def sparse_factor(rng: np.random.Generator, rows: int, cols: int, density: float) -> sp.csr_array:
    return sp.random_array((rows, cols), density=density, format="csr", random_state=rng)


def ttm_problem(name: str, t: coiter.Tensor, rank: int, density: float) -> Problem:
    rng = np.random.default_rng(1)
    c = sparse_factor(rng, t.shape[0], rank, density)
    shape = (t.shape[1], t.shape[2], rank)
    (k, i, j), vals = t.storage.to_coords()
    unfolded = sp.csr_array((vals, (k, i * shape[1] + j)), shape=(t.shape[0], shape[0] * shape[1]))
    ref = (unfolded.T @ c).toarray().reshape(shape)
    return Problem(f"SpTTM {name}, L={rank}", "A(i,j,l) = B(k,i,j) * C(k,l)",
                   {"A": "csf", "B": "csf", "C": "csr"}, {"B": t.asformat("csf"), "C": c},
                   ref, math.prod(shape) * 8)


def mttkrp_problem(name: str, t: coiter.Tensor, rank: int, density: float) -> Problem:
    rng = np.random.default_rng(2)
    c, d = sparse_factor(rng, t.shape[0], rank, density), sparse_factor(rng, t.shape[1], rank, density)
    coords, vals = t.storage.to_coords()
    ref = np.zeros((t.shape[2], rank))
    cd, dd = c.toarray(), d.toarray()
    np.add.at(ref, coords[2], vals[:, None] * cd[coords[0]] * dd[coords[1]])
    return Problem(f"SpMTTKRP {name}, J={rank}", "A(i,j) = B(k,l,i) * C(k,j) * D(l,j)",
                   {"A": "csr", "B": "csf", "C": "csr", "D": "csr"},
                   {"B": t.asformat("csf"), "C": c, "D": d}, ref, t.shape[2] * rank * 8)


# -------------------------------------------------------------------------- reporting

def _cell(r: tuple[Result, float]) -> str:
    t, mem = r
    return t.ms() if not isinstance(t, Timing) else f"{t.ms()} ({mem:.0f} MiB)"


def _auto_ratio(row: dict[str, tuple[Result, float]]) -> float | None:
    hand = [t.median for ws, (t, _) in row.items() if ws != "auto" and isinstance(t, Timing)]
    auto = row["auto"][0]
    return auto.median / min(hand) if hand and isinstance(auto, Timing) else None


def render(title: str, rows: list[tuple[str, dict]], note: str) -> str:
    headers = ["input", *POLICIES, "auto", "auto / best"]
    table = []
    ratios = []
    for label, row in rows:
        r = _auto_ratio(row)
        ratios.append(r)
        table.append([label, *(_cell(row[ws]) for ws in (*POLICIES, "auto")),
                      f"{r:.2f}" if r is not None else "-"])
    ok = [r for r in ratios if r is not None]
    within = sum(r <= 1.1 for r in ok)
    summary = (f"automatic choice within 1.1x of the best hand-chosen workspace on {within} of "
               f"{len(ok)} inputs" if ok else "")
    return f"### {title}\n\n{note}\n\n{markdown_table(headers, table)}\n\n{summary}\n"


def study_outer(args: argparse.Namespace) -> str:
    names = ["bcsstk16", "cit-HepTh"] if args.quick else \
        ["bcsstk16", "add32", "ex6", "lp_dfl001", "s3rmt3m3", "bcsstk33", "lp_fit2p", "cit-HepTh"]
    columns = [20, 80] if args.quick else [20, 80, 320, 1280]
    rows = []
    for name in names:
        a = sp.csr_array(coiter.read(args.data / "matrices" / f"{name}.mtx.gz").to_scipy())
        p = outer_problem(name, a, _shifted_transpose(a))
        print(f"  {p.label}: {a.shape}, nnz {a.nnz}", flush=True)
        rows.append((f"{name} ({a.shape[0]}x{a.shape[1]}, {a.nnz} nnz)", measure(p, args.repeat, args.cap)))
    for c in columns:
        p = generated_outer(c)
        print(f"  {p.label}", flush=True)
        rows.append((p.label, measure(p, args.repeat, args.cap)))
    return render("Outer-product SpGEMM, CSC x CSR -> CSR (Figs. 16-18)", rows,
                  "Cells: median ms (peak memory growth of the call). The paper: sparse up to "
                  "27.12x faster than dense, dense up to 7.58x faster; memory 3.6x smaller in "
                  "geomean; dense out of memory on 10 of 60 matrices.")


def _tensor(args: argparse.Namespace, name: str) -> coiter.Tensor:
    return coiter.read(args.data / "tensors" / f"{name}.tns.gz")


def study_tensor(args: argparse.Namespace) -> str:
    names = ["collegemsg-day"] if args.quick else ["collegemsg-day", "wn18rr", "fb15k-237"]
    rows = []
    for name in names:
        t = _tensor(args, name)
        for p in (ttm_problem(name, t, 16, 0.1), mttkrp_problem(name, t, 16, 0.1)):
            print(f"  {p.label}: {t.shape}, nnz {t.nnz}", flush=True)
            rows.append((p.label, measure(p, args.repeat, args.cap)))
    return render("SpTTM and SpMTTKRP with sparse results (Fig. 19)", rows,
                  "Cells: median ms (peak memory growth of the call); matrices 10% dense.")


def study_policy(args: argparse.Namespace) -> str:
    name = "collegemsg-day" if args.quick else "fb15k-237"
    t = _tensor(args, name)
    ranks = [4, 64] if args.quick else [4, 16, 64, 256, 1024]
    rows = []
    for j in ranks:
        p = mttkrp_problem(name, t, j, 0.01)
        print(f"  {p.label}", flush=True)
        rows.append((f"J={j}", measure(p, args.repeat, args.cap)))
    return render(f"SpMTTKRP policies by rank on {name}, matrices 1% dense (Table 3)", rows,
                  "The paper (nips3): coord best for J <= 16, hash for 32-512, bucket from 1024.")


def study_threads(args: argparse.Namespace) -> str:
    names = ["bcsstk16", "cit-HepTh"] if args.quick else ["bcsstk16", "ex6", "s3rmt3m3", "bcsstk33", "cit-HepTh"]
    table = []
    for name in names:
        a = sp.csr_array(coiter.read(args.data / "matrices" / f"{name}.mtx.gz").to_scipy())
        p = outer_problem(name, a, _shifted_transpose(a))
        print(f"  {p.label}: {a.shape}, nnz {a.nnz}", flush=True)
        for ws in ("bucket", "hash"):
            k = p.kernel(ws, args.cap)
            cases = {t: (lambda k=k, t=t: k(**p.operands, threads=t), _check(p.reference)) for t in (1, 2)}
            one, two = bench_group(cases, args.repeat, warmup=1).values()
            speedup = f"{one.median / two.median:.2f}" if isinstance(one, Timing) and isinstance(two, Timing) else "-"
            table.append([name, ws, one.ms(), two.ms(), speedup])
    return ("### Outer-product SpGEMM on threads\n\nThe inputs of the outer study, B CSC x C CSR "
            "-> CSR; median ms at 1 and 2 threads (each thread scatters a block of k, balanced by "
            "products, into its own workspace; the parts are merged after).\n\n"
            + markdown_table(["matrix", "policy", "1 thread", "2 threads", "speedup"], table) + "\n")


STUDIES: dict[str, Callable[[argparse.Namespace], str]] = {
    "outer": study_outer, "tensor": study_tensor, "policy": study_policy, "threads": study_threads,
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", choices=[*STUDIES, "all"], default="all")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory holding matrices/ and tensors/")
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per cell (default 5, or 3 with --quick)")
    ap.add_argument("--quick", action="store_true", help="small inputs and few repeats")
    ap.add_argument("--cap", type=int, default=CAP, help="memory cap of dense workspaces, bytes")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "docs", help="directory for workspace-studies.md")
    args = ap.parse_args(argv)
    args.repeat = args.repeat or (3 if args.quick else 5)
    command = "python benchmarks/workspaces.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    info = machine_info()
    sections = []
    for study in STUDIES if args.study == "all" else [args.study]:
        print(f"\n=== study {study} ===", flush=True)
        t0 = time.perf_counter()
        sections.append(STUDIES[study](args) + f"\n({time.perf_counter() - t0:.0f} s)\n")
    machine = "\n".join(f"- {k}: {v}" for k, v in info.items())
    text = (f"# Sparse workspace studies\n\nMade by `{command.strip()}`.\n\n{machine}\n\n"
            + "\n".join(sections))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / REPORT_NAME
    path.write_text(text)
    print(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
