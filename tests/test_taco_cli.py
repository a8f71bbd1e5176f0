"""TACO's command line (coiter/taco_cli.py): TACO's example commands, inputs read and
generated, results written and checked against SciPy/NumPy, and bad flags ending in a
message and exit status 2."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter import cli


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = cli.main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.mark.parametrize("expr, flags, expected", [
    ("a(i) = b(i) + c(i)", [], "a_vals"),
    ("a(i) = b(i) + c(i)", ["-f=b:s", "-f=c:s", "-f=a:s"], "b1_crd"),
    ("a(i) = B(i,j) * c(j)", ["-f=B:ds"], "B2_pos"),
    ("A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", ["-f=B:sss"], "B3_crd"),
])
def test_tacos_examples_print_the_kernel(capsys: pytest.CaptureFixture[str], expr: str, flags: list[str],
                                         expected: str) -> None:
    status, out, _ = _run(capsys, expr, *flags)
    assert status == 0
    formats = dict(f[3:].split(":", 1) for f in flags)
    assert out.strip() == coiter.compile(expr, formats=formats).source.strip()
    assert expected in out


def test_spmv_on_a_file_writes_the_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    m = sp.random_array((30, 20), density=0.2, rng=rng, format="csr")
    x = rng.random(20)
    coiter.write(tmp_path / "B.mtx", coiter.Tensor.from_scipy(m))
    coiter.write(tmp_path / "c.npz", coiter.Tensor.from_numpy(x))
    status, out, err = _run(capsys, "a(i) = B(i,j) * c(j)", "-f=B:ds", f"-i=B:{tmp_path / 'B.mtx'}",
                            f"-i=c:{tmp_path / 'c.npz'}", f"-o=a:{tmp_path / 'a.npz'}", "-time=3",
                            "-nthreads=2", "-print-concrete")
    assert status == 0, err
    assert "B size: (30 x 20)" in out and "forall(i" in out and "Compute: median" in out
    np.testing.assert_allclose(coiter.read(tmp_path / "a.npz").to_numpy(), m @ x)


def test_generated_operands_sized_by_flags_and_schedules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(capsys, "A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", "-f=B:sss", "-d=B:6,7,8", "-d=l:3",
                            "-g=B:s", "-g=C:d", "-g=D:r", f"-o=A:{tmp_path / 'A.npz'}", f"-o=B:{tmp_path / 'B.npz'}",
                            f"-o=D:{tmp_path / 'D.npz'}", f"-write-source={tmp_path / 'k.c'}")
    assert status == 0, err
    assert "B size: (6 x 7 x 8)" in out and "C size: (7 x 3)" in out
    b, d = (coiter.read(tmp_path / f"{n}.npz").to_numpy() for n in "BD")
    c = np.arange(1.0, 22.0).reshape(7, 3)  # -g=C:d: the dense sequence 1, 2, ...
    np.testing.assert_allclose(coiter.read(tmp_path / "A.npz").to_numpy(), np.einsum("ijk,jl,kl->il", b, c, d))
    expected = coiter.compile("A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", formats={"B": "sss"}).source
    assert (tmp_path / "k.c").read_text() == expected and expected not in out
    status, out, _ = _run(capsys, "a(i) = b(i) * 2", "-d=i:64", "-g=b:r", "-s=split(i,i0,i1,16)", "-print-c")
    assert status == 0 and "i0" in out and "a size" not in out


@pytest.mark.parametrize("args, message", [
    (["a(i) = b(i)", "-f=x:s"], "-f names x, not a tensor"),
    (["a(i) = b(i)", "-f=b"], "-f expects <tensor>:<value>"),
    (["a(i) = b(i)", "-time=0"], "positive integer"),
    (["a(i) = b(i)", "-bogus"], "unknown option '-bogus'"),
    (["a(i) = b(i)", "-g=b:q"], "unknown fill 'q'"),
    (["a(i) = b(i)", "-d=A:3"], "neither a tensor nor an index variable"),
    (["a(i) = b(i", "-g=b:r"], "Error:"),
    (["a(i) = b(i)", "-i=b:/no/such/file.mtx"], "Error:"),
    (["a(i) = b(i)", "c(i) = b(i)"], "two expressions"),
])
def test_bad_command_lines_end_in_a_message(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    status, _, err = _run(capsys, *args)
    assert status == 2
    assert message in err
    assert "Traceback" not in err


def test_help_and_subcommands_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "-help")
    assert status == 0 and "Usage: coiter <index expression>" in out
    status, out, _ = _run(capsys, "cache-dir")
    assert status == 0 and out.strip()
