"""Tests for coiter.runtime: compiling C, the disk and memory caches, and error reporting."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coiter.errors import CompileError
from coiter.runtime import cache_dir, clear_cache, clear_memory_cache, compile_library, load_library
from coiter.runtime import compiler

ADD_SOURCE = "int add(int a, int b) { return a + b; }\n"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Give every test its own empty disk cache and an empty in-memory cache."""
    root = tmp_path / "cache"
    monkeypatch.setenv("COITER_CACHE_DIR", str(root))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("COITER_CFLAGS", raising=False)
    clear_memory_cache()
    yield root
    clear_memory_cache()


def _add(library: ctypes.CDLL) -> ctypes._CFuncPtr:
    """The library's ``add`` function with its C signature declared."""
    function = library.add
    function.argtypes = [ctypes.c_int, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def test_compile_and_call() -> None:
    assert _add(load_library(ADD_SOURCE))(2, 40) == 42


def test_second_load_hits_memory_cache() -> None:
    assert load_library(ADD_SOURCE) is load_library(ADD_SOURCE)


def test_disk_cache_hit_runs_no_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    path = compile_library(ADD_SOURCE)
    inode = path.stat().st_ino  # a rebuild replaces the file; a hit only marks it used
    first = load_library(ADD_SOURCE)
    clear_memory_cache()

    def no_compiler(argv: list[str]) -> subprocess.CompletedProcess[str]:
        raise AssertionError(f"compiler ran on a disk cache hit: {argv}")

    monkeypatch.setattr(compiler, "_run", no_compiler)
    second = load_library(ADD_SOURCE)
    assert second is not first
    assert _add(second)(1, 2) == 3
    assert path.stat().st_ino == inode


def test_layout_and_cache_dir_env(isolated_cache: Path) -> None:
    assert cache_dir() == isolated_cache
    path = compile_library(ADD_SOURCE)
    key = path.stem
    assert path == isolated_cache / key[:2] / f"{key}.so"
    assert len(key) == 64
    assert path.with_suffix(".c").read_text() == ADD_SOURCE
    leftovers = [p.name for p in path.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_compile_error_carries_stderr_and_source() -> None:
    bad = "int broken(void) { return undeclared_name; }\n"
    with pytest.raises(CompileError) as info:
        load_library(bad)
    error = info.value
    assert "undeclared_name" in error.stderr
    assert error.source_path is not None
    assert Path(error.source_path).read_text() == bad
    assert not Path(error.source_path).with_suffix(".so").exists()


def test_missing_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "coiter-no-such-compiler")
    with pytest.raises(CompileError, match="CC"):
        load_library("int missing_cc(void) { return 0; }\n")


def test_cflags_are_used_and_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "int value(void) { return COITER_VALUE; }\n"
    monkeypatch.setenv("COITER_CFLAGS", "-O1 -DCOITER_VALUE=7")
    seven = compile_library(source)
    monkeypatch.setenv("COITER_CFLAGS", "-O1 -DCOITER_VALUE=9")
    nine = compile_library(source)
    assert seven != nine
    assert ctypes.CDLL(str(seven)).value() == 7
    assert ctypes.CDLL(str(nine)).value() == 9


@pytest.mark.parametrize("padding, level", [(0, "-O3"), (300 << 10, "-O1"), (1100 << 10, "-O0")])
def test_large_sources_compile_at_a_lower_level(monkeypatch: pytest.MonkeyPatch, padding: int,
                                                level: str) -> None:
    # GCC's -O3 took over 10 minutes on one 1 MB kernel (a many-way merge's lattice cases)
    commands: list[list[str]] = []
    run = compiler._run

    def recording(argv: list[str]) -> subprocess.CompletedProcess[str]:
        commands.append(list(argv))
        return run(argv)

    monkeypatch.setattr(compiler, "_run", recording)
    source = ADD_SOURCE + "/*" + " " * padding + "*/\n"
    assert _add(load_library(source))(2, 40) == 42
    build = next(argv for argv in commands if "-shared" in argv)
    assert [flag for flag in build if flag.startswith("-O")][-1] == level


def test_loaded_libraries_follow_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that changes COITER_CFLAGS (or CC) loads the library built with the new
    flags, not the one loaded before under the same source."""
    source = "int value(void) { return COITER_VALUE; }\n"
    monkeypatch.setenv("COITER_CFLAGS", "-O1 -DCOITER_VALUE=7")
    assert load_library(source).value() == 7
    monkeypatch.setenv("COITER_CFLAGS", "-O1 -DCOITER_VALUE=9")
    assert load_library(source).value() == 9
    monkeypatch.setenv("COITER_CFLAGS", "-O1 -DCOITER_VALUE=7")
    assert load_library(source).value() == 7


def test_the_generic_cflags_variable_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # a CFLAGS meant for another build (here: one that defines a macro) leaves kernels alone
    source = "int value(void) {\n#ifdef COITER_VALUE\n  return 1;\n#else\n  return 0;\n#endif\n}\n"
    monkeypatch.setenv("CFLAGS", "-O0 -DCOITER_VALUE")
    assert ctypes.CDLL(str(compile_library(source))).value() == 0


def test_the_processor_is_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from coiter.runtime import compiler

    source = "int value(void) { return 3; }\n"
    here = compile_library(source)
    assert compiler.cpu_signature()  # the model and flags of this machine's processor
    monkeypatch.setattr(compiler, "cpu_signature", lambda: "another processor")
    there = compile_library(source)
    assert here != there and ctypes.CDLL(str(there)).value() == 3


def test_openmp_switch() -> None:
    source = (
        "int has_openmp(void) {\n#ifdef _OPENMP\n  return 1;\n#else\n  return 0;\n#endif\n}\n"
    )
    serial = compile_library(source, openmp=False)
    assert ctypes.CDLL(str(serial)).has_openmp() == 0
    assert ctypes.CDLL(str(compile_library(source, openmp=True))).has_openmp() in (0, 1)


def test_clear_cache_removes_only_cache_entries(isolated_cache: Path) -> None:
    path = compile_library(ADD_SOURCE)
    unrelated = isolated_cache / "keep-me.txt"
    unrelated.write_text("not a cache entry")
    clear_cache()
    assert not path.exists()
    assert unrelated.exists()


@pytest.mark.parametrize("entry", [compile_library, load_library])
def test_same_source_from_four_threads(entry: Callable[[str], object]) -> None:
    source = f"int add(int a, int b) {{ return a + b; }}\n/* {entry.__name__} */\n"
    barrier = threading.Barrier(4)
    results: list[object] = []
    errors: list[BaseException] = []

    def work() -> None:
        barrier.wait()
        try:
            results.append(entry(source))
        except BaseException as exc:  # re-raised below in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(results) == 4
    for result in results:
        library = ctypes.CDLL(str(result)) if isinstance(result, Path) else result
        assert _add(library)(20, 22) == 42


def test_same_source_from_four_processes(isolated_cache: Path) -> None:
    source = "int add(int a, int b) { return a + b; }\n/* processes */\n"
    script = (
        "import sys\n"
        "from coiter.runtime import compile_library\n"
        "print(compile_library(sys.stdin.read()))\n"
    )
    src_dir = str(Path(compiler.__file__).resolve().parents[2])
    python_path = os.pathsep.join(filter(None, [src_dir, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    outputs = [proc.communicate(source) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 4, outputs
    paths = {Path(out.strip()) for out, _ in outputs}
    assert len(paths) == 1
    assert _add(ctypes.CDLL(str(paths.pop())))(1, 1) == 2
