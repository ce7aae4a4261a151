"""EM for sampled ranks observed with heterogeneous sample sizes, as produced by adaptive
(doubling) item sampling (Li et al. 2023, eq. 12)."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from linrec.errors import ConfigError
from linrec.eval.conditional import conditional_columns
from linrec.eval.estimators.em import (
    check_iterations,
    em_mixture,
    init_params,
    initial_distribution,
)
from linrec.eval.estimators.result import EstimateResult
from linrec.params import check_choice

LIKELIHOODS = ("paper", "nested")


def observation_cells(
    sampled_ranks: np.ndarray, sample_sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group targets by (n_u, r_u): (sizes (J,), ranks (J,), frequencies (J,) summing to 1),
    cells in (size, rank) order. Counting sort: O(M), no sort of the M targets."""
    sizes = np.asarray(sample_sizes, dtype=np.int64).ravel()
    ranks = np.asarray(sampled_ranks, dtype=np.int64).ravel()
    levels = np.flatnonzero(np.bincount(sizes))  # the few distinct sizes, ascending
    level_of = np.zeros(levels[-1] + 1, dtype=np.int64)
    level_of[levels] = np.arange(levels.size)
    width = int(ranks.max()) + 1
    counts = np.bincount(level_of[sizes] * width + ranks, minlength=levels.size * width)
    cells = np.flatnonzero(counts)
    return levels[cells // width], cells % width, counts[cells] / ranks.size


def nested_log_factor(sizes: np.ndarray, ranks: np.ndarray, initial_size: int) -> np.ndarray:
    """log of the nested likelihood (Li et al. 2023, eq. 12) over the paper form Bin(r-1; n_j-1, θ)
    per cell: C(n_{j-1}, r-1) / C(n_j-1, r-1) for r > 1 above the first level (n_{j-1} = n_j / 2),
    else 0. It does not depend on R, so the EM posterior is the same under both forms."""
    levels = sizes / initial_size
    if np.any(sizes < initial_size) or np.any(np.log2(levels) != np.round(np.log2(levels))):
        raise ConfigError(
            f"likelihood='nested' needs sample sizes initial_size·2^j (initial_size="
            f"{initial_size}), got sizes {np.unique(sizes)[:6].tolist()}"
        )
    adjust = (ranks > 1) & (sizes > initial_size)
    prev = sizes / 2.0
    if np.any(adjust & (ranks > prev + 1)):
        raise ConfigError(
            "a target reached level n_j with r_u > n_j/2 + 1, impossible under doubling "
            "(it had r_u = 1 at n_j/2); use likelihood='paper' for non-nested sizes"
        )
    log_ratio = (gammaln(prev + 1) - gammaln(np.maximum(prev - ranks + 2, 1.0))) - (
        gammaln(sizes) - gammaln(sizes - ranks + 1)
    )
    return np.where(adjust, log_ratio, 0.0)


def adaptive_mle(
    sampled_ranks: np.ndarray,
    sample_sizes: np.ndarray,
    n_items: int,
    scheme: str = "binomial",
    n_iter: int = 50,
    init: str | np.ndarray = "uniform",
    tol: float | None = None,
    likelihood: str = "paper",
    initial_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """MLE of P(R) from (r_u, n_u) pairs by EM (Li et al. 2023, eq. 12): one likelihood column
    P(r | R; n) per observed (n, r) cell, weighted by its frequency. likelihood "paper" uses
    Bin(r-1; n-1, θ); "nested" the exact pmf of the doubling process (binomial scheme only).
    Returns (p_hat (N,), log-likelihood trace, iterations, number of cells)."""
    check_choice(likelihood, "likelihood", LIKELIHOODS)
    sizes, ranks, freq = observation_cells(np.asarray(sampled_ranks), np.asarray(sample_sizes))
    columns = _cell_columns(sizes, ranks, n_items, scheme, likelihood, initial_size)
    start = initial_distribution(init, n_items)
    p_hat, trace, iterations = em_mixture(columns, freq, check_iterations(n_iter), start, tol)
    return p_hat, trace, iterations, int(sizes.size)


def adaptive_mle_repeats(
    samples: list[tuple[np.ndarray, np.ndarray]], n_items: int, scheme: str = "binomial",
    n_iter: int = 50, likelihood: str = "paper",
) -> np.ndarray:
    """`adaptive_mle` (uniform start, no early stop) of B independent samples [(ranks, sizes)]
    in one batched EM over the union of their (n, r) cells: p_hat (N, B). Each sample's cells
    outside its own get weight 0, so every column equals its single-sample estimate."""
    check_choice(likelihood, "likelihood", LIKELIHOODS)
    cells = [observation_cells(np.asarray(r), np.asarray(n)) for r, n in samples]
    width = max(int(c[1].max()) for c in cells) + 1
    codes = [c[0] * width + c[1] for c in cells]
    union = np.unique(np.concatenate(codes))
    weights = np.zeros((union.size, len(samples)))
    for b, (code, cell) in enumerate(zip(codes, cells, strict=True)):
        weights[np.searchsorted(union, code), b] = cell[2]
    columns = _cell_columns(union // width, union % width, n_items, scheme, likelihood, None)
    start = np.full((n_items, len(samples)), 1.0 / n_items)
    return em_mixture(columns, weights, check_iterations(n_iter), start)[0]


def _cell_columns(sizes: np.ndarray, ranks: np.ndarray, n_items: int, scheme: str,
                  likelihood: str, initial_size: int | None) -> np.ndarray:
    """Likelihood columns P(r | R; n), (N, J), of the (n, r) cells (Li et al. 2023, eq. 12)."""
    columns = np.empty((n_items, sizes.size))
    for size in np.unique(sizes):
        at_level = np.flatnonzero(sizes == size)
        columns[:, at_level] = conditional_columns(n_items, int(size), ranks[at_level], scheme)
    if likelihood == "nested":
        if scheme != "binomial":
            raise ConfigError("likelihood='nested' is derived for scheme='binomial' only")
        first = int(sizes.min()) if initial_size is None else int(initial_size)
        columns *= np.exp(nested_log_factor(sizes, ranks, first))[None, :]
    return columns


def run_adaptive_mle(name: str, ranks: np.ndarray, n_items: int, sizes: np.ndarray,
                     scheme: str, *, n_iter: int = 50, init: str | np.ndarray = "uniform",
                     tol: float | None = None, likelihood: str = "paper",
                     initial_size: int | None = None) -> EstimateResult:
    p_hat, trace, iterations, n_cells = adaptive_mle(
        ranks, sizes, n_items, scheme, n_iter, init, tol, likelihood, initial_size
    )
    params = {"likelihood": likelihood, "n_cells": n_cells, "mean_sample_size": sizes.mean(),
              **init_params(init, tol)}
    return EstimateResult(name=name, p_hat=p_hat, n_items=n_items, sample_size=sizes,
                          n_targets=len(ranks), scheme=scheme, params=params,
                          iterations=iterations, solver="em", log_likelihood=trace)
