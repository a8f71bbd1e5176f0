"""Runs of eight or more positions summed in eight vector lanes.

A sparse row sum ``for (p = A2_pos[i]; p < A2_pos[i+1]; p++) t += A_vals[p] * x_vals[A2_crd[p]]``
over runs of a dozen positions (a power-law graph's rows, a citation network's) costs about
30 cycles a run: the loop's exit branch mispredicts wherever run lengths vary, and each
addition waits for the one before. Where an operand's runs average :data:`VECTOR_MIN_AVERAGE`
positions or more and vary in length (where gathers are fast, ``COITER_FAST_GATHER``), or
average 16 or more, each such loop is replaced by one call, ``t += coiter_run_vdot_i32(vals,
crd, x, start, end)`` (C prelude, ``_i64`` for 64-bit coordinates), which sums the run in eight
lanes: lane ``j`` adds positions ``start + j``, ``start + j + 8``, ... one by one from 0.0, and
the lanes are added as ``((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))``. With AVX-512 and
fast gathers that is a vector loop of masked loads and a masked gather of ``x``, eight
positions a step, whose exit a run of up to eight never mispredicts; elsewhere eight scalar
sums in the same order. Those lose to the loop on runs of under 16: on AMD's Zen 4 (slow
gathers), CSR SpMV at 1 thread took twice the loop's time on cit-HepPh (12.2 a row), 0.77
against 0.39 ms, and on a uniform random matrix of 8 a row, 6.4 against 3.3.

The order depends on the run and on whether the processor's gathers are fast, never on
threads or alignment, so results repeat bit for bit on one machine; they differ from a
one-by-one sum in the last bits, as the partial sums of :mod:`.sums` do. Where runs are
shorter, or of even lengths under 16 (a band matrix's rows, ``coiter_runs_even`` in the C
prelude), the loop is as fast or faster: its exit is predicted.
Kernels before and after in one process, CSR SpMV at 1 thread, warm caches (microseconds;
docs/performance.md, "Rows of eight or more entries: eight lanes"): ca-CondMat (8.5 a row)
201 -> 134, cit-HepPh (12.2) 396 -> 317, soc-Slashdot0902 (11.5) 965 -> 747; with four partial
sums before, ca-AstroPh (22) 308 -> 226, bcsstk33 (68) 308 -> 274, lp_fit2d 55 -> 41.

Only runs whose sum, values and gathered vector are all ``double`` (``coiter_run_vdot_*``)
or all ``float`` (``coiter_run_vdotf_*``, the same eight lanes) and whose coordinates are
``int32_t`` or ``int64_t`` qualify (:func:`.short_runs.product`); :mod:`.sums` versions the
kernel's statements on a flag computed before the loops (``A2_vector_runs``).
"""
from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from ..ir.nodes import Assign, Call, For, IRStmt, Var
from .short_runs import helper_name, product

# positions per run, on average, from which runs of varying lengths take the helper (runs of
# even lengths from 16, as coiter_runs_even in the C prelude judges them)
VECTOR_MIN_AVERAGE = Fraction(15, 2)
VDOT = "coiter_run_vdot"  # the helper's name, before its value and index suffixes
# a loop over one run and the types of the variables declared around it -> the loop
# rewritten into a helper call, or None
VectorRunSums = Callable[[For, dict[str, str]], IRStmt | None]


def vector_run_sums(inputs: dict[str, str]) -> VectorRunSums:
    """The rewrite of a loop ``for (p = pos[e]; p < pos[e+1]; p++) { k = crd[p]; t += vals[p]
    * x[k]; }`` into ``t += coiter_run_vdot(vals, crd, x, pos[e], pos[e+1])``, for
    :func:`.sums.split_long_sums` to apply to the loops over one run of an input's pos array
    where the input's runs average :data:`VECTOR_MIN_AVERAGE` positions or more. ``inputs``
    maps the kernel's read-only array parameters to their element types."""

    def rewrite(f: For, scope: dict[str, str]) -> IRStmt | None:
        summed = product(f, scope, inputs)
        if summed is None:
            return None
        total, vals, crd, x = summed
        call = Call(helper_name(VDOT, inputs[vals], inputs[crd]),
                    (Var(vals), Var(crd), Var(x), f.start, f.end))
        return Assign(Var(total), call, "+=")

    return rewrite
