"""Regression tests for the defects of the reliability issue (silently wrong results, crashes,
internal errors): each asserts the value NumPy computes or the typed error coiter raises."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import coiter
from coiter import DTypeError, FormatError

from helpers import check, random_array, tensor


# --------------------------------------------------------------------- silently wrong results

@pytest.mark.parametrize("out_format", ["dds:2,1,0", "dds:1,0,2", "dds:0,2,1", "dss:2,1,0"])
@pytest.mark.parametrize("b_format", ["csr", "coo", "dcsr", "dense"])
def test_result_with_permuted_dense_levels_above_a_compressed_one(out_format, b_format):
    # an appended level's parents must be visited in storage order: with the loops in B's
    # order (j, k) and the result stored k, j, i, entries landed in the wrong segments
    rng = np.random.default_rng(1)
    d, b = rng.random(3), random_array(rng, (4, 5), 0.3)
    out = coiter.evaluate("A(i,j,k) = d(i) * B(j,k)", out_format=out_format, d=d,
                          B=tensor(b, b_format))
    check(out, np.einsum("i,jk->ijk", d, b))


def test_permuted_four_level_result():
    rng = np.random.default_rng(2)
    d = random_array(rng, (2, 3, 4, 5), 0.4)
    check(coiter.evaluate("A(i,j,k,l) = D(i,j,k,l) * 2", out_format="ddss:3,2,1,0", D=d), 2 * d)


@pytest.mark.parametrize("seed", range(4))
def test_union_of_coo_operands_sharing_a_singleton_and_a_top_level(seed):
    # C's rows repeat in its non-unique top level; merged with B's column (a singleton) the
    # repeated rows must be walked together, not one entry at a time
    rng = np.random.default_rng(seed)
    b, c = random_array(rng, (3, 4), 0.4), random_array(rng, (4, 5), 0.4)
    out = coiter.evaluate("A(i,k,l) = B(i,k) + C(k,l)", out_format="ddd",
                          B=tensor(b, "coo"), C=tensor(c, "coo"))
    check(out, b[:, :, None] + c[None, :, :])


def _repeated_pairs() -> np.ndarray:
    b = np.zeros((3, 3, 4))
    b[0, 0, 1], b[0, 0, 2], b[1, 2, 3] = 1.0, 2.0, 3.0
    return b


def test_a_level_declared_unique_whose_paths_repeat_is_refused():
    b = _repeated_pairs()
    with pytest.raises(FormatError, match=r"level 2 \(singleton\) is declared unique.*\(0, 0\)"):
        coiter.Tensor.from_numpy(b, format="uqq")
    levels = [{"pos": np.array([0, 3]), "crd": np.array([0, 0, 1])}, {"crd": np.array([0, 0, 2])},
              {"crd": np.array([1, 2, 3])}]
    with pytest.raises(FormatError, match="T: level 2"):
        coiter.Tensor.from_arrays((3, 3, 4), "uqq", levels, np.array([1.0, 2.0, 3.0]), name="T")
    with pytest.raises(FormatError, match=r"\(0, 2\)"):  # a 2-D COO with a duplicate entry
        coiter.Tensor.from_arrays((3, 4), "uq", [{"pos": np.array([0, 3]), "crd": np.array([0, 0, 1])},
                                                 {"crd": np.array([2, 2, 3])}], np.ones(3))
    # the non-unique declaration of the same data computes
    t = coiter.Tensor.from_arrays((3, 3, 4), "ucq", levels, np.array([1.0, 2.0, 3.0]))
    c = np.arange(1.0, 5.0)
    check(coiter.evaluate("A(i,j) = B(i,j,k) * c(k)", B=t, c=c), b @ c)
    check(coiter.evaluate("A(i,j) = B(i,j,k) * c(k)", B=tensor(b, "ucq"), c=c), b @ c)


@pytest.mark.parametrize("literal, dtype", [(10**30, np.float64), (10**30, np.float32),
                                            (3 * 10**9, np.int64), (2**63 - 1, np.int64),
                                            (-2**63, np.int64), (-(2**40), np.int64)])
def test_integer_literals_keep_their_value(literal, dtype):
    # products stay in range: signed overflow in the generated C is undefined behaviour
    x = np.array([0, 1, 1, 0]).astype(dtype)
    out = coiter.evaluate(f"y(i) = x(i) * {literal}", x=x).to_numpy()
    np.testing.assert_array_equal(out, x * literal)


@pytest.mark.parametrize("literal, dtype", [(10**30, np.int64), (2**63, np.int64),
                                            (2**40, np.int32), (10**400, np.float64)])
def test_integer_literals_out_of_the_kernels_range_are_refused(literal, dtype):
    x = np.arange(1, 5).astype(dtype)
    with pytest.raises(OverflowError):  # NumPy's own verdict on the same product
        x * literal
    with pytest.raises(DTypeError, match=str(literal)[:12]):
        coiter.evaluate(f"y(i) = x(i) * {literal}", x=x)


def test_literals_print_their_value_not_their_repr():
    class Hostile(float):
        def __repr__(self) -> str:
            return "0; } int evil() { return 1"

        __str__ = __repr__

    i = coiter.index_vars("i")
    x = coiter.Tensor.from_numpy(np.arange(3.0), name="x")
    y = coiter.Tensor.from_numpy(np.zeros(3), name="y")
    y[i] = x[i] * Hostile(2.5)
    np.testing.assert_array_equal(y.to_numpy(), np.arange(3.0) * 2.5)


def test_dsl_tensors_sharing_a_name_are_distinct_operands():
    i = coiter.index_vars("i")
    a = coiter.Tensor.from_numpy(np.arange(3.0), name="B")
    b = coiter.Tensor.from_numpy(np.full(3, 10.0), name="B")
    y = coiter.Tensor.from_numpy(np.zeros(3), name="B")
    y[i] = a[i] + b[i] * a[i]
    np.testing.assert_array_equal(y.to_numpy(), np.arange(3.0) * 11)
    y[i] = y[i] + b[i]  # the result reads its own old value, and b is still b
    np.testing.assert_array_equal(y.to_numpy(), np.arange(3.0) * 11 + 10)


def test_tns_coordinates_beyond_2_53_stay_exact(tmp_path):
    big = 2**53 + 1
    path = tmp_path / "wide.tns.gz"
    path.write_bytes(gzip.compress(f"{big} 1 2.5\n1 2 1.0\n".encode()))
    t = coiter.read(path)
    assert t.shape == (big, 2)
    coords, vals = t.storage.to_coords()
    assert sorted(map(tuple, coords.T.tolist())) == [(0, 1), (big - 1, 0)]
    (tmp_path / "frac.tns").write_text(f"{big}.5 1 2.5\n")
    with pytest.raises(FormatError, match="integers"):
        coiter.read(tmp_path / "frac.tns")


# --------------------------------------------------------------------- the kernel cache

_CACHE_PROGRAM = textwrap.dedent("""
    import sys
    import numpy as np, coiter
    expr = sys.argv[1]
    x = np.arange(1.0, 6.0)
    print(float(coiter.evaluate(expr, x=x).to_numpy().sum()))
""")


def _run_in(cache, expr: str = "y(i) = x(i) * 2") -> subprocess.CompletedProcess:
    env = {**os.environ, "COITER_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-c", _CACHE_PROGRAM, expr], env=env,
                          capture_output=True, text=True, timeout=120)


def _libraries(cache) -> list:
    return sorted(cache.glob("*/*.so"), key=lambda p: p.stat().st_mtime)


def _expect_sum(result: subprocess.CompletedProcess, expected: float) -> None:
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) == expected


def test_a_truncated_or_garbage_cached_library_is_built_again(tmp_path):
    cache = tmp_path / "cache"
    _expect_sum(_run_in(cache), 30.0)
    (lib,) = _libraries(cache)
    data = lib.read_bytes()
    for damaged in (data[: len(data) // 3], b"\x7fELF" + os.urandom(4000)):
        lib.write_bytes(damaged)  # same owner and mode: only the digest tells
        _expect_sum(_run_in(cache), 30.0)
        assert lib.read_bytes() == data or len(lib.read_bytes()) > len(damaged) // 2


def test_another_kernels_library_swapped_in_is_built_again(tmp_path):
    cache = tmp_path / "cache"
    _expect_sum(_run_in(cache, "y(i) = x(i) * 2"), 30.0)
    _expect_sum(_run_in(cache, "y(i) = x(i) * 3"), 45.0)
    times2, times3 = _libraries(cache)
    for suffix in ("", ".sha256"):  # the library and its digest both copied over
        src = times3.with_name(times3.name + suffix)
        times2.with_name(times2.name + suffix).write_bytes(src.read_bytes())
    _expect_sum(_run_in(cache, "y(i) = x(i) * 2"), 30.0)


def test_a_library_others_may_write_is_not_loaded(tmp_path):
    cache = tmp_path / "cache"
    _expect_sum(_run_in(cache, "y(i) = x(i) * 2"), 30.0)
    _expect_sum(_run_in(cache, "y(i) = x(i) * 3"), 45.0)
    times2, times3 = _libraries(cache)
    # a planted library: the other kernel's code, sealed for this key, but world-writable
    times2.write_bytes(times3.read_bytes())
    from coiter.runtime import trust
    trust.seal(times2.stem, times2)
    os.chmod(times2, 0o666)
    _expect_sum(_run_in(cache, "y(i) = x(i) * 2"), 30.0)


def test_files_of_another_user_are_not_trusted(tmp_path, monkeypatch):
    from coiter.runtime import trust
    f = tmp_path / "lib.so"
    f.write_bytes(b"x")
    os.chmod(f, 0o644)
    assert trust.owned_file(f)
    monkeypatch.setattr(trust, "_uid", lambda: os.getuid() + 1)
    assert not trust.owned_file(f)
    with pytest.raises(coiter.CacheError, match="another user owns it"):
        trust.private_dir(tmp_path)


def test_unusable_cache_folders_raise_cache_errors(tmp_path, monkeypatch):
    x = np.arange(3.0)
    a_file = tmp_path / "file"
    a_file.write_text("")
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    for where, message in ((a_file, "cannot use"), (open_dir, "anyone may write it")):
        monkeypatch.setenv("COITER_CACHE_DIR", str(where))
        with pytest.raises(coiter.CacheError, match=message):
            coiter.compile("y(i) = x(i) * 7", formats={"x": "d", "y": "d"})(x=x)


def test_a_planted_autotune_schedule_is_ignored(tmp_path, monkeypatch):
    from coiter.runtime import autotune
    store = tmp_path / "autotune.json"
    monkeypatch.setenv("COITER_AUTOTUNE_FILE", str(store))
    rng = np.random.default_rng(3)
    a, x = random_array(rng, (60, 50), 0.1), rng.random(50)
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="auto")
    check(k(A=tensor(a, "csr"), x=x), a @ x)
    key = next(iter(autotune._load()))
    planted = "parallelize(i,CPUThread,IgnoreRaces)"
    store.write_text('{"%s": "%s"}' % (key, planted))
    fresh = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="auto")
    check(fresh(A=tensor(a, "csr"), x=x), a @ x)
    assert planted not in {str(c) for w in fresh.core.tuner.winners.values() for c in w}
    os.chmod(store, 0o666)
    assert autotune._load() == {}


# --------------------------------------------------------------------- crashes (in subprocesses)

def _subprocess(program: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(program)], capture_output=True,
                          text=True, timeout=300)


def test_simd_reduction_into_a_result_entry_runs_in_a_scalar():
    # omp simd reduction(+: A_vals[:whole result]) put a copy of the result per lane on the stack
    result = _subprocess("""
        import numpy as np, coiter
        rng = np.random.default_rng(0)
        B, C = rng.random((16, 16, 16)), rng.random((16, 16))
        k = coiter.compile("A(i,j,l) = B(i,j,k) * C(k,l)", formats={"B": "sss"}, schedule=(
            "pos(k,kpos,B(i,j,k)),split(kpos,kpos1,kpos2,8),reorder(i,j,kpos1,l,kpos2),"
            "parallelize(kpos2,CPUVector,ParallelReduction)"))
        assert "A_vals[:" not in k.source
        out = k(B=coiter.Tensor.from_numpy(B, format="sss"), C=C).to_numpy()
        np.testing.assert_allclose(out, np.einsum("ijk,kl->ijl", B, C), rtol=1e-12)
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_thread_reduction_into_a_large_result_does_not_copy_it_onto_stacks():
    result = _subprocess("""
        import numpy as np, scipy.sparse as sp, coiter
        rng = np.random.default_rng(0)
        n, nnz = 4_000_000, 100_000
        A = sp.csr_array((rng.random(nnz), (rng.integers(0, 500, nnz), rng.integers(0, n, nnz))),
                         shape=(500, n))
        x = rng.random(500)
        k = coiter.compile("y(j) = A(i,j) * x(i)", formats={"A": "csr"},
                           schedule="parallelize(i,CPUThread,ParallelReduction)")
        for threads in (1, 2):
            np.testing.assert_allclose(k(A=A, x=x, threads=threads).to_numpy(), A.T @ x, rtol=1e-12)
        small = sp.csr_array(A[:, :1000])
        np.testing.assert_allclose(k(A=small, x=x, threads=2).to_numpy(), small.T @ x, rtol=1e-12)
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_scipy_index_arrays_changed_in_place_are_validated_again():
    result = _subprocess("""
        import numpy as np, scipy.sparse as sp, coiter
        A = sp.random(50, 50, 0.1, format="csr", random_state=0)
        x = np.ones(50)
        k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
        np.testing.assert_allclose(k(A=A, x=x).to_numpy(), A @ x)
        A.indices[:] = 10**9
        try:
            k(A=A, x=x)
        except coiter.FormatError as e:
            print("FormatError", e)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("FormatError A level 2"), result.stdout


# --------------------------------------------------------------------- integers that reach C

@pytest.mark.parametrize("schedule, message", [
    (f"split(i,i0,i1,{2**70})", "split factor must be an integer from 1 to 2147483647"),
    ("split(i,i0,i1,0)", "split factor"),
    (f"unroll(i,{10**9})", "unroll factor must be an integer from 1 to 4096"),
    (f"bound(i,ib,{2**70},MaxExact)", "bound must be an integer from 0"),
])
def test_schedule_integers_beyond_their_c_type_are_schedule_errors(schedule, message):
    with pytest.raises(coiter.ScheduleError, match=message):
        coiter.compile("y(i) = x(i) * 2", schedule=schedule)


def test_result_whose_dense_positions_overflow_int64_is_a_shape_error():
    coords = np.array([[0, 2**32 - 1], [0, 2**32 - 1], [1, 3]])
    b = coiter.Tensor.from_coo(coords, np.array([1.0, 2.0]), (2**32, 2**32, 4))
    with pytest.raises(coiter.ShapeError, match="dense level 2 would hold 18446744073709551616"):
        coiter.evaluate("A(i,j,k) = B(i,j,k) * 2", out_format="dds", B=b)
    with pytest.raises(coiter.ShapeError, match="int64_t"):
        coiter.Tensor.from_coo(np.zeros((2, 0), dtype=np.int64), np.zeros(0), (2**64, 4))
    # the same tensor into a sparse result computes
    out = coiter.evaluate("A(i,j,k) = B(i,j,k) * 2", out_format="sss", B=b)
    got_coords, got_vals = out.storage.to_coords()
    assert got_coords.tolist() == coords.tolist() and got_vals.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("out_format", ["dsd", "ssd"])
@pytest.mark.parametrize("shape", [(3, 4, 0), (5, 9, 0)])
def test_empty_trailing_dimension_into_a_sparse_level(out_format, shape):
    # fuzz seed 2026120213 case 690: past the first capacity (16 entries) the values grew to
    # 0 bytes, a realloc that returns NULL: "out of memory while assembling the result"
    b = np.zeros(shape)
    out = coiter.evaluate("A(i,j,k) = B(i,j,k) * 2 + 0.5", out_format=out_format, B=b)
    check(out, b * 2 + 0.5)


# --------------------------------------------------------------------- internal errors

@pytest.mark.parametrize("name", ["NAN", "INFINITY", "INT32_MAX", "_Bool", "__func__", "A2_crd",
                                  "A2_pos", "A_vals", "pA2", "free", "malloc", "coiter_x", "EOF"])
def test_index_variables_named_like_c_identifiers(name):
    rng = np.random.default_rng(4)
    a, x = random_array(rng, (6, 5), 0.5), rng.random(5)
    check(coiter.evaluate(f"y({name}) = A({name},j) * x(j)", A=tensor(a, "csr"), x=x), a @ x)
    check(coiter.evaluate(f"Y({name},j) = A({name},k) * A(j,k)", A=tensor(a, "csr"),
                          out_format="csr"), a @ a.T)


@pytest.mark.parametrize("name", ["free", "A2_pos", "y_old", "_B", "NAN"])
def test_tensors_named_like_c_identifiers(name):
    rng = np.random.default_rng(5)
    a, x = random_array(rng, (6, 5), 0.5), rng.random(5)
    out = coiter.evaluate(f"y(i) = {name}(i,j) * x(j) + A(i,j) * x(j)",
                          **{name: tensor(a, "csr")}, A=tensor(a, "csr"), x=x)
    check(out, 2 * (a @ x))


@pytest.mark.parametrize("fmt", ["dia", "ell", "bcsr", "bcoo", "csb"])
def test_layout_operand_accessed_twice_with_other_indices(fmt):
    rng = np.random.default_rng(6)
    c = random_array(rng, (6, 6), 0.4)
    t = coiter.Tensor.from_numpy(c, format=getattr(coiter, fmt)())
    check(coiter.evaluate("a = C(i,j) * C(j,i)", C=t), np.array(np.sum(c * c.T)))
    check(coiter.evaluate("A(i,j) = C(i,j) * C(j,i)", C=t), c * c.T)


def test_precompute_of_a_whole_dot_product():
    b, c = np.arange(4.0), np.arange(4.0) + 1
    k = coiter.compile("a = B(i) * C(i)", schedule="precompute(B(i)*C(i),i,i,w)")
    check(k(B=b, C=c), np.array(b @ c))
    k = coiter.compile("a = B(i) * C(i) * D(i)", schedule="precompute(B(i)*C(i),i,i,w)")
    check(k(B=b, C=c, D=c), np.array(np.sum(b * c * c)))


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc", "dcsr"])
def test_compute_with_a_pattern_the_operands_do_not_produce(fmt):
    # the operands' entries beyond the pattern were written past its arrays (heap overflow)
    rng = np.random.default_rng(7)
    b, c = random_array(rng, (20, 20), 0.1), random_array(rng, (20, 20), 0.3)
    k = coiter.compile("A(i,j) = B(i,j) + C(i,j)", formats={"A": fmt, "B": "csr", "C": "csr"})
    B, C = tensor(b, "csr"), tensor(c, "csr")
    for smaller in (k.assemble(B=B, C=B), k.assemble(B=C, C=C)):
        with pytest.raises(coiter.KernelError, match="pattern does not hold"):
            k.compute(smaller, B=B, C=C)
    check(k.compute(k.assemble(B=B, C=C), B=B, C=C), b + c)


@pytest.mark.parametrize("seed", range(6))
def test_compute_into_results_of_several_append_groups(seed):
    # rows whose columns all cancel out hold no entry in DCSR/CSF patterns
    rng = np.random.default_rng(seed)
    b, c = random_array(rng, (6, 6), 0.4), random_array(rng, (6, 6), 0.4)
    k = coiter.compile("A(i,j) = B(i,j) * C(i,j) + B(i,j)", formats={"A": "dcsr", "B": "dcsr", "C": "csr"})
    ops = {"B": tensor(b, "dcsr"), "C": tensor(c, "csr")}
    check(k.compute(k.assemble(**ops), **ops), b * c + b)
    b3, c3 = random_array(rng, (3, 4, 5), 0.3), random_array(rng, (3, 4, 5), 0.3)
    k3 = coiter.compile("A(i,j,k) = B(i,j,k) * C(i,j,k)", formats={"A": "sss", "B": "sss", "C": "sss"})
    ops3 = {"B": tensor(b3, "sss"), "C": tensor(c3, "sss")}
    check(k3.compute(k3.assemble(**ops3), **ops3), b3 * c3)


# --------------------------------------------------------------------- concurrency and signals

_SPGEMM_PROGRAM = textwrap.dedent("""
    import numpy as np, scipy.sparse as sp, coiter
    A = sp.random(40, 40, 0.1, format="csr", random_state=1)
    out = coiter.evaluate("C(i,j) = A(i,k) * A(k,j)", out_format="csr", A=A)
    np.testing.assert_allclose(out.to_numpy(), (A @ A).toarray(), rtol=1e-12)
    print("ok")
""")


def test_eight_processes_compile_one_kernel_into_an_empty_cache(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "COITER_CACHE_DIR": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", _SPGEMM_PROGRAM], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(8)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, outputs
    assert all(out.strip() == "ok" for out, _ in outputs)
    libraries = list(cache.glob("*/*.so"))
    from coiter.runtime import trust
    assert libraries and all(trust.sealed(lib.stem, lib) for lib in libraries)
    # a rebuild replaces the file (a new inode); a hit only marks it used (its mtime)
    stamps = {lib: lib.stat().st_ino for lib in libraries}
    again = subprocess.run([sys.executable, "-c", _SPGEMM_PROGRAM], env=env, text=True,
                           capture_output=True, timeout=300)
    assert again.returncode == 0 and again.stdout.strip() == "ok", again.stderr
    assert {lib: lib.stat().st_ino for lib in libraries} == stamps  # loaded, not rebuilt


def test_eight_threads_call_one_kernel():
    from concurrent.futures import ThreadPoolExecutor

    k = coiter.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    rng = np.random.default_rng(8)
    inputs = [(random_array(rng, (30, 20), 0.2), random_array(rng, (20, 25), 0.2)) for _ in range(8)]

    def call(pair):
        a, b = pair
        return [k(A=tensor(a, "csr"), B=tensor(b, "csr")).to_numpy() for _ in range(20)]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, inputs))
    for (a, b), outs in zip(inputs, results):
        for out in outs:
            np.testing.assert_allclose(out, a @ b, rtol=1e-12)


def _interrupted(program: str, env: dict, marker, wait: float = 120.0) -> subprocess.CompletedProcess:
    """Run ``program``, send SIGINT once ``marker`` exists, and return how it ended."""
    import signal
    import time

    # a test run started in the background by a non-interactive shell inherits SIGINT ignored,
    # and a Python started so installs no KeyboardInterrupt handler: the child starts with the
    # default disposition, as from a terminal
    proc = subprocess.Popen([sys.executable, "-c", program], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + wait
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=wait)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_sigint_during_compile_leaves_a_usable_cache(tmp_path):
    # a compiler that announces itself and takes its time, so the signal lands mid-build
    marker = tmp_path / "compiling"
    slow_cc = tmp_path / "slow-cc"
    slow_cc.write_text(f"#!/bin/sh\ncase \"$*\" in *--version*) exec cc \"$@\";; esac\n"
                       f"touch {marker}\nsleep 2\nexec cc \"$@\"\n")
    slow_cc.chmod(0o755)
    env = {**os.environ, "COITER_CACHE_DIR": str(tmp_path / "cache"), "CC": str(slow_cc)}
    ended = _interrupted(_SPGEMM_PROGRAM, env, marker)
    assert ended.returncode != 0 and "KeyboardInterrupt" in ended.stderr, ended.stderr
    assert not list((tmp_path / "cache").glob("*/*.so.tmp"))  # no half-built library left
    again = subprocess.run([sys.executable, "-c", _SPGEMM_PROGRAM], env=env, text=True,
                           capture_output=True, timeout=300)
    assert again.returncode == 0 and again.stdout.strip() == "ok", again.stderr


def test_sigint_during_a_long_kernel_interrupts_cleanly(tmp_path):
    marker = tmp_path / "running"
    program = textwrap.dedent(f"""
        import pathlib, numpy as np, coiter
        n = 1400  # a few seconds of dense matrix product
        a = np.random.default_rng(0).random((n, n))
        k = coiter.compile("C(i,j) = A(i,k) * B(k,j)")
        k(A=a[:2, :2], B=a[:2, :2], threads=1)  # compiled before the long call
        pathlib.Path({str(marker)!r}).touch()
        k(A=a, B=a, threads=1)
        print("finished")
    """)
    env = {**os.environ, "COITER_CACHE_DIR": str(tmp_path / "cache")}
    ended = _interrupted(program, env, marker)
    # the kernel runs to its end (C code is not interruptible), then Python raises; an
    # uncaught KeyboardInterrupt ends the interpreter by SIGINT itself (-2), never SIGSEGV
    assert ended.returncode in (1, -2) and "KeyboardInterrupt" in ended.stderr, ended.stderr
    assert "finished" not in ended.stdout


# --------------------------------------------------------------------- lowering time

_PERMUTED = {"C(i,j,k)": "ijk", "C(k,i,j)": "kij", "C(j,k,i)": "jki", "C(i,k,j)": "ikj",
             "C(k,j,i)": "kji", "-C(j,i,k)": "jik"}


@pytest.mark.parametrize("out_format", ["ddd", "sss", "dss"])
def test_sums_of_many_sparse_terms_lower_in_linear_time(out_format):
    # merged iteration over 4 sparse terms of a 3-tensor has 4096 cases (a minute of
    # lowering and 35,000 lines of C); past 1024 the terms are added one at a time
    import time

    rng = np.random.default_rng(9)
    c = random_array(rng, (5, 5, 5), 0.3)
    C = tensor(c, "sss")
    for n in (4, 6):
        terms = list(_PERMUTED)[:n]
        expr = "A(i,j,k) = " + " + ".join(terms)
        reference = sum((-1 if t[0] == "-" else 1) * np.einsum(_PERMUTED[t] + "->ijk", c) for t in terms)
        start = time.process_time()
        with pytest.warns(coiter.PerformanceWarning, match=f"its {n} sparse terms"):
            out = coiter.evaluate(expr, out_format=out_format, C=C)
        assert time.process_time() - start < 30  # was minutes, grows with 16**n
        check(out, reference)


@pytest.mark.parametrize("out_format", ["sss", "snu:2,1,0", "dss"])
def test_sums_computed_densely_assemble_and_compute(out_format):
    # fuzz seed 1915039827 case 157: such a result refused assemble ("no separate assembly")
    import warnings

    rng = np.random.default_rng(11)
    c = random_array(rng, (4, 4, 4), 0.4)
    C = tensor(c, "sss")
    terms = list(_PERMUTED)[:4]
    k = coiter.compile("A(i,j,k) = " + " + ".join(terms), formats={"C": "sss", "A": out_format})
    reference = sum(np.einsum(_PERMUTED[t] + "->ijk", c) for t in terms)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", coiter.PerformanceWarning)
        pattern = k.assemble(C=C)
        assert pattern.format == coiter.formats.parse_format(out_format)
        assert pattern.nnz == np.count_nonzero(reference) and not pattern.to_numpy().any()
        check(k.compute(pattern, C=C), reference)
        smaller = k.assemble(C=tensor(c * (rng.random(c.shape) < 0.5), "sss"))
        with pytest.raises(coiter.KernelError, match="pattern does not hold"):
            k.compute(smaller, C=C)


def test_three_term_sums_still_merge_in_one_pass():
    import warnings

    rng = np.random.default_rng(10)
    a, b, c = (random_array(rng, (8, 9), 0.3) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", coiter.PerformanceWarning)
        out = coiter.evaluate("D(i,j) = A(i,j) + B(i,j) + C(i,j)", out_format="csr",
                              A=tensor(a, "csr"), B=tensor(b, "csr"), C=tensor(c, "csr"))
    check(out, a + b + c)


def test_absurd_thread_counts_are_refused_on_every_call_path():
    # threads=100000 crashed inside libgomp, threads=2**31 ended the process
    k = coiter.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    rng = np.random.default_rng(11)
    a, x = random_array(rng, (30, 30), 0.2), rng.random(30)
    A = tensor(a, "csr")
    check(k(A=A, x=x), a @ x)  # the C call plan now exists
    for threads in (100000, 2**31, 0, -1, True, 2.0):
        with pytest.raises(coiter.ArgumentError, match="threads"):
            k(A=A, x=x, threads=threads)
    check(k(A=A, x=x, threads=2), a @ x)


def test_numpy_scalars_in_the_dsl_are_literals():
    i = coiter.index_vars("i")
    x = coiter.Tensor.from_numpy(np.arange(3.0), name="x")
    for scalar in (np.float64(2.0), np.int32(3), np.float32(0.5)):
        y = coiter.Tensor.from_numpy(np.zeros(3), name="y")
        y[i] = x[i] * scalar
        np.testing.assert_array_equal(y.to_numpy(), np.arange(3.0) * scalar)


@pytest.mark.parametrize("fmt", ["dia", "ell"])
def test_layout_operand_into_a_sparse_result_through_a_workspace(fmt):
    # found by the fuzzer: the workspace choice indexed a DIA/ELL access's levels as modes
    rng = np.random.default_rng(12)
    b = random_array(rng, (4, 5), 0.4)
    out = coiter.evaluate("A(l,j) = B(j,l)", out_format="ds", B=coiter.Tensor.from_numpy(b, format=getattr(coiter, fmt)()))
    check(out, b.T)


def test_a_sum_computed_densely_is_held_to_the_memory_cap():
    rng = np.random.default_rng(13)
    C = tensor(random_array(rng, (6, 6, 6), 0.3), "sss")
    with pytest.warns(coiter.PerformanceWarning):
        k = coiter.compile("A(i,j,k) = C(i,j,k) + C(k,i,j) + C(j,k,i) + C(i,k,j)",
                           formats={"C": "sss", "A": "sss"}, workspace_memory=100)
        with pytest.raises(FormatError, match="computed densely and converted to sss, which needs 1728 bytes"):
            k(C=C)


@pytest.mark.parametrize("b_format, out_format", [("ss", "sd"), ("csr", "sd"), ("coo", "sd"), ("sss", "sdd"),
                                                  ("sss", "ssd"), ("dss", "dsd")])
def test_dense_result_levels_below_levels_shared_with_an_operand(b_format, out_format):
    # found by the fuzzer: once the shared levels were bound, the dense levels below them
    # were never located (KeyError in lower_assign)
    rng = np.random.default_rng(14)
    b = random_array(rng, (3, 4, 5)[: len(out_format)], 0.4)
    idx = "ijk"[: len(out_format)]
    out = coiter.evaluate(f"A({','.join(idx)}) = B({','.join(idx)}) * 3", out_format=out_format,
                          B=tensor(b, b_format))
    check(out, 3 * b)


@pytest.mark.parametrize("fmt", ["uh", "duh", "huh"])
def test_hashed_level_below_a_non_unique_level_is_refused_when_the_format_is_made(fmt):
    # found by the fuzzer: accepted by Format and from_numpy, refused only by kernels
    with pytest.raises(FormatError, match="hashed below a non-unique level"):
        coiter.parse_format(fmt)


@pytest.mark.parametrize("out_format", ["hd", "shd", "ddh", "hhd"])
def test_hashed_result_formats_with_an_inner_dense_level(out_format):
    # found by the fuzzer: the extent-specialised variant put the hashed format's dense level
    # into the COO the result is computed in (FormatError "dense below a non-unique level")
    rng = np.random.default_rng(15)
    n = len(out_format)
    b = random_array(rng, (3, 4, 5)[:n], 0.5)
    idx = ",".join("ijk"[:n])
    check(coiter.evaluate(f"A({idx}) = B({idx}) * 2", out_format=out_format, B=tensor(b, "s" * n)), 2 * b)


@pytest.mark.parametrize("fmt", ["dhu:2,0,1", "dhs:2,0,1", "shu:2,0,1", "hs", "hss", "dhs"])
def test_levels_below_a_hashed_level_follow_its_buckets(fmt):
    # found by the fuzzer (seed 20261201, case 6481): packing appended a hashed level's
    # children in coordinate order, but its positions are buckets (coordinate modulo W),
    # so an entry's values could land under another entry's bucket
    rng = np.random.default_rng(16)
    n = len(fmt.split(":")[0])
    idx = ",".join("ijk"[:n])
    for shape, density in [((5, 2, 3), 0.2)] * 10 + [((40, 30, 6), 0.01)] * 3:
        b = random_array(rng, shape[:n], density)  # few coordinates a bucket table: many wrap past W
        t = tensor(b, fmt)
        check(t, b)
        check(coiter.evaluate(f"A({idx}) = B({idx}) * 2", out_format="d" * n, B=t), 2 * b)


def test_atomics_on_complex_results_are_a_schedule_error():
    # the check compared "complex" with the C type "double _Complex": the compiler refused
    # the generated "#pragma omp atomic" instead (CompileError)
    z = coiter.Tensor.from_numpy(np.ones((6, 6)) + 1j, format="csr")
    k = coiter.compile("y(j) = A(i,j) * x(i)", formats={"A": "csr"},
                       schedule="parallelize(i,CPUThread,Atomics)")
    with pytest.raises(coiter.ScheduleError, match="no atomic update of complex"):
        k(A=z, x=np.ones(6) + 0j)


@pytest.mark.parametrize("n", [100, 100_000])
def test_parallel_reduction_into_complex_results_of_any_size(n):
    # beyond 1 MiB a thread-private copy of the result gives way to atomic updates, which
    # complex values have none of: the loop runs on one thread (it was a CompileError)
    rng = np.random.default_rng(13)
    rows, cols = rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n)
    a = sp.csr_array((rng.random(4 * n) + 1j, (rows, cols)), shape=(n, n))
    x = rng.random(n) + 1j
    k = coiter.compile("y(j) = A(i,j) * x(i)", formats={"A": "csr"},
                       schedule="parallelize(i,CPUThread,ParallelReduction)")
    np.testing.assert_allclose(k(A=a, x=x, threads=2).to_numpy(), a.T @ x, rtol=1e-12)


def test_a_converted_result_keeps_its_declared_format():
    # fuzz seed 0 case 11483: a sum computed densely and converted to 'snd' came back in
    # 'snd' specialised on the call's last extent (Dense(extent=2)), unequal to 'snd'
    import warnings

    rng = np.random.default_rng(14)
    c = rng.integers(-3, 4, (5, 2, 4)).astype(np.int32)
    k = coiter.compile("A(k,j,i) = C(j,i,k) - ((C(j,i,k) + C(j,i,k)) - C(j,i,k))",
                       formats={"C": "nsn", "A": "snd"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", coiter.PerformanceWarning)
        got = k(C=coiter.Tensor.from_numpy(c, format="dense"))
    assert got.format == coiter.formats.parse_format("snd")
    check(got, np.zeros((4, 5, 2), dtype=np.int32))


def test_products_of_sums_too_large_to_merge_are_multiplied_out():
    # fuzz seed 0 case 8726: a product of two unions under a sum over k merged into 100,000
    # lines of C (the cases of every lattice point's sub-points, nested over four loops) that
    # the compiler did not finish in 5 minutes; such products now become sums of products
    import time
    import warnings

    rng = np.random.default_rng(15)
    d, b = random_array(rng, (3, 3), 0.5), random_array(rng, (3, 3), 0.5)
    e, c = random_array(rng, (3, 4, 3), 0.5), random_array(rng, (3,), 0.5)
    operands = {"D": tensor(d, "uc:1,0"), "B": tensor(b, "dcsc"), "E": tensor(e, "uqn"),
                "C": tensor(c, "s")}
    start = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", coiter.PerformanceWarning)
        got = coiter.evaluate("A(j,l,i) = ((D(j,i) - -2) - (2j * D(i,j))) + "
                              "((B(k,j) - E(i,l,j)) * (B(j,k) - C(i)))", out_format="ndh", **operands)
    assert time.process_time() - start < 60
    assert any("added one at a time" in str(w.message) for w in caught)
    ref = np.zeros((3, 4, 3), dtype=complex)
    for j in range(3):
        for l in range(4):
            for i in range(3):
                ref[j, l, i] = (d[j, i] + 2) - 2j * d[i, j] + sum(
                    (b[k, j] - e[i, l, j]) * (b[j, k] - c[i]) for k in range(3))
    check(got, ref)


@pytest.mark.parametrize("fmt", [coiter.ell(), coiter.dia(), coiter.bcsr((1, 2))])
@pytest.mark.parametrize("expr", [
    "A(j,i) = ((B(j,i) - B(j,i)) * B(j,i)) / (B(j,i) * B(j,i))",
    "A(j,i) = B(j,i) * (B(j,i) + 1)",
    "A(j,i) = B(j,i) * exp(B(j,i))",
    "A(j,i) = B(j,i) / cos(B(j,i))",
])
def test_an_operand_with_a_layout_read_as_a_factor_and_elsewhere(fmt, expr):
    # fuzz seed 31 case 35182: an ELL/DIA operand that is a factor in one place and not in
    # another was read through its hidden slot or diagonal everywhere, so terms absent from a
    # slot added the right-hand side's absent value (0 / 0 = NaN) once per slot: all NaN
    rng = np.random.default_rng(16)
    b = random_array(rng, (5, 6), 0.5)
    with np.errstate(all="ignore"):
        ref = eval(expr.split("= ")[1].replace("(j,i)", "").replace("exp", "np.exp").replace("cos", "np.cos"),
                   {"np": np, "B": b})
    got = coiter.evaluate(expr, B=tensor(b, fmt), out_format="dd").to_numpy()
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-12)
    assert finite.sum() >= 10


# --------------------------------------------------------- reductions over one variable

_SIDE_BY_SIDE = [
    ("y(i) = min(j, A(i,j)) + min(j, B(i,j))", lambda a, b: a.min(1) + b.min(1)),
    ("y(i) = max(j, A(i,j)) - min(j, A(i,j))", lambda a, b: a.max(1) - a.min(1)),
    ("y(i) = max(min(j, A(i,j)), min(j, B(i,j)))", lambda a, b: np.maximum(a.min(1), b.min(1))),
    ("y(i) = sum(j, A(i,j)) * max(j, B(i,j))", lambda a, b: a.sum(1) * b.max(1)),
    ("y(i) = min(j, A(i,j) + min(j, B(i,j)))",  # an inner reduction over its enclosing one's variable
     lambda a, b: (a + b.min(1)[:, None]).min(1)),
]


@pytest.mark.parametrize("fmt", ["csr", "dense"])
@pytest.mark.parametrize("text, reference", _SIDE_BY_SIDE, ids=[t for t, _ in _SIDE_BY_SIDE])
def test_reductions_over_one_variable_side_by_side(text, reference, fmt):
    # Regression: two min/max reductions over one variable name declared its counter twice
    # in one C scope, a CompileError (found by the operator chain fuzzer: A.min(axis=1)
    # combined with itself); the fresh variable the second binds now keeps them apart
    rng = np.random.default_rng(12)
    a = random_array(rng, (6, 5), 0.5) - 0.5 * (rng.random((6, 5)) < 0.3)
    b = random_array(rng, (6, 5), 0.5)
    a[0], b[1] = rng.standard_normal(5), rng.standard_normal(5)  # full rows: minimum not 0
    out = coiter.evaluate(text, A=tensor(a, fmt), B=tensor(b, fmt)) if "B" in text else \
        coiter.evaluate(text, A=tensor(a, fmt))
    check(out, reference(a, b))


def test_operator_reductions_combined_with_themselves():
    rng = np.random.default_rng(13)
    a = random_array(rng, (5, 4), 0.5) - 0.3
    A = tensor(a, "csr")
    m = A.min(axis=1)
    check(np.maximum(m, m), a.min(1))
    check(A.max(axis=1) - A.min(axis=1), np.ptp(a, axis=1))
    check(A.T + A.min(axis=1), a.T + a.min(1))


def test_two_poolings_over_one_window_variable():
    # the window variable r, sized by extents=, is bound by both maxima: the second binds a
    # fresh variable, which keeps r's extent
    rng = np.random.default_rng(14)
    i_, j_ = rng.standard_normal(10), rng.standard_normal(10)
    k = coiter.compile("O(i) = max(r, I(i+r)) + max(r, J(i+r))", formats={"I": "s", "J": "s", "O": "d"},
                       extents={"r": 3})
    out = k(I=tensor(i_, "s"), J=tensor(j_, "s"))
    check(out, np.array([i_[i:i + 3].max() + j_[i:i + 3].max() for i in range(8)]))
