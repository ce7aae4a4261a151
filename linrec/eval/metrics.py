"""Metric functions of ranks and metric curves of a global-rank distribution (spec/evaluation.md §1)."""

from __future__ import annotations

import numpy as np

from linrec.errors import ConfigError

#: metrics that are a per-target gain w(R) of a single 1-based rank, summed over R <= K (§1.2)
CURVE_METRICS = ("recall", "hr", "ndcg", "ap", "precision")


def rank_gain(metric: str, ranks: np.ndarray) -> np.ndarray:
    """w(R) for one relevant item at 1-based rank R: 1 (recall/hr), 1/log2(R+1) (ndcg), 1/R (ap/rr/mrr),
    1 (precision; divide by K afterwards). ranks: int array (any shape) -> float64 array."""
    ranks = np.asarray(ranks, dtype=np.float64)
    if metric in ("recall", "hr", "precision"):
        return np.ones_like(ranks)
    if metric == "ndcg":
        return 1.0 / np.log2(ranks + 1.0)
    if metric in ("ap", "rr", "mrr"):
        return 1.0 / ranks
    raise ConfigError(f"metric={metric!r} is not a rank-gain metric; choose one of {CURVE_METRICS}")


def curve(p_hat: np.ndarray, metric: str, k_max: int) -> np.ndarray:
    """T@1..T@k_max implied by a global-rank distribution p_hat (length n_items, p_hat[R-1] = P(R)):
    T@K = sum_{R<=K} P(R) w(R) (precision divides by K). Returns float64 (k_max,).
    p_hat may hold negative entries (BV/MN); nothing is clipped."""
    if k_max <= 0:
        raise ConfigError(f"k_max={k_max} must be a positive integer")
    p = np.asarray(p_hat, dtype=np.float64)
    k_max_eff = min(k_max, len(p))
    ranks = np.arange(1, k_max_eff + 1)
    out = np.cumsum(p[:k_max_eff] * rank_gain(metric, ranks))
    if k_max > k_max_eff:
        out = np.concatenate([out, np.full(k_max - k_max_eff, out[-1] if len(out) else 0.0)])
    if metric == "precision":
        out = out / np.arange(1, k_max + 1)
    return out
