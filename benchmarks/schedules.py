"""1 vs 2 threads: coiter's default and scheduled kernels against scipy.sparse, MKL and
SuiteSparse:GraphBLAS at the same thread count, on ../shared/data.

    python benchmarks/schedules.py [--repeat N] [--data DIR] [--quick]

"coiter auto" is ``schedule="auto"``: its first call (the search, not timed here) tunes
on that input at that thread count, in a private autotune store. Each thread count
runs in its own process with OMP_NUM_THREADS / MKL_NUM_THREADS set
before any runtime loads (coiter kernels also get ``threads=``). Every time is the
median of N calls after warm-up, and every result is checked against scipy/NumPy
before it counts. GraphBLAS has no SDDMM: its masked product of the dense factors took over a
minute per call on cit-HepPh, so it is not run. Benchmarks are not tests: nothing here
asserts a time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import sys
from pathlib import Path

from core import timed  # noqa: E402 - benchmarks/ is on sys.path when run as a script

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MATRICES = ["ego-Twitter-undirected", "USA-road-NE", "cit-HepPh"]
SMALL_MATRICES = ["cit-HepPh", "bcsstk33"]  # SpGEMM/SpAdd: A*A stays small
SPMV_ROWS = "split(i,i0,i1,64),reorder(i0,i1,j),parallelize(i0,CPUThread,NoRaces,dynamic,16)"
SPMM = ("split(i,i0,i1,16),pos(j,jpos,A(i,j)),split(jpos,jpos0,jpos1,8),reorder(i0,i1,jpos0,k,jpos1),"
        "parallelize(i0,CPUThread,NoRaces),parallelize(k,CPUVector,IgnoreRaces)")
SDDMM = ("split(i,i0,i1,16),pos(k,kpos,B(i,k)),split(kpos,kpos0,kpos1,8),reorder(i0,i1,kpos0,j,kpos1),"
         "parallelize(i0,CPUThread,NoRaces),parallelize(kpos1,CPUVector,ParallelReduction)")
TTV = "fuse(i,j,f),pos(f,fpos,B(i,j,k)),split(fpos,chunk,fpos2,256),reorder(chunk,fpos2,k),parallelize(chunk,CPUThread,NoRaces)"
MTTKRP = ("split(i,i1,i2,16),reorder(i1,i2,k,l,j),precompute(B(i,k,l)*D(l,j),j,j,w),"
          "parallelize(i1,CPUThread,NoRaces)")


def worker(threads: int, data: Path, repeat: int, quick: bool) -> list[dict]:
    """All measurements at one thread count (environment already pinned by the parent)."""
    import numpy as np
    import scipy.sparse as sp

    import coiter

    try:
        from sparse_dot_mkl import dot_product_mkl
    except ImportError:
        dot_product_mkl = None
    try:
        import graphblas as gb
        gb.ss.config["nthreads"] = threads
    except ImportError:
        gb = None
    rows: list[dict] = []
    rng = np.random.default_rng(0)

    def record(kernel: str, name: str, system: str, fn, check) -> None:
        try:
            t, out = timed(fn, repeat)
            check(out)
            rows.append(dict(kernel=kernel, input=name, system=system, threads=threads, seconds=t))
        except Exception as e:  # a peer that cannot do it is shown as such
            rows.append(dict(kernel=kernel, input=name, system=system, threads=threads, error=str(e)[:200]))

    def close(ref):
        if sp.issparse(ref):  # compare sparse results without densifying them
            def check(out) -> None:
                diff = abs(sp.csr_array(out) - ref).max() if ref.nnz else abs(sp.csr_array(out)).max()
                assert diff <= 1e-9 * max(1.0, abs(ref).max()), f"max difference {diff}"
            return check
        return lambda out: np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-9, atol=1e-9)

    def load(name: str) -> sp.csr_array:
        return coiter.read(data / "matrices" / f"{name}.mtx.gz").to_scipy().tocsr()

    spmv = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    spmv_rows = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule=SPMV_ROWS)
    spmv_auto = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="auto")
    spmm = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"})
    spmm_s = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"}, schedule=SPMM)
    sddmm = coiter.compile("A(i,k) = B(i,k) * C(i,j) * D(j,k)", formats={"A": "csr", "B": "csr"})
    sddmm_s = coiter.compile("A(i,k) = B(i,k) * C(i,j) * D(j,k)", formats={"A": "csr", "B": "csr"}, schedule=SDDMM)
    for name in MATRICES[-1:] if quick else MATRICES:
        A = load(name)
        x = rng.random(A.shape[1])
        ref = A @ x
        label = f"{name} ({A.nnz} nnz)"
        record("SpMV", label, "coiter default", lambda: spmv(A=A, x=x, threads=threads).to_numpy(), close(ref))
        record("SpMV", label, "coiter rows-split", lambda: spmv_rows(A=A, x=x, threads=threads).to_numpy(), close(ref))
        record("SpMV", label, "coiter auto", lambda: spmv_auto(A=A, x=x, threads=threads).to_numpy(), close(ref))
        record("SpMV", label, "scipy", lambda: A @ x, close(ref))
        if dot_product_mkl:
            record("SpMV", label, "MKL", lambda: dot_product_mkl(A, x), close(ref))
        if gb:
            GA, gx = gb.io.from_scipy_sparse(A), gb.Vector.from_dense(x)
            record("SpMV", label, "GraphBLAS", lambda: (GA @ gx).new().to_dense(fill_value=0.0), close(ref))
        B = rng.random((A.shape[1], 32))
        refm = A @ B
        record("SpMM", label, "coiter default", lambda: spmm(A=A, B=B, threads=threads).to_numpy(), close(refm))
        record("SpMM", label, "coiter scheduled", lambda: spmm_s(A=A, B=B, threads=threads).to_numpy(), close(refm))
        record("SpMM", label, "scipy", lambda: A @ B, close(refm))
        if dot_product_mkl:
            record("SpMM", label, "MKL", lambda: dot_product_mkl(A, B), close(refm))
        if gb:
            GB = gb.Matrix.from_dense(B)
            record("SpMM", label, "GraphBLAS", lambda: (GA @ GB).new().to_dense(fill_value=0.0), close(refm))
        C, D = rng.random((A.shape[0], 16)), rng.random((16, A.shape[1]))
        r, c = A.nonzero()
        refs = sp.csr_array((A.data * np.einsum("ij,ji->i", C[r], D[:, c]), (r, c)), shape=A.shape)
        record("SDDMM", label, "coiter default",
               lambda: sddmm(B=A, C=C, D=D, threads=threads).to_scipy(), close(refs))
        record("SDDMM", label, "coiter scheduled",
               lambda: sddmm_s(B=A, C=C, D=D, threads=threads).to_scipy(), close(refs))
        record("SDDMM", label, "numpy gather",
               lambda: sp.csr_array((A.data * np.einsum("ij,ji->i", C[r], D[:, c]), (r, c)), shape=A.shape),
               close(refs))
    spgemm = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    spgemm_a = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"},
                              schedule="auto")
    spadd = coiter.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    for name in SMALL_MATRICES[:1] if quick else SMALL_MATRICES:
        A = load(name)
        label = f"{name} ({A.nnz} nnz)"
        At = A.T.tocsr()
        ref = A @ A
        record("SpGEMM", label, "coiter default", lambda: spgemm(A=A, B=A, threads=threads).to_scipy(), close(ref))
        record("SpGEMM", label, "coiter auto", lambda: spgemm_a(A=A, B=A, threads=threads).to_scipy(), close(ref))
        record("SpGEMM", label, "scipy", lambda: A @ A, close(ref))
        if dot_product_mkl:
            record("SpGEMM", label, "MKL", lambda: dot_product_mkl(A, A), close(ref))
        if gb:
            GA, GAt = gb.io.from_scipy_sparse(A), gb.io.from_scipy_sparse(At)
            record("SpGEMM", label, "GraphBLAS", lambda: gb.io.to_scipy_sparse((GA @ GA).new()), close(ref))
        refa = A + At
        record("SpAdd", label, "coiter default", lambda: spadd(A=A, B=At, threads=threads).to_scipy(), close(refa))
        record("SpAdd", label, "scipy", lambda: A + At, close(refa))
        if gb:
            record("SpAdd", label, "GraphBLAS", lambda: gb.io.to_scipy_sparse(GA.ewise_add(GAt).new()), close(refa))
    ttv = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats={"B": coiter.csf(3)})
    ttv_s = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats={"B": coiter.csf(3)}, schedule=TTV)
    mttkrp = coiter.compile("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", formats={"B": coiter.csf(3)})
    mttkrp_s = coiter.compile("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", formats={"B": coiter.csf(3)}, schedule=MTTKRP)
    mttkrp_a = coiter.compile("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", formats={"B": coiter.csf(3)}, schedule="auto")
    tensors = [("fb15k-237", coiter.read(data / "tensors" / "fb15k-237.tns.gz"))]
    if not quick:  # generated tensors over 1M nonzeros: uniform, and power-law (skewed rows)
        n, dims = 2_000_000, (10000, 1000, 500)
        crd = np.stack([rng.integers(0, d, n) for d in dims])
        tensors.append(("uniform 2M", coiter.Tensor.from_coo(crd, rng.random(n), dims)))
        dims = (20000, 20000, 200)
        crd = np.stack([np.minimum((rng.pareto(1.2, n) * 50).astype(np.int64), d - 1) for d in dims])
        tensors.append(("power-law 2M", coiter.Tensor.from_coo(crd, rng.random(n), dims)))
    for name, T in tensors:
        B = T.asformat(coiter.csf(3))
        crd, vals = B.storage.to_coords()
        label = f"{name} ({B.nnz} nnz)"
        c = rng.random(B.shape[2])
        ref = np.zeros(B.shape[:2])
        np.add.at(ref, (crd[0], crd[1]), vals * c[crd[2]])
        record("TTV", label, "coiter default", lambda: ttv(B=B, c=c, threads=threads).to_numpy(), close(ref))
        record("TTV", label, "coiter scheduled", lambda: ttv_s(B=B, c=c, threads=threads).to_numpy(), close(ref))
        C, D = rng.random((B.shape[1], 16)), rng.random((B.shape[2], 16))
        refk = np.zeros((B.shape[0], 16))
        np.add.at(refk, crd[0], vals[:, None] * C[crd[1]] * D[crd[2]])
        record("MTTKRP", label, "coiter default", lambda: mttkrp(B=B, C=C, D=D, threads=threads).to_numpy(), close(refk))
        record("MTTKRP", label, "coiter scheduled", lambda: mttkrp_s(B=B, C=C, D=D, threads=threads).to_numpy(), close(refk))
        record("MTTKRP", label, "coiter auto", lambda: mttkrp_a(B=B, C=C, D=D, threads=threads).to_numpy(), close(refk))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="small inputs only")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.data, args.repeat, args.quick)))
        return
    rows: list[dict] = []
    store = Path(tempfile.mkdtemp(prefix="coiter-autotune-"))
    for threads in (1, 2):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "OPENBLAS_NUM_THREADS": str(threads), "COITER_AUTOTUNE_FILE": str(store / f"{threads}.json")}
        cmd = [sys.executable, __file__, "--worker", str(threads), "--data", str(args.data),
               "--repeat", str(args.repeat)] + (["--quick"] if args.quick else [])
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        rows += json.loads(out.strip().splitlines()[-1])
    times = {(r["kernel"], r["input"], r["system"], r["threads"]): r.get("seconds") for r in rows}
    print(f"{'kernel':7s} {'input':34s} {'system':18s} {'1 thread ms':>12s} {'2 threads ms':>12s} {'speedup':>8s}")
    for key in dict.fromkeys((r["kernel"], r["input"], r["system"]) for r in rows):
        t1, t2 = times.get((*key, 1)), times.get((*key, 2))
        fmt = lambda t: f"{t * 1e3:12.3f}" if t else f"{'failed':>12s}"  # noqa: E731
        speed = f"{t1 / t2:8.2f}" if t1 and t2 else f"{'':8s}"
        print(f"{key[0]:7s} {key[1]:34s} {key[2]:18s} {fmt(t1)} {fmt(t2)} {speed}")
    for r in rows:
        if "error" in r:
            print(f"note: {r['kernel']} {r['input']} {r['system']} ({r['threads']} threads): {r['error']}")


if __name__ == "__main__":
    main()
