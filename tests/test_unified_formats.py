"""Differential tests for the unified level formats (Chou et al., OOPSLA 2018).

Every kernel runs on operands in the new formats — DIA, ELL, blocked (BCSR, BCOO,
CSB), hashed (vector and matrix), array-of-structs COO — alone and mixed with CSR,
COO and dense operands, and results are compared with NumPy/SciPy on the same data.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter import Compressed, Dense, Format, FormatError, Singleton

from helpers import random_array

MATRIX = {
    "dia": coiter.dia(),
    "ell": coiter.ell(),
    "bcsr22": coiter.bcsr((2, 2)),
    "bcsr32": coiter.bcsr((3, 2)),
    "bcoo": coiter.bcoo((2, 3)),
    "csb": coiter.csb((3, 3)),
    "hash": coiter.hash_matrix(),
    "hash_cols": coiter.hash_matrix((1, 0)),
    "coo_aos": coiter.coo_aos(),
}
PARTNER = {"csr": coiter.csr, "coo": coiter.coo(), "dense": "dd", "same": None}
VECTOR = {"dense": "d", "sparse": coiter.sparse_vector(), "hash": coiter.hash_vector()}
SHAPES = [(7, 9), (12, 5), (1, 1), (0, 4)]
RESULT = {**MATRIX, "csr": coiter.csr, "coo": coiter.coo(), "dense": "dd"}


def mat(shape: tuple[int, int], density: float, seed: int) -> np.ndarray:
    return random_array(np.random.default_rng(seed), shape, density)


def run(expr: str, formats: dict, **operands) -> np.ndarray:
    return coiter.compile(expr, formats=formats)(**operands).to_numpy()


def close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------ storage round trips


@pytest.mark.parametrize("name", list(MATRIX))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_pack_unpack_roundtrip(name: str, shape: tuple[int, int], density: float) -> None:
    a = mat(shape, density, 1)
    t = coiter.Tensor.from_numpy(a, format=MATRIX[name])
    t.storage.validate("t")
    assert t.format == MATRIX[name] and t.shape == shape
    close(t.to_numpy(), a)


@pytest.mark.parametrize("src", list(RESULT))
@pytest.mark.parametrize("dst", list(RESULT))
def test_convert_every_pair(src: str, dst: str) -> None:
    a = mat((8, 7), 0.35, 2)
    t = coiter.Tensor.from_numpy(a, format=RESULT[src]).asformat(RESULT[dst])
    t.storage.validate("t")
    close(t.to_numpy(), a)


@pytest.mark.parametrize("fmt", [coiter.hash_vector(), coiter.sparse_vector()])
@pytest.mark.parametrize("n,density", [(0, 0.5), (1, 1.0), (50, 0.1), (50, 0.9)])
def test_vector_formats_roundtrip(fmt: Format, n: int, density: float) -> None:
    x = random_array(np.random.default_rng(3), (n,), density)
    t = coiter.Tensor.from_numpy(x, format=fmt)
    t.storage.validate("x")
    close(t.to_numpy(), x)


def test_scipy_dia_and_bsr_are_shared_not_copied() -> None:
    a = mat((9, 9), 0.0, 0) + np.diag(np.arange(1.0, 10.0)) + np.diag(np.ones(8), 1)
    d = sp.dia_array(a)
    t = coiter.Tensor.from_scipy(d)
    assert t.format == coiter.dia() and np.shares_memory(t.storage.vals, d.data)
    close(t.to_numpy(), a)
    b = sp.bsr_array(a, blocksize=(3, 3))
    t = coiter.Tensor.from_scipy(b)
    assert t.format == coiter.bcsr((3, 3)) and np.shares_memory(t.storage.vals, b.data)
    close(t.to_numpy(), a)
    back = t.asformat(coiter.dia()).to_scipy()
    assert back.format == "dia"
    close(back.toarray(), a)


# ------------------------------------------------------------------ kernels


@pytest.mark.parametrize("name", list(MATRIX))
@pytest.mark.parametrize("shape", SHAPES)
def test_spmv(name: str, shape: tuple[int, int]) -> None:
    a = mat(shape, 0.4, 4)
    x = np.random.default_rng(5).standard_normal(shape[1])
    A = coiter.Tensor.from_numpy(a, format=MATRIX[name])
    close(run("y(i) = A(i,j) * x(j)", {"A": MATRIX[name]}, A=A, x=x), a @ x)
    z = np.random.default_rng(6).standard_normal(shape[0])
    close(run("y(i) = A(i,j) * x(j) + z(i)", {"A": MATRIX[name]}, A=A, x=x, z=z), a @ x + z)


@pytest.mark.parametrize("name", list(MATRIX))
@pytest.mark.parametrize("vec", list(VECTOR))
def test_spmspv(name: str, vec: str) -> None:
    a = mat((10, 13), 0.3, 7)
    x = random_array(np.random.default_rng(8), (13,), 0.3)
    A = coiter.Tensor.from_numpy(a, format=MATRIX[name])
    X = coiter.Tensor.from_numpy(x, format=VECTOR[vec])
    close(run("y(i) = A(i,j) * x(j)", {"A": MATRIX[name], "x": VECTOR[vec]}, A=A, x=X), a @ x)
    # the transposed product walks the vector first and scatters rows of A
    xt = random_array(np.random.default_rng(9), (10,), 0.3)
    XT = coiter.Tensor.from_numpy(xt, format=VECTOR[vec])
    close(run("y(j) = x(i) * A(i,j)", {"A": MATRIX[name], "x": VECTOR[vec]}, A=A, x=XT), xt @ a)


@pytest.mark.parametrize("name", list(MATRIX))
@pytest.mark.parametrize("other", ["dense", "csr"])
def test_spmm(name: str, other: str) -> None:
    a = mat((9, 8), 0.3, 10)
    b = mat((8, 5), 0.5 if other == "csr" else 1.0, 11)
    A = coiter.Tensor.from_numpy(a, format=MATRIX[name])
    fmt = {"dense": "dd", "csr": coiter.csr}[other]
    B = coiter.Tensor.from_numpy(b, format=fmt)
    for out in ("dd", coiter.csr):
        close(run("C(i,k) = A(i,j) * B(j,k)", {"A": MATRIX[name], "B": fmt, "C": out}, A=A, B=B),
              a @ b)


@pytest.mark.parametrize("name", list(MATRIX))
@pytest.mark.parametrize("partner", list(PARTNER))
@pytest.mark.parametrize("op", ["+", "*", "-"])
def test_elementwise(name: str, partner: str, op: str) -> None:
    a, b = mat((8, 11), 0.3, 12), mat((8, 11), 0.3, 13)
    fa = MATRIX[name]
    fb = PARTNER[partner] or fa
    A = coiter.Tensor.from_numpy(a, format=fa)
    B = coiter.Tensor.from_numpy(b, format=fb)
    want = {"+": a + b, "*": a * b, "-": a - b}[op]
    for out in (coiter.csr, "dd", fa):
        got = run(f"C(i,j) = A(i,j) {op} B(i,j)", {"A": fa, "B": fb, "C": out}, A=A, B=B)
        close(got, want)


@pytest.mark.parametrize("name", list(RESULT))
def test_every_format_holds_results(name: str) -> None:
    a, b = mat((9, 10), 0.3, 14), mat((9, 10), 0.3, 15)
    fmt = RESULT[name]
    got = coiter.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": coiter.csr, "B": coiter.csr,
                                                             "C": fmt})(A=sp.csr_array(a), B=sp.csr_array(b))
    assert got.format == (coiter.parse_format(fmt) if isinstance(fmt, str) else fmt)
    got.storage.validate("C")
    close(got.to_numpy(), a + b)


TENSOR3 = {
    "dsh": "dsh", "ddh": "ddh", "dhd": "dhd", "coo_aos": coiter.coo_aos(3), "coo": coiter.coo(3),
    "csf": coiter.csf(3),
}


@pytest.mark.parametrize("name", list(TENSOR3))
@pytest.mark.parametrize("vec", list(VECTOR))
def test_ttv(name: str, vec: str) -> None:
    b = random_array(np.random.default_rng(16), (4, 5, 6), 0.3)
    c = random_array(np.random.default_rng(17), (6,), 0.6)
    B = coiter.Tensor.from_numpy(b, format=TENSOR3[name])
    C = coiter.Tensor.from_numpy(c, format=VECTOR[vec])
    for out in ("dd", coiter.csr, coiter.hash_matrix()):
        got = run("A(i,j) = B(i,j,k) * c(k)", {"B": TENSOR3[name], "c": VECTOR[vec], "A": out},
                  B=B, c=C)
        close(got, np.einsum("ijk,k->ij", b, c))


@pytest.mark.parametrize("name", list(TENSOR3))
def test_mttkrp(name: str) -> None:
    rng = np.random.default_rng(18)
    b = random_array(rng, (5, 4, 6), 0.25)
    c, d = rng.standard_normal((4, 3)), rng.standard_normal((6, 3))
    B = coiter.Tensor.from_numpy(b, format=TENSOR3[name])
    got = run("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", {"B": TENSOR3[name]}, B=B, C=c, D=d)
    close(got, np.einsum("ikl,kj,lj->ij", b, c, d))


# ------------------------------------------------------------------ the paper's cases


def test_csr_plus_coo_into_dense_fig9b() -> None:
    """Fig. 9b: B CSR + C COO (no empty row) into a dense A; C's rows are co-iterated
    with B's dense rows and the column segments merged."""
    b = mat((6, 8), 0.3, 19)
    c = mat((6, 8), 0.4, 20)
    c[:, 0] = 1.0  # no empty row: C's top level is full
    k = coiter.compile("A(i,j) = B(i,j) + C(i,j)", formats={"B": coiter.csr, "C": coiter.coo(),
                                                            "A": "dd"})
    close(k(B=sp.csr_array(b), C=sp.coo_array(c)).to_numpy(), b + c)
    assert "C1_crd" in k.source  # C is walked as stored, not converted
    assert not any(d.converted_from for d in k.concrete.tensors.values())


def test_dia_plus_csr() -> None:
    n = 40
    a = np.diag(np.arange(1.0, n + 1)) + np.diag(np.ones(n - 3), 3) - np.diag(np.ones(n - 1), -1)
    b = mat((n, n), 0.05, 21)
    got = coiter.evaluate("C(i,j) = A(i,j) + B(i,j)", A=sp.dia_array(a), B=sp.csr_array(b),
                          out_format=coiter.dia())
    assert got.format == coiter.dia()
    close(got.to_numpy(), a + b)


def test_dia_spmv_walks_diagonals() -> None:
    a = np.diag(np.arange(1.0, 7.0)) + np.diag(np.ones(5), 1) + np.diag(2 * np.ones(4), -2)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.dia()})
    x = np.arange(6.0)
    close(k(A=sp.dia_array(a), x=x).to_numpy(), a @ x)
    kernel = k.source.split("int coiter_fused")[1]
    assert "A2_offset" in kernel and "while" not in kernel  # one loop per level: no merging


def test_ell_spmv_skips_padding() -> None:
    a = mat((10, 12), 0.2, 22)
    a[3] = 0.0
    a[4, :] = 1.0  # one full row: every other row is mostly padding
    x = np.random.default_rng(23).standard_normal(12)
    x[np.flatnonzero(a.sum(axis=0) == 0)] = np.inf  # padding must never read x
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.ell()})
    got = k(A=coiter.Tensor.from_numpy(a, format=coiter.ell()), x=x).to_numpy()
    close(got, a @ np.where(np.isinf(x), 0.0, x))


def test_hash_vector_dot_csr() -> None:
    a = mat((30, 20), 0.2, 24)
    x = random_array(np.random.default_rng(25), (30,), 0.2)
    X = coiter.Tensor.from_numpy(x, format=coiter.hash_vector())
    close(coiter.evaluate("y(j) = x(i) * A(i,j)", x=X, A=sp.csr_array(a)).to_numpy(), x @ a)
    # a hashed vector is located, not walked, when a CSR row drives the loop
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": coiter.csr, "x": coiter.hash_vector()})
    assert "coiter_hash_locate" in k.source
    xx = random_array(np.random.default_rng(26), (20,), 0.3)
    close(k(A=sp.csr_array(a), x=coiter.Tensor.from_numpy(xx, format=coiter.hash_vector())).to_numpy(),
          a @ xx)


def test_bcsr_spmm_recovers_coordinates() -> None:
    a = mat((10, 7), 0.3, 27)  # 10 x 7 is not a multiple of the 4 x 3 blocks
    b = np.random.default_rng(28).standard_normal((7, 4))
    k = coiter.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": coiter.bcsr((4, 3))})
    close(k(A=coiter.Tensor.from_numpy(a, format=coiter.bcsr((4, 3))), B=b).to_numpy(), a @ b)
    # recovery, with the last block's loop cut where it runs past the matrix
    assert "split(i," in str(k.concrete) and "i = i_b * 4 + i_e" in k.source
    assert "COITER_MIN(4, C1_dimension - i_b * 4)" in k.source


# ------------------------------------------------------------------ unordered and duplicate input


def _unordered_csr(a: np.ndarray, seed: int) -> coiter.Tensor:
    m = sp.csr_array(a)
    pos, crd, vals = m.indptr.copy(), m.indices.copy(), m.data.copy()
    rng = np.random.default_rng(seed)
    for r in range(a.shape[0]):
        lo, hi = pos[r], pos[r + 1]
        p = lo + rng.permutation(hi - lo)
        crd[lo:hi], vals[lo:hi] = crd[p], vals[p]
    fmt = Format([Dense(), Compressed(ordered=False)])
    return coiter.Tensor.from_arrays(a.shape, fmt, [{}, {"pos": pos, "crd": crd}], vals)


def _duplicated_coo(a: np.ndarray, seed: int) -> coiter.Tensor:
    """COO whose entries are split into two stored copies that add up to ``a``."""
    rows, cols = np.nonzero(a)
    part = np.random.default_rng(seed).standard_normal(rows.shape[0])
    r, c = np.repeat(rows, 2), np.repeat(cols, 2)
    v = np.stack([part, a[rows, cols] - part], axis=1).reshape(-1)
    fmt = Format([Compressed(unique=False), Singleton(unique=False)])
    return coiter.Tensor.from_arrays(a.shape, fmt, [{"pos": np.array([0, r.shape[0]]), "crd": r},
                                                    {"crd": c}], v)


@pytest.mark.parametrize("make", [_unordered_csr, _duplicated_coo], ids=["unordered", "duplicates"])
def test_unordered_and_duplicate_inputs(make) -> None:
    a, b = mat((9, 12), 0.35, 29), mat((9, 12), 0.35, 30)
    A = make(a, 31)
    fa = A.format
    x = np.random.default_rng(32).standard_normal(12)
    close(A.to_numpy(), a)
    close(run("y(i) = A(i,j) * x(j)", {"A": fa}, A=A, x=x), a @ x)
    for out in (coiter.csr, "dd", coiter.coo()):
        close(run("C(i,j) = A(i,j) + B(i,j)", {"A": fa, "B": coiter.csr, "C": out},
                  A=A, B=sp.csr_array(b)), a + b)
        close(run("C(i,j) = A(i,j) * B(i,j)", {"A": fa, "B": coiter.csr, "C": out},
                  A=A, B=sp.csr_array(b)), a * b)
    close(A.asformat(coiter.csr).to_numpy(), a)


# ------------------------------------------------------------------ bad input


def test_corrupted_structures_are_rejected() -> None:
    with pytest.raises(FormatError, match="linear probing"):
        coiter.Tensor.from_arrays((8,), coiter.hash_vector(),
                                  [{"W": np.array([4]), "crd": np.array([1, -1, -1, -1])}],
                                  np.ones(4))  # coordinate 1 belongs in bucket 1
    with pytest.raises(FormatError, match="repeated diagonal"):
        coiter.Tensor.from_arrays((3, 3), coiter.dia(), [{}, {"offset": np.array([0, 0])}, {}],
                                  np.ones(6))
    with pytest.raises(FormatError, match="outside"):
        coiter.Tensor.from_arrays((2, 3), coiter.ell(), [{}, {}, {"crd": np.array([0, 3])}],
                                  np.ones(2))
    with pytest.raises(FormatError, match="order-2"):
        coiter.Tensor.from_numpy(np.ones(3), format=coiter.dia())
    with pytest.raises(FormatError, match="block sizes"):
        coiter.bcsr((0, 2))


def test_padded_formats_refuse_scattered_matrices() -> None:
    """A permutation-like matrix has n diagonals: DIA would need n * n slots for n entries."""
    n = 4000
    perm = np.random.default_rng(36).permutation(n)
    m = sp.csr_array((np.ones(n), (np.arange(n), perm)), shape=(n, n))
    with pytest.raises(FormatError, match="DIA would store"):
        coiter.Tensor.from_scipy(m).asformat(coiter.dia())
    close(coiter.Tensor.from_scipy(m).asformat(coiter.ell()).to_numpy(), m.toarray())


@pytest.mark.parametrize("fmt", [coiter.coo(), coiter.coo_aos()], ids=["soa", "aos"])
def test_coo_iterators_fuse(fmt: Format) -> None:
    """Fig. 1a: A = B * C with B COO and C, A dense walks B's entries in one loop (the row
    and column iterators fused, rows not deduplicated); duplicates then just accumulate.
    SpMV instead deduplicates rows, to sum each row in a register."""
    b, c = mat((9, 7), 0.4, 33), mat((9, 7), 1.0, 34)
    k = coiter.compile("A(i,j) = B(i,j) * C(i,j)", formats={"B": fmt, "A": "dd"})
    close(k(B=coiter.Tensor.from_numpy(b, format=fmt), C=c).to_numpy(), b * c)
    kernel = k.source.split("int coiter_fused")[1]
    assert "segend" not in kernel and "while" not in kernel and kernel.count("for (") == 1
    x = c[0]
    spmv = coiter.compile("y(i) = B(i,j) * x(j)", formats={"B": fmt})
    close(spmv(B=coiter.Tensor.from_numpy(b, format=fmt), x=x).to_numpy(), b @ x)
    assert "segend" in spmv.source
    d = _duplicated_coo(b, 35)
    close(coiter.compile("A(i,j) = B(i,j) * C(i,j)", formats={"B": d.format, "A": "dd"})(
        B=d, C=c).to_numpy(), b * c)


def test_missed_locates_store_no_zeros_and_walk_nothing() -> None:
    """A hashed operand located in an intersection leaves no explicit zeros where it misses,
    and a level below a missed locate is not walked (its parent position is negative)."""
    a, b = mat((20, 20), 0.3, 37), mat((20, 20), 0.3, 38)
    H = coiter.Tensor.from_numpy(a, format=coiter.hash_matrix())
    for expr, want in [("C(i,j) = A(i,j) * B(i,j)", a * b),
                       ("C(i,j) = A(i,j) * B(i,j) + B(i,j)", a * b + b)]:
        got = coiter.evaluate(expr, A=H, B=sp.csr_array(b), out_format=coiter.csr)
        close(got.to_numpy(), want)
        assert got.nnz == np.count_nonzero(want)
    hs = Format([coiter.Hashed(), Compressed()])  # hashed rows, each a compressed row
    c = mat((6, 5), 0.5, 39)
    c[[1, 4]] = 0.0
    C = coiter.Tensor.from_numpy(c, format=hs)
    d = mat((6, 5), 0.7, 40)
    got = coiter.evaluate("E(i,j) = D(i,j) * C(i,j)", D=coiter.Tensor.from_numpy(d, format="ss"),
                          C=C, out_format=coiter.csr)
    close(got.to_numpy(), d * c)
    assert got.nnz == np.count_nonzero(d * c)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.complex128])
@pytest.mark.parametrize("name", ["dia", "ell", "bcsr32", "bcoo", "hash", "coo_aos"])
def test_value_types_and_wide_indices(name: str, dtype: type) -> None:
    a = np.round(mat((9, 8), 0.4, 41) * 10).astype(dtype)  # integral: exact in every type
    x = np.arange(1, 9).astype(dtype)
    A = coiter.Tensor.from_numpy(a, format=MATRIX[name])
    close(coiter.evaluate("y(i) = A(i,j) * x(j)", A=A, x=x).to_numpy(), a @ x)
    close(coiter.evaluate("C(i,j) = A(i,j) + B(i,j)", A=A, B=A, out_format=MATRIX[name]).to_numpy(),
          a + a)
    m = sp.csr_array(a)
    wide = coiter.Tensor.from_arrays(a.shape, coiter.csr, [{}, {"pos": m.indptr.astype(np.int64),
                                                                "crd": m.indices.astype(np.int64)}], m.data)
    t = wide.asformat(MATRIX[name])
    assert t.storage.index_dtype == np.int64
    close(coiter.evaluate("y(i) = A(i,j) * x(j)", A=t, x=x).to_numpy(), a @ x)


@pytest.mark.parametrize("name", ["csr", "coo", "dia", "ell", "hash_matrix", "coo_aos", "dcsr", "csc"])
def test_formats_by_name(name: str) -> None:
    a = mat((8, 9), 0.3, 42)
    x = np.random.default_rng(43).standard_normal(9)
    close(coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": name})(A=sp.csr_array(a), x=x).to_numpy(),
          a @ x)
    got = coiter.evaluate("C(i,j) = A(i,j) + A(i,j)", A=sp.csr_array(a), out_format=name)
    assert got.format == coiter.formats.format.NAMED[name](2)
    close(got.to_numpy(), 2 * a)


def test_results_built_through_coo_have_no_separate_assembly() -> None:
    a = sp.csr_array(mat((6, 6), 0.3, 44))
    k = coiter.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr", "C": "dia"})
    with pytest.raises(FormatError, match="no separate assembly"):
        k.assemble(A=a, B=a)
    close(k(A=a, B=a).to_numpy(), 2 * a.toarray())
