"""linrec.models.linalg: Gram, SPD inverse (both solver paths and the recursive kernels of
linrec.models._spd_kernels), zero-diagonal weights, memory guard."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from linrec import hardware
from linrec.errors import ConfigError, MemoryBudgetError
from linrec.models import _spd_kernels as kernels
from linrec.models import linalg
from linrec.models.linalg import (
    LAPACK_SAFE_ROW_BYTES,
    NotPositiveDefiniteError,
    add_to_diagonal,
    cast_like,
    check_dense_memory,
    check_device_memory,
    gram,
    recursive_block,
    solver_path,
    spd_inverse,
    thread_count,
    zero_diagonal_weights,
)


def random_spd(n: int, seed: int, dtype=np.float64) -> np.ndarray:
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n + 20, n))
    return (M.T @ M / n + 0.5 * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("threads", [1, 2])
def test_gram_matches_scipy_product(threads):
    rng = np.random.default_rng(0)
    X = sp.random(400, 230, density=0.04, format="csr", random_state=rng)
    X.data = rng.integers(1, 4, X.nnz).astype(np.float64)  # weighted entries, not only ones
    G = gram(X, np.float64, block_rows=37, n_threads=threads)
    np.testing.assert_array_equal(G, (X.T @ X).toarray())
    assert G.flags.c_contiguous and G.dtype == np.float64


def test_gram_float32_binary_and_empty_items():
    X = sp.csr_matrix(np.array([[1, 0, 1, 0], [1, 0, 0, 0], [0, 0, 1, 0]], dtype=np.float32))
    G = gram(X, "float32")
    assert G.dtype == np.float32
    np.testing.assert_array_equal(G, [[2, 0, 1, 0], [0, 0, 0, 0], [1, 0, 2, 0], [0, 0, 0, 0]])


def test_gram_sums_duplicates_without_touching_the_input():
    X = sp.csr_matrix((np.array([1.0, 1.0, 2.0]), np.array([0, 0, 1]), np.array([0, 3])),
                      shape=(1, 2))  # entry (0, 0) stored twice
    data_before = X.data.copy()
    np.testing.assert_array_equal(gram(X), [[4.0, 4.0], [4.0, 4.0]])
    np.testing.assert_array_equal(X.data, data_before)


@pytest.mark.parametrize("block_rows", [3, 1024])
def test_gram_of_duplicate_unsorted_entries_is_that_of_their_sums(block_rows):
    """A CSR matrix with repeated, unsorted column indices in its rows means the sum of the
    repeats (scipy's convention): G is that matrix's XᵀX, every block of rows."""
    rng = np.random.default_rng(4)
    rows, cols = rng.integers(0, 30, 400), rng.integers(0, 11, 400)
    values = rng.integers(1, 4, 400).astype(np.float64)
    order = np.argsort(rows, kind="stable")  # rows grouped, columns left unsorted
    indptr = np.searchsorted(rows[order], np.arange(31))
    X = sp.csr_matrix((values[order], cols[order], indptr), shape=(30, 11))
    assert not X.has_canonical_format
    dense = np.zeros((30, 11))
    np.add.at(dense, (rows, cols), values)
    np.testing.assert_array_equal(gram(X, block_rows=block_rows), dense.T @ dense)


@pytest.mark.parametrize("n", [1, 5, 120])
def test_spd_inverse_matches_numpy_inv(n):
    A = random_spd(n, seed=n)
    expected = np.linalg.inv(A)
    P = spd_inverse(A.copy())
    np.testing.assert_allclose(P, expected, rtol=0, atol=1e-10 * np.abs(expected).max())
    np.testing.assert_array_equal(P, P.T)


def test_spd_inverse_overwrites_in_place_or_copies():
    A = random_spd(50, seed=1)
    original = A.copy()
    P = spd_inverse(A, overwrite=False)
    np.testing.assert_array_equal(A, original)
    P2 = spd_inverse(A)  # overwrite=True: the same array comes back
    assert P2 is A
    np.testing.assert_allclose(P2, P, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n, block", [(500, 64), (500, 500), (257, 100), (3, 2), (1, 1)])
def test_recursive_path_equals_lapack_path(n, block):
    A = random_spd(n, seed=7)
    default = spd_inverse(A.copy())
    assert solver_path(n, A.dtype) == "lapack"
    recursive = spd_inverse(A.copy(), large_n=1, block=block)  # force the recursive path
    np.testing.assert_allclose(recursive, default, rtol=0, atol=1e-11 * np.abs(default).max())
    np.testing.assert_array_equal(recursive, recursive.T)


@pytest.mark.parametrize("dtype, atol", [(np.float64, 1e-10), (np.float32, 1e-4)])
@pytest.mark.parametrize("n, block", [(2, 1), (77, 16), (300, 64), (513, 128)])
def test_recursive_kernels_match_brute_force(n, block, dtype, atol):
    A = random_spd(n, seed=n, dtype=np.float64)
    L = np.linalg.cholesky(A)
    F = np.asfortranarray(A.astype(dtype))
    F[np.triu_indices(n, 1)] = np.nan  # the upper triangle is never read
    kernels.cholesky_lower(F, block)
    np.testing.assert_allclose(np.tril(F), L, rtol=0, atol=atol * np.abs(L).max())
    F = np.asfortranarray(L.astype(dtype))
    kernels.invert_lower(F, block)
    L_inv = np.linalg.inv(L)
    np.testing.assert_allclose(np.tril(F), L_inv, rtol=0, atol=atol * np.abs(L_inv).max())
    kernels.lower_gram(F, block)
    expected = np.tril(L_inv.T @ L_inv)
    np.testing.assert_allclose(np.tril(F), expected, rtol=0, atol=atol * np.abs(expected).max())


def test_kernels_need_a_square_fortran_float_matrix():
    with pytest.raises(ValueError, match="Fortran"):
        kernels.cholesky_lower(np.eye(4)[:, :3].copy(order="F"), 2)
    with pytest.raises(ValueError, match="Fortran"):
        kernels.cholesky_lower(np.ones((4, 3), order="C"), 2)
    with pytest.raises(ValueError, match="float32 or float64"):
        kernels.cholesky_lower(np.eye(3, dtype=np.int64, order="F"), 2)


@pytest.mark.parametrize("kwargs, unread", [({}, np.triu_indices(90, 1)),
                                            ({"large_n": 1, "block": 16}, np.tril_indices(90, -1))])
def test_spd_inverse_reads_one_triangle(kwargs, unread):
    """"lapack" reads A's lower triangle (the factor linrec always used), "recursive" its upper."""
    A = random_spd(90, seed=8)
    B = A.copy()
    B[unread] = np.nan
    np.testing.assert_allclose(spd_inverse(B, **kwargs), np.linalg.inv(A), rtol=0, atol=1e-10)


def test_lapack_path_is_the_upper_potrf_potri_of_scipy_bit_for_bit():
    """The same bits as scipy's potrf/potri on the Fortran view's upper triangle (the calls of
    linrec's releases before the recursive path), so earlier published fits are reproduced."""
    from scipy.linalg import lapack

    for dtype in (np.float64, np.float32):
        A = random_spd(300, seed=12).astype(dtype)
        F = A.copy().T
        potrf, potri = lapack.get_lapack_funcs(("potrf", "potri"), (F,))
        U, info = potrf(F, lower=0, overwrite_a=1, clean=0)
        inv, info2 = potri(U, lower=0, overwrite_c=1)
        assert info == info2 == 0
        expected = np.triu(inv) + np.triu(inv, 1).T
        np.testing.assert_array_equal(spd_inverse(A.copy()), expected)


def test_spd_inverse_single_thread_equals_default():
    A = random_spd(200, seed=5)
    for kwargs in ({}, {"large_n": 1, "block": 32}):
        np.testing.assert_allclose(spd_inverse(A, n_threads=1, overwrite=False, **kwargs),
                                   spd_inverse(A, overwrite=False, **kwargs), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kwargs", [{}, {"large_n": 1, "block": 64}, {"large_n": 1, "block": 7}])
def test_spd_inverse_float32_both_paths(kwargs):
    A = random_spd(300, seed=3)
    expected = np.linalg.inv(A)
    P = spd_inverse(A, dtype="float32", **kwargs)
    assert P.dtype == np.float32 and P.flags.c_contiguous
    np.testing.assert_allclose(P, expected, rtol=0, atol=1e-4 * np.abs(expected).max())
    np.testing.assert_array_equal(P, P.T)


@pytest.mark.parametrize("minor", [7, 37])
@pytest.mark.parametrize("kwargs", [{}, {"large_n": 1, "block": 4}, {"large_n": 1, "block": 16}])
def test_spd_inverse_rejects_indefinite_naming_the_leading_minor(kwargs, minor):
    A = random_spd(50, seed=2)
    A[minor - 1, minor - 1] = -5.0  # leading minors 1..minor-1 stay positive, minor does not
    with pytest.raises(NotPositiveDefiniteError, match=f"leading minor {minor} is not positive"):
        spd_inverse(A, **kwargs)


def test_solver_path_keeps_threaded_lapack_below_the_safe_row_size():
    safe64, safe32 = LAPACK_SAFE_ROW_BYTES // 8, LAPACK_SAFE_ROW_BYTES // 4
    assert solver_path(safe64, "float64", large_n=10**9) == "lapack"
    assert solver_path(safe64 + 1, "float64", large_n=10**9) == "recursive"
    assert solver_path(safe32, "float32", large_n=10**9) == "lapack"
    assert solver_path(safe32 + 1, "float32", large_n=10**9) == "recursive"
    assert solver_path(40_981, "float32", large_n=10**9) == "recursive"
    assert solver_path(100, "float64", large_n=100) == "recursive"
    assert solver_path(99, "float64", large_n=100) == "lapack"


def test_spd_inverse_above_the_safe_size_never_calls_whole_matrix_lapack(monkeypatch):
    monkeypatch.setattr(linalg, "LAPACK_SAFE_ROW_BYTES", 8 * 40)  # 40 float64 per row
    monkeypatch.setattr(kernels, "lapack_spd_inverse_upper",
                        lambda F: pytest.fail("threaded potrf/potri on an unsafe size"))
    A = random_spd(41, seed=9)
    P = spd_inverse(A.copy(), large_n=10**9)
    np.testing.assert_allclose(P, np.linalg.inv(A), rtol=0, atol=1e-10)


def test_recursive_path_caps_its_leaves_at_the_safe_row_size(monkeypatch):
    monkeypatch.setattr(linalg, "LAPACK_SAFE_ROW_BYTES", 8 * 16)  # 16 float64 per row
    seen = []
    original = kernels.spd_inverse_lower
    monkeypatch.setattr(kernels, "spd_inverse_lower",
                        lambda F, block: seen.append(block) or original(F, block))
    A = random_spd(60, seed=11)
    P = spd_inverse(A.copy(), block=10**6)
    assert seen == [16]
    np.testing.assert_allclose(P, np.linalg.inv(A), rtol=0, atol=1e-10)


def test_recursive_path_gives_syrk_and_lapack_only_leaf_sized_blocks(monkeypatch):
    # the safety argument of the recursive path: OpenBLAS's threaded syrk (and the potrf,
    # lauum that call it) never see a block of more than `block` rows
    order_arg = {"syrk": 2, "potrf": 1, "trtri": 2, "lauum": 1}
    sizes = {name: [] for name in order_arg}
    original = kernels._routine

    def recording(dtype, name):
        routine = original(dtype, name)
        if name not in order_arg:
            return routine

        def call(*args):
            sizes[name].append(args[order_arg[name]]._obj.value)
            return routine(*args)
        return call

    monkeypatch.setattr(kernels, "_routine", recording)
    A = random_spd(300, seed=12)
    P = spd_inverse(A.copy(), large_n=1, block=32)
    np.testing.assert_allclose(P, np.linalg.inv(A), rtol=0, atol=1e-10)
    assert all(sizes.values()) and max(max(v) for v in sizes.values()) == 32


def test_recursive_path_is_in_place_without_square_temporaries():
    n = 1200
    A = random_spd(n, seed=10)
    expected = np.linalg.inv(A)
    tracemalloc.start()
    P = spd_inverse(A, large_n=1, block=128)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert P is A
    assert peak < A.nbytes / 8  # tiles and ctypes objects only; A is 11 MB
    np.testing.assert_allclose(P, expected, rtol=0, atol=1e-10 * np.abs(expected).max())


@pytest.mark.parametrize("n, tile", [(20, 7), (5, 256), (1, 1), (0, 16), (300, 16), (301, 16)])
@pytest.mark.parametrize("from_upper", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_symmetrize_copies_one_triangle(n, tile, from_upper, dtype):
    """The mirrored triangle, bit for bit (signed zeros included), with full and partial
    diagonal tiles."""
    A = np.random.default_rng(n).standard_normal((n, n)).astype(dtype)
    A[::3, ::2] = -0.0
    source = np.tri(n, dtype=bool).T if from_upper else np.tri(n, dtype=bool)
    expected = np.where(source, A, A.T)
    linalg._symmetrize(A, from_upper, tile)
    bits = np.uint64 if dtype == np.float64 else np.uint32
    np.testing.assert_array_equal(A.view(bits), expected.view(bits))


def test_spd_inverse_rejects_bad_dtype_and_shape():
    with pytest.raises(ConfigError, match="float32.*float64"):
        spd_inverse(np.eye(3), dtype="int32")
    with pytest.raises(ConfigError, match="square"):
        spd_inverse(np.ones((2, 3)))
    with pytest.raises(ConfigError, match="block=0"):
        spd_inverse(np.eye(3), block=0)


def test_zero_diagonal_weights_formula():
    P = np.linalg.inv(random_spd(6, seed=4))
    W = zero_diagonal_weights(P.copy(), scale=2.0)
    expected = 2.0 * (np.eye(6) - P @ np.diag(1.0 / np.diag(P)))  # Steck 2019, matrix form
    np.fill_diagonal(expected, 0.0)
    np.testing.assert_allclose(W, expected, rtol=0, atol=1e-12)
    assert np.all(np.diag(W) == 0.0)


def test_add_to_diagonal():
    A = np.zeros((3, 3))
    add_to_diagonal(A, np.array([1.0, 2.0, 3.0]))
    add_to_diagonal(A, 0.5)
    np.testing.assert_array_equal(A, np.diag([1.5, 2.5, 3.5]))


def test_memory_guard_message_and_estimate():
    need = check_dense_memory(1000, "float64", 2, "EASE", budget_bytes=1 << 30)
    assert need == 2 * 1000 * 1000 * 8
    with pytest.raises(MemoryBudgetError) as err:
        check_dense_memory(40_000, "float64", 2, "EASE on 40000 items", "Use model=lrr.",
                           budget_bytes=1 << 30)
    msg = str(err.value)
    assert "23.8 GiB" in msg and "1.0 GiB" in msg and "model=lrr" in msg and "float32" in msg


def test_memory_guard_uses_available_memory(monkeypatch):
    monkeypatch.setattr(linalg, "available_memory_bytes", lambda: 10_000)
    with pytest.raises(MemoryBudgetError, match="0.0 GiB is available"):
        check_dense_memory(100, "float32", 1, "test")


def test_cast_like_takes_the_dtype_of_its_model():
    values = np.array([0.1, 1 / 3])
    cast = cast_like(values, np.zeros(2, np.float32))
    assert cast.dtype == np.float32
    np.testing.assert_array_equal(cast, np.float32(values))
    assert cast_like([1, 2], np.zeros(1)).dtype == np.float64


@pytest.mark.parametrize("dtype, alternative, tail", [
    ("float64", "Use model=lrr.", " Use model=lrr. dtype=float32 would need 1.2 GiB."),
    ("float64", "", " dtype=float32 would need 1.2 GiB."),
    ("float32", "Use model=lrr.", " Use model=lrr."),
    ("float32", "", ""),
])
def test_memory_guard_whole_message(dtype, alternative, tail):
    """The message, to the character: the need (half a matrix of 25 000²: 2.3 GiB in float64,
    1.2 in float32), the budget, the alternative, and for float64 what float32 would need."""
    with pytest.raises(MemoryBudgetError) as err:
        check_dense_memory(25_000, dtype, 0.5, "EASE on 25000 items", alternative,
                           budget_bytes=1 << 30)
    need = {"float64": "2.3", "float32": "1.2"}[dtype]
    assert str(err.value) == (
        f"EASE on 25000 items: needs about {need} GiB (0.5 dense 25000x25000 {dtype} matrices) "
        f"but only 1.0 GiB is available.{tail}")
    assert check_dense_memory(1000, dtype, 2.5, "x", budget_bytes=int(2.5e6 * 8)) == \
        int(2.5e6 * np.dtype(dtype).itemsize)  # a budget of exactly the need is enough


def test_memory_guard_default_alternative_is_none():
    with pytest.raises(MemoryBudgetError) as err:
        check_dense_memory(100, "float32", 1, "test", budget_bytes=0)
    assert str(err.value) == ("test: needs about 0.0 GiB (1 dense 100x100 float32 matrices) "
                              "but only 0.0 GiB is available.")


def test_device_memory_guard_asks_its_own_device_and_falls_back_to_the_host(monkeypatch):
    import types

    import torch

    asked = []
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda device: asked.append(device) or (4 * 10_000**2, 80 * 2**30))
    cuda = types.SimpleNamespace(type="cuda", __str__=lambda self: "cuda:1")
    check_device_memory(10_000, "float32", 1.0, "ease", "", cuda)  # exactly the free memory
    assert asked == [cuda]
    host = types.SimpleNamespace(type="cpu")
    with pytest.raises(MemoryBudgetError) as err:
        monkeypatch.setattr(linalg, "available_memory_bytes", lambda: 1 << 30)
        check_device_memory(25_000, "float64", 0.5, "ease on 25000 items", "Use lrr.", host)
    assert str(err.value) == (
        "ease on 25000 items: needs about 2.3 GiB (0.5 dense 25000x25000 float64 matrices) but "
        "only 1.0 GiB is available. Use lrr. dtype=float32 would need 1.2 GiB.")


def test_recursive_block_is_the_leaf_size_capped_by_the_safe_row():
    safe = LAPACK_SAFE_ROW_BYTES
    assert recursive_block("float64", 10**9) == safe // 8
    assert recursive_block("float32", 10**9) == safe // 4
    assert isinstance(recursive_block("float32", 10**9), int)
    assert recursive_block("float32", 100) == 100
    assert recursive_block("float64", 1) == 1


def test_spd_inverse_chooses_its_path_and_leaf_by_the_target_dtype(monkeypatch):
    """float32 rows are half as long: at 16 float64 per safe row, a float32 matrix of 20 takes
    the whole-matrix LAPACK path, and on the recursive path its leaves are 32 rows."""
    monkeypatch.setattr(linalg, "LAPACK_SAFE_ROW_BYTES", 8 * 16)
    calls = []
    lapack, recursive = kernels.lapack_spd_inverse_upper, kernels.spd_inverse_lower
    monkeypatch.setattr(kernels, "lapack_spd_inverse_upper",
                        lambda F: calls.append("lapack") or lapack(F))
    monkeypatch.setattr(kernels, "spd_inverse_lower",
                        lambda F, block: calls.append(block) or recursive(F, block))
    A = random_spd(20, seed=3)
    for dtype in ("float64", "float32"):
        P = spd_inverse(A.copy(), dtype=dtype, block=10**6)
        np.testing.assert_allclose(P, np.linalg.inv(A), rtol=0,
                                   atol=1e-10 if dtype == "float64" else 1e-4)
    P = spd_inverse(A.astype(np.float32), large_n=1, block=10**6)
    assert calls == [16, "lapack", 32]


@pytest.mark.parametrize("overwrite", [True, False])
def test_spd_inverse_of_a_fortran_ordered_matrix(overwrite):
    """Any memory order in, the C-ordered inverse out (the kernels read A's transpose as
    Fortran): a Fortran-ordered, non-symmetric-looking storage of an SPD matrix."""
    A = random_spd(40, seed=8)
    F = np.asfortranarray(A)
    P = spd_inverse(F, overwrite=overwrite)
    assert P.flags.c_contiguous
    np.testing.assert_allclose(P, np.linalg.inv(A), rtol=0, atol=1e-10)
    np.testing.assert_array_equal(F, A)  # a copy was made: the input is left as it was


def test_thread_count_is_the_setting_or_the_limit(monkeypatch):
    """A positive setting is the count (1 is 1); 0, None and no argument mean the limit:
    $LINREC_THREADS, else every core this process may use."""
    monkeypatch.setattr(hardware, "cpu_cores", lambda: 8)
    monkeypatch.setenv("LINREC_THREADS", "3")
    assert [thread_count(1), thread_count(2), thread_count(5)] == [1, 2, 5]
    assert thread_count() == thread_count(0) == thread_count(None) == 3
    monkeypatch.delenv("LINREC_THREADS")
    assert thread_count() == 8
