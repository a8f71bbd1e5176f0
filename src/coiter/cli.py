"""The ``coiter`` command line: a CSR SpMV demo, kernel-cache management, and TACO's flags."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

import coiter
from coiter import taco_cli
from coiter.data import example_path
from coiter.runtime import cache_dir, clear_cache

WARMUPS = 3


SUBCOMMANDS = ("demo", "cache-dir", "clear-cache")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the chosen subcommand, return its status.
    An index expression or one-dash flag first is a TACO-style command line
    (:mod:`coiter.taco_cli`): ``coiter "y(i) = A(i,j) * x(j)" -f=A:ds``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in SUBCOMMANDS and not argv[0].startswith("--") and argv[0] != "-h":
        return taco_cli.main(argv)
    parser = argparse.ArgumentParser(
        prog="coiter", description=__doc__,
        epilog='TACO\'s command line works too: coiter "<expression>" -f=A:ds ... (coiter -help lists its flags)')
    parser.add_argument("--version", action="version", version=f"%(prog)s {coiter.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="compile CSR SpMV and time it against scipy")
    demo.add_argument(
        "--matrix", type=Path, default=None,
        help="Matrix Market file (.mtx or .mtx.gz); default: the bundled bcsstk16",
    )
    demo.add_argument(
        "--repeat", type=_positive_int, default=50,
        help="timed runs per implementation; the median is reported (default: 50)",
    )
    demo.set_defaults(handler=_demo)

    show = commands.add_parser("cache-dir", help="print the compiled-kernel cache directory")
    show.set_defaults(handler=_cache_dir)

    clear = commands.add_parser("clear-cache", help="delete every cached compiled kernel")
    clear.set_defaults(handler=_clear_cache)

    args = parser.parse_args(argv)
    return args.handler(args)


def _demo(args: argparse.Namespace) -> int:
    """Compile y(i) = A(i,j) * x(j) for CSR A, check it against scipy and compare timings."""
    path: Path = args.matrix if args.matrix is not None else example_path()
    try:
        A = coiter.read(path)
    except (OSError, coiter.CoiterError) as e:
        print(f"error: cannot read {path}: {e}", file=sys.stderr)
        return 2
    if A.order != 2:
        print(f"error: {path} holds an order-{A.order} tensor; the demo multiplies a matrix "
              "by a vector (give a Matrix Market .mtx or .mtx.gz file)", file=sys.stderr)
        return 2
    # Convert once, outside the timed region, so scipy is timed on its own CSR SpMV only.
    reference = A.to_scipy().tocsr()
    x = np.random.default_rng(0).random(reference.shape[1])

    # kernels are generated and compiled (or loaded from the disk cache) on first call
    start = time.perf_counter()
    kernel = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr, "x": "d", "y": "d"})
    y = kernel(A=A, x=x).to_numpy()
    compile_seconds = time.perf_counter() - start

    expected = reference @ x
    ok = bool(np.allclose(y, expected))
    coiter_seconds = _median_time(lambda: kernel(A=A, x=x), args.repeat)
    scipy_seconds = _median_time(lambda: reference @ x, args.repeat)

    print(f"matrix         {_matrix_name(path)}")
    print(f"shape          {reference.shape[0]} x {reference.shape[1]}")
    print(f"nnz            {reference.nnz}")
    # relative to the result's largest entry: sums in another order differ in the last bits,
    # so the absolute error grows with the values (bcsstk16's results reach 2e9)
    scale = float(np.max(np.abs(expected), initial=0.0)) or 1.0
    print(f"max rel error  {float(np.max(np.abs(y - expected), initial=0.0)) / scale:.3e}")
    print(f"first call     {compile_seconds * 1e3:.1f} ms (code generation + compile or cache load + run)")
    print(f"coiter median  {coiter_seconds * 1e6:.1f} us")
    print(f"scipy median   {scipy_seconds * 1e6:.1f} us")
    print(f"speedup        {scipy_seconds / coiter_seconds:.2f}x (scipy time / coiter time)")
    if not ok:
        print("error: coiter and scipy results differ", file=sys.stderr)
        return 1
    return 0


def _cache_dir(args: argparse.Namespace) -> int:
    """Print the cache directory."""
    print(cache_dir())
    return 0


def _clear_cache(args: argparse.Namespace) -> int:
    """Clear the disk cache and say which directory was cleared."""
    clear_cache()
    print(f"cleared {cache_dir()}")
    return 0


def _median_time(run: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``run()`` in seconds over ``repeat`` runs, after a few warm-ups."""
    for _ in range(WARMUPS):
        run()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _matrix_name(path: Path) -> str:
    """``bcsstk16`` for ``.../bcsstk16.mtx.gz``."""
    name = path.name
    for suffix in (".gz", ".mtx"):
        name = name.removesuffix(suffix)
    return name


def _positive_int(text: str) -> int:
    """argparse type for an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


if __name__ == "__main__":
    sys.exit(main())
