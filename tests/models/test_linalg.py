"""linrec.models.linalg: Gram, SPD inverse (both solver paths), zero-diagonal weights, memory
guard."""

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.errors import ConfigError, MemoryBudgetError
from linrec.models import linalg
from linrec.models.linalg import (
    NotPositiveDefiniteError,
    add_to_diagonal,
    check_dense_memory,
    gram,
    spd_inverse,
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


@pytest.mark.parametrize("n, block", [(500, 64), (500, 500), (257, 100), (3, 2)])
def test_blocked_large_n_path_equals_lapack_path(n, block):
    A = random_spd(n, seed=7)
    default = spd_inverse(A.copy())
    blocked = spd_inverse(A.copy(), large_n=1, block=block)  # force the large-n path
    np.testing.assert_allclose(blocked, default, rtol=0, atol=1e-11 * np.abs(default).max())
    np.testing.assert_array_equal(blocked, blocked.T)


def test_spd_inverse_single_thread_equals_default():
    A = random_spd(200, seed=5)
    np.testing.assert_allclose(spd_inverse(A, n_threads=1, overwrite=False),
                               spd_inverse(A, overwrite=False), rtol=0, atol=1e-12)


def test_spd_inverse_float32_both_paths():
    A = random_spd(300, seed=3)
    expected = np.linalg.inv(A)
    for kwargs in ({}, {"large_n": 1, "block": 64}):
        P = spd_inverse(A, dtype="float32", **kwargs)
        assert P.dtype == np.float32
        np.testing.assert_allclose(P, expected, rtol=0, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("kwargs", [{}, {"large_n": 1, "block": 4}])
def test_spd_inverse_rejects_indefinite(kwargs):
    A = random_spd(10, seed=2)
    A[6, 6] = -5.0
    with pytest.raises(NotPositiveDefiniteError, match="not positive definite"):
        spd_inverse(A, **kwargs)


def test_spd_inverse_rejects_bad_dtype_and_shape():
    with pytest.raises(ConfigError, match="float32.*float64"):
        spd_inverse(np.eye(3), dtype="int32")
    with pytest.raises(ConfigError, match="square"):
        spd_inverse(np.ones((2, 3)))


def test_zero_diagonal_weights_formula():
    P = np.linalg.inv(random_spd(6, seed=4))
    W = zero_diagonal_weights(P.copy(), scale=2.0)
    expected = 2.0 * (np.eye(6) - P @ np.diag(1.0 / np.diag(P)))  # spec §3.1 matrix form
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
