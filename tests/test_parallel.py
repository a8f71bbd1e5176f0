"""The default schedule: the outermost loop runs on OpenMP threads when that is race-free.

Results are checked against SciPy/NumPy on inputs large enough that several chunks of
rows run on different threads; the generated C is checked for the pragma where rows are
written disjointly and for its absence where iterations would race.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import coiter

PRAGMA = "#pragma omp for"


def kernel_source(expr: str, formats: dict) -> str:
    return coiter.compile(expr, formats=formats).source.split("int coiter_fused")[1]


@pytest.mark.parametrize("expr,formats", [
    ("y(i) = A(i,j) * x(j)", {"A": "csr"}),
    ("y(i) = A(i,j) * x(j)", {"A": "dcsr"}),
    ("y(i) = A(i,j) * x(j)", {"A": coiter.bcsr((2, 2))}),
    ("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", {"B": coiter.csf(3)}),
    ("C(i,k) = A(i,j) * B(j,k)", {"A": "csr"}),
])
def test_race_free_outer_loops_are_parallel(expr: str, formats: dict) -> None:
    assert PRAGMA in kernel_source(expr, formats)


@pytest.mark.parametrize("expr,formats", [
    ("y(i) = A(i,j) * x(j)", {"A": "dia"}),  # diagonals scatter into every row
    ("y(j) = A(i,j) * x(i)", {"A": "csr"}),  # rows of A scatter into y
    ("C(i,j) = A(i,j) * B(i,j)", {"A": "coo", "C": "dd"}),  # fused entries may share a row
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr", "C": "csr"}),  # appended result
    ("a = A(i,j) * B(i,j)", {"A": "csr", "B": "csr"}),  # one scalar
])
def test_racy_loops_stay_serial(expr: str, formats: dict) -> None:
    assert PRAGMA not in kernel_source(expr, formats)


def test_parallel_results_match_scipy() -> None:
    rng = np.random.default_rng(0)
    a = sp.random(20000, 3000, density=0.002, random_state=1, format="csr")
    x = rng.standard_normal(3000)
    np.testing.assert_allclose(coiter.evaluate("y(i) = A(i,j) * x(j)", A=a, x=x).to_numpy(), a @ x,
                               rtol=1e-12, atol=1e-12)
    b = rng.standard_normal((3000, 8))
    np.testing.assert_allclose(coiter.evaluate("C(i,k) = A(i,j) * B(j,k)", A=a, B=b).to_numpy(),
                               a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("threads", [None, 1, 2, 3])
def test_few_long_rows_match_scipy(threads: int | None) -> None:
    """A few rows heavy enough to take chunks of one row each (coiter_chunk_rows), on any
    number of threads (None: the default count)."""
    rng = np.random.default_rng(2)
    a = sp.random(25, 12000, density=0.4, random_state=2, format="csr")
    x = rng.standard_normal(12000)
    b = rng.standard_normal((12000, 4))
    chosen = {} if threads is None else {"threads": threads}
    spmv = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr})
    spmm = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": coiter.csr})
    np.testing.assert_allclose(spmv(A=a, x=x, **chosen).to_numpy(), a @ x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(spmm(A=a, B=b, **chosen).to_numpy(), a @ b, rtol=1e-12, atol=1e-12)


def test_parallel_loops_run_by_chunks_of_one_out_of_line_function() -> None:
    """GCC's outlining of an OpenMP loop drops restrict (SpMM in a region ran 4.6x slower),
    and a loop inlined into both the region and its serial copy compiles twice: the loop's
    iterations go into one out-of-line function with restrict pointers, which the region
    calls on chunks of rows and the serial copy on all of them; results unchanged."""
    a = sp.random(3000, 2000, density=0.01, random_state=3, format="csr")
    b = np.random.default_rng(3).standard_normal((2000, 16))
    k = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"})
    for threads in (1, 2):
        np.testing.assert_allclose(k(A=a, B=b, threads=threads).to_numpy(), a @ b, rtol=1e-12, atol=1e-12)
    source = k.core.variants()[-1].source
    chunk = source.split("static COITER_OUT_OF_LINE void coiter_fused_chunk0(", 1)[1].split("\n}\n", 1)[0]
    params, body = chunk.split(") {", 1)
    assert "int64_t coiter_lo," in params and "double* restrict C_vals" in params
    assert "for (int64_t i = coiter_lo; i < coiter_hi; i++)" in body
    kernel = source.split("int coiter_fused(", 1)[1].split("\n}\n", 1)[0]
    # the region's loop runs over chunks (OpenMP hands out one at a time), the serial copy
    # calls the same function on every row, and the kernel holds no other loop
    assert "#pragma omp for schedule(dynamic, 1) nowait" in kernel
    assert "coiter_fused_chunk0(i_lo, COITER_MIN(i_lo + coiter_chunk, " in kernel
    assert "coiter_fused_chunk0(0, " in kernel
    assert kernel.count("for (") == kernel.count("#pragma omp for")
    assert "coiter_fused_serial" not in source and "coiter_fused_body" not in source


def test_statically_scheduled_loops_move_their_body_into_restrict_helpers() -> None:
    """A static schedule hands each thread its rows at once, not in chunks: its loop keeps
    OpenMP's loop, whose body calls a static inline helper with restrict pointers, and its
    serial copy goes out of line; results unchanged."""
    a = sp.random(3000, 2000, density=0.01, random_state=3, format="csr")
    b = np.random.default_rng(3).standard_normal((2000, 16))
    k = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"},
                       schedule="parallelize(i,CPUThread,NoRaces,static)")
    for threads in (1, 2):
        np.testing.assert_allclose(k(A=a, B=b, threads=threads).to_numpy(), a @ b, rtol=1e-12, atol=1e-12)
    source = k.core.variants()[-1].source
    helper = source.split("static inline void coiter_fused_body0(", 1)[1].split(") {", 1)[0]
    assert "double* restrict C_vals" in helper and "int64_t i," in helper
    assert "coiter_fused_body0(i, " in source and "coiter_fused_chunk" not in source
    assert "static COITER_OUT_OF_LINE void coiter_fused_serial0(" in source


@pytest.mark.parametrize("expr,formats,operands,reference", [
    ("C(i,k) = A(i,j) * B(j,k)", {"A": "csr"}, ("A", "B"), lambda a, b: a @ b),
    ("y(i) = A(i,j) * x(j)", {"A": "csr"}, ("A", "x"), lambda a, x: a @ x),
    ("y(i) = A(j,i) * x(j)", {"A": "csc"}, ("A", "x"), lambda a, x: a.T @ x),
])
def test_serial_copies_of_parallel_loops_run_out_of_line(expr, formats, operands, reference) -> None:
    """Beside a parallel region GCC drops restrict in the whole function (the pointers escape
    into the region's struct): CSR SpMM's 1-thread loop ran 2.4x slower there. The serial
    copy's loops run in functions of their own, never inlined nor cloned (chunk functions,
    or a serial function); results unchanged at 1 and 2 threads."""
    rng = np.random.default_rng(5)
    a = sp.random(3000, 2000, density=0.01, random_state=5, format="csr")
    if formats["A"] == "csc":
        a = sp.random(2000, 3000, density=0.01, random_state=5, format="csc")
    dense = rng.standard_normal((2000, 16)) if operands[1] == "B" else rng.standard_normal(2000)
    k = coiter.compile(expr, formats=formats)
    for threads in (1, 2):
        got = k(threads=threads, **{operands[0]: a, operands[1]: dense}).to_numpy()
        np.testing.assert_allclose(got, reference(a, dense), rtol=1e-12, atol=1e-12)
    source = k.core.variants()[-1].source
    assert "#define COITER_OUT_OF_LINE __attribute__((noinline, noclone))" in source
    outlined = source.split("static COITER_OUT_OF_LINE void coiter_fused_")[1:]
    assert outlined and all("restrict" in f.split(") {", 1)[0] for f in outlined)
    kernel = source.split("int coiter_fused(", 1)[1].split("\n}\n", 1)[0]
    # the kernel's only loops are the parallel ones
    assert kernel.count("for (") == kernel.count("#pragma omp for")


def test_parallel_loops_writing_outer_scalars_keep_their_body() -> None:
    """A loop reducing into a scalar declared outside it (OpenMP reduction clause) is not
    moved: a helper could not write the scalar."""
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(5000), rng.standard_normal(5000)
    k = coiter.compile("a = x(i) * y(i)", schedule="parallelize(i,CPUThread,ParallelReduction)")
    np.testing.assert_allclose(k(x=x, y=y, threads=2).to_numpy(), x @ y, rtol=1e-12)
    assert "reduction(+: t0)" in k.source and "coiter_fused_body" not in k.source


_APPENDED_FIRST_LEVEL = [
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "dcsr", "B": "csr", "C": "dcsr"}, lambda a, b: a @ b),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr", "C": "coo"}, lambda a, b: a @ b),
    ("C(i,j) = A(i,j) + B(i,j)", {"A": "dcsr", "B": "csr", "C": "dcsr"}, lambda a, b: a + b),
    ("C(i,j) = A(i,j) * B(i,j)", {"A": "csr", "B": "csr", "C": "coo"}, lambda a, b: a.multiply(b)),
    ("C(i,j) = A(i,j) + B(i,j)", {"A": "csr", "B": "csr", "C": "sd"}, lambda a, b: a + b),
]


@pytest.mark.parametrize("expr,formats,reference", _APPENDED_FIRST_LEVEL)
@pytest.mark.parametrize("shape", [(1500, 1200), (3, 40)])  # 3 rows: some threads get none
def test_results_with_an_appended_first_level_assemble_in_parallel(expr, formats, reference, shape):
    """DCSR, COO and dense-below-compressed results are assembled by every thread into its
    own buffers and merged in row order: the same arrays as one thread builds."""
    rng = np.random.default_rng(6)
    a = sp.random_array(shape, density=0.02, rng=rng, format="csr")
    b_shape = (shape[1], shape[1]) if "k" in expr else shape  # a product, or elementwise
    b = sp.random_array(b_shape, density=0.02, rng=rng, format="csr")
    k = coiter.compile(expr, formats=formats)
    assert "rows in parallel" in k.source
    serial = k(A=a, B=b, threads=1)
    np.testing.assert_allclose(serial.to_numpy(), np.asarray(reference(a, b).todense()), rtol=1e-12)
    for threads in (2, 3, 5):
        got = k(A=a, B=b, threads=threads).storage
        for mine, theirs in zip(got.levels, serial.storage.levels):
            assert mine.keys() == theirs.keys()
            assert all(np.array_equal(mine[n], theirs[n]) for n in mine)
        np.testing.assert_array_equal(got.vals, serial.storage.vals)


def test_csf_results_assemble_in_parallel() -> None:
    rng = np.random.default_rng(7)
    t = rng.random((60, 50, 40)) * (rng.random((60, 50, 40)) < 0.05)
    c = rng.random(40)
    T = coiter.Tensor.from_numpy(t, format="sss")
    k = coiter.compile("C(i,j,l) = T(i,j,l) * c(l) + T(i,j,l)", formats={"T": "sss", "C": "sss"})
    assert "rows in parallel" in k.source
    serial = k(T=T, c=c, threads=1)
    np.testing.assert_allclose(serial.to_numpy(), t * c + t, rtol=1e-12)
    got = k(T=T, c=c, threads=2).storage
    for mine, theirs in zip(got.levels, serial.storage.levels):
        assert all(np.array_equal(mine[n], theirs[n]) for n in mine)
    np.testing.assert_array_equal(got.vals, serial.storage.vals)


@pytest.mark.parametrize("rhs,op", [("A(i,j)+B(i,j)", np.add), ("A(i,j)*B(i,j)", np.multiply)])
def test_dense_precompute_in_parallel_row_assembly_is_per_thread(rhs: str, op) -> None:
    # regression: the rows' dense temporary w was one array shared by every thread of the
    # row-parallel assembly region, so two threads summed into each other's rows
    a, b = (sp.random_array((3000, 200), density=0.05, format="csr", random_state=s) for s in (1, 2))
    k = coiter.compile(f"C(i,j) = {rhs}", formats={"A": "csr", "B": "csr", "C": "csr"},
                       schedule=f"precompute({rhs},j,j,w)")
    assert "rows in parallel" in k.source
    reference = op(a.toarray(), b.toarray())
    A, B = coiter.Tensor.from_scipy(a), coiter.Tensor.from_scipy(b)
    for threads in (1, 2, 3):
        np.testing.assert_allclose(k(A=A, B=B, threads=threads).to_numpy(), reference, rtol=1e-12)
