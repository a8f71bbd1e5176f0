"""Convolutions and pooling called the way ``torch.nn.functional`` calls them, on sparse
or dense inputs.

Each function writes the index expression with compound subscripts
(docs/convolutions.md), compiles it for the operands' formats (cached) and runs it:
``conv2d(x, w, stride=2, padding=1)`` computes
``O(n,k,x,y) = I(n,c,2*x+r-1,2*y+q-1) * F(r,q,c,k)`` (the filter copied taps first).
Inputs are NumPy arrays or :class:`coiter.Tensor` in any format (a sparse input costs time
proportional to its stored entries); filters likewise. Layouts are torch's
(``N, C, spatial...``; weights ``K, C/groups, taps...``) unless ``channels_last=True``
(``N, spatial..., C``). Results are dense unless ``out_format`` names a sparse format.
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

from .api import compile as compile_kernel
from .errors import ArgumentError, FormatError, ScheduleError, ShapeError
from .formats.format import Format, FormatLike, as_format
from .formats.levels import Compressed, Dense
from .kernel import Kernel
from .operands import as_tensor
from .runtime.autotune import faster
from .tensor import Tensor

__all__ = [
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "submanifold_conv", "sites",
]

_SPATIAL = ("x", "y", "z")  # output coordinates of spatial modes
_TAPS = ("r", "q", "s")  # filter taps of spatial modes


def _tuple(value: int | Sequence[int], dims: int, what: str, least: int) -> tuple[int, ...]:
    values = (value,) * dims if isinstance(value, (int, np.integer)) and not isinstance(value, bool) \
        else tuple(value)
    if len(values) != dims or any(isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                  or v < least for v in values):
        raise ArgumentError(f"{what} must be an int >= {least} or {dims} of them, got {value!r}")
    return tuple(int(v) for v in values)


def _affine(terms: Sequence[tuple[int, str]], const: int = 0) -> str:
    """``2*x+r-1`` from ``[(2, "x"), (1, "r")]`` and -1 (coefficient-0 terms dropped)."""
    out = ""
    for c, v in terms:
        if c:
            out += ("+" if out else "") + (v if c == 1 else f"{c}*{v}")
    return out + (f"{const:+d}" if const else "")


def _aligned(a: np.ndarray, align: int = 64) -> np.ndarray:
    """A C-contiguous copy of ``a`` starting at a cache line: the kernels load rows of the
    filter as vectors, and a row split across lines costs up to a quarter of the time."""
    raw = np.empty(a.size * a.itemsize + align, dtype=np.uint8)
    skip = -raw.ctypes.data % align
    out = raw[skip:skip + a.size * a.itemsize].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


# this thread's filter tensors by shape and type: each call copies its weight into one
_FILTERS = threading.local()
_FILTERS_KEPT = 16  # distinct weight shapes kept per thread


def _filter(weight: np.ndarray) -> Tensor:
    """``weight`` (K, C, taps...) as a dense Tensor with taps outermost and output channels
    innermost (each input entry scales a contiguous row of it into the outputs), copied
    into a buffer this thread keeps per shape and type: a layer called again writes the
    same cache-aligned memory and passes the same kernel arguments (the kernel only reads
    it during the call; results never hold it)."""
    moved = np.moveaxis(weight, (0, 1), (-1, -2))
    kept: dict[tuple[tuple[int, ...], np.dtype], Tensor] = _FILTERS.__dict__.setdefault("kept", {})
    key = (moved.shape, moved.dtype)
    F = kept.get(key)
    if F is None:
        if len(kept) >= _FILTERS_KEPT:
            kept.clear()
        F = kept[key] = Tensor.from_numpy(_aligned(moved), name="F")
    else:
        np.copyto(F.storage.vals.reshape(moved.shape), moved)
    return F


def _access(name: str, batch: str, channel: str, spatial: list[str], channels_last: bool) -> str:
    modes = [batch, *spatial, channel] if channels_last else [batch, channel, *spatial]
    return f"{name}({','.join(modes)})"


@lru_cache(maxsize=256)
def _kernel(text: str, formats: tuple[tuple[str, str], ...], padding: bool,
            extents: tuple[tuple[str, int], ...], pattern_of: str | None, schedule: str | None,
            gather: tuple[str, ...] | None = None) -> Kernel:
    return compile_kernel(text, dict(formats), padding=padding, extents=dict(extents),
                          schedule=schedule, gather=gather, pattern_of=pattern_of)


def _run(text: str, operands: dict[str, Tensor], out_shape: tuple[int, ...],
         out_format: FormatLike | None, padding: bool, extents: dict[str, int],
         threads: int | None, schedule: str | None = None, scatter_sparse: bool = False,
         pattern_of: str | None = None, work: int | None = None) -> Tensor:
    """Compile ``text`` for the operands' formats (cached) and run it. With more than one
    thread the rows of the first spatial mode are walked per output row (``gather``, the
    default for 2-D and 3-D) and run in parallel, where the kernel has that loop (a batch of
    one image has nothing else to share out). ``threads`` is the most a call uses: one of
    under ``PARALLEL_WORK`` multiply-adds (``work``) runs on one thread. On one thread,
    ``scatter_sparse`` chooses between scattering every stored input entry (``gather=()``)
    and walking output rows by the fraction of coordinates the input ``I`` stores:
    scattering below ``MEASURED_DENSITIES[0]``, rows above ``MEASURED_DENSITIES[1]``, and
    between them (where the loop-order study of docs/benchmarks/convolutions.md finds either
    faster from run to run) the first call of each shape times both (:func:`faster`) and
    later calls take the winner."""
    formats = {n: t.format.to_string() for n, t in operands.items()}
    if out_format is not None:
        formats["O"] = as_format(out_format, len(out_shape)).to_string()
    key = (text, tuple(sorted(formats.items())), padding, tuple(sorted(extents.items())), pattern_of)
    kernel = None
    if work is not None and work < PARALLEL_WORK:
        threads = 1
    if (threads if threads is not None else os.cpu_count() or 1) > 1:
        kernel = _row_parallel_kernel(*key, schedule)
    elif scatter_sparse:
        kernel = _one_thread_kernel(key, schedule, operands, out_shape)
    return (kernel or _kernel(*key, schedule)).run(operands, out_shape, threads)


def _one_thread_kernel(key: tuple[Any, ...], schedule: str | None, operands: dict[str, Tensor],
                       out_shape: tuple[int, ...]) -> Kernel | None:
    """The scattering kernel or None (the default, output rows walked) for one thread."""
    dens = density(operands["I"])
    scatter = _scatter_kernel(*key, schedule) if dens < MEASURED_DENSITIES[1] else None
    if scatter is None or dens < MEASURED_DENSITIES[0]:
        return scatter
    # one verdict per shape and 5% of density, kept for the process
    verdict_key = (key, schedule, operands["I"].shape, round(dens * 20))
    verdict = _VERDICTS.get(verdict_key)
    if verdict is None:
        rows = _kernel(*key, schedule)
        if len(_VERDICTS) >= _VERDICTS_KEPT:
            _VERDICTS.clear()
        verdict = _VERDICTS[verdict_key] = scatters(
            dens, lambda: scatter.run(operands, out_shape, 1), lambda: rows.run(operands, out_shape, 1))
    return scatter if verdict else None


def scatters(dens: float, scatter: Callable[[], Any], rows: Callable[[], Any]) -> bool:
    """The one-thread loop order of a convolution whose input stores the fraction ``dens``
    of its coordinates, given calls of its two kernels: whether to scatter every input entry
    (else walk output rows). By density outside ``MEASURED_DENSITIES``, else timed."""
    low, high = MEASURED_DENSITIES
    return dens < low or (dens < high and faster(scatter, rows))


# below this many multiply-adds a convolution runs on one thread: a parallel region costs
# more than it saves (ResNet layer at 99.9% sparsity, ~10^5: 2 threads 1.4x slower than one
# alternating with torch's convolution, whose OpenMP threads spin on the other core)
PARALLEL_WORK = 1 << 20

# fractions of stored input coordinates: below the first a convolution on one thread scatters
# every input entry, above the second it walks output rows, and between them it measures
# (the loop-order study: between 50% and 99% sparsity the faster changes between runs)
MEASURED_DENSITIES = (0.005, 0.6)
_VERDICTS: dict[tuple[Any, ...], bool] = {}  # measured choices: scatter?
_VERDICTS_KEPT = 1024


def density(t: Tensor) -> float:
    """The fraction of ``t``'s coordinates it stores (1 for dense formats)."""
    size = math.prod(t.shape)
    return 1.0 if t.format.is_dense or size == 0 else t.nnz / size


@lru_cache(maxsize=256)
def _scatter_kernel(text: str, formats: tuple[tuple[str, str], ...], padding: bool,
                    extents: tuple[tuple[str, int], ...], pattern_of: str | None,
                    schedule: str | None) -> Kernel | None:
    """The kernel scattering every input entry (``gather=()``), or None (cached too) where
    the operands' formats do not allow it."""
    try:
        kernel = _kernel(text, formats, padding, extents, pattern_of, schedule, ())
        kernel.concrete  # noqa: B018 - a kernel that cannot be built fails here
        return kernel
    except (ScheduleError, FormatError):
        return None


@lru_cache(maxsize=256)
def _row_parallel_kernel(text: str, formats: tuple[tuple[str, str], ...], padding: bool,
                         extents: tuple[tuple[str, int], ...], pattern_of: str | None,
                         schedule: str | None) -> Kernel | None:
    """The kernel with the first spatial mode's output rows on threads, or None (cached
    too) when it has no such loop or its iterations would share outputs."""
    rows = f"parallelize({_SPATIAL[0]},CPUThread,NoRaces)"
    try:
        return _kernel(text, formats, padding, extents, pattern_of,
                       f"{schedule},{rows}" if schedule else rows,
                       (_SPATIAL[0],))
    except ScheduleError:
        return None


def _with_bias(out: Tensor, bias: Any, channels: int, dims: int, channels_last: bool) -> Tensor:
    if bias is None:
        return out
    b = np.asarray(bias.to_numpy() if isinstance(bias, Tensor) else bias)
    if b.shape != (channels,):
        raise ShapeError(f"bias has shape {b.shape}, the result has {channels} channels")
    if not out.format.is_dense:
        raise ArgumentError("a bias makes every output nonzero: ask for a dense result")
    shape = (channels,) if channels_last else (channels,) + (1,) * dims
    return Tensor.from_numpy(out.to_numpy() + b.reshape(shape), name=out.name)


def _operands(name: str, dims: int, input: Any, weight: Any, groups: int, channels_last: bool
              ) -> tuple[Tensor, Tensor | np.ndarray, int, int, tuple[int, ...]]:
    """Input as a Tensor and weight (a NumPy array stays one: a dense filter is copied
    anyway) of order ``dims + 2``, checked with ``groups``; the batch, the input channels
    and the spatial shape."""
    I = as_tensor(input, name="I")
    F = weight if isinstance(weight, np.ndarray) else as_tensor(weight, name="F")
    if I.order != dims + 2 or len(F.shape) != dims + 2:
        raise ShapeError(f"{name} takes an input and a weight of order {dims + 2}, got "
                         f"{I.order} and {len(F.shape)}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ArgumentError(f"groups must be a positive int, got {groups!r}")
    channels = I.shape[-1] if channels_last else I.shape[1]
    spatial = I.shape[1:-1] if channels_last else I.shape[2:]
    return I, F, I.shape[0], channels, tuple(spatial)


def _channels(groups: int, cg: int, kg: int) -> tuple[str, str]:
    """Subscripts of the input and output channels: ``c`` and ``k``, or within groups of
    ``cg`` and ``kg`` channels ``cg*g+c`` and ``kg*g+k`` (nothing is reshaped)."""
    if groups == 1:
        return "c", "k"
    return _affine([(cg, "g"), (1, "c")]), _affine([(kg, "g"), (1, "k")])


@dataclass(frozen=True)
class _Call:
    """What a call compiles and runs: the expression, the result's shape, whether
    subscripts reach into padding, the sizes of index variables no operand gives, and the
    multiply-adds per stored input entry (every tap of the filters of its group)."""
    text: str
    out_shape: tuple[int, ...]
    padded: bool
    extents: tuple[tuple[str, int], ...]
    entry_work: int


@lru_cache(maxsize=256)
def _conv_call(dims: int, in_shape: tuple[int, ...], w_shape: tuple[int, ...], dense_filter: bool,
               s: tuple[int, ...], p: tuple[int, ...], d: tuple[int, ...], groups: int,
               channels_last: bool) -> _Call:
    """The convolution of an input and a weight of these shapes (checked), cached: a layer
    called again costs no string building."""
    n, channels = in_shape[0], in_shape[-1] if channels_last else in_shape[1]
    spatial = in_shape[1:-1] if channels_last else in_shape[2:]
    k_out, cg, taps = w_shape[0], w_shape[1], w_shape[2:]
    if channels % groups or k_out % groups or cg * groups != channels:
        raise ShapeError(f"{channels} input channels and {k_out} filters in {groups} groups need a "
                         f"weight of shape ({k_out}, {channels // groups}, ...), got {w_shape}")
    kg = k_out // groups
    sizes = [(spatial[m] + 2 * p[m] - d[m] * (taps[m] - 1) - 1) // s[m] + 1 for m in range(dims)]
    if any(o < 1 for o in sizes):
        raise ShapeError(f"conv{dims}d: the input's spatial shape {tuple(spatial)} is smaller "
                         f"than the dilated filter {tuple(taps)} with padding {p}")
    out_vars, tap_vars = list(_SPATIAL[:dims]), list(_TAPS[:dims])
    reads = [_affine([(s[m], out_vars[m]), (d[m], tap_vars[m])], -p[m]) for m in range(dims)]
    chan_in, chan_out = _channels(groups, cg, kg)
    # a dense filter is copied with taps outermost and output channels innermost: each input
    # entry scales a contiguous row of it into the outputs (a sparse one keeps its layout)
    filt = f"F({','.join(tap_vars)},c,{chan_out})" if dense_filter else \
        f"F({chan_out},c,{','.join(tap_vars)})"
    text = (f"{_access('O', 'n', chan_out, out_vars, channels_last)} = "
            f"{_access('I', 'n', chan_in, reads, channels_last)} * {filt}")
    extents = (("g", groups), ("k", kg)) if groups > 1 else ()
    out_shape = (n, *sizes, k_out) if channels_last else (n, k_out, *sizes)
    return _Call(text, out_shape, any(p), extents, math.prod(taps) * kg)


def _conv(dims: int, input: Any, weight: Any, bias: Any, stride: Any, padding: Any,
          dilation: Any, groups: int, channels_last: bool, out_format: FormatLike | None,
          threads: int | None) -> Tensor:
    I, F, _, _, _ = _operands(f"conv{dims}d", dims, input, weight, groups, channels_last)
    s, p, d = (_tuple(v, dims, w, lo) for v, w, lo in
               ((stride, "stride", 1), (padding, "padding", 0), (dilation, "dilation", 1)))
    dense_filter = isinstance(F, np.ndarray) or F.format.is_dense
    call = _conv_call(dims, I.shape, F.shape, dense_filter, s, p, d, groups, channels_last)
    if dense_filter:
        F = _filter(F if isinstance(F, np.ndarray) else F.to_numpy())
    out = _run(call.text, {"I": I, "F": F}, call.out_shape, out_format, call.padded,
               dict(call.extents), threads, scatter_sparse=True, work=I.nnz * call.entry_work)
    return _with_bias(out, bias, F.shape[-1] if dense_filter else F.shape[0], dims, channels_last)


def _conv_transpose(dims: int, input: Any, weight: Any, bias: Any, stride: Any, padding: Any,
                    output_padding: Any, groups: int, dilation: Any, channels_last: bool,
                    out_format: FormatLike | None, threads: int | None) -> Tensor:
    I, W, n, channels, spatial = _operands(f"conv_transpose{dims}d", dims, input, weight,
                                           groups, channels_last)
    F = as_tensor(W, name="F")
    s, p, d, op = (_tuple(v, dims, w, lo) for v, w, lo in
                   ((stride, "stride", 1), (padding, "padding", 0), (dilation, "dilation", 1),
                    (output_padding, "output_padding", 0)))
    c_in, kg, taps = F.shape[0], F.shape[1], F.shape[2:]
    if c_in != channels or channels % groups:
        raise ShapeError(f"{channels} input channels in {groups} groups need a weight of shape "
                         f"({channels}, out_channels / groups, ...), got {F.shape}")
    cg = channels // groups
    sizes = [(spatial[m] - 1) * s[m] - 2 * p[m] + d[m] * (taps[m] - 1) + op[m] + 1
             for m in range(dims)]
    if any(o < 1 for o in sizes) or any(op[m] >= max(s[m], d[m]) for m in range(dims)):
        raise ShapeError(f"conv_transpose{dims}d: output sizes {sizes} (output_padding must be "
                         "smaller than the stride or the dilation)")
    in_vars, tap_vars = list(_SPATIAL[:dims]), list(_TAPS[:dims])
    writes = [_affine([(s[m], in_vars[m]), (d[m], tap_vars[m])], -p[m]) for m in range(dims)]
    chan_in, chan_out = _channels(groups, cg, kg)
    text = (f"{_access('O', 'n', chan_out, writes, channels_last)} = "
            f"{_access('I', 'n', chan_in, in_vars, channels_last)} * "
            f"F({chan_in},k,{','.join(tap_vars)})")
    extents = {"g": groups, "c": cg} if groups > 1 else {}
    k_out = kg * groups
    out_shape = (n, *sizes, k_out) if channels_last else (n, k_out, *sizes)
    out = _run(text, {"I": I, "F": F}, out_shape, out_format, True, extents, threads)
    return _with_bias(out, bias, k_out, dims, channels_last)


def _pool(dims: int, op: str, input: Any, kernel_size: Any, stride: Any, padding: Any,
          dilation: Any, channels_last: bool, out_format: FormatLike | None,
          threads: int | None) -> Tensor:
    I = as_tensor(input, name="I")
    if I.order != dims + 2:
        raise ShapeError(f"{op}_pool{dims}d takes an input of order {dims + 2}, got {I.order}")
    if op == "max" and channels_last and not I.format.levels[-1].full:
        # a max sees every tap of a channel: channels walked below the spatial windows would
        # have to be walked outside them, so they are stored densely (as point-cloud
        # features are)
        I = I.asformat(_site_format(I.order))
    taps = _tuple(kernel_size, dims, "kernel_size", 1)
    s = taps if stride is None else _tuple(stride, dims, "stride", 1)
    p, d = _tuple(padding, dims, "padding", 0), _tuple(dilation, dims, "dilation", 1)
    if any(2 * p[m] > taps[m] for m in range(dims)):
        raise ArgumentError(f"padding {p} must be at most half the kernel size {taps}")
    spatial = I.shape[1:-1] if channels_last else I.shape[2:]
    sizes = [(spatial[m] + 2 * p[m] - d[m] * (taps[m] - 1) - 1) // s[m] + 1 for m in range(dims)]
    if any(o < 1 for o in sizes):
        raise ShapeError(f"{op}_pool{dims}d: the input's spatial shape {tuple(spatial)} is "
                         f"smaller than the window {taps}")
    out_vars, tap_vars = list(_SPATIAL[:dims]), list(_TAPS[:dims])
    reads = [_affine([(s[m], out_vars[m]), (d[m], tap_vars[m])], -p[m]) for m in range(dims)]
    body = _access("I", "n", "c", reads, channels_last)
    if op == "max":
        for t in reversed(tap_vars):
            body = f"max({t}, {body})"
    else:  # torch's count_include_pad: the window's size divides, padding included
        body = f"{body} * {1.0 / float(np.prod(taps))!r}"
    text = f"{_access('O', 'n', 'c', out_vars, channels_last)} = {body}"
    n, channels = I.shape[0], I.shape[-1] if channels_last else I.shape[1]
    out_shape = (n, *sizes, channels) if channels_last else (n, channels, *sizes)
    return _run(text, {"I": I}, out_shape, out_format, any(p), dict(zip(tap_vars, taps)), threads)


def _conv_doc(dims: int) -> str:
    return (f"torch.nn.functional.conv{dims}d on coiter operands: ``input`` "
            f"(N, C, {dims} spatial) and ``weight`` (K, C/groups, {dims} taps), or channels last.")


def conv1d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, channels_last: bool = False,
           out_format: FormatLike | None = None, threads: int | None = None) -> Tensor:
    return _conv(1, input, weight, bias, stride, padding, dilation, groups, channels_last,
                 out_format, threads)


def conv2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, channels_last: bool = False,
           out_format: FormatLike | None = None, threads: int | None = None) -> Tensor:
    return _conv(2, input, weight, bias, stride, padding, dilation, groups, channels_last,
                 out_format, threads)


def conv3d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, channels_last: bool = False,
           out_format: FormatLike | None = None, threads: int | None = None) -> Tensor:
    return _conv(3, input, weight, bias, stride, padding, dilation, groups, channels_last,
                 out_format, threads)


conv1d.__doc__, conv2d.__doc__, conv3d.__doc__ = (_conv_doc(n) for n in (1, 2, 3))


def conv_transpose1d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1, *,
                     channels_last: bool = False, out_format: FormatLike | None = None,
                     threads: int | None = None) -> Tensor:
    """torch.nn.functional.conv_transpose1d: weight (C, K/groups, taps)."""
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation, channels_last, out_format, threads)


def conv_transpose2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1, *,
                     channels_last: bool = False, out_format: FormatLike | None = None,
                     threads: int | None = None) -> Tensor:
    """torch.nn.functional.conv_transpose2d: weight (C, K/groups, taps)."""
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation, channels_last, out_format, threads)


def conv_transpose3d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1, *,
                     channels_last: bool = False, out_format: FormatLike | None = None,
                     threads: int | None = None) -> Tensor:
    """torch.nn.functional.conv_transpose3d: weight (C, K/groups, taps)."""
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups,
                           dilation, channels_last, out_format, threads)


def max_pool1d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               *, channels_last: bool = False, out_format: FormatLike | None = None,
               threads: int | None = None) -> Tensor:
    """torch.nn.functional.max_pool1d (implicit zeros count; padding never wins)."""
    return _pool(1, "max", input, kernel_size, stride, padding, dilation, channels_last,
                 out_format, threads)


def max_pool2d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               *, channels_last: bool = False, out_format: FormatLike | None = None,
               threads: int | None = None) -> Tensor:
    """torch.nn.functional.max_pool2d (implicit zeros count; padding never wins)."""
    return _pool(2, "max", input, kernel_size, stride, padding, dilation, channels_last,
                 out_format, threads)


def max_pool3d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               *, channels_last: bool = False, out_format: FormatLike | None = None,
               threads: int | None = None) -> Tensor:
    """torch.nn.functional.max_pool3d (implicit zeros count; padding never wins)."""
    return _pool(3, "max", input, kernel_size, stride, padding, dilation, channels_last,
                 out_format, threads)


def avg_pool1d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, *,
               channels_last: bool = False, out_format: FormatLike | None = None,
               threads: int | None = None) -> Tensor:
    """torch.nn.functional.avg_pool1d (count_include_pad=True)."""
    return _pool(1, "avg", input, kernel_size, stride, padding, 1, channels_last, out_format,
                 threads)


def avg_pool2d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, *,
               channels_last: bool = False, out_format: FormatLike | None = None,
               threads: int | None = None) -> Tensor:
    """torch.nn.functional.avg_pool2d (count_include_pad=True)."""
    return _pool(2, "avg", input, kernel_size, stride, padding, 1, channels_last, out_format,
                 threads)


def avg_pool3d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, *,
               channels_last: bool = False, out_format: FormatLike | None = None,
               threads: int | None = None) -> Tensor:
    """torch.nn.functional.avg_pool3d (count_include_pad=True)."""
    return _pool(3, "avg", input, kernel_size, stride, padding, 1, channels_last, out_format,
                 threads)


def _site_format(order: int) -> Format:
    """Channels-last sparse features: dense batch, compressed spatial levels, dense channels."""
    return Format([Dense(), *(Compressed() for _ in range(order - 2)), Dense()])


def sites(input: Tensor) -> Tensor:
    """The active sites of channels-last features ``input`` ``(N, *spatial, C)`` stored as
    :func:`_site_format` lays them out: a tensor of ones over the same index arrays (no copy)."""
    st = input.storage
    channels = input.shape[-1]
    count = st.vals.shape[0] // channels if channels else 0
    return Tensor.from_arrays(input.shape[:-1], Format(list(input.format.levels[:-1])),
                              st.levels[:-1], np.ones(count, dtype=st.vals.dtype), name="M")


def submanifold_conv(input: Any, weight: Any, bias: Any = None, dilation: Any = 1, *,
                     mask: Tensor | None = None, threads: int | None = None) -> Tensor:
    """Submanifold sparse convolution (Graham et al.; spconv's ``SubMConv``): the result has
    exactly the input's active sites, each the sum over the centred filter of its active
    neighbours. ``input`` is channels last, ``(N, *spatial, C)``, stored (or converted) with
    compressed spatial levels and dense channels; ``weight`` is ``(K, C, *taps)`` with odd taps.
    ``mask`` (from :func:`sites`) may be passed when several layers share the input's sites.
    The loops walk the sites and, per filter tap, the window of the neighbouring row
    (binary search), so the work follows the active sites, never the grid."""
    I = as_tensor(input, name="I")
    dims = I.order - 2
    if dims < 1:
        raise ShapeError(f"submanifold_conv takes features (N, *spatial, C), got order {I.order}")
    fmt = _site_format(I.order)
    if I.format != fmt:
        I = I.asformat(fmt)
    W = np.asarray(weight.to_numpy() if isinstance(weight, Tensor) else weight)
    k_out, taps = W.shape[0], W.shape[2:]
    if W.ndim != I.order or W.shape[1] != I.shape[-1] or any(t % 2 == 0 for t in taps):
        raise ShapeError(f"submanifold_conv: weight must be (K, {I.shape[-1]}, odd taps x {dims}), "
                         f"got {W.shape}")
    d = _tuple(dilation, dims, "dilation", 1)
    M = sites(I) if mask is None else mask
    if M.shape != I.shape[:-1]:
        raise ShapeError(f"mask has shape {M.shape}, the input's sites {I.shape[:-1]}")
    out_vars, tap_vars = list(_SPATIAL[:dims]), list(_TAPS[:dims])
    reads = [_affine([(1, out_vars[m]), (d[m], tap_vars[m])], -d[m] * (taps[m] // 2))
             for m in range(dims)]
    text = (f"O(n,{','.join(out_vars)},k) = M(n,{','.join(out_vars)}) * I(n,{','.join(reads)},c) "
            f"* F({','.join(tap_vars)},c,k)")
    operands = {"M": M, "I": I, "F": _filter(W)}
    # each neighbour's channel scales a contiguous row of filter into the outputs
    # the result takes M's sites (M's levels, no assembly): the rows of sites run in parallel
    out = _run(text, operands, (*I.shape[:-1], k_out), fmt, True, {}, threads, "reorder(c,k)",
               pattern_of="M")
    if bias is not None:
        b = np.asarray(bias)
        if b.shape != (k_out,):
            raise ShapeError(f"bias has shape {b.shape}, the result has {k_out} channels")
        st = out.storage
        vals = (st.vals.reshape(-1, k_out) + b).reshape(-1)
        out = Tensor.from_arrays(out.shape, out.format, st.levels, vals, name=out.name)
    return out
