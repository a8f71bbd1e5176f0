"""Sparse convolutions (issue 10; Liu et al., OOPSLA 2024, §6) against torch and spconv.

    python benchmarks/convolutions.py [--study conv2d|submanifold|order|all] [--quick]
                                      [--repeat N] [--threads 1 2] [--out DIR]

Studies:

* ``conv2d`` 2-D convolutions, 3x3 filters, padding 1, float32, batch 1: a ResNet layer
  (64 -> 64 channels, 56x56) and the paper's 256x256x64 input (Fig. 16), the input's
  sparsity swept from 50% to 99.9% (uniformly random zeros). coiter's ``nn.conv2d`` on the
  input stored channels last with compressed spatial levels (``dsss``) against
  ``torch.nn.functional.conv2d`` (dense, oneDNN) at the same number of threads.
* ``submanifold`` 3-D submanifold convolution (3x3x3) on a generated point cloud: voxelized
  sphere surfaces in a 128^3 grid, 16 and 64 channels, float32. coiter's
  ``nn.submanifold_conv`` against spconv's CPU ``SubMConv3d`` (where it is installed) and
  dense ``torch.nn.functional.conv3d`` (16 channels only: the dense grid at 64 channels
  takes minutes).
* ``order`` coiter's automatic loop order against hand-written orders (``reorder``
  schedules) on the ResNet layer: the ratio auto / best per sparsity.

Times are medians of ``--repeat`` runs after warm-up (2-D layers: more, until each case has
run 50 ms in all; the loop-order study: at least 25), each result first checked against
torch's (relative 1e-3 in float32). Results go to ``<out>/convolutions.md`` and a plot
``<out>/convolutions.png`` (time against sparsity). Nothing here asserts a time.
"""
from __future__ import annotations

# _common first: it pins every threading runtime to one thread before NumPy loads
from _common import (
    REPO_ROOT, Skipped, Timing, bench_group, close_to, machine_info, markdown_table, ratio,
)

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import coiter
import coiter.nn as cnn

SPARSITIES = (0.5, 0.8, 0.9, 0.95, 0.99, 0.999)
LAYERS = {"ResNet 56x56x64": (56, 64), "paper 256x256x64": (256, 64)}


def _torch() -> Any:
    import torch

    return torch


def _random_input(rng: np.random.Generator, size: int, channels: int, sparsity: float) -> np.ndarray:
    """NHWC float32 activations with a fraction ``sparsity`` of zeros."""
    x = rng.standard_normal((1, size, size, channels)).astype(np.float32)
    x[rng.random(x.shape) < sparsity] = 0
    return x


def _threads(torch: Any, n: int) -> None:
    torch.set_num_threads(n)


def study_conv2d(args: argparse.Namespace) -> tuple[str, dict]:
    torch = _torch()
    rng = np.random.default_rng(0)
    layers = {"ResNet 56x56x64": LAYERS["ResNet 56x56x64"]} if args.quick else LAYERS
    sparsities = (0.5, 0.9, 0.999) if args.quick else SPARSITIES
    rows, curves = [], {}
    for label, (size, channels) in layers.items():
        w = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32)
        wt = torch.from_numpy(w)
        for sparsity in sparsities:
            x = _random_input(rng, size, channels, sparsity)
            xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
            ref = torch.nn.functional.conv2d(xt, wt, padding=1).numpy().transpose(0, 2, 3, 1)
            sparse = coiter.Tensor.from_numpy(x, "dsss")
            for threads in args.threads:
                _threads(torch, threads)
                cases = {
                    "coiter": (lambda t=threads: cnn.conv2d(sparse, w, padding=1, channels_last=True,
                                                            threads=t), close_to(ref, 1e-3)),
                    "torch": (lambda: torch.nn.functional.conv2d(xt, wt, padding=1),
                              _torch_check(ref, (0, 2, 3, 1))),
                }
                res = bench_group(cases, args.repeat, warmup=2, min_seconds=MIN_SECONDS)
                rows.append([label, f"{sparsity:.1%}", threads, res["coiter"].ms(), res["torch"].ms(),
                             ratio(res["torch"], res["coiter"])])
                curves.setdefault((label, threads), []).append((sparsity, res))
                print(f"  {label} {sparsity:.1%} {threads}t: coiter {res['coiter'].ms()} ms, "
                      f"torch {res['torch'].ms()} ms", flush=True)
    _threads(torch, 1)
    table = markdown_table(["layer", "sparsity", "threads", "coiter ms", "torch ms",
                            "speedup (torch / coiter)"], rows)
    text = ("### 2-D convolution, 3x3, padding 1, float32 (input NHWC `dsss` for coiter)\n\n"
            "Targets (issue 10): faster than torch from 80% sparsity on, at least 10x at 99.9%. "
            f"Medians of calls alternating with torch's, at least {MIN_SECONDS * 1e3:.0f} ms of "
            "calls per case.\n\n"
            + table + "\n")
    return text, curves


def _torch_check(ref: np.ndarray, axes: tuple[int, ...]) -> Callable[[Any], None]:
    near = close_to(ref, 1e-3)
    return lambda out: near(out.numpy().transpose(axes))


def _point_cloud(rng: np.random.Generator, grid: int, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Sites on the surfaces of random spheres in a ``grid``^3 volume (about 2% occupied)
    and float32 features: (coordinates (n, 3), features (n, channels))."""
    sites: set[tuple[int, int, int]] = set()
    while len(sites) < 0.02 * grid ** 3:
        center = rng.uniform(0.2, 0.8, 3) * grid
        radius = rng.uniform(0.1, 0.25) * grid
        u = rng.normal(size=(int(40 * radius ** 2), 3))
        pts = center + radius * u / np.linalg.norm(u, axis=1, keepdims=True)
        for p in np.floor(pts).astype(int):
            if np.all((p >= 0) & (p < grid)):
                sites.add(tuple(p))
    coords = np.array(sorted(sites))
    return coords, rng.standard_normal((len(coords), channels)).astype(np.float32)


def study_submanifold(args: argparse.Namespace) -> tuple[str, dict]:
    torch = _torch()
    rng = np.random.default_rng(1)
    grid = 64 if args.quick else 128
    try:
        import spconv.pytorch as spconv
    except ImportError as exc:
        spconv, missing = None, Skipped("not installed", str(exc))
    rows = []
    for channels in (16,) if args.quick else (16, 64):
        coords, feats = _point_cloud(rng, grid, channels)
        w = (rng.standard_normal((channels, channels, 3, 3, 3)) / channels).astype(np.float32)
        entries = np.repeat(np.arange(len(coords)), channels)
        full_coords = np.vstack([np.zeros(entries.size, int), coords[entries].T,
                                 np.tile(np.arange(channels), len(coords))])
        x = coiter.Tensor.from_coo(full_coords, feats.reshape(-1), (1, grid, grid, grid, channels),
                                   "dsssd")
        mask = cnn.sites(x)
        ref = None
        full = torch.nn.functional.conv3d
        wt = torch.from_numpy(w)
        if channels == 16:  # the dense grid at 64 channels would take half a gigabyte per copy
            dense = np.zeros((1, channels, grid, grid, grid), np.float32)
            dense[0, :, coords[:, 0], coords[:, 1], coords[:, 2]] = feats  # (sites, channels)
            xt = torch.from_numpy(dense)
            ref = full(xt, wt, padding=1).numpy()[0][:, coords[:, 0], coords[:, 1], coords[:, 2]].T
        for threads in args.threads:
            _threads(torch, threads)
            cases: dict[str, Any] = {}
            check = None if ref is None else _site_check(ref, coords)
            cases["coiter"] = (lambda t=threads: cnn.submanifold_conv(x, w, mask=mask, threads=t), check)
            if spconv is not None:
                idx = torch.from_numpy(np.concatenate([np.zeros((len(coords), 1), int), coords], 1)).int()
                st = spconv.SparseConvTensor(torch.from_numpy(feats), idx, [grid] * 3, 1)
                conv = spconv.SubMConv3d(channels, channels, 3, bias=False, indice_key="subm")
                conv.weight.data = torch.from_numpy(np.ascontiguousarray(w.transpose(0, 2, 3, 4, 1)))

                def run_spconv(conv: Any = conv, st: Any = st) -> Any:
                    with torch.no_grad():
                        return conv(st)

                spcheck = None if ref is None else (lambda out: close_to(ref, 1e-3)(
                    out.features.numpy()[np.lexsort(out.indices.numpy()[:, ::-1].T)]))
                cases["spconv"] = (run_spconv, spcheck)
            else:
                cases["spconv"] = missing
            cases["torch dense"] = (lambda: full(xt, wt, padding=1), None) if channels == 16 \
                else Skipped("not run (dense grid too large)")
            res = bench_group(cases, args.repeat, warmup=1)
            rows.append([f"{grid}^3, {len(coords)} sites ({len(coords) / grid ** 3:.1%}), "
                         f"{channels} ch", threads, res["coiter"].ms(), res["spconv"].ms(),
                         res["torch dense"].ms(), ratio(res["spconv"], res["coiter"])])
            print(f"  {rows[-1]}", flush=True)
    _threads(torch, 1)
    table = markdown_table(["point cloud", "threads", "coiter ms", "spconv ms", "torch dense ms",
                            "speedup vs spconv"], rows)
    return ("### 3-D submanifold convolution, 3x3x3, float32\n\n"
            "Target (issue 10): at least spconv-CPU's speed.\n\n" + table + "\n"), {}


def _site_check(ref: np.ndarray, coords: np.ndarray) -> Callable[[Any], None]:
    near = close_to(ref, 1e-3)
    return lambda out: near(out.to_numpy()[0][coords[:, 0], coords[:, 1], coords[:, 2]])


# (schedule, result variables walked per output): the default (rows gathered, columns
# scattered), its loops reordered, every mode scattered, and output-stationary (gather x, y)
ORDERS = (("", None), ("", ("x",)), ("reorder(c,q)", None), ("reorder(q,k)", None), ("", ()),
          ("", ("x", "y")))


def _order_label(order: tuple[str, tuple[str, ...] | None]) -> str:
    schedule, gather = order
    if schedule or gather is None:
        return schedule or "auto"
    return f"gather {','.join(gather)}" if gather else "scatter all"


MIN_SECONDS = 0.05  # each case of a cell timed at least this long in all (sub-ms cells: many calls)
ORDER_ROUNDS = 25  # timed rounds per case of the loop-order study (at least)


def study_order(args: argparse.Namespace) -> tuple[str, dict]:
    torch = _torch()
    rng = np.random.default_rng(2)
    size, channels = LAYERS["ResNet 56x56x64"]
    expr = "O(n,x,y,k) = I(n,x+r-1,y+q-1,c) * F(r,q,c,k)"
    w = np.ascontiguousarray(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32)
                             .transpose(2, 3, 1, 0))
    rows, ratios = [], []
    for sparsity in (0.5, 0.9, 0.99) if args.quick else SPARSITIES:
        x = _random_input(rng, size, channels, sparsity)
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        wt = torch.from_numpy(np.ascontiguousarray(w.transpose(3, 2, 0, 1)))
        ref = torch.nn.functional.conv2d(xt, wt, padding=1).numpy().transpose(0, 2, 3, 1)
        sparse = coiter.Tensor.from_numpy(x, "dsss")
        cases: dict[str, Any] = {}
        for order in ORDERS:
            label = _order_label(order)
            gather = order[1]
            if label == "auto":  # coiter.nn's choice on one thread (cnn.scatters)
                scatter_k, rows_k = (coiter.compile(expr, {"I": "dsss"}, padding=True, gather=g)
                                     for g in ((), None))
                gather = () if cnn.scatters(cnn.density(sparse),
                                            lambda: scatter_k(I=sparse, F=w, threads=1),
                                            lambda: rows_k(I=sparse, F=w, threads=1)) else None
            try:
                kern = coiter.compile(expr, {"I": "dsss"}, padding=True, schedule=order[0] or None,
                                      gather=gather)
                kern.concrete  # noqa: B018 - a schedule that cannot apply fails here
            except coiter.ScheduleError as exc:
                cases[label] = Skipped("illegal", str(exc))
                continue
            cases[label] = (lambda k=kern: k(I=sparse, F=w, threads=1), close_to(ref, 1e-3))
        # milliseconds per call and one ratio per row decided by medians: more rounds than
        # the other studies, so that a noisy round on a shared machine does not decide it
        res = bench_group(cases, max(args.repeat, ORDER_ROUNDS), warmup=2)
        hand = [r.median for o, r in res.items() if o != "auto" and isinstance(r, Timing)]
        best = min(hand) if hand else float("nan")
        auto = res["auto"]
        r = auto.median / min(best, auto.median) if isinstance(auto, Timing) else float("nan")
        ratios.append(r)
        rows.append([f"{sparsity:.1%}", *(res[_order_label(o)].ms() for o in ORDERS), f"{r:.2f}"])
        print(f"  order {sparsity:.1%}: {rows[-1]}", flush=True)
    headers = ["sparsity", *(_order_label(o) for o in ORDERS), "auto / best"]
    within = sum(r <= 1.1 for r in ratios)
    return ("### Loop order: automatic against hand-written (ResNet layer, 1 thread, ms)\n\n"
            f"`{expr}`, I in `dsss`; auto: `coiter.nn`'s choice on one thread (every stored entry "
            f"scattered, `gather=()`, below {cnn.MEASURED_DENSITIES[0]:.1%} of the coordinates "
            f"stored; output rows walked, `gather=[\"x\"]`, compile's default, above "
            f"{cnn.MEASURED_DENSITIES[1]:.0%}; between them the faster of the two on a first "
            "call); "
            "hand-written: `reorder` schedules of the default loops, every input scattered, and "
            "outputs walked per row and column (`gather=[\"x\", \"y\"]`, output-stationary). "
            f"Automatic order within 1.1x of the best on {within} of {len(ratios)} cases.\n\n" + markdown_table(headers, rows) + "\n"), {}


def plot(curves: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len({k[0] for k in curves}), figsize=(11, 4), squeeze=False)
    for ax, label in zip(axes[0], sorted({k[0] for k in curves})):
        for (name, threads), points in sorted(curves.items()):
            if name != label:
                continue
            xs = [1 - s for s, _ in points]
            for system, style in (("coiter", "-o"), ("torch", "--s")):
                ys = [r[system].median * 1e3 if isinstance(r[system], Timing) else np.nan for _, r in points]
                ax.plot(xs, ys, style, label=f"{system}, {threads} thread{'s' * (threads > 1)}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.invert_xaxis()
        ax.set_xlabel("density of the input (1 - sparsity)")
        ax.set_ylabel("ms")
        ax.set_title(label)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


STUDIES: dict[str, Callable[[argparse.Namespace], tuple[str, dict]]] = {
    "conv2d": study_conv2d, "submanifold": study_submanifold, "order": study_order,
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", choices=[*STUDIES, "all"], default="all")
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per cell (default 5, 3 with --quick)")
    ap.add_argument("--quick", action="store_true", help="small inputs and few repeats")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks")
    args = ap.parse_args(argv)
    args.repeat = args.repeat or (3 if args.quick else 5)
    command = "python benchmarks/convolutions.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    info = machine_info({"torch": _torch().__version__})
    sections, curves = [], {}
    for study in STUDIES if args.study == "all" else [args.study]:
        print(f"\n=== study {study} ===", flush=True)
        t0 = time.perf_counter()
        text, c = STUDIES[study](args)
        curves.update(c)
        sections.append(text + f"\n({time.perf_counter() - t0:.0f} s)\n")
    args.out.mkdir(parents=True, exist_ok=True)
    if curves and plot(curves, args.out / "convolutions.png"):
        sections.append("![time against density](convolutions.png)\n")
    machine = "\n".join(f"- {k}: {v}" for k, v in info.items())
    (args.out / "convolutions.md").write_text(
        f"# Sparse convolution studies\n\nMade by `{command.strip()}`.\n\n{machine}\n\n"
        + "\n".join(sections))
    print(f"\nwrote {args.out / 'convolutions.md'}")


if __name__ == "__main__":
    main()
