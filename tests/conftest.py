"""Shared fixtures, hypothesis profiles (COITER_TEST_PROFILE=ci shrinks runs for CI and
leaves out the tests marked slow), and caches kept out of the user's home.

Kernels compile into a temporary cache removed when the run ends, unless COITER_CACHE_DIR
names one; the autotuner's file and every platformdirs cache (the benchmark suite's
converted inputs) also go to that temporary folder. Subprocesses inherit the variables.

The CI profile draws the same examples on every run, so that a merge gate never turns red
on a draw nobody can reproduce; the dev (default) and full profiles draw new examples on
every run and are where the differential tests go looking for new bugs."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from helpers import cflags

_SCRATCH = tempfile.mkdtemp(prefix="coiter-tests-")
atexit.register(shutil.rmtree, _SCRATCH, True)
os.environ.setdefault("COITER_CACHE_DIR", os.path.join(_SCRATCH, "kernels"))
os.environ["COITER_AUTOTUNE_FILE"] = os.path.join(_SCRATCH, "autotune.json")
os.environ["XDG_CACHE_HOME"] = os.path.join(_SCRATCH, "xdg-cache")

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The CI profile leaves out the tests marked slow: repeats of a covered case (more
    fuzzer cases, more thread-count and call-path pairs), which plain ``pytest`` runs."""
    if os.environ.get("COITER_TEST_PROFILE") != "ci":
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


@pytest.fixture(scope="module")
def gather_helpers() -> Iterator[None]:
    """Kernels built meanwhile take the short- and tiny-run helpers where they apply, on any
    processor, gathering (``COITER_FAST_GATHER``; where gathers are slow the C prelude reads x
    by plain loads, and takes the short-run helper only on runs the loop would not learn)."""
    with cflags("native"):
        yield
