"""The benchmark suite's target arithmetic on a hand-made results file."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's benchmarks/
from benchmarks.suite import targets  # noqa: E402


def _results(seconds: list[float]) -> dict[str, Any]:
    """SpMV at 2 threads on inputs of 1 GB minimum bytes (above the 32 MiB cache), coiter
    taking ``seconds`` on them, against a 10 GB/s STREAM triad."""
    cases = [{"kernel": "spmv", "status": "ok", "min_bytes": 1e9, "input": {"name": f"m{k}"},
              "systems": {"coiter": {"status": "ok", "median_s": s}}} for k, s in enumerate(seconds)]
    return {"runs": {"2": {"cases": cases}}, "stream": {"gbs": {"2": 10.0}},
            "environment": {"caches": {"L3": "32M"}}}


def _stream_target(results: dict[str, Any]) -> float:
    target = next(t for t in targets.TARGETS if "STREAM at 2 threads" in t.name)
    value, _ = target.measure(results)
    assert value is not None
    return value


def test_the_stream_fraction_is_the_median_of_the_inputs() -> None:
    # 1 GB in 0.25 / 0.2 / 0.125 / 0.1 s: 4, 5, 8, 10 GB/s of 10 -> 40, 50, 80, 100 %
    assert abs(_stream_target(_results([0.25, 0.2, 0.125, 0.1])) - 65.0) < 1e-9  # not 80
    assert abs(_stream_target(_results([0.25, 0.2, 0.125])) - 50.0) < 1e-9


def test_the_stream_note_gives_each_input_and_the_best_peer() -> None:
    results = _results([0.25, 0.125])
    for case, peers in zip(results["runs"]["2"]["cases"], ({"MKL": 0.5, "scipy": 1.0}, {"MKL": 0.5})):
        case["systems"] |= {name: {"status": "ok", "median_s": s} for name, s in peers.items()}
    target = next(t for t in targets.TARGETS if "STREAM at 2 threads" in t.name)
    value, note = target.measure(results)
    assert value is not None and abs(value - 60.0) < 1e-9
    # MKL: 20% on both inputs; scipy: 10% on the one it ran
    assert "(m0 40%, m1 80%; best peer MKL 20%)" in note


def test_the_stream_note_gives_the_gathers_floor() -> None:
    # the loop reading only x at A's columns: 1 GB of minimum bytes in 0.5 / 0.2 s of
    # gathers -> 2 and 5 GB/s of 10 -> 20% and 50%
    results = _results([1.0, 0.4])
    for case, floor in zip(results["runs"]["2"]["cases"], (0.5, 0.2)):
        case["gathers"] = {"best_s": floor, "sum": 0.0}
    _, note = next(t for t in targets.TARGETS if "STREAM at 2 threads" in t.name).measure(results)
    assert "(m0 10%, m1 25%; reading only x at A's columns: 20%, 50%)" in note


def test_an_input_without_a_gathers_floor_shows_a_dash() -> None:
    results = _results([1.0, 0.4])
    results["runs"]["2"]["cases"][1]["gathers"] = {"best_s": 0.2, "sum": 0.0}
    _, note = next(t for t in targets.TARGETS if "STREAM at 2 threads" in t.name).measure(results)
    assert "(m0 10%, m1 25%; reading only x at A's columns: -, 50%)" in note


def _busy_results(default: float, one: float, half_width: float | None,
                  again: float | None = None) -> dict[str, Any]:
    """A busy-machine probe whose small input took these medians (seconds) by batches, each
    with a 95% interval of +-``half_width`` (None: a probe without intervals)."""
    systems = {"coiter default threads": default, "coiter 1 thread": one, "scipy": 2 * one}
    if again is not None:
        systems["coiter 1 thread, again"] = again
    timing: dict[str, dict[str, Any]] = {}
    for name, s in systems.items():
        timing[name] = {"median_s": s, "p90_s": s, "max_s": s}
        if half_width is not None:
            timing[name]["median_interval_s"] = [s - half_width, s + half_width]
    return {"busy": {"small": {"input": "bcsstk16", "systems": timing}}}


def _busy_row(results: dict[str, Any]) -> dict[str, Any]:
    name = "busy machine, small SpMV: default threads no slower than 1"
    return targets.judge(next(t for t in targets.TARGETS if t.name == name), results)


def test_default_threads_may_trail_one_thread_within_the_medians_intervals() -> None:
    # intervals of +-0.5% each: 0.8% slower is within their 1% together, 1.5% is not
    row = _busy_row(_busy_results(default=1.008, one=1.0, half_width=0.005, again=1.003))
    assert row["met"] and abs(row["value"] - 1 / 1.008) < 1e-12
    assert abs(row["noise"] - 0.01 / 1.008) < 1e-12
    assert "within the noise" in targets.describe(row)
    assert "+-0.5% and +-0.5%; the 1-thread call timed twice: 0.3% apart" in row["how"]
    assert not _busy_row(_busy_results(default=1.015, one=1.0, half_width=0.005))["met"]
    # faster is met whatever the noise; a probe without intervals allows none
    assert _busy_row(_busy_results(default=0.9, one=1.0, half_width=0.0))["met"]
    row = _busy_row(_busy_results(default=1.001, one=1.0, half_width=None))
    assert row["met"] is False and row["noise"] == 0.0
