"""The issue's performance targets: tracked in every report, never asserted.

Targets that name no thread count are taken at 1 thread, where every system runs the
same single core (scipy and pydata are serial anyway); "at 2 threads" targets use the
largest thread count measured when 2 was not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from . import analysis


@dataclass(frozen=True)
class Target:
    name: str
    goal: float
    higher_is_better: bool  # ratios: higher; latencies: lower
    unit: str
    measure: Callable[[dict[str, Any]], tuple[float | None, str]]  # value, how it was taken


def _threads(results: dict[str, Any], wanted: int) -> str | None:
    counts = analysis.thread_counts(results)
    if str(wanted) in counts:
        return str(wanted)
    return counts[-1] if wanted > 1 and counts else None


def _geomean_vs(kernel: str, peer: str, threads: int) -> Callable[[dict[str, Any]], tuple[float | None, str]]:
    def measure(results: dict[str, Any]) -> tuple[float | None, str]:
        t = _threads(results, threads)
        if t is None:
            return None, f"{analysis.threads_label(threads)} not run"
        value, n = analysis.kernel_geomean(results, t, kernel, peer)
        return value, f"geomean of {peer} time / coiter time over {n} inputs, {analysis.threads_label(t)}"
    return measure


def _overhead(results: dict[str, Any]) -> tuple[float | None, str]:
    t = _threads(results, 1) or analysis.thread_counts(results)[0]
    rec = results["runs"][t]["overhead"]["systems"].get(analysis.COITER, {})
    if rec.get("status") != "ok":
        return None, f"coiter: {rec.get('status', 'not run')}"
    return rec["median_s"] * 1e6, f"median per call, cached kernel, {analysis.threads_label(t)}"


def _cold_compile(results: dict[str, Any]) -> tuple[float | None, str]:
    rec = results.get("compile", {}).get("cold", {}).get("kernels", {}).get("spmv")
    if rec is None:
        return None, "SpMV cold compile not measured"
    return rec["total_s"], "SpMV: coiter.compile + first call, empty kernel cache"


TARGETS = [
    Target("SpMV >= MKL at 2 threads", 1.0, True, "x", _geomean_vs("spmv", "MKL", 2)),
    Target("SpMV >= 3x scipy at 2 threads", 3.0, True, "x", _geomean_vs("spmv", "scipy", 2)),
    Target("SpGEMM >= 1.5x scipy", 1.5, True, "x", _geomean_vs("spgemm", "scipy", 1)),
    Target("SpAdd3 >= 2x scipy", 2.0, True, "x", _geomean_vs("spadd3", "scipy", 1)),
    Target("MTTKRP >= 20x pydata sparse", 20.0, True, "x", _geomean_vs("mttkrp", "pydata", 1)),
    Target("cached call overhead <= 10 us (10x10 SpMV)", 10.0, False, "us", _overhead),
    Target("cold compile <= 1 s", 1.0, False, "s", _cold_compile),
]


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target's measured value, whether it is met, and by how much: ``factor`` is
    how far past the goal (above 1: met with that margin; below 1: missed, and coiter
    must get 1/factor times faster to meet it)."""
    out = []
    for target in TARGETS:
        value, how = target.measure(results)
        row: dict[str, Any] = {"target": target.name, "goal": target.goal, "unit": target.unit,
                               "value": value, "how": how}
        if value is None or value <= 0:
            row.update(met=None, factor=None)
        else:
            factor = value / target.goal if target.higher_is_better else target.goal / value
            row.update(met=factor >= 1.0, factor=factor)
        out.append(row)
    return out


def describe(row: dict[str, Any]) -> str:
    """"met (1.4x past the goal)" / "missed (needs 2.2x faster)" / "not measured"."""
    if row["met"] is None:
        return "not measured"
    if row["met"]:
        return f"met ({row['factor']:.2f}x past the goal)"
    return f"missed (needs {1 / row['factor']:.2f}x faster)"
