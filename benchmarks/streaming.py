"""Large dense results stored by streaming stores against plain stores: TTM and SpMM, one
and two threads, with the operands' caches flushed between calls, after an idle pause, and warm.

    python benchmarks/streaming.py [--repeat N] [--out DIR] [--data DIR]

The same kernels built twice in one process: with ``-DCOITER_STREAM_MIN_BYTES=0`` (every
result has its rows stored by SSE2 streaming stores: lower/dense_rows.py and the C prelude)
and with ``-DCOITER_STREAM_STORES=0`` (plain stores always). The results' sizes span the
default threshold (four times a core's L2 cache). TTM ``A(i,j,l) = B(i,j,k) * C(k,l)`` (on
the last mode of tensors of any order) into a result over B's fibers, SpMM
``C(i,k) = A(i,j) * B(j,k)`` in CSR, rank 16. Before every call, "flushed" reads 300 MB;
"idle" sleeps 0.2 s, at one thread only (the benchmark suite's one-thread round robin, where
six other libraries run between two calls, slows the next call as a sleep does, and a flush
much less); "warm" does nothing. The two builds alternate call by call. Every result is first
checked: the two builds bit for bit against each other, and against SciPy (the tensor's
fibers as a CSR matrix). Medians of ``--repeat`` calls in ms. Kernels compile into a fresh
cache. Results go to ``<out>/streaming.md``. Nothing here asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import DEFAULT_DATA, command_line, machine_info, markdown_table, script_parser, write_report

import os
import sys
import tempfile
import time
from statistics import median
from typing import Callable

os.environ["COITER_CACHE_DIR"] = tempfile.mkdtemp(prefix="coiter-streaming-")

import numpy as np  # noqa: E402

import coiter  # noqa: E402
from coiter.runtime.compiler import DEFAULT_CFLAGS  # noqa: E402
from suite.data import Tensor as InputTensor, random_tensor  # noqa: E402
from suite.kernels import fibers  # noqa: E402

def _ttm(order: int) -> str:
    """TTM of an order-``order`` tensor on its last mode: ``A(i0,..,l) = B(i0,..,k) * C(k,l)``."""
    head = ",".join(f"i{m}" for m in range(order - 1))
    return f"A({head},l) = B({head},k) * C(k,l)"


SPMM = "C(i,k) = A(i,j) * B(j,k)"
RANK = 16
FLUSH_BYTES = 300_000_000
IDLE_S = 0.2
# data/tensors/<name>.tns.gz; results of 1.9 to 12.5 MiB
TENSORS = ("jf17k-3ary", "collegemsg-day", "wn18rr", "fb15k-237")
MATRICES = ("bcsstk33", "cit-HepPh", "USA-road-NE")  # data/matrices/<name>.mtx.gz


BUILDS = {"streamed": DEFAULT_CFLAGS + " -DCOITER_STREAM_MIN_BYTES=0",
          "plain": DEFAULT_CFLAGS + " -DCOITER_STREAM_STORES=0"}


def _builds(expr: str, formats: dict[str, object]) -> dict[str, coiter.Kernel]:
    """Two kernels of ``expr``: "streamed" (streaming at every size) and "plain" (without
    streaming). A kernel builds its variants at their first call, with the flags of that
    moment: :func:`_first_call` makes it under the build's own."""
    return {label: coiter.compile(expr, formats=formats) for label in BUILDS}


def _first_call(label: str, call: Callable[[], coiter.Tensor]) -> coiter.Tensor:
    old = os.environ.get("COITER_CFLAGS")
    os.environ["COITER_CFLAGS"] = BUILDS[label]
    try:
        return call()
    finally:
        if old is None:
            os.environ.pop("COITER_CFLAGS", None)
        else:
            os.environ["COITER_CFLAGS"] = old


def _time(calls: dict[str, Callable[[], object]], repeat: int, before: str) -> dict[str, float]:
    """Median ms per call of each of ``calls``, alternating call by call; ``before`` each call:
    "flush", "idle" or nothing ("warm")."""
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(repeat):
        for label, call in calls.items():
            if before == "flush":
                np.ones(FLUSH_BYTES // 8).sum()
            elif before == "idle":
                time.sleep(IDLE_S)
            t0 = time.perf_counter()
            out = call()
            times[label].append(time.perf_counter() - t0)
            del out
    return {k: median(v) * 1e3 for k, v in times.items()}


def _case(name: str, kernel: str, calls: dict[str, Callable[[], coiter.Tensor]],
          values_of: Callable[[coiter.Tensor], np.ndarray], reference: np.ndarray, repeat: int,
          threads: int) -> list[object]:
    """A table row: the builds' ``calls`` checked (``values_of`` their results against
    ``reference``), then timed flushed, idle and warm."""
    values = {k: values_of(_first_call(k, c)) for k, c in calls.items()}
    np.testing.assert_array_equal(values["streamed"], values["plain"])
    np.testing.assert_allclose(values["streamed"], reference, rtol=1e-9, atol=1e-12)
    row: list[object] = [kernel, name, f"{reference.nbytes / 2**20:.1f}", threads]
    for before in ("flush", "idle", "warm"):
        if before == "idle" and threads > 1:
            # after a pause, waking the other core's OpenMP worker takes this virtual machine
            # 2-6 ms, which would hide the stores
            row += ["-"] * 3
            continue
        t = _time(calls, repeat, before)
        row += [f"{t['plain']:.3f}", f"{t['streamed']:.3f}", f"{t['plain'] / t['streamed']:.2f}"]
    print(row, flush=True)
    return row


def _fiber_rows(t: coiter.Tensor) -> np.ndarray:
    return np.asarray(t.storage.vals).reshape(-1, RANK)


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__, repeat=15)
    parser.add_argument("--data", type=os.path.abspath, default=str(DEFAULT_DATA))
    args = parser.parse_args(argv)
    rows = []
    tensors = [coiter.read(os.path.join(args.data, "tensors", f"{n}.tns.gz")) for n in TENSORS]
    generated = random_tensor(25000, 500000, skewed=False)
    tensors.append(coiter.Tensor.from_coo(generated.coords, generated.vals, generated.shape))
    names = [*TENSORS, generated.name]
    for name, t in zip(names, tensors):
        b = t.asformat(coiter.csf(t.order))
        ttm = _builds(_ttm(t.order), {"B": coiter.csf(t.order), "A": "s" * (t.order - 1) + "d"})
        c = np.random.default_rng(0).random((b.shape[-1], RANK))
        f, _ = fibers(InputTensor(name, "file", *b.storage.to_coords(), b.shape))
        for threads in (1, 2):
            calls = {k: (lambda k=k: ttm[k](B=b, C=c, threads=threads)) for k in ttm}
            # the result's values are rows over B's fibers in order (to_numpy would spread
            # them over the tensor's whole dense shape): the fibers' product is the reference
            rows.append(_case(name, "TTM", calls, _fiber_rows, f @ c, args.repeat, threads))
    spmm = _builds(SPMM, {"A": coiter.csr})
    for name in MATRICES:
        a = coiter.read(os.path.join(args.data, "matrices", f"{name}.mtx.gz"), format=coiter.csr)
        m = a.to_scipy()
        b = np.random.default_rng(1).random((m.shape[1], RANK))
        ref = m @ b
        for threads in (1, 2):
            calls = {k: (lambda k=k: spmm[k](A=a, B=b, threads=threads)) for k in spmm}
            rows.append(_case(name, "SpMM", calls, lambda t: np.asarray(t.to_numpy()), ref, args.repeat, threads))
    text = [
        "# Large dense results: streaming stores", "",
        command_line(__file__, argv), "",
        f"Rank {RANK}; median ms of {args.repeat} calls per build, the builds alternating call by call; "
        "\"plain\" is built with `-DCOITER_STREAM_STORES=0`, \"streamed\" with `-DCOITER_STREAM_MIN_BYTES=0` "
        "(every result streams; by default rows stream from a result of four times a core's L2 cache). "
        f"\"flushed\" reads {FLUSH_BYTES // 10**6} MB before each call, \"idle\" sleeps {IDLE_S} s before "
        "each call (one thread only: at two, waking the other core's worker after the pause dominates). "
        "Every result checked first: the builds bit for bit against each other, and against SciPy.", "",
        markdown_table(["kernel", "input", "result MiB", "threads"]
                       + [f"{m}: {c}" for m in ("flushed", "idle", "warm")
                          for c in ("plain", "streamed", "plain / streamed")], rows), "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in machine_info().items()), "",
    ]
    write_report(args.out, "streaming.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
