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

from .cases import FAILURES, make_case, run_case

CI_SLICE = 300


def test_fuzz_slice_matches_numpy() -> None:
    seed = random.randrange(2**31) if os.environ.get("COITER_TEST_PROFILE") == "full" else 0
    failures = []
    for n in range(CI_SLICE):
        case = make_case(seed, n)
        outcome = run_case(case)
        if outcome.kind in FAILURES:
            failures.append(f"case {n} [{outcome.kind}] {outcome.detail}\n    {case.describe()}")
    assert not failures, f"seed {seed}: {len(failures)} of {CI_SLICE} cases failed:\n" + "\n".join(failures)
