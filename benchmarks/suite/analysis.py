"""Numbers derived from a run's raw results (the results.json dictionary): ratios
peer time / coiter time, their geometric means per kernel, and achieved bandwidth as a
fraction of STREAM triad."""
from __future__ import annotations

import math
from typing import Any, Iterator

COITER = "coiter"

# short cell text for a system that has no time in a case
STATUS_CELLS = {"n/a": "n/a", "not installed": "n.i.", "unavailable": "unav.", "wrong": "WRONG",
                "error": "error", "too slow": "slow", "skipped": "skip"}


def threads_label(threads: int | str) -> str:
    """"1 thread", "2 threads"."""
    return f"{threads} thread" + ("" if str(threads) == "1" else "s")


def thread_counts(results: dict[str, Any]) -> list[str]:
    return sorted(results["runs"], key=int)


def systems(results: dict[str, Any]) -> list[str]:
    """System names in the order the runs list them (coiter first)."""
    run = results["runs"][thread_counts(results)[0]]
    return list(run["systems"])


def peers(results: dict[str, Any]) -> list[str]:
    return [s for s in systems(results) if s != COITER]


def cases(results: dict[str, Any], threads: str, kernel: str | None = None) -> Iterator[dict[str, Any]]:
    for case in results["runs"][threads]["cases"]:
        if kernel is None or case["kernel"] == kernel:
            yield case


def median(case: dict[str, Any], system: str) -> float | None:
    rec = case.get("systems", {}).get(system, {})
    return rec.get("median_s") if rec.get("status") == "ok" else None


def ratio(case: dict[str, Any], peer: str) -> float | None:
    """peer median / coiter median: above 1 means coiter is faster."""
    ours, theirs = median(case, COITER), median(case, peer)
    if ours is None or theirs is None or ours <= 0:
        return None
    return theirs / ours


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def kernel_geomean(results: dict[str, Any], threads: str, kernel: str, peer: str) -> tuple[float | None, int]:
    """Geometric mean of the ratios of ``peer`` over the inputs both timed, and how many."""
    ratios = [r for c in cases(results, threads, kernel) if (r := ratio(c, peer)) is not None]
    return geomean(ratios), len(ratios)


def cell(case: dict[str, Any], system: str) -> str:
    """A table cell: the ratio (or coiter's time in ms), else the system's status."""
    if case.get("status") != "ok":
        return STATUS_CELLS.get(case.get("status", ""), "?")
    rec = case["systems"].get(system)
    if rec is None:
        return ""
    if rec["status"] != "ok":
        return STATUS_CELLS.get(rec["status"], rec["status"])
    if system == COITER:
        return f"{rec['median_s'] * 1e3:.3f}"
    r = ratio(case, system)
    return f"{r:.2f}" if r is not None else "-"


def bandwidth(results: dict[str, Any], threads: str, case: dict[str, Any], system: str) -> tuple[float, float | None] | None:
    """(GB/s over the kernel's minimum bytes, fraction of STREAM at this thread count)."""
    return _over_min_bytes(results, threads, case, median(case, system))


def gathers_bandwidth(results: dict[str, Any], threads: str, case: dict[str, Any],
                      ) -> tuple[float, float | None] | None:
    """:func:`bandwidth` of the loop that only reads x at A's columns (SpMV cases,
    ``gathers.py``): the fraction of STREAM no SpMV on that input can pass."""
    return _over_min_bytes(results, threads, case, case.get("gathers", {}).get("best_s"))


def _over_min_bytes(results: dict[str, Any], threads: str, case: dict[str, Any], seconds: float | None,
                    ) -> tuple[float, float | None] | None:
    if not seconds or not case.get("min_bytes"):
        return None
    gbs = case["min_bytes"] / seconds / 1e9
    stream = results.get("stream", {}).get("gbs", {}).get(threads)
    return gbs, (gbs / stream if stream else None)


def llc_bytes(results: dict[str, Any]) -> int | None:
    """Size of the largest cache level, to flag inputs that fit in it."""
    caches = results.get("environment", {}).get("caches", {})
    sizes = []
    for size in caches.values():
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        sizes.append(int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size))
    return max(sizes) if sizes else None
