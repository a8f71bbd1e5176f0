"""What one benchmark run measures: the parsed command line plus the size and time limits
of its mode (full or ``--quick``), passed to every worker process as JSON."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"
DEFAULT_OUT = REPO_ROOT / "docs" / "benchmarks"

# Real inputs of the quick mode: small, and between them one general real-valued matrix,
# one pattern matrix, one rectangular matrix, an order-3 and an order-5 tensor.
QUICK_MATRICES = ("lp_ship04l", "add32", "ex6")
QUICK_TENSORS = ("collegemsg-day", "jf17k-4ary")


@dataclass
class Settings:
    """Everything a worker needs to reproduce the measurements of one run."""

    quick: bool
    kernels: list[str]
    threads: list[int]
    peers: list[str]
    out_dir: str
    data_dir: str | None = None  # None: generated inputs only
    inputs: list[str] = field(default_factory=list)  # name filters; empty = all
    gen_size: int = 250_000  # rows of generated matrices; generated tensors scale with it
    gen_row_nnz: int = 8  # mean nonzeros per row of generated matrices
    # rows of the generated SpMV inputs larger than the last-level cache (0: none): 6M rows
    # of 8 take about 0.7 GB, above this machine's reported 480 MiB L3
    large_size: int = 6_000_000
    rank: int = 16  # dense columns of SpMM, SDDMM, TTM and MTTKRP
    spmspv_density: float = 0.1  # fraction of nonzeros in SpMSpV's sparse vector
    min_runs: int = 5
    max_runs: int = 50
    case_budget_s: float = 0.25  # timed seconds aimed at per (kernel, input), all systems
    # with several threads, systems run in short batches with this pause between them, so
    # that one library's idle threads have stopped spinning when the next one runs
    switch_gap_s: float = 0.005
    # rounds of batches with several threads. With two, a system with one slow batch (torch on
    # small TTV inputs) has its median fall between its batches; four, tried, made the
    # 2-thread medians of small inputs 1.5-4x slower for coiter, MKL and torch alike
    # (docs/performance.md, "The suite's run counts, and medians between batches")
    batches: int = 2
    # untimed calls opening each batch: after the pause every system's first calls run slower,
    # and with two warm-ups the timed third to fifth still took up to 1.3x the eighth's time
    # (coiter on USA-road-NY 1.32/1.13/1.07, torch on s3rmt3m3 1.74/1.48/1.54, MKL on
    # bcsstk16 1.12/1.09/1.07); from the fifth call on, within 1.1x for all but torch
    batch_warmup: int = 4
    slow_limit_s: float = 1.0  # a system whose checked call is slower is not timed
    call_timeout_s: float = 10.0  # a first call still running then is abandoned
    # a worker whose memory passed this fraction of the machine's after a case exits to be
    # started afresh: peers that leak (torch's sparse results) would otherwise have the
    # out-of-memory killer stop it in some later call, possibly another system's
    worker_memory_fraction: float = 0.4
    spgemm_flops_limit: float = 2e7  # multiply-adds of A*B above which SpGEMM is skipped
    dense_bytes_limit: float = 200e6  # NumPy dense runs only when its arrays fit in this
    dense_flops_limit: float = 2e10  # ...and its dense arithmetic is at most this
    stream_elements: int = 1 << 25  # doubles per STREAM array (256 MiB, far above any cache)
    stream_reps: int = 10

    @classmethod
    def for_mode(cls, quick: bool, **given: object) -> Settings:
        """Settings of the full or the quick mode; ``given`` overrides (None = default)."""
        limits: dict[str, object] = {}
        if quick:
            # small inputs and short timings: the quick mode checks correctness, not speed
            limits = dict(gen_size=2_000, large_size=0, max_runs=10, case_budget_s=0.02,
                          slow_limit_s=0.5, call_timeout_s=5.0,
                          stream_elements=1 << 23, stream_reps=4)
        limits.update({k: v for k, v in given.items() if v is not None})
        return cls(quick=quick, **limits)  # type: ignore[arg-type]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Settings:
        return cls(**json.loads(text))
