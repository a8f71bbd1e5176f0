"""Median run times of coiter kernels against scipy.sparse / NumPy on ../shared/data.

    python benchmarks/core.py [--data DIR] [--repeat N]

Each kernel is compiled and warmed up first (compile time printed separately),
results are checked against the peer, then the median of N runs is reported.
Benchmarks are not tests: nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from statistics import median
from typing import Callable

import numpy as np

import coiter

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MATRICES = ["bcsstk16.mtx.gz", "memplus.mtx.gz", "cit-HepTh.mtx.gz", "email-Enron.mtx.gz"]
TENSORS = ["fb15k-237.tns.gz", "wn18rr.tns.gz"]


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Median seconds of ``repeat`` calls after two warm-up calls, and the last result."""
    out = fn()
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return median(times), out


def row(kernel: str, data: str, ours: float, peer: float, peer_name: str) -> None:
    print(f"{kernel:8s} {data:24s} coiter {ours * 1e3:9.3f} ms   {peer_name:10s} {peer * 1e3:9.3f} ms"
          f"   ratio peer/coiter {peer / ours:6.2f}x")


def bench_matrix(path: Path, repeat: int) -> None:
    A = coiter.read(path)
    S = A.to_scipy().tocsr()
    n, m = A.shape
    rng = np.random.default_rng(0)
    x = rng.random(m)

    spmv = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr})
    t0 = time.perf_counter()
    spmv(A=A, x=x)
    compile_s = time.perf_counter() - t0
    ours, y = timed(lambda: spmv(A=A, x=x), repeat)
    peer, ys = timed(lambda: S @ x, repeat)
    np.testing.assert_allclose(y.to_numpy(), ys, rtol=1e-9, atol=1e-9)
    row("SpMV", path.name, ours, peer, "scipy")

    if n == m:
        spgemm = coiter.compile("C(i,j) = A(i,k) * B(k,j)",
                                formats={"A": coiter.csr, "B": coiter.csr, "C": coiter.csr})
        ours, C = timed(lambda: spgemm(A=A, B=A), max(3, repeat // 10))
        peer, Cs = timed(lambda: S @ S, max(3, repeat // 10))
        diff = abs(C.to_scipy() - Cs)
        assert diff.nnz == 0 or diff.max() <= 1e-8 * abs(Cs).max()
        row("SpGEMM", path.name, ours, peer, "scipy")

        B2 = coiter.Tensor.from_scipy((S * 0.5).T.tocsr())
        B3 = coiter.Tensor.from_scipy((S * 2.0).tocsr()[:, ::-1].tocsr())
        add3 = coiter.compile("D(i,j) = A(i,j) + B(i,j) + C(i,j)",
                              formats={"A": coiter.csr, "B": coiter.csr, "C": coiter.csr, "D": coiter.csr})
        S2, S3 = B2.to_scipy(), B3.to_scipy()
        ours, D = timed(lambda: add3(A=A, B=B2, C=B3), repeat)
        peer, Ds = timed(lambda: S + S2 + S3, repeat)
        assert abs(D.to_scipy() - Ds).max() <= 1e-8 * abs(Ds).max()
        row("SpAdd3", path.name, ours, peer, "scipy")
    print(f"         (SpMV compile + first call {compile_s * 1e3:.1f} ms)")


def bench_tensor(path: Path, repeat: int) -> None:
    B = coiter.read(path, format=coiter.csf(3)) if path.name else None
    if B.order != 3:
        return
    rank = 16
    rng = np.random.default_rng(1)
    C = rng.random((B.shape[1], rank))
    D = rng.random((B.shape[2], rank))
    mttkrp = coiter.compile("A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", formats={"B": coiter.csf(3)})
    ours, A = timed(lambda: mttkrp(B=B, C=C, D=D), repeat)
    coords, vals = B.storage.to_coords()

    def numpy_mttkrp() -> np.ndarray:
        out = np.zeros((B.shape[0], rank))
        np.add.at(out, coords[0], vals[:, None] * C[coords[1]] * D[coords[2]])
        return out

    peer_name = "numpy"
    peer_fn: Callable[[], object] = numpy_mttkrp
    try:
        import sparse  # pydata/sparse, from the bench extra

        Bs = sparse.COO(coords, vals, shape=B.shape)
        peer_fn, peer_name = (lambda: sparse.einsum("ijk,jl,kl->il", Bs, C, D)), "pydata"
    except ImportError:
        pass
    peer, ref = timed(peer_fn, max(3, repeat // 10))
    ref = ref.todense() if hasattr(ref, "todense") else ref
    np.testing.assert_allclose(A.to_numpy(), ref, rtol=1e-8)
    row("MTTKRP", path.name, ours, peer, peer_name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    for name in MATRICES:
        bench_matrix(args.data / "matrices" / name, args.repeat)
    for name in TENSORS:
        bench_tensor(args.data / "tensors" / name, args.repeat)


if __name__ == "__main__":
    main()
