"""Compile time and first-call latency of coiter kernels, measured in a fresh process:

    COITER_CACHE_DIR=DIR python -m benchmarks.suite.compile_probe KERNEL... > out.json

With an empty DIR each kernel's first call generates C, runs the C compiler and loads
the library (cold compile); run again on the same DIR it finds the library on disk (the
first-call latency of a new process). Each kernel runs once on a tiny input and is
checked. Prints JSON: the time to import coiter and, per kernel, ``compile_s`` (the
``coiter.compile`` call) and ``first_call_s`` (the first call, which builds the kernel).
"""
from __future__ import annotations

import json
import sys
import time


def main(kernel_names: list[str]) -> None:
    t0 = time.perf_counter()
    import coiter  # noqa: F401 - timed: the import is part of a new process's latency

    out: dict[str, object] = {"import_s": time.perf_counter() - t0, "kernels": {}}
    from . import data
    from .check import assert_matches
    from .kernels import KERNELS
    from .peers.coiter_peer import operand, result
    from .settings import Settings

    settings = Settings.for_mode(True, kernels=kernel_names, threads=[1], peers=[],
                                 data_dir=None, out_dir="")
    tiny_matrix = data.Matrix("tiny-10x10", "generated", data.tiny_matrix())
    tiny_tensor = data.random_tensor(6, 40, skewed=False)
    for name in kernel_names:
        kernel = KERNELS[name]
        case = kernel.build(tiny_matrix if kernel.kind == "matrix" else tiny_tensor, settings)
        formats = kernel.formats(case.order)
        ops = {k: operand(v, formats.get(k)) for k, v in case.ops.items()}
        t0 = time.perf_counter()
        compiled = kernel.compile(case.order)
        t1 = time.perf_counter()
        got = compiled(**ops)
        t2 = time.perf_counter()
        assert_matches(result(got), case.reference, 1e-9)
        out["kernels"][name] = {"compile_s": t1 - t0, "first_call_s": t2 - t1,
                                "total_s": t2 - t0}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
