"""One thread count's measurements, run in its own process:

    python -m benchmarks.suite.worker SETTINGS.json THREADS OUT.json STATE.json

The parent sets OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS... before this
process starts (threading runtimes read them only when they load); here the libraries
that take a thread count at run time (GraphBLAS, torch, MKL, threadpoolctl's pools) are
set to the same number.

Inputs run smallest first, and a system too slow for a kernel on one input is not run on
that kernel's bigger cases (``Case.work``): STATE.json keeps that list, "slow", as
[kernel, system, work, input, reason] entries.

A call into a peer cannot be interrupted, and some peers take minutes on some inputs.
So the worker also writes into STATE.json which first call it is in ("in_call":
[kernel, input, system, work]); the parent kills a worker stuck past ``call_timeout_s``,
adds that call to "slow" and starts the worker again, which resumes after the cases in
OUT.json. A worker that holds more than ``Settings.worker_memory_fraction`` of the
machine's memory after a case (some peers leak: torch's SpGEMM and SpAdd3 keep about their
result per call) exits with RESTART_STATUS and is started again the same way.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import data, gathers
from .analysis import threads_label
from .check import assert_matches
from .kernels import KERNELS, Case, Kernel, Skip
from .peers import SYSTEMS, NotApplicable, Peer, TooSlow, Unavailable, coiter_peer, load
from .progress import Progress
from .settings import Settings
from .timing import per_call, round_robin, timed_call

Systems = dict[str, Peer | Unavailable]
FIRST_CALL_ALLOWANCE_S = 3.0  # one-time work of a first call, e.g. pydata's Numba JIT
RESTART_STATUS = 75  # exit status of a worker that stops between cases to be started afresh


def short(exc: BaseException, limit: int = 300) -> str:
    """One-line ``Type: message``, cut to ``limit`` characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_json(path: Path, value: Any) -> None:
    """Write atomically: the parent may read the file at any moment."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)


def load_systems(settings: Settings, threads: int) -> Systems:
    """coiter and the selected peers, each set to ``threads`` threads."""
    systems: Systems = {}
    for key in SYSTEMS:
        if key != "coiter" and key not in settings.peers:
            continue
        system = load(key, settings)
        if isinstance(system, Peer):
            system.set_threads(threads)
        systems[system.name] = system
    return systems


class Worker:
    def __init__(self, settings: Settings, threads: int, out_path: Path, state_path: Path) -> None:
        self.settings, self.threads = settings, threads
        self.out_path, self.state_path = out_path, state_path
        self.slow: list[list[Any]] = json.loads(state_path.read_text())["slow"]
        self.systems = load_systems(settings, threads)
        self.pools = thread_pools(threads)

    def _state(self, in_call: list[Any] | None) -> None:
        """Tell the parent which first call is running (None: none) and what was slow."""
        write_json(self.state_path, {"slow": self.slow, "in_call": in_call, "since": time.time()})

    def _known_slow(self, kernel: str, system: str, work: int, input_name: str) -> str | None:
        """Why ``system`` is too slow for this case, if it was on this or a smaller one."""
        for k, s, w, name, reason in self.slow:
            if k == kernel and s == system and work >= w:
                return reason if name == input_name else f"too slow already on {name}: {reason}"
        return None

    def checked(self, name: str, case: Case, input_name: str) -> tuple[dict[str, Any], Any]:
        """Prepare the case for one system and check its result against the reference.
        Returns the system's record and, when it passed, the call to time."""
        system, limit = self.systems[name], self.settings.slow_limit_s
        if isinstance(system, Unavailable):
            return {"status": system.status, "reason": system.reason}, None
        slow = self._known_slow(case.kernel.name, name, case.work, input_name)
        if slow is not None:
            return {"status": "too slow", "reason": slow}, None
        try:
            prepared = system.prepare(case)
        except NotApplicable as exc:
            return {"status": "n/a", "reason": str(exc)}, None
        except TooSlow as exc:
            return {"status": "too slow", "reason": str(exc)}, None
        except Exception as exc:  # noqa: BLE001 - one failing system must not end the run
            return {"status": "error", "reason": short(exc)}, None
        self._state([case.kernel.name, input_name, name, case.work])
        try:
            out, seconds = timed_call(prepared.call)
            got = prepared.result(out)
        except Exception as exc:  # noqa: BLE001
            return {"status": "error", "reason": short(exc)}, None
        finally:
            self._state(None)
        del out
        try:
            assert_matches(got, case.reference, prepared.rtol)
        except AssertionError as exc:
            return {"status": "wrong", "reason": short(exc, 600), "rtol": prepared.rtol}, None
        record = {"status": "ok", "check_s": seconds, "rtol": prepared.rtol}
        if seconds > limit:
            # a first call may include one-time work (Numba JIT, plan caches): judge a
            # second one, unless the first was slow beyond what that work costs
            if seconds < limit + FIRST_CALL_ALLOWANCE_S:
                seconds = timed_call(prepared.call)[1]
            if seconds > limit:
                reason = f"one call takes {seconds:.1f} s > {limit:g} s limit"
                self.slow.append([case.kernel.name, name, case.work, input_name, reason])
                self._state(None)
                record.update(status="too slow", reason=reason)
                return record, None
        return record, prepared.call

    def run_case(self, kernel: Kernel, inp: data.Input) -> dict[str, Any]:
        """Every system on one kernel and input: checked, then timed round-robin."""
        s, start = self.settings, time.perf_counter()
        record: dict[str, Any] = {"kernel": kernel.name, "input": inp.describe(), "systems": {}}
        try:
            case = kernel.build(inp, s)
        except Skip as exc:
            return record | {"status": "skipped", "reason": str(exc)}
        except Exception as exc:  # noqa: BLE001
            return record | {"status": "error", "reason": short(exc)}
        record |= {"status": "ok", "notes": case.notes, "min_bytes": case.min_bytes}
        calls = {}
        for name in self.systems:
            record["systems"][name], call = self.checked(name, case.private(), inp.name)
            if call is not None:
                calls[name] = call
        # the checked calls may include one-time work (coiter's compile, Numba's JIT): the
        # number of runs comes from a second, warm call of each system instead, which
        # jf17k-4ary's TTV, whose compile alone took 0.43 s, had cut to the minimum 5 runs
        first = {name: timed_call(call)[1] for name, call in calls.items()}
        gap = s.switch_gap_s if self.threads > 1 else 0.0
        for name, timing in round_robin(calls, first, s.case_budget_s, s.min_runs, s.max_runs,
                                        gap, s.batches, s.batch_warmup).items():
            record["systems"][name].update(timing.as_dict())
        if kernel.name == "spmv":
            record["gathers"] = gathers.measure(case.ops["A"].indices, case.ops["x"])
        record["wall_s"] = time.perf_counter() - start  # with conversions and checks
        return record

    def overhead(self) -> dict[str, Any]:
        """Per-call time of every system on a 10 x 10 SpMV (coiter: cached kernel)."""
        inp = data.Matrix("tiny-10x10", "generated", data.tiny_matrix())
        case = KERNELS["spmv"].build(inp, self.settings)
        batch, batches = (100, 10) if self.settings.quick else (500, 30)
        out: dict[str, Any] = {"input": inp.describe(), "systems": {}}
        for name in self.systems:
            record, call = self.checked(name, case, inp.name)
            if call is not None:
                record.update(per_call(call, batch, batches).as_dict())
            out["systems"][name] = record
        if isinstance(self.systems.get("coiter"), Peer):
            # the same call through the compiled kernel, evaluate and einsum, one after another
            calls = coiter_peer.entry_points(case)
            timings = {name: [] for name in calls}
            for _ in range(3):
                for name, call in calls.items():
                    timings[name].append(per_call(call, batch, batches // 3 or 1).median_s)
            out["coiter_entry_points"] = {name: {"median_s": sorted(ts)[1]} for name, ts in timings.items()}
        return out

    def _memory_full(self) -> bool:
        """Whether this worker holds more than its share of the machine's memory (see
        ``Settings.worker_memory_fraction``); the parent starts a fresh one then."""
        rss = rss_mb()
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20
        return rss is not None and rss > self.settings.worker_memory_fraction * total

    def run(self) -> None:
        """Measure everything not measured yet, saving after every case (a killed worker
        loses only the case it was in)."""
        start = time.perf_counter()
        if self.out_path.exists():  # resumed after a stuck call
            result = json.loads(self.out_path.read_text())
            start -= result["elapsed_s"]
        else:
            result = {
                "threads": self.threads,
                "systems": {name: ({"status": "ok", "version": s.version, "threaded": s.threaded,
                                    "note": s.note} if isinstance(s, Peer) else
                                   {"status": s.status, "reason": s.reason})
                            for name, s in self.systems.items()},
                "thread_pools": self.pools,
                # other load on the machine distorts multi-threaded times most: keep it on record
                "load_average": {"start": list(os.getloadavg())},
                "overhead": self.overhead(),
                "cases": [],
            }
        done = {(c["kernel"], c["input"]["name"]) for c in result["cases"]}
        kernels = [KERNELS[k] for k in self.settings.kernels]
        refs = [r for r in data.selected(self.settings) if any(r.takes(k.name, k.kind) for k in kernels)]
        progress = Progress(sum(r.takes(k.name, k.kind) for r in refs for k in kernels),
                            f"{threads_label(self.threads)}", initial=len(done))
        for ref in refs:
            todo = [k for k in kernels if ref.takes(k.name, k.kind) and (k.name, ref.name) not in done]
            if not todo:
                continue
            inp = ref.load()
            for kernel in todo:
                result["cases"].append(self.run_case(kernel, inp) | {"rss_mb": rss_mb()})
                progress.step(f"{kernel.title} {inp.name}")
                result["elapsed_s"] = time.perf_counter() - start
                write_json(self.out_path, result)
                if self._memory_full():
                    sys.exit(RESTART_STATUS)
            del inp
        progress.close()
        result["load_average"]["end"] = list(os.getloadavg())
        result["elapsed_s"] = time.perf_counter() - start
        write_json(self.out_path, result)


def rss_mb() -> float | None:
    """This process's resident memory now, in MB (None where /proc is missing): kept per
    case, to find what a long-lived worker accumulates."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def thread_pools(threads: int) -> list[dict[str, Any]]:
    """Limit every BLAS/OpenMP pool threadpoolctl finds to ``threads`` and list them."""
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        return []
    threadpool_limits(threads)
    return [{k: v for k, v in pool.items() if k in ("user_api", "internal_api", "version",
                                                     "num_threads", "filepath")}
            for pool in threadpool_info()]


def main(argv: list[str]) -> None:
    settings_path, threads, out_path, state_path = argv
    settings = Settings.from_json(Path(settings_path).read_text())
    Worker(settings, int(threads), Path(out_path), Path(state_path)).run()


if __name__ == "__main__":
    main(sys.argv[1:])
