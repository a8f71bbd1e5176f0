"""The benchmark suite's quick mode runs end to end and verifies coiter's results.

Runs ``python -m benchmarks run --quick`` on a tiny subset (SpMV and TTV, one thread,
generated inputs of 300 rows) in a subprocess, as a user would, with every optional
package hidden (so only NumPy and SciPy are there, as in a bare install), and checks its
JSON: every coiter result passed the check against the reference, and the missing peers
are reported as not installed. Nothing about time is asserted.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = ("sparse_dot_mkl", "graphblas", "sparse", "tensora", "torch", "matplotlib", "tqdm",
            "threadpoolctl")


def test_quick_benchmark_verifies_coiter(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for name in OPTIONAL:  # a module that fails to import as if it were not installed
        (hidden / f"{name}.py").write_text(f"raise ModuleNotFoundError('hidden', name={name!r})\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hidden), str(REPO_ROOT)]))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks", "run", "--quick", "--kernels", "spmv", "ttv",
           "--threads", "1", "--gen-size", "300", "--inputs", "gen-", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    results = json.loads((out / "results.json").read_text())
    run = results["runs"]["1"]
    assert {c["kernel"] for c in run["cases"]} == {"spmv", "ttv"}
    for case in run["cases"]:
        coiter = case["systems"]["coiter"]
        assert coiter["status"] == "ok", case
        assert coiter["runs"] >= 5 and coiter["median_s"] > 0
        assert case["systems"]["scipy"]["status"] == "ok", case
        assert case["systems"]["torch"]["status"] == "not installed"
    assert run["overhead"]["systems"]["coiter"]["status"] == "ok"
    assert results["compile"]["cold"]["kernels"]["spmv"]["total_s"] > 0
    # the busy-machine probe times the 1-thread call twice, its own noise
    for timing in ("systems", "interleaved"):
        assert set(results["busy"]["small"][timing]) == {
            "coiter default threads", "coiter 1 thread", "coiter 1 thread, again", "scipy"}
    assert "SpMV" in (out / "summary.md").read_text()
    assert not list(out.glob("*.png"))  # no matplotlib, no plots


def test_a_worker_whose_memory_is_full_restarts_between_cases(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A worker over its memory share stops after each case and a fresh one resumes after
    it, not reported as a death: every case is measured once, checked against the reference."""
    sys.path.insert(0, str(REPO_ROOT))  # the repository's benchmarks/
    from benchmarks.suite.cli import _worker
    from benchmarks.suite.settings import Settings

    settings = Settings.for_mode(True, kernels=["spmv"], threads=[1], peers=["scipy"], out_dir=str(tmp_path),
                                 data_dir=None, gen_size=300, inputs=["gen-"], worker_memory_fraction=1e-9)
    path = tmp_path / "settings.json"
    path.write_text(settings.to_json())
    run = _worker(settings, path, 1)
    assert "error" not in run
    names = [case["input"]["name"] for case in run["cases"]]
    assert len(names) == len(set(names)) >= 3
    for case in run["cases"]:
        assert case["systems"]["coiter"]["status"] == "ok", case
        assert case["systems"]["scipy"]["status"] == "ok", case
        assert case["rss_mb"] > 0
    assert "died" not in capsys.readouterr().err


def test_a_slow_first_call_does_not_cut_the_timed_runs(tmp_path: Path) -> None:
    """A system whose checked call includes one-time work (coiter's compile) leaves the
    case the runs the systems' warm calls allow: sized by the checked calls, jf17k-4ary's
    TTV got the minimum 5 runs of every system. Each system's first result is still
    checked against the reference (status ok)."""
    sys.path.insert(0, str(REPO_ROOT))
    from benchmarks.suite import data
    from benchmarks.suite.kernels import KERNELS
    from benchmarks.suite.peers import scipy_peer
    from benchmarks.suite.peers.base import Peer, Prepared
    from benchmarks.suite.settings import Settings
    from benchmarks.suite.worker import Worker

    def compiles_first(case: Any) -> Prepared:
        plain = scipy_peer.spmv(case)
        calls: list[None] = []

        def call() -> Any:
            if not calls:
                time.sleep(0.3)  # one-time work, as a compile
            calls.append(None)
            return plain.call()
        return Prepared(call, plain.result)

    settings = Settings.for_mode(True, kernels=["spmv"], threads=[1], peers=["scipy"], out_dir=str(tmp_path),
                                 data_dir=None, gen_size=300, inputs=["gen-banded"])
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"slow": []}))
    worker = Worker(settings, 1, tmp_path / "out.json", state)
    worker.systems["first-call"] = Peer("first-call", "0", {"spmv": compiles_first})
    ref = next(r for r in data.selected(settings) if r.takes("spmv", "matrix"))
    record = worker.run_case(KERNELS["spmv"], ref.load())
    for name in ("coiter", "scipy", "first-call"):
        system = record["systems"][name]
        assert system["status"] == "ok", system
        assert system["runs"] == settings.max_runs, system
    assert record["systems"]["first-call"]["check_s"] >= 0.3
