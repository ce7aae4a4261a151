"""The Krichene–Rendle corrections of sampled metrics (Rendle 2019, §4; Krichene & Rendle 2020): the
naive reading, the unbiased-rank correction, least squares (LS) and constrained least squares
(CLS). Each returns the implied global-rank distribution P̂ (length N). BV is in bv.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from linrec.errors import ConfigError
from linrec.eval.estimators._linalg import ConditionalOp
from linrec.eval.estimators.priors import prior_of
from linrec.eval.estimators.result import EstimateResult
from linrec.eval.metrics import CURVE_METRICS, rank_gain
from linrec.params import check_choice

if TYPE_CHECKING:
    from linrec.eval.estimators._context import EstimatorInput


def naive(histogram: np.ndarray, n_items: int) -> np.ndarray:
    """The sampled rank read as the global rank (Rendle 2019, §4; what papers report): P̂(R) = P~(R)
    for R <= n, 0 beyond."""
    if len(histogram) > n_items:
        raise ConfigError(
            f"naive needs sample_size <= n_items, got sample_size={len(histogram)}, "
            f"n_items={n_items}"
        )
    p_hat = np.zeros(n_items)
    p_hat[: len(histogram)] = histogram
    return p_hat


def unbiased_rank(histogram: np.ndarray, n_items: int) -> np.ndarray:
    """Unbiased-rank correction (Krichene & Rendle 2020): the mass P~(r) moves to R̂(r) = 1 +
    (r-1)(N-1)/(n-1). R̂ is generally not an integer; the mass sits at ⌈R̂ − 1e-9⌉, which makes
    Recall@K exact (R̂ <= K ⟺ ⌈R̂⌉ <= K for integer K) and evaluates NDCG/AP gains at ⌈R̂⌉."""
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
    """Minimal-bias least squares (Krichene & Rendle 2020): x = (√D A)⁺ √D b, the minimum-norm
    solution that np.linalg.lstsq returns, by a thin SVD √D A = U S Vᵀ with singular values below
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
    """Constrained least squares (Krichene & Rendle 2020): for each K = 1..k_max, x^(K) minimises
    Σ_R P(R)(Σ_r P(r|R)x_r − F_K(R))² subject to x_1 >= ... >= x_n (and x >= 0 if nonnegative).
    CLS is not linear in b, so P̂ is only defined for this metric: P̂(K) = (T̂@K − T̂@(K−1))/w(K)
    for K <= k_max and 0 beyond; curve(P̂, metric, k_max) then returns the CLS estimates.

    Solved as bound-constrained least squares in the increments d (x_r = Σ_{j>=r} d_j, d_j >= 0
    for j < n) after one QR of √D A, so every K costs an n x n problem."""
    check_choice(metric, "metric", [m for m in CURVE_METRICS if m != "precision"],
                 hint="cls corrects every curve metric but precision")
    n_items, sample_size = cond.shape
    k_max = min(int(k_max), n_items)
    from scipy.optimize import lsq_linear  # 0.27 s to import: only when CLS runs

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


# --- runners (linrec.eval.estimators.registry) ---


def run_naive(run: EstimatorInput) -> EstimateResult:
    return run.result(naive(run.histogram, run.n_items))


def run_unbiased_rank(run: EstimatorInput) -> EstimateResult:
    return run.result(unbiased_rank(run.histogram, run.n_items))


def run_ls(run: EstimatorInput, *, prior: str | np.ndarray = "uniform",
           rcond: float | None = None, prior_runs=None, prior_params=None) -> EstimateResult:
    prior_p, label = prior_of(run, prior, "uniform", prior_runs, prior_params)
    p_hat, solver = ls(run.cond, run.histogram, prior_p, rcond)
    return run.result(p_hat, prior=label, params={"rcond": rcond}, solver=solver)


def run_cls(run: EstimatorInput, *, metric: str = "recall", k_max: int = 50,
            nonnegative: bool = False, prior: str | np.ndarray = "uniform", prior_runs=None,
            prior_params=None) -> EstimateResult:
    prior_p, label = prior_of(run, prior, "uniform", prior_runs, prior_params)
    p_hat = cls(run.cond, run.histogram, prior_p, metric, k_max, nonnegative)
    params = {"metric": metric, "k_max": k_max, "nonnegative": nonnegative}
    return run.result(p_hat, prior=label, params=params, solver="qr+bvls")
