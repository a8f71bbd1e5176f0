"""The ``coiter`` command line, run as ``python -m coiter`` in a subprocess with a
temporary kernel cache: version, the SpMV demo (its result checked against SciPy by the
demo itself), cache commands, and bad input ending in a message, not a traceback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import coiter


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COITER_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "coiter", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_version(tmp_path: Path) -> None:
    out = _run(tmp_path, "--version")
    assert out.returncode == 0 and out.stdout.strip() == f"coiter {coiter.__version__}"


def test_demo_on_the_bundled_matrix_agrees_with_scipy(tmp_path: Path) -> None:
    out = _run(tmp_path, "demo", "--repeat", "3")
    assert out.returncode == 0, out.stderr
    assert "bcsstk16" in out.stdout and "nnz            290378" in out.stdout
    assert float(out.stdout.split("max rel error")[1].split()[0]) < 1e-13


def test_cache_commands_use_the_given_folder(tmp_path: Path) -> None:
    assert _run(tmp_path, "cache-dir").stdout.strip() == str(tmp_path / "cache")
    out = _run(tmp_path, "clear-cache")
    assert out.returncode == 0 and str(tmp_path / "cache") in out.stdout


def test_demo_on_a_tensor_file_says_what_it_needs(tmp_path: Path) -> None:
    tensor = tmp_path / "t.tns"
    tensor.write_text("1 1 1 1.5\n2 3 1 2.5\n")
    out = _run(tmp_path, "demo", "--matrix", str(tensor))
    assert out.returncode == 2 and "order-3 tensor" in out.stderr and "Traceback" not in out.stderr


def test_demo_on_a_missing_file(tmp_path: Path) -> None:
    out = _run(tmp_path, "demo", "--matrix", str(tmp_path / "none.mtx"))
    assert out.returncode == 2 and "cannot read" in out.stderr and "Traceback" not in out.stderr
