"""Which kernels the benchmark suite runs on which generated inputs."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's benchmarks/
from benchmarks.suite import busy, data  # noqa: E402
from benchmarks.suite.settings import Settings  # noqa: E402


def _settings(quick: bool) -> Settings:
    return Settings.for_mode(quick, kernels=["spmv", "spmm"], threads=[1], peers=[], out_dir="unused")


def test_the_inputs_larger_than_the_cache_are_for_spmv_alone() -> None:
    refs = {r.name: r for r in data.generated(_settings(quick=False))}
    large = [r for r in refs.values() if r.only]
    assert sorted(r.name for r in large) == [
        "gen-banded-6000000", "gen-powerlaw-6000000", "gen-uniform-6000000"]
    # 576 MB of matrix each, above this machine's reported 480 MiB L3
    assert all(r.size > 480 * 2**20 and r.kind == "matrix" for r in large)
    assert all(r.takes("spmv", "matrix") and not r.takes("spmm", "matrix") for r in large)
    everyday = refs["gen-banded-250000"]
    assert everyday.takes("spmv", "matrix") and everyday.takes("spmm", "matrix")
    assert not everyday.takes("ttv", "tensor")


def test_the_quick_mode_and_the_busy_probe_leave_them_out() -> None:
    assert not any(r.only for r in data.generated(_settings(quick=True)))
    picked = busy.pick_inputs(_settings(quick=False))
    assert picked is not None and "6000000" not in picked[1]
