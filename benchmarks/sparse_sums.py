"""Sums of many sparse operands into a sparse result: a chain of three-way sums (what
``coiter.evaluate`` and the operators run from four terms on) against one kernel merging
every term, and against SciPy.

    python benchmarks/sparse_sums.py [--repeat N] [--out DIR]

``A = B0 + B1 + ... + Bn-1`` in CSR. The chain adds ``B0 + B1 + B2`` into a temporary, then
the temporary and the next two terms, and so on (``coiter/planning/sums.py``); the single
kernel is ``coiter.compile``'s for the whole sum (compiled here: its seconds are the "merged
kernel's first call"); SciPy adds left to right (``B0 + B1 + ...``). Operands: random
patterns at 1% of 2000 x 2000, and copies of the bundled bcsstk16 with their columns
shuffled apart. One thread; every result checked against SciPy's first; medians of
``--repeat`` calls after warm-up, round-robin (``_common.bench_group``). Kernels compile into a
fresh cache. Results go to ``<out>/sparse-sums.md``. Nothing here asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import bench_group, command_line, machine_info, markdown_table, ratio, script_parser, write_report

import os
import sys
import tempfile
import time

os.environ["COITER_CACHE_DIR"] = tempfile.mkdtemp(prefix="coiter-sparse-sums-")

import numpy as np  # noqa: E402
import scipy.io  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import coiter  # noqa: E402
from coiter.data import example_path  # noqa: E402
from coiter.planning.sums import MIN_ENTRIES, MIN_TERMS  # noqa: E402

TERMS = (3, 4, 5, 6, 7, 9)
MERGED_TERMS = 7  # past this the merged kernel takes tens of seconds to compile


def _random(n: int) -> list[sp.csr_array]:
    return [sp.random_array((2000, 2000), density=0.01, format="csr", rng=k) for k in range(n)]


def _bcsstk16(n: int) -> list[sp.csr_array]:
    a = sp.csr_array(scipy.io.mmread(example_path()))
    rng = np.random.default_rng(0)
    return [a if k == 0 else sp.csr_array(a[:, rng.permutation(a.shape[1])]) for k in range(n)]


def _exact(ref: sp.csr_array):
    def verify(out: object) -> None:
        got = out.to_scipy() if hasattr(out, "to_scipy") else out
        assert got.shape == ref.shape and abs(sp.csr_array(got) - ref).max() == 0, "values differ"
    return verify


def main(argv: list[str] | None = None) -> int:
    args = script_parser(__doc__, repeat=30).parse_args(argv)
    rows = []
    first_chain_s = None
    compiled: set[int] = set()
    for label, make in (("random 2000 x 2000, 1%", _random), ("bcsstk16, columns shuffled", _bcsstk16)):
        for n in TERMS:
            mats = make(n)
            names = [f"B{k}" for k in range(n)]
            ops = dict(zip(names, (coiter.Tensor.from_scipy(m) for m in mats)))
            text = "A(i,j) = " + " + ".join(f"{x}(i,j)" for x in names)
            check = _exact(sum(mats[1:], mats[0]))
            t0 = time.perf_counter()
            coiter.evaluate(text, **ops)
            if first_chain_s is None and n > 3:
                first_chain_s = time.perf_counter() - t0
            cases = {"chain": (lambda: coiter.evaluate(text, **ops), check)}
            compile_s = "-"
            if n <= MERGED_TERMS:
                merged = coiter.compile(text, formats={**{x: "csr" for x in names}, "A": "csr"})
                t0 = time.perf_counter()
                merged(threads=1, **ops)
                # (the second set of operands finds the kernel compiled)
                compile_s = (f"{time.perf_counter() - t0:.2f}" if n not in compiled else "(above)"
                             ) if n >= MIN_TERMS else "(the chain's)"
                compiled.add(n)
                cases["merged"] = (lambda: merged(threads=1, **ops), check)
            cases["scipy"] = (lambda: sum(mats[1:], mats[0]), check)
            res = bench_group(cases, args.repeat)
            merged_ms = res["merged"].ms() if "merged" in res else "-"
            merged_ratio = ratio(res["merged"], res["chain"]) if "merged" in res else "-"
            rows.append([label, n, f"{mats[0].nnz:,}", res["chain"].ms(), merged_ms, res["scipy"].ms(),
                         merged_ratio, ratio(res["scipy"], res["chain"]), compile_s])
            print(rows[-1], flush=True)
    text = [
        "# Sums of many sparse operands: a chain of three-way sums", "",
        command_line(__file__, argv),
        "", "`A = B0 + B1 + ...` in CSR; medians in ms, one thread, every result checked (bit for bit) "
            "against SciPy's left-to-right sum first. \"chain\" is `coiter.evaluate` (from "
            f"{MIN_TERMS} terms, on operands of {MIN_ENTRIES} entries or more as these, a chain of "
            "three-way sums; one kernel below that), \"merged\" one "
            f"kernel over every term (`coiter.compile` of the whole sum; not built past "
            f"{MERGED_TERMS} terms), whose first call's seconds (its "
            "compilation) are in the last column. The chain's kernels compile on its first use: "
            f"{first_chain_s:.2f} s for the first chained sum of this run (a three-way and a two-way "
            "sum, shared by every length after).", "",
        markdown_table(["operands", "terms", "entries each", "chain ms", "merged ms", "SciPy ms",
                        "merged / chain", "SciPy / chain", "merged kernel's first call s"], rows), "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in machine_info().items()), "",
    ]
    write_report(args.out, "sparse-sums.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
