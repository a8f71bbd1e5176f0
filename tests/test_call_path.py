"""The call path: the C call plan (coiter.runtime._fastcall) against the ctypes path and
NumPy/SciPy, for every value type and index width, the operands it refuses (which must
still compute or raise as before), the work-based thread count and GIL release."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
import coiter.kernel
import coiter.nn
from coiter.codegen.c import WORK_PER_THREAD, preamble
from coiter.runtime import callplan
from coiter.runtime.compiler import load_library
from helpers import random_array

DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32,
          np.uint16, np.uint8, np.complex128, np.complex64, np.bool_]
needs_plan = pytest.mark.skipif(not callplan.available(), reason="the C call path was not built")


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    a = random_array(rng, shape, 0.4)
    if np.dtype(dtype).kind == "c":
        return (a + 1j * random_array(rng, shape, 0.4)).astype(dtype)
    if np.dtype(dtype).kind in "iub":
        return (np.round(a * 3)).astype(dtype)
    return a.astype(dtype)


def _reference(expr: str, **arrays: np.ndarray) -> np.ndarray:
    spec = {"y(i) = A(i,j) * x(j)": "ij,j->i", "C(i,k) = A(i,j) * B(j,k)": "ij,jk->ik",
            "C(i,j) = A(i,k) * B(k,j)": "ik,kj->ij", "a = A(i,j) * B(i,j)": "ij,ij->",
            "A(i,j) = B(i,j,k) * c(k)": "ijk,k->ij"}[expr]
    ops = list(arrays.values())
    if all(op.dtype == np.bool_ for op in ops):
        return np.einsum(spec, *[op.astype(np.int64) for op in ops]) != 0
    return np.einsum(spec, *ops)


CASES = [  # expression, formats, operand shapes
    ("y(i) = A(i,j) * x(j)", {"A": "csr"}, {"A": (30, 20), "x": (20,)}),
    ("C(i,k) = A(i,j) * B(j,k)", {"A": "csr"}, {"A": (12, 9), "B": (9, 4)}),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr", "C": "csr"}, {"A": (10, 8), "B": (8, 7)}),
    ("a = A(i,j) * B(i,j)", {"A": "csr", "B": "csr"}, {"A": (9, 9), "B": (9, 9)}),
    ("A(i,j) = B(i,j,k) * c(k)", {"B": "sss", "A": "ss"}, {"B": (5, 6, 7), "c": (7,)}),
]


def _operands(formats: dict, shapes: dict, dtype: type, itype: type, seed: int):
    rng = np.random.default_rng(seed)
    arrays = {n: _values(rng, s, dtype) for n, s in shapes.items()}
    ops = {}
    for name, a in arrays.items():
        fmt = formats.get(name)
        if fmt is None:
            ops[name] = a
            continue
        t = coiter.Tensor.from_numpy(a, format=fmt)
        if itype == np.int64:  # the same tensor with int64 index arrays
            s = t.storage
            levels = [{k: v.astype(np.int64) for k, v in lv.items()} for lv in s.levels]
            t = coiter.Tensor.from_arrays(s.shape, s.format, levels, s.vals)
        ops[name] = t
    return arrays, ops


@needs_plan
@pytest.mark.parametrize("expr,formats,shapes", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_plan_matches_numpy_every_type(expr, formats, shapes, dtype, itype) -> None:
    arrays, ops = _operands(formats, shapes, dtype, itype, 3)
    k = coiter.compile(expr, formats=formats)
    first = k(**ops)  # the Python path, which makes the plan
    assert k._plan is not None
    again = k._plan(ops, None)  # the C path itself, not a fallback
    assert again is not NotImplemented and again is not None
    expected = _reference(expr, **arrays)
    # float16 sums round every partial sum to 11 bits, NumPy's einsum differently
    tol = 1e-2 if dtype == np.float16 else 1e-5
    for got in (first, again):
        assert got.dtype == first.dtype
        np.testing.assert_allclose(got.to_numpy(), expected, rtol=tol, atol=tol)
    assert again.format == first.format and again.shape == first.shape
    # the arrays of results assembled by the kernel are owned by NumPy (no copy, no leak)
    for lv in again.storage.levels:
        for arr in lv.values():
            assert arr.flags.owndata or arr.base is not None


@pytest.mark.parametrize("expr,formats,shapes", CASES)
def test_ctypes_path_matches_numpy(expr, formats, shapes, monkeypatch) -> None:
    """Without the C extension every call goes through ctypes."""
    monkeypatch.setattr(coiter.kernel, "build_plan", lambda *a, **k: None)
    arrays, ops = _operands(formats, shapes, np.float64, np.int32, 5)
    k = coiter.compile(expr, formats=formats)
    for _ in range(2):
        np.testing.assert_allclose(k(**ops).to_numpy(), _reference(expr, **arrays), rtol=1e-10)
    assert k._plan is None


def test_without_the_extension_kernels_compute_through_python() -> None:
    """A build without ``coiter.runtime._fastcall``: Kernel's base is the Python
    ``KernelCall``, and calls (threads by keyword or position) still give SciPy's values."""
    script = """
import sys
sys.modules["coiter.runtime._fastcall"] = None  # as if the extension was not built
import numpy as np, scipy.sparse as sp, coiter
from coiter.runtime import callplan
assert not callplan.available() and coiter.Kernel.__mro__[1] is callplan.KernelCall
a = sp.random_array((30, 20), density=0.3, rng=1, format="csr")
x = np.random.default_rng(1).standard_normal(20)
k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
for call in (lambda: k(A=a, x=x), lambda: k(2, A=a, x=x), lambda: k(A=a, x=x, threads=1)):
    np.testing.assert_allclose(call().to_numpy(), a @ x, rtol=1e-12)
assert k._plan is None
"""
    subprocess.run([sys.executable, "-c", script], check=True)


@needs_plan
def test_plan_refusals_still_compute_or_raise() -> None:
    rng = np.random.default_rng(1)
    A = sp.random(40, 30, density=0.2, random_state=2, format="csr")
    x = rng.standard_normal(30)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    At = coiter.Tensor.from_scipy(A)
    k(A=At, x=x)
    plan = k._plan
    expected = A @ x
    # operands the plan does not bind: SciPy, a strided array, another value type, a list
    assert plan({"A": A, "x": x}, None) is NotImplemented
    assert plan({"A": At, "x": np.repeat(x, 2)[::2]}, None) is NotImplemented
    assert plan({"A": At, "x": x.astype(np.float32)}, None) is NotImplemented
    for ops in ({"A": A, "x": x}, {"A": At, "x": np.repeat(x, 2)[::2]}, {"A": At, "x": list(x)},
                {"A": At, "x": x.astype(np.float32)}):
        np.testing.assert_allclose(k(**ops).to_numpy(), expected, rtol=1e-5)
    # what the Python path reports
    with pytest.raises(coiter.ShapeError, match="index variable j has size 30"):
        k(A=At, x=np.ones(31))
    with pytest.raises(coiter.ShapeError, match="missing operand"):
        k(A=At)
    with pytest.raises(coiter.ShapeError, match="unexpected operand"):
        k(A=At, x=x, z=x)
    for bad in (0, -1, True, 2.0):
        assert plan({"A": At, "x": x}, bad) is NotImplemented
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            k(A=At, x=x, threads=bad)


@needs_plan
def test_plan_takes_exactly_an_operand_dict_and_threads() -> None:
    """The plan's C entry (a vectorcall, no argument tuple) checks its arguments itself:
    anything but (dict, threads) positionally is a TypeError, and a right call still
    computes SciPy's values."""
    A = sp.random(30, 20, density=0.3, random_state=3, format="csr")
    x = np.random.default_rng(3).standard_normal(20)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    At = coiter.Tensor.from_scipy(A)
    k(A=At, x=x)
    plan = k._plan
    ops = {"A": At, "x": x}
    for call in (lambda: plan(ops), lambda: plan(ops, None, None), lambda: plan(),
                 lambda: plan(operands=ops, threads=None), lambda: plan(ops, threads=None),
                 lambda: plan(list(ops.items()), None)):
        with pytest.raises(TypeError, match="operands \\(a dict\\) and threads"):
            call()
    np.testing.assert_allclose(plan(ops, None).to_numpy(), A @ x, rtol=1e-12)
    np.testing.assert_allclose(plan(ops, 2).to_numpy(), A @ x, rtol=1e-12)
    bare = type(plan).__new__(type(plan))  # no kernel bound: an error, not a call through null
    with pytest.raises(TypeError, match="not initialised"):
        bare({}, None)


@needs_plan
def test_kernel_calls_enter_the_plan_in_c_and_decline_to_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Kernel's call goes in C to its plan (Tensors, arrays, SciPy matrices, ``threads``
    by keyword); what the plan declines goes to ``Kernel._call``, which still computes or
    raises; either way the values are SciPy's and no operand's reference is leaked."""
    assert issubclass(coiter.Kernel, callplan.KernelCall)
    rng = np.random.default_rng(12)
    a = sp.random_array((30, 20), density=0.3, rng=rng, format="csr")
    x = rng.standard_normal(20)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    At = coiter.Tensor.from_scipy(a)
    k(A=At, x=x)
    declined: list[tuple] = []
    python_call = coiter.kernel.Kernel._call

    def counted(self, *args, **kw):
        declined.append(args)
        return python_call(self, *args, **kw)

    monkeypatch.setattr(coiter.kernel.Kernel, "_call", counted)
    strided = np.repeat(x, 2)[::2]
    refs = [sys.getrefcount(v) for v in (At, a, x, strided)]
    for _ in range(50):
        for ops in ({"A": At, "x": x}, {"A": a, "x": x}, {"A": At, "x": x, "threads": 1},
                    {"A": a, "x": x, "threads": 2}, {"A": At, "x": x, "threads": None}):
            np.testing.assert_allclose(k(**ops).to_numpy(), a @ x, rtol=1e-12)
    del ops
    assert declined == []
    np.testing.assert_allclose(k(1, A=At, x=x).to_numpy(), a @ x, rtol=1e-12)  # positional threads
    np.testing.assert_allclose(k(A=At, x=strided).to_numpy(), a @ x, rtol=1e-12)  # not bound in C
    assert len(declined) == 2
    for _ in range(50):  # errors raised on the declined path
        with pytest.raises(coiter.ShapeError, match="index variable j has size 20"):
            k(A=At, x=np.ones(21))
        with pytest.raises(coiter.ShapeError, match="missing operand"):
            k(x=x)
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            k(A=a, x=x, threads=0)
    assert [sys.getrefcount(v) for v in (At, a, x, strided)] == refs
    bad = a.copy()
    bad.indices[0] = 1000  # the SciPy matrix's conversion raises, naming the operand
    with pytest.raises(coiter.FormatError, match="A level 2 .*coordinate out of range"):
        k(A=bad, x=x)


@needs_plan
def test_kernels_reading_index_sets_gather_before_the_plan() -> None:
    """A kernel with index sets never hands the given operands to its plan as they are."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal(6)
    k = coiter.compile("y(i) = x(i({0,3,5}))")
    assert not k._direct
    for _ in range(3):  # the first call makes the plan, the next ones have it
        np.testing.assert_allclose(k(x=x).to_numpy(), x[[0, 3, 5]], rtol=1e-15)
    x2 = rng.standard_normal(6)
    np.testing.assert_allclose(k(x=x2).to_numpy(), x2[[0, 3, 5]], rtol=1e-15)


@needs_plan
def test_plan_evaluates_pending_dsl_tensors_first() -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, 5))
    x = rng.standard_normal(5)
    A = coiter.Tensor.from_numpy(a, format="csr")
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    k(A=A, x=x)
    i, j = coiter.index_vars("i j")
    B = coiter.Tensor((6, 5), format="csr")
    B[i, j] = A[i, j] * 2  # pending until its data is needed
    np.testing.assert_allclose(k(A=B, x=x).to_numpy(), 2 * a @ x)


@needs_plan
def test_scipy_operands_take_the_c_path_through_one_cached_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(9)
    a = sp.random_array((30, 20), density=0.3, rng=rng, format="csr")
    x = rng.standard_normal(20)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    k(A=a, x=x)
    assert coiter.Tensor.from_scipy(a).storage is coiter.Tensor.from_scipy(a).storage
    # the call is bound in C (the Python path is not taken) and sees the matrix's current values
    monkeypatch.setattr(coiter.kernel.Kernel, "_run", lambda *args, **kw: pytest.fail("Python path taken"))
    np.testing.assert_allclose(k(A=a, x=x).to_numpy(), a @ x)
    a.data *= 2  # values changed in place: the same arrays
    np.testing.assert_allclose(k(A=a, x=x).to_numpy(), a @ x)
    a.data = a.data + 1  # a new values array: a new storage
    assert coiter.Tensor.from_scipy(a).storage.vals is a.data
    np.testing.assert_allclose(k(A=a, x=x).to_numpy(), a @ x)


def test_scipy_operand_is_reused_only_while_the_matrix_keeps_its_arrays() -> None:
    """A kernel called again on the same SciPy matrix reuses its wrapped Tensor (O(1) checks
    instead of from_scipy's), which follows in-place value changes; index arrays changed in
    place are checked again, and new arrays get a new Tensor."""
    from coiter.tensor import scipy_operand

    rng = np.random.default_rng(12)
    a = sp.random_array((8, 6), density=0.4, rng=rng, format="csr")
    x = rng.standard_normal(6)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    np.testing.assert_allclose(k(A=a, x=x).to_numpy(), a @ x)
    t = scipy_operand(a, "A")
    assert scipy_operand(a, "A") is t and scipy_operand(a, "B") is not t
    a.data *= 3  # the same arrays: the same Tensor, the new values
    np.testing.assert_allclose(k(A=a, x=x).to_numpy(), a @ x)
    assert scipy_operand(a, "A") is t
    a.data = a.data + 1  # a new values array
    np.testing.assert_allclose(k(A=a, x=x).to_numpy(), a @ x)
    assert scipy_operand(a, "A") is not t
    a.indices[0] = 6  # a column index past the last, written in place
    with pytest.raises(coiter.FormatError, match="A"):
        k(A=a, x=x)


@pytest.mark.parametrize("kind", ["unsorted", "mixed index types", "strided values"])
def test_scipy_operands_that_are_copied_follow_in_place_value_changes(kind: str) -> None:
    """Matrices coiter cannot share as they are (unsorted indices, indptr and indices of two
    integer types, values with a stride) are converted on every call, never kept: a kept
    copy would miss the caller's later in-place changes."""
    indptr = np.array([0, 2, 3, 5])
    indices = np.array([2, 0, 1, 1, 0]) if kind == "unsorted" else np.array([0, 2, 1, 0, 1])
    data = np.arange(1.0, 11.0)[::2] if kind == "strided values" else np.arange(1.0, 6.0)
    a = sp.csr_array((data, indices.astype(np.int32), indptr.astype(np.int32)), shape=(3, 3))
    if kind == "mixed index types":
        a.indptr = a.indptr.astype(np.int64)  # SciPy's constructor would give both one type
    assert (a.indptr.dtype != a.indices.dtype) == (kind == "mixed index types")
    assert a.has_sorted_indices == (kind != "unsorted") and a.data.flags.c_contiguous == (kind != "strided values")
    x = np.array([1.0, 10.0, 100.0])
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    for scale in (1.0, 2.0, -0.5):
        a.data *= scale
        np.testing.assert_allclose(k(A=a, x=x).to_numpy(), a.toarray() @ x)


@needs_plan
def test_evaluate_and_einsum_reuse_the_plan_only_for_matching_operands() -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((7, 6))
    x = rng.standard_normal(6)
    for A in (coiter.Tensor.from_numpy(a, format="csr"), a, sp.csr_array(a),
              coiter.Tensor.from_numpy(a, format="dcsr"), coiter.Tensor.from_numpy(a.astype(np.float32), format="csr")):
        for _ in range(2):
            y = coiter.evaluate("y(i) = A(i,j) * x(j)", A=A, x=x)
            np.testing.assert_allclose(y.to_numpy(), a @ x, rtol=1e-5)
            np.testing.assert_allclose(coiter.einsum("ij,j->i", A, x).to_numpy(), a @ x, rtol=1e-5)
    # a result format named by the call selects another kernel
    assert coiter.evaluate("y(i) = A(i,j) * x(j)", out_format="s", A=a, x=x).format == coiter.parse_format("s")


def test_default_threads_follow_the_work() -> None:
    """The generated helpers: the requested count, else OpenMP's limited by the work; the
    rows of a dynamic chunk."""
    source = preamble("INT32_MAX") + """
int threads_for(int64_t n, int64_t work) { return coiter_threads(n, work); }
int64_t chunk_for(int64_t rows, int64_t threads, int64_t work) {
  return coiter_chunk_rows(rows, threads, work);
}
int max_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
"""
    lib = load_library(source)
    lib.threads_for.argtypes = [ctypes.c_int64, ctypes.c_int64]
    most = lib.max_threads()
    for n, work, expected in [(3, 10, 3), (1, 10**9, 1), (0, 10, 1), (0, WORK_PER_THREAD - 1, 1),
                              (0, 2 * WORK_PER_THREAD, min(2, most)), (0, 10**12, most),
                              (-1, 10**12, 1), (-2, 10**12, min(2, most)), (-2, 10, 1),
                              (-(most + 1), 10**12, most)]:  # -c: at most c (free cores)
        assert lib.threads_for(n, work) == expected, (n, work)
    # dynamic chunks: about 16 per thread, at most 2048 rows, and at least the rows that hold
    # 4096 units of work (a 25-row loop of 5600 units a row takes one row at a time, not all
    # 25 on one thread; 4884 rows of 10 units take 409, not 152)
    lib.chunk_for.argtypes = [ctypes.c_int64] * 3
    lib.chunk_for.restype = ctypes.c_int64
    for rows, threads, work, expected in [(10, 2, 10, 4096), (4884, 2, 50000, 409), (10**7, 2, 10**8, 2048),
                                          (10**6, 0, 10**6, 2048), (0, 2, 0, 64), (10, 2, 640, 64),
                                          (10, 2, 650, 63), (496, 2, 50912, 40), (25, 2, 140000, 1),
                                          (10**4, 2, 10**12, 312)]:
        assert lib.chunk_for(rows, threads, work) == expected, (rows, threads, work)


# work of a call that would run on every thread even after an idle pause (the tests of the
# other rules call with it)
BIG_WORK = "#define BIG_WORK ((int64_t)1 << 40)\n"


def _own_last_call_cell(lib: ctypes.CDLL) -> ctypes.c_int64:
    """A last-call cell of the test's own for a prelude library (coiter_share_last_call),
    with the load probe off (other processes' load is another test's)."""
    if hasattr(lib, "coiter_use_load"):
        lib.coiter_use_load(None)
    cell = ctypes.c_int64(0)
    lib.coiter_share_last_call.argtypes = [ctypes.c_void_p]
    lib.coiter_share_last_call(ctypes.addressof(cell))
    return cell


def test_small_calls_after_an_idle_pause_run_on_one_thread() -> None:
    """The prelude's idle rule: a call that chooses its thread count (0), has less than
    COITER_IDLE_WORK units of work and comes more than 5 ms after the process's last kernel
    call runs on one thread (waking sleeping workers cost this virtual machine 2-6 ms); the
    call after it, or a larger call, does not; a requested count is kept and still counts as
    a call. The last call's time lives in the cell handed in by coiter_share_last_call."""
    lib = load_library(preamble("INT32_MAX") + """
int64_t call_threads(int64_t n, int64_t work) { return coiter_call_threads(n, work); }
int64_t now_ns(void) { return coiter_clock(); }
int64_t idle_work(void) {
#ifdef _OPENMP
  return COITER_IDLE_WORK;
#else
  return 0;
#endif
}
""")
    lib.call_threads.argtypes = [ctypes.c_int64, ctypes.c_int64]
    lib.call_threads.restype = lib.now_ns.restype = lib.idle_work.restype = ctypes.c_int64
    if lib.now_ns() == 0:  # built without OpenMP: every count passes through
        assert [lib.call_threads(n, 10) for n in (0, 1, 2)] == [0, 1, 2]
        return
    cell = _own_last_call_cell(lib)
    small, big, ms = lib.idle_work() - 1, lib.idle_work(), 1_000_000

    def after_quiet(n: int, work: int, quiet_ns: int | None) -> tuple[int, int]:
        """call_threads(n, work) with the last call ``quiet_ns`` ago (None: as it is), and
        how long the quiet lasted in fact (at least that: the test process may be
        descheduled meanwhile, so an expected 0 is checked only where it stayed under 5 ms)."""
        start = lib.now_ns()
        if quiet_ns is not None:
            cell.value = start - quiet_ns
        last = cell.value
        threads = lib.call_threads(n, work)
        return threads, lib.now_ns() - last

    assert after_quiet(0, small, None)[0] == 1  # the first call of the process
    threads, quiet = after_quiet(0, small, None)  # right after it: the workers are awake
    assert threads == 0 or quiet > 5 * ms
    before = lib.now_ns()
    lib.call_threads(0, big)
    assert before <= cell.value <= lib.now_ns()  # the call wrote the shared cell
    assert after_quiet(0, big, 6 * ms)[0] == 0  # enough work to wait for a worker
    assert after_quiet(0, small, 6 * ms)[0] == 1  # 6 ms of quiet
    threads, quiet = after_quiet(0, small, None)
    assert threads == 0 or quiet > 5 * ms
    assert after_quiet(2, small, 6 * ms)[0] == 2  # a requested count is kept ...
    threads, quiet = after_quiet(0, small, None)  # ... and was a call
    assert threads == 0 or quiet > 5 * ms
    threads, quiet = after_quiet(0, small, 4 * ms)  # under 5 ms: no pause
    assert threads == 0 or quiet > 5 * ms


def test_the_idle_pause_runs_from_the_last_call_s_end() -> None:
    """A call that starts right after a long one (SpGEMM's 30 ms) comes after no pause: the
    kernel writes its end into the last-call cell (coiter_call_done), and the idle rule
    counts from there. Counted from the long call's start, every 2-thread SpGEMM call on
    bcsstk16 ran on one thread (28 ms against 12.8 with two)."""
    lib = load_library(preamble("INT32_MAX") + """
int64_t call_threads(int64_t n, int64_t work) { return coiter_call_threads(n, work); }
void call_done(void) { coiter_call_done(); }
int64_t now_ns(void) { return coiter_clock(); }
""")
    lib.call_threads.argtypes = [ctypes.c_int64, ctypes.c_int64]
    lib.call_threads.restype = lib.now_ns.restype = ctypes.c_int64
    lib.call_done.restype = None
    if lib.now_ns() == 0:  # built without OpenMP: no idle rule, and the end is a no-op
        lib.call_done()
        assert lib.call_threads(0, 10) == 0
        return
    cell = _own_last_call_cell(lib)
    ms = 1_000_000
    for _ in range(20):  # the test process may be descheduled between the end and the call
        lib.call_threads(0, 10)  # a long call starts ...
        time.sleep(0.008)  # ... runs 8 ms ...
        before = lib.now_ns()
        lib.call_done()  # ... and ends
        assert before <= cell.value <= lib.now_ns()
        threads = lib.call_threads(0, 10)  # the next call, right after its end
        if lib.now_ns() - before < 5 * ms:
            assert threads == 0
            break
    else:
        pytest.fail("every try was descheduled for 5 ms")


def test_every_c_kernel_records_its_end() -> None:
    """Every generated C kernel that chooses its threads calls coiter_call_done before it
    returns its result, so that no kernel's long call reads as an idle pause."""
    for expr, formats in [("C(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr", "C": "csr"}),
                          ("y(i) = A(i,j) * x(j)", {"A": "csr"}),
                          ("a = B(i,j) * C(i,j)", {"B": "csr", "C": "csr"})]:
        source = coiter.compile(expr, formats=formats).source
        body = source[source.index("\nint coiter_fused("):source.index("\nint coiter_fused_packed(")]
        assert body.count("coiter_call_threads(") == body.count("coiter_call_done();") == 1, expr
        assert body.index("coiter_call_threads(") < body.index("coiter_call_done();") < body.rindex("return 0;"), expr


def test_every_kernel_library_shares_the_last_call_cell() -> None:
    """The runtime hands each kernel library it loads the process's last-call cell: two
    kernels write the same cell, and a kernel called after an idle pause with the default
    thread count computes SciPy's values."""
    from coiter.runtime import load

    A = sp.random(300, 200, density=0.05, random_state=3, format="csr")
    x = np.random.default_rng(4).random(200)
    spmv = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    add = coiter.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    before = load._LAST_CALL.value
    spmv(A=A, x=x)
    middle = load._LAST_CALL.value
    C = add(A=A, B=A)
    after = load._LAST_CALL.value
    if after:  # built with OpenMP (without it kernels keep no clock)
        assert before < middle < after
    time.sleep(0.02)
    np.testing.assert_allclose(spmv(A=A, x=x).to_numpy(), A @ x, rtol=1e-12)
    np.testing.assert_allclose(C.to_numpy(), (A + A).toarray(), rtol=1e-12)


def test_late_teams_send_the_next_calls_to_one_thread() -> None:
    """The prelude's backoff: after two regions in a row whose thread 0 waited, at the
    region's start or end, longer than it worked (a worker waited for a busy core), the calls
    that let the kernel choose its thread count (0) run on one thread for 50 ms, twice as long
    when the next region is late again; one late region alone (a virtual machine's stalled
    core) changes nothing; a requested count is kept; a region that did not wait resets both.
    (Clock readings around each step bound the expected times, so a test process descheduled
    meanwhile still checks exactly.)"""
    source = preamble("INT32_MAX") + BIG_WORK + """
int64_t call_threads(int64_t n) { return coiter_call_threads(n, BIG_WORK); }
int64_t now_ns(void) { return coiter_clock(); }
void team_done(int64_t start, int64_t entered, int64_t first_done) {
  coiter_team_done(start, entered, first_done);
}
int64_t serial_until(void) {
#ifdef _OPENMP
  return coiter_serial_until;
#else
  return 0;
#endif
}
"""
    lib = load_library(source)
    if hasattr(lib, "coiter_use_load"):  # other processes' load is the next tests'
        lib.coiter_use_load(None)
    lib.call_threads.argtypes = [ctypes.c_int64]
    lib.team_done.argtypes = [ctypes.c_int64] * 3
    lib.call_threads.restype = lib.now_ns.restype = lib.serial_until.restype = ctypes.c_int64
    if lib.now_ns() == 0:  # built without OpenMP: no clock, every count passes through
        assert [lib.call_threads(n) for n in (0, 1, 2)] == [0, 1, 2] and lib.serial_until() == 0
        return
    ms = 1_000_000

    def late_team() -> tuple[int, int]:
        """A region that worked 1 ms and then waited 5: the clock before and after."""
        before = lib.now_ns()
        lib.team_done(before - 6 * ms, before - 6 * ms, before - 5 * ms)
        return before, lib.now_ns()

    now = lib.now_ns()
    lib.team_done(now - 12 * ms, now - 11 * ms, now - ms)  # waited 1 + 1 ms, worked 10: on time
    assert lib.serial_until() == 0 and lib.call_threads(0) == 0
    # a worker that woke 0.3 ms late on a quiet machine (a virtual core's jitter), in a region
    # that worked 0.02 ms: on time, since a busy core keeps a worker waiting milliseconds
    now = lib.now_ns()
    lib.team_done(now - 320_000, now - 320_000, now - 300_000)
    lib.team_done(now - 320_000, now - 20_000, now)  # the same wait at the region's start
    assert lib.serial_until() == 0 and lib.call_threads(0) == 0
    late_team()  # one late region: still every thread
    assert lib.serial_until() == 0 and lib.call_threads(0) == 0
    now = lib.now_ns()
    lib.team_done(now - 11 * ms, now - 11 * ms, now - ms)  # on time: the next late one is alone again
    late_team()
    assert lib.serial_until() == 0 and lib.call_threads(0) == 0
    before, after = late_team()  # the second in a row
    assert before + 50 * ms <= lib.serial_until() <= after + 50 * ms
    threads, checked = lib.call_threads(0), lib.now_ns()
    assert threads == 1 or checked >= lib.serial_until()
    assert lib.call_threads(2) == 2 and lib.call_threads(1) == 1  # requested counts are kept
    before, after = late_team()  # again at once: the period doubles
    assert before + 100 * ms <= lib.serial_until() <= after + 100 * ms
    now = lib.now_ns()
    lib.team_done(now - 11 * ms, now - 11 * ms, now - ms)  # a team on time resets it to 50 ms ...
    late_team()
    before, after = late_team()
    assert before + 50 * ms <= lib.serial_until() <= after + 50 * ms
    time.sleep(0.06)  # ... after which calls choose their threads again
    assert lib.call_threads(0) == 0
    # a team whose thread 0 entered the region 5 ms after the fork (a worker of the last
    # region not yet docked) and then worked 1 ms, on time at the end, came late too
    now = lib.now_ns()
    lib.team_done(now - 11 * ms, now - 11 * ms, now - ms)  # (the period back to 50 ms)
    for _ in range(2):
        before = lib.now_ns()
        lib.team_done(before - 6 * ms, before - ms, before)
    assert before + 50 * ms <= lib.serial_until() <= lib.now_ns() + 50 * ms


def _load_probe() -> ctypes.CDLL:
    """The C extension's load probe (coiter/runtime/_load.c), called through ctypes."""
    from coiter.runtime import _fastcall

    probe = ctypes.CDLL(_fastcall.__file__)
    probe.coiter_load_cores_left.argtypes = [ctypes.c_int64] * 4 + [ctypes.c_int]
    probe.coiter_load_set_period.argtypes = [ctypes.c_int64]
    probe.coiter_load_set_period.restype = ctypes.c_int64
    return probe


@needs_plan
def test_the_cores_other_processes_leave_free() -> None:
    """The load arithmetic: over a period, the cores' busy ticks less this process's own CPU
    time are the other processes' share; a core counts as theirs from 0.3 of it; at least
    one core is left."""
    cores_left = _load_probe().coiter_load_cores_left
    ms = 1_000_000
    # 100 ms on 2 cores = 20 ticks of 10 ms: (busy ticks, own ms, cores, cores left)
    for busy, own_ms, ncpu, left in [
            (20, 200, 2, 2),  # both cores ours
            (0, 0, 2, 2), (2, 0, 2, 2),  # quiet; a background process at 0.2 of a core
            (20, 100, 2, 1),  # a spinning process beside one thread of ours
            (15, 100, 2, 1),  # the same with a worker sharing its core (0.5)
            (20, 0, 2, 1),  # both cores others': still one
            (40, 400, 4, 4), (40, 0, 4, 1), (30, 100, 4, 2)]:
        total = 10 * ncpu
        assert cores_left(busy, total, own_ms * ms, 10 * ms, ncpu) == left, (busy, own_ms, ncpu)
    assert cores_left(0, 0, 0, 10 * ms, 2) == 2  # no tick in the period: no limit


def _cpu_ticks(probe: ctypes.CDLL) -> tuple[int, int, int, int]:
    """coiter_load_cpu_ticks: (found, busy ticks, all ticks, CPUs)."""
    busy, total, cpus = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int()
    found = probe.coiter_load_cpu_ticks(ctypes.byref(busy), ctypes.byref(total), ctypes.byref(cpus))
    return found, busy.value, total.value, cpus.value


@needs_plan
def test_default_threads_leave_the_cores_other_processes_use() -> None:
    """/proc/stat is read for the CPUs this thread may run on (busy ticks within all ticks,
    both growing); every kernel library the runtime loads gets the estimate, so that with a
    spinning process on every core its calls that choose their thread count are held to one
    thread once a period is over; requested counts are kept."""
    probe = _load_probe()
    lib = load_library(preamble("INT32_MAX") + BIG_WORK + """
int64_t call_threads(int64_t n) { return coiter_call_threads(n, BIG_WORK); }
int max_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
""")
    lib.call_threads.argtypes = [ctypes.c_int64]
    lib.call_threads.restype = ctypes.c_int64
    found, busy, total, cpus = _cpu_ticks(probe)
    if not sys.platform.startswith("linux"):
        assert found == 0 and lib.call_threads(0) == 0  # nothing to read: no limit
        return
    assert found == 1 and 0 <= busy <= total and cpus == len(os.sched_getaffinity(0))
    period = probe.coiter_load_set_period(50_000_000)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 1)]
    try:
        lib.call_threads(0)  # a period starts (or ends)
        time.sleep(0.3)
        held = -1 if lib.max_threads() > 1 else 0  # at most 1 (or no limit to set)
        assert lib.call_threads(0) == held
        assert lib.call_threads(2) == 2 and lib.call_threads(1) == 1
    finally:
        for p in spinners:
            p.kill()
            p.wait()
        probe.coiter_load_set_period(period)
    assert _cpu_ticks(probe)[2] > total


@needs_plan
def test_a_finished_child_process_is_this_processs_work() -> None:
    """The CPU time a child process spent (the C compiler building a kernel) counts as this
    process's once it is waited for, not as another process's load: after a compile, coiter
    demo's first calls had run on one thread. Regression test."""
    probe = _load_probe()
    probe.coiter_load_own_ns.restype = ctypes.c_int64
    before, mine = probe.coiter_load_own_ns(), time.process_time_ns()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                    "while time.process_time() - t < 0.3: pass"], check=True)
    grown, mine = probe.coiter_load_own_ns() - before, time.process_time_ns() - mine
    assert grown >= 250_000_000 + mine  # the child's 0.3 s of CPU, past this process's own


@needs_plan
def test_only_the_cpus_a_thread_may_run_on_count() -> None:
    """A thread bound to one CPU (os.sched_setaffinity on the calling thread) reads that CPU's
    ticks alone: fewer than all CPUs' together. Without /proc/stat (not Linux) nothing is
    read."""
    probe = _load_probe()
    if not sys.platform.startswith("linux"):
        assert _cpu_ticks(probe)[0] == 0
        return
    allowed = os.sched_getaffinity(0)
    found, _, everything, cpus = _cpu_ticks(probe)
    assert found == 1 and cpus == len(allowed)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        found, busy, total, cpus = _cpu_ticks(probe)
    finally:
        os.sched_setaffinity(0, allowed)
    assert found == 1 and cpus == 1 and 0 <= busy <= total
    if len(allowed) > 1:
        assert total < everything


def test_the_region_that_starts_the_workers_is_not_late() -> None:
    """A kernel library's first parallel region may create OpenMP's workers (6.5-7 ms on this
    project's machine): its wait does not count as the first of two late regions in a row;
    the next two late regions send the next calls to one thread."""
    source = preamble("INT32_MAX") + """
/* a library of its own: its first region is this test's */
void team_done(int64_t start, int64_t entered, int64_t first_done) {
  coiter_team_done(start, entered, first_done);
}
int64_t now_ns(void) { return coiter_clock(); }
int64_t serial_until(void) {
#ifdef _OPENMP
  return coiter_serial_until;
#else
  return 0;
#endif
}
"""
    lib = load_library(source)
    lib.team_done.argtypes = [ctypes.c_int64] * 3
    lib.now_ns.restype = lib.serial_until.restype = ctypes.c_int64
    if lib.now_ns() == 0:
        return  # built without OpenMP: no clock, no back-off (the test above checks it)
    ms = 1_000_000
    for expect_serial in (False, False, True):  # waited 7 ms at the start, then worked 0.1 ms
        before = lib.now_ns()
        lib.team_done(before - 7 * ms - ms // 10, before - ms // 10, before)
        assert (lib.serial_until() > before) == expect_serial


def test_default_threads_on_a_busy_machine_give_scipys_values() -> None:
    """With every core kept busy by other processes, calls at the default thread count switch
    between the parallel and the serial loop (late teams); every result equals SciPy's."""
    A = _random_csr(20_000, 8, 7)
    x = np.random.default_rng(7).standard_normal(20_000)
    expected = A @ x
    kernel = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    a = coiter.Tensor.from_scipy(A)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 1)]
    try:
        for _ in range(300):
            np.testing.assert_allclose(kernel(A=a, x=x).to_numpy(), expected, rtol=1e-12, atol=1e-12)
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def _random_csr(n: int, per_row: int, seed: int) -> sp.csr_array:
    """An n x n matrix with about ``per_row`` random entries per row (duplicates summed)."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), per_row)
    cols = rng.integers(0, n, n * per_row)
    return sp.csr_array((rng.standard_normal(n * per_row), (rows, cols)), shape=(n, n))


@pytest.mark.parametrize("threads", [None, 1, 2])
@pytest.mark.parametrize("size", [10, 200_000])
def test_threads_and_sizes_give_the_same_values(threads, size) -> None:
    """Small calls run on one thread, big ones on several (the serial and parallel copies
    of the loop); both compute the same values as SciPy."""
    A = _random_csr(size, 8, size)
    x = np.random.default_rng(size).standard_normal(size)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    At = coiter.Tensor.from_scipy(A)
    for _ in range(2):
        np.testing.assert_allclose(k(A=At, x=x, threads=threads).to_numpy(), A @ x, rtol=1e-12, atol=1e-12)


def test_calls_from_several_python_threads() -> None:
    """Big calls release the GIL: concurrent calls on shared operands stay right."""
    A = _random_csr(100_000, 4, 9)
    x = np.random.default_rng(9).standard_normal(100_000)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    At = coiter.Tensor.from_scipy(A)
    expected = A @ x
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                np.testing.assert_allclose(k(A=At, x=x).to_numpy(), expected, rtol=1e-12)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=work) for _ in range(3)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors[0]


@needs_plan
def test_plan_result_names_and_dsl_readers() -> None:
    """Results built in C are ordinary Tensors: named, usable in the DSL, picklable."""
    import pickle

    a = np.arange(12.0).reshape(4, 3)
    x = np.ones(3)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    A = coiter.Tensor.from_numpy(a, format="csr")
    k(A=A, x=x)
    y = k(A=A, x=x)
    assert y.name == "y" and y.nnz == 4 and repr(y).startswith("Tensor(name='y'")
    i, = coiter.index_vars("i")
    z = coiter.Tensor((4,))
    z[i] = y[i] * 2
    np.testing.assert_allclose(z.to_numpy(), 2 * a @ x)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(y)).to_numpy(), a @ x)


@pytest.mark.parametrize("rank", [1, 3, 16, 64, 65])
def test_small_dense_extents_are_compile_time_constants(rank) -> None:
    """Inner dense levels of at most SPECIALIZE_EXTENT coordinates get a variant each, with
    the extent as a constant; alternating extents switch variants and stay right."""
    from coiter.runtime.kernel import SPECIALIZE_EXTENT

    rng = np.random.default_rng(rank)
    A = _random_csr(300, 5, rank)
    k = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"})
    At = coiter.Tensor.from_scipy(A)
    for r in (rank, 2, rank):
        B = rng.standard_normal((300, r))
        C = k(A=At, B=B)
        np.testing.assert_allclose(C.to_numpy(), A @ B, rtol=1e-12, atol=1e-12)
        assert C.format == coiter.parse_format("dd")  # the declared format, not the variant's
    fixed = {v.fixed for v in k.core.variants()}
    assert (("B", 1, 2), ("C", 1, 2)) in fixed
    assert ((("B", 1, rank), ("C", 1, rank)) in fixed) == (rank <= SPECIALIZE_EXTENT)
    if rank <= SPECIALIZE_EXTENT:
        variant = next(v for v in k.core.variants() if v.fixed and v.fixed[0][2] == rank)
        # the row's stride is the constant (its columns may go by blocks: dense_rows.py)
        assert f"B_vals[j * {rank} + " in variant.source or rank == 1


@pytest.mark.parametrize("expr,formats,shapes,ref", [
    ("A(i,j,l) = B(i,j,k) * C(k,l)", {"B": "sss", "A": "ssd"}, {"B": (6, 7, 8), "C": (8, 5)}, "ijk,kl->ijl"),
    ("A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", {"B": "sss"}, {"B": (6, 7, 8), "C": (7, 5), "D": (8, 5)},
     "ijk,jl,kl->il"),
    ("C(i,j) = A(i,j) * U(i,k) * V(j,k)", {"A": "csr", "C": "csr"}, {"A": (9, 8), "U": (9, 4), "V": (8, 4)},
     "ij,ik,jk->ij"),
])
def test_rank_specialised_tensor_kernels(expr, formats, shapes, ref) -> None:
    rng = np.random.default_rng(11)
    arrays = {n: random_array(rng, s, 0.5) for n, s in shapes.items()}
    ops = {n: coiter.Tensor.from_numpy(a, format=formats[n]) if n in formats else a for n, a in arrays.items()}
    k = coiter.compile(expr, formats=formats)
    for _ in range(2):
        np.testing.assert_allclose(k(**ops).to_numpy(), np.einsum(ref, *arrays.values()), rtol=1e-12, atol=1e-12)
    assert all(v.fixed for v in k.core.variants())


def test_fast_math_is_an_opt_in_build() -> None:
    """fast_math=True builds with reassociation allowed and gives SciPy's values (to
    rounding); the default build sums in a fixed order, so its results repeat exactly."""
    from coiter.runtime.compiler import FAST_MATH_FLAGS, _toolchain

    assert set(FAST_MATH_FLAGS) <= set(_toolchain(True, True).flags)
    assert not set(FAST_MATH_FLAGS) & set(_toolchain(True).flags)
    A = _random_csr(2000, 40, 13)
    x = np.random.default_rng(13).standard_normal(2000)
    At = coiter.Tensor.from_scipy(A)
    fast = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, fast_math=True)
    exact = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    np.testing.assert_allclose(fast(A=At, x=x).to_numpy(), A @ x, rtol=1e-10, atol=1e-10)
    first = exact(A=At, x=x, threads=2).to_numpy()
    for threads in (1, 2, None):
        assert np.array_equal(exact(A=At, x=x, threads=threads).to_numpy(), first)


def test_huge_thread_counts_are_refused_not_crashing() -> None:
    """Regression (issue 16): threads=100000 reached libgomp, which crashed the process."""
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    A = coiter.Tensor.from_numpy(np.eye(4), format="csr")
    for bad in (100_000, 2**31):
        with pytest.raises(ValueError, match="threads must be a positive integer of at most"):
            k(A=A, x=np.ones(4), threads=bad)
    np.testing.assert_allclose(k(A=A, x=np.ones(4), threads=4096).to_numpy(), np.ones(4))


APPENDED = [  # results with more, as many, and fewer entries than the operands' values together
    ("A(i,j) = x(i) * y(j)", {"x": "s", "y": "s", "A": "csr"}, {"x": (300,), "y": (200,)},
     lambda x, y: np.outer(x, y)),
    ("D(i,j) = A(i,j) + B(i,j) + C(i,j)", {"A": "csr", "B": "csr", "C": "csr", "D": "csr"},
     {"A": (50, 40), "B": (50, 40), "C": (50, 40)}, lambda a, b, c: a + b + c),
    ("C(i,j) = A(i,j) * B(i,j)", {"A": "csr", "B": "csr", "C": "csr"}, {"A": (60, 50), "B": (60, 50)},
     lambda a, b: a * b),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr", "C": "dcsr"}, {"A": (40, 30), "B": (30, 45)},
     lambda a, b: a @ b),
]


@pytest.mark.parametrize("expr,formats,shapes,ref", APPENDED)
@pytest.mark.parametrize("plan", [True, False])
def test_appended_results_outgrow_or_undershoot_the_first_capacity(expr, formats, shapes, ref, plan,
                                                                     monkeypatch) -> None:
    """The first capacity of an appended result is the operands' values together: results
    that need more grow, results that need less are trimmed; 1 and 2 threads, both paths."""
    if not plan:
        monkeypatch.setattr(coiter.kernel, "build_plan", lambda *a, **k: None)
    rng = np.random.default_rng(7)
    arrays = {n: random_array(rng, s, 0.5) for n, s in shapes.items()}
    ops = {n: coiter.Tensor.from_numpy(a, format=formats[n]) for n, a in arrays.items()}
    k = coiter.compile(expr, formats=formats)
    for threads in (1, 2, 1, 2):  # twice: the second call of each goes through the plan
        got = k(threads=threads, **ops)
        np.testing.assert_allclose(got.to_numpy(), ref(*arrays.values()), rtol=1e-12)
        assert got.nnz == got.storage.vals.shape[0]


def test_capacity_hint_is_the_operands_values_at_most_the_dense_size() -> None:
    from coiter.runtime.kernel import LAST_ENTRIES_FACTOR, capacity_hint

    assert capacity_hint([3, 4], (2, 2)) == 16
    assert capacity_hint([100, 200], (10, 1000)) == 300
    assert capacity_hint([10**6, 10**6], (30, 40)) == 1200
    # or the last result's entries, when more, up to a multiple of the operands' values
    assert capacity_hint([100, 200], (10, 1000), last_entries=5000) == 5000
    assert capacity_hint([100, 200], (1000, 1000), last_entries=10**9) == LAST_ENTRIES_FACTOR * 300
    assert capacity_hint([100, 200], (30, 40), last_entries=5000) == 1200


@pytest.mark.parametrize("plan", [True, False])
def test_the_last_results_entries_are_the_next_first_capacity(plan, monkeypatch) -> None:
    """Products larger than their operands, then smaller, then larger again: each call's
    first capacity is its operands' values or the last result's entries; every result
    holds the right values and no spare capacity, at 1 and 2 threads, on both paths."""
    if not plan:
        monkeypatch.setattr(coiter.kernel, "build_plan", lambda *a, **k: None)
    rng = np.random.default_rng(11)
    dense = [random_array(rng, (120, 120), d) for d in (0.3, 0.01, 0.3, 0.0)]
    for fmt in ("csr", "dcsr", "coo"):
        k = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": fmt})
        for a in dense:
            A = coiter.Tensor.from_numpy(a, format="csr")
            for threads in (1, 2):
                got = k(A=A, B=A, threads=threads)
                np.testing.assert_allclose(got.to_numpy(), a @ a, rtol=1e-12, atol=1e-12)
                assert got.nnz == got.storage.vals.shape[0]


def test_entries_slot_is_the_deepest_appended_coordinates() -> None:
    from coiter.runtime.kernel import entries_slot

    slots = [(0, "pos"), (0, "crd"), (1, "pos"), (1, "crd"), (-1, "vals")]
    assert entries_slot(coiter.parse_format("ss"), slots) == 3
    assert entries_slot(coiter.parse_format("ds"), [(1, "pos"), (1, "crd"), (-1, "vals")]) == 1
    assert entries_slot(coiter.parse_format("dd"), [(-1, "vals")]) == -1
    assert entries_slot(coiter.parse_format("ds"), []) == -1  # written over an operand's levels


def _correlate(x: np.ndarray, f: np.ndarray, pad: int) -> np.ndarray:
    """O(i) = sum_k I(i+k-pad) * F(k), zero outside I."""
    return np.correlate(np.pad(x, pad), f, mode="valid")


@needs_plan
def test_compound_subscript_kernels_stay_in_c_for_shapes_already_solved(monkeypatch) -> None:
    rng = np.random.default_rng(11)
    kern = coiter.compile("O(i) = I(i+k-1) * F(k)", {"I": "s"}, padding=True)
    x, f = random_array(rng, (40,), 0.3), rng.standard_normal(3)
    I = coiter.Tensor.from_numpy(x, "s")
    np.testing.assert_allclose(kern(I=I, F=f).to_numpy(), _correlate(x, f, 1))  # Python path: solved

    python_path = coiter.kernel.Kernel._run
    monkeypatch.setattr(coiter.kernel.Kernel, "_run", lambda *a, **k: pytest.fail("Python path taken"))
    I2 = coiter.Tensor.from_numpy(x * 2, "s")
    np.testing.assert_allclose(kern(I=I2, F=f).to_numpy(), _correlate(2 * x, f, 1))
    np.testing.assert_allclose(kern.run({"I": I, "F": f}, (40,)).to_numpy(), _correlate(x, f, 1))

    # other shapes, and a result shape other than the one the operands give: the Python path
    taken = []
    monkeypatch.setattr(coiter.kernel.Kernel, "_run",
                        lambda self, *a, **k: taken.append(a) or python_path(self, *a, **k))
    y, g = random_array(rng, (57,), 0.3), rng.standard_normal(5)
    np.testing.assert_allclose(kern(I=coiter.Tensor.from_numpy(y, "s"), F=g).to_numpy(),
                               _correlate(y, g, 1)[:55])
    np.testing.assert_allclose(kern.run({"I": I, "F": f}, (30,)).to_numpy(), _correlate(x, f, 1)[:30])
    assert len(taken) == 2
    valid = coiter.compile("O(i) = I(i+k) * F(k)", {"I": "s"})  # no padding
    np.testing.assert_allclose(valid(I=I, F=f).to_numpy(), _correlate(x, f, 0))
    with pytest.raises(coiter.ShapeError, match=r"subscript i\+k of I\(i\+k\) ranges over \[0, 40\]"):
        valid.run({"I": I, "F": f}, (39,))


@needs_plan
def test_given_extents_stay_in_c(monkeypatch) -> None:
    rng = np.random.default_rng(12)
    kern = coiter.compile("P(h) = max(r, X(2*h+r))", {"X": "s"}, extents={"r": 3})
    x = random_array(rng, (31,), 0.5)
    X = coiter.Tensor.from_numpy(x, "s")
    expected = np.array([x[2 * h:2 * h + 3].max() for h in range(15)])
    np.testing.assert_allclose(kern(X=X).to_numpy(), expected)
    monkeypatch.setattr(coiter.kernel.Kernel, "_run", lambda *a, **k: pytest.fail("Python path taken"))
    np.testing.assert_allclose(kern(X=coiter.Tensor.from_numpy(-x, "s")).to_numpy(),
                               np.array([(-x)[2 * h:2 * h + 3].max() for h in range(15)]))


@needs_plan
def test_nn_layers_called_again_stay_in_c(monkeypatch) -> None:
    rng = np.random.default_rng(13)
    x = random_array(rng, (1, 2, 9), 0.4)
    w = rng.standard_normal((3, 2, 3))
    expected = np.stack([sum(_correlate(x[0, c], w[k, c], 1) for c in range(2)) for k in range(3)])[None]
    np.testing.assert_allclose(coiter.nn.conv1d(coiter.Tensor.from_numpy(x, "dds"), w, padding=1,
                                                threads=1).to_numpy(), expected)
    monkeypatch.setattr(coiter.kernel.Kernel, "_run", lambda *a, **k: pytest.fail("Python path taken"))
    np.testing.assert_allclose(coiter.nn.conv1d(coiter.Tensor.from_numpy(x, "dds"), w, padding=1,
                                                threads=1).to_numpy(), expected)


@needs_plan
def test_given_extents_are_checked_on_the_c_path_too() -> None:
    """A regression: the C path bound operands whose shape contradicted a given extent."""
    k = coiter.compile("y(i) = A(i,j) * x(j)", {"A": "csr"}, extents={"j": 5})
    a = np.arange(15.0).reshape(3, 5)
    np.testing.assert_allclose(k(A=coiter.Tensor.from_numpy(a, "csr"), x=np.ones(5)).to_numpy(), a.sum(1))
    assert k._plan is not None
    with pytest.raises(coiter.ShapeError, match="index variable j has size 5 in extents but 6"):
        k(A=coiter.Tensor.from_numpy(np.ones((3, 6)), "csr"), x=np.ones(6))
    w = coiter.compile("y(i) = b(i(0,4)) * c(i)", {"b": "s"})
    b = coiter.Tensor.from_numpy(np.arange(6.0), "s")
    np.testing.assert_allclose(w(b=b, c=np.ones(4)).to_numpy(), np.arange(4.0))
    with pytest.raises(coiter.ShapeError, match=r"size 4 in the window i\(0,4\)"):
        w(b=b, c=np.ones(5))
