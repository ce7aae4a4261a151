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
    monkeypatch.setattr(_sparse_dense, "_ASKED", [0])
    monkeypatch.setattr(_sparse_dense, "_PATH_TIMES", {})
    if request.param == "kernel":
        monkeypatch.setattr(_sparse_dense, "KERNEL_MIN_MULTIPLY_ADDS", 0)
    return request.param


def test_the_kernel_serves_a_process_once_its_products_add_up(monkeypatch):
    """Below KERNEL_MIN_MULTIPLY_ADDS in all, scipy's product; from the product that reaches
    it on, the kernel for every product of at least KERNEL_MIN_LOADED; the same bits."""
    monkeypatch.setattr(_sparse_dense, "KERNEL_MIN_MULTIPLY_ADDS", 40_000)
    monkeypatch.setattr(_sparse_dense, "KERNEL_MIN_LOADED", 100 * 6)
    ran = []
    original = _sparse_dense._product
    monkeypatch.setattr(_sparse_dense, "_product",
                        lambda X, *a: (ran.append(X.shape[0]) if X.shape[0] else None)
                        or original(X, *a))
    rng = np.random.default_rng(3)
    W = rng.normal(size=(30, 100)).astype(np.float32)
    X = sp.csr_matrix(np.eye(40, 30, dtype=np.float32) * 2 + np.eye(40, 30, 1, dtype=np.float32)
                      * 3 + np.eye(40, 30, 2, dtype=np.float32) * 5)
    X = sp.vstack([X, X[:20]] * 2, format="csr")  # 120 rows of 3 entries: 36 000 multiply-adds
    # 12 000 multiply-adds (scipy), 36 000 in all (scipy), 48 000: the kernel (its first
    # product of a shape in halves), 300 < 600: scipy, 12 000: the kernel
    for part in (X[:40], X[:80], X[40:80], X[80:81], X[:40]):
        np.testing.assert_array_equal(_sparse_dense.sparse_dense_product(part, W, 2), part @ W)
    assert ran == [20, 20, 40]


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
    monkeypatch.setattr(_sparse_dense, "time", _Clock([blocked_seconds, rows_seconds, 1.0, 1.0]))
    X, W = _product_input()
    for _ in range(4):  # the first: half the rows each way
        np.testing.assert_array_equal(sparse_dense_product(X, W, 2), X @ W)
    assert ran == [True, False, faster, faster, faster]
    times = _sparse_dense._PATH_TIMES[((300, 200), W.dtype.str, 2)]
    assert times == {True: blocked_seconds / (X[:20].nnz * 200),
                     False: rows_seconds / (X[20:].nnz * 200)}
    sparse_dense_product(X, W[:, :100].copy(), 2)  # another shape is timed afresh
    assert ran[-2:] == [True, False]


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


@pytest.fixture
def any_k(monkeypatch):
    """The screen for every k (its share of the columns lifted), and no timings kept."""
    monkeypatch.setattr(_sparse_dense, "SCREEN_MAX_K_SHARE", 1.0)
    monkeypatch.setattr(_sparse_dense, "_PATH_TIMES", {})


@pytest.mark.parametrize("top_k_path", ["screened", "fused", "blocked", None])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 7, 45])
def test_top_k_by_product_is_the_sorted_masked_product(any_k, path, top_k_path, dtype, k):
    """Every path (and scipy's below the thresholds) lists what a sort of the masked product
    by (score descending, key ascending) lists; k above the candidates pads with -1 / -inf.
    W of small integers: scores tie often, so the keys decide, and the int8 screen's error
    (W = 1 is 64 · 2/127) must keep every tied item."""
    from linrec.item_order import BatchKeys

    X, W = _tied_input(dtype)
    users = np.arange(100, 100 + X.shape[0])
    exclude = X.copy()
    exclude.data[:] = 1.0
    exclude.sum_duplicates()
    if top_k_path == "screened" and path == "kernel" and dtype == np.float64:
        with pytest.raises(ValueError, match="cannot be screened"):
            _sparse_dense.product_top_k(X, W, None, k, BatchKeys(5, users, 40), 2,
                                        path="screened")
        return
    for ex in (exclude, None):
        for _ in range(4):  # with path None: each path timed, then the fastest
            items, best = _sparse_dense.product_top_k(X, W, ex, k, BatchKeys(5, users, 40),
                                                      threads=2, path=top_k_path)
            expected_items, expected_best = _reference_top_k(X, W, ex, min(k, 40), 5, users)
            np.testing.assert_array_equal(items, expected_items)
            np.testing.assert_array_equal(best, expected_best)
            assert best.dtype == dtype


def _lexsorted_top_k(scores, exclude, k, seed, users):
    """The k best of each row by numpy's lexsort of (key, -score), excluded entries last."""
    from linrec.item_order import tie_break_keys_at

    scores = scores.copy()
    scores[exclude.toarray() != 0] = -np.inf
    keys = tie_break_keys_at(seed, users[:, None], np.arange(scores.shape[1])[None, :])
    order = np.lexsort((keys, -scores), axis=1)[:, :k]
    best = np.take_along_axis(scores, order, axis=1)
    return np.where(best == -np.inf, -1, order), best


@pytest.mark.parametrize("seed", range(6))
def test_the_screen_lists_the_exact_top_k_where_its_error_could_mislead_it(any_k, path, seed):
    """The int8 screen against the exact lists on W built to fool it: entries on the int8
    rounding's half-way points, blocks of very different scales (1e-30 .. 1e30 within a row),
    columns that copy others up to one float32 ulp (exact scores a hair apart, screened scores
    equal or reversed), zero blocks, weighted and negative entries, rows of up to 300 entries,
    columns not a multiple of the 64-column block; k from 1 to 40. Every row must be served
    by the screen (none falls back to the exact path here)."""
    if path == "scipy":
        pytest.skip("below the kernel's threshold there is no screen")
    from linrec._row_kernels import SCREEN_BLOCK
    from linrec.item_order import BatchKeys

    rng = np.random.default_rng(seed)
    n, d = 400, 300
    W = rng.normal(size=(n, d)).astype(np.float32)
    scale = 10.0 ** rng.integers(-30, 31, size=(n, -(-d // SCREEN_BLOCK)))
    W *= np.repeat(scale, SCREEN_BLOCK, axis=1)[:, :d].astype(np.float32)
    half = rng.random((n, d)) < 0.3  # on the half-way points of the int8 rounding
    block_max = np.repeat(np.abs(W).reshape(n, -1, SCREEN_BLOCK).max(axis=2) if d %
                          SCREEN_BLOCK == 0 else
                          np.maximum.reduceat(np.abs(W), np.arange(0, d, SCREEN_BLOCK),
                                              axis=1), SCREEN_BLOCK, axis=1)[:, :d]
    steps = np.float32(block_max / 127)
    W[half] = (np.round(W[half] / steps[half] - 0.5) + 0.5).astype(np.float32) * steps[half]
    twins = rng.choice(d, size=(40, 2), replace=False)
    W[:, twins[:, 1]] = np.nextafter(W[:, twins[:, 0]], np.inf * np.sign(rng.normal(size=40)))
    W[:, SCREEN_BLOCK:2 * SCREEN_BLOCK][rng.random(n) < 0.5] = 0.0
    # the same scale for every row: the items compete over the catalogue
    W = np.ascontiguousarray(W / np.float32(1.0))
    X = sp.random(120, n, density=0.08, format="csr", random_state=seed, dtype=np.float32)
    X.data = rng.choice([1.0, 2.5, -0.5, 1e-3], size=X.nnz).astype(np.float32)
    X = sp.vstack([sp.csr_matrix(rng.random((1, n)) < 0.75, dtype=np.float32), X[1:]],
                  format="csr")  # row 0: ~300 entries
    users = np.arange(X.shape[0])
    exact = np.asarray(X @ W)
    exclude = sp.random(X.shape[0], d, density=0.05, format="csr", random_state=seed + 1)
    for k in (1, 5, 20, 40):
        _sparse_dense._SCREENS.clear()
        before = dict(_sparse_dense.SCREEN_ROWS)
        items, best = _sparse_dense.product_top_k(X, W, exclude, k, BatchKeys(seed, users, d),
                                                  2, path="screened")
        expected_items, expected_best = _lexsorted_top_k(exact, exclude, k, seed, users)
        np.testing.assert_array_equal(items, expected_items)
        np.testing.assert_array_equal(best, expected_best)
        assert _sparse_dense.SCREEN_ROWS["screened"] - before["screened"] == X.shape[0]


def test_a_row_the_screen_cannot_settle_takes_the_exact_path(path):
    """Scores all within the screen's error of each other (one tied value): more items stay
    candidates than the screen keeps, and the row is listed by the exact path."""
    if path == "scipy":
        pytest.skip("below the kernel's threshold there is no screen")
    from linrec.item_order import BatchKeys

    W = np.ones((50, 700), np.float32)
    X = sp.csr_matrix(np.eye(3, 50, dtype=np.float32))
    before = dict(_sparse_dense.SCREEN_ROWS)
    items, best = _sparse_dense.product_top_k(X, W, None, 3, BatchKeys(1, np.arange(3), 700), 1,
                                              path="screened")
    expected_items, expected_best = _lexsorted_top_k(np.asarray(X @ W), sp.csr_matrix(
        (3, 700)), 3, 1, np.arange(3))
    np.testing.assert_array_equal(items, expected_items)
    np.testing.assert_array_equal(best, expected_best)
    assert _sparse_dense.SCREEN_ROWS["rows"] - before["rows"] == 3
    assert _sparse_dense.SCREEN_ROWS["screened"] == before["screened"]


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_non_finite_fold_in_value_raises_on_every_path(any_k, path, value):
    """A NaN or infinite fold-in weight makes its row's scores non-finite: every path names
    the row (the screen hands it to the exact path, which finds them)."""
    from linrec.errors import DataError
    from linrec.item_order import BatchKeys

    X, W = _tied_input(np.float32)
    X = X.copy()
    row = 13
    X.data[X.indptr[row]] = value
    for top_k_path in ("screened", "fused", "blocked"):
        if path == "scipy" and top_k_path != "screened":
            continue  # one pass of scipy's product is enough
        with pytest.raises(DataError, match=f"scores of row {row} contain NaN or \\+inf"):
            _sparse_dense.product_top_k(X, W, None, 3, BatchKeys(0, np.arange(56), 40), 2,
                                        path=top_k_path)


def test_w_with_nan_or_tiny_blocks_is_not_screened():
    W = np.ones((20, 64), np.float32)
    assert _sparse_dense._screen_of(W, 1) is not None
    for bad in (np.nan, np.inf, 1e-35):
        W = np.ones((20, 64), np.float32)
        W[3, :] = bad  # the whole block: a NaN, an infinity, or a subnormal scale
        assert _sparse_dense._screen_of(W, 1) is None
    assert _sparse_dense._screen_of(np.ones((20, 64)), 1) is None  # float64
    assert _sparse_dense._screen_of(np.ones((64, 20), np.float32).T, 1) is None  # a view


def test_top_k_by_product_refuses_nan_scores(monkeypatch, path):
    from linrec.errors import DataError
    from linrec.item_order import BatchKeys

    X, W = _tied_input(np.float32)
    W[3, 5] = np.nan
    row = next(r for r in range(X.shape[0]) if 3 in X.indices[X.indptr[r]:X.indptr[r + 1]])
    for top_k_path in ("fused", "blocked", None):
        with pytest.raises(DataError, match=f"scores of row {row} contain NaN or \\+inf"):
            _sparse_dense.product_top_k(X, W, None, 3, BatchKeys(0, np.arange(56), 40), 2,
                                        path=top_k_path)
    # a NaN only in an excluded entry is never looked at
    only = sp.csr_matrix(([1.0], ([row], [5])), shape=X.shape)
    W[3] = 0
    W[3, 5] = np.nan
    X1 = sp.csr_matrix(([1.0], ([row], [3])), shape=X.shape)
    items, _ = _sparse_dense.product_top_k(X1, W, only, 3, BatchKeys(0, np.arange(56), 40), 2,
                                           path="fused")
    assert 5 not in items[row]


@pytest.mark.parametrize("seconds, fastest", [((2.0, 3.0, 1.0), "blocked"),
                                              ((1.0, 3.0, 2.0), "screened"),
                                              ((3.0, 1.0, 2.0), "fused")])
def test_top_k_takes_the_fastest_path_after_each_was_timed_once(any_k, monkeypatch, path,
                                                                 seconds, fastest):
    """Screened, fused and blocked are each timed on a third of the first call's rows (the
    screen's copy of W made before any clock runs), then the fastest runs; the lists are
    the same either way; a screen timed slower is dropped."""
    if path == "scipy":
        pytest.skip("below the kernel's threshold there is no path to choose")
    from linrec.item_order import BatchKeys

    ran = []
    for name, label in (("_screened_top_k", "screened"), ("_product_top_k", "fused"),
                        ("_product", "blocked")):
        original = getattr(_sparse_dense, name)
        monkeypatch.setattr(_sparse_dense, name,
                            lambda X, *a, original=original, label=label:
                            (ran.append(label) if X.shape[0] else None) or original(X, *a))
    monkeypatch.setattr(_sparse_dense, "time", _Clock(list(seconds)))
    X, W = _tied_input(np.float32)
    keys = BatchKeys(0, np.arange(56), 40)
    lists = [_sparse_dense.product_top_k(X, W, None, 4, keys, 2)[0] for _ in range(3)]
    # the first call: a third of the rows each way
    assert ran == ["screened", "fused", "blocked", fastest, fastest]
    assert (_sparse_dense._SCREENS[id(W)] is None) == (fastest != "screened")
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
    assert _sparse_dense.product_top_k_for(model, train) is not None
    assert _sparse_dense.product_top_k_for(generic, train) is None
    assert _sparse_dense.product_top_k_for(MostPopular().fit(train), train) is None
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
