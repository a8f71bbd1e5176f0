"""``python -m benchmarks run``: the benchmark suite's entry point.

The parent process converts the data once, measures STREAM triad and coiter's compile
times, then starts one worker process per thread count (thread variables set before
the libraries load), gathers their results and writes the reports.
"""
from __future__ import annotations

import argparse
import datetime
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import busy, data, plots, report, stream, targets
from .analysis import threads_label
from .environment import describe, thread_env
from .kernels import KERNELS
from .peers import SYSTEMS
from .settings import DEFAULT_DATA, DEFAULT_OUT, REPO_ROOT, Settings
from .worker import RESTART_STATUS

PEER_KEYS = [k for k in SYSTEMS if k != "coiter"]
# rough seconds per (kernel, input) case with every peer, when no earlier run tells better
FALLBACK_CASE_S = {True: 1.0, False: 2.5}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description="coiter's benchmark suite against its peers.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the suite and write docs/benchmarks/ (or --out)")
    run.add_argument("--quick", action="store_true",
                     help="small inputs and short timings, to check correctness (under 2 minutes)")
    run.add_argument("--kernels", nargs="+", choices=list(KERNELS), default=list(KERNELS),
                     metavar="KERNEL", help=f"kernels to run (default all: {' '.join(KERNELS)})")
    run.add_argument("--threads", nargs="+", type=int, default=[1, 2], metavar="N",
                     help="thread counts, one worker process each (default: 1 2)")
    run.add_argument("--peers", nargs="+", choices=PEER_KEYS, default=PEER_KEYS, metavar="PEER",
                     help=f"peers to compare with (default all: {' '.join(PEER_KEYS)})")
    run.add_argument("--inputs", nargs="+", default=[], metavar="NAME",
                     help="only inputs whose name contains one of these strings")
    run.add_argument("--gen-size", type=int, metavar="N",
                     help="rows of the generated matrices (default 250000, quick 2000)")
    run.add_argument("--data", type=Path, default=DEFAULT_DATA,
                     help="directory with matrices/*.mtx.gz and tensors/*.tns.gz")
    run.add_argument("--out", type=Path, default=None,
                     help=f"where reports are written (default: {DEFAULT_OUT.relative_to(REPO_ROOT)}, "
                          "a temporary folder with --quick, whose small runs must not replace the "
                          "committed results)")
    return p


def _estimate_s(settings: Settings, n_cases: int) -> tuple[float, str]:
    """Expected seconds of the worker runs: the last run's pace in ``out`` when it was of
    the same mode, else a rough constant per case."""
    previous = Path(settings.out_dir) / "results.json"
    try:
        old = json.loads(previous.read_text())
        if old["settings"]["quick"] == settings.quick:
            runs = old["runs"].values()
            per_case = sum(r["elapsed_s"] for r in runs) / max(sum(len(r["cases"]) for r in runs), 1)
            return per_case * n_cases * len(settings.threads), "from the last run's pace"
    except (OSError, ValueError, KeyError):
        pass
    return FALLBACK_CASE_S[settings.quick] * n_cases * len(settings.threads), "rough guess"


def _print_stream(result: dict[str, Any], note: str = "") -> None:
    text = result.get("error") or ", ".join(f"{threads_label(t)} {g:.1f} GB/s" for t, g in result["gbs"].items())
    print(f"STREAM triad{f' ({note})' if note else ''}: {text}")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


COLD_RUNS = 3  # processes, each with an empty kernel cache: cold compile is their median


def _compile_probes(kernels: list[str]) -> dict[str, Any]:
    """Cold compile (empty kernel cache; the median of COLD_RUNS processes, each with a cache
    of its own: one compile on a shared machine varies by a third) and first-call latency
    (new process, kernels on disk) of each kernel."""
    cmd = [sys.executable, "-m", "benchmarks.suite.compile_probe", *kernels]
    probes = []
    with tempfile.TemporaryDirectory(prefix="coiter-cold-cache-") as root:
        for n in range(COLD_RUNS + 1):
            cache = Path(root) / str(min(n, COLD_RUNS - 1))  # the warm run reuses the last cache
            env = thread_env(1) | {"COITER_CACHE_DIR": str(cache)}
            proc = subprocess.run(cmd, env=env, cwd=REPO_ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else
                        f"exit status {proc.returncode}"}
            probes.append(json.loads(proc.stdout))
    *colds, warm = probes
    cold = {"import_s": statistics.median(c["import_s"] for c in colds), "runs": len(colds),
            "kernels": {k: {field: statistics.median(c["kernels"][k][field] for c in colds)
                            for field in ("compile_s", "first_call_s", "total_s")}
                        | {"runs_total_s": [c["kernels"][k]["total_s"] for c in colds]}
                        for k in kernels}}
    return {"cold": cold, "warm": warm}


def _worker(settings: Settings, settings_path: Path, threads: int) -> dict[str, Any]:
    """One thread count's results. A worker stuck in a first call for longer than
    ``call_timeout_s``, or killed during one (the kernel's out-of-memory killer), is started
    again without that call (see worker.py). One killed elsewhere is started again at the
    case it was in, unless it died there before; then it leaves the cases it finished. One
    that stopped between cases because its memory was full is started again after them."""
    out = settings_path.with_name(f"run-{threads}.json")
    state = settings_path.with_name(f"state-{threads}.json")
    state.write_text(json.dumps({"slow": []}))
    cmd = [sys.executable, "-m", "benchmarks.suite.worker", str(settings_path), str(threads),
           str(out), str(state)]
    finished = -1  # cases done when the worker last died outside a first call
    while True:
        proc = subprocess.Popen(cmd, env=thread_env(threads), cwd=REPO_ROOT)
        stuck = None
        while proc.poll() is None and stuck is None:
            time.sleep(0.5)
            now = _read_state(state)
            if now.get("in_call") and time.time() - now["since"] > settings.call_timeout_s:
                stuck = now
        if stuck is None and proc.returncode == RESTART_STATUS:
            # stopped between cases, its memory full (worker.py): a fresh one resumes after them
            print(f"\nthe {threads_label(threads)} worker held over "
                  f"{settings.worker_memory_fraction:.0%} of memory after {_cases_done(out)} cases: "
                  "starting a fresh one", file=sys.stderr)
            continue
        died = proc.returncode not in (None, 0)
        if stuck is None and died and _read_state(state).get("in_call"):
            stuck = _read_state(state)
        if stuck is None and died and _cases_done(out) > finished:
            # killed between first calls (memory a long-lived worker gathered over its
            # cases): a fresh worker resumes at the case it was in, once per case
            finished = _cases_done(out)
            print(f"\nthe {threads_label(threads)} worker died (exit status {proc.returncode}) after "
                  f"{finished} cases: restarting it", file=sys.stderr)
            continue
        if stuck is None:
            break
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        kernel, name, system, work = stuck["in_call"]
        if died:
            reason = f"the worker died in this call (exit status {proc.returncode}; -9: out of memory)"
        else:
            reason = f"no result within {settings.call_timeout_s:g} s (the worker was stopped)"
        print(f"\n{system} {kernel} on {name}: {reason}; restarting the worker without it", file=sys.stderr)
        state.write_text(json.dumps({"slow": stuck["slow"] + [[kernel, system, work, name, reason]]}))
    result = json.loads(out.read_text()) if out.exists() else \
        {"threads": threads, "systems": {}, "overhead": {"systems": {}}, "cases": [], "elapsed_s": 0.0}
    if proc.returncode != 0:
        result["error"] = f"worker exited with status {proc.returncode} after {len(result['cases'])} cases"
    return result


def _cases_done(out: Path) -> int:
    """Cases a worker has written to its results file."""
    try:
        return len(json.loads(out.read_text())["cases"])
    except (OSError, ValueError, KeyError):
        return 0


def _read_state(state: Path) -> dict[str, Any]:
    """The worker's STATE.json, or nothing while it is being rewritten."""
    try:
        return json.loads(state.read_text())
    except (OSError, ValueError):
        return {}


def coiter_failures(results: dict[str, Any]) -> list[str]:
    """Cases where coiter's result was wrong or it raised, and workers that died."""
    bad = [f"{threads_label(t)}: {run['error']}" for t, run in results["runs"].items() if "error" in run]
    for t, run in results["runs"].items():
        for case in run["cases"]:
            rec = case.get("systems", {}).get("coiter", {})
            if rec.get("status") in ("wrong", "error") or case.get("status") == "error":
                bad.append(f"{case['kernel']} {case['input']['name']} ({threads_label(t)}): "
                           f"{rec.get('status', case.get('status'))}: {rec.get('reason', case.get('reason'))}")
    return bad


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    data_dir = args.data if args.data.is_dir() else None
    if data_dir is None:
        print(f"note: no data directory at {args.data}; generated inputs only", file=sys.stderr)
    out = args.out
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="coiter-bench-quick-")) if args.quick else DEFAULT_OUT
    settings = Settings.for_mode(
        args.quick, kernels=args.kernels, threads=args.threads, peers=args.peers,
        data_dir=str(data_dir) if data_dir else None, out_dir=str(out), inputs=args.inputs,
        gen_size=args.gen_size)
    out_dir = Path(settings.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    refs = [r for r in data.selected(settings)
            if any(r.takes(k, KERNELS[k].kind) for k in settings.kernels)]
    n_cases = sum(r.takes(k, KERNELS[k].kind) for r in refs for k in settings.kernels)
    print(f"{'quick' if settings.quick else 'full'} run: {len(refs)} inputs, "
          f"{len(settings.kernels)} kernels ({n_cases} cases), threads {settings.threads}, "
          f"peers {' '.join(settings.peers) or '(none)'}")
    for ref in refs:
        if ref.path is not None:
            data.convert(ref.path)  # once; later runs and the workers read the cache
    estimate, basis = _estimate_s(settings, n_cases)
    print(f"estimated time: {_duration(estimate)} ({basis}); converted data in {data.cache_dir()}")

    stream_before = stream.measure(settings.threads, settings.stream_elements, settings.stream_reps)
    _print_stream(stream_before)
    compile_result = _compile_probes(sorted(set(settings.kernels) | {"spmv"}, key=list(KERNELS).index))
    if "error" in compile_result:
        print(f"compile probe failed: {compile_result['error']}")
    else:
        cold = compile_result["cold"]["kernels"]
        print("cold compile (empty cache): " + ", ".join(
            f"{KERNELS[k].title} {v['total_s'] * 1e3:.0f} ms" for k, v in cold.items()))

    runs = {}
    with tempfile.TemporaryDirectory(prefix="coiter-bench-") as tmp:
        settings_path = Path(tmp) / "settings.json"
        settings_path.write_text(settings.to_json())
        for threads in settings.threads:
            runs[str(threads)] = _worker(settings, settings_path, threads)
        if "spmv" in settings.kernels:
            print("busy machine: SpMV with one core kept busy by a spinning process")
            busy_result = busy.measure(settings, settings_path)

    stream_result = stream.best(
        stream_before, stream.measure(settings.threads, settings.stream_elements, settings.stream_reps))
    _print_stream(stream_result, "best of before and after")
    results: dict[str, Any] = {
        "schema": 1,
        "command": "python -m benchmarks " + " ".join(map(shlex.quote, sys.argv[1:])),
        "started_utc": started,
        "settings": json.loads(settings.to_json()),
        "environment": describe(),
        "stream": stream_result,
        "compile": compile_result,
        "runs": runs,
    }
    if "spmv" in settings.kernels:
        results["busy"] = busy_result
    results["targets"] = targets.evaluate(results)
    results["elapsed_s"] = time.perf_counter() - start
    report.write_json(results, out_dir / "results.json")
    written = plots.write_all(results, out_dir)
    report.write_summary(results, out_dir / "summary.md", written)
    report.print_terminal(results)
    print(f"\nwrote {out_dir / 'summary.md'}, results.json" + (", " + ", ".join(written) if written else
                                                              " (no plots: matplotlib not installed)"))
    print(f"elapsed: {_duration(results['elapsed_s'])} (estimated {_duration(estimate)} for the workers)")
    failures = coiter_failures(results)
    for line in failures:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run(args)
