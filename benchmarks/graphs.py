"""Graph algorithms as repeated semiring products (issue 11): single-source shortest paths
(Bellman-Ford, min-plus) and breadth-first levels (or-and) on road networks.

    python benchmarks/graphs.py [--graphs NAME ...] [--repeat N] [--out DIR]

Each algorithm runs to its fixpoint with one kernel per step, the same steps in coiter
and in python-graphblas (SuiteSparse:GraphBLAS's min_plus and lor_land semirings, whose
``mxv`` takes the same work), one thread each; SciPy's ``scipy.sparse.csgraph`` (Dijkstra,
breadth-first order: other algorithms, serial) gives the reference every result is
checked against before its time counts, and its time as a third column.

* SSSP: ``d(i) = min(d(i), min(j, W(i,j) + d(j)))`` with ``W(i,j)`` the length of edge
  j -> i, stored CSR with absent entries ``inf`` (coiter's fill value), until ``d`` stops
  changing.
* BFS: ``f(i) = any(j, A(i,j) && f(j)) && !v(i)``, the next frontier from the current one,
  until it is empty; the level of a vertex is the step that reached it.

Times are medians of ``--repeat`` whole runs (every step) after a warm-up run. Results go to
``<out>/graphs.md``. Nothing here asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import (
    DEFAULT_DATA, REPO_ROOT, Skipped, bench_group, command_line, machine_info, markdown_table, ratio,
    write_report,
)

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

import coiter

GRAPHS = ("USA-road-NY", "USA-road-BAY")
SOURCE = 0


def _load(name: str, data: Path) -> sp.csr_array:
    """The graph's weighted adjacency matrix (A(i,j): the edge i -> j), duplicates dropped."""
    g = sp.csr_array(coiter.read(data / "matrices" / f"{name}.mtx.gz").to_scipy())
    g.sum_duplicates()
    g.data = np.abs(g.data) + 1.0  # positive lengths (road lengths; 1 where a file has 0)
    return g


def coiter_sssp(g: sp.csr_array) -> Callable[[], np.ndarray]:
    W = coiter.Tensor.from_scipy(sp.csr_array(g.T), fill_value=np.inf)
    relax = coiter.compile("e(i) = min(d(i), min(j, W(i,j) + d(j)))", formats={"W": "csr"},
                           fill_values={"W": np.inf})

    def run() -> np.ndarray:
        d = np.full(g.shape[0], np.inf)
        d[SOURCE] = 0.0
        while True:
            nxt = relax(W=W, d=d, threads=1).to_numpy()
            if np.array_equal(nxt, d):
                return d
            d = nxt
    return run


def coiter_bfs(g: sp.csr_array) -> Callable[[], np.ndarray]:
    A = coiter.Tensor.from_scipy(sp.csr_array(g.T != 0))
    step = coiter.compile("f(i) = any(j, A(i,j) && x(j)) && !v(i)", formats={"A": "csr"})

    def run() -> np.ndarray:
        n = g.shape[0]
        level, frontier, depth = np.full(n, -1), np.zeros(n, dtype=bool), 0
        frontier[SOURCE] = True
        while frontier.any():
            level[frontier] = depth
            frontier = step(A=A, x=frontier, v=level >= 0, threads=1).to_numpy()
            depth += 1
        return level
    return run


def graphblas_sssp(g: sp.csr_array) -> Callable[[], np.ndarray]:
    import graphblas as gb

    gb.ss.config["nthreads"] = 1
    W = gb.io.from_scipy_sparse(sp.csr_array(g.T))
    n = g.shape[0]

    def run() -> np.ndarray:
        d = gb.Vector(float, n)
        d[SOURCE] << 0.0
        while True:
            nxt = d.ewise_add(W.mxv(d, gb.semiring.min_plus).new(), gb.binary.min).new()
            if nxt.isequal(d):
                out = np.full(n, np.inf)
                idx, vals = d.to_coo()
                out[idx] = vals
                return out
            d = nxt
    return run


def _graphblas_bfs(g: sp.csr_array, push: bool) -> Callable[[], np.ndarray]:
    import graphblas as gb

    gb.ss.config["nthreads"] = 1
    n = g.shape[0]
    # pull: A(i,j) = edge j -> i, next(i) = OR_j A(i,j) AND f(j) over every row (the steps
    # coiter's expression takes); push: the sparse frontier times A(i,j) = edge i -> j,
    # SuiteSparse's saxpy over the frontier's edges alone
    A = gb.io.from_scipy_sparse(sp.csr_array((g if push else g.T) != 0))

    def run() -> np.ndarray:
        level = gb.Vector(int, n)
        frontier = gb.Vector(bool, n)
        frontier[SOURCE] << True
        depth = 0
        while frontier.nvals:
            level(mask=frontier.S) << depth
            nxt = frontier.vxm(A, gb.semiring.lor_land) if push else A.mxv(frontier, gb.semiring.lor_land)
            frontier = nxt.new(mask=~level.S)
            depth += 1
        out = np.full(n, -1)
        idx, vals = level.to_coo()
        out[idx] = vals
        return out
    return run


def graphblas_bfs(g: sp.csr_array) -> Callable[[], np.ndarray]:
    return _graphblas_bfs(g, push=False)


def graphblaspush_bfs(g: sp.csr_array) -> Callable[[], np.ndarray]:
    return _graphblas_bfs(g, push=True)


def scipy_sssp(g: sp.csr_array) -> Callable[[], np.ndarray]:
    return lambda: csgraph.dijkstra(g, indices=SOURCE)


def scipy_bfs(g: sp.csr_array) -> Callable[[], np.ndarray]:
    def run() -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hops = csgraph.shortest_path(g != 0, method="D", unweighted=True, indices=SOURCE)
        return np.where(np.isinf(hops), -1, hops).astype(int)
    return run


def _case(make: Callable[[sp.csr_array], Callable[[], np.ndarray]], g: sp.csr_array,
          reference: np.ndarray) -> Any:
    try:
        fn = make(g)
    except ImportError as exc:
        return Skipped("not installed", str(exc))

    def verify(out: np.ndarray) -> None:
        np.testing.assert_array_equal(out, reference)
    return fn, verify


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=list(GRAPHS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs")
    args = parser.parse_args(argv)

    rows = []
    systems = {"coiter": "coiter", "graphblas": "GraphBLAS, same steps",
               "graphblaspush": "GraphBLAS, push (sparse frontier)", "scipy": "SciPy csgraph"}
    for name in args.graphs:
        g = _load(name, args.data)
        for algo, makers in (("SSSP", (coiter_sssp, graphblas_sssp, scipy_sssp)),
                             ("BFS", (coiter_bfs, graphblas_bfs, graphblaspush_bfs, scipy_bfs))):
            reference = makers[-1](g)()
            steps = f"{int(reference.max()) + 1} levels" if algo == "BFS" else "to the fixpoint"
            res = bench_group({m.__name__.split("_")[0]: _case(m, g, reference) for m in makers},
                              args.repeat, warmup=1)
            for key, r in res.items():
                rows.append([name, f"{g.shape[0]:,}", f"{g.nnz:,}", algo, steps, systems[key],
                             r.ms() if hasattr(r, "ms") else r.reason, ratio(r, res["coiter"])])
                print(rows[-1])
    headers = ["graph", "vertices", "edges", "algorithm", "steps", "system", "ms",
               "system / coiter"]
    info = machine_info()
    text = ["# Graph algorithms as semiring products", "",
            command_line(__file__, argv),
            "", "Medians of whole runs (every step), one thread, each result checked against "
            "scipy.sparse.csgraph first; system / coiter above 1 means coiter is faster. "
            "coiter and 'GraphBLAS, same steps' relax every edge at each step (a pull over "
            "all rows); GraphBLAS's push BFS multiplies only the frontier's edges, which "
            "coiter's expression cannot say (an `any` reduction is computed per result "
            "entry, so the step walks every row). SciPy runs other algorithms (Dijkstra, a "
            "breadth-first search), shown for scale.", "",
            markdown_table(headers, rows), "", "Machine: " + "; ".join(f"{k}: {v}" for k, v in info.items()), ""]
    write_report(args.out, "graphs.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
