"""The benchmark suite's interval of a median."""
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
