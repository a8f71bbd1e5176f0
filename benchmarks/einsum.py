"""einsum planning (issue 12): coiter.einsum against NumPy's and opt_einsum's planned einsum on
dense operands, and against pydata/sparse's einsum (and SciPy where the expression is a chain
of its operators) on sparse ones.

    python benchmarks/einsum.py [--repeat N] [--data DIR] [--out DIR]

Every system computes the same expression on the same data, one thread; each result is
checked against an independent reference (NumPy on small dense arrays, SciPy's products on
sparse ones) before its time counts. Times are medians of ``--repeat`` calls after warm-up
calls, round-robin over the systems (``_common.bench_group``); coiter's kernels are compiled
in the warm-up. Targets: coiter at most 1.5x NumPy's ``optimize=True`` time on every dense
case, and faster than pydata/sparse on every sparse case. Results go to
``<out>/einsum.md``. Nothing here asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import DEFAULT_DATA, REPO_ROOT, Skipped, Timing, bench_group, close_to, command_line, machine_info, \
    markdown_table, ratio, write_report

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

import coiter

RANK = 16


@dataclass(frozen=True)
class Case:
    """One einsum: its name, subscripts, operands and the reference result."""

    name: str
    subscripts: str
    operands: tuple[Any, ...]
    reference: Any  # ndarray or SciPy sparse array
    scipy: Callable[[], Any] | None = None  # the same product with SciPy's operators


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def dense_cases() -> list[Case]:
    r = _rng(1)
    cases = []

    def add(name: str, subscripts: str, *shapes: tuple[int, ...]) -> None:
        ops = tuple(r.random(s) for s in shapes)
        cases.append(Case(name, subscripts, ops, np.einsum(subscripts, *ops, optimize="optimal")))

    add("matrix product 600", "ij,jk->ik", (600, 600), (600, 600))
    add("chain of 3, 400", "ik,kl,lj->ij", (400, 400), (400, 400), (400, 400))
    add("chain of 4, thin/wide", "ij,jk,kl,lm->im", (1000, 32), (32, 1000), (1000, 32), (32, 1000))
    add("batched chain, 64 x 48", "bij,bjk,bkl->bil", (64, 48, 48), (64, 48, 48), (64, 48, 48))
    add("x^T A B y, 1500", "i,ij,jk,k->", (1500,), (1500, 1500), (1500, 1500), (1500,))
    add("MTTKRP 120x100x80, rank 16", "ijk,jr,kr->ir", (120, 100, 80), (100, RANK), (80, RANK))
    add("4-index transform, 16", "ea,fb,abcd,gc,hd->efgh", (16, 16), (16, 16), (16, 16, 16, 16),
        (16, 16), (16, 16))
    return cases


def _matrix(data: Path, name: str) -> sp.csr_array:
    m = sp.csr_array(coiter.read(data / "matrices" / f"{name}.mtx.gz").to_scipy())
    m.sum_duplicates()
    m.sort_indices()
    return m


def _tensor(data: Path, name: str) -> coiter.Tensor:
    return coiter.read(data / "tensors" / f"{name}.tns.gz").asformat("s" * 3)


def sparse_cases(data: Path) -> list[Case]:
    r = _rng(2)
    cases = []
    for name in ("add32", "luxembourg_osm", "bcsstk16"):
        a = _matrix(data, name)
        cases.append(Case(f"A A A, {name}", "ik,kl,lj->ij", (a, a, a), a @ a @ a, lambda a=a: a @ a @ a))
    for name in ("email-Enron", "cit-HepPh"):
        a = _matrix(data, name)
        x = r.random(a.shape[1])
        cases.append(Case(f"A A x, {name}", "ij,jk,k->i", (a, a, x), a @ (a @ x), lambda a=a, x=x: a @ (a @ x)))
        y = r.random(a.shape[0])
        cases.append(Case(f"y^T A x, {name}", "i,ij,j->", (y, a, x), np.asarray(y @ (a @ x)),
                          lambda a=a, x=x, y=y: y @ (a @ x)))
    a = _matrix(data, "email-Enron")
    u, v = r.random((a.shape[0], RANK)), r.random((RANK, a.shape[1]))
    rows, cols = a.nonzero()
    sddmm = sp.csr_array((a.data * np.einsum("nr,rn->n", u[rows], v[:, cols]), (rows, cols)), shape=a.shape)
    cases.append(Case("SDDMM rank 16, email-Enron", "ij,ik,kj->ij", (a, u, v), sddmm,
                      lambda: a.multiply(u @ v)))
    b, c = abs(a), a * 0.5
    cases.append(Case("A .* abs(A) .* A/2, email-Enron", "ij,ij,ij->ij", (a, b, c), a.multiply(b).multiply(c),
                      lambda: a.multiply(b).multiply(c)))
    for name in ("wn18rr", "fb15k-237"):
        t = _tensor(data, name)
        f1, f2 = r.random((t.shape[1], RANK)), r.random((t.shape[2], RANK))
        coords, vals = t.storage.to_coords()
        ref = np.zeros((t.shape[0], RANK))
        np.add.at(ref, coords[0], vals[:, None] * f1[coords[1]] * f2[coords[2]])
        cases.append(Case(f"MTTKRP rank 16, {name}", "ijk,jr,kr->ir", (t, f1, f2), ref))
    return cases


def _as_pydata(x: Any) -> Any:
    import sparse

    if isinstance(x, coiter.Tensor):
        coords, vals = x.storage.to_coords()
        return sparse.COO(coords, vals, shape=x.shape)
    if sp.issparse(x):
        return sparse.COO.from_scipy_sparse(x)
    return x


def _checker(reference: Any) -> Callable[[Any], None]:
    """Check a result against ``reference``: dense results as arrays, sparse references
    without densifying (the largest difference over the stored entries of either)."""
    if not sp.issparse(reference):
        check = close_to(np.asarray(reference))

        def verify_dense(out: Any) -> None:
            if not isinstance(out, (np.ndarray, coiter.Tensor)) and hasattr(out, "todense"):
                out = out.todense()  # pydata's sparse or 0-d results
            check(out)
        return verify_dense
    ref = sp.csr_array(reference)
    tol = 1e-9 * max(1.0, float(abs(ref).max()) if ref.nnz else 1.0)

    def verify(out: Any) -> None:
        if isinstance(out, coiter.Tensor):
            got = sp.csr_array(out.to_scipy()) if out.order == 2 else sp.csr_array(out.to_numpy())
        elif hasattr(out, "to_scipy_sparse"):  # pydata
            got = sp.csr_array(out.to_scipy_sparse())
        else:
            got = sp.csr_array(out)
        diff = abs(got - ref)
        assert got.shape == ref.shape and (diff.nnz == 0 or diff.max() <= tol), \
            f"largest difference {diff.max() if diff.nnz else 0} > {tol}"
    return verify


SLOW = 1.0  # seconds: a call this slow in the probe is timed by the probe alone


def _guarded(fn: Callable[[], Any], memory: int = 8 << 30, seconds: int = 60,
             ) -> Callable[[], Any] | Skipped | Timing:
    """``fn`` if one call of it finishes in a forked child under ``memory`` bytes of address
    space and ``seconds`` of wall time, else the Skipped cell saying which limit it hit
    (pydata's einsum forms the product over every index at once: out of memory on chains);
    a call slower than ``SLOW`` is not repeated: the probe's time is its Timing (one run)."""
    import os
    import resource
    import signal
    import time

    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # child: one call under the limits, its exit status says how it went
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        signal.alarm(seconds)
        try:
            fn()
        except MemoryError:
            os._exit(3)
        except BaseException:  # noqa: BLE001 - the parent reports the error when it calls fn
            os._exit(4)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
        return Skipped(f"slow (> {seconds} s)")
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    if code == 3 or (os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGKILL, signal.SIGSEGV)):
        return Skipped(f"out of memory (> {memory >> 30} GiB)")
    elapsed = time.perf_counter() - start
    if code == 0 and elapsed > SLOW:
        return Timing(elapsed, elapsed, elapsed, 1)
    return fn  # a call that raised raises again in bench_group, which reports it


def _coiter_result(case: Case) -> Any:
    plan = coiter.einsum_path(case.subscripts, *case.operands)
    return plan, (lambda: coiter.einsum(case.subscripts, *case.operands))


def _describe(plan: coiter.planning.EinsumPlan) -> str:
    if plan.fused:
        return f"one {plan.steps[0].engine} step"
    return " then ".join(f"{s.subscripts} ({s.engine}, {s.format.to_string() or 'scalar'})"
                         for s in plan.steps)


def run_dense(repeat: int) -> list[list[str]]:
    import opt_einsum

    rows = []
    for case in dense_cases():
        plan, run = _coiter_result(case)
        check = _checker(case.reference)
        res = bench_group({
            "coiter": (run, check),
            "numpy": (lambda c=case: np.einsum(c.subscripts, *c.operands, optimize=True), check),
            "opt_einsum": (lambda c=case: opt_einsum.contract(c.subscripts, *c.operands), check),
        }, repeat)
        rows.append([case.name, f"`{case.subscripts}`", res["coiter"].ms(), res["numpy"].ms(),
                     res["opt_einsum"].ms(), ratio(res["coiter"], res["numpy"]), _describe(plan)])
        print(rows[-1], flush=True)
    return rows


def run_sparse(data: Path, repeat: int) -> list[list[str]]:
    rows = []
    for case in sparse_cases(data):
        import sparse

        plan, run = _coiter_result(case)
        check = _checker(case.reference)
        pydata_ops = tuple(_as_pydata(x) for x in case.operands)
        pydata = _guarded(lambda c=case, o=pydata_ops: sparse.einsum(c.subscripts, *o))
        systems: dict[str, Any] = {
            "coiter": (run, check),
            "pydata": pydata if isinstance(pydata, Skipped) else Skipped("timed apart")
            if isinstance(pydata, Timing) else (pydata, check),
            "scipy": (case.scipy, check) if case.scipy is not None else Skipped("n/a"),
        }
        res = bench_group(systems, repeat)
        if isinstance(pydata, Timing):  # unchecked: one call in the probe took over SLOW
            res["pydata"] = pydata
        rows.append([case.name, f"`{case.subscripts}`", res["coiter"].ms(), res["pydata"].ms(),
                     res["scipy"].ms(), ratio(res["pydata"], res["coiter"]), ratio(res["scipy"], res["coiter"]),
                     _describe(plan)])
        print(rows[-1], flush=True)
    return rows


def _ratios(rows: list[list[str]], column: int) -> list[float]:
    return [float(r[column]) for r in rows if r[column] != "-"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks")
    args = parser.parse_args(argv)

    dense_rows = run_dense(args.repeat)
    sparse_rows = run_sparse(args.data, args.repeat)
    worst_dense = max(_ratios(dense_rows, 5), default=float("nan"))
    slowest_vs_pydata = min(_ratios(sparse_rows, 5), default=float("nan"))
    info = machine_info()
    text = [
        "# einsum plans", "",
        command_line(__file__, argv),
        "", "Medians of calls after warm-up, one thread, every result checked first. coiter is "
        "called as users call it, `coiter.einsum(subscripts, *operands)`, which plans on the "
        "first call and reuses the plan after (plans are cached by the operands' kinds, shapes "
        "and nonzero counts); the last column is that plan (`coiter.einsum_path`).", "",
        "## Targets", "",
        markdown_table(["target", "measured", "result"], [
            ["dense: coiter <= 1.5x NumPy optimize=True on every case", f"worst {worst_dense:.2f}x",
             "met" if worst_dense <= 1.5 else "missed"],
            ["sparse: coiter faster than pydata/sparse on every case", f"slowest {slowest_vs_pydata:.2f}x faster",
             "met" if slowest_vs_pydata > 1.0 else "missed"],
        ]), "",
        "## Dense operands", "",
        markdown_table(["case", "subscripts", "coiter ms", "NumPy ms", "opt_einsum ms",
                        "coiter / NumPy", "coiter's plan"], dense_rows), "",
        "## Sparse operands", "",
        "SciPy runs the same product with its operators where there is one (`a @ a @ a`, "
        "`a.multiply(u @ v)`: the sampled product materializes the dense `u @ v`). pydata's "
        "einsum first runs once in a forked process under an 8 GiB address-space limit; a call "
        "over 1 s there is timed by that one run (its result unchecked).", "",
        markdown_table(["case", "subscripts", "coiter ms", "pydata ms", "SciPy ms", "pydata / coiter",
                        "SciPy / coiter", "coiter's plan"], sparse_rows), "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in info.items()), "",
    ]
    write_report(args.out, "einsum.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
