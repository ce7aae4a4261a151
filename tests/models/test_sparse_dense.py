"""The item-item scoring kernel (linrec.models._sparse_dense): bitwise scipy's csr @ dense."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.models import _sparse_dense
from linrec.models._sparse_dense import sparse_dense_product


@pytest.fixture(autouse=True, params=["kernel", "scipy"])
def path(request, monkeypatch):
    """The compiled kernel (forced at any size) and scipy's product below its threshold."""
    if request.param == "kernel":
        monkeypatch.setattr(_sparse_dense, "KERNEL_MIN_MULTIPLY_ADDS", 0)
    return request.param


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_equals_scipy_bit_for_bit(dtype, threads):
    """Rows with 0..13 entries (every remainder of the four-entry step), unsorted indices,
    duplicates and non-binary values: the same additions in the same order as scipy."""
    rng = np.random.default_rng(0)
    n_rows, n_items, width = 70, 50, 37
    rows, cols, vals = [], [], []
    for r in range(n_rows):
        k = r % 14
        rows += [r] * k
        cols += list(rng.integers(0, n_items, k))  # unsorted, with repeats
        vals += list(rng.normal(size=k))
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n_rows, n_items))
    X.has_canonical_format = False
    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=X.shape)  # keep the stored order
    W = rng.normal(size=(n_items, width)).astype(dtype)
    got = sparse_dense_product(X, W, threads)
    expected = sp.csr_matrix(X, dtype=dtype) @ W
    assert got.dtype == dtype and got.shape == (n_rows, width)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(got, X.toarray() @ W.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_shapes_must_agree():
    with pytest.raises(ValueError, match="3 columns but W has 4 rows"):
        sparse_dense_product(sp.csr_matrix((2, 3)), np.zeros((4, 2)), 1)
    assert sparse_dense_product(sp.csr_matrix((0, 3)), np.zeros((3, 2)), 2).shape == (0, 2)


def _product_input(seed: int = 1) -> tuple[sp.csr_matrix, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = sp.random(40, 300, density=0.05, format="csr", random_state=seed, dtype=np.float32)
    return X, rng.normal(size=(300, 200)).astype(np.float32)


@pytest.mark.parametrize("blocked", [True, False, None])
def test_every_path_is_scipys_product_in_several_column_blocks(monkeypatch, blocked):
    """Blocks of 64 columns (BLOCK_BYTES shrunk: four blocks, the last narrower), row by row,
    and the chosen path: the same bits as scipy."""
    monkeypatch.setattr(_sparse_dense, "BLOCK_BYTES", 64 * 300 * 4)
    monkeypatch.setattr(_sparse_dense, "_PATH_TIMES", {})
    X, W = _product_input()
    assert _sparse_dense.column_blocks(*W.shape, W.itemsize) == [(0, 64), (64, 128),
                                                                 (128, 192), (192, 200)]
    np.testing.assert_array_equal(sparse_dense_product(X, W, 2, blocked=blocked), X @ W)


class _Clock:
    """perf_counter that advances by the scripted durations, one per product."""

    def __init__(self, durations):
        self.durations, self.now, self.started = list(durations), 0.0, False

    def perf_counter(self) -> float:
        if self.started:
            self.now += self.durations.pop(0)
        self.started = not self.started
        return self.now


@pytest.mark.parametrize("blocked_seconds, rows_seconds, faster",
                         [(3.0, 1.0, False), (1.0, 3.0, True)])
def test_the_faster_path_is_taken_after_each_was_timed_once(monkeypatch, path, blocked_seconds,
                                                            rows_seconds, faster):
    if path == "scipy":
        pytest.skip("below the kernel's threshold there is no path to choose")
    ran = []
    product = _sparse_dense._product
    monkeypatch.setattr(_sparse_dense, "_product",
                        lambda X, W, threads, blocked: (ran.append(blocked) if X.shape[0]
                                                         else None) or
                        product(X, W, threads, blocked))  # rows: not the kernel's load
    monkeypatch.setattr(_sparse_dense, "_PATH_TIMES", {})
    monkeypatch.setattr(_sparse_dense, "time", _Clock([blocked_seconds, rows_seconds, 1.0]))
    X, W = _product_input()
    for _ in range(4):
        np.testing.assert_array_equal(sparse_dense_product(X, W, 2), X @ W)
    assert ran == [True, False, faster, faster]
    times = _sparse_dense._PATH_TIMES[((300, 200), W.dtype.str, 2)]
    assert times == {True: blocked_seconds / (X.nnz * 200), False: rows_seconds / (X.nnz * 200)}
    sparse_dense_product(X, W[:, :100].copy(), 2)  # another shape is timed afresh
    assert ran[-1] is True
