"""Run fuzz cases in worker subprocesses, so that a crash (a segfault in a generated kernel,
an abort) is reported with its case number and the run goes on.

    python -m tests.fuzz.run --cases 20000 --seed 0 --jobs 2
    python -m tests.fuzz.run --seed 0 --show 1234      # one case's code, run in this process

Run from the repository root. Prints the counts and, for each failure, its case number,
kind, detail and a one-line reproduction; exits 1 when any case failed. Kernels compile
into ``$COITER_CACHE_DIR`` if set, else into a temporary folder removed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

from .cases import CRASH, FAILURES, make_case, run_case, script

ROOT = Path(__file__).resolve().parents[2]
CASE_TIMEOUT_S = 300  # a case running longer counts as a crash (hang)
CASES_PER_WORKER = 300  # workers are replaced after this many cases (loaded kernels add up)


class Worker:
    """A ``--worker`` subprocess answering case numbers with JSON outcomes, one per line."""

    def __init__(self, seed: int, exclude: bool) -> None:
        self.log: IO[bytes] = tempfile.TemporaryFile()
        flags = [] if exclude else ["--include-known-bugs"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.run", "--worker", "--seed", str(seed), *flags],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, bufsize=0,
            start_new_session=True)  # a Ctrl-C at the terminal stops the runner, not the case
        self.done = 0

    def run(self, number: int) -> dict[str, Any] | None:
        """The outcome of case ``number``, or None when the worker died or hung (then it is
        gone, and :attr:`why` says what happened)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(f"{number}\n".encode())
        except BrokenPipeError:
            return self._lost("")
        if not select.select([self.proc.stdout], [], [], CASE_TIMEOUT_S)[0]:
            return self._lost(f"timeout after {CASE_TIMEOUT_S} s")
        line = self.proc.stdout.readline()
        if not line.endswith(b"\n"):
            return self._lost("")
        self.done += 1
        return json.loads(line)

    def _lost(self, why: str) -> None:
        self.proc.kill()
        rc = self.proc.wait()
        if not why:
            why = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
        self.log.seek(0)
        tail = [s for s in self.log.read().decode(errors="replace").splitlines() if s.strip()]
        self.why = why + (f"; stderr: {tail[-1].strip()[:200]}" if tail else "")
        self.log.close()
        return None

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()
        self.log.close()


def serve(seed: int, exclude: bool) -> None:
    """The worker loop: case numbers on stdin, outcomes on the original stdout (stdout itself
    goes to stderr, so nothing a case prints can break the protocol)."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        outcome = run_case(make_case(seed, int(line), exclude))
        out.write(json.dumps({"kind": outcome.kind, "detail": outcome.detail[:500]}) + "\n")
        out.flush()


def run(cases: range, seed: int, jobs: int, exclude: bool) -> dict[int, dict[str, Any]]:
    """Outcomes of ``cases`` by case number, run on ``jobs`` workers (those that finished,
    after a Ctrl-C)."""
    todo: queue.Queue[int] = queue.Queue()
    for n in cases:
        todo.put(n)
    results: dict[int, dict[str, Any]] = {}
    lock = threading.Lock()
    start = time.monotonic()

    def slot() -> None:
        worker: Worker | None = None
        while True:
            try:
                n = todo.get_nowait()
            except queue.Empty:
                break
            if worker is None or worker.done >= CASES_PER_WORKER:
                if worker is not None:
                    worker.close()
                worker = Worker(seed, exclude)
            outcome = worker.run(n)
            if outcome is None:
                outcome = {"kind": CRASH, "detail": worker.why}
                worker = None
            with lock:
                results[n] = outcome
                if len(results) % 500 == 0:
                    print(f"{len(results)} cases, {time.monotonic() - start:.0f} s", file=sys.stderr)
        if worker is not None:
            worker.close()

    threads = [threading.Thread(target=slot) for _ in range(jobs)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:  # finish the cases in progress, run no more
        print("interrupted", file=sys.stderr)
        while not todo.empty():
            todo.get_nowait()
        for t in threads:
            t.join()
    return results


def report(results: dict[int, dict[str, Any]], seed: int, exclude: bool) -> int:
    """Print the counts and the failures; the number of failures."""
    counts = Counter(r["kind"] for r in results.values())
    print(f"cases {len(results)}, " + ", ".join(
        f"{kind} {counts[kind]}" for kind in ("passed", "typed refusal", "excluded (known bug)", *FAILURES)))
    failed = sorted(n for n, r in results.items() if r["kind"] in FAILURES)
    for n in failed:
        print(f"case {n} [{results[n]['kind']}] {results[n]['detail']}")
        print(f"    {make_case(seed, n, exclude).describe()}")
    if failed:
        print(f"reproduce one with: python -m tests.fuzz.run --seed {seed} --show N")
    return len(failed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000, help="number of cases (default 1000)")
    parser.add_argument("--first", type=int, default=0, help="number of the first case (default 0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--include-known-bugs", action="store_true",
                        help="also run cases that cases.KNOWN_BUGS excludes")
    parser.add_argument("--show", type=int, metavar="N", help="print case N's code and run it here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    exclude = not args.include_known_bugs
    if args.worker:
        serve(args.seed, exclude)
        return 0
    if args.show is not None:
        case = make_case(args.seed, args.show, exclude_known_bugs=False)
        print(f"# {case.describe()}\n{script(case)}")
        outcome = run_case(case)
        print(f"# outcome: {outcome.kind} {outcome.detail}")
        return 0
    scratch = None
    if not os.environ.get("COITER_CACHE_DIR"):
        scratch = tempfile.mkdtemp(prefix="coiter-fuzz-")
        os.environ["COITER_CACHE_DIR"] = scratch
    try:
        start = time.monotonic()
        results = run(range(args.first, args.first + args.cases), args.seed, args.jobs, exclude)
        failures = report(results, args.seed, exclude)
        print(f"{time.monotonic() - start:.0f} s with {args.jobs} jobs")
        if len(results) < args.cases:
            print(f"interrupted: {len(results)} of {args.cases} cases ran")
            return 1
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
