"""Shared helpers for the benchmark scripts: single-threaded setup, timing, checks, tables.

Import this module before NumPy, SciPy or coiter: it pins every threading runtime
(OpenMP, MKL, OpenBLAS, ...) to one thread through environment variables, which the
runtimes read only when they load.

Timing method (``bench_group``): each function is run once and its result checked
against a reference (``numpy.testing.assert_allclose``); only then are ``warmup`` untimed
calls and ``repeat`` timed calls (``time.perf_counter``) made, round-robin over a group
of cases, and the median, minimum and maximum of the timed calls are reported. Nothing
asserts a time.
"""
from __future__ import annotations

import os

THREAD_VARIABLES = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS",
)
for _var in THREAD_VARIABLES:
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from statistics import median  # noqa: E402
from typing import Any, Callable, Mapping, Sequence  # noqa: E402

import numpy as np  # noqa: E402
import scipy  # noqa: E402

from suite.environment import command_output, cpu_model  # noqa: E402 - shared with the suite

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"


@dataclass(frozen=True)
class Timing:
    """Seconds per call over ``runs`` timed calls."""

    median: float
    min: float
    max: float
    runs: int

    def ms(self) -> str:
        """Median in milliseconds, for tables."""
        return f"{self.median * 1e3:.3f}"

    def ms_range(self) -> str:
        """``median [min-max]`` in milliseconds."""
        return f"{self.median * 1e3:.3f} [{self.min * 1e3:.3f}-{self.max * 1e3:.3f}]"


@dataclass(frozen=True)
class Skipped:
    """A measurement that was not made: ``reason`` for the table cell, ``detail`` (the
    full error message, if any) for a note under the table."""

    reason: str
    detail: str = ""

    def ms(self) -> str:
        return self.reason

    ms_range = ms


def failure(exc: BaseException, label: str = "unavailable") -> Skipped:
    """Skipped cell for an exception: ``label (ExceptionType)``, message as the detail."""
    return Skipped(f"{label} ({type(exc).__name__})", short_error(exc, 300))


Result = Timing | Skipped


def as_array(out: Any) -> np.ndarray:
    """Dense ndarray of a kernel result: coiter Tensor, SciPy sparse or array-like."""
    if hasattr(out, "to_numpy"):
        return out.to_numpy()
    if hasattr(out, "toarray"):
        return out.toarray()
    return np.asarray(out)


Check = Callable[[Any], None]  # raises AssertionError when a result is wrong
Case = tuple[Callable[[], Any], Check | None]  # a function to time and its check


def close_to(ref: np.ndarray, rtol: float = 1e-9) -> Check:
    """Checker: ``assert_allclose`` of a result against ``ref`` (atol scaled to ``ref``)."""
    atol = rtol * max(float(np.max(np.abs(ref))) if ref.size else 1.0, 1.0)

    def verify(out: Any) -> None:
        np.testing.assert_allclose(as_array(out).reshape(ref.shape), ref, rtol=rtol, atol=atol)

    return verify


def short_error(exc: BaseException, limit: int = 90) -> str:
    """One-line ``Type: message`` of ``exc``, cut to ``limit`` characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def bench_group(cases: Mapping[str, Case | Skipped], repeat: int, warmup: int = 2,
                min_seconds: float = 0.0, max_rounds: int = 1000) -> dict[str, Result]:
    """Verify, warm up and time a group of cases ``name -> (fn, verify)``.

    Each ``fn`` is called once and its result passed to ``verify`` (which raises
    AssertionError when it is wrong); then every case gets ``warmup`` untimed calls, and
    the ``repeat`` timed calls are made round-robin over the cases, so that load changes
    on a shared machine hit all of them alike. With ``min_seconds`` the rounds go on
    (up to ``max_rounds``) until every case has been timed that long in all: a case of a
    tenth of a millisecond beside one of milliseconds then gets hundreds of calls, not a
    median of five noisy ones. A case that raises, or whose result is wrong, becomes a
    :class:`Skipped` cell (so one failing format does not end a long run); ``Skipped``
    inputs pass through. Results keep the order of ``cases``.
    """
    out: dict[str, Result] = {}
    live: dict[str, Callable[[], Any]] = {}
    for name, case in cases.items():
        if isinstance(case, Skipped):
            out[name] = case
            continue
        fn, verify = case
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - any failure becomes a table cell
            out[name] = failure(exc)
            continue
        try:
            if verify is not None:
                verify(result)
        except AssertionError as exc:
            out[name] = Skipped("WRONG RESULT", short_error(exc, 300))
            print(f"    WRONG RESULT ({name}): {out[name].detail}")
            continue
        live[name] = fn
    for fn in live.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in live}
    rounds = 0
    while live and (rounds < repeat or (rounds < max_rounds and min(
            sum(ts) for ts in times.values()) < min_seconds)):
        for name, fn in live.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        rounds += 1
    for name, ts in times.items():
        out[name] = Timing(median(ts), min(ts), max(ts), len(ts))
    return {name: out[name] for name in cases}


def ratio(num: Result, den: Result) -> str:
    """``num / den`` of the medians, formatted; ``-`` when either is missing."""
    if isinstance(num, Timing) and isinstance(den, Timing) and den.median > 0:
        return f"{num.median / den.median:.2f}"
    return "-"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """GitHub markdown table of ``rows`` (cells converted with ``str``)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain aligned table for the terminal."""
    cells = [list(map(str, headers))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*cells[0]), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*r) for r in cells[1:]]
    return "\n".join(out)




def script_parser(doc: str, repeat: int) -> argparse.ArgumentParser:
    """A benchmark script's argument parser, described by its docstring ``doc``'s first
    line: ``--repeat`` (timed calls per case, ``repeat`` by default) and ``--out`` (the
    report's folder, docs/benchmarks by default)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=repeat)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks")
    return parser


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that ran ``script`` (a path under benchmarks/) with ``argv`` (the
    command line's arguments when None), in backticks for a report."""
    import shlex
    import sys

    args = shlex.join(sys.argv[1:] if argv is None else argv)
    return f"`python benchmarks/{Path(script).name}{' ' + args if args else ''}`"


def write_report(directory: Path, name: str, lines: Sequence[str]) -> None:
    """Write the markdown ``lines`` to ``directory/name`` (made if needed) and say where."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("\n".join(lines))
    print(f"wrote {directory / name}")


def machine_info(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Machine, library versions and thread settings, for the report header."""
    import coiter

    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    commit = command_output(["git", "rev-parse", "--short", "HEAD"]) or "?"
    if command_output(["git", "--no-optional-locks", "status", "--porcelain", "src"]):
        commit += " + uncommitted changes in src/"
    cc = os.environ.get("CC", "cc")
    cc_version = (command_output([cc, "--version"]) or "?").splitlines()[0]
    info = {
        "cpu": f"{cpu_model()} ({os.cpu_count()} logical CPUs), {mem} RAM",
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy / scipy": f"{np.__version__} / {scipy.__version__}",
        "coiter": f"{coiter.__version__} (git {commit})",
        "C compiler": f"{cc_version}; COITER_CFLAGS={os.environ.get('COITER_CFLAGS', 'coiter default')}",
        "threads": ", ".join(f"{v}={os.environ[v]}" for v in THREAD_VARIABLES[:3]),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    info.update(extra or {})
    return info
