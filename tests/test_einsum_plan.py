"""einsum planning (coiter/planning): the plan's choice between one fused kernel and a
sequence of contractions, its order, engines and temporaries' formats; every result against
NumPy's einsum on the densified operands."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import coiter
from coiter.errors import ArgumentError, ShapeError
from coiter.planning import EinsumPlan, search

RNG = np.random.default_rng(7)


def _dense(x: object) -> np.ndarray:
    if isinstance(x, coiter.Tensor):
        return x.to_numpy()
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def _check(subscripts: str, *operands: object, **kwargs: object) -> coiter.Tensor:
    got = coiter.einsum(subscripts, *operands, **kwargs)
    want = np.einsum(subscripts, *(_dense(x) for x in operands), optimize=True)
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-10, atol=1e-10 * max(1.0, np.abs(want).max(initial=0)))
    return got


def _sparse(n: int, m: int, per_row: float, seed: int) -> sp.csr_array:
    return sp.random_array((n, m), density=min(1.0, per_row / m), rng=np.random.default_rng(seed), format="csr")


def test_dense_chain_goes_to_numpy_in_one_step() -> None:
    a, b, c = RNG.random((10, 300)), RNG.random((300, 10)), RNG.random((10, 300))
    plan = coiter.einsum_path("ik,kl,lj->ij", a, b, c)
    assert not plan.fused
    assert [(s.engine, s.inputs) for s in plan.steps] == [("numpy", (0, 1, 2))]
    assert plan.cost < plan.fused_cost
    for _ in range(2):  # the second call takes the NumPy-arrays shortcut
        _check("ik,kl,lj->ij", a, b, c)
    _check("ik,kl,lj->ij", a, b, c, out_format="ds")


def test_sparse_steps_split_numpy_groups() -> None:
    # dense work before and after a sparse kernel: NumPy, coiter, NumPy
    s = _sparse(300, 300, 3, 20)
    u, v, w = RNG.random((40, 300)), RNG.random((300, 40)), RNG.random((40, 50))
    plan = coiter.einsum_path("ai,ij,jb,bc->ac", u, s, v, w)
    assert {st.engine for st in plan.steps} == {"numpy", "coiter"}
    _check("ai,ij,jb,bc->ac", u, s, v, w)


def test_dense_results_keep_numpys_layout_unless_a_format_is_asked() -> None:
    a, b = RNG.random((20, 30)), RNG.random((30, 40))
    for subscripts in ("ij,jk->ki", "ij,jk->ik"):
        got = _check(subscripts, a, b)
        assert got.format.is_dense
        asked = _check(subscripts, a, b, out_format="dd")
        assert asked.format == coiter.dense(2)


def test_sparse_matrices_times_vector_contract_the_vector_first() -> None:
    a, b = _sparse(2000, 2000, 4, 1), _sparse(2000, 2000, 4, 2)
    x = RNG.random(2000)
    plan = coiter.einsum_path("ij,jk,k->i", a, b, x)
    assert not plan.fused
    assert plan.steps[0].inputs == (1, 2) and plan.steps[0].subscripts == "jk,k->j"
    assert all(s.engine == "coiter" for s in plan.steps)
    _check("ij,jk,k->i", a, b, x)


def test_sampled_product_stays_one_fused_kernel() -> None:
    s = _sparse(3000, 3000, 5, 3)
    u, v = RNG.random((3000, 8)), RNG.random((8, 3000))
    plan = coiter.einsum_path("ij,ik,kj->ij", s, u, v, out_format="csr")
    assert plan.fused and plan.steps[0].engine == "coiter"
    got = _check("ij,ik,kj->ij", s, u, v, out_format="csr")
    assert got.format == coiter.csr


def test_results_bounded_by_a_sparse_operand_default_to_sparse() -> None:
    s, u, v = _sparse(60, 50, 4, 21), RNG.random((60, 5)), RNG.random((5, 50))
    assert _check("ij,ik,kj->ij", s, u, v).format == coiter.csr  # sampled product
    assert _check("ij,ij->ij", s, RNG.random((60, 50))).format == coiter.csr  # as SciPy's multiply
    assert _check("ijk,jr,kr->ijr", coiter.Tensor.from_numpy(RNG.random((4, 5, 6)) * (RNG.random((4, 5, 6)) < 0.3),
                                                              format="sss"),
                  RNG.random((5, 3)), RNG.random((6, 3))).format.is_dense  # k is summed: not bounded
    assert _check("ij,jk->ik", s, RNG.random((50, 7))).format.is_dense


def test_sparse_chain_against_scipy() -> None:
    a, b, c = _sparse(500, 400, 3, 4), _sparse(400, 300, 3, 5), _sparse(300, 200, 3, 6)
    got = coiter.einsum("ik,kl,lj->ij", a, b, c)
    np.testing.assert_allclose(got.to_numpy(), (a @ b @ c).toarray(), rtol=1e-12)
    assert not got.format.is_dense


def test_products_of_structured_matrices_are_measured_not_assumed_independent() -> None:
    # a banded matrix's square has 30x fewer entries than products: assumed independent,
    # the square would look half full and the chain would stay one fused kernel
    n, half = 2000, 30
    band = sp.diags([RNG.random(n - abs(d)) + 0.5 for d in range(-half, half + 1)],
                    list(range(-half, half + 1)), format="csr")
    plan = coiter.einsum_path("ik,kl,lj->ij", band, band, band)
    assert not plan.fused
    square = plan.steps[0]
    assert square.subscripts in ("ik,kl->il", "kl,lj->kj") and not square.format.is_dense
    assert 0.5 < square.nnz / (band @ band).nnz < 2.0
    got = coiter.einsum("ik,kl,lj->ij", band, band, band)
    np.testing.assert_allclose(got.to_numpy(), (band @ band @ band).toarray(), rtol=1e-10)


def test_dense_temporaries_respect_the_memory_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    ops = [_sparse(300, 300, 15, seed) for seed in (7, 8, 9, 10)]
    chain = "ij,jk,kl,lm->im"
    uncapped = coiter.einsum_path(chain, *ops)
    assert uncapped.steps[0].format.is_dense  # A @ B is half full: dense is chosen
    monkeypatch.setenv("COITER_WORKSPACE_MEMORY", "64K")
    capped = coiter.einsum_path(chain, *ops)
    assert len(capped.steps) > 1
    assert not any(s.format.is_dense for s in capped.steps[:-1])
    _check(chain, *ops)
    # dense operands whose temporaries would all exceed the cap: one fused kernel
    d = [RNG.random((40, 40)) for _ in range(3)]
    monkeypatch.setenv("COITER_WORKSPACE_MEMORY", "1K")
    plan = coiter.einsum_path("ij,jk,kl->il", *d)
    assert plan.fused and plan.steps[0].engine == "coiter"
    _check("ij,jk,kl->il", *d)


def test_more_operands_than_the_exact_search_plan_greedily() -> None:
    # nine matrices, alternately sparse and dense: beyond the subset search (8 operands)
    ops = [_sparse(30, 30, 3, 40 + k) if k % 2 else RNG.random((30, 30)) for k in range(9)]
    subscripts = ",".join("abcdefghij"[k:k + 2] for k in range(9)) + "->aj"
    plan = coiter.einsum_path(subscripts, *ops)
    assert len(plan.steps) > 1 and plan.cost < plan.fused_cost
    _check(subscripts, *ops)


def test_optimize_false_and_a_given_plan() -> None:
    a, b, c = RNG.random((6, 7)), _sparse(7, 8, 3, 10), RNG.random(8)
    assert coiter.einsum_path("ij,jk,k->i", a, b, c).steps  # planned
    _check("ij,jk,k->i", a, b, c, optimize=False)
    plan = coiter.einsum_path("ij,jk,k->i", a, b, c)
    assert isinstance(plan, EinsumPlan)
    _check("ij,jk,k->i", a, b, c, optimize=plan)
    with pytest.raises(ArgumentError, match="'ij,jk,k->i'"):
        coiter.einsum("ij,jk->ik", a, b, optimize=plan)
    with pytest.raises(ArgumentError, match="optimize must be"):
        coiter.einsum("ij,jk->ik", a, b, optimize="greedy")


def test_mismatched_letter_extents_name_the_letter() -> None:
    with pytest.raises(ShapeError, match="letter 'j' has extent 7 in operand 0 .* but 5 in operand 1"):
        coiter.einsum_path("ij,jk,k->i", RNG.random((6, 7)), RNG.random((5, 8)), RNG.random(8))
    plan = coiter.einsum_path("ij,jk,k->i", RNG.random((6, 7)), RNG.random((7, 8)), RNG.random(8))
    with pytest.raises(ShapeError, match="letter 'k'"):  # a plan reused on operands that disagree
        coiter.einsum("ij,jk,k->i", RNG.random((6, 7)), RNG.random((7, 8)), RNG.random(9), optimize=plan)


@pytest.mark.parametrize(("subscripts", "shapes", "sparse"), [
    ("...ij,...j->...i", [(3, 4, 5), (3, 5)], [False, False]),
    ("...ij,...j", [(4, 5), (5,)], [True, False]),
    ("ij...,jk->ik", [(4, 5), (5, 6)], [True, True]),
    ("i...,i...->...", [(6, 3, 2), (6, 3, 2)], [False, False]),
    ("...,...", [(), (4, 5)], [False, True]),
    ("b...,...a", [(2, 3), (3, 4)], [True, False]),
    ("...ii->...i", [(2, 3, 3)], [False]),
    ("ab...,b...->a...", [(5, 4, 3), (4, 3)], [False, False]),
])
def test_ellipsis_subscripts_equal_numpys(subscripts: str, shapes: list[tuple[int, ...]],
                                          sparse: list[bool]) -> None:
    operands = []
    for shape, is_sparse in zip(shapes, sparse):
        x = np.where(RNG.random(shape) < 0.5, RNG.random(shape), 0.0)
        operands.append(coiter.Tensor.from_numpy(x, format="csr") if is_sparse else x)
    got = _check(subscripts, *operands)
    assert got.shape == np.einsum(subscripts, *(_dense(x) for x in operands)).shape


def test_ellipsis_dimensions_do_not_broadcast_length_one() -> None:
    with pytest.raises(ShapeError, match="extent 1 in operand 0 .* but 3 in operand 1"):
        coiter.einsum("...i,...i->...", RNG.random((1, 4)), RNG.random((3, 4)))


def test_plan_text_lists_every_step() -> None:
    plan = coiter.einsum_path("ij,jk,k->i", _sparse(50, 50, 3, 11), _sparse(50, 50, 3, 12), RNG.random(50))
    text = str(plan)
    for step in plan.steps:
        assert step.subscripts in text
    assert "fused" in repr(coiter.einsum_path("ij,j->i", _sparse(5, 5, 2, 13), RNG.random(5)))


def test_dense_pair_goes_to_numpy_and_other_dtypes_stay_compiled() -> None:
    a, b = RNG.random((30, 20)), RNG.random((20, 10))
    assert coiter.einsum_path("ij,jk->ik", a, b).steps[0].engine == "numpy"
    _check("ij,jk->ik", a, b)
    ai, bi = (RNG.integers(-5, 5, x.shape) for x in (a, b))
    assert coiter.einsum_path("ij,jk->ik", ai, bi).steps[0].engine == "coiter"
    _check("ij,jk->ik", ai, bi)


def test_nonzero_fills_compute_one_kernel() -> None:
    a = coiter.Tensor.from_scipy(_sparse(6, 6, 2, 14), fill_value=1.0)
    b, c = RNG.random((6, 6)), RNG.random(6)
    plan = coiter.einsum_path("ij,jk,k->i", a, b, c)
    assert plan.fused
    _check("ij,jk,k->i", a, b, c)


# ----------------------------------------------------------------------------- random

LETTERS = "ijklm"


@st.composite
def _einsum_case(draw: st.DrawFn) -> tuple[str, list[object]]:
    extents = {c: draw(st.integers(1, 6)) for c in LETTERS}
    n = draw(st.integers(3, 4))
    terms = ["".join(draw(st.lists(st.sampled_from(LETTERS), min_size=1, max_size=3, unique=True)))
             for _ in range(n)]
    used = sorted(set("".join(terms)))
    out = "".join(draw(st.lists(st.sampled_from(used), max_size=2, unique=True)))
    operands: list[object] = []
    for k, term in enumerate(terms):
        shape = tuple(extents[c] for c in term)
        rng = np.random.default_rng(draw(st.integers(0, 2**16)))
        arr = rng.random(shape) * (rng.random(shape) < draw(st.sampled_from([0.2, 0.6, 1.0])))
        kind = draw(st.sampled_from(["dense", "sparse", "scipy"] if len(term) == 2 else ["dense", "sparse"]))
        if kind == "dense":
            operands.append(arr)
        elif kind == "scipy":
            operands.append(sp.csr_array(arr))
        else:
            operands.append(coiter.Tensor.from_numpy(arr, format="s" * len(term)))
    return ",".join(terms) + "->" + out, operands


@st.composite
def _path(draw: st.DrawFn, n: int) -> list:
    """A random NumPy-style contraction path over ``n`` operands (pairs, or all at once)."""
    path: list = ["einsum_path"]
    while n > 1:
        group = tuple(sorted(draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=min(3, n),
                                           unique=True))))
        path.append(group)
        n -= len(group) - 1
    return path


@settings(max_examples=40)
@given(_einsum_case(), st.data())
def test_random_plans_equal_numpy(case: tuple[str, list[object]], data: st.DataObject) -> None:
    subscripts, operands = case
    _check(subscripts, *operands)
    # any order, with temporaries dense or (small inputs are otherwise always dense) sparse
    path = data.draw(_path(len(operands)))
    sparse_temporaries = data.draw(st.booleans())
    with mock.patch.object(search, "SMALL_VOLUME", -1 if sparse_temporaries else search.SMALL_VOLUME), \
            mock.patch.object(search, "DENSE_FRACTION", 2.0 if sparse_temporaries else search.DENSE_FRACTION):
        plan = coiter.einsum_path(subscripts, *operands)  # cached plans are not paths: unaffected
        _check(subscripts, *operands, optimize=path)
    assert plan.path[0] == "einsum_path"


def test_numpy_paths_are_checked() -> None:
    ops = [RNG.random((3, 4)), RNG.random((4, 5)), RNG.random(5)]
    _check("ij,jk,k->i", *ops, optimize=["einsum_path", (1, 2), (0, 1)])
    _check("ij,jk,k->i", *ops, optimize=np.einsum_path("ij,jk,k->i", *ops)[0])
    with pytest.raises(ArgumentError, match="leaves 2 operands"):
        coiter.einsum("ij,jk,k->i", *ops, optimize=["einsum_path", (1, 2)])
    with pytest.raises(ArgumentError, match=r"\(0, 3\)"):
        coiter.einsum("ij,jk,k->i", *ops, optimize=["einsum_path", (0, 3), (0, 1)])
