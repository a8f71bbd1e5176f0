"""coiter.dask (issue 13): SpMV, SpMM and SpGEMM on a LocalCluster of 1 and 2 workers, against
dask.array with scipy.sparse and with pydata/sparse chunks; and the workers' peak memory.

    python benchmarks/dask.py [--repeat N] [--scale S] [--out DIR]

Inputs are generated on the workers by ``coiter.dask.random`` (uniform random CSR row blocks,
more than 10 million entries at ``--scale 1``); the peers get the very same blocks converted to
``scipy.sparse.csr_matrix`` and ``sparse.COO`` chunks, all persisted before timing, so every
library runs on one partitioning and pays for nothing but its kernel and Dask's scheduling.
Each library runs on a cluster of its own (so that no library's memory churn slows another's
runs in the same worker processes). Dense operands (``x``, ``B``) are one block replicated on
every worker, where they stay: the script stops Dask's Active Memory Manager, whose default
policy (ReduceReplicas) drops such replicas within seconds, after which every run sent ``B``
to the second worker again. Dask's periodic monitors run less often (``QUIET``): on a small
machine they take time from the workers' computing threads. A timed run persists the result
on the workers and waits for it (nothing is gathered); its keys are released before the next
run. Each case is checked once against SciPy on the whole matrix, then run twice untimed,
then ``--repeat`` times, round-robin over the kernels; medians are reported. Each worker is
one process with one thread (``threads_per_worker=1``, OMP_NUM_THREADS=1).

The memory table starts a fresh 2-worker cluster per row and reports the peak resident set
(Linux's VmHWM, reset when the cluster is up) of its workers while they make two random
matrices and add them sparsely, once with the entries growing at one shape and once with the
columns growing at one number of entries.
Nothing here asserts a time.
"""
from __future__ import annotations

import sys

# This file's folder comes first on sys.path and its name would shadow the dask package:
# look there last, after site-packages (_common and suite are only found there).
_HERE = sys.path.pop(0)
sys.path.append(_HERE)

# _common first: it pins every threading runtime to one thread before NumPy loads (the
# workers inherit the environment)
from _common import (  # noqa: E402
    REPO_ROOT, Result, Skipped, Timing, machine_info, markdown_table, ratio, write_report,
)

import argparse  # noqa: E402
import os  # noqa: E402
import shlex  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from statistics import median  # noqa: E402
from typing import Any, Callable  # noqa: E402

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import sparse  # noqa: E402
from distributed import Client, LocalCluster, wait  # noqa: E402

import coiter.dask as cd  # noqa: E402

PEERS = ("coiter", "scipy.sparse", "pydata/sparse")
# Dask's periodic work in every process (scheduler, nannies, workers): the event-loop tick
# (20 ms by default), the system and memory monitors (0.5 s, 0.1 s) and the profiler (10 ms).
# With 2 cores these share the cores with the two computing threads; less often, 2-worker
# runs took 3-9% less time (docs/performance.md, "coiter.dask on two workers").
QUIET = {
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.worker.profile.enabled": False,
}
BLOCKS = 8
# pydata/sparse's SpGEMM (sparse.tensordot of COO chunks) takes over a minute per block of a
# million entries: past this many entries per block it is timed once, on one block
PYDATA_SPGEMM_BLOCK_LIMIT = 200_000


def _to_scipy(block: Any) -> sp.csr_matrix:
    # spmatrix, not sparray: dask's tensordot of scipy chunks multiplies them with `*`
    return sp.csr_matrix(block.to_scipy())


def _to_pydata(block: Any) -> sparse.COO:
    return sparse.COO.from_scipy_sparse(block.to_scipy())


def _as_library(A: da.Array, library: str) -> da.Array:
    """``A``'s coiter blocks as ``library``'s chunks."""
    if library == "scipy.sparse":
        return A.map_blocks(_to_scipy, meta=sp.csr_matrix((0, 0)))
    if library == "pydata/sparse":
        return A.map_blocks(_to_pydata, meta=sparse.COO.from_numpy(np.zeros((0, 0))))
    return A


def _scheduler_tasks(client: Client) -> int:
    return client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))


def _timed_runs(client: Client, builders: dict[str, Callable[[], da.Array]], repeat: int,
                ) -> dict[str, Timing]:
    """Persist each builder's result and wait for it, ``repeat`` times round-robin after two
    untimed runs; the result's keys are gone from the scheduler before the next run starts
    (otherwise Dask would hand back the held result)."""
    baseline = _scheduler_tasks(client)
    times: dict[str, list[float]] = {name: [] for name in builders}
    for run in range(repeat + 2):
        for name, build in builders.items():
            expr = build()
            t0 = time.perf_counter()
            result = expr.persist()
            wait(result)
            elapsed = time.perf_counter() - t0
            del result
            while _scheduler_tasks(client) > baseline:
                time.sleep(0.01)
            if run >= 2:
                times[name].append(elapsed)
    return {name: Timing(median(ts), min(ts), max(ts), len(ts)) for name, ts in times.items()}


def _check(name: str, got: Any, ref: Any) -> None:
    """Raise unless ``got`` (gathered result) matches the SciPy reference ``ref``."""
    if sp.issparse(ref):
        got = got.to_scipy() if hasattr(got, "to_scipy") else got
        got = got.to_scipy_sparse() if hasattr(got, "to_scipy_sparse") else got
        diff = abs(sp.csr_array(got) - ref).max() if ref.nnz else 0.0
        scale = abs(ref).max() if ref.nnz else 1.0
        ok = got.shape == ref.shape and diff <= 1e-9 * max(scale, 1.0)
    else:
        got = got.todense() if hasattr(got, "todense") else np.asarray(got)
        ok = np.allclose(got, ref, rtol=1e-9, atol=1e-9 * max(np.abs(ref).max(), 1.0))
    if not ok:
        raise AssertionError(f"{name}: the result differs from SciPy's")


def _kernels(client: Client, library: str, m: int, n: int, entries: int, spmm_cols: int,
             repeat: int, refs: dict[str, Any]) -> dict[str, Result]:
    """``library``'s time per kernel on the cluster ``client`` is connected to. The inputs
    (the same at every call: fixed seeds) are made there; ``refs`` gets SciPy's results on
    them the first time."""
    chunks = (-(-m // BLOCKS), -1)
    A = cd.random((m, n), entries / m / n, chunks=chunks, seed=1).persist()
    # SpGEMM's right operand: about one entry per row, so the product stays near A's size
    S = cd.random((n, n), 1 / n, chunks=(n, n), seed=2).persist()
    rng = da.random.default_rng(3)  # dense operands made on a worker too, not sent in the graph
    x = rng.random(n, chunks=-1).persist()
    B = rng.random((n, spmm_cols), chunks=-1).persist()
    wait([A, S, x, B])
    if not refs:
        A_ref, S_ref, x_ref, B_ref = A.compute().to_scipy(), S.compute().to_scipy(), x.compute(), B.compute()
        refs.update(SpMV=A_ref @ x_ref, SpMM=A_ref @ B_ref, SpGEMM=sp.csr_array(A_ref @ S_ref))
    if library == "coiter":
        builders = {"SpMV": lambda: cd.spmv(A, x), "SpMM": lambda: cd.spmm(A, B),
                    "SpGEMM": lambda: cd.spgemm(A, S)}
        _replicate(client, [x, B, S])
    else:
        A, S = _as_library(A, library).persist(), _as_library(S, library).persist()
        # dask's tensordot of scipy.sparse chunks takes matrices only: x as a column
        x_column = x[:, None].persist()
        wait([A, S, x_column])
        _replicate(client, [x_column, B, S])
        builders = {"SpMV": lambda: da.tensordot(A, x_column, axes=1)[:, 0],
                    "SpMM": lambda: da.tensordot(A, B, axes=1),
                    "SpGEMM": lambda: da.tensordot(A, S, axes=1)}
    out: dict[str, Result] = {}
    if library == "pydata/sparse" and entries / BLOCKS > PYDATA_SPGEMM_BLOCK_LIMIT:
        out["SpGEMM"] = _one_block(A, S, refs["SpGEMM"])
        del builders["SpGEMM"]
    for kernel, build in builders.items():
        _check(f"{kernel} {library}", build().compute(), refs[kernel])
    out.update(_timed_runs(client, builders, repeat))
    print(library, {k: v.ms() for k, v in out.items()}, flush=True)
    return out


def _replicate(client: Client, arrays: list[da.Array]) -> None:
    """A copy of each (persisted) array on every worker, kept: the Active Memory Manager,
    on by default, would drop all copies but one within seconds (its ReduceReplicas policy)."""
    client.amm.stop()
    client.replicate(arrays)


def _one_block(A: da.Array, B: da.Array, ref: sp.csr_array) -> Skipped:
    """A table cell for a product too slow to repeat: the seconds of its first block's, once
    (checked against the rows of ``ref`` it computes)."""
    t0 = time.perf_counter()
    block = da.tensordot(A.blocks[0], B, axes=1).compute()
    seconds = time.perf_counter() - t0
    _check("SpGEMM pydata/sparse, first block", block, sp.csr_array(ref[:block.shape[0]]))
    return Skipped(f"not repeated: its first block alone took {seconds:.0f} s")


def _cluster(workers: int, **kwargs: Any) -> LocalCluster:
    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                        dashboard_address=":0", **kwargs)


def _memory_mib(reset: bool = False) -> tuple[int, int]:
    """This process's resident set and its peak since the last reset, in MiB (Linux's
    VmRSS and VmHWM); ``reset`` first sets the peak to the present size."""
    if reset:
        Path("/proc/self/clear_refs").write_text("5")
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) // 1024, int(status["VmHWM"].split()[0]) // 1024


def _peak_memory(shape: tuple[int, int], entries: int) -> tuple[int, int, int]:
    """The resident set of the larger of two fresh workers at the start, and the peak of
    either while they make two random ``shape`` matrices of about ``entries`` entries each
    and add them (MiB); and the entries of one result block."""
    with _cluster(2, memory_limit=0) as cluster, Client(cluster) as client:
        before = max(rss for rss, _ in client.run(_memory_mib, True).values())
        chunks = (-(-shape[0] // BLOCKS), -1)
        density = entries / shape[0] / shape[1]
        A = cd.random(shape, density, chunks=chunks, seed=1)
        B = cd.random(shape, density, chunks=chunks, seed=2)
        total = cd.add(A, B).persist()
        wait(total)
        peak = max(hwm for _, hwm in client.run(_memory_mib).values())
        block_entries = total.blocks[0].compute().nnz
        del total
    return before, peak, block_entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies the shape and the entries (1: 4M x 1M, 24M entries)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks")
    args = parser.parse_args(argv)
    dask.config.set(QUIET)  # before the clusters start: their processes take it from here
    m, n, entries = int(4_000_000 * args.scale), int(1_000_000 * args.scale), int(24_000_000 * args.scale)
    spmm_cols = 8

    times: dict[int, dict[str, dict[str, Result]]] = {1: {}, 2: {}}
    refs: dict[str, Any] = {}
    for workers in (1, 2):
        for library in PEERS:
            print(f"{workers} worker(s), {library}", flush=True)
            with _cluster(workers) as cluster, Client(cluster) as client:
                for kernel, t in _kernels(client, library, m, n, entries, spmm_cols, args.repeat,
                                          refs).items():
                    times[workers].setdefault(kernel, {})[library] = t
    rows = []
    for kernel in ("SpMV", "SpMM", "SpGEMM"):
        one, two = times[1][kernel], times[2][kernel]
        for name in PEERS:
            rows.append([kernel, name, one[name].ms_range(), two[name].ms_range(),
                         ratio(one[name], two[name]), ratio(one[name], one["coiter"]),
                         ratio(two[name], two["coiter"])])

    memory = []
    grow = [((n, n), entries // 16), ((n, n), entries // 8), ((n, n), entries // 4),
            ((n, 10**9), entries // 8), ((n, 10**12), entries // 8)]
    for shape, count in grow:
        before, after, block = _peak_memory(shape, count)
        memory.append([f"{shape[0]:,} x {shape[1]:,}", f"{count:,}", f"{block:,}", before, after,
                       after - before])
        print(memory[-1], flush=True)

    command = "python benchmarks/dask.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    text = [
        "# coiter.dask: distributed SpMV, SpMM and SpGEMM", "",
        f"`{command.strip()}`", "",
        f"`A`: {m:,} x {n:,}, about {entries:,} uniformly random entries in {BLOCKS} row blocks of CSR "
        f"(made on the workers by `coiter.dask.random`). SpMV `A @ x`; SpMM `A @ B` with `B` dense "
        f"{n:,} x {spmm_cols}; SpGEMM `A @ S` with `S` sparse, about one entry per row, one block. "
        "The peers run `dask.array.tensordot` on the same blocks as `scipy.sparse.csr_matrix` and "
        "`sparse.COO` chunks. Each library on a LocalCluster of its own with `threads_per_worker=1`; "
        "dense operands replicated on every worker (Active Memory Manager stopped) and Dask's "
        "monitors less often (`" + ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in QUIET.items()) + "`); "
        "a run persists the result on the workers and waits for it. Times in ms, median [min-max]; every result checked "
        "against SciPy on the whole matrix first. "
        f"With {os.cpu_count()} cores, the scheduler, the nannies and this client share the cores "
        "with the workers.", "",
        markdown_table(["kernel", "library", "1 worker ms", "2 workers ms", "1 -> 2 workers",
                        "time / coiter's, 1 worker", "time / coiter's, 2 workers"], rows), "",
        "## Peak memory per worker", "",
        "A fresh 2-worker cluster per row computes `coiter.dask.add(A, B)` of two random matrices "
        f"in {BLOCKS} row blocks (made on the workers) and keeps the result: the resident set of "
        "the larger worker once the cluster is up, and the peak of either worker during the job "
        "(VmHWM, reset at the start), in MiB. The first three rows grow the entries at one shape; "
        "the last two keep the second row's entries and grow the columns to 10^9 and 10^12 "
        "(past 2^31 columns the column indices take 8 bytes instead of 4).", "",
        markdown_table(["shape", "entries of each operand", "entries in one result block",
                        "MiB at start", "peak MiB", "growth"], memory), "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in machine_info(
            {"dask / distributed": f"{dask.__version__}", "sparse": sparse.__version__}).items()), "",
    ]
    write_report(args.out, "dask.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
