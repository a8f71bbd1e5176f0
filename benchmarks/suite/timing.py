"""Timing method: each system's checked call is its warm-up; then the systems of a case
are called round-robin (so a load change on the shared machine hits all of them alike)
with the garbage collector off, at least ``min_runs`` times each; the median, minimum and
maximum are kept with every raw time."""
from __future__ import annotations

import gc
import math
import time
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any, Callable


@dataclass
class Timing:
    median_s: float
    min_s: float
    max_s: float
    runs: int
    times_s: list[float]
    # runs taken back to back as one batch, the batches one after another in ``times_s``
    batch_runs: int = 1

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, times_s: list[float], batch_runs: int = 1) -> Timing:
        """The median, minimum and maximum of ``times_s``, one per run, taken in batches
        of ``batch_runs``."""
        return cls(median(times_s), min(times_s), max(times_s), len(times_s), times_s, batch_runs)

    def median_interval(self, z: float = 1.96) -> tuple[float, float]:
        """A distribution-free interval of the median (95% for the default ``z``): the
        samples of ranks ``floor(n/2 - z sqrt(n)/2)`` and ``ceil(1 + n/2 + z sqrt(n)/2)``
        (from 1), each as many ranks from the middle as a binomial count of samples below
        the true median strays.

        The samples are the runs, or the batches' medians where runs came in batches: runs
        of one batch share the machine's state (the other core's load, the caches, a
        sleeping worker), so they are not independent, and counting each as a sample gave
        intervals several times narrower than the gap between two identical systems."""
        samples = self.times_s if self.batch_runs <= 1 else [
            median(self.times_s[i:i + self.batch_runs]) for i in range(0, len(self.times_s), self.batch_runs)]
        ranked, n = sorted(samples), len(samples)
        half = z * math.sqrt(n) / 2
        lo, hi = math.floor(n / 2 - half), math.ceil(1 + n / 2 + half)
        return ranked[max(lo, 1) - 1], ranked[min(hi, n) - 1]


def timed_call(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its wall time in seconds."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def round_robin(calls: dict[str, Callable[[], Any]], first_s: dict[str, float], budget_s: float,
                min_runs: int, max_runs: int, gap_s: float = 0.0, batches: int = 1,
                warmup: int = 1) -> dict[str, Timing]:
    """Time ``calls``, already warmed up by calls that took ``first_s``; the number of
    runs aims at ``budget_s`` seconds in all, between ``min_runs`` and ``max_runs``.

    Without ``gap_s`` the systems alternate call by call. With it (multi-threaded runs)
    they alternate by batches: ``batches`` rounds, in each every system's share of the runs
    back to back after a pause of ``gap_s`` (another library's threads spinning after its
    last call would otherwise compete for the cores) and ``warmup`` untimed calls (the
    system's own threads are asleep after the pause, and the first calls after an idle
    moment run slower: bcsstk16 2-thread SpMV 0.14-0.23 ms against 0.12 in a loop; see
    ``Settings.batch_warmup``)."""
    per_round = sum(first_s[name] for name in calls)
    runs = max(min_runs, min(max_runs, math.ceil(budget_s / per_round) if per_round > 0 else max_runs))
    rounds, per_batch = (runs, 1) if gap_s <= 0 else (batches, math.ceil(runs / batches))
    times: dict[str, list[float]] = {name: [] for name in calls}
    gc.collect()
    gc.disable()  # a collection inside one timed call would land on whichever system ran
    try:
        for _ in range(rounds):
            for name, fn in calls.items():
                if gap_s > 0:
                    time.sleep(gap_s)
                    for _ in range(warmup):
                        fn()
                for _ in range(per_batch):
                    times[name].append(timed_call(fn)[1])
    finally:
        gc.enable()
    return {name: Timing.of(ts, per_batch) for name, ts in times.items()}


def per_call(fn: Callable[[], Any], batch: int, batches: int) -> Timing:
    """Per-call time of a very short call: ``batches`` batches of ``batch`` calls, each
    batch's mean a sample (a single call is too short for the clock)."""
    for _ in range(batch):
        fn()
    samples = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            samples.append((time.perf_counter() - t0) / batch)
    finally:
        gc.enable()
    return Timing(median(samples), min(samples), max(samples), batches * batch, samples)
