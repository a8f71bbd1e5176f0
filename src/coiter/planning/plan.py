"""An einsum plan: the steps that compute an einsum, each one contraction."""
from __future__ import annotations

from dataclasses import dataclass

from coiter.formats.format import Format

@dataclass(frozen=True)
class Step:
    """One contraction of a plan.

    ``inputs`` index the plan's values: the einsum's operands are ``0 .. n-1`` and step ``k``'s
    result is value ``n + k``. ``engine`` is ``"coiter"`` (a compiled kernel) or ``"numpy"``
    (dense arrays contracted by ``numpy.einsum(optimize=True)``, which orders them and hands
    pairs to BLAS). ``nnz`` and ``cost`` are the
    planner's estimates of the stored entries of the result and of the step's time (in
    loop iterations).
    """

    inputs: tuple[int, ...]
    subscripts: str
    engine: str
    format: Format
    nnz: float
    cost: float


@dataclass(frozen=True)
class EinsumPlan:
    """How :func:`coiter.einsum` computes ``subscripts``: one fused kernel (a single step over
    every operand) or a sequence of contractions through temporaries.

    Pass it back as ``coiter.einsum(..., optimize=plan)`` to reuse it; :attr:`path` is the
    same order in NumPy's ``einsum_path`` form.
    """

    subscripts: str
    n_operands: int
    steps: tuple[Step, ...]
    cost: float
    fused_cost: float

    @property
    def fused(self) -> bool:
        """Whether the plan is one generated kernel over every operand."""
        return len(self.steps) == 1 and self.steps[0].engine == "coiter"

    @property
    def path(self) -> list:
        """The steps as NumPy's ``optimize=`` path: ``["einsum_path", (i, j), ...]``, each
        group indexing the list of remaining operands, its result appended last (a NumPy step
        over several operands is one group: NumPy orders it)."""
        live = list(range(self.n_operands))
        path: list = ["einsum_path"]
        for k, step in enumerate(self.steps):
            path.append(tuple(sorted(live.index(v) for v in step.inputs)))
            live = [v for v in live if v not in step.inputs] + [self.n_operands + k]
        return path

    def __str__(self) -> str:
        head = [f"einsum plan for {self.subscripts!r}",
                f"  estimated cost: {self.cost:.3g} (one fused kernel: {self.fused_cost:.3g})"]
        rows = [("step", "inputs", "subscripts", "engine", "result", "est. nnz")]
        for k, s in enumerate(self.steps):
            names = ",".join(f"T{v}" if v < self.n_operands else f"t{v - self.n_operands}"
                             for v in s.inputs)
            rows.append((f"t{k}", names, s.subscripts, s.engine, s.format.to_string() or "scalar",
                         f"{s.nnz:.3g}"))
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        table = ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join(head + table)

    def __repr__(self) -> str:
        kind = "fused" if self.fused else f"{len(self.steps)} step(s)"
        return f"<EinsumPlan {self.subscripts!r}: {kind}, estimated cost {self.cost:.3g}>"
