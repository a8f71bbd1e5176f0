"""coiter.dask on a two-process LocalCluster: every kernel against SciPy/NumPy over several
partitionings, Dask's own operations on coiter blocks, one compile per worker, the parallel
reader, a worker killed mid-job, and a matrix larger than one worker's memory limit."""
from __future__ import annotations

import logging
import os
import secrets
import signal
import time

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from distributed import Client, LocalCluster, wait

import coiter
import coiter.dask as cd
from coiter.errors import ArgumentError, ShapeError


def _cluster(**kwargs: object) -> LocalCluster:
    return LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                        dashboard_address=":0", silence_logs=logging.CRITICAL, **kwargs)


@pytest.fixture(scope="module")
def client():
    with _cluster() as cluster, Client(cluster) as c:
        yield c


# block sizes of the first mode (rows) for a mode of extent 40
PARTITIONS = {
    "one block": (40,),
    "uneven": (7, 20, 13),
    "empty blocks": (0, 15, 0, 25, 0),
    "more than workers": (5,) * 8,
}


def _matrix(m: int, n: int, density: float, seed: int) -> sp.csr_array:
    return sp.random_array((m, n), density=density, random_state=seed, format="csr")


def _dense(t: object) -> np.ndarray:
    if isinstance(t, coiter.Tensor):
        return t.to_numpy()
    return np.asarray(t)


@pytest.mark.parametrize("rows", PARTITIONS.values(), ids=PARTITIONS.keys())
def test_kernels_match_scipy(client: Client, rows: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    A = _matrix(40, 30, 0.15, 1)
    dA = cd.from_array(A, chunks=(rows, -1))
    x = rng.random(30)
    X = rng.random((30, 4))
    B = _matrix(30, 25, 0.2, 2)
    S = _matrix(40, 25, 0.2, 3)
    U, V = rng.random((40, 6)), rng.random((6, 25))
    A2, A3 = _matrix(40, 30, 0.1, 4), _matrix(40, 30, 0.1, 5)
    T = rng.random((40, 5, 6)) * (rng.random((40, 5, 6)) < 0.3)
    dT = cd.from_array(coiter.Tensor.from_numpy(T, format="sss"), chunks=(rows, -1, -1))
    c = rng.random(6)
    C, D = rng.random((5, 3)), rng.random((6, 3))
    cases = {
        "spmv": (cd.spmv(dA, x), A @ x),
        "spmm": (cd.spmm(dA, X), A @ X),
        "spgemm": (cd.spgemm(dA, B), (A @ B).toarray()),
        "sddmm": (cd.sddmm(cd.from_array(S, chunks=(rows, -1)), U, V),
                  S.multiply(U @ V).toarray()),
        "add": (cd.add(dA, cd.from_array(A2, chunks=(rows, -1)), A3),
                (A + A2 + A3).toarray()),
        "multiply": (cd.multiply(dA, cd.from_array(A2 + A, chunks=(rows, -1)), A3 + A),
                     A.multiply(A2 + A).multiply(A3 + A).toarray()),
        "ttv": (cd.ttv(dT, c), np.einsum("ijk,k->ij", T, c)),
        "mttkrp": (cd.mttkrp(dT, C, D), np.einsum("ijk,jl,kl->il", T, C, D)),
    }
    computed = dask.compute(*(r for r, _ in cases.values()))
    for (name, (lazy, want)), got in zip(cases.items(), computed):
        assert lazy.chunks[0] == rows, name
        np.testing.assert_allclose(_dense(got), want, rtol=1e-12, atol=1e-12, err_msg=name)
    sparse_results = {"spgemm": computed[2], "sddmm": computed[3], "add": computed[4]}
    for name, got in sparse_results.items():
        assert isinstance(got, coiter.Tensor) and not got.format.is_dense, name


@pytest.mark.parametrize("split", [(10, 20), (15, 15), (3,) * 10], ids=["2", "2 even", "10"])
def test_spgemm_with_split_inner_mode_merges_sparse_partials(client: Client,
                                                              split: tuple[int, ...]) -> None:
    A, B = _matrix(40, 30, 0.15, 6), _matrix(30, 25, 0.2, 7)
    dA = cd.from_array(A, chunks=((13, 27), split))
    dB = cd.from_array(B, chunks=(split, -1))
    C = cd.spgemm(dA, dB)
    # the partial products of the inner blocks are added by a sparse merge, not densely
    merge = [k for k in C.dask.keys() if isinstance(k, tuple) and "coiter-merge" in k[0]]
    assert merge
    got = C.compute()
    assert isinstance(got, coiter.Tensor) and got.format.to_string() == "ds"
    np.testing.assert_allclose(got.to_numpy(), (A @ B).toarray(), rtol=1e-12)


def test_general_assignments(client: Client) -> None:
    rng = np.random.default_rng(1)
    A = _matrix(40, 30, 0.2, 8)
    x, b, z = rng.random(30), rng.random(40), rng.random(40)
    by_both = cd.from_array(A, chunks=((12, 28), (16, 14)))
    # the sum over j does not distribute over + b(i): j is rechunked to one block
    y = cd.evaluate("y(i) = A(i,j) * x(j) + b(i)", A=by_both, x=x, b=b)
    np.testing.assert_allclose(y.compute(), A @ x + b)
    # a transposed product: the row blocks are the summed mode, partials added in a tree
    yt = cd.evaluate("y(j) = A(i,j) * z(i)", A=cd.from_array(A, chunks=(3, -1)), z=z)
    np.testing.assert_allclose(yt.compute(), A.T @ z)
    s = cd.evaluate("s = A(i,j) * A(i,j)", A=by_both)
    np.testing.assert_allclose(s.compute(), A.multiply(A).sum())
    # intrinsics and explicit reductions run per block when the sum is not split
    m = cd.evaluate("y(i) = max(j, A(i,j) * x(j))", A=cd.from_array(A, chunks=(9, -1)), x=x)
    np.testing.assert_allclose(m.compute(), (A.multiply(x[None, :])).toarray().max(axis=1))
    # dense Dask arrays mix in, rechunked to the sparse operand's blocks
    w = cd.evaluate("y(i) = A(i,j) * x(j)", A=cd.from_array(A, chunks=(7, -1)),
                    x=da.from_array(x, chunks=11))
    np.testing.assert_allclose(w.compute(), A @ x)


def test_scipy_and_pydata_chunks(client: Client) -> None:
    sparse = pytest.importorskip("sparse")
    A = _matrix(40, 30, 0.2, 9)
    x = np.arange(30.0)
    scipy_blocks = da.from_array(sp.csr_matrix(A), chunks=(10, -1), asarray=False)
    np.testing.assert_allclose(cd.spmv(scipy_blocks, x).compute(), A @ x)
    pydata_blocks = da.from_array(sparse.COO.from_scipy_sparse(A), chunks=(10, -1), asarray=False)
    np.testing.assert_allclose(cd.spmv(pydata_blocks, x).compute(), A @ x)


def test_dask_operations_on_coiter_blocks(client: Client) -> None:
    A = _matrix(40, 30, 0.2, 10)
    dA = cd.from_array(A, chunks=(6, 10))
    assert "coiter.Tensor" in repr(dA)
    persisted = dA.persist()
    wait(persisted)
    np.testing.assert_allclose(persisted.compute().to_numpy(), A.toarray())
    np.testing.assert_allclose(dA.blocks[2, 1].compute().to_numpy(), A.toarray()[12:18, 10:20])
    np.testing.assert_allclose(dA[5:33, 3:29].compute().to_numpy(), A.toarray()[5:33, 3:29])
    np.testing.assert_allclose(dA.rechunk((17, 30)).compute().to_numpy(), A.toarray())
    # map_blocks hands every block to the function as a coiter Tensor
    nnz = dA.map_blocks(lambda t: np.full((1, 1), t.nnz), chunks=(1, 1), dtype=int,
                        meta=np.empty((0, 0), dtype=int))
    assert nnz.compute().sum() == A.nnz
    doubled = da.blockwise(lambda t: coiter.evaluate("B(i,j) = 2 * A(i,j)", "ds", A=t), "ij",
                           dA, "ij", meta=dA._meta, dtype=A.dtype)
    np.testing.assert_allclose(doubled.compute().to_numpy(), 2 * A.toarray())


def test_one_compile_per_worker(client: Client) -> None:
    """Nine blocks on two workers: each worker compiles the kernel once (one entry in its
    kernel table for the expression), and the workers share one library on disk."""
    from coiter.runtime.compiler import cache_dir

    # a constant no earlier run compiled, so that the library is new to a lasting cache
    scale = 1 + secrets.randbelow(10**9) / 10**9
    text = f"y(i) = A(i,j) * x(j) * {scale!r}"
    before = set(cache_dir().rglob("*.so"))
    A = _matrix(90, 30, 0.2, 11)
    y = cd.evaluate(text, A=cd.from_array(A, chunks=(10, -1)), x=np.ones(30))
    np.testing.assert_allclose(y.compute(), scale * (A @ np.ones(30)))

    def kernels_for(spelling: str) -> int:
        from coiter import api
        return sum(key[0] == str(coiter.parse(spelling)) for key in api._kernels)

    per_worker = client.run(kernels_for, text)
    assert sorted(per_worker.values()) == [1, 1]
    assert len(set(cache_dir().rglob("*.so")) - before) == 1


def test_read_in_row_blocks(client: Client, tmp_path: os.PathLike) -> None:
    import gzip

    A = _matrix(50, 50, 0.1, 12)
    sym = (A + A.T).tocoo()
    path = tmp_path / "sym.mtx"
    scipy.io.mmwrite(path, sp.coo_matrix(sym), symmetry="symmetric")
    with open(path, "rb") as f, gzip.open(tmp_path / "sym.mtx.gz", "wb") as g:
        g.write(f.read())
    for p in (path, tmp_path / "sym.mtx.gz"):
        blocks = cd.read(p, chunks=(9, 0, 20, 21))
        assert blocks.chunks[0] == (9, 0, 20, 21)
        np.testing.assert_allclose(blocks.compute().to_numpy(), sym.toarray())
    pattern = tmp_path / "pattern.mtx"
    scipy.io.mmwrite(pattern, sp.coo_matrix(A), field="pattern")
    np.testing.assert_allclose(cd.read(pattern, chunks=7).compute().to_numpy(),
                               (A.toarray() != 0).astype(float))
    rng = np.random.default_rng(2)
    dense = rng.random((3, 4, 5)) * (rng.random((3, 4, 5)) < 0.4)
    dense[-1, -1, -1] = 1.0  # the file's largest coordinates give the shape
    coiter.write(tmp_path / "t.tns", coiter.Tensor.from_numpy(dense, format="sss"))
    got = cd.read(tmp_path / "t.tns", chunks=2)
    assert got.chunks == ((2, 1), (4,), (5,))
    np.testing.assert_allclose(got.compute().to_numpy(), dense)
    x = np.arange(50.0)
    np.testing.assert_allclose(cd.spmv(cd.read(path, chunks=13), x).compute(), sym @ x)


def test_errors_name_the_culprit(client: Client, tmp_path: os.PathLike) -> None:
    A = cd.from_array(_matrix(40, 30, 0.2, 13), chunks=(10, -1))
    path = os.path.join(tmp_path, "a.mtx")
    scipy.io.mmwrite(path, _matrix(40, 30, 0.2, 13))
    # regression: Dask's per-mode spelling reached normalize_chunks and raised its ValueError
    with pytest.raises(ArgumentError, match=r"a\.mtx: chunks gives the rows per block .* 40"):
        cd.read(path, chunks=(10, -1))
    # regression: a row past the declared shape fell in no block and was dropped silently
    bad = os.path.join(tmp_path, "bad.mtx")
    with open(bad, "w") as f:
        f.write("%%MatrixMarket matrix coordinate real general\n4 4 2\n1 1 1.0\n5 2 3.0\n")
    with pytest.raises(coiter.FormatError, match=r"bad\.mtx: a coordinate lies outside the shape \(4, 4\)"):
        cd.read(bad, chunks=2).compute()
    with pytest.raises(ShapeError, match="index j has extent 30 in A but 29 in x"):
        cd.spmv(A, np.ones(29))
    with pytest.raises(ArgumentError, match="compound subscript"):
        cd.evaluate("y(i) = A(i,j+k) * x(j)", A=A, x=np.ones(30))
    with pytest.raises(ArgumentError, match="two index orders"):
        cd.evaluate("y(i,j) = A(i,j) * A(j,i)", A=A)
    with pytest.raises(ArgumentError, match="no operand given for x"):
        cd.evaluate("y(i) = A(i,j) * x(j)", A=A)
    with pytest.raises(ArgumentError, match=r"\+="):
        cd.evaluate("y(i) += A(i,j) * x(j)", A=A, x=np.ones(30))


def _slow_copy(block: coiter.Tensor) -> coiter.Tensor:
    time.sleep(0.25)
    return block


def test_killed_worker_is_replaced_and_the_result_is_right() -> None:
    with _cluster() as cluster, Client(cluster) as client:
        A = cd.random((1600, 800), 0.02, chunks=(100, -1), seed=3)
        slow = A.map_blocks(_slow_copy, meta=A._meta, dtype=A.dtype)
        x = np.linspace(0, 1, 800)
        future = client.compute(cd.spmv(slow, x))
        pids = client.run(os.getpid)
        deadline = time.time() + 30
        while not any(s.get("memory") for s in [client.run_on_scheduler(_task_states)]):
            assert time.time() < deadline
            time.sleep(0.05)
        os.kill(next(iter(pids.values())), signal.SIGKILL)
        y = future.result(timeout=120)
        assert future.status == "finished"
        np.testing.assert_allclose(y, A.compute().to_scipy() @ x)
        assert set(client.run(os.getpid).values()) != set(pids.values())  # one was replaced


def _task_states(dask_scheduler: object) -> dict[str, int]:
    counts: dict[str, int] = {}
    for ts in dask_scheduler.tasks.values():  # type: ignore[attr-defined]
        counts[ts.state] = counts.get(ts.state, 0) + 1
    return counts


def test_matrix_larger_than_one_worker_memory() -> None:
    """SpMV on a 1.08 GB matrix held by two workers of 1000 MiB each (their nannies kill a
    worker past 95%): each holds its half, and the product is right."""
    limit = 1000 * 2**20
    rows, cols, density = 112_000, 8000, 0.1  # 90M entries, 12 bytes each
    memory = {"distributed.worker.memory.target": False,
              "distributed.worker.memory.spill": False,
              "distributed.worker.memory.pause": False,
              "distributed.worker.memory.terminate": 0.95}
    with dask.config.set(memory), _cluster(memory_limit=limit) as cluster, \
            Client(cluster) as client:
        workers = list(client.scheduler_info()["workers"])
        halves = []
        for k, w in enumerate(workers):
            with dask.annotate(workers=[w], allow_other_workers=False):
                halves.append(cd.random((rows // 2, cols), density, chunks=(1000, -1), seed=k))
        A = client.persist(da.concatenate(halves, axis=0))
        wait(A)
        held = client.run(lambda dask_worker: sum(  # bytes of coiter blocks each worker holds
            cd.chunks.nbytes(v) for v in dask_worker.data.values()
            if isinstance(v, coiter.Tensor)))
        assert sum(held.values()) > limit
        assert all(h < 0.7 * limit for h in held.values())
        x = np.random.default_rng(0).random(cols)
        y = cd.spmv(A, x).compute()
        assert len(client.scheduler_info()["workers"]) == 2
        want = np.concatenate([A.blocks[b].compute().to_scipy() @ x
                               for b in range(A.numblocks[0])])
        np.testing.assert_allclose(y, want, rtol=1e-12)
