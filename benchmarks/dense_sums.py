"""Sums of sparse operands into a dense result: every term merged in one loop nest against
added one term at a time (coiter's plan from three-way unions on), and against SciPy.

    python benchmarks/dense_sums.py [--repeat N] [--out DIR]

``a = B + C + ...`` with a dense ``a``: merged, each coordinate's case tests which operands
hold it (branches that mispredict on unrelated patterns); one term at a time, each operand
adds into ``a`` on its own, a second pass over ``a`` per term. The merged kernel is compiled
with ``coiter.concrete.concretize.SCATTERED_SUM_CASES`` raised out of reach. SciPy adds the
sparse operands and makes the sum dense (``(B + C + ...).toarray()``). One thread; every
result checked against NumPy's sum of the dense operands first; medians of ``--repeat``
calls after warm-up, round-robin (``_common.bench_group``). Results go to
``<out>/dense-sums.md``. Nothing here asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import bench_group, close_to, command_line, machine_info, markdown_table, ratio, script_parser, write_report

import sys

import numpy as np
import scipy.sparse as sp

import coiter
import coiter.concrete.concretize as concretize

# (label, shape, terms, density, whether the terms share one pattern)
CASES = [
    ("vectors", (2_000_000,), 3, 0.01, False),
    ("vectors", (2_000_000,), 5, 0.01, False),
    ("vectors", (2_000_000,), 3, 0.01, True),
    ("vectors", (200_000,), 3, 0.05, False),
    ("CSR", (2000, 2000), 3, 0.005, False),
    ("CSR", (2000, 2000), 3, 0.02, True),
    ("CSR", (500, 500), 3, 0.05, False),
    ("DCSR", (2000, 2000), 2, 0.005, False),
]
FORMATS = {"vectors": "s", "CSR": "csr", "DCSR": "dcsr"}


def _kernel(result: str, names: list[str], fmt: str, order: int) -> coiter.Kernel:
    """The sum of ``names`` into a dense ``result``; its first call makes its plan."""
    idx = ",".join("ij"[:order])
    expr = f"{result}({idx}) = " + " + ".join(f"{n}({idx})" for n in names)
    return coiter.compile(expr, formats={**{n: fmt for n in names}, result: "d" * order})


def main(argv: list[str] | None = None) -> int:
    args = script_parser(__doc__, repeat=20).parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    for label, shape, n, density, same in CASES:
        names = [f"B{k}" for k in range(n)]
        mats = [sp.random_array(shape, density=density, format="coo", rng=0 if same else rng) * (k + 1)
                for k in range(n)]
        fmt = FORMATS[label]
        ops = {name: coiter.Tensor.from_coo(m.coords, m.data, shape, fmt) for name, m in zip(names, mats)}
        rows_of = [sp.csr_array(m.reshape(1, -1) if len(shape) == 1 else m) for m in mats]
        check = close_to(sum(m.toarray() for m in mats))
        merged, scattered = _kernel("m", names, fmt, len(shape)), _kernel("a", names, fmt, len(shape))
        saved = concretize.SCATTERED_SUM_CASES
        concretize.SCATTERED_SUM_CASES = 1 << 62
        try:
            merged(**ops, threads=1)  # the plan is made here, merged
        finally:
            concretize.SCATTERED_SUM_CASES = saved
        res = bench_group({
            "merged": (lambda: merged(**ops, threads=1), check),
            "one at a time": (lambda: scattered(**ops, threads=1), check),
            "scipy": (lambda: sum(rows_of[1:], rows_of[0]).toarray().reshape(shape), check),
        }, args.repeat)
        rows.append([label, "x".join(map(str, shape)), n, f"{mats[0].nnz:,}", "yes" if same else "no",
                     res["merged"].ms(), res["one at a time"].ms(), res["scipy"].ms(),
                     ratio(res["merged"], res["one at a time"]), ratio(res["scipy"], res["one at a time"])])
        print(rows[-1], flush=True)
    text = [
        "# Sums into a dense result: merged or one term at a time", "",
        command_line(__file__, argv),
        "", "`a = B0 + B1 + ...` into a dense `a`, random patterns (or one shared pattern); medians in ms, "
            "one thread, every result checked first. coiter's default adds the terms one at a time from "
            f"{concretize.SCATTERED_SUM_CASES} merged cases on: a three-way union, or two-way unions at two "
            "nested loops (DCSR).", "",
        markdown_table(["operands", "shape", "terms", "entries each", "shared pattern", "merged ms",
                        "one at a time ms", "SciPy ms", "merged / one at a time", "SciPy / one at a time"], rows), "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in machine_info().items()), "",
    ]
    write_report(args.out, "dense-sums.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
