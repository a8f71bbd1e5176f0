"""Sparsity plots: :func:`spy` draws where a matrix stores entries (matplotlib, an optional
dependency: ``pip install matplotlib``)."""
from __future__ import annotations

from typing import Any

from .errors import ArgumentError
from .operands import as_tensor

__all__ = ["spy"]


def spy(tensor: Any, ax: Any = None, markersize: float | None = None, **style: Any) -> Any:
    """Plot the stored entries of a matrix (a :class:`coiter.Tensor` in any format, or
    anything coiter takes as an operand: SciPy, pydata/sparse, NumPy) as dots, row 0 at the
    top as :func:`matplotlib.pyplot.spy` draws it, on ``ax`` (a new figure's axes by default).
    Every stored entry is drawn, explicit zeros included; the title gives the shape and the
    number of stored entries. ``markersize`` defaults to a size that stays readable from a
    few entries to millions; ``style`` goes to :meth:`matplotlib.axes.Axes.plot`. Returns the
    axes."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ArgumentError("coiter.spy needs matplotlib: pip install matplotlib") from exc
    t = as_tensor(tensor, name="tensor")
    if t.order != 2:
        raise ArgumentError(f"coiter.spy draws matrices; this tensor has order {t.order} "
                            "(plot a slice or an unfolding)")
    rows, cols = t.shape
    coords, _ = t.storage.to_coords()
    if ax is None:
        _, ax = plt.subplots()
    if markersize is None:
        markersize = max(0.5, min(6.0, 300.0 / max(rows, cols, 1) ** 0.5))
    ax.plot(coords[1], coords[0], linestyle="none", marker="s", markersize=markersize,
            **{"color": "black", **style})
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    # square cells, unless the matrix is so elongated that they would be slivers
    ax.set_aspect("equal" if max(rows, cols) <= 20 * max(min(rows, cols), 1) else "auto")
    ax.xaxis.tick_top()
    ax.set_title(f"{rows} x {cols}, {t.nnz} stored")
    return ax
