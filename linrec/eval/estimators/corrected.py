"""Corrected sampled metrics that need no EM (spec/evaluation.md §1.3, §5): the naive reading,
the unbiased-rank correction, least squares (LS), constrained least squares (CLS) and the
bias-variance estimator (BV). Each returns the implied global-rank distribution P̂ (length N)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import lsq_linear

from linrec.errors import ConfigError
from linrec.eval.estimators.base import (
    ConditionalOp,
    implied_distribution,
    weighted_gram,
)
from linrec.eval.metrics import CURVE_METRICS, rank_gain


def naive(histogram: np.ndarray, n_items: int) -> np.ndarray:
    """The sampled rank read as the global rank (spec §1.3; what papers report): P̂(R) = P~(R) for
    R <= n, 0 beyond."""
    if len(histogram) > n_items:
        raise ConfigError(
            f"naive needs sample_size <= n_items, got sample_size={len(histogram)}, "
            f"n_items={n_items}"
        )
    p_hat = np.zeros(n_items)
    p_hat[: len(histogram)] = histogram
    return p_hat


def unbiased_rank(histogram: np.ndarray, n_items: int) -> np.ndarray:
    """Unbiased-rank correction (spec §5.2): the mass P~(r) moves to R̂(r) = 1 + (r-1)(N-1)/(n-1).
    R̂ is generally not an integer; the mass sits at ⌈R̂ − 1e-9⌉, which makes Recall@K exact
    (R̂ <= K ⟺ ⌈R̂⌉ <= K for integer K) and evaluates NDCG/AP gains at ⌈R̂⌉."""
    sample_size = len(histogram)
    ranks = np.arange(1, sample_size + 1, dtype=np.float64)
    if sample_size == 1:
        positions = np.ones(1, dtype=np.int64)
    else:
        positions = np.ceil(1.0 + (ranks - 1.0) * (n_items - 1) / (sample_size - 1) - 1e-9)
    positions = np.clip(positions.astype(np.int64), 1, n_items)
    return np.bincount(positions - 1, weights=histogram, minlength=n_items)


def ls(
    cond: ConditionalOp, histogram: np.ndarray, prior: np.ndarray, rcond: float | None = None
) -> tuple[np.ndarray, str]:
    """Minimal-bias least squares (spec §5.3): x = (√D A)⁺ √D b, the minimum-norm solution that
    np.linalg.lstsq returns, by a thin SVD √D A = U S Vᵀ with singular values below
    rcond·s_max dropped (rcond None: eps·max(N, n), numpy's default); AᵀDA is never inverted.
    Implied P̂ = √D U S⁻¹ Vᵀ P~."""
    dense = cond.toarray() if hasattr(cond, "toarray") else np.asarray(cond)
    sqrt_prior = np.sqrt(prior)
    u, s, vt = np.linalg.svd(sqrt_prior[:, None] * dense, full_matrices=False)
    cutoff = (np.finfo(np.float64).eps * max(dense.shape) if rcond is None else rcond) * s[0]
    keep = s > cutoff
    coef = (vt[keep] @ histogram) / s[keep]
    return sqrt_prior * (u[:, keep] @ coef), f"svd(rank={int(keep.sum())})"


def cls(
    cond: ConditionalOp, histogram: np.ndarray, prior: np.ndarray, metric: str, k_max: int,
    nonnegative: bool = False,
) -> np.ndarray:
    """Constrained least squares (spec §5.4): for each K = 1..k_max, x^(K) minimises
    Σ_R P(R)(Σ_r P(r|R)x_r − F_K(R))² subject to x_1 >= ... >= x_n (and x >= 0 if nonnegative).
    CLS is not linear in b, so P̂ is only defined for this metric: P̂(K) = (T̂@K − T̂@(K−1))/w(K) for
    K <= k_max and 0 beyond; curve(P̂, metric, k_max) then returns the CLS estimates.

    Solved as bound-constrained least squares in the increments d (x_r = Σ_{j>=r} d_j, d_j >= 0
    for j < n) after one QR of √D A, so every K costs an n x n problem."""
    if metric not in CURVE_METRICS or metric == "precision":
        raise ConfigError(f"metric={metric!r} for cls must be one of recall, hr, ndcg, ap")
    n_items, sample_size = cond.shape
    k_max = min(int(k_max), n_items)
    dense = cond.toarray() if hasattr(cond, "toarray") else np.asarray(cond)
    sqrt_prior = np.sqrt(prior)
    q, r_factor = np.linalg.qr(sqrt_prior[:, None] * dense)
    # x = U d with U upper triangular ones: x_r = Σ_{j>=r} d_j
    design = r_factor @ np.triu(np.ones((sample_size, sample_size)))
    lower = np.zeros(sample_size)
    lower[-1] = 0.0 if nonnegative else -np.inf
    gains = rank_gain(metric, np.arange(1, k_max + 1))
    # Qᵀ √D b for b = F(R) δ(R <= K): a cumulative sum over R of Q rows
    rhs_all = np.cumsum(q[:k_max] * (sqrt_prior[:k_max] * gains)[:, None], axis=0)
    estimates = np.empty(k_max)
    for k in range(k_max):
        d = lsq_linear(design, rhs_all[k], bounds=(lower, np.inf), method="bvls").x
        estimates[k] = histogram @ np.cumsum(d[::-1])[::-1]
    p_hat = np.zeros(n_items)
    p_hat[:k_max] = np.diff(estimates, prepend=0.0) / gains
    return p_hat


def check_gamma(gamma: float) -> float:
    if not 0.0 < gamma <= 1.0:
        raise ConfigError(f"gamma={gamma} must be in (0, 1] (spec §5.5; 0.01 in the papers)")
    return float(gamma)


def bv(
    cond: ConditionalOp, histogram: np.ndarray, prior: np.ndarray, gamma: float = 0.01
) -> tuple[np.ndarray, str]:
    """Bias-variance estimator (spec §5.5, corrected weighting Ã = √P(R)·P(r|R)):
    x = ((1−γ)AᵀDA + γ diag(Aᵀπ))⁻¹ AᵀD b, so P̂ = D A H⁻¹ P~. Returns (p_hat, solve method)."""
    gamma = check_gamma(gamma)
    system = (1.0 - gamma) * weighted_gram(cond, prior)
    system[np.diag_indices_from(system)] += gamma * np.asarray(prior @ cond).ravel()
    return implied_distribution(cond, prior, system, histogram)


def bv_objective(
    x: np.ndarray, cond: np.ndarray, prior: np.ndarray, target: np.ndarray, gamma: float
) -> float:
    """L_BV(x) = Σ_R P(R)(E[x|R] − F(R))² + γ Σ_R P(R) Var[x|R] (spec §5.5); for tests."""
    mean = cond @ x
    var = cond @ (x * x) - mean * mean
    return float(prior @ (mean - target) ** 2 + gamma * prior @ var)
