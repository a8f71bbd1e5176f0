"""schedule="auto": the autoscheduler's templates searched on the operands, cached."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter.concrete.autoschedule import templates
from coiter.runtime import autotune


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "autotune.json"
    monkeypatch.setattr(autotune, "_store", lambda: path)
    return path


def test_templates_are_legal_and_include_position_splits() -> None:
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    cands = templates(k.concrete)
    texts = [str(c) for c in cands]
    assert texts[0] == "default"
    assert any(t.startswith("split(i,i0,i1,16),parallelize(i0,CPUThread,NoRaces") for t in texts)
    # the collapsed position split races on y(i): only its Atomics variant survives
    assert any("pos(coiter_f,coiter_fp,A(i,j))" in t and "Atomics" in t for t in texts)
    assert not any("pos(coiter_f" in t and "NoRaces" in t for t in texts)


def test_auto_spmv_searches_once_per_size_class(store) -> None:
    A = sp.random_array((3000, 2000), density=0.01, format="csr", random_state=1)
    x = np.random.default_rng(1).random(2000)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="auto")
    np.testing.assert_allclose(k(A=A, x=x, threads=2).to_numpy(), A @ x)
    (trials,) = k.tuner.trials.values()
    assert len(trials) >= 5 and all(seconds > 0 for _, seconds in trials)
    assert store.exists() and "y(i) = A(i,j) * x(j)|A=ds" in store.read_text()
    # a new kernel reads the stored winner: no search, same results
    k2 = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="auto")
    np.testing.assert_allclose(k2(A=A, x=x).to_numpy(), A @ x)
    assert k2.tuner.trials == {} and k2.tuner.winners == k.tuner.winners


def test_auto_sparse_result_and_tensor_kernels(store) -> None:
    A = sp.random_array((400, 300), density=0.02, format="csr", random_state=2)
    B = sp.random_array((300, 350), density=0.02, format="csr", random_state=3)
    k = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"},
                       schedule="auto")
    np.testing.assert_allclose(k(A=A, B=B).to_scipy().toarray(), (A @ B).toarray())
    rng = np.random.default_rng(4)
    T = (rng.random((20, 15, 12)) < 0.1) * rng.random((20, 15, 12))
    C, D = rng.random((15, 6)), rng.random((12, 6))
    k = coiter.compile("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", formats={"B": coiter.csf(3)}, schedule="auto")
    np.testing.assert_allclose(k(B=T, C=C, D=D).to_numpy(), np.einsum("ikl,kj,lj->ij", T, C, D))


@pytest.mark.parametrize("setting", ["1", "0", "no tqdm"])
def test_search_progress_bar(store, setting, monkeypatch, capsys) -> None:
    import sys

    if setting == "no tqdm":
        monkeypatch.setitem(sys.modules, "tqdm", None)  # as if not installed
    else:
        monkeypatch.setenv("COITER_PROGRESS", setting)
    A = sp.random_array((200, 150), density=0.05, format="csr", random_state=3)
    x = np.random.default_rng(3).random(150)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="auto")
    np.testing.assert_allclose(k(A=A, x=x).to_numpy(), A @ x)
    (trials,) = k.tuner.trials.values()
    err = capsys.readouterr().err
    if setting == "1":  # a bar over the schedules tried (every one: all compute the same)
        assert "autotuning y(i) = A(i,j) * x(j)" in err and f"0/{len(trials)} " in err
    else:
        assert "autotuning" not in err
