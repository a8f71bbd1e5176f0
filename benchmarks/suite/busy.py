"""Busy-machine rows: CSR SpMV on a small and a large input while another process keeps
one core busy (a Python loop spinning), coiter at its default thread count against
coiter at one thread (and SciPy), in a process whose OpenMP thread count is not set:

    python -m benchmarks.suite.busy SETTINGS.json SMALL LARGE > out.json

``measure`` starts the spinner and that process; the result of every call is checked
once first. Two timings, both reported:

- by batches (the suite's multi-thread method, which the targets use): each system's runs
  back to back after a pause, in several rounds, as a program calling one kernel
  repeatedly sees it;
- call by call (default threads, one thread, SciPy in turn): each call then pays for the
  one before it. Parallel calls leave OpenMP workers spinning for a while, which take a
  core from the next call, and a worker that fell asleep is woken where the scheduler
  chooses, possibly on the core of the thread that waits for it.

On a busy core default threads run the same serial loop as 1 thread, so each median comes
with its 95% interval (by batches, taken over the batches' medians: runs of one batch are
not independent), and the targets count default threads as slower only where the two
medians differ by more than their intervals' half-widths together. A third coiter system,
the 1-thread call again (``CONTROL``), shows what that noise looks like: two identical
systems. Each timing is taken with the three coiter systems in each place of the round in
turn (the place moved the median 1-4%), the runs pooled.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .settings import REPO_ROOT, Settings
from .timing import Timing, round_robin, timed_call

SPINNER = "while True: pass"
DEFAULT, ONE, CONTROL = "coiter default threads", "coiter 1 thread", "coiter 1 thread, again"
ROTATED = (DEFAULT, ONE, CONTROL)  # the systems that take every place in the round in turn
# rounds of batches per rotation: with three rotations, each median's interval is taken over
# 24 batch medians (ranks 7 to 18), not over 12 (ranks 2 to 11, nearly the whole range)
BATCHES = 8
ROUNDS = BATCHES * len(ROTATED)


def pick_inputs(settings: Settings) -> tuple[str, str] | None:
    """A small input (bcsstk16, the demo's matrix, when present) and the largest matrix
    that every matrix kernel runs on."""
    from . import data

    matrices = [r for r in data.selected(settings) if r.kind == "matrix" and not r.only]
    if len(matrices) < 2:
        return None
    names = [r.name for r in matrices]  # smallest first
    small = "bcsstk16" if "bcsstk16" in names else names[0]
    return small, names[-1]


def measure(settings: Settings, settings_path: Path) -> dict[str, Any]:
    """Run the busy-machine probe (spinner started first, stopped after)."""
    picked = pick_inputs(settings)
    if picked is None:
        return {"error": "fewer than two matrix inputs selected"}
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    spinner = subprocess.Popen([sys.executable, "-c", SPINNER])
    try:
        time.sleep(0.5)  # let the scheduler see the spinner before timing
        proc = subprocess.run([sys.executable, "-m", "benchmarks.suite.busy", str(settings_path), *picked],
                              env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    finally:
        spinner.kill()
        spinner.wait()
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {proc.returncode}"}
    return json.loads(proc.stdout)


def _probe(settings: Settings, name: str) -> dict[str, Any]:
    import numpy as np

    import coiter

    from .check import assert_matches
    from .data import selected
    from .kernels import KERNELS

    ref = next(r for r in selected(settings) if r.name == name)
    case = KERNELS["spmv"].build(ref.load(), settings)
    a, x = coiter.Tensor.from_scipy(case.ops["A"]), case.ops["x"]
    kernel = KERNELS["spmv"].compile()
    calls = {
        DEFAULT: lambda: kernel(A=a, x=x),
        ONE: lambda: kernel(A=a, x=x, threads=1),
        CONTROL: lambda: kernel(A=a, x=x, threads=1),
        "scipy": lambda: case.ops["A"] @ x,
    }
    for label, call in calls.items():
        out = call()
        got = out.to_numpy() if label.startswith("coiter") else out
        assert_matches(np.asarray(got), case.reference, 1e-9)
    first = {label: timed_call(call)[1] for label, call in calls.items()}
    # at least four runs per batch, whose median is then one sample of the interval
    runs = dict(first_s=first, budget_s=1.0, min_runs=max(settings.min_runs * 2, 4 * BATCHES),
                max_runs=200)
    batched = _in_every_place(calls, **runs, gap_s=0.005, batches=BATCHES, warmup=2)
    interleaved = _in_every_place(calls, **runs)
    return {"input": ref.name, "nnz": int(case.ops["A"].nnz), "runs": batched["scipy"].runs,
            "threads_available": os.cpu_count(),
            "systems": _summary(batched), "interleaved": _summary(interleaved)}


def _in_every_place(calls: dict[str, Callable[[], Any]], **runs: Any) -> dict[str, Timing]:
    """``round_robin`` once per rotation of the coiter systems (:data:`ROTATED`), the times
    pooled, so that each of them takes each place in the round. A system's place
    decides what ran before it: with one core kept busy, USA-road-NE's SpMV at one thread
    and at default threads (both the serial loop) differed by 1-4% in the median, in favour
    of whichever ran second."""
    rest = [name for name in calls if name not in ROTATED]
    pooled: dict[str, list[float]] = {name: [] for name in calls}
    batch_runs: set[int] = set()
    for turn in range(len(ROTATED)):
        order = [*ROTATED[turn:], *ROTATED[:turn], *rest]
        for name, timing in round_robin({name: calls[name] for name in order}, **runs).items():
            pooled[name] += timing.times_s
            batch_runs.add(timing.batch_runs)
    (batch,) = batch_runs  # every rotation times as many runs per batch
    return {name: Timing.of(ts, batch) for name, ts in pooled.items()}


def _summary(timings: dict[str, Timing]) -> dict[str, dict[str, Any]]:
    """Median (and its 95% interval), 90th percentile and maximum per system, in seconds."""
    return {label: {"median_s": t.median_s, "median_interval_s": list(t.median_interval()),
                    "p90_s": sorted(t.times_s)[int(0.9 * (t.runs - 1))], "max_s": t.max_s}
            for label, t in timings.items()}


def main(argv: list[str]) -> None:
    settings_path, small, large = argv
    settings = Settings.from_json(Path(settings_path).read_text())
    load = os.getloadavg()[0]
    out = {"spinner": SPINNER, "load_average_at_start": load,
           "small": _probe(settings, small), "large": _probe(settings, large)}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
