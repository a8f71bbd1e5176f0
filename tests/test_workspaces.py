"""Sparse workspaces (insert-sort-merge) and the workspace choice, checked against NumPy.

The paper's kernels (row-wise and outer-product SpGEMM, SpTTM, SpTTM-I, SpMTTKRP with a
sparse result) run with every workspace policy and several result formats; the automatic
pass is checked on the paper's taxonomy through ``Kernel.concrete``; random expressions
run with every policy; a dense workspace is never allocated above the memory cap.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import coiter
from coiter.concrete.stmt import Where, walk_stmts
from coiter.errors import FormatError, KernelError
from coiter.formats.workspaces import policy_names
from test_random_expressions import problems, reference

POLICIES = ("coord", "bucket", "hash", "dense", "auto")
RESULTS_2 = ("csr", "csr_unordered", "dcsr", "coo", "csc")
RESULTS_3 = ("csf", "coo", "dsd")

# (expression, einsum, operand shapes and formats, result order)
KERNELS = {
    "row-wise SpGEMM": ("A(i,j) = B(i,k) * C(k,j)", "ik,kj->ij",
                        {"B": ((30, 20), "csr"), "C": ((20, 25), "csr")}),
    "outer-product SpGEMM": ("A(i,j) = B(i,k) * C(k,j)", "ik,kj->ij",
                             {"B": ((30, 20), "csc"), "C": ((20, 25), "csr")}),
    "SpTTM": ("A(i,j,l) = B(k,i,j) * C(k,l)", "kij,kl->ijl",
              {"B": ((8, 9, 10), "csf"), "C": ((8, 7), "csr")}),
    "SpTTM-I": ("A(k,j,l) = B(k,i,j) * C(i,l)", "kij,il->kjl",
                {"B": ((8, 9, 10), "csf"), "C": ((9, 7), "csr")}),
    "SpMTTKRP": ("A(i,j) = B(k,l,i) * C(k,j) * D(l,j)", "kli,kj,lj->ij",
                 {"B": ((8, 9, 10), "csf"), "C": ((8, 6), "csr"), "D": ((9, 6), "csr")}),
}


def _operands(rng: np.random.Generator, spec: dict, density: float = 0.3) -> dict[str, np.ndarray]:
    out = {}
    for name, (shape, _) in spec.items():
        a = rng.integers(-3, 4, size=shape).astype(np.float64)
        a[rng.random(shape) >= density] = 0.0
        out[name] = a
    return out


def _run(expr: str, spec: dict, arrays: dict, result: str, workspace: str, **kw) -> tuple:
    formats = {n: f for n, (_, f) in spec.items()}
    formats["A"] = result
    k = coiter.compile(expr, formats=formats, workspace=workspace, **kw)
    got = k(**{n: coiter.Tensor.from_numpy(a, format=formats[n]) for n, a in arrays.items()})
    return k, got


def _workspaces(k: coiter.Kernel) -> list:
    return [d for d in k.concrete.tensors.values() if d.role == "workspace"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_paper_kernels_with_every_policy_and_result_format(kernel: str, policy: str) -> None:
    expr, subscripts, spec = KERNELS[kernel]
    rng = np.random.default_rng(7)
    arrays = _operands(rng, spec)
    expected = np.einsum(subscripts, *arrays.values())
    for result in RESULTS_2 if expected.ndim == 2 else RESULTS_3:
        _, got = _run(expr, spec, arrays, result, policy)
        assert got.format.to_string() == coiter.formats.as_format(result, expected.ndim).to_string()
        np.testing.assert_array_equal(got.to_numpy(), expected)


@pytest.mark.parametrize("policy", ["coord", "bucket", "hash"])
def test_sparse_policy_is_the_workspace_the_kernel_runs(policy: str) -> None:
    """A hand-given sparse policy is what the concrete program holds, at the order the
    loops need, and the generated C inserts through it."""
    expr, _, spec = KERNELS["outer-product SpGEMM"]
    k = coiter.compile(expr, formats={"A": "csr", **{n: f for n, (_, f) in spec.items()}},
                       workspace=policy)
    (ws,) = _workspaces(k)
    assert (ws.order, ws.policy) == (2, policy)
    assert f"coiter_ws_{policy}_insert_double(" in k.source


def test_many_flushes_and_merges() -> None:
    """Products far outnumber the stored values (which size the first accumulation
    array), so every policy flushes and merges many times."""
    rng = np.random.default_rng(3)
    spec = {"B": ((300, 12), "csc"), "C": ((12, 300), "csr")}
    arrays = _operands(rng, spec, density=0.6)
    expected = arrays["B"] @ arrays["C"]
    for policy in ("coord", "bucket", "hash"):
        _, got = _run("A(i,j) = B(i,k) * C(k,j)", spec, arrays, "csr", policy)
        np.testing.assert_array_equal(got.to_numpy(), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.complex128, np.bool_])
def test_sparse_workspace_value_types(dtype) -> None:
    rng = np.random.default_rng(5)
    spec = {"B": ((20, 15), "csc"), "C": ((15, 18), "csr")}
    arrays = {n: a.astype(dtype) for n, a in _operands(rng, spec).items()}
    if dtype == np.complex128:
        arrays = {n: a * (1 - 2j) for n, a in arrays.items()}
    expected = np.einsum("ik,kj->ij", arrays["B"], arrays["C"])
    for policy in ("coord", "bucket", "hash"):
        _, got = _run("A(i,j) = B(i,k) * C(k,j)", spec, arrays, "csr", policy)
        out = got.to_numpy()
        assert out.dtype == expected.dtype
        np.testing.assert_array_equal(out, expected)


def test_unordered_result_skips_sorting_and_holds_the_product() -> None:
    rng = np.random.default_rng(11)
    B = sp.random(60, 50, density=0.15, format="csr", random_state=rng)
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": "csr_unordered", "B": "csr", "C": "csr"})
    assert "coiter_sort_index(" not in k.source.split("int coiter_fused(")[1]
    got = k(B=B, C=B.T.tocsr()).to_scipy()
    assert not got.has_sorted_indices
    np.testing.assert_allclose(got.toarray(), (B @ B.T).toarray(), rtol=1e-12, atol=1e-12)
    assert coiter.parse_format("dn") == coiter.csr_unordered


# -- the automatic pass on the paper's taxonomy (Fig. 5) --------------------------------------

def test_taxonomy_appending_needs_no_workspace() -> None:
    k = coiter.compile("A(i,j) = B(i,j) * C(i,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    assert _workspaces(k) == [] and k.concrete.result_conversion is None


def test_taxonomy_dense_scattering_takes_a_row_workspace() -> None:
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    (ws,) = _workspaces(k)
    assert ws.order == 1 and ws.policy is None and ws.modes[0].name == "j"


@pytest.mark.parametrize("kernel,order", [("outer-product SpGEMM", 2), ("SpTTM", 3), ("SpTTM-I", 2),
                                          ("SpMTTKRP", 2)])
def test_taxonomy_sparse_scattering_takes_a_sparse_workspace(kernel: str, order: int) -> None:
    expr, _, spec = KERNELS[kernel]
    result = "csr" if order == 2 and kernel != "SpTTM-I" else "csf"
    k = coiter.compile(expr, formats={"A": result, **{n: f for n, (_, f) in spec.items()}})
    (ws,) = _workspaces(k)
    assert ws.order == order and ws.policy == "bucket"
    assert isinstance(k.concrete.stmt, Where) or any(isinstance(s, Where) for s in walk_stmts(k.concrete.stmt))


def test_taxonomy_transposition_converts_the_operand() -> None:
    """An operand read against its storage order is re-stored (a conversion the kernel
    appends from), so the result needs no workspace."""
    k = coiter.compile("A(i,j) = B(j,i)", formats={"A": "csr", "B": "csr"})
    assert _workspaces(k) == []
    assert any(d.converted_from == "B" for d in k.concrete.tensors.values())


# -- random expressions with every policy ------------------------------------------------------

@given(problems(), st.sampled_from(policy_names() + ("auto",)))
def test_random_expressions_with_every_workspace(problem, policy: str) -> None:
    text, data, out_fmt, dims = problem
    formats = {n: f or None for n, (_, f) in data.items()}
    lhs = coiter.parse(text).lhs
    k = coiter.compile(text, formats={**formats, lhs.tensor: out_fmt or None}, workspace=policy)
    operands = {n: coiter.Tensor.from_numpy(a, format=formats[n]) for n, (a, _) in data.items()}
    shape = tuple(dims[v.name] for v in lhs.indices)
    got = k.run(operands, shape).to_numpy()
    np.testing.assert_allclose(got, reference(text, data, dims), rtol=1e-9, atol=1e-9)


# -- the memory cap ------------------------------------------------------------------------------

def _huge_outer_product() -> tuple[sp.csc_matrix, sp.csr_matrix]:
    """An outer product whose dense result would need 8 TB (10^6 x 10^6 doubles), like the
    paper's marine1 x marine1^T, with a few thousand products."""
    rng = np.random.default_rng(2)
    n, k = 1_000_000, 50
    B = sp.random(n, k, density=40 / n, format="csc", random_state=rng)
    C = sp.random(k, n, density=40 / n, format="csr", random_state=rng)
    return B, C


def test_dense_workspace_above_the_cap_computes_through_a_sparse_one() -> None:
    B, C = _huge_outer_product()
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": "csr", "B": "csc", "C": "csr"})
    got = k(B=B, C=C).to_scipy()
    assert abs(got - B @ C).max() < 1e-12
    assert got.nnz == (B @ C).nnz


def test_auto_takes_a_sparse_workspace_of_two_modes_even_where_dense_fits() -> None:
    """The dense alternative of a two-mode workspace (a dense result, converted) never beat
    the bucket policy in benchmarks/workspaces.py, so "auto" keeps the sparse one."""
    rng = np.random.default_rng(4)
    spec = {"B": ((40, 10), "csc"), "C": ((10, 40), "csr")}
    arrays = _operands(rng, spec, density=0.8)
    k, got = _run("A(i,j) = B(i,k) * C(k,j)", spec, arrays, "csr", "auto")
    np.testing.assert_array_equal(got.to_numpy(), arrays["B"] @ arrays["C"])
    assert [(d.order, d.policy) for d in _workspaces(k)] == [(2, "bucket")]
    assert k.core.variants()[-1].prog.tensors["w0"].policy in ("bucket", "hash")


@pytest.mark.parametrize("crowded", [True, False])
def test_auto_takes_hash_where_products_crowd_the_coordinates(crowded: bool) -> None:
    """An outer product whose products reach a quarter of the workspace's dense size (a
    banded matrix times itself) runs with the hash policy, a sparse one (few products per
    coordinate) with bucket; both against SciPy."""
    n = 300
    if crowded:
        b = sp.diags([np.full(n - abs(d), 1.0 + d) for d in range(-12, 13)], range(-12, 13), format="csc")
    else:
        b = sp.random_array((n, n), density=0.01, rng=8, format="csc")
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": "csr", "B": "csc", "C": "csr"})
    got = k(B=sp.csc_array(b), C=sp.csr_array(b)).to_scipy()
    assert abs(got - b @ b).max() < 1e-9
    assert k.core.variants()[-1].prog.tensors["w0"].policy == ("hash" if crowded else "bucket")


def test_row_workspace_above_the_cap_is_sparse() -> None:
    """Row-wise SpGEMM's dense row workspace (one entry per column) is replaced by a hash
    workspace when it would take more than the cap."""
    rng = np.random.default_rng(6)
    B = sp.random(30, 40, density=0.2, format="csr", random_state=rng)
    C = sp.random(40, 5000, density=0.01, format="csr", random_state=rng)
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"},
                       workspace_memory=10_000)
    assert abs(k(B=B, C=C).to_scipy() - B @ C).max() < 1e-12
    assert k.core.variants()[-1].prog.tensors["w0"].policy == "hash"


def test_dense_workspace_asked_above_the_cap_is_refused() -> None:
    B, C = _huge_outer_product()
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": "csr", "B": "csc", "C": "csr"},
                       workspace="dense")
    with pytest.raises(FormatError, match="workspace memory cap"):
        k(B=B, C=C)


def test_memory_cap_from_the_environment(monkeypatch) -> None:
    from coiter.runtime.workspace_choice import memory_cap

    monkeypatch.setenv("COITER_WORKSPACE_MEMORY", "2M")
    assert memory_cap() == 2 << 20
    assert memory_cap(5) == 5
    monkeypatch.setenv("COITER_WORKSPACE_MEMORY", "lots")
    with pytest.raises(FormatError, match="COITER_WORKSPACE_MEMORY"):
        memory_cap()


def test_workspace_keys_wider_than_63_bits_are_an_error() -> None:
    n = 1 << 22
    B = coiter.Tensor.from_coo(np.array([[0], [1], [2]]), np.array([1.0]), (3, n, n), format="csf")
    C = coiter.Tensor.from_coo(np.array([[0], [3]]), np.array([2.0]), (3, n), format="csr")
    k = coiter.compile("A(i,j,l) = B(k,i,j) * C(k,l)", formats={"A": "csf", "B": "csf", "C": "csr"})
    with pytest.raises(KernelError, match="63 bits"):
        k(B=B, C=C)


def test_unknown_workspace_is_named() -> None:
    with pytest.raises(FormatError, match="unknown workspace 'heap'"):
        coiter.compile("A(i,j) = B(i,k) * C(k,j)", workspace="heap")


def test_parallel_loops_sharing_a_workspace_are_refused() -> None:
    """A parallelize whose iterations would share one workspace is a ScheduleError: the
    loop over k inside the row-wise kernel's loop over i scatters into the row's workspace
    (only a producer's outermost loop outside every other loop gets per-thread workspaces)."""
    from coiter.errors import ScheduleError

    with pytest.raises(ScheduleError, match="workspace w0 is shared"):
        coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"},
                       workspace="hash", schedule="parallelize(k,CPUThread,NoRaces)")


SCATTERING = ("outer-product SpGEMM", "SpTTM", "SpMTTKRP")


@pytest.mark.parametrize("policy", ["coord", "bucket", "hash", "auto"])
@pytest.mark.parametrize("kernel", SCATTERING)
@pytest.mark.parametrize("schedule", ["", "parallelize(k,CPUThread,NoRaces)"])
def test_outer_products_scatter_in_parallel(kernel: str, policy: str, schedule: str) -> None:
    """The outer product's loop over k runs on threads (by default, or asked for), each
    thread inserting into its own workspace: every result format equals NumPy, and the
    arrays equal the serial kernel's (integer values: sums in any order are exact)."""
    expr, subscripts, spec = KERNELS[kernel]
    rng = np.random.default_rng(11)
    arrays = _operands(rng, spec)
    expected = np.einsum(subscripts, *arrays.values())
    for result in RESULTS_2 if expected.ndim == 2 else RESULTS_3:
        formats = {n: f for n, (_, f) in spec.items()} | {"A": result}
        k = coiter.compile(expr, formats=formats, workspace=policy, schedule=schedule or None)
        assert "scatter in parallel" in k.source
        ops = {n: coiter.Tensor.from_numpy(a, format=formats[n]) for n, a in arrays.items()}
        serial = k(**ops, threads=1)
        np.testing.assert_array_equal(serial.to_numpy(), expected)
        for threads in (2, 3, 7):
            got = k(**ops, threads=threads)
            for mine, theirs in zip(got.storage.levels, serial.storage.levels):
                assert all(np.array_equal(mine[n], theirs[n]) for n in mine)
            np.testing.assert_array_equal(got.storage.vals, serial.storage.vals)


@pytest.mark.parametrize("policy", ["bucket", "hash"])
def test_parallel_outer_product_on_skewed_columns(policy: str) -> None:
    """Threads take blocks of k balanced by the products under each k: with most products
    in a few columns (a block of equal width would get them all) and real values, results
    match SciPy at 1, 2 and 4 threads."""
    rng = np.random.default_rng(12)
    n = 3000
    dense_cols = sp.random_array((n, 8), density=0.5, rng=rng, format="csc")
    b = sp.hstack([dense_cols, sp.random_array((n, n - 8), density=0.0005, rng=rng)], format="csc")
    c = sp.csr_array(b.T)
    expected = (b @ c).toarray()
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": "csr", "B": "csc", "C": "csr"},
                       workspace=policy)
    for threads in (1, 2, 4):
        np.testing.assert_allclose(k(B=b, C=c, threads=threads).to_numpy(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("policy", ["coord", "bucket", "hash", "dense"])
@pytest.mark.parametrize("result", RESULTS_2[:4])
def test_row_workspaces_are_per_thread(policy: str, result: str) -> None:
    """Rows assembled in parallel give every thread its own workspace, of every policy, for
    results with a dense or a compressed first level: the same arrays as one thread."""
    rng = np.random.default_rng(8)
    b = sp.random_array((1200, 900), density=0.01, rng=rng, format="csr")
    c = sp.random_array((900, 1100), density=0.01, rng=rng, format="csr")
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"A": result, "B": "csr", "C": "csr"},
                       workspace=policy, schedule="parallelize(i,CPUThread,NoRaces)")
    assert "rows in parallel" in k.source
    serial = k(B=b, C=c, threads=1)
    np.testing.assert_allclose(serial.to_numpy(), (b @ c).toarray(), rtol=1e-12, atol=1e-12)
    for threads in (2, 3):
        got = k(B=b, C=c, threads=threads).storage
        for mine, theirs in zip(got.levels, serial.storage.levels):
            assert all(np.array_equal(mine[n], theirs[n]) for n in mine)
        np.testing.assert_array_equal(got.vals, serial.storage.vals)


def test_workspace_c_names_never_shadow_user_tensors() -> None:
    """A tensor named like a workspace's C variables (w0_ws, w0_shift) keeps its own name."""
    rng = np.random.default_rng(9)
    B = sp.random(30, 20, density=0.2, format="csc", random_state=rng)
    C = sp.random(20, 25, density=0.2, format="csr", random_state=rng)
    k = coiter.compile("A(i,j) = w0_ws(i,k) * w0_shift(k,j)",
                       formats={"A": "csr", "w0_ws": "csc", "w0_shift": "csr"})
    got = k(w0_ws=B, w0_shift=C).to_scipy()
    assert abs(got - B @ C).max() < 1e-12


@pytest.mark.parametrize("cols", [70, 5000, 70000])
def test_row_workspace_orders_long_rows(cols: int) -> None:
    """Rows of more than 32 coordinates are ordered through the workspace's bitmap: rows
    spanning one word, one summary word and many, a full row, and coordinates at both ends
    of the dimension, for several column counts (regression: the bitmap replaced radix sort)."""
    rng = np.random.default_rng(3)
    b = sp.random_array((40, 60), density=0.25, rng=rng, format="csr")
    c = sp.random_array((60, cols), density=min(1.0, 40 / cols), rng=rng, format="lil")
    c[0, :] = 1.0  # a dense row: every coordinate of the product row, ends included
    c[1, [0, cols - 1]] = 2.0
    c = sp.csr_array(c)
    got = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"B": "csr", "C": "csr", "A": "csr"})(
        B=b, C=c).to_scipy()
    ref = sp.csr_array(b @ c)
    ref.sort_indices()
    for i in range(got.shape[0]):
        row = got.indices[got.indptr[i]:got.indptr[i + 1]]
        assert np.all(row[1:] > row[:-1]), f"row {i} is not ordered"
    np.testing.assert_allclose(got.toarray(), ref.toarray(), rtol=1e-12)


@pytest.mark.parametrize("result", ["csr", "csr_unordered"])
def test_result_growing_past_its_first_capacity(result: str) -> None:
    """A product with far more entries than its operands grows its result arrays several
    times, past the sizes where blocks are reserved whole and advised huge pages."""
    rng = np.random.default_rng(4)
    b = sp.random_array((3000, 3000), density=0.01, rng=rng, format="csr")
    got = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"B": "csr", "C": "csr", "A": result})(
        B=b, C=b).to_scipy()
    ref = sp.csr_array(b @ b)
    assert got.nnz > 8 * b.nnz  # the result outgrew the first capacity (the operands' nonzeros)
    np.testing.assert_allclose(got.toarray(), ref.toarray(), rtol=1e-12)


_PRECOMPUTE_CASES = [(p, b, r) for p in ("coord", "bucket", "hash", "dense", "")
                     for b, r in (("csr", "csr"), ("csr", "dcsr"), ("csr", "csr_unordered"),
                                  ("csc", "csr"), ("csc", "coo"))
                     if not (p == "dense" and b == "csc")]  # refused: test_precompute_refusals


@pytest.mark.parametrize("policy,b_fmt,result", _PRECOMPUTE_CASES)
def test_precompute_chooses_the_workspace(policy: str, b_fmt: str, result: str) -> None:
    """``precompute`` of SpGEMM's product, which coiter already computes into a workspace,
    names that workspace and gives it the format asked for (TACO's precompute on SpGEMM);
    values against SciPy."""
    rng = np.random.default_rng(5)
    b = rng.random((30, 20)) * (rng.random((30, 20)) < 0.2)
    c = rng.random((20, 25)) * (rng.random((20, 25)) < 0.2)
    outer = b_fmt == "csc"
    args = "B(i,k)*C(k,j),j,j,w" + (f",{policy}" if policy else "")
    k = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats={"B": b_fmt, "C": "csr", "A": result},
                       schedule=f"precompute({args})")
    got = k(B=coiter.Tensor.from_numpy(b, format=b_fmt), C=coiter.Tensor.from_numpy(c, format="csr"))
    np.testing.assert_allclose(got.to_numpy(), b @ c, rtol=1e-12, atol=1e-12)
    (decl,) = _workspaces(k)
    assert decl.name == "w"
    assert [m.name for m in decl.modes] == (["i", "j"] if outer else ["j"])
    if policy in ("coord", "bucket", "hash"):
        assert decl.policy == policy
    elif policy == "dense":
        assert decl.policy is None


def test_precompute_refusals() -> None:
    formats = {"B": "csr", "C": "csr", "A": "csr"}
    expr = "A(i,j) = B(i,k) * C(k,j)"
    with pytest.raises(coiter.ScheduleError, match="unknown workspace format 'tree'"):
        coiter.compile(expr, formats=formats, schedule="precompute(B(i,k)*C(k,j),j,j,w,tree)")
    with pytest.raises(coiter.ScheduleError, match="over one of those variables"):
        coiter.compile(expr, formats=formats, schedule="precompute(B(i,k)*C(k,j),k,k,w,hash)")
    with pytest.raises(coiter.ScheduleError, match="would be the whole result"):
        coiter.compile(expr, formats={**formats, "B": "csc"},
                       schedule="precompute(B(i,k)*C(k,j),j,j,w,dense)")


# precompute with a sparse workspace where coiter inserts none: expression, schedule (the
# policy filled in), operand shapes, NumPy reference
SPARSE_PRECOMPUTES = {
    "sum then product": ("A(i,j) = (B(i,j) + C(i,j)) * D(i,j)", "precompute(B(i,j)+C(i,j),j,j,w,{p})",
                         {"B": (8, 9), "C": (8, 9), "D": (8, 9)}, lambda o: (o["B"] + o["C"]) * o["D"]),
    "2-D sum": ("A(i,j) = B(i,j) + C(i,j) + D(i,j)", "precompute(B(i,j)+C(i,j),{{i,j}},{{i,j}},w,{p})",
                {"B": (8, 9), "C": (8, 9), "D": (8, 9)}, lambda o: o["B"] + o["C"] + o["D"]),
    "SpMV row": ("y(i) = A(i,j) * x(j)", "precompute(A(i,j)*x(j),j,j,w,{p})",
                 {"A": (8, 9), "x": (9,)}, lambda o: o["A"] @ o["x"]),
    "MTTKRP at j": ("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", "reorder(i,k,l,j),precompute(B(i,k,l)*C(k,j),j,j,w,{p})",
                    {"B": (5, 6, 7), "C": (6, 4), "D": (7, 4)},
                    lambda o: np.einsum("ikl,kj,lj->ij", o["B"], o["C"], o["D"])),
}


@pytest.mark.parametrize("sparse", [False, True], ids=["dense operands", "sparse operands"])
@pytest.mark.parametrize("policy", ["coord", "bucket", "hash"])
@pytest.mark.parametrize("case", sorted(SPARSE_PRECOMPUTES))
def test_precompute_into_a_sparse_workspace(case: str, policy: str, sparse: bool) -> None:
    """``precompute(..., policy)`` where coiter would use a dense temporary (or none): the
    workspace is an insert-sort-merge workspace of that policy over the variables given,
    read by the consumer as a sorted coordinate list; values equal NumPy's (TACO's MTTKRP
    schedule with a workspace at j among them)."""
    expr, schedule, shapes, ref = SPARSE_PRECOMPUTES[case]
    rng = np.random.default_rng(13)
    arrays = {n: rng.integers(-3, 4, size=s).astype(float) * (rng.random(s) < 0.4) for n, s in shapes.items()}
    formats = {n: ("d" * (len(s) - 1) + "s" if sparse else "d" * len(s)) for n, s in shapes.items()}
    k = coiter.compile(expr, formats=formats, schedule=schedule.format(p=policy))
    decl = k.concrete.tensors["w"]
    assert (decl.role, decl.policy) == ("workspace", policy)
    ops = {n: coiter.Tensor.from_numpy(a, format=formats[n]) for n, a in arrays.items()}
    for threads in (1, 2):  # a workspace filled outside every loop is scattered by threads
        np.testing.assert_array_equal(k(**ops, threads=threads).to_numpy(), ref(arrays))


@pytest.mark.parametrize("kernel_workspace", ["auto", "hash"])
def test_precompute_dense_respects_the_memory_cap(kernel_workspace: str) -> None:
    """A dense workspace asked for through precompute is checked against the cap per call,
    as ``workspace="dense"`` is; a sparse one asked for the same way runs under it."""
    b = sp.random_array((20, 300), density=0.05, rng=6, format="csr")
    c = sp.random_array((300, 2000), density=0.01, rng=7, format="csr")  # rows of 2000 columns
    formats = {"B": "csr", "C": "csr", "A": "csr"}
    dense = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats=formats, workspace=kernel_workspace,
                           workspace_memory=1000, schedule="precompute(B(i,k)*C(k,j),j,j,w,dense)")
    with pytest.raises(FormatError, match="memory cap"):
        dense(B=b, C=c)
    hashed = coiter.compile("A(i,j) = B(i,k) * C(k,j)", formats=formats, workspace_memory=1000,
                            schedule="precompute(B(i,k)*C(k,j),j,j,w,hash)")
    np.testing.assert_allclose(hashed(B=b, C=c).to_numpy(), (b @ c).toarray(), rtol=1e-12)
