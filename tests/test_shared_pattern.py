"""Results whose pattern is an operand's first levels (TTV, TTM, SDDMM, element-wise
scaling) are written at that operand's positions and share its index arrays, read-only,
instead of assembling them. Values against numpy.einsum; sharing checked on the arrays."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import coiter
import coiter.kernel
from coiter.errors import ArgumentError
from helpers import random_array


def _shares(result: coiter.Tensor, operand: coiter.Tensor, levels: int) -> bool:
    """Whether the result's first ``levels`` levels are read-only views of the operand's arrays."""
    for k in range(levels):
        for name, arr in result.storage.levels[k].items():
            if not np.shares_memory(arr, operand.storage.levels[k][name]) or arr.flags.writeable:
                return False
    return True


def _shares_any(result: coiter.Tensor, operand: coiter.Tensor) -> bool:
    """Whether any index array of the result overlaps one of the operand's."""
    mine = [a for lv in result.storage.levels for a in lv.values()]
    theirs = [a for lv in operand.storage.levels for a in lv.values()]
    return any(np.shares_memory(a, b) for a in mine for b in theirs)


CASES = [  # expression, formats, shapes, einsum, operand shared, levels shared (0: assembled)
    ("A(i,j) = B(i,j,k) * c(k)", {"B": "sss", "A": "ss"}, {"B": (6, 7, 8), "c": (8,)}, "ijk,k->ij", "B", 2),
    ("A(i,j) = B(i,j,k) * c(k)", {"B": "dss", "A": "ds"}, {"B": (6, 7, 8), "c": (8,)}, "ijk,k->ij", "B", 2),
    ("A(i,j,l) = B(i,j,k) * C(k,l)", {"B": "sss", "A": "ssd"}, {"B": (6, 7, 8), "C": (8, 5)},
     "ijk,kl->ijl", "B", 2),
    ("A(i,j,k) = B(i,j,k,l) * c(l)", {"B": "ssss", "A": "sss"}, {"B": (4, 5, 3, 6), "c": (6,)},
     "ijkl,l->ijk", "B", 3),
    ("C(i,j) = A(i,j) * U(i,k) * V(j,k)", {"A": "csr", "C": "csr"}, {"A": (9, 8), "U": (9, 4), "V": (8, 4)},
     "ij,ik,jk->ij", "A", 2),
    ("C(i,j) = A(i,j) * 2", {"A": "dcsr", "C": "dcsr"}, {"A": (9, 8)}, "ij->ij", "A", 2),
    ("y(i) = A(i,j) * x(j)", {"A": "dcsr", "y": "s"}, {"A": (9, 8), "x": (8,)}, "ij,j->i", "A", 1),
    # not shared: COO's non-unique top level, another mode order, a sum
    ("A(i,j) = B(i,j,k) * c(k)", {"B": "ucq", "A": "ss"}, {"B": (6, 7, 8), "c": (8,)}, "ijk,k->ij", "B", 0),
    ("A(j,i) = B(i,j,k) * c(k)", {"B": "sss", "A": "ss"}, {"B": (6, 7, 8), "c": (8,)}, "ijk,k->ji", "B", 0),
    ("A(i,j) = B(i,j) + C(i,j)", {"B": "csr", "C": "dd", "A": "csr"}, {"B": (6, 7), "C": (6, 7)}, "ij,ij->ij",
     "B", 0),
]


@pytest.mark.parametrize("expr,formats,shapes,ref,shared,levels", CASES)
@pytest.mark.parametrize("fast", [True, False])
def test_results_share_an_operands_first_levels(expr, formats, shapes, ref, shared, levels, fast,
                                                  monkeypatch) -> None:
    if not fast:
        monkeypatch.setattr(coiter.kernel, "build_plan", lambda *a, **k: None)
    rng = np.random.default_rng(len(expr))
    arrays = {n: random_array(rng, s, 0.4) for n, s in shapes.items()}
    ops = {n: coiter.Tensor.from_numpy(a, format=formats[n]) if n in formats else a for n, a in arrays.items()}
    k = coiter.compile(expr, formats=formats)
    for _ in range(3):  # the first call makes the plan, the next ones use it
        result = k(**ops)
        if ref == "ij->ij":
            expected = 2 * arrays["A"]
        elif "+" in expr:
            expected = arrays["B"] + arrays["C"]
        else:
            expected = np.einsum(ref, *arrays.values())
        np.testing.assert_allclose(result.to_numpy(), expected, rtol=1e-12, atol=1e-12)
        assert result.format == k.formats[expr.split("(")[0]]
        assert _shares(result, ops[shared], levels) if levels else not _shares_any(result, ops[shared])
    source = k.core.variants()[0].source
    assert ("_out_len" in source) == (levels == 0 and not result.format.is_dense)


def test_shared_results_in_parallel_and_in_other_modes() -> None:
    """TTV over a shared pattern runs its outer loop on threads; assemble/compute still
    build the structure themselves."""
    rng = np.random.default_rng(2)
    b = random_array(rng, (40, 30, 20), 0.2)
    c = rng.standard_normal(20)
    B = coiter.Tensor.from_numpy(b, format="sss")
    k = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats={"B": "sss", "A": "ss"})
    assert "#pragma omp for" in k.source
    expected = np.einsum("ijk,k->ij", b, c)
    for threads in (1, 2, 3):
        np.testing.assert_allclose(k(B=B, c=c, threads=threads).to_numpy(), expected, rtol=1e-12)
    pattern = k.assemble(B=B, c=c)
    np.testing.assert_allclose(k.compute(pattern, B=B, c=c).to_numpy(), expected, rtol=1e-12)


def test_scheduled_kernels_share_while_the_operands_loops_stay_outermost() -> None:
    """A schedule that keeps B's loops over the shared levels outermost keeps the shared
    result (and may run it in parallel); one that splits them assembles the result."""
    rng = np.random.default_rng(3)
    b = random_array(rng, (8, 9, 10), 0.3)
    c = rng.standard_normal(10)
    B = coiter.Tensor.from_numpy(b, format="sss")
    expected = np.einsum("ijk,k->ij", b, c)
    k = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats={"B": "sss", "A": "ss"},
                       schedule="parallelize(i,CPUThread,NoRaces)")
    A = k(B=B, c=c, threads=2)
    np.testing.assert_allclose(A.to_numpy(), expected, rtol=1e-12)
    assert _shares(A, B, 2)
    k = coiter.compile("A(i,j) = B(i,j,k) * c(k)", formats={"B": "sss", "A": "ss"},
                       schedule="split(i,i0,i1,4)")
    A = k(B=B, c=c)
    np.testing.assert_allclose(A.to_numpy(), expected, rtol=1e-12)
    assert not _shares_any(A, B)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(0, 12), cols=st.integers(1, 12), da=st.floats(0, 1), db=st.floats(0, 1),
       seed=st.integers(0, 2**16), threads=st.sampled_from([1, 2]))
def test_pattern_of_keeps_an_operands_pattern_where_others_are_sparse(rows, cols, da, db, seed,
                                                                        threads) -> None:
    """``pattern_of="A"``: A∘B of two CSR matrices keeps all of A's entries (zeros where B
    is absent), written in place over A's arrays, its rows on threads."""
    rng = np.random.default_rng(seed)
    a, b = random_array(rng, (rows, cols), da), random_array(rng, (rows, cols), db)
    A, B = coiter.Tensor.from_numpy(a, format="csr"), coiter.Tensor.from_numpy(b, format="csr")
    k = coiter.compile("C(i,j) = A(i,j) * B(i,j)", formats={"A": "csr", "B": "csr", "C": "csr"},
                       pattern_of="A", schedule="parallelize(i,CPUThread,NoRaces)")
    C = k(A=A, B=B, threads=threads)
    np.testing.assert_allclose(C.to_numpy(), a * b, rtol=1e-12)
    assert C.nnz == A.nnz and (_shares(C, A, 2) or not A.nnz)  # no memory in empty arrays
    # without it the result is assembled: the entries both store
    plain = coiter.compile("C(i,j) = A(i,j) * B(i,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    assert plain(A=A, B=B).nnz == np.count_nonzero((a != 0) & (b != 0))


@pytest.mark.parametrize("loop", ["i", "j"])
def test_pattern_of_first_levels_with_a_sparse_factor_in_parallel(loop: str) -> None:
    """TTM with a CSR matrix: the result takes B's first two levels (its dense last level
    below), and either of those loops runs on threads."""
    rng = np.random.default_rng(4)
    b, c = random_array(rng, (9, 8, 10), 0.3), random_array(rng, (10, 5), 0.3)
    B = coiter.Tensor.from_numpy(b, format="sss")
    k = coiter.compile("A(i,j,l) = B(i,j,k) * C(k,l)", formats={"B": "sss", "C": "csr", "A": "ssd"},
                       pattern_of="B", schedule=f"parallelize({loop},CPUThread,NoRaces)")
    expected = np.einsum("ijk,kl->ijl", b, c)
    for threads in (1, 2):
        A = k(B=B, C=coiter.Tensor.from_numpy(c, format="csr"), threads=threads)
        np.testing.assert_allclose(A.to_numpy(), expected, rtol=1e-12)
        assert _shares(A, B, 2)


def test_pattern_of_beside_an_operand_read_transposed() -> None:
    """C is read against its storage order (a transposed copy is made); the result still
    takes B's pattern, over B's arrays."""
    rng = np.random.default_rng(6)
    b, c = random_array(rng, (7, 6), 0.4), random_array(rng, (6, 7), 0.4)
    B = coiter.Tensor.from_numpy(b, format="ds")
    k = coiter.compile("A(i,j) = B(i,j) * C(j,i)", formats={"B": "ds", "C": "ds", "A": "ds"},
                       pattern_of="B")
    A = k(B=B, C=coiter.Tensor.from_numpy(c, format="ds"))
    np.testing.assert_allclose(A.to_numpy(), b * c.T, rtol=1e-12)
    assert A.nnz == B.nnz and _shares(A, B, 2)


@pytest.mark.parametrize("expr,kwargs,message", [
    ("A(i,j,l) = B(i,j,k) * C(k,l)", {"pattern_of": "X"}, "must name an operand"),
    ("A(i,j,l) = B(i,j,k) * C(k,l)", {"pattern_of": "A"}, "must name an operand"),
    ("A(i,j,l) = B(i,j,k) * C(k,l)", {"pattern_of": "C"}, "C is not one"),
    ("A(i,j,l) = B(i,j,k) + D(i,j,l)", {"pattern_of": "B"}, "B is not one"),
    ("A(i,j,l) = B(i,j,k) * C(k,l)", {"pattern_of": "B", "fill_values": {"C": 1.0}}, "fill value"),
])
def test_pattern_of_errors(expr, kwargs, message) -> None:
    formats = {"B": "sss", "C": "csr", "A": "ssd", "D": "sss"}
    with pytest.raises(ArgumentError, match=message):
        coiter.compile(expr, formats={n: f for n, f in formats.items() if f"{n}(" in expr}, **kwargs)


@pytest.mark.parametrize("expr,formats,shapes,ref,collapsed", [
    # TTV over B's fibers: one loop over B's level-2 (level-3) positions
    ("A(i,j) = B(i,j,k) * c(k)", {"B": "sss", "A": "ss"}, {"B": (6, 7, 8), "c": (8,)}, "ijk,k->ij", "pB2"),
    ("A(i,j) = B(i,j,k) * c(k)", {"B": "dss", "A": "ds"}, {"B": (6, 7, 8), "c": (8,)}, "ijk,k->ij", "pB2"),
    ("A(i,j,k) = B(i,j,k,l) * c(l)", {"B": "ssss", "A": "sss"}, {"B": (4, 5, 3, 6), "c": (6,)},
     "ijkl,l->ijk", "pB3"),
    ("A(i,j,l) = B(i,j,k) * C(k,l)", {"B": "sss", "A": "ssd"}, {"B": (6, 7, 8), "C": (8, 5)}, "ijk,kl->ijl",
     "pB2"),
    # a scatter into a dense result not indexed by the collapsed coordinates
    ("y(k) = B(i,j,k) * 2", {"B": "sss"}, {"B": (6, 7, 8)}, "ijk->k", "pB3"),
    # not collapsed: another operand reads i; a non-unique level
    ("A(i,j) = B(i,j,k) * c(k) * d(i)", {"B": "sss", "A": "ss"}, {"B": (6, 7, 8), "c": (8,), "d": (6,)},
     "ijk,k,i->ij", None),
    ("A(i,j) = B(i,j,k) * c(k)", {"B": "ucq", "A": "ss"}, {"B": (6, 7, 8), "c": (8,)}, "ijk,k->ij", None),
    # the loop over i stays (y(i) reads i); the loops over j and k inside it collapse
    ("y(i) = B(i,j,k) * c(k)", {"B": "sss"}, {"B": (6, 7, 8), "c": (8,)}, "ijk,k->i", "pB1"),
])
def test_loops_over_unused_coordinates_collapse(expr, formats, shapes, ref, collapsed) -> None:
    """Nested loops over an operand's levels whose outer coordinates nothing reads become
    one loop over the inner level's positions; the values stay right either way."""
    rng = np.random.default_rng(len(expr) + len(formats["B"]))
    arrays = {n: random_array(rng, s, 0.4) for n, s in shapes.items()}
    ops = {n: coiter.Tensor.from_numpy(a, format=formats[n]) if n in formats else a for n, a in arrays.items()}
    k = coiter.compile(expr, formats=formats)
    expected = np.einsum(ref, *arrays.values()) * (2 if "* 2" in expr else 1)
    for threads in (None, 2):
        np.testing.assert_allclose(k(**ops, threads=threads).to_numpy(), expected, rtol=1e-12, atol=1e-12)
    kernel = k.source.split("\nint coiter_fused(")[1]  # after any parallel-body helpers
    loops = [line.strip() for line in kernel.splitlines() if line.strip().startswith("for (int64_t p")]
    assert loops, k.source
    if collapsed:  # the loop itself, or its parallel loop over chunks (codegen/outline.py)
        assert loops[0].startswith((f"for (int64_t {collapsed} = ", f"for (int64_t {collapsed}_chunk = ")), \
            loops[0]
    else:  # a collapsed loop starts at the children of the children: B2_pos[B1_pos[0]]
        assert not any("_pos[B" in line.split(";")[0] for line in loops), loops
