"""The suite's floor loop (benchmarks/suite/gathers.c): it reads x at the given indices."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's benchmarks/
from benchmarks.suite import gathers  # noqa: E402


@pytest.mark.parametrize("width", [np.int32, np.int64])
def test_the_loop_sums_x_at_the_indices(width: type) -> None:
    rng = np.random.default_rng(5)
    x = rng.random(1000)
    idx = rng.integers(0, 1000, 5003).astype(width)
    got = gathers.measure(idx, x, reps=2)
    assert "error" not in got, got.get("error")
    assert got["best_s"] > 0
    np.testing.assert_allclose(got["sum"], x[idx].sum(), rtol=1e-12)


def test_indices_outside_x_are_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        gathers.measure(np.array([0, 10], dtype=np.int32), np.zeros(10))
    with pytest.raises(TypeError, match="float64"):
        gathers.measure(np.array([0], dtype=np.int32), np.zeros(10, dtype=np.float32))


def test_a_compiler_that_cannot_run_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    gathers._library.cache_clear()
    try:
        got = gathers.measure(np.array([0], dtype=np.int32), np.zeros(1))
    finally:
        gathers._library.cache_clear()  # later tests build with the real compiler
    assert got["error"].startswith("FileNotFoundError") and "/nonexistent/cc" in got["error"]
