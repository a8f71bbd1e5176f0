"""mergeby (issue 11): an intersection merged two-finger against galloping, and against
SciPy's elementwise product, on sparse vectors of very different densities.

    python benchmarks/mergeby.py [--repeat N] [--out DIR]

``x = a(i) * b(i)`` with ``a`` holding a fraction of ``b``'s entries: two-finger steps through
every entry of both, gallop lets the iterator behind jump to the other's coordinate by
exponential then binary search. SciPy computes ``a.multiply(b).sum()`` on 1 x n CSR rows.
One thread; results checked against NumPy's dot product of the dense vectors first; medians
of ``--repeat`` calls after warm-up, round-robin (``_common.bench_group``). Results go to
``<out>/mergeby.md``. Nothing here asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import bench_group, close_to, command_line, machine_info, markdown_table, ratio, script_parser, write_report

import sys

import numpy as np
import scipy.sparse as sp

import coiter

N = 2_000_000
DENSE_B = 0.5
SPARSE_A = (0.5, 0.05, 0.005, 0.0005)


def _vector(rng: np.random.Generator, density: float) -> np.ndarray:
    x = np.zeros(N)
    keep = rng.random(N) < density
    x[keep] = rng.random(int(keep.sum())) + 0.5
    return x


def main(argv: list[str] | None = None) -> int:
    args = script_parser(__doc__, repeat=20).parse_args(argv)
    rng = np.random.default_rng(0)
    b = _vector(rng, DENSE_B)
    kernels = {s: coiter.compile("x = a(i) * b(i)", {"a": "s", "b": "s"}, schedule=f"mergeby(i,{s})")
               for s in ("TwoFinger", "Gallop")}
    B, b_row = coiter.Tensor.from_numpy(b, "s"), sp.csr_array(b[None, :])
    rows = []
    for density in SPARSE_A:
        a = _vector(rng, density)
        A, a_row = coiter.Tensor.from_numpy(a, "s"), sp.csr_array(a[None, :])
        check = close_to(np.asarray(a @ b))
        cases = {s: ((lambda k=k: k(a=A, b=B)), check) for s, k in kernels.items()}
        cases["scipy"] = (lambda: np.asarray(a_row.multiply(b_row).sum()), check)
        res = bench_group(cases, args.repeat)
        rows.append([f"{A.nnz:,}", f"{B.nnz:,}", res["TwoFinger"].ms(), res["Gallop"].ms(), res["scipy"].ms(),
                     ratio(res["TwoFinger"], res["Gallop"]), ratio(res["scipy"], res["Gallop"])])
        print(rows[-1], flush=True)
    text = [
        "# mergeby: two-finger and galloping intersections", "",
        command_line(__file__, argv),
        "", f"`x = a(i) * b(i)`, vectors of {N:,} coordinates, `b` with about half of them stored; "
            "medians in ms, one thread, every result checked first.", "",
        markdown_table(["entries of a", "entries of b", "TwoFinger ms", "Gallop ms", "SciPy ms",
                        "TwoFinger / Gallop", "SciPy / Gallop"], rows), "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in machine_info().items()), "",
    ]
    write_report(args.out, "mergeby.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
