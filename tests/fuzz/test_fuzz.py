"""A CI-sized slice of the differential fuzzer (tests/fuzz/cases.py), run in this process.

The slice is seed 0's first cases, the same on every run (so the README's ``pytest`` cannot
turn red on a draw); ``COITER_TEST_PROFILE=full`` draws a new seed per run, named in the
failure message, to reproduce with ``python -m tests.fuzz.run --seed S --show N``, and
``python -m tests.fuzz.run`` runs any number of cases. Known bugs (cases.KNOWN_BUGS) are
excluded.
"""
from __future__ import annotations

import os
import random

import pytest

from .cases import FAILURES, make_case, run_case

CI_SLICE = 300
CHUNK = 50


# in chunks, so that COITER_TEST_PROFILE=ci (what .ci/run sets) can leave out the last ones
# (marked slow) and keep CI's time: CI runs the first 150 cases, plain pytest all 300
@pytest.mark.parametrize("first", [
    pytest.param(n, marks=pytest.mark.slow) if n >= CI_SLICE // 2 else n
    for n in range(0, CI_SLICE, CHUNK)])
def test_fuzz_slice_matches_numpy(first: int) -> None:
    seed = random.randrange(2**31) if os.environ.get("COITER_TEST_PROFILE") == "full" else 0
    failures = []
    for n in range(first, first + CHUNK):
        case = make_case(seed, n)
        outcome = run_case(case)
        if outcome.kind in FAILURES:
            failures.append(f"case {n} [{outcome.kind}] {outcome.detail}\n    {case.describe()}")
    assert not failures, (f"seed {seed}: {len(failures)} of cases {first}-{first + CHUNK - 1} "
                          "failed:\n" + "\n".join(failures))


@pytest.mark.parametrize("seed, number", [
    (2026120207, 98),  # a uint32 difference in a float result: its fill wrapped at 32 bits
    (2026120207, 1795),  # nested casts, min, square: inline C copied arguments (over 300 s)
    (62, 8822),  # five sparse operands merged at three loops: 1 MB of C, cc1 over 20 min at -O3
    (66, 1412),  # an absent operand's folded -3 + 0.0 lost its float kind in an inner loop
    (77, 954),  # a sum added term by term into 'ddd:2,1,0' came back row-major
    (2026120213, 690),  # an empty trailing dense mode: values realloc'ed to 0 bytes, "out of memory"
])
def test_cases_the_fuzzer_found(seed: int, number: int) -> None:
    case = make_case(seed, number)
    outcome = run_case(case)
    assert outcome.kind not in FAILURES, f"[{outcome.kind}] {outcome.detail}\n    {case.describe()}"
