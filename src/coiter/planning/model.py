"""The planner's cost model.

Costs are in units of one iteration of a generated loop (about a nanosecond). Nonzeros are
assumed spread independently and uniformly, so a product of operands is nonzero at a
coordinate with the product of their densities; this is the usual estimate for SpGEMM
output sizes and is exact for dense operands.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

# A dense contraction NumPy hands to BLAS does this many multiply-adds in the time the
# generated loop nest does one (dense 200^3 matrix product: 0.40 ms against 6.6 ms).
BLAS_SPEEDUP = 16.0
# Fixed cost of one step: a kernel call and a temporary (a few microseconds).
STEP_OVERHEAD = 5e3
# Cost per stored entry of a sparse result besides computing it: order, compress, copy.
ASSEMBLY = 4.0
# Temporaries at least this dense are stored dense; below it a sparse format pays off.
DENSE_FRACTION = 0.25
# Temporaries this small are stored dense whatever their density.
SMALL_VOLUME = 4096


@dataclass(frozen=True)
class Term:
    """What the planner knows of an operand or temporary.

    ``letters``: its subscripts, one per mode (a letter repeated in one term reads a
    diagonal); ``density``: estimated fraction of its entries that are nonzero; ``dense``:
    stored in a dense format, so a kernel visits every entry.
    """

    letters: str
    density: float
    dense: bool

    @property
    def visited(self) -> float:
        """Fraction of the entries a kernel walking this term visits."""
        return 1.0 if self.dense else self.density


def distinct(letters: Iterable[str]) -> str:
    """The letters once each, in order of first appearance."""
    return "".join(dict.fromkeys(letters))


def volume(letters: Iterable[str], extents: Mapping[str, int]) -> float:
    """Number of coordinates spanned by the distinct ``letters``."""
    return math.prod(float(extents[c]) for c in distinct(letters))


def result_density(terms: Iterable[Term], kept: str, extents: Mapping[str, int]) -> float:
    """Estimated density of the product of ``terms`` summed over every letter not in ``kept``."""
    terms = list(terms)
    p = math.prod(t.density for t in terms)
    if p >= 1.0:
        return 1.0
    if p <= 0.0:
        return 0.0
    summed = set("".join(t.letters for t in terms)) - set(kept)
    # P(some summed coordinate has every factor nonzero) = 1 - (1 - p)^n
    return min(1.0, -math.expm1(volume(summed, extents) * math.log1p(-p)))


def step_cost(terms: Iterable[Term], result: Term, extents: Mapping[str, int], blas: bool) -> float:
    """Estimated cost of one contraction of ``terms`` into ``result``.

    The loop nest visits the union of the letters, cut down by every sparse term (a kernel
    iterates only stored entries of sparse operands); reading the operands and writing the
    result are added; ``blas`` steps run at BLAS's rate.
    """
    terms = list(terms)
    every = "".join(t.letters for t in terms)
    work = volume(every, extents) * math.prod(t.visited for t in terms)
    if blas:
        work /= BLAS_SPEEDUP
    reads = sum(volume(t.letters, extents) * t.visited for t in terms)
    out = volume(result.letters, extents)
    writes = out if result.dense else out * result.density * ASSEMBLY
    return STEP_OVERHEAD + work + reads + writes
