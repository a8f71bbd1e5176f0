"""The ten benchmark kernels: their coiter expressions and formats, the operands built from
an input, an independent SciPy/NumPy reference result, and the minimum bytes a
memory-bound kernel must move.

Tensor kernels work on tensors of any order N >= 3: TTV and TTM contract the last mode,
MTTKRP keeps mode 0 and multiplies a factor matrix into every other mode, INNERPROD pairs
two N-tensors.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

import coiter

from .check import Result, SparseResult, from_coords, from_scipy
from .data import Input, Matrix, Tensor, canonical_coords
from .settings import Settings

# Operands of more bytes are shared by the systems, not copied per system: twice the 32 MiB
# last-level cache of the machine this was set on, so a call leaves at most half of them in it
# for the next system's, while a copy per system of the largest inputs' operands adds
# gigabytes to a worker that the largest inputs already bring near the machine's 24 GB
PRIVATE_COPY_BYTES = 64 * 2**20
MODE_INDICES = "ijkmnopq"  # 'l' is kept for the dense (rank) dimension
FACTOR_NAMES = "CDEFGHIJ"


@dataclass
class SparseVector:
    """SpMSpV's vector: sorted indices, values, length."""

    idx: np.ndarray
    vals: np.ndarray
    n: int

    def dense(self) -> np.ndarray:
        out = np.zeros(self.n)
        out[self.idx] = self.vals
        return out


@dataclass
class Case:
    """One kernel on one input: neutral operands, the reference result, and the minimum
    bytes moved (None for kernels not bound by memory traffic)."""

    kernel: Kernel
    input: Input
    ops: dict[str, Any]
    reference: Result
    min_bytes: int | None
    notes: dict[str, Any] = field(default_factory=dict)
    _derived: dict[str, Any] = field(default_factory=dict)

    @property
    def order(self) -> int:
        return self.input.order if isinstance(self.input, Tensor) else 2

    @property
    def work(self) -> int:
        """How big the case is, to predict that a system too slow on it is too slow on
        bigger ones: SpGEMM's multiply-adds, otherwise the input's nonzeros."""
        if "flops" in self.notes:
            return int(self.notes["flops"])
        return int(self.input.describe()["nnz"])

    def private(self) -> Case:
        """This case with its own copy of every operand, for one system: a call then never
        finds another system's call left the operands it shares in the caches (at one
        thread, a dense operand the previous system had just read made the next one look
        up to 1.4x faster: TTM's factor matrix). Operands of over PRIVATE_COPY_BYTES are
        shared: the case itself."""
        if _nbytes(self.ops) > PRIVATE_COPY_BYTES:
            return self
        return replace(self, ops=copy.deepcopy(self.ops), _derived={})

    def derived(self, key: str, build: Callable[[], Any]) -> Any:
        """``build()``, computed once per case and shared by the systems that need it."""
        if key not in self._derived:
            self._derived[key] = build()
        return self._derived[key]

    def fibers(self) -> tuple[sp.csr_array, np.ndarray]:
        """:func:`fibers` of operand B (TTV, TTM) for systems without sparse tensors."""
        return self.derived("fibers", lambda: fibers(self.ops["B"]))

    def unfolded(self) -> tuple[sp.csr_array, sp.csr_array]:
        """:func:`unfold0` of operands B and C (INNERPROD) for systems without tensors."""
        return self.derived("unfolded", lambda: (unfold0(self.ops["B"]), unfold0(self.ops["C"])))


def _nbytes(x: Any) -> int:
    """Bytes of the NumPy arrays in ``x``: an array, a dict, list or tuple of them, or an
    object holding them as attributes (SciPy sparse arrays, input tensors)."""
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, dict):
        return sum(_nbytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(v) for v in x)
    return sum(_nbytes(v) for v in vars(x).values()) if hasattr(x, "__dict__") else 0


class Skip(Exception):
    """A (kernel, input) pair that is not run; the message says why."""


@dataclass(frozen=True)
class Kernel:
    name: str
    title: str
    kind: str  # "matrix" or "tensor": which inputs it runs on
    memory_bound: bool  # whether the fraction of STREAM bandwidth is reported
    expression: Callable[[int], str]  # tensor order -> coiter index notation
    formats: Callable[[int], dict[str, Any]]  # tensor order -> coiter formats
    builder: Callable[[Kernel, Input, Settings], Case]
    same_as: str = ""  # the kernel whose implementation peers run ("": this one)

    @property
    def peer_name(self) -> str:
        """The name peers know this computation by."""
        return self.same_as or self.name

    def build(self, inp: Input, settings: Settings) -> Case:
        """The case of this kernel on ``inp``; raises Skip when it is not run."""
        return self.builder(self, inp, settings)

    def compile(self, order: int = 2) -> coiter.Kernel:
        return coiter.compile(self.expression(order), formats=self.formats(order))


# --------------------------------------------------------------------------- helpers

def _rng(name: str, salt: int) -> np.random.Generator:
    # operands depend on the input's name only, so every process builds the same ones
    return np.random.default_rng([salt, *name.encode()])


def csr_bytes(m: sp.csr_array) -> int:
    return int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes)


def csf_arrays(coords: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(pos, crd) of every level of the CSF tensor (all levels compressed) holding these
    sorted unique coordinates (order x nnz)."""
    nnz = coords.shape[1]
    levels = []
    parent_of_entry = np.zeros(nnz, dtype=np.int64)  # node of the previous level per entry
    parents = 1
    for level in range(coords.shape[0]):
        new = np.ones(nnz, dtype=bool)
        if nnz > 1:
            new[1:] = np.any(coords[: level + 1, 1:] != coords[: level + 1, :-1], axis=0)
        starts = np.flatnonzero(new)
        counts = np.bincount(parent_of_entry[starts], minlength=parents)
        levels.append((np.r_[0, np.cumsum(counts)], coords[level, starts]))
        parent_of_entry = np.cumsum(new) - 1
        parents = starts.shape[0]
    return levels


def csf_bytes(coords: np.ndarray, shape: tuple[int, ...]) -> int:
    """Bytes of the CSF tensor with these coordinates: its pos and crd arrays in the
    narrowest index type that fits, and 8-byte values."""
    idx = 4 if max(shape, default=0) < 2**31 and coords.shape[1] < 2**31 else 8
    entries = sum(pos.shape[0] + crd.shape[0] for pos, crd in csf_arrays(coords))
    return entries * idx + 8 * coords.shape[1]


def fibers(t: Tensor) -> tuple[sp.csr_array, np.ndarray]:
    """B's nonempty mode-(0..N-2) fibers as rows of a CSR matrix over the last mode, and
    each row's fiber coordinates ((N-1) x fibers): the matricization TTV and TTM reduce to
    an SpMV and an SpMM on."""
    head = t.coords[:-1]
    if t.nnz:
        starts = np.flatnonzero(np.r_[True, np.any(head[:, 1:] != head[:, :-1], axis=0)])
    else:
        starts = np.zeros(0, dtype=np.int64)
    indptr = np.r_[starts, t.nnz]
    idx_type = np.int32 if t.shape[-1] < 2**31 and t.nnz < 2**31 else np.int64
    m = sp.csr_array((t.vals, t.coords[-1].astype(idx_type), indptr.astype(idx_type)),
                     shape=(starts.shape[0], t.shape[-1]))
    return m, head[:, starts]


def fiber_result(heads: np.ndarray, out: np.ndarray, shape: tuple[int, ...]) -> SparseResult:
    """Neutral result of TTV (``out``: one value per fiber) or TTM (``out``: fibers x rank)
    computed on :func:`fibers`; ``shape`` is the result's shape."""
    if out.ndim == 1:
        return from_coords(heads, out, shape)
    rank = out.shape[1]
    coords = np.vstack([np.repeat(heads, rank, axis=1), np.tile(np.arange(rank), heads.shape[1])])
    return from_coords(coords, out.ravel(), shape)


def unfold0(t: Tensor) -> sp.csr_array:
    """Mode-0 matricization (dim0 x prod(other dims), int64 columns), canonical CSR."""
    cols = np.ravel_multi_index(tuple(t.coords[1:]), t.shape[1:])
    indptr = np.r_[0, np.cumsum(np.bincount(t.coords[0], minlength=t.shape[0]))]
    return sp.csr_array((t.vals, cols, indptr), shape=(t.shape[0], math.prod(t.shape[1:])))


def _spmv_like_bytes(a: sp.csr_array, x_bytes: int) -> int:
    # the matrix once, the input vector once, the dense result written once
    return csr_bytes(a) + x_bytes + 8 * a.shape[0]


def _matrix(inp: Input) -> sp.csr_array:
    assert isinstance(inp, Matrix)
    return inp.csr


def _tensor(inp: Input) -> Tensor:
    assert isinstance(inp, Tensor)
    return inp


# --------------------------------------------------------------------------- matrix kernels

def _build_spmv(kernel: Kernel, inp: Input, s: Settings) -> Case:
    a = _matrix(inp)
    x = _rng(inp.name, 1).random(a.shape[1])
    return Case(kernel, inp, {"A": a, "x": x}, a @ x, _spmv_like_bytes(a, x.nbytes))


def _build_spmspv(kernel: Kernel, inp: Input, s: Settings) -> Case:
    # column-major A, as SpMSpV is computed: only the columns at x's nonzeros are read
    a = sp.csc_array(_matrix(inp))
    a.sort_indices()
    rng = _rng(inp.name, 2)
    count = max(1, round(s.spmspv_density * a.shape[1]))
    idx = np.sort(rng.choice(a.shape[1], count, replace=False)).astype(a.indices.dtype)
    x = SparseVector(idx, rng.random(count), a.shape[1])
    touched = int(np.sum(a.indptr[idx + 1] - a.indptr[idx]))
    # x, the two column pointers and the entries of each column it selects, y written once
    min_bytes = (x.idx.nbytes + x.vals.nbytes + 2 * count * a.indptr.itemsize
                 + touched * (8 + a.indices.itemsize) + 8 * a.shape[0])
    return Case(kernel, inp, {"A": a, "x": x}, a @ x.dense(), min_bytes,
                {"x nnz": count, "A entries read": touched})


def _build_spmm(kernel: Kernel, inp: Input, s: Settings) -> Case:
    a = _matrix(inp)
    b = _rng(inp.name, 3).random((a.shape[1], s.rank))
    return Case(kernel, inp, {"A": a, "B": b}, a @ b, None)


def _build_sddmm(kernel: Kernel, inp: Input, s: Settings) -> Case:
    a = _matrix(inp)
    rng = _rng(inp.name, 4)
    u, v = rng.random((a.shape[0], s.rank)), rng.random((a.shape[1], s.rank))
    rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    vals = a.data * np.einsum("ij,ij->i", u[rows], v[a.indices])
    ref = from_scipy(sp.csr_array((vals, a.indices, a.indptr), shape=a.shape))
    return Case(kernel, inp, {"A": a, "U": u, "V": v}, ref, None)


def spgemm_flops(a: sp.csr_array, b: sp.csr_array) -> int:
    """Multiply-adds of A*B: sum over k of nnz(A[:, k]) * nnz(B[k, :])."""
    col_counts = np.bincount(a.indices, minlength=a.shape[1]).astype(np.int64)
    return int(col_counts @ np.diff(b.indptr).astype(np.int64))


def _build_spgemm(kernel: Kernel, inp: Input, s: Settings) -> Case:
    a = _matrix(inp)
    square = a.shape[0] == a.shape[1]
    b = a if square else sp.csr_array(a.T)
    b.sort_indices()
    flops = spgemm_flops(a, b)
    if flops > s.spgemm_flops_limit:
        raise Skip(f"A*B needs {flops:,} multiply-adds > limit {s.spgemm_flops_limit:,.0f}")
    ref = from_scipy(a @ b)
    return Case(kernel, inp, {"A": a, "B": b}, ref, None,
                {"B": "A" if square else "A^T", "flops": flops, "nnz(C)": ref.nnz})


def _build_spadd3(kernel: Kernel, inp: Input, s: Settings) -> Case:
    a = _matrix(inp)
    rng = _rng(inp.name, 6)
    # B: A's rows shuffled, C: A's columns shuffled, so the three patterns differ
    b = sp.csr_array(a[rng.permutation(a.shape[0])] * 0.5)
    c = sp.csr_array(a[:, rng.permutation(a.shape[1])] * 2.0)
    for m in (b, c):
        m.sort_indices()
    out = sp.csr_array(a + b + c)
    out_bytes = out.nnz * (8 + a.indices.itemsize) + (a.shape[0] + 1) * a.indptr.itemsize
    return Case(kernel, inp, {"A": a, "B": b, "C": c}, from_scipy(out),
                csr_bytes(a) + csr_bytes(b) + csr_bytes(c) + out_bytes, {"nnz(D)": out.nnz})


# --------------------------------------------------------------------------- tensor kernels

def _idx(order: int) -> list[str]:
    return list(MODE_INDICES[:order])


def _ttv_expr(order: int) -> str:
    ix = _idx(order)
    return f"A({','.join(ix[:-1])}) = B({','.join(ix)}) * c({ix[-1]})"


def _ttm_expr(order: int) -> str:
    ix = _idx(order)
    return f"A({','.join(ix[:-1])},l) = B({','.join(ix)}) * C({ix[-1]},l)"


def _mttkrp_expr(order: int) -> str:
    ix = _idx(order)
    factors = " * ".join(f"{FACTOR_NAMES[m - 1]}({ix[m]},l)" for m in range(1, order))
    return f"A(i,l) = B({','.join(ix)}) * {factors}"


def _innerprod_expr(order: int) -> str:
    ix = ",".join(_idx(order))
    return f"a = B({ix}) * C({ix})"


def _build_ttv(kernel: Kernel, inp: Input, s: Settings) -> Case:
    t = _tensor(inp)
    c = _rng(inp.name, 7).random(t.shape[-1])
    f, heads = fibers(t)
    ref = fiber_result(heads, f @ c, t.shape[:-1])
    return Case(kernel, inp, {"B": t, "c": c}, ref,
                csf_bytes(t.coords, t.shape) + c.nbytes + csf_bytes(heads, t.shape[:-1]),
                {"fibers": f.shape[0]})


def _build_ttm(kernel: Kernel, inp: Input, s: Settings) -> Case:
    t = _tensor(inp)
    m = _rng(inp.name, 8).random((t.shape[-1], s.rank))
    f, heads = fibers(t)
    ref = fiber_result(heads, f @ m, (*t.shape[:-1], s.rank))
    return Case(kernel, inp, {"B": t, "C": m}, ref, None, {"fibers": f.shape[0]})


def _build_mttkrp(kernel: Kernel, inp: Input, s: Settings) -> Case:
    t = _tensor(inp)
    rng = _rng(inp.name, 9)
    factors = [rng.random((t.shape[m], s.rank)) for m in range(1, t.order)]
    rows = t.vals[:, None] * math.prod(f[t.coords[m + 1]] for m, f in enumerate(factors))
    scatter = sp.csr_array((np.ones(t.nnz), (t.coords[0], np.arange(t.nnz))),
                           shape=(t.shape[0], t.nnz))
    ops = {"B": t} | {FACTOR_NAMES[m]: f for m, f in enumerate(factors)}
    return Case(kernel, inp, ops, scatter @ rows, None)


def _build_innerprod(kernel: Kernel, inp: Input, s: Settings) -> Case:
    t = _tensor(inp)
    rng = _rng(inp.name, 10)
    # C: a random half of B's nonzeros plus as many at random coordinates, new values,
    # so the two patterns overlap partly
    half = np.sort(rng.choice(t.nnz, t.nnz // 2, replace=False))
    extra = np.array([rng.integers(0, d, t.nnz - half.shape[0]) for d in t.shape])
    coords = np.hstack([t.coords[:, half], extra.reshape(t.order, -1)])
    coords, vals = canonical_coords(coords, rng.random(coords.shape[1]), t.shape)
    c = Tensor(f"{t.name}-other", t.source, coords, vals, t.shape)
    kb = np.ravel_multi_index(tuple(t.coords), t.shape)
    kc = np.ravel_multi_index(tuple(c.coords), t.shape)
    _, ib, ic = np.intersect1d(kb, kc, assume_unique=True, return_indices=True)
    ref = np.array(float(t.vals[ib] @ c.vals[ic]))
    return Case(kernel, inp, {"B": t, "C": c}, ref,
                csf_bytes(t.coords, t.shape) + csf_bytes(c.coords, c.shape),
                {"nnz(C)": c.nnz, "overlap": int(ib.shape[0])})


# --------------------------------------------------------------------------- registry

_csr = coiter.csr
KERNELS: dict[str, Kernel] = {k.name: k for k in [
    Kernel("spmv", "SpMV", "matrix", True, lambda o: "y(i) = A(i,j) * x(j)",
           lambda o: {"A": _csr}, _build_spmv),
    Kernel("spmspv", "SpMSpV", "matrix", True, lambda o: "y(i) = A(i,j) * x(j)",
           lambda o: {"A": coiter.csc, "x": coiter.sparse_vector()}, _build_spmspv),
    Kernel("spmm", "SpMM", "matrix", False, lambda o: "C(i,k) = A(i,j) * B(j,k)",
           lambda o: {"A": _csr}, _build_spmm),
    Kernel("sddmm", "SDDMM", "matrix", False, lambda o: "C(i,j) = A(i,j) * U(i,k) * V(j,k)",
           lambda o: {"A": _csr, "C": _csr}, _build_sddmm),
    Kernel("spgemm", "SpGEMM", "matrix", False, lambda o: "C(i,j) = A(i,k) * B(k,j)",
           lambda o: {"A": _csr, "B": _csr, "C": _csr}, _build_spgemm),
    # the same product into an unordered CSR result, which SciPy's own result is too
    Kernel("spgemm_u", "SpGEMM (unordered)", "matrix", False, lambda o: "C(i,j) = A(i,k) * B(k,j)",
           lambda o: {"A": _csr, "B": _csr, "C": coiter.csr_unordered}, _build_spgemm, "spgemm"),
    Kernel("spadd3", "SpAdd3", "matrix", True, lambda o: "D(i,j) = A(i,j) + B(i,j) + C(i,j)",
           lambda o: {"A": _csr, "B": _csr, "C": _csr, "D": _csr}, _build_spadd3),
    Kernel("ttv", "TTV", "tensor", True, _ttv_expr,
           lambda o: {"B": coiter.csf(o), "A": coiter.csf(o - 1)}, _build_ttv),
    Kernel("ttm", "TTM", "tensor", False, _ttm_expr,
           lambda o: {"B": coiter.csf(o), "A": "s" * (o - 1) + "d"}, _build_ttm),
    Kernel("mttkrp", "MTTKRP", "tensor", False, _mttkrp_expr,
           lambda o: {"B": coiter.csf(o)}, _build_mttkrp),
    Kernel("innerprod", "INNERPROD", "tensor", True, _innerprod_expr,
           lambda o: {"B": coiter.csf(o), "C": coiter.csf(o)}, _build_innerprod),
]}
