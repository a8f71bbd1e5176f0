"""The hardware limit: STREAM-triad bandwidth per thread count (``triad.c``, compiled
with ``$CC -O3 -fopenmp``, best of several runs over arrays far larger than the caches,
measured before and after the benchmarks so a busy moment on a shared machine does not
set the bound)."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .environment import c_compile_command, failure, thread_env

SOURCE = Path(__file__).with_name("triad.c")


def measure(threads: list[int], elements: int, reps: int) -> dict[str, Any]:
    """``{"gbs": {threads: GB/s}, ...}``, or ``{"error": ...}`` when the triad cannot be
    built or run (no C compiler or no OpenMP): fractions of the bound are then omitted."""
    with tempfile.TemporaryDirectory(prefix="coiter-triad-") as tmp:
        exe = Path(tmp) / "triad"
        cmd = c_compile_command(SOURCE, exe, "-O3", "-fopenmp")
        out: dict[str, Any] = {"command": " ".join(cmd[:3]) + " triad.c", "elements": elements,
                               "array_bytes": 8 * elements, "reps": reps, "gbs": {}, "best_s": {}}
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            for n in threads:
                run = subprocess.run([str(exe), str(elements), str(reps)], env=thread_env(n),
                                     check=True, capture_output=True, text=True)
                got_threads, best, gbs, _ = run.stdout.split()
                out["gbs"][str(n)] = float(gbs)
                out["best_s"][str(n)] = float(best)
                out.setdefault("openmp_threads", {})[str(n)] = int(got_threads)
        except (OSError, subprocess.CalledProcessError, ValueError) as exc:
            return out | {"error": failure(exc)}
    return out


def best(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The faster of two measurements per thread count, both kept under "sessions"."""
    if "error" in before or "error" in after:
        return before if "error" in after else after
    out = dict(before, sessions=[before["gbs"], after["gbs"]])
    for key in ("gbs", "best_s"):
        pick = max if key == "gbs" else min
        out[key] = {t: pick(before[key][t], after[key][t]) for t in before[key]}
    return out
