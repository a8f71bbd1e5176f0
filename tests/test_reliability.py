"""Regression tests for the defects of the reliability issue (silently wrong results, crashes,
internal errors): each asserts the value NumPy computes or the typed error coiter raises."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import coiter
from coiter import DTypeError, FormatError

from helpers import check, random_array, tensor


# --------------------------------------------------------------------- silently wrong results

@pytest.mark.parametrize("out_format", ["dds:2,1,0", "dds:1,0,2", "dds:0,2,1", "dss:2,1,0"])
@pytest.mark.parametrize("b_format", ["csr", "coo", "dcsr", "dense"])
def test_result_with_permuted_dense_levels_above_a_compressed_one(out_format, b_format):
    # an appended level's parents must be visited in storage order: with the loops in B's
    # order (j, k) and the result stored k, j, i, entries landed in the wrong segments
    rng = np.random.default_rng(1)
    d, b = rng.random(3), random_array(rng, (4, 5), 0.3)
    out = coiter.evaluate("A(i,j,k) = d(i) * B(j,k)", out_format=out_format, d=d,
                          B=tensor(b, b_format))
    check(out, np.einsum("i,jk->ijk", d, b))


def test_permuted_four_level_result():
    rng = np.random.default_rng(2)
    d = random_array(rng, (2, 3, 4, 5), 0.4)
    check(coiter.evaluate("A(i,j,k,l) = D(i,j,k,l) * 2", out_format="ddss:3,2,1,0", D=d), 2 * d)


@pytest.mark.parametrize("seed", range(4))
def test_union_of_coo_operands_sharing_a_singleton_and_a_top_level(seed):
    # C's rows repeat in its non-unique top level; merged with B's column (a singleton) the
    # repeated rows must be walked together, not one entry at a time
    rng = np.random.default_rng(seed)
    b, c = random_array(rng, (3, 4), 0.4), random_array(rng, (4, 5), 0.4)
    out = coiter.evaluate("A(i,k,l) = B(i,k) + C(k,l)", out_format="ddd",
                          B=tensor(b, "coo"), C=tensor(c, "coo"))
    check(out, b[:, :, None] + c[None, :, :])


def _repeated_pairs() -> np.ndarray:
    b = np.zeros((3, 3, 4))
    b[0, 0, 1], b[0, 0, 2], b[1, 2, 3] = 1.0, 2.0, 3.0
    return b


def test_a_level_declared_unique_whose_paths_repeat_is_refused():
    b = _repeated_pairs()
    with pytest.raises(FormatError, match=r"level 2 \(singleton\) is declared unique.*\(0, 0\)"):
        coiter.Tensor.from_numpy(b, format="uqq")
    levels = [{"pos": np.array([0, 3]), "crd": np.array([0, 0, 1])}, {"crd": np.array([0, 0, 2])},
              {"crd": np.array([1, 2, 3])}]
    with pytest.raises(FormatError, match="T: level 2"):
        coiter.Tensor.from_arrays((3, 3, 4), "uqq", levels, np.array([1.0, 2.0, 3.0]), name="T")
    with pytest.raises(FormatError, match=r"\(0, 2\)"):  # a 2-D COO with a duplicate entry
        coiter.Tensor.from_arrays((3, 4), "uq", [{"pos": np.array([0, 3]), "crd": np.array([0, 0, 1])},
                                                 {"crd": np.array([2, 2, 3])}], np.ones(3))
    # the non-unique declaration of the same data computes
    t = coiter.Tensor.from_arrays((3, 3, 4), "ucq", levels, np.array([1.0, 2.0, 3.0]))
    c = np.arange(1.0, 5.0)
    check(coiter.evaluate("A(i,j) = B(i,j,k) * c(k)", B=t, c=c), b @ c)
    check(coiter.evaluate("A(i,j) = B(i,j,k) * c(k)", B=tensor(b, "ucq"), c=c), b @ c)


@pytest.mark.parametrize("literal, dtype", [(10**30, np.float64), (10**30, np.float32),
                                            (3 * 10**9, np.int64), (2**63 - 1, np.int64),
                                            (-2**63, np.int64), (-(2**40), np.int64)])
def test_integer_literals_keep_their_value(literal, dtype):
    x = np.arange(1, 5).astype(dtype)
    out = coiter.evaluate(f"y(i) = x(i) * {literal}", x=x).to_numpy()
    np.testing.assert_array_equal(out, x * literal)


@pytest.mark.parametrize("literal, dtype", [(10**30, np.int64), (2**63, np.int64),
                                            (2**40, np.int32), (10**400, np.float64)])
def test_integer_literals_out_of_the_kernels_range_are_refused(literal, dtype):
    x = np.arange(1, 5).astype(dtype)
    with pytest.raises(OverflowError):  # NumPy's own verdict on the same product
        x * literal
    with pytest.raises(DTypeError, match=str(literal)[:12]):
        coiter.evaluate(f"y(i) = x(i) * {literal}", x=x)


def test_literals_print_their_value_not_their_repr():
    class Hostile(float):
        def __repr__(self) -> str:
            return "0; } int evil() { return 1"

        __str__ = __repr__

    i = coiter.index_vars("i")
    x = coiter.Tensor.from_numpy(np.arange(3.0), name="x")
    y = coiter.Tensor.from_numpy(np.zeros(3), name="y")
    y[i] = x[i] * Hostile(2.5)
    np.testing.assert_array_equal(y.to_numpy(), np.arange(3.0) * 2.5)


def test_dsl_tensors_sharing_a_name_are_distinct_operands():
    i = coiter.index_vars("i")
    a = coiter.Tensor.from_numpy(np.arange(3.0), name="B")
    b = coiter.Tensor.from_numpy(np.full(3, 10.0), name="B")
    y = coiter.Tensor.from_numpy(np.zeros(3), name="B")
    y[i] = a[i] + b[i] * a[i]
    np.testing.assert_array_equal(y.to_numpy(), np.arange(3.0) * 11)
    y[i] = y[i] + b[i]  # the result reads its own old value, and b is still b
    np.testing.assert_array_equal(y.to_numpy(), np.arange(3.0) * 11 + 10)


def test_tns_coordinates_beyond_2_53_stay_exact(tmp_path):
    big = 2**53 + 1
    path = tmp_path / "wide.tns.gz"
    path.write_bytes(gzip.compress(f"{big} 1 2.5\n1 2 1.0\n".encode()))
    t = coiter.read(path)
    assert t.shape == (big, 2)
    coords, vals = t.storage.to_coords()
    assert sorted(map(tuple, coords.T.tolist())) == [(0, 1), (big - 1, 0)]
    (tmp_path / "frac.tns").write_text(f"{big}.5 1 2.5\n")
    with pytest.raises(FormatError, match="integers"):
        coiter.read(tmp_path / "frac.tns")
