"""Writing a run's results: the ratio tables for the terminal, results.json with every
raw number, and summary.md."""
from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import median
from typing import Any, Sequence

from . import analysis, targets
from .busy import ROUNDS as BUSY_ROUNDS
from .kernels import KERNELS
from .peers.coiter_peer import ENTRY_POINTS

HOW_TO_READ = ("ratio = peer time / coiter time (median of the timed runs): "
               "above 1 means coiter is faster")


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(map(str, headers))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def kernel_rows(results: dict[str, Any], threads: str, kernel: str) -> tuple[list[str], list[list[str]]]:
    """Per-input rows of one kernel: coiter's median in ms, then each peer's ratio; last
    row the geometric means."""
    peers = analysis.peers(results)
    headers = [KERNELS[kernel].title, "coiter ms", *peers]
    rows = []
    for case in analysis.cases(results, threads, kernel):
        rows.append([case["input"]["name"], analysis.cell(case, analysis.COITER),
                     *(analysis.cell(case, p) for p in peers)])
    if rows:
        geo = [analysis.kernel_geomean(results, threads, kernel, p)[0] for p in peers]
        rows.append(["geomean", "", *(_fmt(g) for g in geo)])
    return headers, rows


def geomean_rows(results: dict[str, Any], threads: str) -> tuple[list[str], list[list[str]]]:
    """One row per kernel: geometric mean ratio against each peer (and over how many inputs)."""
    peers = analysis.peers(results)
    rows = []
    for kernel in results["settings"]["kernels"]:
        cells = []
        for p in peers:
            g, n = analysis.kernel_geomean(results, threads, kernel, p)
            cells.append(f"{g:.2f} ({n})" if g is not None else "-")
        rows.append([KERNELS[kernel].title, *cells])
    return ["kernel", *peers], rows


def print_terminal(results: dict[str, Any]) -> None:
    for threads in analysis.thread_counts(results):
        print(f"\n=== {analysis.threads_label(threads)}: {HOW_TO_READ} ===")
        for kernel in results["settings"]["kernels"]:
            headers, rows = kernel_rows(results, threads, kernel)
            if rows:
                print()
                print(text_table(headers, rows))
        headers, rows = geomean_rows(results, threads)
        print(f"\n--- geometric means, {analysis.threads_label(threads)} (number of inputs in parentheses) ---")
        print(text_table(headers, rows))
    print("\n--- targets (tracked, not asserted) ---")
    print(text_table(["target", "measured", "result"], _target_rows(results)))


def _target_rows(results: dict[str, Any]) -> list[list[str]]:
    return [[row["target"], f"{_fmt(row['value'])} {row['unit']}" if row["value"] is not None else "-",
             targets.describe(row)] for row in results["targets"]]


def write_json(results: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(results, indent=1) + "\n")


# --------------------------------------------------------------------------- summary.md

def _environment_md(results: dict[str, Any]) -> str:
    env = results["environment"]
    caches = ", ".join(f"{k} {v}" for k, v in env["caches"].items())
    rows = [
        ["CPU", f"{env['cpu']}, {env['logical_cpus']} logical CPUs ({caches})"],
        ["memory", f"{env['memory_gib']:.1f} GiB" if env.get("memory_gib") else "?"],
        ["OS / Python", f"{env['os']} / {env['python']}"],
        ["C compiler", f"{env['compiler']} (COITER_CFLAGS: {env['cflags']})"],
        ["coiter commit", env["git_commit"][:12] + (" + uncommitted changes in src/"
                                                     if env["src_uncommitted_changes"] else "")],
        ["load average at start", " ".join(f"{x:.2f}" for x in env["load_average_at_start"])],
        # a busy core slows multi-threaded runs most: what else ran, as 1-minute load averages
        ["1-min load average per run (start / end)", "; ".join(
            f"{analysis.threads_label(t)}: {run['load_average']['start'][0]:.2f} / "
            f"{run['load_average'].get('end', [float('nan')])[0]:.2f}"
            for t, run in results["runs"].items() if "load_average" in run)],
    ]
    run = results["runs"][analysis.thread_counts(results)[0]]
    for name, info in run["systems"].items():
        if info["status"] != "ok":
            rows.append([name, f"{info['status']}: {info['reason']}"])
        else:
            serial = "" if info["threaded"] else " (serial)"
            rows.append([name, f"{info['version']}{serial}; {info['note']}"])
    return markdown_table(["", ""], rows)


def _stream_md(results: dict[str, Any]) -> str:
    stream = results["stream"]
    if "error" in stream:
        return f"STREAM triad could not run: {stream['error']}. Bandwidth fractions are omitted."
    rows = [[t, f"{gbs:.1f}"] for t, gbs in stream["gbs"].items()]
    return (f"`{stream['command']}`, {stream['elements']:,} doubles per array "
            f"({stream['array_bytes'] / 2**20:.0f} MiB each), best of {stream['reps']} runs before and "
            f"{stream['reps']} after the benchmarks:\n\n"
            + markdown_table(["threads", "triad GB/s"], rows)
            + "\n\nA kernel's minimum bytes count each stored array of its operands once and its "
            "result written once (CSR SpMV: values, column indices, row pointers, x, y). Fractions "
            "above 100% happen: inputs whose minimum bytes fit in the last-level cache are marked, "
            "and read-mostly kernels can beat the triad, whose 24 counted bytes per element leave "
            "out the write-allocate read of a[].")


def _gbs_cell(bw: tuple[float, float | None] | None) -> str:
    """GB/s and the fraction of STREAM, as the bandwidth table shows them."""
    if bw is None:
        return "-"
    return f"{bw[0]:.1f} ({bw[1]:.0%})" if bw[1] is not None else f"{bw[0]:.1f}"


def _bandwidth_md(results: dict[str, Any]) -> str:
    """SpMV per input: each system's GB/s over the minimum bytes and fraction of STREAM;
    then, per memory-bound kernel, each system's median fraction. NumPy dense is left out:
    it moves the whole dense matrix, so a fraction of the sparse minimum means nothing."""
    llc = analysis.llc_bytes(results)
    parts = []
    names = [s for s in analysis.systems(results) if s != "NumPy dense"]
    for threads in analysis.thread_counts(results):
        rows = []
        for case in analysis.cases(results, threads, "spmv"):
            if case["status"] != "ok":
                continue
            mark = " (fits in cache)" if llc and case["min_bytes"] <= llc else ""
            cells = [_gbs_cell(analysis.bandwidth(results, threads, case, s)) for s in names]
            cells.append(_gbs_cell(analysis.gathers_bandwidth(results, threads, case)))
            rows.append([case["input"]["name"] + mark, f"{case['min_bytes'] / 1e6:.1f}", *cells])
        if rows:
            parts.append(f"**SpMV, {analysis.threads_label(threads)}**: GB/s over the minimum bytes "
                         f"(fraction of STREAM triad); the last column times a loop that only "
                         f"reads A's column indices and x at them (benchmarks/suite/gathers.c): on "
                         f"inputs above the last-level cache, where memory sets the time, no SpMV "
                         f"can pass it\n\n"
                         + markdown_table(["input", "min MB", *names, "x at A's columns alone"], rows))
        summary = []
        for kernel in results["settings"]["kernels"]:
            if not KERNELS[kernel].memory_bound:
                continue
            cells = []
            for s in names:
                fractions = [bw[1] for c in analysis.cases(results, threads, kernel)
                             if c["status"] == "ok" and not (llc and c["min_bytes"] <= llc)
                             and (bw := analysis.bandwidth(results, threads, c, s)) and bw[1]]
                cells.append(f"{median(fractions):.0%}" if fractions else "-")
            if any(c != "-" for c in cells):
                summary.append([KERNELS[kernel].title, *cells])
        if summary:
            parts.append(f"**Median fraction of STREAM, {analysis.threads_label(threads)}**, inputs larger than "
                         f"the last-level cache only\n\n" + markdown_table(["kernel", *names], summary))
    return "\n\n".join(parts)


def _compile_md(results: dict[str, Any]) -> str:
    comp = results.get("compile", {})
    if "error" in comp:
        return f"Compile probe failed: {comp['error']}"
    cold, warm = comp["cold"], comp["warm"]
    rows = [[KERNELS[k].title, f"{c['total_s'] * 1e3:.0f}", f"{warm['kernels'][k]['total_s'] * 1e3:.1f}"]
            for k, c in cold["kernels"].items()]
    return (f"Each in a new process on a tiny input, cold compile the median of "
            f"{cold.get('runs', 1)} processes with empty caches; `import coiter` took "
            f"{cold['import_s'] * 1e3:.0f} ms (cold) / {warm['import_s'] * 1e3:.0f} ms (warm).\n\n"
            + markdown_table(["kernel", "cold compile ms (empty cache: compile + first call)",
                              "first call ms (new process, kernel on disk)"], rows))


def _overhead_md(results: dict[str, Any]) -> str:
    names = analysis.systems(results)
    rows = []
    for threads in analysis.thread_counts(results):
        recs = results["runs"][threads]["overhead"]["systems"]
        rows.append([threads, *(f"{recs[s]['median_s'] * 1e6:.1f}" if recs[s]["status"] == "ok"
                                else analysis.STATUS_CELLS.get(recs[s]["status"], recs[s]["status"])
                                for s in names)])
    text = ("Median time per call in µs on a 10 x 10 tridiagonal SpMV (coiter: cached kernel, "
            "`kernel(A=A, x=x)` with A a coiter Tensor):\n\n" + markdown_table(["threads", *names], rows))
    entries = {t: e for t in analysis.thread_counts(results)
               if (e := results["runs"][t]["overhead"].get("coiter_entry_points"))}
    if entries:
        names = [n for n in ENTRY_POINTS if all(n in e for e in entries.values())]
        entry_rows = [[t, *(f"{e[n]['median_s'] * 1e6:.2f}" for n in names)] for t, e in entries.items()]
        text += ("\n\nThe same call through coiter's entry points, µs per call (kernels cached; "
                 "`coiter.evaluate(\"y(i) = A(i,j) * x(j)\", A=A, x=x)`, `coiter.einsum(\"ij,j->i\", A, x)`, "
                 "`(A @ x).evaluate()`; A a coiter Tensor, or the SciPy matrix itself where named):"
                 "\n\n" + markdown_table(["threads", *names], entry_rows))
    return text


def _busy_md(results: dict[str, Any]) -> str:
    busy = results.get("busy")
    if busy is None:
        return ""
    if "error" in busy:
        return f"Busy-machine probe failed: {busy['error']}"
    rows = []
    for which in ("small", "large"):
        rec = busy[which]
        for label, t in rec["systems"].items():
            alt = rec.get("interleaved", {}).get(label)
            rows.append([f"{rec['input']} ({rec['nnz']:,} nonzeros)", label, f"{t['median_s'] * 1e3:.3f}",
                         f"{t['p90_s'] * 1e3:.3f}", f"{t['max_s'] * 1e3:.3f}",
                         f"{alt['median_s'] * 1e3:.3f}" if alt else "-"])
    return ("CSR SpMV while another process keeps one core busy (`python -c \"while True: pass\"`), "
            "OMP_NUM_THREADS unset (coiter's default: every core, limited by the work). Timed by "
            f"batches ({busy['small']['runs']} / {busy['large']['runs']} runs per system; each "
            f"system's runs back to back after a pause, {BUSY_ROUNDS} rounds), as a program calling "
            "one kernel repeatedly sees it; the last column times the same calls in turn, call by "
            "call, where each call pays for the one before (workers left spinning by a parallel call "
            "take a core from the next one). The three coiter systems take each place in the round "
            "in turn (the place moved the median 1-4%). The targets count default threads as slower "
            "only by more than the two medians' 95% intervals allow (by batches, intervals over the "
            "batches' medians); \"1 thread, again\" times the 1-thread call a second time, to show "
            "that noise. 1-min load average at start "
            f"{busy['load_average_at_start']:.2f}. Times in ms:\n\n"
            + markdown_table(["input", "system", "median", "90th percentile", "max",
                              "median, call by call"], rows))


def _not_run_md(results: dict[str, Any]) -> str:
    """Skipped cases, and each system's n/a / slow / wrong / error reasons, deduplicated."""
    threads = analysis.thread_counts(results)
    skipped = sorted({(c["kernel"], c["input"]["name"], c.get("reason", ""))
                      for t in threads for c in analysis.cases(results, t) if c["status"] != "ok"})
    lines = []
    if skipped:
        lines.append("**Skipped cases**\n")
        lines += [f"- {KERNELS[k].title} on {name}: {reason}" for k, name, reason in skipped]
    # one line per system, status and reason, numbers aside ("dense arrays need # MB")
    groups: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for t in threads:
        for c in analysis.cases(results, t):
            for s, rec in c.get("systems", {}).items():
                if rec["status"] in ("ok", "not installed"):
                    continue
                reason = rec.get("reason", "")
                key = (s, rec["status"], re.sub(r"\d[\d.e+]*", "#", reason))
                groups.setdefault(key, []).append(
                    (reason, f"{KERNELS[c['kernel']].title} {c['input']['name']} ({t}T)"))
    if groups:
        lines.append("\n**Systems without a time, and why** (nT: at n threads)\n")
        for (s, status, _), items in sorted(groups.items()):
            where = sorted({w for _, w in items})
            shown = ", ".join(where[:6]) + (f" and {len(where) - 6} more" if len(where) > 6 else "")
            lines.append(f"- {s}, {status}: {items[0][0]} — {shown}")
    return "\n".join(lines) if lines else "Every system timed every case."


def write_summary(results: dict[str, Any], path: Path, plots: list[str]) -> None:
    s = results["settings"]
    out = [
        "# coiter benchmark results",
        "",
        f"`{results['command']}` — {results['started_utc']}, {results['elapsed_s'] / 60:.1f} min, "
        f"{'quick mode (correctness only: small inputs, short timings)' if s['quick'] else 'full run'}. "
        "Raw numbers: [results.json](results.json). Nothing here is asserted; the run fails only "
        "when coiter's result is wrong.",
        "",
        "## Machine and systems",
        "",
        _environment_md(results),
        "",
        "## Method",
        "",
        f"- {HOW_TO_READ}; geometric means per kernel are over the inputs both systems timed "
        "(count in parentheses).",
        "- Every system runs in the same process with the same thread count: one worker process "
        "per thread count, OMP/MKL/OpenBLAS/Numba thread variables set before it starts, plus "
        "GraphBLAS `nthreads`, `torch.set_num_threads`, MKL's and threadpoolctl's limits. "
        "Systems marked serial in the table above use one thread regardless.",
        "- Every result is checked against an independent SciPy/NumPy reference "
        "(`assert_allclose`, rtol 1e-9 with an absolute tolerance of rtol x max|reference|) "
        "before its time counts; a mismatch shows as WRONG.",
        f"- Timing: the checked call, one untimed warm-up call per system, then round-robin over the "
        f"systems with the garbage collector off, {s['min_runs']} to {s['max_runs']} runs each (aiming "
        f"at {s['case_budget_s']} s per case, by the warm-up calls' times: a checked call may include "
        f"compiling); median reported, min/max and every time in results.json. "
        f"With more than one thread the systems alternate by batches ({s['batches']} rounds, each "
        f"system's runs back to back after a {s['switch_gap_s'] * 1e3:g} ms pause and "
        f"{s['batch_warmup']} untimed calls: the first calls after a pause run slower), and the "
        "time idle threads spin after a call is capped for Intel OpenMP (KMP_BLOCKTIME=1 ms) and OpenBLAS "
        "(OPENBLAS_THREAD_TIMEOUT=4): one library's idle threads spinning on the two cores slowed "
        "the next library's calls up to 40x. Each system works on its own copy of the operands (where "
        "they take at most twice the last-level cache), so no call finds an operand another system "
        "just read in the caches. At one thread each call follows the other systems' calls, whose "
        "data pass through the caches; in a batch a system's data stay in them: the two thread "
        "counts' times differ by both, and serial systems (SciPy) look faster at 2 "
        "threads. "
        f"A system whose call takes over {s['slow_limit_s']:g} s is shown as slow, not timed; inputs run "
        "smallest first and a system slow on one is not run on that kernel's larger cases (SpGEMM: by "
        f"multiply-adds); a first call not done after {s['call_timeout_s']:g} s is abandoned (the worker "
        "process is restarted without it). A worker that holds more than "
        f"{s.get('worker_memory_fraction', 0.4):.0%} of the machine's memory after a case is replaced "
        "by a fresh one (torch's SpGEMM and SpAdd3 keep about their result's memory per call); each "
        "case's resident memory is in results.json.",
        "- scipy, MKL, GraphBLAS and torch have no sparse tensors of order > 2: they run TTV and TTM "
        "as SpMV/SpMM on B's nonempty fibers (rows) x last mode, and INNERPROD on the mode-0 "
        "unfoldings, built untimed like every other operand conversion. Their TTV/TTM results take "
        "the fiber list as their index structure, so they assemble no output index; coiter's CSF "
        "result shares B's first levels (no assembly either), and tensora builds its result in the "
        "timed call.",
        "- Compile time is measured apart (below); run times exclude it. Operand conversion to each "
        "system's own structures is not timed.",
        f"- SpGEMM computes A*A for square A and A*A^T otherwise, skipped when it needs more than "
        f"{s['spgemm_flops_limit']:.0e} multiply-adds. SpAdd3 adds A, A with rows shuffled (x0.5) and A with "
        f"columns shuffled (x2). SpMSpV's vector keeps {s['spmspv_density']:.0%} of the entries, and its matrix is "
        "stored column-major (CSC) for every system, so only the columns x selects are read. "
        f"SpMM, SDDMM, TTM, MTTKRP use rank {s['rank']}. Tensor kernels contract the last mode "
        "(TTV, TTM) or keep mode 0 (MTTKRP) of tensors of any order; INNERPROD's second tensor keeps "
        "a random half of the first's nonzeros plus as many new ones. NumPy dense runs only where its "
        f"arrays need under {s['dense_bytes_limit'] / 1e6:.0f} MB and {s['dense_flops_limit']:.0e} flops.",
        f"- Generated inputs: banded, power-law and uniform {s['gen_size']} x {s['gen_size']} matrices "
        f"(~{s['gen_row_nnz']} nonzeros per row), uniform and power-law 3-tensors"
        + (f"; for SpMV alone the three matrices again at {s['large_size']} x {s['large_size']}, "
           "larger than the last-level cache." if s.get("large_size") else "."),
        "- The machine has few cores and may be shared: treat single numbers with care, "
        "geometric means less so.",
        "",
        "## Targets (tracked, not asserted)",
        "",
        markdown_table(["target", "measured", "result", "how"],
                       [[r[0], r[1], r[2], row["how"]] for r, row in zip(_target_rows(results), results["targets"])]),
        "",
    ]
    for threads in analysis.thread_counts(results):
        headers, rows = geomean_rows(results, threads)
        out += [f"## Geometric mean ratios, {analysis.threads_label(threads)}", "", HOW_TO_READ + ".", "",
                markdown_table(headers, rows), ""]
    out += ["## Hardware bound: STREAM triad", "", _stream_md(results), "",
            _bandwidth_md(results), "",
            "## Compile time and call overhead", "", _compile_md(results), "", _overhead_md(results), ""]
    if results.get("busy") is not None:
        out += ["## Busy machine", "", _busy_md(results), ""]
    if plots:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    out += ["## Per-kernel results", "",
            f"coiter's median in ms, then {HOW_TO_READ}. n/a: the system has no such operation; "
            "n.i.: not installed; slow: over the time limit; skip: the case was not run.", ""]
    for threads in analysis.thread_counts(results):
        for kernel in s["kernels"]:
            headers, rows = kernel_rows(results, threads, kernel)
            if rows:
                out += [f"<details><summary>{KERNELS[kernel].title}, {analysis.threads_label(threads)}</summary>", "",
                        markdown_table(headers, rows), "", "</details>", ""]
    out += ["## Not run", "", _not_run_md(results), ""]
    path.write_text("\n".join(out))
