"""Index variables as values: ``a(i,j) = b(i,j) * (i*4 + j)`` (TACO's index-variable
expressions), checked against NumPy with coordinate grids, in every front end, format and
schedule that walks coordinates differently."""
from __future__ import annotations

import numpy as np
import pytest

import coiter
from coiter.notation.ast import Coordinate, IndexVar
from coiter.notation.parser import parse

RNG = np.random.default_rng(11)
B = RNG.random((5, 6)) * (RNG.random((5, 6)) < 0.4)
I, J = np.meshgrid(np.arange(5), np.arange(6), indexing="ij")
FORMATS = ["dd", "csr", "dcsr", "coo", "csc", "dh", coiter.bcsr((2, 2)), coiter.dia(), coiter.ell()]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("text,want", [
    ("a(i,j) = b(i,j) * (i*4 + j)", B * (I * 4 + J)),
    ("a(i) = b(i,j) * (i - j)", (B * (I - J)).sum(axis=1)),
    ("a(i,j) = b(i,j) + i", B + I),
    ("a(j) = max(b(i,j), j / 10)", np.maximum(B, J / 10).sum(axis=0)),
])
def test_coordinates_as_values(fmt, text: str, want: np.ndarray) -> None:
    got = coiter.evaluate(text, b=coiter.Tensor.from_numpy(B, format=fmt))
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-12, atol=1e-12)


def test_a_bare_name_is_a_coordinate_only_when_an_access_has_that_index() -> None:
    a = parse("a(i) = b(i) * i + k")
    assert a.rhs.a.b == Coordinate(IndexVar("i"))  # b(i) * i
    assert str(a.rhs.b) == "k()"  # a scalar tensor k
    got = coiter.evaluate("a(i) = b(i) * i + k", b=np.arange(4.0), k=0.5)
    np.testing.assert_allclose(got.to_numpy(), np.arange(4.0) ** 2 + 0.5)
    np.testing.assert_array_equal(coiter.evaluate("a(i) = i * 2", out_shape=(4,)).to_numpy(),
                                  np.arange(4) * 2)


@pytest.mark.parametrize("schedule,fmt", [
    ("split(i,i0,i1,2)", "csr"), ("pos(j,jp,b(i,j)),split(jp,j0,j1,2)", "csr"), ("fuse(i,j,f)", "dd"),
    ("reorder(j,i)", "dd"),
])
def test_coordinates_under_schedules(schedule: str, fmt: str) -> None:
    k = coiter.compile("a(i,j) = b(i,j) * (i*4 + j)", formats={"b": fmt, "a": fmt}, schedule=schedule)
    np.testing.assert_allclose(k(b=coiter.Tensor.from_numpy(B, format=fmt)).to_numpy(), B * (I * 4 + J))


def test_index_variables_in_python_arithmetic() -> None:
    i, j = coiter.index_vars("i j")
    b = coiter.Tensor.from_numpy(B, format="csr")
    out = coiter.Tensor((5, 6), format="csr")
    out[i, j] = b[i, j] * (i * 4 + j) - 1.5 * j * b[i, j] + b[i, j] / (i + 1)
    np.testing.assert_allclose(out.to_numpy(), B * (I * 4 + J) - 1.5 * J * B + B / (I + 1))


def test_coordinates_are_int64_values() -> None:
    # the coordinate's type joins NumPy's promotion: int32 * coordinate is int64
    b = np.arange(6, dtype=np.int32)
    got = coiter.evaluate("a(i) = b(i) * i", b=b)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.to_numpy(), b.astype(np.int64) * np.arange(6))
