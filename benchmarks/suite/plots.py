"""PNG plots of a run (matplotlib; none when it is not installed)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from . import analysis
from .kernels import KERNELS


def write_all(results: dict[str, Any], out_dir: Path) -> list[str]:
    """Write every plot into ``out_dir``; return the file names written."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    for name, draw in (("geomean.png", _geomean), ("spmv-bandwidth.png", _spmv_bandwidth),
                       ("thread-scaling.png", _scaling), ("roofline.png", _roofline)):
        fig = draw(results, plt)
        if fig is not None:
            fig.savefig(out_dir / name, dpi=110, bbox_inches="tight")
            plt.close(fig)
            written.append(name)
    return written


def _geomean(results: dict[str, Any], plt: Any) -> Any:
    """Per kernel, one bar per peer: geometric mean of peer time / coiter time (log axis)."""
    threads = analysis.thread_counts(results)
    peers = analysis.peers(results)
    kernels = results["settings"]["kernels"]
    fig, axes = plt.subplots(len(threads), 1, figsize=(11, 3.6 * len(threads)), squeeze=False,
                             layout="constrained")
    width = 0.8 / max(len(peers), 1)
    for ax, t in zip(axes[:, 0], threads):
        for i, p in enumerate(peers):
            values = [analysis.kernel_geomean(results, t, k, p)[0] for k in kernels]
            xs = [k + (i - len(peers) / 2 + 0.5) * width for k in range(len(kernels))]
            ax.bar([x for x, v in zip(xs, values) if v], [v for v in values if v], width, label=p)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(kernels)), [KERNELS[k].title for k in kernels])
        ax.set_ylabel("peer time / coiter time")
        ax.set_title(f"{analysis.threads_label(t)}: above 1 = coiter faster (geometric mean over inputs)")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0, 0].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _spmv_bandwidth(results: dict[str, Any], plt: Any) -> Any:
    """SpMV: fraction of STREAM triad bandwidth each system reaches, per input."""
    threads = [t for t in analysis.thread_counts(results) if results["stream"].get("gbs", {}).get(t)]
    if not threads:
        return None
    # NumPy dense moves the whole dense matrix: a fraction of the sparse minimum means nothing
    names = [s for s in analysis.systems(results) if s != "NumPy dense"]
    fig, axes = plt.subplots(len(threads), 1, figsize=(12, 4.6 * len(threads)), squeeze=False,
                             layout="constrained")
    for ax, t in zip(axes[:, 0], threads):
        spmv = [c for c in analysis.cases(results, t, "spmv") if c["status"] == "ok"]
        spmv.sort(key=lambda c: c["min_bytes"])
        for s in names:
            points = [(i, bw[1]) for i, c in enumerate(spmv)
                      if (bw := analysis.bandwidth(results, t, c, s)) and bw[1]]
            if points:
                ax.plot(*zip(*points), marker="o" if s == analysis.COITER else ".",
                        linewidth=2 if s == analysis.COITER else 0.8, label=s)
        llc = analysis.llc_bytes(results)
        fitting = sum(1 for c in spmv if llc and c["min_bytes"] <= llc)
        if fitting:
            ax.axvline(fitting - 0.5, color="gray", linestyle="--", linewidth=0.8)
            ax.text(fitting - 0.4, ax.get_ylim()[1] * 0.9, "inputs larger than the LLC →",
                    fontsize="small", color="gray")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(spmv)), [c["input"]["name"] for c in spmv], rotation=60,
                      ha="right", fontsize="small")
        ax.set_ylabel("fraction of STREAM triad")
        ax.set_title(f"SpMV, {analysis.threads_label(t)}: minimum bytes / time / triad bandwidth "
                     f"({results['stream']['gbs'][t]:.1f} GB/s), inputs by size")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _scaling(results: dict[str, Any], plt: Any) -> Any:
    """Per kernel and system: geometric mean speedup of the most threads over 1 thread."""
    threads = analysis.thread_counts(results)
    if len(threads) < 2 or threads[0] != "1":
        return None
    top = threads[-1]
    names = analysis.systems(results)
    kernels = results["settings"]["kernels"]
    fig, ax = plt.subplots(figsize=(11, 3.8), layout="constrained")
    width = 0.8 / len(names)
    for i, s in enumerate(names):
        values = []
        for k in kernels:
            one = {c["input"]["name"]: analysis.median(c, s) for c in analysis.cases(results, "1", k)}
            speedups = [one[c["input"]["name"]] / m for c in analysis.cases(results, top, k)
                        if (m := analysis.median(c, s)) and one.get(c["input"]["name"])]
            values.append(analysis.geomean(speedups))
        xs = [k + (i - len(names) / 2 + 0.5) * width for k in range(len(kernels))]
        ax.bar([x for x, v in zip(xs, values) if v], [v for v in values if v], width, label=s)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(kernels)), [KERNELS[k].title for k in kernels])
    ax.set_ylabel(f"time at 1 thread / time at {top}")
    # the two thread counts are timed differently (worker.run_case): the ratio is not
    # threads alone, which is why serial systems show one above 1
    ax.set_title(f"Thread scaling, 1 -> {top} threads (geometric mean over inputs); 1 thread "
                 f"is timed call by call between systems\n(each call after the others' data "
                 f"passed through the caches), {top} threads by batches of calls (warm caches), "
                 f"so serial systems gain too", fontsize="medium")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return fig


def _roofline(results: dict[str, Any], plt: Any) -> Any:
    """coiter's memory-bound kernels against the memory roof: GFLOP/s over arithmetic
    intensity (flops per minimum byte), with the STREAM triad bandwidth as the roof.
    Flops are estimated as two per stored entry of the main operand (a multiply and an
    add), the minimum bytes as in the bandwidth tables."""
    threads = [t for t in analysis.thread_counts(results) if results["stream"].get("gbs", {}).get(t)]
    kernels = [k for k in results["settings"]["kernels"] if KERNELS[k].memory_bound]
    if not threads or not kernels:
        return None
    fig, axes = plt.subplots(1, len(threads), figsize=(6.2 * len(threads), 4.6), squeeze=False,
                             layout="constrained")
    for ax, t in zip(axes[0], threads):
        gbs = results["stream"]["gbs"][t]
        intensities = []
        for k in kernels:
            points = []
            for c in analysis.cases(results, t, k):
                time_s = analysis.median(c, analysis.COITER)
                if time_s is None or not c.get("min_bytes"):
                    continue
                flops = 2 * c["input"]["nnz"]
                points.append((flops / c["min_bytes"], flops / time_s / 1e9))
            if points:
                ax.scatter(*zip(*points), s=14, label=KERNELS[k].title)
                intensities += [x for x, _ in points]
        if not intensities:
            continue
        lo, hi = min(intensities) / 2, max(intensities) * 2
        ax.plot([lo, hi], [lo * gbs, hi * gbs], color="black", linewidth=1)
        ax.text(hi, hi * gbs, f" STREAM {gbs:.1f} GB/s", fontsize="small", va="bottom", ha="right")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("flops per minimum byte")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"coiter roofline, {analysis.threads_label(t)}")
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize="small")
    return fig
