"""Input checks of the estimators and the sampled-rank histogram they work on
(docs/concepts/sampled.md)."""

from __future__ import annotations

import numpy as np

from linrec.errors import ConfigError


def check_sampled_ranks(sampled_ranks: np.ndarray, sample_size: int | np.ndarray) -> np.ndarray:
    """Sampled ranks as int64 (M,), each in [1, its sample size]; ConfigError naming the first bad
    value and the allowed range otherwise."""
    ranks = np.asarray(sampled_ranks)
    if ranks.ndim != 1 or ranks.size == 0:
        raise ConfigError(f"sampled_ranks must be a non-empty 1-d array, got shape {ranks.shape}")
    if not np.issubdtype(ranks.dtype, np.integer):
        if not np.all(np.isfinite(ranks)) or np.any(ranks != np.round(ranks)):
            bad = ranks[~np.isfinite(ranks) | (ranks != np.round(ranks))][0]
            raise ConfigError(f"sampled rank {bad} is not an integer; ranks are 1-based integers")
        ranks = ranks.astype(np.int64)
    ranks = ranks.astype(np.int64, copy=False)
    sizes = np.broadcast_to(np.asarray(sample_size, dtype=np.int64), ranks.shape)
    bad = (ranks < 1) | (ranks > sizes)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ConfigError(
            f"sampled rank {int(ranks[i])} (target {i}) is outside the allowed range "
            f"[1, {int(sizes[i])}] (1-based, sample_size={int(sizes[i])})"
        )
    return ranks


def common_sample_size(sample_size: int | np.ndarray, name: str) -> int:
    """The single sample size of a fixed-n estimator; ConfigError when sizes differ per target."""
    sizes = np.unique(np.asarray(sample_size))
    if sizes.size != 1:
        raise ConfigError(
            f"estimator {name!r} needs one common sample_size, got {sizes.size} different sizes "
            f"({sizes[:5].tolist()}...); only 'adaptive_mle' handles per-target sizes "
            "(Li et al. 2023, §4.2)"
        )
    size = sizes[0]
    if int(size) != size or size < 1:
        raise ConfigError(f"sample_size={size} must be an integer >= 1")
    return int(size)


def rank_histogram(sampled_ranks: np.ndarray, sample_size: int) -> np.ndarray:
    """P~(r), r = 1..n: the empirical sampled-rank distribution, float64 (sample_size,)."""
    counts = np.bincount(sampled_ranks - 1, minlength=sample_size).astype(np.float64)
    return counts / counts.sum()


def normalise_distribution(values: np.ndarray, n_items: int, what: str) -> np.ndarray:
    """A user-given P(R) as float64 (n_items,) summing to 1; ConfigError if it has the wrong length,
    negative or non-finite entries, or zero mass."""
    p = np.asarray(values, dtype=np.float64).ravel()
    if p.shape != (n_items,):
        raise ConfigError(f"{what} must have length n_items={n_items}, got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ConfigError(f"{what} must be finite, >= 0 and have positive mass")
    return p / p.sum()
