"""Wide sums of sparse operands run as a chain of narrow sums (coiter/planning/sums.py).

The chain adds in the sum's own order, left to right, so its values must equal, bit for bit,
NumPy adding the dense terms left to right as the expression is written. Values are drawn
over many orders of magnitude so that another order of additions (a tree, or a different
grouping) shows. The kernels each step compiles must hold at most three terms. The operands
here are small, so the tests chain sums of any size (``MIN_ENTRIES`` set to 0) but the one
that checks that rule."""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import coiter
from coiter import api
from coiter.notation.ast import Add, Neg, Sub
from coiter.planning import sums
from coiter.planning.sums import ALWAYS_TERMS, MIN_ENTRIES, MIN_TERMS, STEP_TERMS

M, N = 9, 7


@pytest.fixture(autouse=True)
def chain_small_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sums, "MIN_ENTRIES", 0)


def _sparse(rng: np.random.Generator, shape: tuple[int, ...], density: float = 0.3) -> np.ndarray:
    """A dense array with about ``density`` of its entries nonzero, over 12 orders of magnitude."""
    values = rng.standard_normal(shape) * 10.0 ** rng.uniform(-6, 6, shape)
    return np.where(rng.random(shape) < density, values, 0.0)


def _widest(e: Any) -> int:
    """Terms of the top-level sum of ``e``."""
    if isinstance(e, (Add, Sub)):
        return _widest(e.a) + _widest(e.b)
    if isinstance(e, Neg):
        return _widest(e.operand)
    return 1


@pytest.fixture
def kernel_sums(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The number of top-level terms of every assignment a kernel is looked up for."""
    seen: list[int] = []
    real = api.kernel_for

    def recording(a: Any, tensors: Any, out_format: Any) -> Any:
        seen.append(_widest(a.rhs))
        return real(a, tensors, out_format)

    monkeypatch.setattr(api, "kernel_for", recording)
    yield seen


# one term: (sign, kind, format) with kind plain, scaled, a product of two operands, an
# element-wise function or a transposed operand
TERM = st.tuples(st.booleans(), st.sampled_from(["plain", "scaled", "product", "abs", "transposed"]),
                 st.sampled_from(["csr", "dcsr", "csc"]))


@settings(max_examples=20, deadline=None)
@given(terms=st.lists(TERM, min_size=MIN_TERMS, max_size=8), seed=st.integers(0, 2**32 - 1))
def test_wide_sums_match_numpy_left_to_right(terms: list[tuple[bool, str, str]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    operands: dict[str, Any] = {}
    text: list[str] = []
    dense: list[np.ndarray] = []
    for k, (negative, kind, fmt) in enumerate(terms):
        name = f"B{k}"
        value = _sparse(rng, (M, N))
        if kind == "transposed":
            operands[name] = coiter.Tensor.from_numpy(value.T.copy(), format=fmt)
            term = f"{name}(j,i)"
        else:
            operands[name] = coiter.Tensor.from_numpy(value, format=fmt)
            term = f"{name}(i,j)"
        if kind == "abs":
            term, value = f"abs({term})", abs(value)
        elif kind == "scaled":
            term, value = f"2.5 * {term}", 2.5 * value
        elif kind == "product":
            other = _sparse(rng, (M, N), 0.6)
            operands[f"C{k}"] = coiter.Tensor.from_numpy(other, format=fmt)
            term, value = f"{term} * C{k}(i,j)", value * other
        text.append(("- " if negative else "+ ") + term)
        dense.append(-value if negative and k == 0 else value)
    expected = dense[0]
    for (negative, _, _), value in zip(terms[1:], dense[1:]):
        expected = expected - value if negative else expected + value
    rhs = " ".join(text)
    rhs = rhs[2:] if rhs.startswith("+ ") else "-" + rhs[2:]
    got = coiter.evaluate(f"A(i,j) = {rhs}", **operands)
    assert not got.format.is_dense
    np.testing.assert_array_equal(got.to_numpy(), expected)


def test_no_kernel_adds_more_than_three_terms(kernel_sums: list[int]) -> None:
    rng = np.random.default_rng(1)
    values = [_sparse(rng, (M, N)) for _ in range(7)]
    operands = {f"B{k}": sp.csr_array(v) for k, v in enumerate(values)}
    got = coiter.evaluate("A(i,j) = " + " + ".join(f"B{k}(i,j)" for k in range(7)), **operands)
    expected = values[0]
    for v in values[1:]:
        expected = expected + v
    np.testing.assert_array_equal(got.to_numpy(), expected)
    # 3 terms, then the running sum and two more, twice
    assert kernel_sums == [STEP_TERMS, STEP_TERMS, STEP_TERMS]


def test_operators_chain_their_wide_sums(kernel_sums: list[int]) -> None:
    rng = np.random.default_rng(2)
    values = [_sparse(rng, (M, N)) for _ in range(6)]
    T = [coiter.Tensor.from_numpy(v, format="csr") for v in values]
    got = (T[0] - T[1] + 2 * T[2] + T[3] * T[4] - T[5]).evaluate()
    expected = values[0] - values[1] + 2 * values[2] + values[3] * values[4] - values[5]
    np.testing.assert_array_equal(got.to_numpy(), expected)
    assert kernel_sums and max(kernel_sums) <= STEP_TERMS
    # and the same again (no kernel remembered for the whole sum)
    np.testing.assert_array_equal((T[0] - T[1] + 2 * T[2] + T[3] * T[4] - T[5]).to_numpy(), expected)


def test_the_dsl_chains_its_wide_sums(kernel_sums: list[int]) -> None:
    rng = np.random.default_rng(3)
    values = [_sparse(rng, (M, N)) for _ in range(5)]
    T = [coiter.Tensor.from_numpy(v, format="csr") for v in values]
    i, j = coiter.index_vars("i j")
    A = coiter.Tensor((M, N), format="csr")
    A[i, j] = T[0][i, j] + T[1][i, j] - T[2][i, j] + T[3][i, j] + T[4][i, j]
    expected = values[0] + values[1] - values[2] + values[3] + values[4]
    np.testing.assert_array_equal(A.to_numpy(), expected)
    assert kernel_sums and max(kernel_sums) <= STEP_TERMS


@pytest.mark.parametrize("shape, fmt", [((40,), "s"), ((5, 6, 4), "sss"), ((5, 6, 4), "dss")])
def test_vectors_and_tensors_of_order_three(shape: tuple[int, ...], fmt: str,
                                             kernel_sums: list[int]) -> None:
    rng = np.random.default_rng(4)
    values = [_sparse(rng, shape) for _ in range(5)]
    subs = ",".join("ijk"[:len(shape)])
    operands = {f"B{k}": coiter.Tensor.from_numpy(v, format=fmt) for k, v in enumerate(values)}
    # (a vector's default result is dense)
    got = coiter.evaluate(f"A({subs}) = " + " - ".join(f"B{k}({subs})" for k in range(5)),
                          fmt, **operands)
    assert got.format == coiter.parse_format(fmt)
    expected = values[0]
    for v in values[1:]:
        expected = expected - v
    np.testing.assert_array_equal(got.to_numpy(), expected)
    assert max(kernel_sums) <= STEP_TERMS


def test_sums_that_stay_one_kernel(kernel_sums: list[int]) -> None:
    """A dense result, a dense operand, a fill value, a term summing over another variable:
    one kernel, right values."""
    rng = np.random.default_rng(5)
    values = [_sparse(rng, (M, N)) for _ in range(4)]
    S = {f"B{k}": sp.csr_array(v) for k, v in enumerate(values)}
    text = "A(i,j) = B0(i,j) + B1(i,j) + B2(i,j) + B3(i,j)"
    total = values[0] + values[1] + values[2] + values[3]
    np.testing.assert_array_equal(coiter.evaluate(text, "dd", **S).to_numpy(), total)
    np.testing.assert_array_equal(coiter.evaluate(text, **{**S, "B3": values[3]}).to_numpy(), total)
    filled = coiter.Tensor.from_numpy(np.where(values[3] != 0, values[3], 1.0), format="csr",
                                      fill_value=1.0)
    np.testing.assert_array_equal(coiter.evaluate(text, **{**S, "B3": filled}).to_numpy(),
                                  values[0] + values[1] + values[2] + np.where(values[3] != 0, values[3], 1.0))
    x = _sparse(rng, (N, N))
    got = coiter.evaluate("A(i,j) = B0(i,j) + B1(i,j) + B2(i,j) + B3(i,k) * X(k,j)",
                          **S, X=sp.csr_array(x))
    np.testing.assert_allclose(got.to_numpy(), values[0] + values[1] + values[2] + values[3] @ x,
                               rtol=1e-12, atol=0)
    assert kernel_sums == [4, 4, 4, 4]


def test_a_wide_sum_names_a_bad_operand() -> None:
    S = {f"B{k}": sp.csr_array(np.eye(3)) for k in range(4)}
    text = "A(i,j) = B0(i,j) + B1(i,j) + B2(i,j) + B3(i,j)"
    with pytest.raises(coiter.ShapeError, match="unexpected operand.*Z"):
        coiter.evaluate(text, **S, Z=sp.csr_array(np.eye(3)))
    with pytest.raises(coiter.ShapeError, match="operand B2 has order 1"):
        coiter.evaluate(text, **{**S, "B2": np.ones(3)})
    with pytest.raises(coiter.ShapeError, match="missing operand.*B3"):
        coiter.evaluate(text, **{k: v for k, v in S.items() if k != "B3"})
    with pytest.raises(coiter.ShapeError, match=r"index variable i has size 3 in B0 \(mode 0\) but 4 in B1 \(mode 0\)"):
        coiter.evaluate(text, **{**S, "B1": sp.csr_array(np.eye(4))})


def test_small_sums_of_few_terms_stay_one_kernel(monkeypatch: pytest.MonkeyPatch,
                                                  kernel_sums: list[int]) -> None:
    """Below MIN_ENTRIES stored entries a sum of fewer than ALWAYS_TERMS terms is one kernel
    (each step of a chain costs more than a small merge); from MIN_ENTRIES on, or with more
    terms, a chain."""
    monkeypatch.setattr(sums, "MIN_ENTRIES", MIN_ENTRIES)
    rng = np.random.default_rng(6)
    n = ALWAYS_TERMS - 1
    for shape, result in [((M, N), "A"), ((400, 400), "C")]:
        # (another spelling: evaluate runs a spelling's next calls as it chose for the first)
        text = f"{result}(i,j) = " + " + ".join(f"B{k}(i,j)" for k in range(n))
        values = [_sparse(rng, shape, 0.02) for _ in range(n)]
        got = coiter.evaluate(text, **{f"B{k}": sp.csr_array(v) for k, v in enumerate(values)})
        expected = values[0]
        for v in values[1:]:
            expected = expected + v
        np.testing.assert_array_equal(got.to_numpy(), expected)
        entries = sum(np.count_nonzero(v) for v in values)
        assert (entries >= MIN_ENTRIES) == (shape != (M, N))
    assert kernel_sums == [n, STEP_TERMS, STEP_TERMS]
    values = [_sparse(rng, (M, N)) for _ in range(ALWAYS_TERMS)]
    text = "A(i,j) = " + " + ".join(f"B{k}(i,j)" for k in range(ALWAYS_TERMS))
    coiter.evaluate(text, **{f"B{k}": sp.csr_array(v) for k, v in enumerate(values)})
    assert max(kernel_sums[3:]) <= STEP_TERMS


def test_the_written_order_is_kept(kernel_sums: list[int]) -> None:
    """A parenthesized sum is one term, added in its own order (opening it into the fold
    would add otherwise); a negated sum is chained with its signs turned (negation is
    exact)."""
    rng = np.random.default_rng(7)
    v = [_sparse(rng, (M, N)) for _ in range(6)]
    S = {f"B{k}": sp.csr_array(x) for k, x in enumerate(v)}
    got = coiter.evaluate("A(i,j) = B0(i,j) + (B1(i,j) + B2(i,j)) - (B3(i,j) - B4(i,j)) + B5(i,j)", **S)
    np.testing.assert_array_equal(got.to_numpy(), v[0] + (v[1] + v[2]) - (v[3] - v[4]) + v[5])
    assert kernel_sums == [5, 2]  # ((B0 + (B1 + B2)) - (B3 - B4)), then + B5
    got = coiter.evaluate("A(i,j) = -(B0(i,j) + B1(i,j) - B2(i,j) + B3(i,j) + B4(i,j) + B5(i,j))", **S)
    np.testing.assert_array_equal(got.to_numpy(), -(v[0] + v[1] - v[2] + v[3] + v[4] + v[5]))
    assert len(kernel_sums) > 2 and max(kernel_sums[1:]) <= STEP_TERMS


@pytest.mark.parametrize("dtypes", [("int8",) * 6, ("int8",) * 5 + ("float64",),
                                    ("float32",) * 3 + ("float64",) * 3])
def test_every_term_is_added_in_the_result_type(dtypes: tuple[str, ...], kernel_sums: list[int]) -> None:
    """Regression: a chain whose first step held only int8 terms added them in int8 (wrapping
    at 100 + 100 + 100) where the one kernel adds everything in the sum's type, float64.
    Such a sum stays one kernel; terms of one type chain, wrapping as the one kernel does."""
    rng = np.random.default_rng(8)
    values = [np.where(rng.random((M, N)) < 0.4, 100, 0).astype(t) for t in dtypes]
    values[-1] = values[-1] + np.asarray(0.5 if values[-1].dtype.kind == "f" else 1, values[-1].dtype) \
        * (values[-1] != 0)
    ops = {f"B{k}": coiter.Tensor.from_numpy(v, format="csr") for k, v in enumerate(values)}
    got = coiter.evaluate("A(i,j) = " + " + ".join(f"B{k}(i,j)" for k in range(len(values))), **ops)
    whole = np.result_type(*values)
    expected = values[0].astype(whole)
    for v in values[1:]:
        expected = expected + v.astype(whole)
    assert got.dtype == whole
    np.testing.assert_array_equal(got.to_numpy(), expected)
    chained = len(set(dtypes)) == 1
    assert (max(kernel_sums) <= STEP_TERMS) == chained


def test_tensors_of_order_three_read_in_other_orders_stay_one_kernel(kernel_sums: list[int]) -> None:
    """A step over permuted reads of a 3-tensor would merge thousands of cases: no chain."""
    rng = np.random.default_rng(9)
    c = _sparse(rng, (4, 4, 4))
    C = coiter.Tensor.from_numpy(c, format="sss")
    got = coiter.evaluate("A(i,j,k) = C(i,j,k) + C(k,i,j) + C(j,k,i) + C(i,j,k)", C=C)
    expected = c + np.einsum("kij->ijk", c) + np.einsum("jki->ijk", c) + c
    np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-12)
    assert kernel_sums == [4]


def test_sums_of_bools(kernel_sums: list[int]) -> None:
    """Operators write a sum of bools bool(bool(A + B) + C) (NumPy's "or"): the idle casts
    do not keep it from chaining (seed 165 of the chain fuzzer took 72 s to compile the
    one kernel). With a difference it stays one kernel, which adds the 0/1 values on in
    its type where a step would store each partial sum as a bool."""
    rng = np.random.default_rng(10)
    values = [rng.random((M, N)) < 0.3 for _ in range(7)]
    T = [coiter.Tensor.from_numpy(v, format="csr") for v in values]
    got = T[0] + T[1] + T[2] + T[3] + T[4] + T[5] + T[6]
    np.testing.assert_array_equal(got.to_numpy(), np.logical_or.reduce(values))
    assert max(kernel_sums) <= STEP_TERMS
    kernel_sums.clear()
    ops = {f"B{k}": t for k, t in enumerate(T)}
    ops = {n: ops[n] for n in ("B0", "B1", "B2", "B3")}
    text = "A(i,j) = B0(i,j) - B1(i,j) + B2(i,j) + B3(i,j)"
    got = coiter.evaluate(text, **ops)
    one = coiter.compile(text, formats={**{n: "csr" for n in ops}, "A": "csr"})(**ops)
    np.testing.assert_array_equal(got.to_numpy(), one.to_numpy())
    assert kernel_sums == [4]
