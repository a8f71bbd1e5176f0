"""The sanitizer build mode (COITER_SANITIZE=1, docs/sanitizers.md).

Instrumented kernels only load into a process started with the ASan runtime preloaded, so
every run happens in a subprocess with its own environment and kernel cache: a handful of
kernels (integer ones overflowing, scheduled ones that once ran past their arrays, and every
kernel of the schedule fuzzer) checked against NumPy/SciPy with no sanitizer report, an
out-of-bounds read and an oversized shift that must be reported (proof that the code really is instrumented), and
the CompileError raised when the runtime is not preloaded.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coiter.runtime.compiler import SANITIZE_FLAGS, _cache_key, _compiler_command, _run, _toolchain


def _compiler_file(name: str) -> str | None:
    """The path of the C compiler's ``name``, or None when it has none."""
    path = _run([*_compiler_command(), f"-print-file-name={name}"]).stdout.strip()
    # -print-file-name echoes the bare name when the compiler has no such file
    return path if os.path.isabs(path) and os.path.exists(path) else None


ASAN_RUNTIME = _compiler_file("libasan.so")
needs_asan = pytest.mark.skipif(
    ASAN_RUNTIME is None,
    reason="the C compiler has no ASan runtime (-print-file-name=libasan.so gives the bare name)")
# preloaded with the runtime as docs/sanitizers.md says (ASan aborts on C++ throws otherwise)
PRELOAD = " ".join(filter(None, [ASAN_RUNTIME, _compiler_file("libstdc++.so")]))

SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "runtime error:")


def _run_command(argv: list[str], cache: Path, preload: bool = True) -> subprocess.CompletedProcess[str]:
    """``argv`` run with sanitizer builds into the kernel cache ``cache``."""
    env = dict(os.environ, COITER_SANITIZE="1", COITER_CACHE_DIR=str(cache),
               ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = PRELOAD
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)


def _run_python(code: str, cache: Path, preload: bool = True) -> subprocess.CompletedProcess[str]:
    return _run_command([sys.executable, "-c", textwrap.dedent(code)], cache, preload)


KERNELS = """
    import numpy as np
    import scipy.sparse as sp
    import coiter

    def close(got, want):
        np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-12, atol=1e-12)

    rng = np.random.default_rng(0)
    A = sp.random(300, 200, density=0.05, random_state=1, format="csr")
    B = sp.random(200, 150, density=0.05, random_state=2, format="csr")
    x = rng.standard_normal(200)

    close(coiter.evaluate("y(i) = A(i,j) * x(j)", A=A, x=x), A @ x)

    C = coiter.evaluate("C(i,j) = A(i,k) * B(k,j)", out_format="csr", A=A, B=B)
    close(C, (A @ B).toarray())

    M = [sp.random(60, 50, density=0.1, random_state=s, format="csr") for s in (3, 4, 5)]
    S = coiter.evaluate("S(i,j) = P(i,j) + Q(i,j) + R(i,j)", out_format="csr",
                        P=M[0], Q=M[1], R=M[2])
    close(S, (M[0] + M[1] + M[2]).toarray())

    T = rng.standard_normal((12, 10, 8))
    T[rng.random(T.shape) > 0.2] = 0
    c = rng.standard_normal(8)
    close(coiter.evaluate("Y(i,j) = T(i,j,k) * c(k)", T=coiter.Tensor.from_numpy(T, format="sss"),
                          c=c), T @ c)

    big = sp.random(40000, 3000, density=0.002, random_state=6, format="csr")
    z = rng.standard_normal(3000)
    spmv = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"},
                          schedule="parallelize(i,CPUThread,NoRaces)")
    close(spmv(A=big, x=z, threads=4), big @ z)
    assert "#pragma omp for" in spmv.source
    print("KERNELS OK")
"""


@needs_asan
def test_kernels_run_clean_under_the_sanitizers(tmp_path: Path) -> None:
    result = _run_python(KERNELS, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "KERNELS OK" in result.stdout
    for report in SANITIZER_REPORTS:
        assert report not in result.stderr, result.stderr[-4000:]
    # the kernels that ran were instrumented builds
    libraries = list(tmp_path.rglob("*.so"))
    assert libraries and all(b"__asan_report" in lib.read_bytes() for lib in libraries)


# Schedules whose kernels read or wrote past an array (caught by the schedule fuzzer under
# ASan, each value still right): a vectorized split of a split's inner piece ran its last
# block past the rows (no guard on i), and positions under a fused loop's located parent
# were walked from pos[-1] where the locate missed.
SCHEDULED = """
    import numpy as np
    import scipy.sparse as sp
    import coiter

    A = sp.random(37, 29, density=0.15, random_state=1, format="csr")
    x = np.random.default_rng(0).random(29)
    for schedule in ("split(i,i0,i1,4),split(i1,i10,i11,1),parallelize(i11,CPUVector,NoRaces)",
                     "split(i,i0,i1,4),divide(i1,i10,i11,2),parallelize(i11,CPUVector,NoRaces)"):
        k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule=schedule)
        np.testing.assert_allclose(k(A=A, x=x, threads=2).to_numpy(), A @ x, rtol=1e-12)

    rng = np.random.default_rng(3)
    B = rng.random((9, 7, 11)) * (rng.random((9, 7, 11)) < 0.2)
    B[:, 3] = 0  # a (i, j) fiber missing in every row
    c = rng.random(11)
    for schedule in ("fuse(i,j,f),pos(k,kp,B(i,j,k))",
                     "fuse(i,j,f),pos(k,kp,B(i,j,k)),parallelize(f,CPUThread,NoRaces)"):
        k = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats={"B": "sss"}, schedule=schedule)
        got = k(B=coiter.Tensor.from_numpy(B, format="sss"), c=c, threads=2).to_numpy()
        np.testing.assert_allclose(got, B @ c, rtol=1e-12)
    print("SCHEDULED OK")
"""


@needs_asan
def test_scheduled_kernels_stay_in_bounds(tmp_path: Path) -> None:
    result = _run_python(SCHEDULED, tmp_path)
    assert result.returncode == 0 and "SCHEDULED OK" in result.stdout, result.stderr[-4000:]
    assert not any(r in result.stderr for r in SANITIZER_REPORTS), result.stderr[-4000:]


@needs_asan
def test_schedule_fuzzer_runs_clean_under_the_sanitizers(tmp_path: Path) -> None:
    """Every kernel the schedule fuzzer builds stays inside its arrays: values right is not
    enough, a write past the result corrupts the heap and kills the process later."""
    tests = Path(__file__).parent
    result = _run_command([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                           str(tests / "test_schedules.py"), "-k", "test_schedule_fuzzing"], tmp_path)
    assert result.returncode == 0 and "1 passed" in result.stdout, \
        (result.stdout + result.stderr)[-4000:]
    assert not any(r in result.stderr for r in SANITIZER_REPORTS), result.stderr[-4000:]


OUT_OF_BOUNDS = """
    import ctypes
    from coiter.runtime import load_library

    lib = load_library("int f(int* a) { return a[10]; }\\n")
    lib.f.argtypes = [ctypes.c_void_p]
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    buffer = libc.malloc(2 * ctypes.sizeof(ctypes.c_int))
    print("read", lib.f(buffer))
"""

# kernels wrap on signed overflow (-fwrapv), so the undefined behaviour shown is a shift
BAD_SHIFT = """
    from coiter.runtime import load_library

    lib = load_library("int g(int x) { return 1 << x; }\\n")
    print("sum", lib.g(40))
"""

INTEGER_WRAPPING = """
    import numpy as np
    import coiter

    x = np.array([2**62, -2**63, 3, 2**40], dtype=np.int64)
    got = coiter.evaluate("y(i) = x(i) * x(i) + x(i) * 4", x=x).to_numpy()
    total = coiter.evaluate("s = x(i) * 2", x=x).to_numpy()
    with np.errstate(over="ignore"):
        assert (got == x * x + x * 4).all(), got
        assert total == (x * 2).sum(), total
    print("wrapped")
"""


@needs_asan
@pytest.mark.parametrize("code,report", [
    (OUT_OF_BOUNDS, "ERROR: AddressSanitizer: heap-buffer-overflow"),
    (BAD_SHIFT, "runtime error: shift exponent 40 is too large"),
], ids=["out_of_bounds", "bad_shift"])
def test_sanitizers_catch_errors(tmp_path: Path, code: str, report: str) -> None:
    result = _run_python(code, tmp_path)
    assert report in result.stderr, result.stderr[-4000:]
    assert result.returncode != 0 and "read" not in result.stdout and "sum" not in result.stdout


@needs_asan
def test_integer_kernels_wrap_like_numpy_without_a_report(tmp_path: Path) -> None:
    # signed overflow was undefined behaviour in integer kernels (UBSan: signed integer overflow)
    result = _run_python(INTEGER_WRAPPING, tmp_path)
    assert result.returncode == 0 and "wrapped" in result.stdout, result.stderr[-4000:]
    assert not any(r in result.stderr for r in SANITIZER_REPORTS), result.stderr[-4000:]


def test_missing_runtime_is_a_compile_error_with_the_command(tmp_path: Path) -> None:
    code = """
        import coiter
        from coiter.runtime import load_library
        try:
            load_library("int f(void) { return 1; }\\n")
        except coiter.CompileError as e:
            print(e)
        else:
            print("LOADED WITHOUT RUNTIME")
    """
    result = _run_python(code, tmp_path, preload=False)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "LOADED WITHOUT RUNTIME" not in result.stdout
    assert 'LD_PRELOAD="$(' in result.stdout and "-print-file-name=libasan.so)" in result.stdout
    assert "ASAN_OPTIONS=detect_leaks=0" in result.stdout


def test_sanitize_builds_have_their_own_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COITER_SANITIZE", raising=False)
    plain = _toolchain(True)
    monkeypatch.setenv("COITER_SANITIZE", "1")
    sanitized = _toolchain(True)
    assert set(SANITIZE_FLAGS) <= set(sanitized.flags)
    assert not set(SANITIZE_FLAGS) & set(plain.flags)
    assert "-fopenmp" in sanitized.flags or "-fopenmp" not in plain.flags
    assert _cache_key("int f;", plain) != _cache_key("int f;", sanitized)
    monkeypatch.setenv("COITER_SANITIZE", "0")
    assert _toolchain(True) == plain
