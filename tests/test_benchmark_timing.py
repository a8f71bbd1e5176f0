"""The benchmark suite's timing: the interval of a median, runs in batches."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's benchmarks/
from benchmarks.suite.timing import Timing  # noqa: E402


@pytest.mark.parametrize("n", [10, 20, 51, 100, 600])
def test_the_median_interval_covers_the_median_95_percent_of_the_time(n: int) -> None:
    # runs 1..n shuffled: the interval's ends are runs of known ranks; the count of runs
    # below the true median is Binomial(n, 1/2), and the interval holds the median exactly
    # when that count lies between its lower rank and its upper rank less one
    times = [float(v) for v in range(n, 0, -1)]
    lo, hi = Timing.of(times).median_interval()
    lo_rank, hi_rank = int(lo), int(hi)
    assert 1 <= lo_rank <= math.floor(n / 2) and math.ceil(n / 2) + 1 <= hi_rank <= n
    if lo_rank > 1 and hi_rank < n:  # neither end clipped to the runs there are
        coverage = stats.binom.cdf(hi_rank - 1, n, 0.5) - stats.binom.cdf(lo_rank - 1, n, 0.5)
        assert 0.95 <= coverage < 0.99, coverage


def test_the_median_interval_of_100_runs() -> None:
    # the textbook 95% interval of the median of 100: the 40th and 61st smallest
    assert Timing.of([float(v) for v in range(1, 101)]).median_interval() == (40.0, 61.0)


def test_runs_in_batches_give_the_interval_of_their_batches_medians() -> None:
    # 24 batches of 5 runs; batch k's runs lie around k (within +-0.2): the interval of 24
    # samples is ranks 7 and 18, so the batches' medians 6 and 17, not the runs' ranks 49
    # and 72 of 120 (9.1 and 13.9), which would count every run as independent
    times = [k + d for k in range(23, -1, -1) for d in (0.2, -0.1, 0.0, 0.1, -0.2)]
    assert Timing.of(times, batch_runs=5).median_interval() == (6.0, 17.0)
    assert Timing.of(times).median_interval() == pytest.approx((9.1, 13.9))


def test_round_robin_keeps_each_batch_together(monkeypatch: pytest.MonkeyPatch) -> None:
    # with a pause (several threads), each system's runs come in batches, one per round:
    # "timed" here as how many calls of the other system came before, each chunk of
    # batch_runs of one system's times must hold a single value, one round's
    from benchmarks.suite import timing

    calls = {"a": 0, "b": 0}
    other = {"a": "b", "b": "a"}

    def call(name: str) -> float:
        calls[name] += 1
        return float(calls[other[name]])

    monkeypatch.setattr(timing, "timed_call", lambda fn: (None, fn()))
    timings = timing.round_robin({"a": lambda: call("a"), "b": lambda: call("b")},
                                 {"a": 1e-3, "b": 1e-3}, budget_s=0.03, min_runs=12, max_runs=12,
                                 gap_s=1e-6, batches=4, warmup=0)
    assert timings["a"].batch_runs == timings["b"].batch_runs == 3
    assert timings["a"].times_s == [0.0] * 3 + [3.0] * 3 + [6.0] * 3 + [9.0] * 3
    assert timings["b"].times_s == [3.0] * 3 + [6.0] * 3 + [9.0] * 3 + [12.0] * 3
