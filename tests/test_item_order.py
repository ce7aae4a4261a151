"""top_k against a per-row brute force sort by (score descending, key ascending)."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.errors import ConfigError, DataError
from linrec.item_order import BatchKeys, tie_break_keys, top_k


def brute_force_top_k(scores: np.ndarray, k: int, keys: np.ndarray):
    """Python sort of every row's finite-or-not-excluded entries; pads with (-1, -inf)."""
    items = np.full((scores.shape[0], min(k, scores.shape[1])), -1, np.int64)
    best = np.full(items.shape, -np.inf)
    for r in range(scores.shape[0]):
        candidates = [j for j in range(scores.shape[1]) if scores[r, j] > -np.inf]
        ranked = sorted(candidates, key=lambda j: (-scores[r, j], int(keys[r, j])))[:items.shape[1]]
        items[r, :len(ranked)] = ranked
        best[r, :len(ranked)] = scores[r, ranked]
    return items, best


@pytest.mark.parametrize("k", [1, 3, 7, 40, 60])
@pytest.mark.parametrize("levels", [3, 1000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("compiled", [None, True])  # 25 rows: numpy's selection by default
def test_top_k_equals_brute_force_with_ties_and_masks(k, levels, dtype, compiled):
    rng = np.random.default_rng(k * levels)
    scores = rng.integers(0, levels, size=(25, 50)).astype(dtype)
    scores[rng.random(scores.shape) < 0.3] = -np.inf  # excluded items
    scores[3] = -np.inf  # a row without candidates
    users = rng.permutation(1000)[:25]
    keys = tie_break_keys(9, users, 50)
    items, best = top_k(scores, k, BatchKeys(9, users, 50), compiled=compiled)
    want_items, want_best = brute_force_top_k(scores, k, keys)
    np.testing.assert_array_equal(items, want_items)
    np.testing.assert_array_equal(best, want_best.astype(dtype))
    assert best.dtype == dtype


def test_top_k_rejects_nan_and_bad_k():
    scores = np.zeros((2, 5))
    scores[1, 2] = np.nan
    with pytest.raises(DataError, match="row 1 contain NaN"):
        top_k(scores, 2, BatchKeys(0, np.arange(2), 5))
    scores[1, 2] = np.inf
    with pytest.raises(DataError, match="row 1 contain NaN or \\+inf"):
        top_k(scores, 2, BatchKeys(0, np.arange(2), 5))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigError, match="must be a positive integer"):
            top_k(np.zeros((2, 5)), bad, BatchKeys(0, np.arange(2), 5))


def test_top_k_of_many_rows_on_threads_with_ties_equals_brute_force():
    """A thousand rows (chunks on several threads) of 300 items with heavy ties."""
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 4, size=(1000, 300)).astype(np.float32)
    scores[rng.random(scores.shape) < 0.5] = -np.inf
    users = rng.permutation(5000)[:1000]
    items, best = top_k(scores, 20, BatchKeys(3, users, 300))
    want_items, want_best = brute_force_top_k(scores, 20, tie_break_keys(3, users, 300))
    np.testing.assert_array_equal(items, want_items)
    np.testing.assert_array_equal(best, want_best.astype(np.float32))
