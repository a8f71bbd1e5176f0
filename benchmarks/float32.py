"""Single-precision SpMV, SpMM and TTV: coiter's float32 kernels against SciPy, MKL and torch
in float32, and against coiter's own float64 kernels, on the real matrices and tensors.

    python benchmarks/float32.py [--repeat N] [--out DIR] [--data DIR]

SpMV ``y(i) = A(i,j) * x(j)`` and SpMM ``C(i,k) = A(i,j) * B(j,k)`` (16 columns) on CSR
matrices, and TTV ``A(i,j) = B(i,j,k) * c(k)`` on the last mode of CSF tensors of any order (the peers run TTV as SpMV on the tensor's fibers, a CSR
matrix over the last mode), one thread. The inputs span the run lengths that pick coiter's row-sum helpers
(docs/performance.md): eight rows at once under 2.25 entries a run, short runs without a
loop up to 6, eight lanes from 7.5. Every result is checked first against SciPy's float64
product (relative 1e-4 of the largest value); medians of ``--repeat`` calls after warm-up,
round-robin (``_common.bench_group``). MKL (sparse_dot_mkl) and torch are optional: a peer
that does not load is a cell that says so. Kernels compile into a fresh cache. Results go to
``<out>/float32.md``. Nothing here asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import (
    DEFAULT_DATA, Case, Skipped, bench_group, close_to, command_line, failure, machine_info,
    markdown_table, ratio, script_parser, write_report,
)

import os
import sys
import tempfile
from typing import Any, Callable

os.environ["COITER_CACHE_DIR"] = tempfile.mkdtemp(prefix="coiter-float32-")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import coiter  # noqa: E402
from suite.data import Tensor as InputTensor  # noqa: E402
from suite.kernels import KERNELS, fibers  # noqa: E402

# data/matrices/<name>.mtx.gz, by entries a row: 2.1, 2.8, 4.0, 8.5, 11.5, 12.2, 44, 68, 5161
MATRICES = ("luxembourg_osm", "USA-road-NY", "as-caida20071105", "ca-CondMat-cc1",
            "soc-Slashdot0902", "cit-HepPh", "ego-Facebook", "bcsstk33", "lp_fit2d")
# data/tensors/<name>.tns.gz, by entries a fiber: 1.3, 1.4, 1.7, 2.2, 3.0
TENSORS = ("wikipeople-3ary", "wn18rr", "collegemsg-day", "jf17k-3ary", "fb15k-237")
SPMV = "y(i) = A(i,j) * x(j)"
SPMM = "C(i,k) = A(i,j) * B(j,k)"
SPMM_COLUMNS = 16
SYSTEMS = ("coiter float32", "coiter float64", "SciPy float32", "MKL float32", "torch float32")


MatVec = Callable[[sp.csr_array, np.ndarray], Callable[[], Any]]  # operands -> the timed call


def _mkl() -> MatVec | Skipped:
    try:
        from sparse_dot_mkl import dot_product_mkl
    except Exception as exc:  # noqa: BLE001 - an optional peer: any failure is a cell
        return failure(exc)

    def matvec(a: sp.csr_array, x: np.ndarray) -> Callable[[], Any]:
        m = sp.csr_matrix(a)
        return lambda: dot_product_mkl(m, x)

    return matvec


def _torch() -> MatVec | Skipped:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return failure(exc)
    torch.set_num_threads(1)

    def matvec(a: sp.csr_array, x: np.ndarray) -> Callable[[], Any]:
        t = torch.sparse_csr_tensor(torch.from_numpy(a.indptr), torch.from_numpy(a.indices),
                                    torch.from_numpy(a.data), size=a.shape)
        v = torch.from_numpy(x)
        return lambda: (t @ v).numpy()

    return matvec


def _peer_cases(m32: sp.csr_array, x32: np.ndarray, check: Any) -> dict[str, Case | Skipped]:
    """SciPy, MKL and torch on the float32 matrix ``m32`` (a tensor's fibers for TTV)."""
    cases: dict[str, Case | Skipped] = {"SciPy float32": (lambda: m32 @ x32, check)}
    for label, peer in (("MKL float32", _mkl()), ("torch float32", _torch())):
        cases[label] = peer if isinstance(peer, Skipped) else (peer(m32, x32), check)
    return cases


def _row(kernel: str, name: str, runs: float, res: dict[str, Any]) -> list[object]:
    peers = [res[s] for s in SYSTEMS[2:]]
    return [kernel, name, f"{runs:.1f}", *(res[s].ms() for s in SYSTEMS),
            ratio(res["coiter float64"], res["coiter float32"]),
            *(ratio(p, res["coiter float32"]) for p in peers)]


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__, repeat=50)
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    args = parser.parse_args(argv)
    # kernel -> (its dense operand's name, that operand's columns or None for a vector, the
    # kernel compiled per precision)
    matrix_kernels = {label: (arg, columns, {t: coiter.compile(expr, formats={"A": coiter.csr}, dtype=t)
                                             for t in (np.float32, np.float64)})
                      for label, expr, arg, columns in (("SpMV", SPMV, "x", None),
                                                        ("SpMM", SPMM, "B", SPMM_COLUMNS))}
    ttv = KERNELS["ttv"]  # the suite's TTV: on the last mode, of tensors of any order
    rng = np.random.default_rng(0)
    rows = []
    for name in MATRICES:
        a = coiter.read(os.path.join(args.data, "matrices", f"{name}.mtx.gz"), format=coiter.csr)
        m = sp.csr_array(a.to_scipy())
        m32 = sp.csr_array(m.astype(np.float32))
        for label, (arg, columns, kernel) in matrix_kernels.items():
            x = rng.random(m.shape[1] if columns is None else (m.shape[1], columns))
            x32 = x.astype(np.float32)
            # the float32 product of the float32 data, in float64: what both precisions compute
            check = close_to(sp.csr_array(m32.astype(np.float64)) @ x32.astype(np.float64), rtol=1e-4)
            ops = {t: (coiter.Tensor.from_scipy(sp.csr_array(m.astype(t))), x.astype(t))
                   for t in (np.float32, np.float64)}
            cases: dict[str, Case | Skipped] = {
                f"coiter {np.dtype(t).name}":
                (lambda t=t: kernel[t](A=ops[t][0], **{arg: ops[t][1]}, threads=1), check)
                for t in (np.float32, np.float64)}
            res = bench_group(cases | _peer_cases(m32, x32, check), args.repeat, min_seconds=0.1)
            rows.append(_row(label, name, m.nnz / m.shape[0], res))
            print(rows[-1], flush=True)
    for name in TENSORS:
        t = coiter.read(os.path.join(args.data, "tensors", f"{name}.tns.gz"))
        fmt = coiter.csf(t.order)
        coords, vals = t.storage.to_coords()
        kernels = {d: coiter.compile(ttv.expression(t.order), formats=ttv.formats(t.order), dtype=d)
                   for d in (np.float32, np.float64)}
        f, _ = fibers(InputTensor(name, "file", coords, vals, t.shape))
        f32 = sp.csr_array(f.astype(np.float32))
        c = rng.random(t.shape[-1])
        c32 = c.astype(np.float32)
        check = close_to(sp.csr_array(f32.astype(np.float64)) @ c32.astype(np.float64), rtol=1e-4)
        ops = {d: (coiter.Tensor.from_coo(coords, vals.astype(d), t.shape, format=fmt), c.astype(d))
               for d in (np.float32, np.float64)}
        # the result's values are B's fibers' sums in order (it shares B's first levels)
        cases = {f"coiter {np.dtype(d).name}":
                 (lambda d=d: kernels[d](B=ops[d][0], c=ops[d][1], threads=1).storage.vals, check)
                 for d in (np.float32, np.float64)}
        res = bench_group(cases | _peer_cases(f32, c32, check), args.repeat, min_seconds=0.1)
        rows.append(_row("TTV", name, f.nnz / f.shape[0], res))
        print(rows[-1], flush=True)
    text = [
        "# Single precision: SpMV, SpMM and TTV in float32", "",
        command_line(__file__, argv), "",
        f"One thread; median ms of the timed calls, every result checked first. SpMM's B has "
        f"{SPMM_COLUMNS} columns. TTV's peers run on the tensor's fibers as a CSR matrix. The ratios divide each time by coiter float32's: above 1, "
        "coiter float32 is faster.", "",
        markdown_table(["kernel", "input", "entries a run", *(f"{s} ms" for s in SYSTEMS),
                        "coiter float64 / float32", "SciPy / coiter", "MKL / coiter",
                        "torch / coiter"], rows),
        "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in machine_info().items()), "",
    ]
    write_report(args.out, "float32.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
