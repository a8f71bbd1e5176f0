"""The scalar twin of the eight-lane run helper stays scalar (coiter_run_vdot*_* where gathers
are slow): GCC 12 had vectorized its float loop across iterations with AVX-512 gathers,
which made float32 SpMV on long rows twice as slow as float64 on AMD Zen. Its values are
tested bit for bit in test_vector_runs.py; this checks the machine code the C compiler makes."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import coiter
from helpers import CFLAGS

PROBE = """
float coiter_probe_vdotf(const float* v, const int32_t* k, const float* c, int64_t s, int64_t e) {
  return coiter_run_vdotf_i32(v, k, c, s, e);
}
double coiter_probe_vdot(const double* v, const int32_t* k, const double* c, int64_t s, int64_t e) {
  return coiter_run_vdot_i32(v, k, c, s, e);
}
"""


def _functions(asm: str, prefix: str) -> str:
    """The assembly of the functions whose names start with ``prefix``: the probe, and the
    helper where the compiler did not inline it into the probe."""
    out = []
    for m in re.finditer(rf"^({prefix}\w*):$", asm, re.M):
        out.append(asm[m.start():asm.index(".cfi_endproc", m.start())])
    return "".join(out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scalar_lanes_read_x_without_gathers(tmp_path: Path, dtype: type) -> None:
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, dtype=dtype)
    src = tmp_path / "lanes.c"
    src.write_text(k.source + PROBE)
    asm = tmp_path / "lanes.s"
    cc = os.environ.get("CC", "cc")
    flags = CFLAGS["plain-loads"].split() + ["-fopenmp", "-S", "-o", str(asm), str(src)]
    subprocess.run([cc, *flags], check=True, capture_output=True)
    text = asm.read_text()
    helper = "coiter_run_vdotf_i32" if dtype == np.float32 else "coiter_run_vdot_i32"
    probe = "coiter_probe_vdotf" if dtype == np.float32 else "coiter_probe_vdot"
    body = _functions(text, probe + r"\b") + _functions(text, helper + r"\b")
    assert "vmovs" in body  # the loop is there, its loads scalar
    assert not re.search(r"\bvgather", body)
