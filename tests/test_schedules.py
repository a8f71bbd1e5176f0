"""The scheduling language: transformations, derived loops, parallel code (issue 4).

Every schedule is checked against NumPy/SciPy on the same data; the fuzzer applies
random sequences of transformations and requires that accepted ones never change
results.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import coiter
from coiter.concrete.commands import NAMES, parse_commands
from coiter.concrete.schedule import TRANSFORMS
from coiter.data import example_path
from coiter.errors import FormatError, KernelError, ParseError, ScheduleError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
RNG = np.random.default_rng(7)


def _dense(shape: tuple[int, ...], density: float, seed: int) -> np.ndarray:
    """Random values with about ``density`` of them nonzero."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) * (rng.random(shape) < density)


def _csr(n: int, m: int, density: float, seed: int) -> sp.csr_array:
    return sp.random_array((n, m), density=density, format="csr", random_state=seed)


def _tensor3(shape, density, seed) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random(shape) < density) * rng.random(shape)


# ---------------------------------------------------------------- the paper's CPU schedules (§6.6)

SPMV_ROWS = "split(i,i0,i1,16),reorder(i0,i1,j),parallelize(i0,CPUThread,NoRaces)"
SPMV_FIG4 = "fuse(i,j,f),pos(f,fpos,A(i,j)),split(fpos,fpos0,fpos1,16),parallelize(fpos0,CPUThread,Atomics)"
SPMM = ("split(i,i0,i1,16),pos(j,jpos,A(i,j)),split(jpos,jpos0,jpos1,8),reorder(i0,i1,jpos0,k,jpos1),"
        "parallelize(i0,CPUThread,NoRaces),parallelize(k,CPUVector,IgnoreRaces)")
SDDMM = ("split(i,i0,i1,16),pos(k,kpos,B(i,k)),split(kpos,kpos0,kpos1,8),reorder(i0,i1,kpos0,j,kpos1),"
         "parallelize(i0,CPUThread,NoRaces),parallelize(kpos1,CPUVector,ParallelReduction)")
TTV = "fuse(i,j,f),pos(f,fpos,B(i,j,k)),split(fpos,chunk,fpos2,16),reorder(chunk,fpos2,k),parallelize(chunk,CPUThread,NoRaces)"
MTTKRP = ("split(i,i1,i2,16),reorder(i1,i2,k,l,j),precompute(B(i,k,l)*D(l,j),j,j,w),"
          "parallelize(i1,CPUThread,NoRaces)")


def _matrices():
    yield "random", _csr(203, 171, 0.05, 1)
    yield "bcsstk16", coiter.read(example_path("bcsstk16")).to_scipy().tocsr()


@pytest.mark.parametrize("schedule", [SPMV_ROWS, SPMV_FIG4], ids=["rows", "fig4b"])
@pytest.mark.parametrize("threads", [1, 2])
def test_spmv_schedules(schedule: str, threads: int) -> None:
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule=schedule)
    for _, A in _matrices():
        x = RNG.random(A.shape[1])
        # atomics add a row's terms in any order: the error bound of a reordered sum is
        # relative to sum |a_ij x_j|, not to the (possibly cancelling) result
        bound = 1e-12 * (abs(A) @ abs(x)) + 1e-300
        assert np.all(np.abs(k(A=A, x=x, threads=threads).to_numpy() - A @ x) <= bound)


@pytest.mark.parametrize("threads", [1, 2])
def test_spmm_schedule(threads: int) -> None:
    k = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"}, schedule=SPMM)
    for _, A in _matrices():
        B = RNG.random((A.shape[1], 11))
        np.testing.assert_allclose(k(A=A, B=B, threads=threads).to_numpy(), A @ B, rtol=1e-12)


@pytest.mark.parametrize("result", ["dd", "csr"])
@pytest.mark.parametrize("threads", [1, 2])
def test_sddmm_schedule(result: str, threads: int) -> None:
    """The CSR result shares B's pattern: the scheduled kernel writes it in place at B's
    positions (TACO's exception for outputs equal to the input iteration space)."""
    k = coiter.compile("A(i,k) = B(i,k) * C(i,j) * D(j,k)", formats={"B": "csr", "A": result}, schedule=SDDMM)
    for _, B in _matrices():
        C, D = RNG.random((B.shape[0], 9)), RNG.random((9, B.shape[1]))
        ref = B.multiply(C @ D).toarray()
        got = k(B=B, C=C, D=D, threads=threads)
        np.testing.assert_allclose(got.to_numpy(), ref, rtol=1e-12)
    if result == "csr":
        assert "A_vals[kpos] +=" in k.source
        with pytest.raises(FormatError, match="in place"):
            k.assemble(B=B, C=C, D=D)


def _tensors():
    yield "random", coiter.Tensor.from_numpy(_tensor3((13, 11, 17), 0.2, 3), format=coiter.csf(3))
    path = SHARED / "tensors" / "fb15k-237.tns.gz"
    if path.exists():
        yield "fb15k-237", coiter.read(path).asformat(coiter.csf(3))


@pytest.mark.parametrize("threads", [1, 2])
def test_ttv_schedule(threads: int) -> None:
    k = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats={"B": coiter.csf(3)}, schedule=TTV)
    for name, B in _tensors():
        c = RNG.random(B.shape[2])
        got = k(B=B, c=c, threads=threads).to_numpy()
        ref = _ttv_reference(B, c)
        np.testing.assert_allclose(got, ref, rtol=1e-10, err_msg=name)


def _ttv_reference(B: coiter.Tensor, c: np.ndarray) -> np.ndarray:
    coords, vals = B.storage.to_coords()
    out = np.zeros(B.shape[:2])
    np.add.at(out, (coords[0], coords[1]), vals * c[coords[2]])
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_mttkrp_schedule(threads: int) -> None:
    k = coiter.compile("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", formats={"B": coiter.csf(3)}, schedule=MTTKRP)
    for name, B in _tensors():
        C, D = RNG.random((B.shape[1], 8)), RNG.random((B.shape[2], 8))
        coords, vals = B.storage.to_coords()
        ref = np.zeros((B.shape[0], 8))
        np.add.at(ref, coords[0], vals[:, None] * C[coords[1]] * D[coords[2]])
        np.testing.assert_allclose(k(B=B, C=C, D=D, threads=threads).to_numpy(), ref, rtol=1e-10, err_msg=name)


def test_mttkrp_precompute_workspace_in_notation() -> None:
    k = coiter.compile("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", formats={"B": coiter.csf(3)}, schedule=MTTKRP)
    text = str(k.concrete)
    assert "where(forall(j, A(i,j) += C(k,j) * w(j)), forall(l, forall(j, w(j) += B(i,k,l) * D(l,j))))" in text
    assert text.endswith(": split(i, i1, i2, 16)")


# ---------------------------------------------------------------- Fig. 4b (golden text)

FIG4B = """\
  #pragma omp parallel for schedule(dynamic, 1) num_threads(COITER_THREADS())
  for (int64_t fpos0 = 0; fpos0 < (A2_pos[A1_dimension] - A2_pos[0] + 15) / 16; fpos0++) {
    int64_t i_pos = 0;
    int64_t i_pos_hi = A1_dimension - 1;
    while (i_pos < i_pos_hi) {
      int64_t i_pos_mid = i_pos + (i_pos_hi - i_pos + 1) / 2;
      if (A2_pos[i_pos_mid] <= A2_pos[0] + fpos0 * 16) {
        i_pos = i_pos_mid;
      } else {
        i_pos_hi = i_pos_mid - 1;
      }
    }
    for (int64_t fpos1 = 0; fpos1 < 16; fpos1++) {
      int64_t fpos = A2_pos[0] + (fpos0 * 16 + fpos1);
      if (fpos >= A2_pos[A1_dimension]) {
        break;
      }
      while (fpos >= A2_pos[i_pos + 1]) {
        i_pos++;
      }
      int64_t i = i_pos;
      int64_t j = A2_crd[fpos];
      #pragma omp atomic
      y_vals[i] += A_vals[fpos] * x_vals[j];
    }
  }
"""


def _threads_or_serial(parallel_loop: str, call: str, serial_call: str) -> str:
    """A parallel loop as lowering and the C back end emit it: after the call's thread count
    is read, under a thread-count test, its body moved into a helper function the loop
    calls, with a serial copy in a function of its own."""
    lines = parallel_loop.splitlines(keepends=True)
    assert lines[0] == "  #pragma omp parallel for schedule(dynamic, 1) num_threads(COITER_THREADS())\n"
    head = lines[1]
    # the C back end splits the directive: a region noting when thread 0 entered it and ran
    # out of work (coiter_team_done) around the loop's own directive
    parallel = ("    {\n"
                "      int64_t coiter_team_start = coiter_clock(), coiter_team_entered = 0, "
                "coiter_team_first_done = 0;\n"
                "      #pragma omp parallel num_threads(COITER_THREADS())\n"
                "      {\n"
                "        if (COITER_THREAD_NUM() == 0) coiter_team_entered = coiter_clock();\n"
                "        #pragma omp for schedule(dynamic, 1) nowait\n"
                f"      {head}          {call};\n        }}\n"
                "        if (COITER_THREAD_NUM() == 0) coiter_team_first_done = coiter_clock();\n"
                "      }\n"
                "      coiter_team_done(coiter_team_start, coiter_team_entered, coiter_team_first_done);\n"
                "    }\n")
    return (f"  coiter_nthreads = coiter_call_threads(coiter_nthreads, coiter_work);\n"
            f"  if (COITER_THREADS() > 1) {{\n{parallel}  }} else {{\n    {serial_call};\n  }}\n"
            f"  coiter_call_done();\n  return 0;\n}}")


def _helper_body(parallel_loop: str) -> str:
    """The body of a parallel loop as its helper function holds it."""
    return "".join(line[2:] for line in parallel_loop.splitlines(keepends=True)[2:-1])


def test_fig4b_golden_text() -> None:
    """fuse → pos → split → parallelize(CPUThread, Atomics): derived bound
    ceil(nnz/16), tracking init (binary search) and advance of i, recovery of the
    position and j, the tile guard, and an atomic update (the paper's Fig. 4b)."""
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule=SPMV_FIG4)
    helper = k.source.split("static inline void coiter_fused_body0(\n", 1)[1].split("\n}\n", 1)[0]
    assert helper.split(") {\n", 1)[1] + "\n" == _helper_body(FIG4B)
    body = k.source.split("int64_t coiter_work) {\n", 1)[1].split("\n\nint coiter_fused_packed", 1)[0]
    call = "coiter_fused_body0(fpos0, A1_dimension, A2_crd, A2_pos, A_vals, x_vals, y_vals)"
    serial_call = "coiter_fused_serial0(A1_dimension, A2_crd, A2_pos, A_vals, x_vals, y_vals)"
    assert body == _threads_or_serial(FIG4B, call, serial_call)
    # the serial copy: the loop without its directive, out of line (see codegen/outline.py)
    serial = k.source.split("static COITER_OUT_OF_LINE void coiter_fused_serial0(\n", 1)[1]
    assert serial.split(") {\n", 1)[1].split("\n}\n", 1)[0] + "\n" == "".join(FIG4B.splitlines(keepends=True)[1:])
    assert str(k.concrete) == ("forall(fpos0, forall(fpos1, y(i) += A(i,j) * x(j)), CPUThread, Atomics) : "
                               "fuse(i, j, f), pos(f, fpos, A(i,j)), split(fpos, fpos0, fpos1, 16)")


# ---------------------------------------------------------------- both spellings


def test_python_api_equals_command_string() -> None:
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    chained = (k.concrete.split("i", "i0", "i1", 16).reorder("i0", "i1", "j")
               .parallelize("i0", "CPUThread", "NoRaces"))
    k2 = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule=chained)
    k3 = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule=SPMV_ROWS)
    assert k2.source == k3.source
    assert [str(c) for c in chained.commands] == SPMV_ROWS.split(",reorder")[0:1] + [
        "reorder(i0,i1,j)", "parallelize(i0,CPUThread,NoRaces)"]
    A = _csr(50, 40, 0.1, 5)
    x = RNG.random(40)
    np.testing.assert_allclose(k2(A=A, x=x).to_numpy(), A @ x)


def test_parallel_outer_piece_placed_inside_its_inner_piece() -> None:
    """Reordered split pieces: the parallel loop recovers i, guarded by i < N (no break)."""
    A = _csr(203, 150, 0.05, 18)
    x = RNG.random(150)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"},
                       schedule="split(i,i0,i1,4),reorder(i1,i0,j),parallelize(i0,CPUThread,NoRaces)")
    assert "if (i < y1_dimension)" in k.source
    np.testing.assert_allclose(k(A=A, x=x, threads=2).to_numpy(), A @ x)


def test_chunking_static_and_dynamic() -> None:
    A = _csr(300, 90, 0.05, 6)
    x = RNG.random(90)
    # dynamic chunks of 4 blocks: OpenMP hands out one chunk at a time, whose blocks run in
    # the loop's chunk function (codegen/outline.py)
    for chunk, text in [("static", "#pragma omp for schedule(static) nowait"),
                        ("dynamic,4", "coiter_fused_chunk0(i0_lo, COITER_MIN(i0_lo + 4, ")]:
        k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"},
                           schedule=f"split(i,i0,i1,8),parallelize(i0,CPUThread,NoRaces,{chunk})")
        assert text in k.source
        np.testing.assert_allclose(k(A=A, x=x, threads=2).to_numpy(), A @ x)


def test_temporary_and_parallel_reduction_use_openmp_reductions() -> None:
    A = _csr(120, 80, 0.1, 8)
    x = RNG.random(80)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"},
                       schedule="fuse(i,j,f),pos(f,fp,A(i,j)),divide(fp,f0,f1,2),parallelize(f0,CPUThread,Temporary)")
    assert "reduction(+: y_vals[:y1_dimension])" in k.source
    np.testing.assert_allclose(k(A=A, x=x, threads=2).to_numpy(), A @ x)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"},
                       schedule="pos(j,jp,A(i,j)),parallelize(jp,CPUVector,ParallelReduction)")
    assert "omp simd reduction(+: t0)" in k.source
    np.testing.assert_allclose(k(A=A, x=x).to_numpy(), A @ x)


def test_coordinate_split_of_a_sparse_level_uses_windows() -> None:
    A = _csr(64, 300, 0.05, 9)
    x = RNG.random(300)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="split(j,j0,j1,32)")
    assert "pA2_first" in k.source  # the row's segment is cut by binary search
    np.testing.assert_allclose(k(A=A, x=x).to_numpy(), A @ x)
    # the same with the blocks of columns outermost (sparse x: intersections per window)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr", "x": "s"},
                       schedule="split(j,j0,j1,32),reorder(j0,i,j1)")
    xs = np.where(RNG.random(300) < 0.3, x, 0)
    np.testing.assert_allclose(k(A=A, x=xs).to_numpy(), A @ xs)


def test_bound_unroll_and_coord() -> None:
    D = RNG.random((30, 40))
    x = RNG.random(40)
    k = coiter.compile("y(i) = A(i,j) * x(j)", schedule="bound(j,jb,40,MaxExact),unroll(jb,4)")
    assert "#pragma GCC unroll 4" in k.source and "jb < 40" in k.source
    np.testing.assert_allclose(k(A=D, x=x).to_numpy(), D @ x)
    with pytest.raises(KernelError, match="bound"):
        k(A=D[:, :39], x=x[:39])
    A = _csr(40, 50, 0.1, 10)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="pos(j,jp,A(i,j)),coord(jp,jc)")
    np.testing.assert_allclose(k(A=A, x=RNG.random(50) * 0 + 1).to_numpy(), A @ np.ones(50))


def test_precompute_over_a_derived_variable_and_bound_on_a_piece() -> None:
    """The CPU form of the paper's load-balanced SpMV: each block's products go to a local
    8-value workspace (its producer loop walks the positions again), then to y atomically."""
    A = _csr(203, 171, 0.05, 19)
    x = RNG.random(171)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule=(
        "fuse(i,j,f),pos(f,fpos,A(i,j)),split(fpos,blk,fpos1,64),split(fpos1,th,th_nz,8),"
        "precompute(A(i,j)*x(j),th_nz,th_nz_pre,tmp),unroll(th_nz_pre,8),parallelize(blk,CPUThread,Atomics)"))
    assert "double tmp_vals[8];" in k.source
    assert "precomputed(th_nz, th_nz_pre)" in str(k.concrete)
    np.testing.assert_allclose(k(A=A, x=x, threads=2).to_numpy(), A @ x)
    B = RNG.random((171, 64))
    k = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"},
                       schedule="split(k,k0,k1,16),bound(k0,kb,4,MaxExact),reorder(i,j,kb,k1)")
    assert "kb < 4" in k.source
    np.testing.assert_allclose(k(A=A, B=B).to_numpy(), A @ B)
    with pytest.raises(KernelError, match="bound"):
        k(A=A, B=B[:, :48])


def test_spgemm_rows_split_serial_keeps_assembly() -> None:
    A, B = _csr(80, 60, 0.05, 11), _csr(60, 70, 0.05, 12)
    k = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"},
                       schedule="split(i,i0,i1,8)")
    np.testing.assert_allclose(k(A=A, B=B).to_scipy().toarray(), (A @ B).toarray())


def test_threads_argument() -> None:
    A = _csr(5000, 300, 0.01, 13)
    x = RNG.random(300)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    for n in (1, 2, 3):
        np.testing.assert_allclose(k(A=A, x=x, threads=n).to_numpy(), A @ x)
    with pytest.raises(ValueError, match="threads"):
        k(A=A, x=x, threads=0)


# ---------------------------------------------------------------- parallel assembly


@pytest.mark.parametrize("schedule", [None, "parallelize(i,CPUThread,NoRaces)"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_assembly_of_csr_results(schedule, threads: int) -> None:
    """SpGEMM (with its row workspace) and SpAdd build CSR rows in per-thread buffers."""
    A, B = _csr(300, 200, 0.04, 15), _csr(200, 260, 0.04, 16)
    k = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"},
                       schedule=schedule)
    assert "#pragma omp parallel num_threads(coiter_nt)" in k.source
    C = k(A=A, B=B, threads=threads).to_scipy()
    assert C.has_sorted_indices
    np.testing.assert_allclose(C.toarray(), (A @ B).toarray(), rtol=1e-12)
    A2 = _csr(300, 200, 0.04, 17)
    k = coiter.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr", "C": "csr"},
                       schedule=schedule)
    np.testing.assert_allclose(k(A=A, B=A2, threads=threads).to_scipy().toarray(), (A + A2).toarray())


def test_parallel_assembly_with_empty_blocks_of_rows() -> None:
    """More threads than rows, and empty rows: every part may be empty."""
    A = sp.csr_array(np.diag([0.0, 2.0, 0.0]))
    k = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    np.testing.assert_allclose(k(A=A, B=A, threads=8).to_numpy(), (A @ A).toarray())


# ------------------------------------------------- precompute over several variables

# TACO's test/tests-workspaces.cpp cases that precompute over a set of variables
# (precompute2D_add, precompute4D_add, precompute4D_multireduce, precompute3D_TspV,
# precompute3D_multipleWS, precompute3D_renamedIVars_TspV), on 5-wide operands: expression,
# schedule, NumPy reference (einsum subscripts, or "+" for the sum of the operands), orders
MULTI_VAR_PRECOMPUTES = {
    "2D_add": ("A(i,j) = B(i,j) + C(i,j) + D(i,j)", "precompute(B(i,j)+C(i,j),{i,j},{i,j},ws)",
               "+", {"B": 2, "C": 2, "D": 2}),
    "4D_add": ("A(i,j,k,l) = B(i,j,k,l) + C(i,j,k,l) + D(i,j,k,l)",
               "precompute(B(i,j,k,l)+C(i,j,k,l),{i,j,k,l},{i,j,k,l},ws1),"
               "precompute(ws1(i,j,k,l)+D(i,j,k,l),{i,j,k,l},{i,j,k,l},ws2)",
               "+", {"B": 4, "C": 4, "D": 4}),
    "4D_multireduce": ("A(i,j) = B(i,j,k,l) * C(k,l,m) * D(m,n)",
                       "precompute(B(i,j,k,l)*C(k,l,m),{i,j,m},{i,j,m},ws1),"
                       "precompute(ws1(i,j,m)*D(m,n),{i,j},{i,j},ws2)",
                       "ijkl,klm,mn->ij", {"B": 4, "C": 3, "D": 2}),
    "3D_TspV": ("A(i,j) = B(i,j,k,l) * c(l) * c(k)", "precompute(B(i,j,k,l)*c(l),{i,j,k},{i,j,k},ws)",
                "ijkl,l,k->ij", {"B": 4, "c": 1}),
    "3D_multipleWS": ("A(i,j) = B(i,j,k,l) * c(l) * c(k)",
                      "precompute(B(i,j,k,l)*c(l),{i,j,k},{i,j,k},ws),precompute(ws(i,j,k)*c(k),{i,j},{i,j},t)",
                      "ijkl,l,k->ij", {"B": 4, "c": 1}),
    "3D_renamedIVars_TspV": ("A(i,j) = B(i,j,k,l) * c(l) * c(k)",
                             "precompute(B(i,j,k,l)*c(l),{i,j,k},{iw,jw,kw},ws)",
                             "ijkl,l,k->ij", {"B": 4, "c": 1}),
}


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case", sorted(MULTI_VAR_PRECOMPUTES))
def test_precompute_over_several_variables(case: str, sparse: bool) -> None:
    """Each workspace is a dense temporary over the set of variables given (renamed or
    not), the concrete program holds it with those modes, and values equal NumPy's on dense
    operands and on sparse ones (vectors compressed, as TACO's c, and CSF tensors)."""
    expr, schedule, subscripts, orders = MULTI_VAR_PRECOMPUTES[case]
    rng = np.random.default_rng(21)
    arrays = {n: rng.integers(-3, 4, size=(5,) * order).astype(float) * (rng.random((5,) * order) < 0.6)
              for n, order in orders.items()}
    # sparse: the last level compressed (every level compressed, four sparse 4-D terms
    # would make a merge lattice concretize declines, adding them one at a time)
    formats = {n: "d" * (order - 1) + ("s" if sparse else "d") for n, order in orders.items()}
    k = coiter.compile(expr, formats=formats, schedule=schedule)
    names = re.findall(r"precompute\(.*?\{(.*?)\},\{(.*?)\},(\w+)\)", schedule)
    temps = k.concrete.tensors
    for over, modes, ws in names:
        got_modes = [m.name for m in temps[ws].modes]
        # a variable whose loop encloses the workspace's where (outside concretize's scalar
        # temporary) keeps its name
        assert len(got_modes) == len(modes.split(","))
        assert all(g in (o, m) for g, o, m in zip(got_modes, over.split(","), modes.split(",")))
    got = k(**{n: coiter.Tensor.from_numpy(a, format=formats[n]) for n, a in arrays.items()})
    operands = [arrays[a] for a in re.findall(r"([A-Za-z]+)\(", expr.split("=")[1])]
    expected = sum(operands) if subscripts == "+" else np.einsum(subscripts, *operands)
    np.testing.assert_array_equal(got.to_numpy(), expected)


def test_precompute_sets_parse_and_print() -> None:
    """``{i,j}`` is one argument of precompute (a tuple, printed back with braces); other
    commands read braces as a plain list, as before."""
    (cmd,) = parse_commands("precompute(B(i,j)+C(i,j),{i,j},{iw,jw},ws)")
    assert cmd.args == ("B(i,j)+C(i,j)", ("i", "j"), ("iw", "jw"), "ws")
    assert str(cmd) == "precompute(B(i,j)+C(i,j),{i,j},{iw,jw},ws)"
    (cmd,) = parse_commands("reorder({j,i})")
    assert cmd.args == ("j", "i")


def test_precompute_set_errors() -> None:
    expr = "A(i,j) = B(i,j) + C(i,j) + D(i,j)"
    with pytest.raises(ScheduleError, match="as many workspace variables as loop variables"):
        coiter.compile(expr, schedule="precompute(B(i,j)+C(i,j),{i,j},{i},ws)")
    with pytest.raises(ScheduleError, match="loop variables must be distinct"):
        coiter.compile(expr, schedule="precompute(B(i,j)+C(i,j),{i,i},{a,b},ws)")
    with pytest.raises(ScheduleError, match="already used"):
        coiter.compile(expr, schedule="precompute(B(i,j)+C(i,j),{i,j},{i,i},ws)")
    with pytest.raises(ScheduleError, match="over a derived variable is dense"):
        coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"},
                       schedule="split(i,i0,i1,4),precompute(A(i,j)*x(j),i1,i1,w,hash)")


# ---------------------------------------------------------------- preconditions


@pytest.mark.parametrize("schedule, message", [
    ("split(q,q0,q1,4)", "no loop over index variable 'q'"),
    ("split(i,i0,i1,0)", "an integer from 1 to"),
    ("split(i,j,i1,4)", "already used"),
    ("reorder(j,i)", "out of its storage order"),
    ("fuse(i,j,f),pos(f,fpos,A(i,j)),split(fpos,p0,p1,8),parallelize(p0,CPUThread,NoRaces)", "race on y(i)"),
    ("parallelize(i,CPUThread,NoRace)", "race strategy must be one of"),
    ("parallelize(i,GPUCore,NoRaces)", "parallel unit must be one of"),
    ("parallelize(i,CPUThread,NoRaces),split(i,i0,i1,4)", "no transformation may follow parallelize"),
    ("pos(i,ip,A(i,j))", "level 1 of A (dense) has no positions"),
    ("pos(j,jp,B(i,j))", "is not an operand access"),
    ("unroll(j,-1)", "an integer from 1 to"),
    ("bound(j,jb,4,Exactly)", "bound kind must be one of"),
    ("precompute(A(i,j)*z(j),j,j,w)", "exactly one assignment"),
    ("parallelize(i,CPUThread,NoRaces,sometimes)", "chunking"),
])
def test_schedule_errors(schedule: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=re.escape(message)):
        coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule=schedule)


def test_errors_found_when_lowering() -> None:
    A = _csr(20, 20, 0.2, 14)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"},
                       schedule="split(i,i0,i1,4),parallelize(i0,GPUBlock,IgnoreRaces)")
    with pytest.raises(ScheduleError, match="CUDA"):
        k(A=A, x=np.ones(20))
    k = coiter.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr"},
                       schedule="parallelize(j,CPUThread,IgnoreRaces)")
    with pytest.raises(ScheduleError, match="while loop"):
        k(A=A, B=A)
    with pytest.raises(ScheduleError, match="append to the sparse result C"):
        coiter.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr", "C": "dcsr"},
                       schedule="parallelize(j,CPUThread,NoRaces)")


def test_sparse_result_blocks_reorder_across_reduction() -> None:
    """Without an operand sharing its pattern, a CSR result cannot take random writes."""
    with pytest.raises(ScheduleError, match="cannot"):
        coiter.compile("A(i,k) = B(i,k) * C(i,j) * D(j,k)", formats={"B": "csr", "C": "csr", "A": "csr"},
                       schedule=SDDMM)


def test_every_command_has_a_transformation() -> None:
    assert set(TRANSFORMS) == set(NAMES)


def test_command_string_parse_errors() -> None:
    with pytest.raises(ScheduleError, match="unknown scheduling command"):
        parse_commands("tile(i,4)")
    with pytest.raises(ScheduleError, match="unbalanced"):
        parse_commands("split(i,i0,i1,4")
    with pytest.raises(ScheduleError, match="expected ','"):
        parse_commands("split(i,i0,i1,4) reorder(i0,i1)")
    with pytest.raises(ParseError):
        coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="precompute(A(i,,j),j,j,w)")


# ---------------------------------------------------------------- schedule fuzzing

KERNELS = {
    "spmv": ("y(i) = A(i,j) * x(j)", {"A": "csr"}),
    "spmv_dense": ("y(i) = A(i,j) * x(j)", {}),
    "spmm": ("C(i,k) = A(i,j) * B(j,k)", {"A": "csr"}),
    "ttv": ("A(i,j) = B(i,j,k) * c(k)", {"B": "sss"}),
    "mttkrp": ("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", {"B": "dss"}),
    "add": ("A(i,j) = B(i,j) + C(i,j)", {"B": "csr", "C": "dd"}),
    # sparse intersections: loops over one operand's positions search the other
    "rowdot": ("y(i) = B(i,j) * C(i,j)", {"B": "csr", "C": "csr"}),
    "dot": ("a = b(i) * c(i)", {"b": "s", "c": "s"}),
}


def _operands(name: str, rng: np.random.Generator):
    if name.startswith("spmv"):
        A = _csr(37, 29, 0.15, int(rng.integers(1 << 30)))
        if name == "spmv_dense":  # the kernel takes A dense (a CSR A would be densified per call)
            A = A.toarray()
        x = rng.random(29)
        return dict(A=A, x=x), lambda: A @ x
    if name == "spmm":
        A, B = _csr(37, 29, 0.15, int(rng.integers(1 << 30))), rng.random((29, 6))
        return dict(A=A, B=B), lambda: A @ B
    if name == "ttv":
        B, c = _tensor3((9, 7, 11), 0.2, int(rng.integers(1 << 30))), rng.random(11)
        return dict(B=B, c=c), lambda: np.einsum("ijk,k->ij", B, c)
    if name == "mttkrp":
        B, C, D = _tensor3((9, 7, 11), 0.2, int(rng.integers(1 << 30))), rng.random((7, 5)), rng.random((11, 5))
        return dict(B=B, C=C, D=D), lambda: np.einsum("ikl,kj,lj->ij", B, C, D)
    if name == "rowdot":
        B, C = (_csr(23, 19, 0.3, int(rng.integers(1 << 30))) for _ in range(2))
        return dict(B=B, C=C), lambda: (B.toarray() * C.toarray()).sum(axis=1)
    if name == "dot":
        b, c = (_dense((60,), 0.3, int(rng.integers(1 << 30))) for _ in range(2))
        return dict(b=b, c=c), lambda: np.array(b @ c)
    B, C = _csr(23, 19, 0.2, int(rng.integers(1 << 30))), rng.random((23, 19))
    return dict(B=B, C=C), lambda: B.toarray() + C


UNITS = ["CPUThread", "CPUVector"]
# IgnoreRaces is the user's promise that no race exists, which random schedules break
RACES = ["NoRaces", "Atomics", "Temporary", "ParallelReduction"]


@st.composite
def _commands(draw, prog):
    """A random command over the loops and accesses of ``prog`` (may be illegal)."""
    loops = [s.var.name for s in _walk_loops(prog.stmt)]
    v = draw(st.sampled_from(loops))
    n = len(prog.commands)
    kind = draw(st.sampled_from(["split", "divide", "reorder", "fuse", "pos", "unroll", "mergeby",
                                 "parallelize"]))
    if kind in ("split", "divide"):
        return kind, (v, f"{v}o{n}", f"{v}n{n}", draw(st.integers(1, 9)))
    if kind == "reorder":
        return kind, tuple(draw(st.permutations(loops))[: draw(st.integers(2, max(2, len(loops))))])
    if kind == "fuse":
        return kind, (v, draw(st.sampled_from(loops)), f"f{n}")
    if kind == "pos":
        accs = sorted({str(a) for a in _accesses(prog)})
        return kind, (v, f"{v}p{n}", draw(st.sampled_from(accs)))
    if kind == "unroll":
        return kind, (v, draw(st.integers(1, 4)))
    if kind == "mergeby":
        return kind, (v, draw(st.sampled_from(["TwoFinger", "Gallop"])))
    return kind, (v, draw(st.sampled_from(UNITS)), draw(st.sampled_from(RACES)))


def _walk_loops(s):
    from coiter.concrete.stmt import Forall, walk_stmts

    return [x for x in walk_stmts(s) if isinstance(x, Forall)]


def _accesses(prog):
    from coiter.concrete.stmt import Assign, walk_stmts
    from coiter.notation.ast import accesses

    return [a for s in walk_stmts(prog.stmt) if isinstance(s, Assign) for a in accesses(s.rhs)
            if prog.tensors[a.tensor].role == "input"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(KERNELS)), seed=st.integers(0, 2**31 - 1))
def test_schedule_fuzzing(data, name: str, seed: int) -> None:
    expr, formats = KERNELS[name]
    kernel = coiter.compile(expr, formats=formats)
    prog = kernel.concrete
    for _ in range(data.draw(st.integers(1, 5))):
        kind, args = data.draw(_commands(prog))
        try:
            prog = getattr(prog, kind)(*args)
        except ScheduleError:
            continue  # an illegal command is refused with a reason; keep the legal prefix
    assume(prog.commands)
    scheduled = coiter.compile(expr, formats=formats, schedule=prog)
    operands, reference = _operands(name, np.random.default_rng(seed))
    try:
        got = scheduled(threads=2, **operands)
    except ScheduleError:
        assume(False)  # a precondition only the lowering can see (e.g. a while loop in parallel)
    np.testing.assert_allclose(got.to_numpy(), reference(), rtol=1e-10, atol=1e-12,
                               err_msg=f"{expr} with {', '.join(map(str, prog.commands))}")


@pytest.mark.parametrize("expr,formats,schedule,shapes,ref", [
    ("A(i,j) = B(i,j,k) * c(k)", {"B": "sss", "A": "ss"}, "split(i,i0,i1,4)", {"B": (8, 9, 10), "c": (10,)},
     "ijk,k->ij"),
    ("A(i,j) = B(i,j,k) * c(k)", {"B": "sss", "A": "ss"}, "split(i,i0,i1,3),split(j,j0,j1,2)",
     {"B": (8, 9, 10), "c": (10,)}, "ijk,k->ij"),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "dcsr", "B": "csr", "C": "dcsr"}, "split(i,i0,i1,4)",
     {"A": (11, 7), "B": (7, 9)}, "ik,kj->ij"),
])
def test_split_loops_append_every_window(expr, formats, schedule, shapes, ref) -> None:
    """Regression: a split loop over an appended result level used to keep only the last
    window's count in that level's pos (silently dropping the other windows' entries)."""
    arrays = {n: _dense(s, 0.3, len(n) + 31) for n, s in shapes.items()}
    ops = {n: coiter.Tensor.from_numpy(a, format=formats[n]) if n in formats else a for n, a in arrays.items()}
    k = coiter.compile(expr, formats=formats, schedule=schedule)
    np.testing.assert_allclose(k(**ops).to_numpy(), np.einsum(ref, *arrays.values()), rtol=1e-12, atol=1e-12)


def test_nested_parallel_reduction_inside_outlined_body() -> None:
    """Regression: a parallel loop whose body holds another parallel loop with an array
    reduction clause; the outlined body must receive the names the clause reads (the
    result's dimensions), or the C does not compile."""
    expr, formats = KERNELS["mttkrp"]
    schedule = "parallelize(i,CPUThread,NoRaces),parallelize(k,CPUThread,Temporary)"
    kernel = coiter.compile(expr, formats=formats, schedule=schedule)
    operands, reference = _operands("mttkrp", np.random.default_rng(0))
    for threads in (1, 2):
        np.testing.assert_allclose(kernel(threads=threads, **operands).to_numpy(), reference(), rtol=1e-10)


# pos over an intersection, and split pieces of a co-iterated loop: the operands that pos
# does not walk are found by binary search in their segments (TACO's scheduling tests)
SEARCHED = [
    ("y(i) = a(i) * b(i)", {"a": "s", "b": "s"},
     "split(i,iX,iY,2),split(iX,iX0,iX1,2),split(iY,iY0,iY1,2)", lambda a, b, c: a * b),
    ("y(i) = a(i) + b(i)", {"a": "s", "b": "s"}, "split(i,i0,i1,4)", lambda a, b, c: a + b),
    ("x = a(i) * b(i) * c(i)", {"a": "s", "b": "s", "c": "s"}, "pos(i,ip,a(i))",
     lambda a, b, c: (a * b * c).sum()),
    ("x = a(i) * b(i)", {"a": "s", "b": "s"},
     "pos(i,ip,a(i)),split(ip,i0,i1,4),parallelize(i0,CPUThread,Atomics)", lambda a, b, c: a @ b),
    ("y(i) = a(i) * b(i) + c(i)", {"a": "s", "b": "s"}, "pos(i,ip,a(i))", None),  # a union
]


@pytest.mark.parametrize("expr,formats,schedule,ref", SEARCHED)
@pytest.mark.parametrize("threads", [1, 2])
def test_loops_over_positions_or_pieces_search_the_other_operands(expr, formats, schedule, ref,
                                                                  threads) -> None:
    a, b, c = (_dense((200,), d, seed) for d, seed in ((0.3, 1), (0.5, 2), (0.4, 3)))
    ops = {n: coiter.Tensor.from_numpy(v, formats.get(n, "d")) for n, v in zip("abc", (a, b, c))
           if n in expr}
    if ref is None:
        with pytest.raises(ScheduleError, match="does not vanish where a\\(i\\) is absent"):
            coiter.compile(expr, formats, schedule=schedule)(**ops)
        return
    got = coiter.compile(expr, formats, schedule=schedule)(**ops, threads=threads)
    np.testing.assert_allclose(got.to_numpy(), ref(a, b, c), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fb", ["csr", "dcsr", "dense"])
@pytest.mark.parametrize("schedule", ["pos(j,jp,A(i,j))",
                                      "fuse(i,j,f),pos(f,fp,A(i,j)),split(fp,f0,f1,8),"
                                      "parallelize(f0,CPUThread,Atomics)"])
def test_pos_over_a_matrix_intersection(fb: str, schedule: str) -> None:
    a, b = _dense((30, 40), 0.3, 4), _dense((30, 40), 0.4, 5)
    k = coiter.compile("y(i) = A(i,j) * B(i,j)", {"A": "csr", "B": fb}, schedule=schedule)
    got = k(A=coiter.Tensor.from_numpy(a, "csr"), B=coiter.Tensor.from_numpy(b, fb), threads=2)
    np.testing.assert_allclose(got.to_numpy(), (a * b).sum(axis=1), rtol=1e-12, atol=1e-12)
    # an operand whose level repeats coordinates cannot be searched: refused, not wrong
    coo = coiter.compile("y(i) = A(i,j) * B(i,j)", {"A": "csr", "B": "coo"}, schedule="fuse(i,j,f),pos(f,fp,A(i,j))")
    with pytest.raises(ScheduleError, match="cannot be reached by coordinate"):
        coo(A=coiter.Tensor.from_numpy(a, "csr"), B=coiter.Tensor.from_numpy(b, "coo"))


@pytest.mark.parametrize("fmt", ["ddd", "dss", "sss"])
@pytest.mark.parametrize("threads", [1, 2])
def test_fuse_of_a_fused_variable(fmt: str, threads: int) -> None:
    b, c = _tensor3((5, 6, 7), 0.3, 8), np.random.default_rng(9).random(7)
    B = coiter.Tensor.from_numpy(b, fmt)
    for schedule in ("fuse(i,j,f),fuse(f,k,g)",
                     "fuse(i,j,f),fuse(f,k,g),split(g,g0,g1,8),parallelize(g0,CPUThread,Atomics)"):
        k = coiter.compile("A(i,j) = B(i,j,k) * c(k)", {"B": fmt}, schedule=schedule)
        np.testing.assert_allclose(k(B=B, c=c, threads=threads).to_numpy(),
                                   np.einsum("ijk,k->ij", b, c), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_tiled_dot_product_precomputes_both_factors(threads: int) -> None:
    """TACO's tile_dotProduct: bound, split, and a dense workspace per factor of the tile."""
    a, b = _dense((320,), 0.3, 10), _dense((320,), 0.4, 11)
    schedule = ("bound(i,ib,320,MaxExact),split(ib,i0,i1,32),precompute(a(i),i1,i1,wa),"
                "precompute(b(i),i1,i1,wb)")
    k = coiter.compile("x = a(i) * b(i)", {"a": "s", "b": "s"}, schedule=schedule)
    assert "where(where(forall(i1, t0() += wa(i1) * wb(i1))" in str(k.concrete)
    got = k(a=coiter.Tensor.from_numpy(a, "s"), b=coiter.Tensor.from_numpy(b, "s"), threads=threads)
    np.testing.assert_allclose(got.to_numpy(), a @ b, rtol=1e-12)


GALLOPS = [  # expression, formats, reference from the operands a, b, c (arrays)
    ("x = a(i) * b(i)", {"a": "s", "b": "s"}, lambda a, b, c: a @ b),
    ("y(i) = a(i) * b(i)", {"a": "s", "b": "s", "y": "s"}, lambda a, b, c: a * b),
    ("x = a(i) * b(i) * c(i)", {"a": "s", "b": "s", "c": "s"}, lambda a, b, c: (a * b * c).sum()),
    ("y(i) = a(i) * b(i) + c(i)", {"a": "s", "b": "s", "c": "s"}, lambda a, b, c: a * b + c),  # a union
]


@pytest.mark.parametrize("expr,formats,ref", GALLOPS)
@pytest.mark.parametrize("density", [0.002, 0.3])
def test_mergeby_gallop(expr, formats, ref, density) -> None:
    a, b, c = _dense((3000,), density, 12), _dense((3000,), 0.5, 13), _dense((3000,), 0.2, 14)
    ops = {n: coiter.Tensor.from_numpy(x, "s") for n, x in zip("abc", (a, b, c)) if f"{n}(i)" in expr}
    k = coiter.compile(expr, formats, schedule="mergeby(i,Gallop)")
    assert "Gallop" in str(k.concrete)
    np.testing.assert_allclose(k(**ops).to_numpy(), ref(a, b, c), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_mergeby_gallop_in_rows_of_a_matrix(threads: int) -> None:
    a, b = _dense((60, 500), 0.01, 15), _dense((60, 500), 0.6, 16)
    k = coiter.compile("y(i) = A(i,j) * B(i,j)", {"A": "csr", "B": "csr"},
                       schedule="mergeby(j,Gallop),parallelize(i,CPUThread,NoRaces)")
    got = k(A=coiter.Tensor.from_numpy(a, "csr"), B=coiter.Tensor.from_numpy(b, "csr"), threads=threads)
    np.testing.assert_allclose(got.to_numpy(), (a * b).sum(axis=1), rtol=1e-12, atol=1e-12)
    prog = coiter.compile("y(i) = A(i,j) * B(i,j)", {"A": "csr", "B": "csr"}).concrete
    assert str(prog.mergeby("j", "Gallop").commands[-1]) == "mergeby(j,Gallop)"
    assert parse_commands("mergeby(j,Gallop)") == prog.mergeby("j", "Gallop").commands
    with pytest.raises(ScheduleError, match="merge strategy must be one of TwoFinger, Gallop"):
        prog.mergeby("j", "Leapfrog")


@pytest.mark.parametrize("order", ["iX1,iX2,iY1,iY2", "iX1,iY1,iX2,iY2", "iX2,iX1,iY1,iY2",
                                   "iX2,iY1,iX1,iY2", "iY1,iX1,iX2,iY2", "iY1,iX2,iX1,iY2"])
def test_taco_multilevel_tiling_every_order(order) -> None:
    """TACO's scheduling/multilevel_tiling: sparse a and b, the pieces of three splits in
    every order that keeps iY2 innermost, into a dense result at 1 and 2 threads; a sparse
    result is appended from loops over its own coordinates only, which the message says."""
    a, b = _dense((40,), 0.5, 4), _dense((40,), 0.5, 5)
    ops = {"a": coiter.Tensor.from_numpy(a, "s"), "b": coiter.Tensor.from_numpy(b, "s")}
    schedule = f"split(i,iX,iY,2),split(iX,iX1,iX2,2),split(iY,iY1,iY2,2),reorder({order})"
    kernel = coiter.compile("c(i) = a(i) * b(i)", {"a": "s", "b": "s"}, schedule=schedule)
    for threads in (1, 2):
        np.testing.assert_array_equal(kernel(**ops, threads=threads).to_numpy(), a * b)
    sparse = coiter.compile("c(i) = a(i) * b(i)", {"a": "s", "b": "s", "c": "s"}, schedule=schedule)
    with pytest.raises(ScheduleError, match="level 1 \\(compressed\\) of the result is indexed by i, "
                                            "which a derived loop binds"):
        sparse(**ops)


POS_OF_A_PIECE = [
    # TACO's scheduling/pos_tile_coord_and_pos
    ("c(i) = a(i) * b(i)", {"a": "s"}, "split(i,iO,iI,4),pos(iI,ip,a(i)),split(ip,ipO,ipI,2)",
     lambda a, b, m, x: a * b),
    ("c(i) = a(i) * b(i)", {"a": "s"},
     "split(i,iO,iI,7),pos(iI,ip,a(i)),split(ip,ipO,ipI,2),parallelize(iO,CPUThread,NoRaces)",
     lambda a, b, m, x: a * b),
    ("c(i) = a(i) * b(i)", {"a": "s", "b": "s"}, "divide(i,iO,iI,3),pos(iI,ip,a(i))",
     lambda a, b, m, x: a * b),  # b searched at a's coordinates
    ("s = a(i) * b(i)", {"a": "s"},
     "split(i,iO,iI,8),pos(iI,ip,a(i)),parallelize(iO,CPUThread,ParallelReduction)",
     lambda a, b, m, x: a @ b),
    ("y(i) = M(i,j) * x(j)", {"M": "csr"},
     "split(j,j0,j1,8),pos(j1,jp,M(i,j)),parallelize(i,CPUThread,NoRaces)",
     lambda a, b, m, x: m @ x),
]


@pytest.mark.parametrize("expr,formats,schedule,ref", POS_OF_A_PIECE)
@pytest.mark.parametrize("threads", [1, 2])
def test_pos_of_the_inner_piece_of_a_split(expr, formats, schedule, ref, threads) -> None:
    """pos of a split piece walks, per outer piece, the positions whose coordinates fall in
    it (found by binary search), against NumPy."""
    a, b = _dense((90,), 0.3, 6), _dense((90,), 0.6, 7)
    m, x = _dense((30, 90), 0.2, 8), _dense((90,), 1.0, 9)
    values = {"a": a, "b": b, "M": m, "x": x}
    ops = {n: coiter.Tensor.from_numpy(v, formats.get(n, "d" * v.ndim)) for n, v in values.items()
           if re.search(rf"\b{n}\(", expr)}
    got = coiter.compile(expr, formats, schedule=schedule)(**ops, threads=threads)
    np.testing.assert_allclose(got.to_numpy(), ref(a, b, m, x), rtol=1e-12, atol=1e-12)


def test_pos_of_a_piece_is_refused_where_it_has_no_positions() -> None:
    with pytest.raises(ScheduleError, match="must be an original or fused index variable, or the "
                                            "inner piece of a split"):
        coiter.compile("c(i) = a(i) * b(i)", {"a": "s"}, schedule="split(i,iO,iI,4),pos(iO,ip,a(i))")
    with pytest.raises(ScheduleError, match="level 1 of A \\(dense\\) has no positions"):
        coiter.compile("y(i) = A(i,j) * x(j)", {"A": "csr"}, schedule="split(i,i0,i1,4),pos(i1,ip,A(i,j))")
