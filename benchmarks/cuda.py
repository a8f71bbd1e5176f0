"""SpMV on a GPU through coiter's CUDA back end, against torch's cuSPARSE and SciPy.

    python benchmarks/cuda.py [--data DIR] [--matrices NAME ...] [--repeat N] [--out DIR]

Needs nvcc, a GPU and torch with CUDA (the GPU machines the project is sometimes lent);
elsewhere it says what is missing and stops.

coiter's CUDA host function takes host arrays: every call copies the operands to the
device, launches, and copies ``y`` back. Its peer for the same work is torch moving the CSR
arrays and ``x`` to the GPU, ``torch.sparse.mv`` and ``y`` back ("host to host"). torch's
product on operands already on the GPU (synchronised) and SciPy's serial ``A @ x`` on the CPU
are shown for context. coiter runs each of the autoscheduler's GPU templates (load-balanced
position splits of 4, 8 or 16 nonzeros per thread) and the warp-per-row schedule of TACO's
GPU tests. Every result is checked against SciPy before its time counts; times are medians
(``bench_group``). Results go to ``<out>/cuda.md`` (default docs/benchmarks). Nothing here
asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import (DEFAULT_DATA, REPO_ROOT, Case, Check, Skipped, bench_group, close_to, machine_info,
                     markdown_table)

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

import coiter
from coiter.concrete.autoschedule import templates
from coiter.runtime.cuda import gpu_available, nvcc_command

MATRICES = ("bcsstk33", "cit-HepPh", "soc-Slashdot0902", "ego-Twitter-undirected", "USA-road-NE")
SPMV = ("y(i) = A(i,j) * x(j)", {"A": "csr"})
# TACO's warp-per-row SpMV: 64 rows per block, 8 warps, lanes share a row (warp shuffles)
WARP_ROW = ("split(i,block,block_row,64),split(block_row,warp_row,warp,8),pos(j,jpos,A(i,j)),"
            "split(jpos,thread_nz,thread,32),reorder(block,warp,warp_row,thread,thread_nz),"
            "parallelize(block,GPUBlock,IgnoreRaces),parallelize(warp,GPUWarp,IgnoreRaces),"
            "parallelize(thread,GPUThread,Temporary)")


def schedules() -> dict[str, str]:
    """Column name -> schedule string of every coiter GPU variant timed."""
    prog = coiter.compile(*SPMV).concrete
    out = {}
    for cand in templates(prog, "cuda"):
        per_thread = str(cand).split("thread_nz,")[1].split(")")[0]
        out[f"coiter LB{per_thread}"] = str(cand)
    out["coiter warp/row"] = WARP_ROW
    return out


def torch_cases(torch: Any, A: sp.csr_array, x: np.ndarray, check: Check) -> dict[str, Case]:
    """torch's SpMV host to host (arrays copied each call) and on resident operands."""
    dev = torch.device("cuda")
    indptr, indices = torch.from_numpy(A.indptr.astype(np.int64)), torch.from_numpy(A.indices.astype(np.int64))
    data, xt = torch.from_numpy(A.data), torch.from_numpy(x)

    def host_to_host() -> np.ndarray:
        M = torch.sparse_csr_tensor(indptr.to(dev), indices.to(dev), data.to(dev), A.shape)
        return torch.mv(M, xt.to(dev)).cpu().numpy()

    M = torch.sparse_csr_tensor(indptr.to(dev), indices.to(dev), data.to(dev), A.shape)
    xd = xt.to(dev)

    def resident() -> Any:
        y = torch.mv(M, xd)
        torch.cuda.synchronize()
        return y

    return {"torch host-to-host": (host_to_host, check),
            "torch on GPU": (resident, lambda y: check(y.cpu().numpy()))}


def run_matrix(name: str, data: Path, kernels: dict[str, coiter.Kernel], torch: Any, repeat: int) -> dict:
    """Every system's SpMV time on one matrix, each result checked against SciPy first."""
    A = sp.csr_array(coiter.read(data / f"{name}.mtx.gz").to_scipy())
    A.sum_duplicates()
    x = np.random.default_rng(0).random(A.shape[1])
    check = close_to(A @ x)
    At = coiter.Tensor.from_scipy(A)
    cases: dict[str, Case] = {"scipy (CPU, 1 thread)": (lambda: A @ x, check)}
    for col, k in kernels.items():
        cases[col] = (lambda k=k: k(A=At, x=x), check)
    cases.update(torch_cases(torch, A, x, check))
    return {"name": name, "shape": A.shape, "nnz": A.nnz, "times": bench_group(cases, repeat=repeat)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA / "matrices")
    parser.add_argument("--matrices", nargs="*", default=list(MATRICES))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks")
    args = parser.parse_args(argv)
    available, why = gpu_available()
    if nvcc_command() is None or not available:
        print(f"benchmarks/cuda.py needs nvcc and a GPU: {why if nvcc_command() else 'nvcc not found'}")
        return 1
    try:
        import torch
    except ImportError:
        print("benchmarks/cuda.py needs torch (with CUDA) for its peer")
        return 1
    kernels = {col: coiter.compile(*SPMV, schedule=s, target="cuda") for col, s in schedules().items()}
    rows = []
    for name in args.matrices:
        r = run_matrix(name, args.data, kernels, torch, args.repeat)
        print(f"{name}: " + ", ".join(f"{c} {t.ms()}" for c, t in r["times"].items()), flush=True)
        rows.append(r)
    columns = list(rows[0]["times"])
    table = markdown_table(["matrix", "rows x cols", "nnz", *columns],
                           [[r["name"], "x".join(map(str, r["shape"])), r["nnz"],
                             *(r["times"][c].ms() for c in columns)] for r in rows])
    skipped = [f"- {r['name']}, {c}: {t.detail}" for r in rows for c, t in r["times"].items()
               if isinstance(t, Skipped) and t.detail]
    info = machine_info({"GPU": why, "torch": f"{torch.__version__}, {torch.cuda.get_device_name()}",
                         "nvcc": nvcc_command()[0]})
    text = "\n".join([
        "# SpMV on a GPU (coiter CUDA back end)", "",
        f"`python benchmarks/cuda.py {shlex.join(argv or sys.argv[1:])}`", "",
        *(f"- {k}: {v}" for k, v in info.items()), "",
        "Median ms per call. coiter's columns and torch host-to-host each copy A and x to the GPU "
        "and y back on every call; torch on GPU is the product alone on resident operands.", "",
        table, "", *skipped])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cuda.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
