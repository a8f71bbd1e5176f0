"""The bad-input catalog (docs/errors.md): every kind of bad input raises its typed error,
a subclass of ``coiter.CoiterError``, whose message names the culprit."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter import (
    ArgumentError, CacheError, DensifyError, DTypeError, FormatError, KernelError, ParseError,
    ScheduleError, ShapeError,
)

X = np.arange(3.0)
A = sp.random(3, 3, 0.5, format="csr", random_state=0)
SCALE = "y(i) = x(i) * 2"


def _kernel(expr: str = SCALE, **kw: Any) -> coiter.Kernel:
    return coiter.compile(expr, **kw)


def _compute_into_identity() -> coiter.Tensor:
    k = coiter.compile("A(i,j) = B(i,j) * 2", formats={"A": "csr", "B": "csr"})
    return k.compute(k.assemble(B=sp.eye(3, format="csr")), B=A)


def _diagonal_result() -> None:
    i = coiter.IndexVar("i")
    x, d = coiter.Tensor.from_numpy(X, name="x"), coiter.Tensor((3, 3), name="D")
    d[i, i] = x[i]
    d.to_numpy()


def _file(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


# (kind, call taking a scratch folder, error type, text the message must contain)
CATALOG: list[tuple[str, Callable[[Path], Any], type, str]] = [
    # expressions
    ("expression of another type", lambda t: coiter.evaluate(42, x=X), ArgumentError, "got int"),
    ("empty expression", lambda t: coiter.parse(""), ParseError, "result tensor name"),
    ("unbalanced parenthesis", lambda t: coiter.parse("y(i) = (x(i) * 2"), ParseError, "')'"),
    ("unknown character", lambda t: coiter.parse("y(i) = x(i) $ 2"), ParseError, "'$'"),
    ("missing left-hand side", lambda t: coiter.parse("= x(i)"), ParseError, "'='"),
    ("repeated result index", lambda t: coiter.parse("A(i,i) = B(i,j)"), ParseError, "index variable i"),
    ("diagonal of unequal modes", lambda t: coiter.evaluate("y(i) = B(i,i) * 2", B=np.ones((2, 3))),
     ShapeError, "B(i,i) reads a diagonal of modes of sizes 2 and 3"),
    ("result written on its diagonal (Python DSL)", lambda t: _diagonal_result(),
     ArgumentError, "the result D(i,i) repeats index i"),
    ("index variable that is not an identifier", lambda t: coiter.index_vars("1a"), ParseError, "'1a'"),
    ("einsum subscripts of another type", lambda t: coiter.einsum(5, A), ArgumentError, "got int"),
    ("einsum output letter unused", lambda t: coiter.einsum("ij,j->k", A, X), ParseError, "'k'"),
    ("einsum operand count", lambda t: coiter.einsum("ij,j->i", A), ParseError, "2 operand(s)"),
    ("literal beyond the kernel's integers",
     lambda t: coiter.evaluate("y(i) = x(i) * 100000000000000000000", x=np.arange(3)), DTypeError,
     "100000000000000000000"),
    ("intrinsic with a wrong number of arguments", lambda t: coiter.parse("y(i) = max(x(i))"),
     ParseError, "max takes 2 arguments"),
    ("chained comparison", lambda t: coiter.parse("y(i) = x(i) < z(i) < w(i)"), ParseError,
     "do not chain"),
    ("NumPy function without an intrinsic",
     lambda t: np.logaddexp(coiter.Tensor.from_numpy(X)[coiter.index_vars("i")[0]], 1.0),
     ArgumentError, "logaddexp"),
    ("intrinsic without a version for the type",
     lambda t: coiter.evaluate("y(i) = max(z(i), 1)", z=X + 1j), DTypeError, "max of complex"),
    ("index set reaching past its mode", lambda t: coiter.evaluate("y(i) = x(i({0,3}))", x=X),
     ShapeError, "the index set i({0,3}) of x reaches coordinate 3"),
    ("`pattern_of` naming no factor of the whole right-hand side",
     lambda t: coiter.compile("O(i,j,l) = B(i,j,k) * C(k,l)", formats={"B": "sss", "C": "csr", "O": "ssd"},
                              pattern_of="C"), ArgumentError, "C is not one"),
    ("index set on the result", lambda t: coiter.compile("y(i({0,1})) = x(i)"), ArgumentError,
     "the result y(i({0,1})) has the index set"),
    ("empty index set (Python DSL)", lambda t: coiter.IndexVar("i")[[]], ArgumentError,
     "the index set of i is empty"),
    # operands
    ("None operand", lambda t: coiter.evaluate(SCALE, x=None), ArgumentError, "operand x"),
    ("operand of an unknown type", lambda t: coiter.evaluate(SCALE, x={"a": 1}), ArgumentError, "operand x"),
    ("object array", lambda t: coiter.evaluate(SCALE, x=np.array([1, "a", None], dtype=object)),
     DTypeError, "operand x"),
    ("array of strings", lambda t: coiter.evaluate(SCALE, x=np.array(["a", "b"])), DTypeError, "<U1"),
    ("unsupported dtype", lambda t: coiter.evaluate(SCALE, x=np.ones(3, "m8[s]")), DTypeError, "timedelta64"),
    ("ragged nested lists", lambda t: coiter.evaluate("y(i) = x(i,j) * 2", x=[[1, 2], [3]]),
     ShapeError, "operand x"),
    ("missing operand", lambda t: coiter.evaluate("y(i) = x(i) * z(i)", x=X), ShapeError, "z"),
    ("misspelled operand", lambda t: coiter.evaluate(SCALE, xx=X), ShapeError, "xx"),
    ("operand of another order", lambda t: coiter.evaluate(SCALE, x=np.ones((2, 2))), ShapeError,
     "operand x has order 2"),
    ("scalar for a vector", lambda t: coiter.evaluate(SCALE, x=3.0), ShapeError, "operand x has order 0"),
    ("sizes that disagree", lambda t: coiter.evaluate("y(i) = x(i) * z(i)", x=X, z=np.ones(4)),
     ShapeError, "index variable i"),
    ("corrupt SciPy index pointers",
     lambda t: coiter.evaluate("y(i) = B(i,j) * x(j)", x=X, B=sp.csr_matrix(
         (np.ones(1), np.array([0]), np.array([0, 2, 1, 1])), shape=(3, 3))), FormatError, "B level 2"),
    ("malformed level arrays", lambda t: coiter.Tensor.from_arrays(
        (2, 2), "ds", [{}, {"pos": np.array([0, 5, 1]), "crd": np.array([0])}], np.ones(1), name="M"),
     FormatError, "M level 2"),
    ("level declared unique that is not", lambda t: coiter.Tensor.from_arrays(
        (3, 4), "uq", [{"pos": np.array([0, 2]), "crd": np.array([1, 1])}, {"crd": np.array([2, 2])}],
        np.ones(2), name="U"), FormatError, "U: level 2"),
    ("coordinate out of range", lambda t: coiter.Tensor.from_coo(np.array([[5]]), np.array([1.0]), (3,)),
     ShapeError, "coordinate 5"),
    ("non-integer coordinates", lambda t: coiter.Tensor.from_coo(np.array([[0.5]]), np.array([1.0]), (3,)),
     DTypeError, "float64"),
    ("negative dimension", lambda t: coiter.Tensor.from_coo(np.array([[0]]), np.array([1.0]), (-3,)),
     ShapeError, "(-3,)"),
    ("dimension beyond int64", lambda t: coiter.Tensor.from_coo(np.zeros((1, 0), int), np.zeros(0), (2**64,)),
     ShapeError, "18446744073709551616"),
    ("tensor of strings", lambda t: coiter.Tensor.from_numpy("abc"), DTypeError, "<U3"),
    # formats
    ("unknown level letter", lambda t: _kernel(formats={"x": "z"}), FormatError, "'z'"),
    ("format of another order", lambda t: _kernel(formats={"x": "ds"}), FormatError, "format of x"),
    ("format for a tensor not in the expression", lambda t: _kernel(formats={"q": "s"}),
     FormatError, "['q']"),
    ("format of another type", lambda t: _kernel(formats={"x": 3}), FormatError, "format of x"),
    ("formats that are not a mapping", lambda t: _kernel(formats=["s"]), ArgumentError, "got list"),
    ("mode ordering that is no permutation", lambda t: coiter.compile(
        "y(i,j) = x(i,j) * 2", formats={"x": "ds:0,0"}), FormatError, "(0, 0)"),
    ("result format that cannot exist", lambda t: coiter.evaluate(SCALE, out_format="qq", x=X),
     FormatError, "singleton"),
    ("conversion to a format that cannot exist",
     lambda t: coiter.Tensor.from_numpy(X).asformat("qqq"), FormatError, "singleton"),
    ("result shape of another order", lambda t: coiter.evaluate(SCALE, out_shape=(3, 3), x=X),
     ShapeError, "(3, 3)"),
    ("result shape that disagrees", lambda t: coiter.evaluate(SCALE, out_shape=(5,), x=X),
     ShapeError, "size 5 in the result y"),
    ("result shape of another type", lambda t: coiter.evaluate(SCALE, out_shape="3", x=X),
     ShapeError, "'3'"),
    ("dense result beyond int64 positions", lambda t: coiter.evaluate(
        "A(i,j,k) = B(i,j,k) * 2", out_format="dds",
        B=coiter.Tensor.from_coo(np.zeros((3, 0), int), np.zeros(0), (2**32, 2**32, 4))),
     ShapeError, "result A"),
    # compile options and schedules
    ("schedule of another type", lambda t: _kernel(schedule=42), ArgumentError, "got int"),
    ("unknown scheduling command", lambda t: _kernel(schedule="splat(i,a,b,2)"), ScheduleError, "'splat'"),
    ("malformed schedule", lambda t: _kernel(schedule="split(i,i0"), ScheduleError, "split(i,i0"),
    ("split factor beyond int32", lambda t: _kernel(schedule=f"split(i,i0,i1,{2**70})"),
     ScheduleError, str(2**70)),
    ("unroll count beyond the compiler's", lambda t: _kernel(schedule="unroll(i,1000000000)"),
     ScheduleError, "1000000000"),
    ("unknown workspace policy", lambda t: _kernel(workspace="bogus"), FormatError, "'bogus'"),
    ("negative workspace memory", lambda t: _kernel(workspace_memory=-5), ArgumentError, "-5"),
    ("unknown target", lambda t: _kernel(target="gpu"), ArgumentError, "'gpu'"),
    ("fast_math of another type", lambda t: _kernel(fast_math="yes"), ArgumentError, "'yes'"),
    ("unknown dtype", lambda t: _kernel(dtype="float128x"), DTypeError, "float128x"),
    ("unsupported kernel dtype", lambda t: _kernel(dtype=np.longdouble), DTypeError,
     np.dtype(np.longdouble).name),
    # calls
    ("zero threads", lambda t: _kernel()(x=X, threads=0), ArgumentError, "got 0"),
    ("threads beyond any machine", lambda t: _kernel()(x=X, threads=100000), ArgumentError, "100000"),
    ("threads of another type", lambda t: _kernel()(x=X, threads="2"), ArgumentError, "'2'"),
    ("compute pattern of another type", lambda t: coiter.compile(
        "A(i,j) = B(i,j) * 2", formats={"A": "csr", "B": "csr"}).compute("x", B=A),
     ArgumentError, "operand pattern"),
    ("compute pattern the operands do not produce", lambda t: _compute_into_identity(), KernelError,
     "pattern"),
    # the Python DSL
    ("DSL access with the wrong number of indices", lambda t: coiter.Tensor.from_numpy(X, name="v")[
        coiter.index_vars("i j")], ShapeError, "v has order 1"),
    ("DSL subscript that is no index variable", lambda t: coiter.Tensor.from_numpy(X)[0.5],
     ArgumentError, "got 0.5"),
    ("sparse tensor densified past the limit", lambda t: np.asarray(coiter.Tensor(
        (20000, 20000), format="csr", name="Big")), DensifyError, "Big (20000, 20000)"),
    # files and the cache
    ("file of an unknown type", lambda t: coiter.read(_file(t, "a.txt", "1 2 3")), FormatError, "a.txt"),
    ("malformed Matrix Market file", lambda t: coiter.read(_file(
        t, "b.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 x 3\n")), FormatError, "b.mtx"),
    ("malformed FROSTT file", lambda t: coiter.read(_file(t, "c.tns", "1 2\n1 2 3\n")), FormatError, "c.tns"),
    ("FROSTT file of complex values", lambda t: coiter.write(
        t / "d.tns", coiter.Tensor.from_numpy(np.ones(2, complex), name="Z")), DTypeError, "Z"),
    ("cache folder that is a file", None, CacheError, "cannot use"),
]


@pytest.mark.parametrize("kind, call, error, culprit", CATALOG, ids=[c[0] for c in CATALOG])
def test_bad_input_raises_its_typed_error(kind, call, error, culprit, tmp_path, monkeypatch):
    if call is None:  # the cache folder: set through the environment
        folder = _file(tmp_path, "not-a-folder", "")
        monkeypatch.setenv("COITER_CACHE_DIR", str(folder))
        call = lambda t: coiter.compile("y(i) = x(i) * 7")(x=X)  # noqa: E731
    with pytest.raises(error) as info:
        call(tmp_path)
    assert isinstance(info.value, coiter.CoiterError)
    assert culprit in str(info.value), str(info.value)


def test_the_catalog_covers_at_least_forty_kinds_and_the_docs_list_them():
    assert len(CATALOG) >= 40
    table = (Path(__file__).parent.parent / "docs" / "errors.md").read_text()
    missing = [kind for kind, *_ in CATALOG if f"| {kind} |" not in table]
    assert not missing, f"docs/errors.md lacks rows for {missing}"
