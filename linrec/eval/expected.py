"""Expected sampled metrics given the global rank (Rendle 2019, eq. 19; Li et al. 2020, eq. 6; Li et
al. 2020, eqs. 3–5).

E[M_{n,K}(r) | R] = Σ_{i=1}^{n} P(r = i | R) M_{n,K}(i), with P(r | R) the binomial (with
replacement) or hypergeometric (without) law of `linrec.eval.conditional`; the metric is applied to
the sampled rank with n_pool = n (naive sampled metrics, Rendle 2019, §4). Everything is vectorised
over global ranks: the law is evaluated once per distinct R, in row blocks.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from linrec.errors import ConfigError
from linrec.eval._checks import check_ranks, check_sample_size
from linrec.eval.conditional import check_sizes, log_pmf
from linrec.eval.metrics import curve, rank_gain

#: metrics of a single sampled rank (Rendle 2019, eqs. 9–15); k=None means the unbounded version
SAMPLED_METRICS = ("recall", "hr", "precision", "ap", "rr", "mrr", "ndcg", "auc")
#: float64 entries of P(r|R) materialised per block
_BLOCK_ENTRIES = 1 << 22


def sampled_metric_gains(metric: str, sample_size: int, k: int | None = None) -> np.ndarray:
    """M_{n,K}(i) for sampled ranks i = 1..n (Rendle 2019, eqs. 9–15 with n_pool = n): float64 (n,).
    AUC: (n - i)/(n - 1) (no cut-off). Others: δ(i <= K)·w(i) (precision: /K); k=None -> K = n."""
    if metric not in SAMPLED_METRICS:
        raise ConfigError(f"metric={metric!r} is not supported; choose one of {SAMPLED_METRICS}")
    ranks = np.arange(1, sample_size + 1)
    if metric == "auc":
        if k is not None:
            raise ConfigError(f"metric='auc' has no cut-off; got k={k} (pass k=None)")
        return (sample_size - ranks) / (sample_size - 1.0)
    if k is None:
        k = sample_size
    if int(k) != k or k < 1:
        raise ConfigError(f"k={k} must be a positive integer (or None for the unbounded metric)")
    gains = rank_gain(metric, ranks) * (ranks <= k)
    return gains / k if metric == "precision" else gains


def _conditional_rows(
    global_ranks: np.ndarray, n_items: int, sample_size: int, scheme: str
) -> np.ndarray:
    """P(r | R) for the given distinct global ranks only: float64 (len, n), from
    `conditional.log_pmf`, rows renormalised in log space as `conditional_matrix` does (a few
    rows instead of the whole N x n matrix when few distinct ranks occur)."""
    log_a = log_pmf(global_ranks[:, None].astype(np.float64),
                    np.arange(1, sample_size + 1, dtype=np.float64)[None, :],
                    n_items, sample_size, scheme)
    log_a -= logsumexp(log_a, axis=1, keepdims=True)
    return np.exp(log_a)


def _distinct_expectations(
    global_rank: np.ndarray, n_items: int, sample_size: int, gains: np.ndarray, scheme: str
) -> tuple[np.ndarray, np.ndarray]:
    """(per_distinct, inverse): per_distinct[d] = Σ_i P(r=i | R_d) gains[i, :] for the distinct
    global ranks R_d, float64 (n_distinct, gains.shape[1]); inverse maps each input rank to d."""
    check_sample_size(n_items, sample_size)
    check_sizes(n_items, sample_size, scheme)
    ranks = check_ranks(global_rank, n_items, "global_rank")
    distinct, inverse = np.unique(ranks, return_inverse=True)
    per_distinct = np.empty((len(distinct), gains.shape[1]), dtype=np.float64)
    block = max(1, _BLOCK_ENTRIES // sample_size)
    for lo in range(0, len(distinct), block):
        rows = _conditional_rows(distinct[lo : lo + block], n_items, sample_size, scheme)
        per_distinct[lo : lo + block] = rows @ gains
    return per_distinct, inverse.reshape(ranks.shape)


def _expected_gains(
    global_rank: np.ndarray, n_items: int, sample_size: int, gains: np.ndarray, scheme: str
) -> np.ndarray:
    """Σ_i P(r=i | R) gains[i, :] for each R: float64 (*global_rank.shape, gains.shape[1])."""
    per_distinct, inverse = _distinct_expectations(global_rank, n_items, sample_size, gains,
                                                   scheme)
    return per_distinct[inverse]


def expected_sampled_metric(
    global_rank: np.ndarray | int,
    n_items: int,
    sample_size: int,
    metric: str,
    k: int | None = None,
    scheme: str = "binomial",
) -> np.ndarray:
    """E[M_{n,K}(r) | R] for each global rank R (Rendle 2019, eq. 19): float64, shape of
    global_rank. n_items = N, sample_size = n (target + n-1 sampled items), k = K (None:
    unbounded)."""
    gains = sampled_metric_gains(metric, sample_size, k)[:, None]
    return _expected_gains(np.asarray(global_rank), n_items, sample_size, gains, scheme)[..., 0]


def sampled_metric_variance(
    global_rank: np.ndarray | int,
    n_items: int,
    sample_size: int,
    metric: str,
    k: int | None = None,
    scheme: str = "binomial",
) -> np.ndarray:
    """Var[M_{n,K}(r) | R] = E[M²] - E[M]² for each global rank: float64, shape of global_rank.
    The standard deviation of a mean over M users is sqrt(Σ_u Var_u)/M (independent samples)."""
    gains = sampled_metric_gains(metric, sample_size, k)
    moments = _expected_gains(np.asarray(global_rank), n_items, sample_size,
                              np.stack([gains, gains**2], axis=1), scheme)
    return np.maximum(moments[..., 1] - moments[..., 0] ** 2, 0.0)


def sampled_rank_distribution(
    p_global: np.ndarray, n_items: int, sample_size: int, scheme: str = "binomial"
) -> np.ndarray:
    """Law of the sampled rank implied by a global-rank distribution (Li et al. 2023, §4.2): p =
    Aᵀπ, float64 (n,), from p_global (N,) with p_global[R-1] = P(R) (any real weights)."""
    p_global = np.asarray(p_global, dtype=np.float64)
    if p_global.shape != (n_items,):
        raise ConfigError(
            f"p_global has shape {p_global.shape}; expected (n_items,) = ({n_items},)")
    check_sample_size(n_items, sample_size)
    check_sizes(n_items, sample_size, scheme)
    support = np.flatnonzero(p_global) + 1
    out = np.zeros(sample_size)
    block = max(1, _BLOCK_ENTRIES // sample_size)
    for lo in range(0, len(support), block):
        ranks = support[lo : lo + block]
        out += p_global[ranks - 1] @ _conditional_rows(ranks, n_items, sample_size, scheme)
    return out


def expected_sampled_curve(
    p_global: np.ndarray,
    n_items: int,
    sample_size: int,
    metric: str,
    k_max: int,
    scheme: str = "binomial",
) -> np.ndarray:
    """E[T^S@k] = Σ_R P(R) E[M_{n,k}(r) | R] for k = 1..k_max (Li et al. 2020, eqs. 3–5 for
    metric='recall': E[SHR@k]): float64 (k_max,). k_max <= sample_size."""
    if metric == "auc":
        raise ConfigError("metric='auc' has no cut-off; use expected_sampled_metric(..., 'auc')")
    if int(k_max) != k_max or not 1 <= k_max <= sample_size:
        raise ConfigError(f"k_max={k_max} must be an integer in [1, sample_size={sample_size}]")
    p_sampled = sampled_rank_distribution(p_global, n_items, sample_size, scheme)
    return curve(p_sampled, metric, int(k_max))


def global_rank_distribution(global_ranks: np.ndarray, n_items: int) -> np.ndarray:
    """Empirical P(R) of 1-based global ranks: float64 (n_items,), P[R-1] = #{u: R_u = R}/M."""
    ranks = check_ranks(global_ranks, n_items, "global_ranks").ravel()
    if ranks.size == 0:
        raise ConfigError("global_ranks is empty")
    return np.bincount(ranks - 1, minlength=n_items) / ranks.size


def sampled_hr_moments(
    global_ranks: np.ndarray,
    n_items: int,
    sample_size: int,
    k_max: int | None = None,
    scheme: str = "binomial",
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of SHR@k, k = 1..k_max, over the item samples of the M users (Li et al.
    2020, eqs. 3–5 eqs 4–5): E = (1/M) Σ_u p_u, Var = (1/M²) Σ_u p_u (1 - p_u), p_u = Pr(r_u <= k |
    R_u).
    Returns two float64 (k_max,) arrays (k_max defaults to sample_size)."""
    k_max = sample_size if k_max is None else int(k_max)
    if not 1 <= k_max <= sample_size:
        raise ConfigError(f"k_max={k_max} must be in [1, sample_size={sample_size}]")
    ranks = np.asarray(global_ranks).ravel()
    if ranks.size == 0:
        raise ConfigError("global_ranks is empty")
    cdf_gains = np.triu(np.ones((sample_size, k_max)))  # gains[i, k-1] = δ(i + 1 <= k)
    p_hit, inverse = _distinct_expectations(ranks, n_items, sample_size, cdf_gains, scheme)
    counts = np.bincount(inverse, minlength=len(p_hit)).astype(np.float64)
    n_users = ranks.size
    return counts @ p_hit / n_users, counts @ (p_hit * (1.0 - p_hit)) / n_users**2
