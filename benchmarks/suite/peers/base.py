"""The interface every benchmarked system (coiter and its peers) implements."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..check import Result
from ..kernels import Case

# relative tolerance of the check when a system sums in the reference's order or close
# to it; peers that reorder sums (blocked BLAS, parallel reductions) may loosen it
DEFAULT_RTOL = 1e-9


class NotApplicable(Exception):
    """The system cannot run this kernel (the message says why); shown as n/a."""


class TooSlow(Exception):
    """The system's known cost on this input is far above the slow limit (the message
    says why); shown as slow without running it."""


@dataclass
class Prepared:
    """A kernel ready to time: ``call()`` computes it from operands already converted to
    the system's own data structures; ``result(out)`` turns its output into a neutral
    result for the check."""

    call: Callable[[], Any]
    result: Callable[[Any], Result]
    rtol: float = DEFAULT_RTOL


@dataclass
class Peer:
    """A system: how to set its thread count and how to prepare each kernel it has.

    ``missing`` gives, for kernels it does not have, the reason shown in the table.
    """

    name: str
    version: str
    kernels: dict[str, Callable[[Case], Prepared]]
    missing: dict[str, str] = field(default_factory=dict)
    set_threads: Callable[[int], None] = lambda n: None
    threaded: bool = True  # whether it uses more than one thread when given them
    note: str = ""  # how it runs the kernels, for the summary

    def prepare(self, case: Case) -> Prepared:
        build = self.kernels.get(case.kernel.peer_name)
        if build is None:
            raise NotApplicable(self.missing.get(case.kernel.peer_name, "no such operation"))
        return build(case)
