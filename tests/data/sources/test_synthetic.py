"""The synthetic generator: sizes, determinism and its statistical shape."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.data.interactions import Interactions
from linrec.data.sources import (
    synthetic,
)
from linrec.errors import ConfigError


@pytest.fixture(scope="module")
def default_synthetic() -> Interactions:
    """The default synthetic dataset (its generation's speed is a benchmark's business:
    experiments/benchmarks/bench_splits.py, not a test's)."""
    return synthetic.load()


def test_synthetic_defaults_size(default_synthetic):
    inter = default_synthetic
    assert inter.n_users == 6000 and 1900 <= inter.n_items <= 2000
    assert 150_000 <= inter.n_interactions <= 250_000
    assert np.bincount(inter.users).min() >= 3  # every user keeps targets after a split
    assert inter.values is None and inter.timestamps.dtype == np.int64


def test_synthetic_is_deterministic_per_seed():
    params = dict(n_users=300, n_items=200, mean_user_interactions=12)
    first, again = synthetic.load(seed=7, **params), synthetic.load(seed=7, **params)
    other = synthetic.load(seed=8, **params)
    for field in ("users", "items", "user_ids", "item_ids", "timestamps"):
        np.testing.assert_array_equal(getattr(first, field), getattr(again, field))
    assert first.n_interactions != other.n_interactions or not np.array_equal(
        first.items, other.items)


def test_synthetic_popularity_is_heavy_tailed(default_synthetic):
    inter = default_synthetic
    counts = np.sort(np.bincount(inter.items, minlength=inter.n_items))[::-1]
    top_decile_share = counts[: len(counts) // 10].sum() / counts.sum()
    assert top_decile_share > 0.35  # uniform popularity would give ~0.10
    # log-log slope of count vs popularity rank over the head is close to -exponent
    ranks = np.arange(1, 201)
    slope = np.polyfit(np.log(ranks), np.log(counts[:200]), 1)[0]
    assert -1.3 < slope < -0.5


def test_synthetic_user_activity_mean_and_bounds():
    inter = synthetic.load(n_users=4000, n_items=1000, mean_user_interactions=20,
                           activity_sigma=0.5, min_user_interactions=5,
                           max_user_interactions=120, seed=2)
    per_user = np.bincount(inter.users)
    assert per_user.min() >= 5 and per_user.max() <= 120
    assert abs(per_user.mean() - 20) < 1.0


def test_gumbel_top_k_matches_successive_sampling_probabilities():
    rng = np.random.default_rng(11)
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1], dtype=np.float32))
    n_rows = 200_000
    counts = np.full(n_rows, 2)
    items, rows = synthetic._gumbel_top_k(rng, np.tile(logits, (n_rows, 1)), counts)
    np.testing.assert_array_equal(np.bincount(rows), counts)
    assert len(np.unique(rows * 4 + items)) == len(items)  # without replacement
    p = np.exp(logits.astype(np.float64))
    # P(i in a 2-draw successive sample) = p_i + sum_{j != i} p_j * p_i / (1 - p_j)
    inclusion = np.array([p[i] + sum(p[j] * p[i] / (1 - p[j]) for j in range(4) if j != i)
                          for i in range(4)])
    observed = np.bincount(items, minlength=4) / n_rows
    np.testing.assert_allclose(observed, inclusion, atol=0.005)
    # the first draw (column order is the draw order) follows p itself
    first = items[::2]
    np.testing.assert_allclose(np.bincount(first, minlength=4) / n_rows, p, atol=0.005)


def test_synthetic_rejects_bad_parameters():
    with pytest.raises(ConfigError, match="data.source.n_items=1 is out of range"):
        synthetic.load(n_items=1)
    with pytest.raises(ConfigError, match="max_user_interactions=500"):
        synthetic.load(n_items=100, max_user_interactions=500)


@pytest.mark.parametrize(
    ("params", "match"),
    [  # these were TypeError/ValueError tracebacks from a command-line typo
        ({"n_users": "abc"}, r"data.source.n_users='abc' is not an integer"),
        ({"rank": 2.5}, r"data.source.rank=2.5 is not an integer"),
        ({"seed": "x"}, r"data.source.seed='x' is not an integer"),
        ({"seed": -1}, r"data.source.seed=-1 is out of range"),
        ({"max_user_interactions": "abc"},
         r"data.source.max_user_interactions='abc' is not an integer"),
        ({"mean_user_interactions": "abc"}, r"mean_user_interactions='abc' is not a finite number"),
        ({"preference_strength": float("nan")}, r"preference_strength=nan is not a finite number"),
    ],
)
def test_synthetic_rejects_mistyped_parameters(params, match):
    with pytest.raises(ConfigError, match=match):
        synthetic.load(**params)


def test_synthetic_has_learnable_structure():
    """Brute-force EASE (closed form, lambda=100) beats MostPopular by a wide margin on a
    random leave-one-out split: the low-rank preferences carry signal beyond popularity."""
    inter = synthetic.load(n_users=1500, n_items=400, seed=3)
    matrix = inter.to_csr()
    rng = np.random.default_rng(1)
    lengths = np.diff(matrix.indptr)
    held_pos = matrix.indptr[:-1] + (rng.random(matrix.shape[0]) * lengths).astype(int)
    held = matrix.indices[held_pos]
    keep = np.ones(matrix.nnz, dtype=bool)
    keep[held_pos] = False
    rows = np.repeat(np.arange(matrix.shape[0]), lengths)
    train = sp.csr_matrix((matrix.data[keep], (rows[keep], matrix.indices[keep])),
                          shape=matrix.shape).toarray().astype(np.float64)

    def hit_rate_at_20(scores: np.ndarray) -> float:
        scores = np.where(train > 0, -np.inf, scores)
        target = scores[np.arange(len(held)), held]
        return float(np.mean(1 + (scores > target[:, None]).sum(axis=1) <= 20))

    gram = train.T @ train
    inverse = np.linalg.inv(gram + 100.0 * np.eye(gram.shape[0]))
    weights = -inverse / np.diag(inverse)
    np.fill_diagonal(weights, 0.0)
    ease = hit_rate_at_20(train @ weights)
    most_popular = hit_rate_at_20(np.tile(train.sum(axis=0), (train.shape[0], 1)))
    assert ease > 1.5 * most_popular
    assert most_popular > 0.05  # popularity is informative too, just less
