"""Dense result rows summed in registers a block of columns at a time
(coiter/lower/dense_rows.py): SpMM, TTM and MTTKRP against NumPy/SciPy for row lengths below,
at, between and past whole blocks, bit for bit against sums in position order, and the loops
the pass must leave alone."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter.ir.nodes import Assign, Bin, Block, Call, Const, Decl, For, IRExpr, Load, Var
from coiter.ir.visit import walk
from coiter.lower.dense_rows import ROW_BLOCK, block_dense_rows
from helpers import cflags, csr_with_lengths, generated_functions, random_array, tensor

# row lengths: under a block, each one block of its own (1, 2, 4, 7: the ones of 16 bytes
# stream, the others do not), one block (16), a block and a one-entry tail (17), a block and
# a tail of 8 (24), two blocks (32), three blocks and a tail (50); past 64 the extent is a
# run-time value (no specialised variant): blocks and a tail loop (70), whole blocks only (96)
RANKS = [1, 2, 4, 7, 16, 17, 24, 32, 50, 70, 96]
SPMM = "C(i,k) = A(i,j) * B(j,k)"


def rows_in_order(a: sp.csr_array, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with each row's products added one by one from zero in position order, as
    the row loop adds them."""
    out = np.zeros((a.shape[0], b.shape[1]), dtype=b.dtype)
    for i in range(a.shape[0]):
        total = np.zeros(b.shape[1], dtype=b.dtype)
        for p in range(a.indptr[i], a.indptr[i + 1]):
            total = total + a.data[p] * b[a.indices[p]]
        out[i] = total
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("threads", [1, 2])
def test_spmm_rows_equal_sums_in_position_order_bit_for_bit(dtype: str, rank: int,
                                                            threads: int) -> None:
    rng = np.random.default_rng(rank)
    a = csr_with_lengths(rng, [0, 1, 3, 9, 40, 2, 0, 17], 60, np.int32)
    a = sp.csr_array((a.data.astype(dtype), a.indices, a.indptr), shape=a.shape)
    b = (rng.standard_normal((60, rank)) * 10.0 ** rng.uniform(-6, 6, (60, rank))).astype(dtype)
    k = coiter.compile(SPMM, formats={"A": coiter.csr})
    got = k(A=coiter.Tensor.from_scipy(a), B=b, threads=threads).to_numpy()
    np.testing.assert_array_equal(got, rows_in_order(a, b))
    np.testing.assert_allclose(got, a @ b, rtol=1e-4 if dtype == "float32" else 1e-9,
                               atol=1e-30)


def test_spmm_and_ttm_sum_their_rows_in_local_blocks() -> None:
    spmm = coiter.compile(SPMM, formats={"A": coiter.csr})
    ttm = coiter.compile("A(i,j,l) = B(i,j,k) * C(k,l)", formats={"B": coiter.csf(3), "A": "ssd"})
    for k in (spmm, ttm):
        code = generated_functions(k.source)
        assert f"_row[{ROW_BLOCK}] = {{0}};" in code
    # integer rows are not blocked: their sums vectorize without it
    ints = coiter.compile(SPMM, formats={"A": coiter.csr}, dtype="int32")
    assert "_row[" not in generated_functions(ints.source)


@pytest.mark.parametrize("rank", RANKS)
def test_ttm_into_a_result_sharing_the_operand_pattern(rank: int) -> None:
    rng = np.random.default_rng(10 + rank)
    b, c = random_array(rng, (6, 5, 9), 0.3), rng.standard_normal((9, rank))
    k = coiter.compile("A(i,j,l) = B(i,j,k) * C(k,l)", formats={"B": coiter.csf(3), "A": "ssd"})
    got = k(B=tensor(b, coiter.csf(3)), C=c).to_numpy()
    np.testing.assert_allclose(got, np.einsum("ijk,kl->ijl", b, c), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("threads", [1, 2])
def test_mttkrp_rows_start_from_what_earlier_fibers_added(rank: int, threads: int) -> None:
    # the row of A(i, :) takes sums from every (j, k) fiber of slice i: each blocked loop
    # starts from the row as earlier fibers left it
    rng = np.random.default_rng(20 + rank)
    b = random_array(rng, (7, 6, 8), 0.4)
    c, d = rng.standard_normal((6, rank)), rng.standard_normal((8, rank))
    k = coiter.compile("A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", formats={"B": coiter.csf(3)})
    got = k(B=tensor(b, coiter.csf(3)), C=c, D=d, threads=threads).to_numpy()
    np.testing.assert_allclose(got, np.einsum("ijk,jl,kl->il", b, c, d), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_streamed_rows_equal_sums_in_position_order_bit_for_bit(dtype: str, threads: int) -> None:
    # COITER_STREAM_MIN_BYTES=0: every result whose rows are whole blocks streams; the
    # others (rank 7, 17, 50, 70) take the plain stores
    rng = np.random.default_rng(5)
    a = csr_with_lengths(rng, [0, 1, 3, 9, 40, 2, 0, 17] * 40, 60, np.int32)
    a = sp.csr_array((a.data.astype(dtype), a.indices, a.indptr), shape=a.shape)
    with cflags("streaming"):
        k = coiter.compile(SPMM, formats={"A": coiter.csr})
        for rank in RANKS:
            b = (rng.standard_normal((60, rank)) * 10.0 ** rng.uniform(-6, 6, (60, rank))).astype(dtype)
            got = k(A=coiter.Tensor.from_scipy(a), B=b, threads=threads).to_numpy()
            np.testing.assert_array_equal(got, rows_in_order(a, b), err_msg=f"rank {rank}")
    source = "".join(v.source for v in k.core.variants())
    assert f"coiter_stream_{'double' if dtype == 'float64' else 'float'}(C_vals" in source


@pytest.mark.parametrize("rank", [16, 17, 48])
@pytest.mark.parametrize("threads", [1, 2])
def test_streamed_ttm_rows(rank: int, threads: int) -> None:
    rng = np.random.default_rng(30 + rank)
    b, c = random_array(rng, (30, 20, 9), 0.2), rng.standard_normal((9, rank))
    with cflags("streaming"):
        k = coiter.compile("A(i,j,l) = B(i,j,k) * C(k,l)", formats={"B": coiter.csf(3), "A": "ssd"})
        got = k(B=tensor(b, coiter.csf(3)), C=c, threads=threads).to_numpy()
    np.testing.assert_allclose(got, np.einsum("ijk,kl->ijl", b, c), rtol=1e-12, atol=1e-12)


def test_streaming_is_decided_once_and_the_loop_compiled_once_per_copy() -> None:
    # the parallel loop and its serial copy share one flag and one chunk function, whose
    # streamed and plain copies of the blocked loop sit under the flag
    k = coiter.compile("A(i,j,l) = B(i,j,k) * C(k,l)", formats={"B": coiter.csf(3), "A": "ssd"})
    code = generated_functions(k.source)
    assert code.count("= coiter_streams(A_vals, ") == 1
    assert code.count("coiter_stream_double(A_vals, ") == 1
    assert code.count("coiter_stream_fence(A_vals_stream);") == 1
    assert "_chunk1" not in code


def test_rows_that_start_from_the_result_do_not_stream() -> None:
    # MTTKRP adds every fiber of a slice into one row: the row is read, so it is not streamed
    k = coiter.compile("A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", formats={"B": coiter.csf(3)})
    assert "coiter_stream" not in generated_functions(k.source)


def _row_sum_loop(value: Load | Bin, n: IRExpr = Var("n")) -> For:
    """``for (p = 0; p < 4; p++) { m = crd[p]; for (l = 0; l < n; l++) A_vals[r*n + l] += value; }``"""
    row = Bin("*", Var("r"), n)
    update = Assign(Load("A_vals", Bin("+", row, Var("l"))), value, "+=")
    return For("p", "int64_t", Const(0), Const(4), Block((
        Decl("int64_t", "m", Load("crd", Var("p"))),
        For("l", "int64_t", Const(0), n, Block((update,))))))


def test_row_sums_that_read_the_result_or_call_are_left_as_they_are() -> None:
    product = Bin("*", Load("B_vals", Var("p")), Load("C_vals", Bin("+", Var("m"), Var("l"))))
    blocked = block_dense_rows(_row_sum_loop(product), {"A_vals": "double"})
    assert any(isinstance(s, Decl) and s.name.startswith("A_vals_row") for s in walk(blocked))
    reads_result = Bin("*", product, Load("A_vals", Var("l")))
    loop = _row_sum_loop(reads_result)
    assert block_dense_rows(loop, {"A_vals": "double"}) == loop
    assert block_dense_rows(_row_sum_loop(product), {"A_vals": "int64_t"}) == _row_sum_loop(product)
    # a row length the blocked loops would evaluate again is a call: it may have effects
    called = _row_sum_loop(product, Call("row_length", ()))
    assert block_dense_rows(called, {"A_vals": "double"}) == called



def test_loops_without_row_sums_keep_their_nested_scopes() -> None:
    # regression: the pass flattened every loop body it searched, so SpMV's rows lost the
    # C scope around their partial sums
    scope = Block((Decl("double", "t", Const(0)), Assign(Var("t"), Load("B_vals", Var("i")), "+=")))
    loop = For("i", "int64_t", Const(0), Var("m"), Block((scope, Assign(
        Load("A_vals", Var("i")), Var("t")))))
    assert block_dense_rows(loop, {"A_vals": "double"}) == loop


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("rank, blocks", [(8, ["8"]), (16, ["16"]), (24, ["16", "8"])])
def test_rows_of_a_known_length_are_blocks_whose_positions_stay_in_order(
        dtype: str, rank: int, blocks: list[str]) -> None:
    """A constant row length under a block is one block, and a constant tail one more (the
    loop into the result they replace ran 3 to 10 times slower in float32), and every loop
    over positions that ends in a row is marked COITER_ROW_SUM, so that GCC vectorizes the
    row, not the positions (it did, gathering a column across eight positions: float32
    SpMM with 16 columns 5.3 ms against 0.5); values bit for bit in position order."""
    rng = np.random.default_rng(rank)
    a = csr_with_lengths(rng, [0, 1, 3, 9, 40, 2, 0, 17] * 5, 60, np.int32)
    a = sp.csr_array((a.data.astype(dtype), a.indices, a.indptr), shape=a.shape)
    b = (rng.standard_normal((60, rank)) * 10.0 ** rng.uniform(-6, 6, (60, rank))).astype(dtype)
    k = coiter.compile(SPMM, formats={"A": coiter.csr})
    np.testing.assert_array_equal(k(A=coiter.Tensor.from_scipy(a), B=b).to_numpy(), rows_in_order(a, b))
    (variant,) = k.core.variants()  # the one specialised on the rank
    code = generated_functions(variant.source)
    assert [w for w in blocks if f"_row[{w}] = {{0}};" in code] == blocks
    positions = [line for line in code.splitlines() if "for (int64_t pA2 = A2_pos[i]" in line]
    marks = code.count("COITER_ROW_SUM\n")
    assert positions and marks == len(positions)
