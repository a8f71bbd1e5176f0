"""The machine and software a run measured, and the environment that sets a process's
thread count."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .settings import REPO_ROOT

# read by the threading runtimes when they load, so they are set before a worker starts
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "BLIS_NUM_THREADS", "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                    "NUMEXPR_NUM_THREADS")
PACKAGES = ("numpy", "scipy", "coiter", "sparse-dot-mkl", "mkl", "python-graphblas",
            "suitesparse-graphblas", "sparse", "numba", "tensora", "torch", "matplotlib",
            "tqdm", "platformdirs", "threadpoolctl")


# After a parallel call, Intel's OpenMP (MKL) keeps its threads spinning for 200 ms by
# default and OpenBLAS (NumPy dense) for up to 2**28 cycles, so in one process the next
# library's threads run beside spinning ones: MKL's 2-thread SpMV on lp_ship04l took
# 3.5 ms after coiter's (0.17 ms at 1 thread), and coiter's 2-thread SpMV on ego-Facebook
# 4 ms after NumPy's dense product (0.09 ms otherwise). GNU OpenMP (coiter, torch) spins
# for about a millisecond. The multi-threaded workers cap Intel's spin at 1 ms and
# OpenBLAS's at 2**4 cycles, and pause between systems (Settings.switch_gap_s).
SPIN_CAP = {"KMP_BLOCKTIME": "1", "OPENBLAS_THREAD_TIMEOUT": "4"}


def thread_env(threads: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment with every threading runtime set to ``threads`` (and,
    with more than one, Intel OpenMP's spinning after a region capped)."""
    env = dict(os.environ if base is None else base)
    env.update({var: str(threads) for var in THREAD_VARIABLES})
    if threads > 1:
        env.update({k: v for k, v in SPIN_CAP.items() if k not in env})
    return env


def c_compile_command(source: Path, out: Path, *flags: str) -> list[str]:
    """``$CC`` (default ``cc``) with ``flags``, compiling ``source`` to ``out``."""
    return [os.environ.get("CC", "cc"), *flags, str(source), "-o", str(out)]


def failure(exc: BaseException) -> str:
    """A failed compile or run in one line of at most 300 characters: the exception's type
    and the program's stderr, or the exception's message."""
    detail = getattr(exc, "stderr", "") or str(exc)
    return f"{type(exc).__name__}: {detail}"[:300]


def command_output(cmd: list[str]) -> str | None:
    """Stripped stdout of ``cmd`` run in the repository root; None when it fails."""
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=REPO_ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _meminfo_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def _cache_sizes() -> dict[str, str]:
    """Cache levels of CPU 0 from sysfs (Linux), e.g. {"L1d": "48K", "L3": "32768K"}."""
    out = {}
    for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (idx / "level").read_text().strip()
            kind = (idx / "type").read_text().strip()
            size = (idx / "size").read_text().strip()
        except OSError:
            continue
        out[f"L{level}{'d' if kind == 'Data' else 'i' if kind == 'Instruction' else ''}"] = size
    return out


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def describe() -> dict[str, Any]:
    """CPU, memory, OS, compiler, library versions and git commit of this run."""
    commit = command_output(["git", "rev-parse", "HEAD"]) or "unknown"
    # --no-optional-locks: only read, never refresh the index another process may be using
    dirty = command_output(["git", "--no-optional-locks", "status", "--porcelain", "--", "src"])
    cc = os.environ.get("CC", "cc")
    return {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "caches": _cache_sizes(),
        "memory_gib": _meminfo_gib(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "compiler": (command_output([cc, "--version"]) or "unknown").splitlines()[0],
        "cflags": os.environ.get("COITER_CFLAGS", "coiter default"),
        "git_commit": commit,
        "src_uncommitted_changes": bool(dirty),
        "load_average_at_start": list(os.getloadavg()),
        "versions": versions(),
    }
