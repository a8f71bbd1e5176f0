"""Rutherford-Boeing (.rb) input: hand-written files of each value kind and symmetry,
checked against the dense matrices they describe."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

import coiter
from coiter import FormatError

# 4 x 3, column-compressed: col 0 rows 0, 2; col 1 row 1; col 2 rows 0, 3
UNSYMMETRIC = """\
A 4x3 real matrix                                                       RB_TEST1
             5             1             1             2
rua                        4             3             5             0
(4I4)           (5I4)           (3E24.15)
   1   3   4   6
   1   3   2   1   4
   1.000000000000000E+00  -2.500000000000000E+00   3.000000000000000D+00
   4.000000000000000E+00   5.000000000000000E-01
"""
UNSYMMETRIC_DENSE = np.array([[1.0, 0, 4.0], [0, 3.0, 0], [-2.5, 0, 0], [0, 0, 0.5]])

# 3 x 3 symmetric, lower triangle: (0,0)=2, (1,0)=-1, (1,1)=2, (2,1)=-1, (2,2)=2
SYMMETRIC = """\
A symmetric tridiagonal matrix                                          RB_TEST2
             4             1             1             2
rsa                        3             3             5             0
(4I8)           (5I8)           (3E20.12)
       1       3       5       6
       1       2       2       3       3
  2.000000000000E+00 -1.000000000000E+00  2.000000000000E+00
 -1.000000000000E+00  2.000000000000E+00
"""
SYMMETRIC_DENSE = np.array([[2.0, -1, 0], [-1, 2, -1], [0, -1, 2]])

PATTERN_SKEW = """\
pattern, then skew                                                      RB_TEST3
             2             1             1             0
psa                        3             3             2             0
(4I4)           (2I4)
   1   2   3   3
   2   3
"""


def _write(tmp_path: Path, name: str, text: str, gz: bool = False) -> Path:
    path = tmp_path / (name + (".rb.gz" if gz else ".rb"))
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_real_unsymmetric(tmp_path: Path, gz: bool) -> None:
    t = coiter.read(_write(tmp_path, "u", UNSYMMETRIC, gz))
    assert t.format == coiter.csr
    np.testing.assert_array_equal(t.to_numpy(), UNSYMMETRIC_DENSE)


def test_real_symmetric_is_expanded_into_any_format(tmp_path: Path) -> None:
    t = coiter.read(_write(tmp_path, "s", SYMMETRIC), format="coo")
    assert t.format == coiter.coo(2)
    np.testing.assert_array_equal(t.to_numpy(), SYMMETRIC_DENSE)


def test_pattern_symmetric_reads_ones(tmp_path: Path) -> None:
    t = coiter.read(_write(tmp_path, "p", PATTERN_SKEW))
    np.testing.assert_array_equal(t.to_numpy(), [[0, 1, 0], [1, 0, 1], [0, 1, 0]])


def test_complex_hermitian_and_integer_skew(tmp_path: Path) -> None:
    text = SYMMETRIC.replace("rsa", "cha").replace("(3E20.12)", "(2E20.12)")
    values = "  2.000000000000E+00  0.000000000000E+00\n  0.000000000000E+00  1.000000000000E+00\n" \
             "  2.000000000000E+00  0.000000000000E+00\n -1.000000000000E+00  1.000000000000E+00\n" \
             "  2.000000000000E+00  0.000000000000E+00\n"
    text = "\n".join(text.splitlines()[:6]) + "\n" + values
    expected = np.array([[2, -1j, 0], [1j, 2, -1 - 1j], [0, -1 + 1j, 2]])
    np.testing.assert_array_equal(coiter.read(_write(tmp_path, "h", text)).to_numpy(), expected)
    skew = "\n".join(SYMMETRIC.replace("rsa", "iza").replace("(3E20.12)", "(5I4)").splitlines()[:6]) \
        + "\n   0   3   0   4   0\n"
    expected = np.array([[0, -3, 0], [3, 0, -4], [0, 4, 0]])
    got = coiter.read(_write(tmp_path, "z", skew)).to_numpy()
    assert got.dtype.kind == "i"
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("text,message", [
    (UNSYMMETRIC.replace("rua", "rue"), "elemental"),
    (UNSYMMETRIC.replace("rua", "xua"), "unknown matrix type"),
    ("\n".join(UNSYMMETRIC.splitlines()[:5]), "row indices: 5 numbers expected"),
    (UNSYMMETRIC.replace("   1   3   4   6", "   1   3   4   9"), "out of range"),
    ("title only\n", "four header lines"),
])
def test_malformed_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        coiter.read(_write(tmp_path, "bad", text))


def test_rb_files_are_not_written(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="read, not written"):
        coiter.write(tmp_path / "x.rb", coiter.Tensor.from_numpy(np.eye(2), format="csr"))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_file_scipy_writes_reads_back(tmp_path: Path, seed: int) -> None:
    """Harwell-Boeing files without right-hand sides share the layout: SciPy's writer is an
    independent source of fixed-width files."""
    import scipy.io
    import scipy.sparse as sp

    m = sp.random_array((40, 25), density=0.2, format="csc", random_state=seed)
    path = tmp_path / "m.rb"
    scipy.io.hb_write(path, sp.csc_matrix(m))
    np.testing.assert_allclose(coiter.read(path).to_numpy(), m.toarray(), rtol=1e-14)
