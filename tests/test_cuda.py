"""The CUDA back end (issue 4): the GPU schedules of TACO's scheduling tests (notes §6.6).

Each schedule's CUDA is compiled with nvcc when it is installed, run and checked against
SciPy/NumPy on a GPU when one is present, and otherwise run on CPU threads through
tests/cuda_emulation.h (a C++20 stand-in for the CUDA calls the generated code makes), so
that the mapping, guards, atomics and warp reductions are checked without a GPU.
"""
from __future__ import annotations

import ctypes
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
import coiter.runtime.kernel
from coiter.errors import ScheduleError
from coiter.runtime.compiler import Toolchain, build_cached, compiler_version
from coiter.runtime.cuda import gpu_available, nvcc_command

EMULATION = Path(__file__).with_name("cuda_emulation.h")
RNG = np.random.default_rng(11)

# Load-balanced SpMV (the paper's Fig. 2e; 8 nonzeros per thread, 256-thread blocks): each
# thread loads its 8 products into registers (precompute over the derived thread_nz, unrolled),
# then adds them to y atomically
SPMV_LB = ("fuse(i,j,f),pos(f,fpos,A(i,j)),split(fpos,block,fpos1,2048),split(fpos1,warp,fpos2,256),"
           "split(fpos2,thread,thread_nz,8),reorder(block,warp,thread,thread_nz),"
           "precompute(A(i,j)*x(j),thread_nz,thread_nz_pre,tmp),unroll(thread_nz_pre,8),"
           "parallelize(block,GPUBlock,IgnoreRaces),parallelize(warp,GPUWarp,IgnoreRaces),"
           "parallelize(thread,GPUThread,Atomics)")
# warp per row: 64 rows per block, 8 warps; the lanes of a warp share a row's nonzeros and
# their partial sums are combined with warp shuffles (Temporary)
SPMV_WARP_ROW = ("split(i,block,block_row,64),split(block_row,warp_row,warp,8),pos(j,jpos,A(i,j)),"
                 "split(jpos,thread_nz,thread,32),reorder(block,warp,warp_row,thread,thread_nz),"
                 "parallelize(block,GPUBlock,IgnoreRaces),parallelize(warp,GPUWarp,IgnoreRaces),"
                 "parallelize(thread,GPUThread,Temporary)")
# TACO's SpMM and SDDMM, with bound(dv_unb, dv, 4, MaxExact): 128 dense columns, checked
# when the kernel runs. SpMM's blocks and warps are Atomics here, not IgnoreRaces: coiter
# makes a write atomic only for the loops whose iterations race on it, and a row's nonzeros
# may span warps and blocks.
SPMM = ("reorder(i,j,k),fuse(i,j,f),pos(f,fpos,A(i,j)),split(fpos,block,fpos1,64),"
        "split(fpos1,warp,nnz,8),split(k,dv_unb,thread,32),reorder(block,warp,thread,dv_unb,nnz),"
        "bound(dv_unb,dv,4,MaxExact),"
        "parallelize(block,GPUBlock,Atomics),parallelize(warp,GPUWarp,Atomics),"
        "parallelize(thread,GPUThread,Atomics)")
SDDMM = ("reorder(i,k,j),fuse(i,k,f),pos(f,fpos,B(i,k)),split(fpos,block,fpos1,2048),"
         "split(fpos1,warp,nnz,256),split(j,dv_unb,thread,32),bound(dv_unb,dv,4,MaxExact),"
         "reorder(block,warp,nnz,thread,dv),unroll(dv,4),parallelize(block,GPUBlock,IgnoreRaces),"
         "parallelize(warp,GPUWarp,Atomics),parallelize(thread,GPUThread,ParallelReduction)")
DENSE_COLUMNS = 128  # 4 * 32: what the bound promises
# a scalar result: per-block warp sums added atomically into one device copy of the sum
DOT = "split(i,i0,i1,32),parallelize(i0,GPUBlock,Atomics),parallelize(i1,GPUThread,ParallelReduction)"

SPMV = ("y(i) = A(i,j) * x(j)", {"A": "csr"})
CASES = {
    "spmv_lb": (*SPMV, SPMV_LB, ["coiter_atomic_add(&y_vals[i], tmp_vals[thread_nz])", "#pragma unroll 8",
                                 "double tmp_vals[8];"]),
    "spmv_warp_row": (*SPMV, SPMV_WARP_ROW, ["coiter_warp_sum", "if (coiter_thread == 0)"]),
    "spmm": ("C(i,k) = A(i,j) * B(j,k)", {"A": "csr"}, SPMM, ["coiter_atomic_add(&C_vals"]),
    "sddmm": ("A(i,k) = B(i,k) * C(i,j) * D(j,k)", {"B": "csr"}, SDDMM, ["coiter_warp_sum"]),
    # the result shares B's pattern: values written in place at B's positions
    "sddmm_csr": ("A(i,k) = B(i,k) * C(i,j) * D(j,k)", {"B": "csr", "A": "csr"}, SDDMM,
                  ["A_vals[fpos] += coiter_red0"]),
    "dot": ("a = x(i) * y(i)", {}, DOT, ["coiter_atomic_add(&coiter_acc_t0[0]"]),
    # GPUThread on the outer piece of a split, no GPUBlock: blocks of 256 of its iterations
    "spmv_thread_rows": (*SPMV, "split(i,i0,i1,32),parallelize(i0,GPUThread,NoRaces)",
                         ["int64_t i0 = i0_block * 256 + i0_lane;"]),
    "dot_threads": ("a = x(i) * y(i)", {}, "split(i,i0,i1,32),parallelize(i0,GPUThread,Atomics)",
                    ["coiter_warp_sum"]),
    # TACO's SpMM rows schedule: GPUThread on the outer piece of a split of the dense columns,
    # whose extent is known only at run time: the lanes stride over it (64 iterations here)
    "spmm_rows": ("C(i,k) = A(i,j) * B(j,k)", {"A": "csr"},
                  "split(i,block,i1,32),split(i1,warp,warp_row,4),split(k,thread,thread_col,2),"
                  "reorder(block,warp,warp_row,thread,thread_col,j),parallelize(block,GPUBlock,IgnoreRaces),"
                  "parallelize(warp,GPUWarp,IgnoreRaces),parallelize(thread,GPUThread,IgnoreRaces)",
                  ["thread += 32;"]),
    # the same striding with a warp reduction over the lanes (the sum over j)
    # a row's nonzeros (a loop from A2_pos[i] to A2_pos[i+1]) strided over a warp's lanes
    "spmv_row_lanes": (*SPMV, "parallelize(i,GPUBlock,NoRaces),parallelize(j,GPUThread,Atomics)",
                       ["coiter_warp_sum", "pA2 += 32;"]),
    "sddmm_rows": ("A(i,k) = B(i,k) * C(i,j) * D(j,k)", {"B": "csr"},
                   "split(j,thread,j1,2),reorder(i,k,thread,j1),parallelize(i,GPUBlock,NoRaces),"
                   "parallelize(thread,GPUThread,ParallelReduction)", ["coiter_warp_sum", "thread += 32;"]),
}


def _matrices() -> list[sp.csr_array]:
    """Several blocks of nonzeros; rows longer than a warp's share and than a block's."""
    skewed = sp.random_array((300, 500), density=0.02, format="lil", random_state=4)
    skewed[7, :] = RNG.random(500)
    skewed[150, 100:400] = RNG.random(300)
    return [sp.random_array((203, 171), density=0.05, format="csr", random_state=1), skewed.tocsr()]


def _check(case: str, kernel: coiter.Kernel) -> None:
    """Run ``kernel`` on each matrix and compare with SciPy/NumPy."""
    for A in _matrices():
        n, m = A.shape
        if case.startswith("spmv"):
            x = RNG.random(m)
            got, ref = kernel(A=A, x=x).to_numpy(), A @ x
        elif case.startswith("spmm"):
            B = RNG.random((m, DENSE_COLUMNS))
            got, ref = kernel(A=A, B=B).to_numpy(), A @ B
        elif case.startswith("sddmm"):
            C, D = RNG.random((n, DENSE_COLUMNS)), RNG.random((DENSE_COLUMNS, m))
            got, ref = kernel(B=A, C=C, D=D).to_numpy(), A.multiply(C @ D).toarray()
        else:
            x, y = RNG.random(A.nnz), RNG.random(A.nnz)
            got, ref = kernel(x=x, y=y).to_numpy(), x @ y
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12, err_msg=case)


def _kernel(case: str) -> coiter.Kernel:
    expr, formats, schedule, _ = CASES[case]
    return coiter.compile(expr, formats=formats, schedule=schedule, target="cuda")


@pytest.fixture(scope="module")
def nvcc_kernels() -> dict[str, coiter.Kernel]:
    """One kernel per case, its CUDA built once by nvcc (``source`` builds it)."""
    if nvcc_command() is None:
        pytest.skip("nvcc not found")
    kernels = {case: _kernel(case) for case in CASES}
    for k in kernels.values():
        assert k.source
    return kernels


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_compiles(case: str, nvcc_kernels: dict[str, coiter.Kernel]) -> None:
    source = nvcc_kernels[case].source
    assert "__global__ void coiter_fused_kernel(" in source
    assert 'extern "C" int coiter_fused(' in source
    for text in CASES[case][3]:
        assert text in source, text


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_runs_on_gpu(case: str, nvcc_kernels: dict[str, coiter.Kernel]) -> None:
    available, why = gpu_available()
    if not available:
        pytest.skip(why)
    _check(case, nvcc_kernels[case])


# ---------------------------------------------------------------- emulated on CPU threads


def _emulated_library(source: str) -> ctypes.CDLL:
    """``source`` built with g++ against tests/cuda_emulation.h (cached like kernels)."""
    text = source.replace("#include <cuda_runtime.h>", f'#include "{EMULATION}"')
    text = re.sub(r"(\w+)<<<(.+?), (\d+)>>>\((.*)\);", r"coiter_emulate(\2, \3, [&] { \1(\4); });", text)
    command = (shutil.which("g++") or "g++",)
    flags = ("-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-x", "c++")
    toolchain = Toolchain(command=command, flags=flags, version=compiler_version(command))
    return ctypes.CDLL(str(build_cached(text, toolchain, ".cpp", (), "C++")))


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_runs_emulated(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("g++") is None:
        pytest.skip("g++ not found (the CPU emulation of CUDA needs C++20)")
    monkeypatch.setattr(coiter.runtime.kernel, "load_cuda_library", _emulated_library)
    _check(case, _kernel(case))


# ---------------------------------------------------------------- what is refused


def test_sparse_result_is_refused() -> None:
    with pytest.raises(ScheduleError, match="sparse result C"):
        coiter.compile("C(i,j) = A(i,j) * B(i,j)", formats={"A": "csr", "B": "csr", "C": "csr"},
                       schedule="split(i,i0,i1,32),parallelize(i0,GPUBlock,NoRaces),"
                                "parallelize(i1,GPUThread,NoRaces)", target="cuda")


@pytest.mark.parametrize("schedule, message", [
    ("", "exactly one loop parallelized over GPUBlock"),
    ("parallelize(i,GPUBlock,NoRaces),parallelize(j,GPUWarp,Atomics)", "no constant number of iterations"),
    ("fuse(i,j,f),pos(f,fp,A(i,j)),parallelize(fp,GPUBlock,Atomics)", "i_pos is updated by every iteration"),
    ("split(i,i0,i1,2048),parallelize(i0,GPUBlock,NoRaces),parallelize(i1,GPUThread,NoRaces)",
     "at most 1024"),
])
def test_unmappable_schedules_are_refused(schedule: str, message: str) -> None:
    k = coiter.compile(*SPMV, schedule=schedule, target="cuda")
    with pytest.raises(ScheduleError, match=re.escape(message)):
        assert k.source


def test_unknown_target() -> None:
    with pytest.raises(ValueError, match="target"):
        coiter.compile(*SPMV, target="opencl")


# ---------------------------------------------------------------- autoscheduler GPU templates


@pytest.fixture(params=["gpu", "emulated"])
def runner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where CUDA kernels run: on the GPU (skipped without one) or on CPU threads."""
    if request.param == "gpu":
        if nvcc_command() is None:
            pytest.skip("nvcc not found")
        available, why = gpu_available()
        if not available:
            pytest.skip(why)
    else:
        if shutil.which("g++") is None:
            pytest.skip("g++ not found (the CPU emulation of CUDA needs C++20)")
        monkeypatch.setattr(coiter.runtime.kernel, "load_cuda_library", _emulated_library)
    return request.param


def test_gpu_templates_compile_and_run(runner: str) -> None:
    """The autoscheduler's GPU templates (load-balanced position splits, constant-size warps
    and threads) for SpMV, each compiled and run."""
    from coiter.concrete.autoschedule import templates

    prog = coiter.compile(*SPMV).concrete
    cands = templates(prog, "cuda")
    assert len(cands) == 3 and all("parallelize(thread,GPUThread,Atomics)" in str(c) for c in cands)
    for cand in cands:
        k = coiter.compile(*SPMV, schedule=cand.program, target="cuda")
        for A in _matrices():
            x = RNG.random(A.shape[1])
            np.testing.assert_allclose(k(A=A, x=x).to_numpy(), A @ x, rtol=1e-12, err_msg=str(cand))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("case", ["spmv_lb", "spmv_warp_row"])
def test_cuda_value_types(case: str, dtype: type, runner: str) -> None:
    """Atomic adds and warp sums of every value type atomicAdd takes."""
    k = _kernel(case)
    for A in _matrices():
        A = sp.csr_array((RNG.integers(-9, 10, A.nnz).astype(dtype), A.indices, A.indptr), shape=A.shape)
        x = RNG.integers(-9, 10, A.shape[1]).astype(dtype)
        got = k(A=A, x=x).to_numpy()
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, A.astype(np.int64) @ x.astype(np.int64))


@pytest.mark.parametrize("case", ["spmv_lb", "spmv_warp_row"])
def test_cuda_many_blocks_on_gpu(case: str, nvcc_kernels: dict[str, coiter.Kernel]) -> None:
    """A million nonzeros: thousands of blocks, rows longer than a block's share."""
    available, why = gpu_available()
    if not available:
        pytest.skip(why)
    n, m, nnz = 120_000, 90_000, 1_000_000
    rows = np.concatenate([RNG.integers(0, n, nnz), np.full(m, 17)])
    cols = np.concatenate([RNG.integers(0, m, nnz), np.arange(m)])
    A = sp.csr_array((RNG.random(nnz + m), (rows, cols)), shape=(n, m))
    x = RNG.random(A.shape[1])
    np.testing.assert_allclose(nvcc_kernels[case](A=A, x=x).to_numpy(), A @ x, rtol=1e-10)


def test_auto_schedule_on_the_gpu_target(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """schedule="auto" with target="cuda" tries the GPU templates (emulated here), each
    checked against the CPU kernel's result, and keeps the fastest."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not found (the CPU emulation of CUDA needs C++20)")
    from coiter.runtime import autotune

    monkeypatch.setattr(coiter.runtime.kernel, "load_cuda_library", _emulated_library)
    monkeypatch.setattr(autotune, "_store", lambda: tmp_path / "autotune.json")
    k = coiter.compile(*SPMV, schedule="auto", target="cuda")
    A = _matrices()[0]
    x = RNG.random(A.shape[1])
    np.testing.assert_allclose(k(A=A, x=x).to_numpy(), A @ x, rtol=1e-12)
    (trials,) = k.tuner.trials.values()
    assert len(trials) == 3


def test_intrinsics_with_c_helpers_run_on_the_device(runner: str) -> None:
    """max, min, square and casts call C helper functions (each argument evaluated once),
    which the CUDA translation unit defines for the device."""
    k = coiter.compile("y(i) = A(i,j) * int64(max(min(x(j) - 0.5, square(x(j))), 0.1) * 10)",
                       formats={"A": "csr"}, schedule=CASES["spmv_thread_rows"][2], target="cuda")
    for A in _matrices():
        x = RNG.random(A.shape[1]) * 2 - 1
        fx = (np.maximum(np.minimum(x - 0.5, x * x), 0.1) * 10).astype(np.int64)
        np.testing.assert_allclose(k(A=A, x=x).to_numpy(), A @ fx, rtol=1e-12)


MATH = "y(i) = A(i,j) * (sqrt(abs(x(j))) + exp(x(j)) * pow(x(j), 2) - atan2(x(j), 2) + floor(hypot(x(j), 3)))"


def _math_reference(A: sp.csr_array, x: np.ndarray) -> np.ndarray:
    return A @ (np.sqrt(np.abs(x)) + np.exp(x) * x**2 - np.arctan2(x, 2) + np.floor(np.hypot(x, 3)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_math_functions_run_in_gpu_loops(dtype: type, runner: str) -> None:
    """C's math functions (sqrt, and sqrtf for float32...) are device functions in CUDA: GPU
    loops call them (they were refused as calls the device has not)."""
    k = coiter.compile(MATH, formats={"A": "csr"}, schedule=CASES["spmv_thread_rows"][2], target="cuda")
    for A in _matrices():
        A = A.astype(dtype)
        x = (RNG.random(A.shape[1]) * 4 - 2).astype(dtype)
        got = k(A=A, x=x).to_numpy()
        assert got.dtype == dtype
        np.testing.assert_allclose(got, _math_reference(A.astype(np.float64), x.astype(np.float64)),
                                   rtol=1e-12 if dtype == np.float64 else 1e-4)


def test_math_functions_compile_for_the_device() -> None:
    """nvcc builds the module whose GPU loop calls them (no GPU needed to build)."""
    if nvcc_command() is None:
        pytest.skip("nvcc not found")
    for dtype in ("float64", "float32"):
        k = coiter.compile(MATH, formats={"A": "csr"}, schedule=CASES["spmv_thread_rows"][2],
                           target="cuda", dtype=dtype)
        assert re.search(r"sqrtf?\(", k.source) and "__global__" in k.source
