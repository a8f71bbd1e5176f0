"""Differential tests of the classic kernels against numpy.einsum, over format combinations."""
from __future__ import annotations

import itertools
import re

import numpy as np
import scipy.sparse as sp
import pytest

import coiter
from coiter.codegen import c as codegen_c
from helpers import check, generated_functions, random_array, tensor

MATRIX_FORMATS = ["dd", "ds", "ds:1,0", "ss", "ss:1,0", "uq", "uq:1,0", "dd:1,0"]
VECTOR_FORMATS = ["d", "s"]
TENSOR3_FORMATS = ["ddd", "sss", "dss", "ucq", "sss:2,0,1", "dsd"]
SHAPES = [(7, 5), (1, 9), (6, 1), (0, 4), (4, 0)]


def rng_for(*key: object) -> np.random.Generator:
    return np.random.default_rng(abs(hash(key)) % 2**32)


@pytest.mark.parametrize("fa", MATRIX_FORMATS)
@pytest.mark.parametrize("fx", VECTOR_FORMATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_spmv(fa: str, fx: str, shape: tuple[int, int]) -> None:
    rng = rng_for("spmv", fa, fx, shape)
    A, x = random_array(rng, shape, 0.3), random_array(rng, shape[1:], 0.5)
    y = coiter.evaluate("y(i) = A(i,j) * x(j)", A=tensor(A, fa), x=tensor(x, fx))
    check(y, A @ x)


@pytest.mark.parametrize("fa", MATRIX_FORMATS)
@pytest.mark.parametrize("fy", ["d", "s"])
def test_spmv_plus_vector(fa: str, fy: str) -> None:
    rng = rng_for("spmv+", fa, fy)
    A, x, z = random_array(rng, (8, 6), 0.3), rng.standard_normal(6), random_array(rng, (8,), 0.4)
    y = coiter.evaluate("y(i) = A(i,j) * x(j) + z(i)", A=tensor(A, fa), x=x, z=tensor(z, fy))
    check(y, A @ x + z)


@pytest.mark.parametrize("fb,fc", list(itertools.product(MATRIX_FORMATS, ["dd", "ds", "ss:1,0"])))
def test_spmm(fb: str, fc: str) -> None:
    rng = rng_for("spmm", fb, fc)
    B, C = random_array(rng, (6, 5), 0.3), random_array(rng, (5, 4), 0.6)
    A = coiter.evaluate("A(i,j) = B(i,k) * C(k,j)", out_format="dd", B=tensor(B, fb), C=tensor(C, fc))
    check(A, B @ C)


@pytest.mark.parametrize("fb,fc,fa", [
    ("ds", "ds", "ds"), ("ds", "ds", "dd"), ("ss", "ss", "ss"), ("ds:1,0", "ds:1,0", "ds:1,0"),
    ("ds", "ds:1,0", "ds"), ("uq", "ds", "ds"), ("ds", "ds", "uq"), ("dd", "ds", "ds"),
])
@pytest.mark.parametrize("shape", [(9, 7, 8), (1, 3, 1), (0, 3, 2), (5, 0, 4)])
def test_spgemm(fb: str, fc: str, fa: str, shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    rng = rng_for("spgemm", fb, fc, fa, shape)
    B, C = random_array(rng, (m, k), 0.3), random_array(rng, (k, n), 0.3)
    A = coiter.evaluate("A(i,j) = B(i,k) * C(k,j)", out_format=fa, B=tensor(B, fb), C=tensor(C, fc))
    check(A, B @ C)
    assert A.format == coiter.parse_format(fa)


@pytest.mark.parametrize("fb,fc,fa", list(itertools.product(
    ["ds", "ss", "uq", "dd", "ds:1,0"], ["ds", "ss", "uq", "ds:1,0"], ["ds", "dd", "ss"])))
def test_spadd(fb: str, fc: str, fa: str) -> None:
    rng = rng_for("spadd", fb, fc, fa)
    B, C = random_array(rng, (7, 6), 0.3), random_array(rng, (7, 6), 0.3)
    A = coiter.evaluate("A(i,j) = B(i,j) + C(i,j)", out_format=fa, B=tensor(B, fb), C=tensor(C, fc))
    check(A, B + C)


@pytest.mark.parametrize("fmt", ["ds", "ss", "uq", "dd"])
def test_spadd3_and_elementwise(fmt: str) -> None:
    rng = rng_for("add3", fmt)
    B, C, D = (random_array(rng, (6, 7), 0.3) for _ in range(3))
    ops = dict(B=tensor(B, fmt), C=tensor(C, fmt), D=tensor(D, fmt))
    check(coiter.evaluate("A(i,j) = B(i,j) + C(i,j) + D(i,j)", out_format=fmt, **ops), B + C + D)
    check(coiter.evaluate("A(i,j) = B(i,j) * C(i,j)", out_format=fmt, B=ops["B"], C=ops["C"]), B * C)
    check(coiter.evaluate("A(i,j) = B(i,j) + C(i,j) - 2.5 * D(i,j)", out_format="dd", **ops),
          B + C - 2.5 * D)
    check(coiter.evaluate("A(i,j) = -(B(i,j) + C(i,j)) * D(i,j) / 4", out_format=fmt, **ops),
          -(B + C) * D / 4)


@pytest.mark.parametrize("fb,fx", list(itertools.product(["s", "d"], ["s", "d"])))
def test_vector_kernels(fb: str, fx: str) -> None:
    rng = rng_for("vec", fb, fx)
    b, c = random_array(rng, (20,), 0.3), random_array(rng, (20,), 0.3)
    check(coiter.evaluate("a(i) = b(i) + c(i)", b=tensor(b, fb), c=tensor(c, fx)), b + c)
    check(coiter.evaluate("a(i) = b(i) * c(i)", out_format="s", b=tensor(b, fb), c=tensor(c, fx)), b * c)
    check(coiter.evaluate("a = b(i) * c(i)", b=tensor(b, fb), c=tensor(c, fx)), np.array(b @ c))


@pytest.mark.parametrize("fb", ["dd", "ds", "ss", "uq"])
def test_sddmm(fb: str) -> None:
    rng = rng_for("sddmm", fb)
    B, C, D = random_array(rng, (6, 7), 0.3), rng.standard_normal((6, 4)), rng.standard_normal((4, 7))
    A = coiter.evaluate("A(i,j) = B(i,j) * C(i,k) * D(k,j)", out_format=fb, B=tensor(B, fb), C=C, D=D)
    check(A, B * (C @ D))


@pytest.mark.parametrize("fb", TENSOR3_FORMATS)
def test_tensor_kernels(fb: str) -> None:
    rng = rng_for("t3", fb)
    B = random_array(rng, (4, 5, 6), 0.2)
    c, C, D = rng.standard_normal(6), rng.standard_normal((6, 3)), rng.standard_normal((5, 3))
    Bt = tensor(B, fb)
    check(coiter.evaluate("A(i,j) = B(i,j,k) * c(k)", B=Bt, c=c), np.einsum("ijk,k->ij", B, c))
    check(coiter.evaluate("A(i,j,l) = B(i,j,k) * C(k,l)", B=Bt, C=C), np.einsum("ijk,kl->ijl", B, C))
    check(coiter.evaluate("A(i,l) = B(i,j,k) * C(k,l) * D(j,l)", B=Bt, C=C, D=D),
          np.einsum("ijk,kl,jl->il", B, C, D))


@pytest.mark.parametrize("src", MATRIX_FORMATS)
@pytest.mark.parametrize("dst", MATRIX_FORMATS)
def test_asformat(src: str, dst: str) -> None:
    rng = rng_for("conv", src, dst)
    A = random_array(rng, (6, 5), 0.3)
    t = tensor(A, src).asformat(dst)
    assert t.format == coiter.parse_format(dst)
    check(t, A)


def test_transpose_operand_automatically() -> None:
    rng = rng_for("auto-T")
    B, C = random_array(rng, (6, 6), 0.4), random_array(rng, (6, 6), 0.4)
    out = coiter.evaluate("A(i,j) = B(i,j) + C(j,i)", out_format="ds", B=tensor(B, "ds"), C=tensor(C, "ds"))
    check(out, B + C.T)
    out = coiter.evaluate("A(i,j) = B(i,j) * B(j,i)", out_format="ds", B=tensor(B, "ds"))
    check(out, B * B.T)


def test_generated_spmv_code_shape() -> None:
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr})
    src = k.source
    # the row loop runs in a chunk function, on chunks of rows or all of them (codegen/outline.py)
    assert "for (int64_t i = coiter_lo; i < coiter_hi; i++)" in src
    assert "for (int64_t pA2 = A2_pos[i]; pA2 < A2_pos[i + 1]; pA2++)" in src
    # the row sum is kept scalar: GCC's in-order vector sum was slower on short rows
    assert re.search(r"COITER_SCALAR_SUM\n *for \(int64_t pA2 = A2_pos\[i\]", src)
    # long or uneven rows of six or more (one test per matrix, the loops versioned on it) are
    # summed in eight lanes, in the one loop that parallel and serial calls share; the
    # four partial sums, which only other sums take, are not there
    assert "bool A2_vector_runs = A2_pos[A1_dimension] - A2_pos[0] >= 16 * A1_dimension || " in src
    assert "if (A2_vector_runs) {" in src
    assert src.count("t0 += coiter_run_vdot_i32(A_vals, A2_crd, x_vals, A2_pos[i], A2_pos[i + 1]);") == 1
    assert "while" not in generated_functions(src)


def test_source_holds_only_the_helpers_the_kernel_uses() -> None:
    spmv = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr}).source
    assert "coiter_chunk_rows" in spmv
    for unused in ("coiter_qsort_index", "coiter_hash_locate", "coiter_sort_pairs", "coiter_grow", "COITER_SUM"):
        assert unused not in spmv
    # SpGEMM sorts its rows: the sort and what it calls come along
    spgemm = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr", "B": "csr", "C": "csr"}).source
    for used in ("coiter_sort_index(", "static void coiter_qsort_index", "coiter_row_flag_bytes(int64_t",
                 "coiter_malloc(size_t", "coiter_advise("):
        assert used in spgemm


def test_concrete_notation_reads_as_notation_at_the_repl() -> None:
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr})
    assert repr(k.concrete) == f"<ConcreteProgram {k.concrete}>"
    assert repr(k.concrete).startswith("<ConcreteProgram forall(i, ") and len(repr(k.concrete)) < 120


def test_dense_inner_loops_stay_vectorizable() -> None:
    src = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": coiter.csr}).source
    assert re.search(r"COITER_SCALAR_SUM\n *for \(int64_t k", src) is None
    assert "for (int64_t k = 0;" in src


def test_only_sums_into_outer_scalars_stay_scalar() -> None:
    """COITER_SCALAR_SUM keeps a loop's sum into a scalar declared outside it in order; a
    loop whose iterations each start their own scalar (a chunk function's rows, starting at
    coiter_lo) may still be vectorised across iterations."""
    from coiter.codegen.c import _scalar_sum
    from coiter.ir.nodes import Assign, Block, Decl, For, Load, Var

    add = Assign(Var("t"), Load("v", Var("p")), "+=")
    inner = For("p", "int64_t", Load("pos", Var("i")), Var("n"), Block((add,)))
    assert _scalar_sum(inner)
    rows = For("i", "int64_t", Var("coiter_lo"), Var("coiter_hi"),
               Block((Decl("double", "t", Load("v", Var("i"))), add)))
    assert not _scalar_sum(rows)


def test_generated_union_code_shape() -> None:
    k = coiter.compile("a(i) = b(i) + c(i)", formats={"b": "s", "c": "s"})
    body = k.source.split("coiter_fused")[1]
    assert body.count("while (") == 1
    # one test per iterator, each case advancing the iterators it knows are at i
    assert "if (ib == i) {\n      if (ic == i) {" in body
    assert "pb1 += " not in body and "pc1 += " not in body
    assert body.count("for (; ") == 2


@pytest.mark.parametrize("expr,reference", [
    ("a(i) = b(i) + c(i) + d(i)", lambda b, c, d, e: b + c + d),
    ("a(i) = b(i) * c(i) + d(i)", lambda b, c, d, e: b * c + d),  # b and d may meet without c
    ("a(i) = b(i) * c(i) * d(i)", lambda b, c, d, e: b * c * d),  # some advance without a case
    ("a(i) = (b(i) + c(i)) * d(i)", lambda b, c, d, e: (b + c) * d),
    # four iterators: a chain of case tests instead of a decision tree
    ("a(i) = b(i) + c(i) + d(i) + e(i)", lambda b, c, d, e: b + c + d + e),
    ("a(i) = b(i) * c(i) + d(i) * e(i)", lambda b, c, d, e: b * c + d * e),
])
def test_merges_advance_inside_their_cases(expr: str, reference) -> None:
    # every subset of the operands is stored at some coordinate
    rng = rng_for("advance", expr)
    vectors = {n: random_array(rng, (600,), 0.5) for n in "bcde"}
    formats = {n: "s" for n in "abcde" if f"{n}(i)" in expr}
    body = coiter.compile(expr, formats=formats).source.split("coiter_fused")[1]
    if "*" not in expr:  # a pure union: each case knows which iterators it moves
        assert "== i))" not in body
    ops = {n: tensor(x, "s") for n, x in vectors.items() if f"{n}(i)" in expr}
    check(coiter.evaluate(expr, out_format="s", **ops), reference(*vectors.values()))


def test_spgemm_rows_take_every_workspace_sort() -> None:
    """Result rows sized and spread so that ordering the dense workspace's coordinate list
    takes each method: quicksort (few, or spread thin), LSD radix sort with 2 and 3 byte
    passes, a scan of the flags over the row's range, and a scan forced because the list
    fills more than half the workspace. Each row's coordinates arrive unsorted (three
    sorted pieces, from three rows of C) and must leave sorted."""
    rng = np.random.default_rng(11)
    n = 200_000
    rows = [rng.choice(n, 20, replace=False),                       # short: quicksort
            rng.choice(n, 40, replace=False),                       # spread thin: quicksort
            rng.choice(60_000, 300, replace=False),                 # radix, 2 passes
            rng.choice(n, 300, replace=False),                      # radix, 3 passes
            1000 + rng.choice(600, 300, replace=False),             # scan of the range
            rng.choice(100_000, 5000, replace=False)]               # scan of a wide range
    b_rows, b_cols, c_rows, c_cols = [], [], [], []
    for r, cols in enumerate(rows):
        for part, piece in enumerate(np.array_split(rng.permutation(cols), 3)):
            b_rows.append(r)
            b_cols.append(3 * r + part)
            c_rows += [3 * r + part] * len(piece)
            c_cols += list(piece)
    B = sp.csr_array((rng.random(len(b_rows)) + 0.5, (b_rows, b_cols)), shape=(len(rows), 3 * len(rows)))
    C = sp.csr_array((rng.random(len(c_rows)) + 0.5, (c_rows, c_cols)), shape=(3 * len(rows), n))
    A = coiter.evaluate("A(i,j) = B(i,k) * C(k,j)", out_format="ds",
                        B=coiter.Tensor.from_scipy(B), C=coiter.Tensor.from_scipy(C))
    check(A, (B @ C).toarray())
    pos, crd = A.storage.levels[1]["pos"], A.storage.levels[1]["crd"]
    for r, cols in enumerate(rows):
        np.testing.assert_array_equal(crd[pos[r]:pos[r + 1]], np.sort(cols))
    # a list filling more than half of a small workspace
    B2 = sp.csr_array(np.ones((1, 3)))
    C2 = np.zeros((3, 60))
    for part, piece in enumerate(np.array_split(rng.permutation(60)[:45], 3)):
        C2[part, piece] = rng.random(len(piece)) + 0.5
    A2 = coiter.evaluate("A(i,j) = B(i,k) * C(k,j)", out_format="ds",
                         B=coiter.Tensor.from_scipy(B2), C=coiter.Tensor.from_numpy(C2, format="ds"))
    check(A2, B2.toarray() @ C2)
    crd2 = A2.storage.levels[1]["crd"]
    assert np.all(np.diff(crd2) > 0)
    # every coordinate of the workspace set: the list fills up to its last entry
    C3 = rng.random((3, 60)) + 0.5
    A3 = coiter.evaluate("A(i,j) = B(i,k) * C(k,j)", out_format="ds",
                         B=coiter.Tensor.from_scipy(B2), C=coiter.Tensor.from_numpy(C3, format="ds"))
    check(A3, B2.toarray() @ C3)
    np.testing.assert_array_equal(A3.storage.levels[1]["crd"], np.arange(60))


@pytest.mark.parametrize("workspace", ["dense", "coord", "bucket", "hash"])
def test_kernels_reach_the_heap_only_through_the_preludes_wrappers(workspace) -> None:
    """The runtime gives kernel libraries the result pool's allocator, whose blocks libc's
    free cannot take: a bare free() of a workspace buffer aborted the process (regression).
    Only the wrappers' own definitions (coiter_advise ... coiter_free) call libc."""
    src = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"},
                         workspace=workspace).source
    head, sep, rest = src.partition("static inline void coiter_free(void* p) {")
    assert sep, "the kernel allocates: its source must define coiter_free"
    wrappers_end = rest.index("}") + 1
    outside = head[:head.index("static inline void* coiter_advise(")] + rest[wrappers_end:]
    assert codegen_c._BARE_HEAP.findall(outside) == []
    # the templates the kernels are printed from, whether or not this kernel uses them
    from coiter.formats.workspaces import base
    texts = [base.core_source("double"), base.prelude()]
    texts += [text for names, text in codegen_c.HELPERS if "coiter_free" not in names]
    for text in texts:
        assert codegen_c._BARE_HEAP.findall(text) == []
