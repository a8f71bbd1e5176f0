"""The benchmark suite's quick mode runs end to end and verifies coiter's results.

Runs ``python -m benchmarks run --quick`` on a tiny subset (SpMV and TTV, one thread,
scipy as the only peer, generated inputs of 300 rows) in a subprocess, as a user would,
and checks its JSON: every coiter result passed the check against the reference.
Nothing about time is asserted.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_quick_benchmark_verifies_coiter(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "benchmarks", "run", "--quick", "--kernels", "spmv", "ttv",
           "--threads", "1", "--peers", "scipy", "--gen-size", "300", "--inputs", "gen-",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    results = json.loads((tmp_path / "results.json").read_text())
    cases = results["runs"]["1"]["cases"]
    assert {c["kernel"] for c in cases} == {"spmv", "ttv"}
    for case in cases:
        coiter = case["systems"]["coiter"]
        assert coiter["status"] == "ok", case
        assert coiter["runs"] >= 5 and coiter["median_s"] > 0
        assert case["systems"]["scipy"]["status"] in ("ok", "not installed")
    assert results["runs"]["1"]["overhead"]["systems"]["coiter"]["status"] == "ok"
    assert results["compile"]["cold"]["kernels"]["spmv"]["total_s"] > 0
    assert (tmp_path / "summary.md").exists()
