"""Shared fixtures and hypothesis profiles (COITER_TEST_PROFILE=ci shrinks runs for CI).

The CI profile draws the same examples on every run, so that a merge gate never turns red
on a draw nobody can reproduce; the dev (default) and full profiles draw new examples on
every run and are where the differential tests go looking for new bugs."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "full", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("COITER_TEST_PROFILE", "dev"))
