"""``schedule="auto"``: search the autoscheduler's templates on the actual operands.

The winner is cached per (expression, formats, value types, size class) in memory and on disk
(``autotune.json`` in the kernel cache directory, or ``$COITER_AUTOTUNE_FILE``), so later calls, and later
processes, on operands of the same size class reuse it without searching. Every
candidate's result is checked against the default schedule's before its time counts.

A search that takes more than half a second shows a progress bar on the terminal when tqdm
is installed (``COITER_PROGRESS=1`` shows it anywhere, ``0`` never).
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

import numpy as np

from ..concrete.autoschedule import templates
from ..concrete.commands import Command, parse_commands
from ..concrete.stmt import ConcreteProgram
from ..errors import ScheduleError
from ..formats.storage import Storage
from .compiler import cache_dir
from .trust import owned_file

REPEAT = 3
PROGRESS_DELAY = 0.5  # seconds a search runs before its progress bar appears
T = TypeVar("T")
# results may differ in the last bits: atomics and reductions reorder sums
RTOL, ATOL = 1e-9, 1e-12


def size_class(storages: Mapping[str, Storage]) -> str:
    """Operand value types and sizes rounded to powers of two: schedules tuned on one
    input carry over to inputs of about the same size."""
    parts = []
    for name in sorted(storages):
        t = storages[name]
        nnz = t.nnz
        parts.append(f"{name}:{t.vals.dtype}:{'x'.join(str(round(math.log2(d + 1))) for d in t.shape)}:{round(math.log2(nnz + 1))}")
    return ",".join(parts)


def _store() -> Path:
    """``$COITER_AUTOTUNE_FILE``, else ``autotune.json`` in the kernel cache directory."""
    override = os.environ.get("COITER_AUTOTUNE_FILE")
    return Path(override) if override else cache_dir() / "autotune.json"


def _load() -> dict[str, str]:
    """The stored winners; nothing from a file another user could have written."""
    path = _store()
    if not owned_file(path):
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def _save(key: str, value: str) -> None:
    """Add one winner to the store (written whole and renamed, so readers never see half;
    under a lock, so two processes saving at once both keep their winners)."""
    path = _store()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = _load()
        data[key] = value
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)


def _spelled(commands: tuple[Command, ...]) -> str:
    return ",".join(str(c) for c in commands)


def _same(a: Storage, b: Storage) -> bool:
    if a.shape != b.shape:
        return False
    ca, va = a.to_coords()
    cb, vb = b.to_coords()
    keep_a, keep_b = va != 0, vb != 0  # explicit zeros do not count
    order_a = np.lexsort(ca[:, keep_a][::-1]) if ca.size else np.zeros(0, np.int64)
    order_b = np.lexsort(cb[:, keep_b][::-1]) if cb.size else np.zeros(0, np.int64)
    xa, xb = ca[:, keep_a][:, order_a], cb[:, keep_b][:, order_b]
    return xa.shape == xb.shape and bool(np.array_equal(xa, xb)) and \
        bool(np.allclose(va[keep_a][order_a], vb[keep_b][order_b], rtol=RTOL, atol=ATOL))


def _time(run: Callable[[], Any]) -> float:
    times = []
    for _ in range(REPEAT):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return median(times)


def faster(first: Callable[[], Any], second: Callable[[], Any], rounds: int = 2) -> bool:
    """Whether ``first`` runs faster than ``second``: after one untimed call each (compiling,
    first touches), the smaller of ``rounds`` alternating timed calls of each."""
    first()
    second()
    best = [math.inf, math.inf]
    for _ in range(rounds):
        for k, fn in enumerate((first, second)):
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best[0] <= best[1]


def progress(items: Iterable[T], total: int, what: str) -> Iterator[T]:
    """``items``, with a tqdm progress bar on stderr while they are consumed: on a terminal,
    or always with ``COITER_PROGRESS=1``; never with ``COITER_PROGRESS=0`` or without tqdm."""
    setting = os.environ.get("COITER_PROGRESS", "").strip()
    if setting == "0":
        return iter(items)
    try:
        from tqdm import tqdm
    except ImportError:
        return iter(items)
    return iter(tqdm(items, total=total, desc=what, unit="schedule", leave=False, file=sys.stderr,
                     delay=PROGRESS_DELAY if setting != "1" else 0,
                     disable=False if setting == "1" else None))  # None: only on a terminal


class AutoTuner:
    """Chooses and remembers schedules for one kernel."""

    def __init__(self, key: str, target: str = "c") -> None:
        self.key = key
        self.target = target
        self.winners: dict[str, tuple[Command, ...]] = {}
        self.trials: dict[str, list[tuple[str, float]]] = {}  # size class -> (schedule, seconds)

    def schedule(self, prog: ConcreteProgram, storages: Mapping[str, Storage],
                 run: Callable[[tuple[Command, ...]], Storage],
                 reference: Callable[[], Storage]) -> tuple[Command, ...]:
        """The best commands for the operand ``storages``' size class; ``run(commands)``
        computes the kernel with a schedule, ``reference()`` with the default schedule on
        the CPU. Searches only on the first call per size class."""
        cls = size_class(storages)
        if cls in self.winners:
            return self.winners[cls]
        candidates = templates(prog, self.target)
        stored = _load().get(f"{self.key}|{cls}")
        # a stored winner is taken only if it is one of the schedules a search would try
        if stored is not None and stored in {"", *(_spelled(c.commands) for c in candidates)}:
            self.winners[cls] = parse_commands(stored) if stored else ()
            return self.winners[cls]
        if not candidates:
            raise ScheduleError(f"schedule='auto': no {self.target} template applies to {prog.stmt}")
        expected = reference()
        trials: list[tuple[str, float]] = []
        best: tuple[float, tuple[Command, ...]] = (math.inf, ())
        for cand in progress(candidates, len(candidates), f"autotuning {self.key.split('|')[0]}"):
            out = run(cand.commands)
            if not _same(out, expected):
                continue  # never pick a schedule whose result differs
            seconds = _time(lambda: run(cand.commands))
            trials.append((str(cand), seconds))
            if seconds < best[0]:
                best = (seconds, cand.commands)
        self.trials[cls] = trials
        self.winners[cls] = best[1]
        _save(f"{self.key}|{cls}", _spelled(best[1]))
        return best[1]
