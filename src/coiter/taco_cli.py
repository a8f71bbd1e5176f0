"""TACO's ``taco`` command line, so its users can switch: ``coiter "<expression>" -f=B:ds ...``.

The flags are TACO's (``-flag=value``, one dash) where they make sense for coiter: formats,
a schedule, dimensions, input and generated tensors, an output file, timing, threads, and
printing or writing the generated code. As with ``taco``, the kernel is only printed unless
every operand is read (``-i``) or generated (``-g``); then it runs.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

import coiter
from coiter.errors import CoiterError
from coiter.notation.ast import accesses

DEFAULT_DIMENSION = 42  # TACO's default for modes nothing sizes
GENERATORS = ("d", "r", "s", "h")  # -g fills

USAGE = """\
Usage: coiter <index expression> [options]      (the flags of TACO's taco tool)

Examples:
  coiter "a(i) = b(i) + c(i)"                            # dense vector add: prints the C
  coiter "a(i) = b(i) + c(i)" -f=b:s -f=c:s -f=a:s       # sparse vector add
  coiter "a(i) = B(i,j) * c(j)" -f=B:ds                  # SpMV
  coiter "A(i,l) = B(i,j,k) * C(j,l) * D(k,l)" -f=B:sss  # MTTKRP
  coiter "a(i) = B(i,j) * c(j)" -f=B:ds -i=B:m.mtx -g=c:r -o=a:a.tns -time=10

Options:
  -f=<tensor>:<format>[:<ordering>]  format of a tensor: a letter per mode (d dense, s sparse,
                                     and coiter's other levels), then optionally the mode
                                     ordering (A:ds:1,0 is CSC). Tensors default to dense.
  -s=<schedule>                      scheduling commands, as TACO writes them:
                                     "split(i,i0,i1,32),parallelize(i0,CPUThread,NoRaces)"
  -d=<var|tensor>:<size>[,<size>..]  dimensions of index variables (i:5) or tensors (A:10,10);
                                     42 where nothing else sizes a mode
  -i=<tensor>:<file>                 read a tensor (.mtx .tns .rb .npz, gzip'ed too)
  -g=<tensor>:<fill>                 generate a tensor: d (dense sequence), r (dense random),
                                     s (sparse, 5% nonzeros), h (hypersparse, 0.5%)
  -o=<tensor>:<file>                 write a tensor after the run (.mtx .tns .npz)
  -time[=<repeat>]                   time compilation and <repeat> runs (default 1)
  -nthreads=<n>                      threads of parallel loops
  -print-compute, -print-c           print the generated C (the default when nothing runs)
  -print-concrete                    print the concrete index notation
  -print-lattice=<var>               print the merge lattice of an index variable (Graphviz DOT)
  -print-iteration-graph             print the iteration graph (Graphviz DOT)
  -write-source=<file>               write the generated C to a file (also -write-compute)
  -nocolor, -print-nocolor           accepted; output is never colored
  -help                              this text
"""


class UsageError(Exception):
    """A malformed command line: reported with the usage text."""


@dataclass
class Options:
    """The parsed command line."""

    expression: str = ""
    formats: dict[str, str] = field(default_factory=dict)
    schedule: str | None = None
    dims: dict[str, list[int]] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    fills: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    repeat: int | None = None  # -time
    threads: int | None = None
    print_c: bool = False
    print_concrete: bool = False
    print_lattice: str | None = None
    print_graph: bool = False
    write_source: str | None = None


def _pair(flag: str, value: str, parts: int = 2) -> list[str]:
    pieces = value.split(":", parts - 1)
    if len(pieces) != parts or not all(pieces):
        raise UsageError(f"-{flag} expects <tensor>:<value>, got {value!r}")
    return pieces


def _int(flag: str, text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise UsageError(f"-{flag} expects a positive integer, got {text!r}") from None
    if n < 1:
        raise UsageError(f"-{flag} expects a positive integer, got {n}")
    return n


def parse_args(argv: Sequence[str]) -> Options | None:
    """The options of ``argv``; None when help was asked for."""
    opts = Options()
    for arg in argv:
        if not arg.startswith("-"):
            if opts.expression:
                raise UsageError(f"two expressions given: {opts.expression!r} and {arg!r}")
            opts.expression = arg
            continue
        flag, eq, value = arg[1:].partition("=")
        if flag in ("help", "h", "-help"):
            return None
        if flag == "f":
            name, fmt = _pair(flag, value)
            opts.formats[name] = fmt
        elif flag == "s":
            opts.schedule = value
        elif flag == "d":
            name, sizes = _pair(flag, value)
            opts.dims[name] = [_int(flag, s) for s in sizes.split(",")]
        elif flag == "i":
            name, path = _pair(flag, value)
            opts.inputs[name] = path
        elif flag == "g":
            name, kind = _pair(flag, value)
            if kind not in GENERATORS:
                raise UsageError(f"-g: unknown fill {kind!r} for {name}; expected one of {', '.join(GENERATORS)}")
            opts.fills[name] = kind
        elif flag == "o":
            name, path = _pair(flag, value)
            opts.outputs[name] = path
        elif flag == "time":
            opts.repeat = _int(flag, value) if eq else 1
        elif flag == "nthreads":
            opts.threads = _int(flag, value)
        elif flag in ("print-compute", "print-c"):
            opts.print_c = True
        elif flag == "print-concrete":
            opts.print_concrete = True
        elif flag == "print-lattice":
            if not value:
                raise UsageError("-print-lattice expects an index variable: -print-lattice=i")
            opts.print_lattice = value
        elif flag == "print-iteration-graph":
            opts.print_graph = True
        elif flag in ("write-source", "write-compute"):
            if not value:
                raise UsageError(f"-{flag} expects a file name")
            opts.write_source = value
        elif flag in ("nocolor", "print-nocolor"):
            pass
        else:
            raise UsageError(f"unknown option {arg!r}")
    if not opts.expression:
        raise UsageError("no index expression given")
    return opts


def _generate(kind: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "d":
        return np.arange(1, int(np.prod(shape)) + 1, dtype=np.float64).reshape(shape)
    values = rng.random(shape)
    if kind == "r":
        return values
    keep = {"s": 0.05, "h": 0.005}[kind]
    return values * (rng.random(shape) < keep)


def _shapes(assignment: coiter.Assignment, opts: Options, loaded: dict[str, coiter.Tensor]) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape: read tensors' own, then -d for tensors and index variables, then
    what the read tensors give each index variable, else 42."""
    uses = {x.tensor: [str(v) for v in x.indices] for x in [assignment.lhs, *accesses(assignment.rhs)]}
    # (an affine subscript such as i+k sizes nothing: its mode takes -d=<tensor> or 42)
    var_size: dict[str, int] = {}
    for name, sizes in opts.dims.items():
        if name in uses and name not in var_size:
            if len(sizes) != len(uses[name]):
                raise UsageError(f"-d={name}: {len(sizes)} sizes for a tensor of order {len(uses[name])}")
            var_size.update({v: n for v, n in zip(uses[name], sizes) if v not in var_size})
        elif len(sizes) == 1 and any(name in vs for vs in uses.values()):
            var_size[name] = sizes[0]
        else:
            raise UsageError(f"-d={name}: {name} is neither a tensor nor an index variable of the expression")
    for name, t in loaded.items():
        for v, n in zip(uses.get(name, []), t.shape):
            var_size.setdefault(v, n)
    return {name: tuple(var_size.get(v, DEFAULT_DIMENSION) for v in vs) for name, vs in uses.items()}


def _describe(name: str, t: coiter.Tensor) -> str:
    s = t.storage
    size = s.vals.nbytes + sum(a.nbytes for level in s.levels for a in level.values())
    return f"{name} size: ({' x '.join(map(str, t.shape))}), {size} bytes"


def run(opts: Options) -> int:
    """Compile the expression, print or write what was asked, and run it when every
    operand is given."""
    assignment = coiter.parse(opts.expression)
    names = {x.tensor for x in [assignment.lhs, *accesses(assignment.rhs)]}
    for flag, given in (("f", opts.formats), ("i", opts.inputs), ("g", opts.fills), ("o", opts.outputs)):
        unknown = sorted(set(given) - names)
        if unknown:
            raise UsageError(f"-{flag} names {', '.join(unknown)}, not a tensor of {opts.expression!r} "
                             f"(its tensors: {', '.join(sorted(names))})")
    loaded: dict[str, coiter.Tensor] = {}
    for name, path in opts.inputs.items():
        start = time.perf_counter()
        loaded[name] = coiter.read(path, format=opts.formats.get(name), name=name)
        if opts.repeat:
            print(f"{name} file read: {(time.perf_counter() - start) * 1e3:.2f} ms")
        print(_describe(name, loaded[name]))
    shapes = _shapes(assignment, opts, loaded)
    for k, (name, kind) in enumerate(sorted(opts.fills.items())):
        loaded[name] = coiter.Tensor.from_numpy(_generate(kind, shapes[name], k),
                                                format=opts.formats.get(name), name=name)
        print(_describe(name, loaded[name]))

    start = time.perf_counter()
    kernel = coiter.compile(assignment, formats=opts.formats, schedule=opts.schedule)
    operands = {x.tensor for x in accesses(assignment.rhs)}
    evaluate = operands <= set(loaded)
    if opts.print_concrete:
        print(kernel.concrete)
    if opts.print_lattice:
        print(kernel.merge_lattice(opts.print_lattice), end="")
    if opts.print_graph:
        print(kernel.iteration_graph(), end="")
    shown = opts.print_concrete or opts.print_lattice or opts.print_graph or opts.write_source
    if opts.print_c or not (evaluate or shown):
        print(kernel.source)
    if opts.write_source:
        Path(opts.write_source).write_text(kernel.source)
    if not evaluate:
        return 0
    args = {name: loaded[name] for name in operands}
    result = kernel(threads=opts.threads, **args)  # also builds the kernel's variant
    if opts.repeat:
        print(f"Compile: {(time.perf_counter() - start) * 1e3:.2f} ms")
        samples = []
        for _ in range(opts.repeat):
            t0 = time.perf_counter()
            result = kernel(threads=opts.threads, **args)
            samples.append(time.perf_counter() - t0)
        spread = statistics.stdev(samples) * 1e3 if len(samples) > 1 else 0.0
        print(f"Compute: median {statistics.median(samples) * 1e3:.3f} ms, mean "
              f"{statistics.mean(samples) * 1e3:.3f} ms, stdev {spread:.3f} ms ({opts.repeat} runs)")
    loaded[assignment.lhs.tensor] = result
    for name, path in opts.outputs.items():
        if name not in loaded:
            raise UsageError(f"-o={name}: {name} was neither read, generated nor computed")
        coiter.write(path, loaded[name])
    return 0


def main(argv: Sequence[str]) -> int:
    """Run TACO-style ``argv``; the exit status (2 for a bad command line or expression)."""
    try:
        opts = parse_args(argv)
        if opts is None:
            print(USAGE, end="")
            return 0
        return run(opts)
    except UsageError as e:
        print(f"Error: {e}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    except (CoiterError, OSError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
