"""coiter.nn against NumPy implementations of torch.nn.functional's convolutions and pooling
(torch's semantics: zero padding for convolutions, padding that never wins a max, average
pools dividing by the whole window), on sparse inputs in several formats."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import coiter.nn as nn
from coiter.errors import ArgumentError, ShapeError

from helpers import check, random_array, tensor


def _taps(taps: tuple[int, ...]):
    return itertools.product(*[range(t) for t in taps])


def _window(m: int, tap: int, s: int, d: int, size: int) -> slice:
    return slice(d * tap, d * tap + s * (size - 1) + 1, s)


def np_conv(x, w, stride, padding, dilation, groups):
    """torch.nn.functional.conv{n}d: x (N, C, *spatial), w (K, C/groups, *taps)."""
    dims = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    cg, kg, taps = x.shape[1] // groups, w.shape[0] // groups, w.shape[2:]
    sizes = [(xp.shape[2 + m] - dilation[m] * (taps[m] - 1) - 1) // stride[m] + 1 for m in range(dims)]
    out = np.zeros((x.shape[0], w.shape[0], *sizes))
    for tap in _taps(taps):
        patch = xp[(slice(None), slice(None)) + tuple(
            _window(m, tap[m], stride[m], dilation[m], sizes[m]) for m in range(dims))]
        for g in range(groups):
            out[:, g * kg:(g + 1) * kg] += np.einsum(
                "nc...,kc->nk...", patch[:, g * cg:(g + 1) * cg], w[(slice(g * kg, (g + 1) * kg), slice(None), *tap)])
    return out


def np_conv_transpose(x, w, stride, padding, output_padding, groups, dilation):
    """torch.nn.functional.conv_transpose{n}d: w (C, K/groups, *taps)."""
    dims = x.ndim - 2
    cg, kg, taps = x.shape[1] // groups, w.shape[1], w.shape[2:]
    lengths = x.shape[2:]
    full = [(lengths[m] - 1) * stride[m] + dilation[m] * (taps[m] - 1) + 1 + output_padding[m]
            for m in range(dims)]
    out = np.zeros((x.shape[0], kg * groups, *full))
    for tap in _taps(taps):
        where = (slice(None), slice(None)) + tuple(
            _window(m, tap[m], stride[m], dilation[m], lengths[m]) for m in range(dims))
        for g in range(groups):
            part = np.einsum("nc...,ck->nk...", x[:, g * cg:(g + 1) * cg],
                             w[(slice(g * cg, (g + 1) * cg), slice(None), *tap)])
            out[where][:, g * kg:(g + 1) * kg] += part
    sizes = [full[m] - 2 * padding[m] for m in range(dims)]
    return out[(slice(None), slice(None)) + tuple(slice(padding[m], padding[m] + sizes[m])
                                                  for m in range(dims))]


def np_pool(x, op, taps, stride, padding, dilation):
    dims = x.ndim - 2
    fill = -np.inf if op == "max" else 0.0
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding], constant_values=fill)
    sizes = [(xp.shape[2 + m] - dilation[m] * (taps[m] - 1) - 1) // stride[m] + 1 for m in range(dims)]
    patches = [xp[(slice(None), slice(None)) + tuple(
        _window(m, tap[m], stride[m], dilation[m], sizes[m]) for m in range(dims))] for tap in _taps(taps)]
    return np.max(patches, axis=0) if op == "max" else np.sum(patches, axis=0) / np.prod(taps)


FORMATS = {1: ["ddd", "dds", "sss", "coo"], 2: ["dddd", "dsss", "ssss", "coo"],
           3: ["ddddd", "dssss", "coo"]}


@settings(max_examples=25)
@given(dims=st.integers(1, 3), data=st.data(), seed=st.integers(0, 99))
def test_conv(dims, data, seed) -> None:
    rng = np.random.default_rng(seed)
    groups = data.draw(st.sampled_from([1, 2]))
    c, k = 2 * groups, 2 * groups
    taps = tuple(data.draw(st.integers(1, 3)) for _ in range(dims))
    stride = tuple(data.draw(st.integers(1, 2)) for _ in range(dims))
    dilation = tuple(data.draw(st.integers(1, 2)) for _ in range(dims))
    padding = tuple(data.draw(st.integers(0, 1)) for _ in range(dims))
    spatial = tuple(data.draw(st.integers(dilation[m] * (taps[m] - 1) + 1, 7)) for m in range(dims))
    fmt = data.draw(st.sampled_from(FORMATS[dims]))
    x = random_array(rng, (2, c, *spatial), data.draw(st.sampled_from([0.05, 0.3, 1.0])))
    w = rng.standard_normal((k, c // groups, *taps))
    conv = (nn.conv1d, nn.conv2d, nn.conv3d)[dims - 1]
    got = conv(tensor(x, fmt), w, None, stride, padding, dilation, groups)
    check(got, np_conv(x, w, stride, padding, dilation, groups))


@settings(max_examples=20)
@given(dims=st.integers(1, 2), data=st.data(), seed=st.integers(0, 99))
def test_conv_transpose(dims, data, seed) -> None:
    rng = np.random.default_rng(seed)
    groups = data.draw(st.sampled_from([1, 2]))
    taps = tuple(data.draw(st.integers(1, 3)) for _ in range(dims))
    stride = tuple(data.draw(st.integers(1, 2)) for _ in range(dims))
    dilation = tuple(data.draw(st.integers(1, 2)) for _ in range(dims))
    padding = tuple(data.draw(st.integers(0, 1)) for _ in range(dims))
    output_padding = tuple(data.draw(st.integers(0, max(stride[m], dilation[m]) - 1))
                           for m in range(dims))
    spatial = tuple(data.draw(st.integers(2, 6)) for _ in range(dims))
    if any((spatial[m] - 1) * stride[m] - 2 * padding[m] + dilation[m] * (taps[m] - 1)
           + output_padding[m] + 1 < 1 for m in range(dims)):
        return  # torch has no such output either
    fmt = data.draw(st.sampled_from(FORMATS[dims]))
    x = random_array(rng, (1, 2 * groups, *spatial), 0.4)
    w = rng.standard_normal((2 * groups, 3, *taps))
    conv = (nn.conv_transpose1d, nn.conv_transpose2d)[dims - 1]
    got = conv(tensor(x, fmt), w, None, stride, padding, output_padding, groups, dilation)
    check(got, np_conv_transpose(x, w, stride, padding, output_padding, groups, dilation))


@settings(max_examples=25)
@given(op=st.sampled_from(["max", "avg"]), dims=st.integers(1, 3), data=st.data(),
       seed=st.integers(0, 99))
def test_pool(op, dims, data, seed) -> None:
    rng = np.random.default_rng(seed)
    taps = tuple(data.draw(st.integers(1, 3)) for _ in range(dims))
    stride = tuple(data.draw(st.integers(1, 3)) for _ in range(dims))
    padding = tuple(data.draw(st.integers(0, taps[m] // 2)) for m in range(dims))
    dilation = tuple(data.draw(st.integers(1, 2)) for _ in range(dims)) if op == "max" else (1,) * dims
    spatial = tuple(data.draw(st.integers(dilation[m] * (taps[m] - 1) + 1, 7)) for m in range(dims))
    fmt = data.draw(st.sampled_from(FORMATS[dims]))
    x = random_array(rng, (1, 2, *spatial), data.draw(st.sampled_from([0.1, 0.5])))
    if op == "max":
        got = (nn.max_pool1d, nn.max_pool2d, nn.max_pool3d)[dims - 1](
            tensor(x, fmt), taps, stride, padding, dilation)
    else:
        got = (nn.avg_pool1d, nn.avg_pool2d, nn.avg_pool3d)[dims - 1](tensor(x, fmt), taps, stride, padding)
    check(got, np_pool(x, op, taps, stride, padding, dilation))


def test_channels_last_bias_and_sparse_result() -> None:
    rng = np.random.default_rng(1)
    x = random_array(rng, (1, 3, 9, 8), 0.1)
    w, b = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    ref = np_conv(x, w, (1, 1), (1, 1), (1, 1), 1)
    last = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    got = nn.conv2d(tensor(last, "dssd"), w, b, padding=1, channels_last=True)
    check(got, (ref + b[:, None, None]).transpose(0, 2, 3, 1))
    # a sparse result: only outputs whose window holds an input are stored
    got = nn.conv2d(tensor(x, "dsss"), w, out_format="dsss")
    check(got, np_conv(x, w, (1, 1), (0, 0), (1, 1), 1))
    assert not got.format.is_dense
    with pytest.raises(ArgumentError, match="bias"):
        nn.conv2d(tensor(x, "dsss"), w, b, out_format="dsss")


@pytest.mark.parametrize("fmt", ["dddd", "dsss"])
def test_depthwise(fmt: str) -> None:
    rng = np.random.default_rng(4)
    x, w = random_array(rng, (1, 3, 7, 7), 0.3), rng.standard_normal((6, 1, 3, 3))
    check(nn.conv2d(tensor(x, fmt), w, padding=1, groups=3), np_conv(x, w, (1, 1), (1, 1), (1, 1), 3))


@pytest.mark.parametrize("form", ["ssss", "dddd", "array", "list"])
def test_filters_in_any_form(form: str) -> None:
    """A sparse or dense Tensor, an array or nested lists: the same convolution; the
    second call with another weight of the same shape reuses the cached plan."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 3, 8, 8))
    for _ in range(2):
        w = random_array(rng, (4, 3, 3, 3), 0.3)
        weight = w if form == "array" else w.tolist() if form == "list" else tensor(w, form)
        check(nn.conv2d(x, weight, stride=2), np_conv(x, w, (2, 2), (0, 0), (1, 1), 1))


@pytest.mark.parametrize("dens,first_faster,expected", [
    (0.001, False, True), (0.9, True, False), (0.1, True, True), (0.1, False, False)])
def test_the_one_thread_order_is_timed_between_the_densities(dens, first_faster, expected,
                                                              monkeypatch) -> None:
    """Outside MEASURED_DENSITIES the density decides; inside, the faster call does."""
    monkeypatch.setattr(nn, "faster", lambda a, b: first_faster)
    assert nn.scatters(dens, lambda: None, lambda: None) is expected


def test_a_shape_is_timed_once(monkeypatch) -> None:
    """The first call of a shape and density times the two loop orders; later calls keep
    the verdict, and both verdicts compute NumPy's convolution."""
    rng = np.random.default_rng(10)
    w = rng.standard_normal((3, 2, 3, 3))
    x = random_array(rng, (1, 2, 9, 9), 0.1)
    expected = np_conv(x, w, (1, 1), (1, 1), (1, 1), 1)
    for verdict in (True, False):
        timed: list[bool] = []
        monkeypatch.setattr(nn, "faster", lambda a, b, v=verdict: timed.append(v) or v)
        monkeypatch.setattr(nn, "_VERDICTS", {})
        for _ in range(3):
            check(nn.conv2d(tensor(x, "dsss"), w, padding=1, threads=1), expected)
        assert timed == [verdict]


def test_faster_times_both_calls() -> None:
    """The slower call loses whichever comes first."""
    import time

    def quick() -> None:
        pass

    def slow() -> None:
        time.sleep(0.002)

    assert nn.faster(quick, slow) and not nn.faster(slow, quick)


def test_threads_is_the_most_a_small_convolution_uses(monkeypatch) -> None:
    """Under ``PARALLEL_WORK`` multiply-adds a call asked for two threads runs the serial
    kernel; above it the rows run in parallel. The values agree either way."""
    rng = np.random.default_rng(9)
    x, w = random_array(rng, (1, 4, 12, 12), 0.2), rng.standard_normal((5, 4, 3, 3))
    expected = np_conv(x, w, (1, 1), (1, 1), (1, 1), 1)
    real, rows = nn._row_parallel_kernel, []
    monkeypatch.setattr(nn, "_row_parallel_kernel", lambda *key: rows.append(key) or real(*key))
    check(nn.conv2d(tensor(x, "dsss"), w, padding=1, threads=2), expected)
    assert not rows
    monkeypatch.setattr(nn, "PARALLEL_WORK", 0)
    check(nn.conv2d(tensor(x, "dsss"), w, padding=1, threads=2), expected)
    assert rows


def test_python_threads_convolving_with_weights_of_one_shape() -> None:
    """Each thread copies its weight into a filter buffer of its own: concurrent calls with
    different weights of one shape keep their own results."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(8)
    x = random_array(rng, (1, 3, 9, 9), 0.4)
    weights = [rng.standard_normal((4, 3, 3, 3)) for _ in range(4)]
    expected = [np_conv(x, w, (1, 1), (1, 1), (1, 1), 1) for w in weights]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            got = list(pool.map(lambda w: nn.conv2d(tensor(x, "dsss"), w, padding=1, threads=1).to_numpy(),
                                weights))
            for g, e in zip(got, expected):
                np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("call, message", [
    (lambda x, w: nn.conv2d(x, w[:, :2]), "need a weight of shape"),
    (lambda x, w: nn.conv2d(x, w, stride=0), "stride must be an int >= 1"),
    (lambda x, w: nn.conv2d(x, w, groups=2), "need a weight of shape"),
    (lambda x, w: nn.conv2d(x[:, :, :2], w), "smaller than the dilated filter"),
    (lambda x, w: nn.conv1d(x, w), "order 3"),
    (lambda x, w: nn.max_pool2d(x, 2, padding=2), "at most half"),
    (lambda x, w: nn.conv2d(x, w, np.ones(3)), "bias has shape"),
])
def test_bad_calls(call, message) -> None:
    x, w = np.ones((1, 3, 5, 5)), np.ones((4, 3, 3, 3))
    with pytest.raises((ShapeError, ArgumentError), match=message):
        call(x, w)



@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_submanifold_conv_keeps_the_input_sites(dims: int, threads: int) -> None:
    """Each active site gets the sum over the centred filter of its active neighbours; no
    other site is stored. The result is written at the sites' positions, so the rows of
    sites run on threads (regression: assembling the sparse result kept the kernel serial)."""
    rng = np.random.default_rng(5 + dims)
    spatial = (9, 8, 7)[:dims]
    active = rng.random(spatial) < 0.15
    x = np.zeros((1, *spatial, 3))
    x[0][active] = rng.standard_normal((int(active.sum()), 3))
    w, b = rng.standard_normal((4, 3, *(3,) * dims)), rng.standard_normal(4)
    got = nn.submanifold_conv(tensor(x, "d" + "s" * dims + "d"), w, b, threads=threads)
    full = np_conv(np.moveaxis(x, -1, 1), w, (1,) * dims, (1,) * dims, (1,) * dims, 1)
    expected = np.moveaxis(full, 1, -1) + b
    expected[0][~active] = 0
    check(got, expected)
    assert got.nnz == active.sum() * 4
    # the same sites as a mask shared by layers, from a dense input converted on the way
    mask = nn.sites(tensor(x, "d" + "s" * dims + "d"))
    got = nn.submanifold_conv(x, w, mask=mask, threads=threads)
    check(got, expected - np.where(expected != 0, b, 0))
    # 2-D and 3-D walk the sites outermost and write at their positions, over the mask's
    # index arrays (1-D scatters the input's entries and assembles)
    assert dims == 1 or all(np.shares_memory(arr, mask.storage.levels[k][name])
                            for k in range(1, dims + 1) for name, arr in got.storage.levels[k].items())
    with pytest.raises(ShapeError, match="odd taps"):
        nn.submanifold_conv(x, w[..., :2])


@pytest.mark.parametrize("fmt", ["dsss", "coo"])
def test_channels_last_max_pool_with_sparse_channels(fmt: str) -> None:
    """A max sees every tap of a channel; channels stored sparse below the spatial levels are
    re-stored densely first (regression: the kernel was refused for its storage order)."""
    rng = np.random.default_rng(6)
    x = random_array(rng, (1, 3, 7, 6), 0.3)
    last = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    got = nn.max_pool2d(tensor(last, fmt), 2, 2, channels_last=True)
    check(got, np.moveaxis(np_pool(x, "max", (2, 2), (2, 2), (0, 0), (1, 1)), 1, -1))


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("fmt", ["sparse", "dense-first"])
def test_the_loop_order_follows_the_input_density(dims: int, fmt: str) -> None:
    """On one thread a very sparse input is scattered entry by entry, a dense one walked per
    output row, and one between them takes whichever its first call timed faster; every
    choice gives NumPy's convolution, strided, dilated and grouped too."""
    rng = np.random.default_rng(dims)
    w = rng.standard_normal((4, 2, *(3,) * dims))
    for density in (0.002, 0.05, 0.3, 0.8):
        x = random_array(rng, (2, 4, *(7,) * dims), density)
        X = tensor(x, "s" * (dims + 2) if fmt == "sparse" else "d" + "s" * (dims + 1))
        for stride, dilation in ((1, 1), (2, 2)):
            got = nn.conv2d(X, w, stride=stride, padding=1, dilation=dilation, groups=2, threads=1) \
                if dims == 2 else nn.conv3d(X, w, stride=stride, padding=1, dilation=dilation, groups=2,
                                            threads=1)
            check(got, np_conv(x, w, (stride,) * dims, (1,) * dims, (dilation,) * dims, 2))
