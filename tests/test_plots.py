"""coiter.spy: the dots it draws are the stored entries SciPy lists, in every format."""
from __future__ import annotations

import sys

import matplotlib
import numpy as np
import pytest
import scipy.sparse as sp

import coiter

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr", "dense"])
def test_spy_draws_every_stored_entry(fmt: str) -> None:
    m = sp.random_array((37, 23), density=0.15, format="coo", rng=5)
    t = coiter.Tensor.from_numpy(m.toarray(), format=fmt)
    ax = coiter.spy(t)
    cols, rows = ax.lines[0].get_data()
    dense = fmt == "dense"
    expected = ({(i, j) for i in range(37) for j in range(23)} if dense
                else set(zip(m.row.tolist(), m.col.tolist())))
    assert set(zip(np.asarray(rows).tolist(), np.asarray(cols).tolist())) == expected
    assert ax.get_title() == f"37 x 23, {len(expected)} stored"
    assert ax.get_ylim() == (36.5, -0.5)  # row 0 at the top
    plt.close("all")


def test_spy_takes_other_operands_and_axes() -> None:
    m = sp.random_array((8, 8), density=0.3, format="csr", rng=2)
    fig, ax = plt.subplots()
    assert coiter.spy(m, ax=ax, color="red") is ax
    cols, rows = ax.lines[0].get_data()
    assert sorted(zip(rows, cols)) == sorted(zip(*m.nonzero()))
    plt.close(fig)


def test_spy_refuses_what_it_cannot_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(coiter.ArgumentError, match="order 3"):
        coiter.spy(np.ones((2, 2, 2)))
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # as if not installed
    with pytest.raises(coiter.ArgumentError, match="pip install matplotlib"):
        coiter.spy(np.eye(3))
