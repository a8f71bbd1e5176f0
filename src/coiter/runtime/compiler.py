"""Compile generated C to shared libraries, cache them on disk and in memory, load via ctypes.

Disk layout: ``<cache_dir>/<key[:2]>/<key>.so`` with the source beside it as ``<key>.c``
(``<key>.cu`` for CUDA, see :mod:`coiter.runtime.cuda`), where ``key`` is the sha256 of
the source, the compiler command, its ``--version`` output, the flags (``$COITER_CFLAGS``,
not the generic ``$CFLAGS``) and the processor's model and features, and the library's
digest for its key as ``<key>.so.sha256``: a library is loaded
only when it and its digest are the user's own and match (:mod:`coiter.runtime.trust`).
Publishing is atomic (compile to a temporary file, then ``os.replace``), so any number of
threads or processes may compile the same source at once.

``COITER_SANITIZE=1`` builds C kernels with AddressSanitizer and UndefinedBehaviorSanitizer
(:data:`SANITIZE_FLAGS`, cached under their own keys); Python must then be started with the
ASan runtime preloaded, see docs/sanitizers.md.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import platformdirs

from coiter.errors import CompileError

from . import load, pool
from .cache_size import SHARD_NAME, after_build, touch
from .trust import private_dir, seal, sealed

DEFAULT_CC = "cc"
DEFAULT_CFLAGS = "-O3 -march=native -fPIC -std=c11"
# coiter's own variable: a CFLAGS set for some other build (-g, -O0) must not compile
# kernels without optimisation behind the user's back
CFLAGS_VARIABLE = "COITER_CFLAGS"

_OPENMP_PROBE = """\
#include <omp.h>
int coiter_openmp_probe(void) { return omp_get_max_threads(); }
"""

_loaded: dict[str, ctypes.CDLL] = {}
_load_lock = threading.Lock()


@dataclass(frozen=True)
class Toolchain:
    """A resolved compiler command and the complete flag list for one build."""

    command: tuple[str, ...]
    flags: tuple[str, ...]
    version: str


def cache_dir() -> Path:
    """Directory holding compiled libraries: ``$COITER_CACHE_DIR`` or the user cache dir."""
    override = os.environ.get("COITER_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("coiter"))


def clear_cache() -> None:
    """Delete every cached library and C file under :func:`cache_dir`.

    Libraries already loaded in this process stay usable: the loader keeps them mapped.
    """
    root = cache_dir()
    if not root.is_dir():
        return
    for entry in root.iterdir():
        if entry.is_dir() and SHARD_NAME.fullmatch(entry.name):
            shutil.rmtree(entry, ignore_errors=True)


def clear_memory_cache() -> None:
    """Forget the libraries loaded in this process, so the next load goes to the disk cache."""
    with _load_lock:
        _loaded.clear()


# Integer kernels wrap on overflow as NumPy's integer arrays do; without -fwrapv signed
# overflow is undefined in C and the compiler may assume it never happens.
WRAPPING_FLAGS = ("-fwrapv",)

# fast_math=True: floating-point sums may be reassociated (vectorized reductions); NaN,
# infinities and rounding of each operation stay IEEE (unlike -ffast-math).
# COITER_FAST_MATH tells the generated code (COITER_SCALAR_SUM in codegen/c.py)
FAST_MATH_FLAGS = ("-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math", "-DCOITER_FAST_MATH")


# COITER_SANITIZE=1: instrument kernels. -O1 (last -O wins over $COITER_CFLAGS' -O3) and frame
# pointers keep reports' stacks readable; -fno-sanitize-recover makes undefined behaviour
# abort like an ASan report instead of printing and going on, so a test run cannot pass over it.
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                  "-fno-sanitize-recover=undefined", "-g", "-O1")


def sanitizing() -> bool:
    """Whether ``$COITER_SANITIZE`` (re-read on every call) asks for sanitizer builds:
    any value other than empty or ``0``."""
    return os.environ.get("COITER_SANITIZE", "") not in ("", "0")


def require_sanitizer_runtime() -> None:
    """Raise :class:`CompileError` unless the AddressSanitizer runtime is loaded in this process.

    An ASan-instrumented library can only be loaded into a process whose ASan runtime came
    first: GCC's libasan otherwise kills the process at dlopen ("ASan runtime does not come
    first in initial library list"), Clang's leaves undefined symbols. Python is not built with
    ASan, so the runtime has to be preloaded; the error gives the command line.
    """
    # The runtime defines __asan_init, and a preloaded library is in the global symbol scope.
    if hasattr(ctypes.CDLL(None), "__asan_init"):
        return
    command = _compiler_command()
    cc = shlex.join(command)
    path = _run([*command, "-print-file-name=libasan.so"]).stdout.strip()
    # -print-file-name echoes the bare name when the compiler has no such file
    missing = "" if os.path.isabs(path) else (
        f"\n({cc} has no libasan.so: install its ASan runtime, or preload Clang's "
        "libclang_rt.asan-<arch>.so)")
    # libstdc++ is preloaded too: ASan's C++ exception interceptor resolves it at start-up and
    # aborts on the first throw (SciPy's Matrix Market reader) when it is loaded later.
    raise CompileError(
        "COITER_SANITIZE is set, so kernels are built with AddressSanitizer, but its runtime is "
        "not loaded in this Python process; Python is not built with ASan, so start it as\n"
        f'  COITER_SANITIZE=1 LD_PRELOAD="$({cc} -print-file-name=libasan.so) '
        f'$({cc} -print-file-name=libstdc++.so)" ASAN_OPTIONS=detect_leaks=0 '
        "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 python ..."
        f"{missing}\nor unset COITER_SANITIZE (see docs/sanitizers.md)"
    )


# Sources this large are compiled at a lower level (the last -O wins). GCC's -O3 time grows
# faster than the size of one function: a kernel merging five sparse operands at each of
# three loops (thousands of lattice cases, 1 MB of C) took over 10 minutes at -O3, 40 s
# at -O1 and 4 s at -O0. The largest kernels of the test suite and benchmarks hold 210 KB.
OPTIMIZATION_BY_SIZE = ((1 << 20, "-O0"), (256 << 10, "-O1"))


def compile_library(source: str, *, openmp: bool = True, fast_math: bool = False) -> Path:
    """Compile C ``source`` into a shared library and return its path, reusing the disk cache.

    Raises :class:`CompileError` when the compiler is missing or rejects the source.
    """
    toolchain = _toolchain(openmp, fast_math)
    level = next((flag for size, flag in OPTIMIZATION_BY_SIZE if len(source) > size), None)
    if level is not None:
        toolchain = replace(toolchain, flags=(*toolchain.flags, level))
    return build_cached(source, toolchain, ".c", ("-lm",), "C")


def build_cached(source: str, toolchain: Toolchain, suffix: str, libs: tuple[str, ...],
                 language: str) -> Path:
    """Build ``source`` (saved with ``suffix``) into a shared library with ``toolchain``,
    or return the cached one; ``language`` names the compiler in errors."""
    key = _cache_key(source, toolchain)
    root = private_dir(cache_dir())
    shard = private_dir(root / key[:2])
    so_path = shard / f"{key}.so"
    c_path = shard / f"{key}{suffix}"
    if sealed(key, so_path):
        touch(so_path)
        return so_path
    # missing, or not verifiably what this key built (truncated, swapped, planted): build it
    _write_atomically(c_path, source)

    fd, tmp_name = tempfile.mkstemp(prefix=f".{key}.", suffix=".so.tmp", dir=shard)
    os.close(fd)
    tmp_path = Path(tmp_name)
    try:
        result = _run(
            [*toolchain.command, *toolchain.flags, "-o", str(tmp_path), str(c_path), *libs]
        )
        if result.returncode != 0:
            raise CompileError(
                f"{language} compilation failed (exit status {result.returncode}) running "
                f"{shlex.join(toolchain.command)}",
                stderr=result.stderr,
                source_path=str(c_path),
            )
        # mkstemp creates mode 0600; a shared COITER_CACHE_DIR needs the library readable.
        os.chmod(tmp_path, 0o644)
        os.replace(tmp_path, so_path)
        seal(key, so_path)
    finally:
        tmp_path.unlink(missing_ok=True)
    after_build(root)
    return so_path


def load_library(source: str, *, openmp: bool = True, fast_math: bool = False) -> ctypes.CDLL:
    """Return a loaded library for C ``source``, compiling it on a cache miss.

    Repeated calls with the same source and settings (``$CC``, ``$COITER_CFLAGS`` included)
    return the same CDLL. Under ``COITER_SANITIZE`` a :class:`CompileError` says how to
    restart Python when the ASan runtime is not loaded (see :func:`require_sanitizer_runtime`).
    """
    sanitize = sanitizing()
    if sanitize:
        require_sanitizer_runtime()
    mode = (f"{'omp' if openmp else 'serial'}{'+fastmath' if fast_math else ''}"
            f"{'+sanitize' if sanitize else ''}")
    # $CC and $COITER_CFLAGS are re-read on every call: a process that changes them gets
    # the library they build, not one it loaded before
    toolchain = f"{os.environ.get('CC', '')}\0{os.environ.get(CFLAGS_VARIABLE, DEFAULT_CFLAGS)}"
    key = hashlib.sha256(f"{mode}\0{toolchain}\0{source}".encode()).hexdigest()
    return load_cached(key, lambda: compile_library(source, openmp=openmp, fast_math=fast_math))


def load_cached(key: str, build: Callable[[], Path]) -> ctypes.CDLL:
    """The library loaded under ``key`` in this process, else the one ``build`` makes."""
    library = _loaded.get(key)
    if library is not None:
        return library
    # One lock for all loads: concurrent callers of the same source must not compile it twice,
    # and compiling distinct sources concurrently from one process is rare enough not to matter.
    with _load_lock:
        library = _loaded.get(key)
        if library is None:
            path = build()
            try:
                library = ctypes.CDLL(str(path))
            except OSError as exc:
                raise CompileError(
                    "compiled library could not be loaded",
                    stderr=str(exc),
                    source_path=str(path.with_suffix(".c")),
                ) from exc
            pool.install(library, sanitizing())
            load.install(library)
            _loaded[key] = library
    return library


def _compiler_command() -> tuple[str, ...]:
    """``$CC`` (re-read on every call) resolved on the PATH; CompileError when missing."""
    cc = os.environ.get("CC") or DEFAULT_CC
    words = shlex.split(cc)
    executable = shutil.which(words[0]) if words else None
    if executable is None:
        raise CompileError(
            f"C compiler {cc!r} not found; set the CC environment variable to an installed "
            "C compiler (for example CC=gcc or CC=clang)"
        )
    return (executable, *words[1:])


def _toolchain(openmp: bool, fast_math: bool = False) -> Toolchain:
    """Resolve ``$CC``, ``$COITER_CFLAGS`` and ``$COITER_SANITIZE`` (re-read on every call)
    into a build configuration."""
    command = _compiler_command()
    flags = shlex.split(os.environ.get(CFLAGS_VARIABLE, DEFAULT_CFLAGS))
    flags += ["-shared", "-fPIC"] if "-fPIC" not in flags else ["-shared"]
    if openmp and _supports_openmp(command, tuple(flags)):
        flags.append("-fopenmp")
    # after $COITER_CFLAGS, so no user flags bring back the undefined behaviour
    flags += WRAPPING_FLAGS
    if fast_math:
        flags += FAST_MATH_FLAGS
    if sanitizing():
        # part of flags, hence of the cache key: instrumented and plain builds never mix
        flags += SANITIZE_FLAGS
    return Toolchain(command=command, flags=tuple(flags), version=compiler_version(command))


@functools.lru_cache(maxsize=None)
def cpu_signature() -> str:
    """The processor kernels are built for (``-march=native`` targets it): its model and
    feature flags from /proc/cpuinfo, else what :mod:`platform` knows. A cache folder
    shared by several machines then never hands one a library built for another's
    instructions (an illegal-instruction crash)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n\n")[0].splitlines()
    except OSError:
        lines = []
    wanted = ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part")
    fields = [line.strip() for line in lines if line.split(":")[0].strip() in wanted]
    return "\n".join(fields) or f"{platform.machine()} {platform.processor()}"


def _cache_key(source: str, toolchain: Toolchain) -> str:
    """sha256 over everything that determines the produced library: the source, the
    compiler, its flags and the processor."""
    digest = hashlib.sha256()
    command, flags = "\0".join(toolchain.command), "\0".join(toolchain.flags)
    for part in (source, command, toolchain.version, flags, cpu_signature()):
        digest.update(part.encode())
        # A separator that cannot appear in C source keeps field boundaries unambiguous.
        digest.update(b"\x00\x01\x00")
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def compiler_version(command: tuple[str, ...]) -> str:
    """The compiler's ``--version`` output; computed once per compiler per process."""
    result = _run([*command, "--version"])
    return result.stdout + result.stderr


@functools.lru_cache(maxsize=None)
def _supports_openmp(command: tuple[str, ...], flags: tuple[str, ...]) -> bool:
    """Whether ``command`` builds a shared library with ``-fopenmp``; probed once per process."""
    with tempfile.TemporaryDirectory(prefix="coiter-omp-") as tmp:
        probe = Path(tmp) / "probe.c"
        probe.write_text(_OPENMP_PROBE)
        output = Path(tmp) / "probe.so"
        result = _run([*command, *flags, "-fopenmp", "-o", str(output), str(probe)])
        return result.returncode == 0


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a compiler command, turning a vanished executable into a CompileError."""
    env = None
    if sanitizing() and "LD_PRELOAD" in os.environ:
        # The ASan runtime preloaded for Python (docs/sanitizers.md) is not for the compilers:
        # nvcc segfaults under it, and every gcc process would pay for ASan's start-up.
        env = {name: value for name, value in os.environ.items() if name != "LD_PRELOAD"}
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    except OSError as exc:
        raise CompileError(
            f"could not run C compiler {argv[0]!r} ({exc.strerror}); set the CC environment "
            "variable to an installed C compiler"
        ) from exc


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that concurrent readers never see a partial file."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".c.tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, path)
    finally:
        Path(tmp_name).unlink(missing_ok=True)
