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


# --------------------------------------------------------------------------- top-K by product


def _reference_top_k(X, W, exclude, k, seed, users):
    """Each row's k best by Python's sort of (-score, key) over scipy's float64-free product,
    excluded entries dropped; padded with (-1, -inf)."""
    from linrec.item_order import tie_break_keys_at

    scores = np.asarray(sp.csr_matrix(X, dtype=W.dtype) @ W)
    excluded = exclude.toarray() != 0 if exclude is not None else np.zeros(scores.shape, bool)
    items = np.full((X.shape[0], k), -1)
    best = np.full((X.shape[0], k), -np.inf, dtype=W.dtype)
    for r in range(X.shape[0]):
        keys = tie_break_keys_at(seed, np.full(W.shape[1], users[r]), np.arange(W.shape[1]))
        order = sorted((j for j in range(W.shape[1]) if not excluded[r, j]),
                       key=lambda j: (-scores[r, j], int(keys[j])))[:k]
        items[r, :len(order)], best[r, :len(order)] = order, scores[r, order]
    return items, best


def _tied_input(dtype, seed=2):
    """Rows with 0..13 entries, unsorted with repeats; W of small integers, so that scores tie
    often (the keys decide) and every sum is exact."""
    rng = np.random.default_rng(seed)
    n_rows, n_items = 56, 40
    rows, cols = [], []
    for r in range(n_rows):
        rows += [r] * (r % 14)
        cols += list(rng.integers(0, n_items, r % 14))
    X = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n_rows, n_items))
    X.has_canonical_format = False
    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=X.shape)
    W = rng.integers(-2, 3, size=(n_items, n_items)).astype(dtype)
    return X, W


@pytest.mark.parametrize("fused", [True, False, None])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 7, 45])
def test_top_k_by_product_is_the_sorted_masked_product(monkeypatch, path, fused, dtype, k):
    """Every path (and scipy's below the thresholds) lists what a sort of the masked product
    by (score descending, key ascending) lists; k above the candidates pads with -1 / -inf."""
    from linrec.item_order import BatchKeys

    monkeypatch.setattr(_sparse_dense, "_PATH_TIMES", {})
    X, W = _tied_input(dtype)
    users = np.arange(100, 100 + X.shape[0])
    exclude = X.copy()
    exclude.data[:] = 1.0
    exclude.sum_duplicates()
    for ex in (exclude, None):
        for _ in range(3):  # with fused=None: each path timed, then the faster
            items, best = _sparse_dense.product_top_k(X, W, ex, k, BatchKeys(5, users, 40),
                                                      threads=2, fused=fused)
            expected_items, expected_best = _reference_top_k(X, W, ex, min(k, 40), 5, users)
            np.testing.assert_array_equal(items, expected_items)
            np.testing.assert_array_equal(best, expected_best)
            assert best.dtype == dtype


def test_top_k_by_product_refuses_nan_scores(monkeypatch, path):
    from linrec.errors import DataError
    from linrec.item_order import BatchKeys

    X, W = _tied_input(np.float32)
    W[3, 5] = np.nan
    row = next(r for r in range(X.shape[0]) if 3 in X.indices[X.indptr[r]:X.indptr[r + 1]])
    for fused in (True, False):
        with pytest.raises(DataError, match=f"scores of row {row} contain NaN or \\+inf"):
            _sparse_dense.product_top_k(X, W, None, 3, BatchKeys(0, np.arange(56), 40), 2,
                                        fused=fused)
    # a NaN only in an excluded entry is never looked at
    only = sp.csr_matrix(([1.0], ([row], [5])), shape=X.shape)
    W[3] = 0
    W[3, 5] = np.nan
    X1 = sp.csr_matrix(([1.0], ([row], [3])), shape=X.shape)
    items, _ = _sparse_dense.product_top_k(X1, W, only, 3, BatchKeys(0, np.arange(56), 40), 2,
                                           fused=True)
    assert 5 not in items[row]


def test_top_k_takes_the_faster_path_after_each_was_timed_once(monkeypatch, path):
    if path == "scipy":
        pytest.skip("below the kernel's threshold there is no path to choose")
    from linrec.item_order import BatchKeys

    ran = []
    fused, unfused = _sparse_dense._product_top_k, _sparse_dense._product
    monkeypatch.setattr(_sparse_dense, "_product_top_k",
                        lambda X, *a: (ran.append(True) if X.shape[0] else None) or fused(X, *a))
    monkeypatch.setattr(_sparse_dense, "_product",
                        lambda X, *a: (ran.append(False) if X.shape[0] else None) or
                        unfused(X, *a))
    monkeypatch.setattr(_sparse_dense, "_PATH_TIMES", {})
    monkeypatch.setattr(_sparse_dense, "time", _Clock([3.0, 1.0, 1.0, 1.0]))
    X, W = _tied_input(np.float32)
    keys = BatchKeys(0, np.arange(56), 40)
    lists = [_sparse_dense.product_top_k(X, W, None, 4, keys, 2)[0] for _ in range(4)]
    assert ran == [True, False, False, False]  # fused timed 3 s, blocked 1 s: blocked after
    for got in lists[1:]:
        np.testing.assert_array_equal(got, lists[0])


def test_recommend_of_an_item_item_model_selects_as_it_scores(monkeypatch, path):
    """EASE's lists by the fused product (thresholds forced down) equal the lists of the same
    model scored the generic way; a subclass that scores otherwise, and a model without W,
    take the generic way."""
    import linrec.models.ease as ease
    from linrec.models import EASE, MostPopular

    monkeypatch.setattr(ease, "COMPILED_FROM_ROWS", 0)
    monkeypatch.setattr(_sparse_dense, "_PATH_TIMES", {})
    rng = np.random.default_rng(4)
    train = sp.csr_matrix((rng.random((80, 30)) < 0.2).astype(np.float32))
    model = EASE(lam=2.0).fit(train)

    class Rescored(EASE):
        def _score(self, foldin, users):
            return super()._score(foldin, users) * 2.0

    generic = Rescored(lam=2.0).fit(train)
    assert _sparse_dense.product_top_k_for(model) is not None
    assert _sparse_dense.product_top_k_for(generic) is None
    assert _sparse_dense.product_top_k_for(MostPopular().fit(train)) is None
    calls = []
    original = _sparse_dense.product_top_k
    monkeypatch.setattr(_sparse_dense, "product_top_k",
                        lambda *a, **kw: calls.append(1) or original(*a, **kw))
    for exclude in (True, False, train[:40] * 0 + sp.eye(40, 30, format="csr")):
        items, scores = model.recommend(train[:40], 6, exclude=exclude, seed=3)
        expected_items, expected_scores = generic.recommend(train[:40], 6, exclude=exclude,
                                                            seed=3)
        np.testing.assert_array_equal(items, expected_items)
        np.testing.assert_array_equal(2 * scores, expected_scores)
    assert len(calls) == 3
