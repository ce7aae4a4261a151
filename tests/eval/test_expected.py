"""Expected sampled metrics (Rendle 2019, eq. 19; Li et al. 2020, eq. 6; Li et al.
2020, §2): closed forms, Monte Carlo and oracles."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from linrec.errors import ConfigError
from linrec.eval.expected import (
    SAMPLED_METRICS,
    expected_sampled_curve,
    expected_sampled_metric,
    global_rank_distribution,
    sampled_hr_moments,
    sampled_metric_gains,
    sampled_metric_variance,
    sampled_rank_distribution,
)
from linrec.eval.simulate import simulate_sampled_ranks

SCHEMES = ("binomial", "hypergeometric")


def _scipy_pmf(global_rank: int, n_items: int, sample_size: int, scheme: str) -> np.ndarray:
    """P(r = 1..n | R) straight from scipy (independent of linrec.eval.conditional)."""
    x = np.arange(sample_size)
    if scheme == "binomial":
        return stats.binom.pmf(x, sample_size - 1, (global_rank - 1) / (n_items - 1))
    return stats.hypergeom.pmf(x, n_items - 1, global_rank - 1, sample_size - 1)


def _brute_force(global_rank: int, n_items: int, sample_size: int, metric: str, k: int | None,
                 scheme: str) -> float:
    r = np.arange(1, sample_size + 1, dtype=np.float64)
    if metric == "auc":
        gain = (sample_size - r) / (sample_size - 1)
    else:
        cut = sample_size if k is None else k
        ones = np.ones_like(r)
        base = {"recall": ones, "hr": ones, "precision": ones / cut, "ap": 1 / r, "rr": 1 / r,
                "mrr": 1 / r, "ndcg": 1 / np.log2(r + 1)}[metric]
        gain = base * (r <= cut)
    return float(_scipy_pmf(global_rank, n_items, sample_size, scheme) @ gain)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("metric", SAMPLED_METRICS)
def test_matches_scipy_brute_force(metric: str, scheme: str) -> None:
    n_items, sample_size = 500, 40
    ranks = np.array([1, 2, 3, 17, 250, 499, 500])
    k = None if metric == "auc" else 7
    got = expected_sampled_metric(ranks, n_items, sample_size, metric, k, scheme)
    want = [_brute_force(r, n_items, sample_size, metric, k, scheme) for r in ranks]
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)


def test_shape_is_kept_and_scalar_works() -> None:
    ranks = np.array([[1, 5], [9, 2]])
    got = expected_sampled_metric(ranks, 50, 10, "ndcg", 5)
    assert got.shape == (2, 2)
    assert got[1, 0] == pytest.approx(float(expected_sampled_metric(9, 50, 10, "ndcg", 5)))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_auc_unbiased(scheme: str) -> None:
    """E[AUC_n(r)] = AUC_N(R) = (N - R)/(N - 1), exactly (Rendle 2019, eq. 19)."""
    rng = np.random.default_rng(4)
    for _ in range(20):
        n_items = int(rng.integers(5, 3000))
        sample_size = int(rng.integers(2, min(n_items - 1, 400) + 1))
        ranks = rng.integers(1, n_items + 1, size=50)
        got = expected_sampled_metric(ranks, n_items, sample_size, "auc", scheme=scheme)
        exact = (n_items - ranks) / (n_items - 1)
        assert np.max(np.abs(got - exact)) < 1e-12, (n_items, sample_size)


def test_ap_closed_form() -> None:
    """E[1/r] = [1 - (1-θ)^(m+1)] / [θ (m+1)], θ = (R-1)/(N-1) (Rendle 2019, eq. 19, with (N-1))."""
    rng = np.random.default_rng(5)
    for _ in range(20):
        n_items = int(rng.integers(10, 20000))
        sample_size = int(rng.integers(2, min(n_items - 1, 500) + 1))
        m = sample_size - 1
        ranks = rng.integers(2, n_items + 1, size=30)
        theta = (ranks - 1) / (n_items - 1)
        closed = (1 - (1 - theta) ** (m + 1)) / (theta * (m + 1))
        got = expected_sampled_metric(ranks, n_items, sample_size, "ap")
        assert np.max(np.abs(got - closed)) < 1e-12
    assert expected_sampled_metric(1, 100, 10, "ap") == pytest.approx(1.0, abs=1e-15)
    # Rendle 2019, eq. 19 check: N = 10000, m = 99, R = 100 -> 0.636592 (the (N+1) typo gives
    # 0.636719)
    assert abs(float(expected_sampled_metric(100, 10000, 100, "ap")) - 0.636592) < 5e-7


@pytest.mark.parametrize("scheme", SCHEMES)
def test_recall_closed_form(scheme: str) -> None:
    """E[Recall@K] = Pr(r <= K) = BinomCDF(K-1; m, θ) (hypergeometric CDF without replacement)."""
    n_items, sample_size, k = 3706, 100, 10
    ranks = np.arange(1, n_items + 1, 37)
    got = expected_sampled_metric(ranks, n_items, sample_size, "recall", k, scheme)
    if scheme == "binomial":
        want = stats.binom.cdf(k - 1, sample_size - 1, (ranks - 1) / (n_items - 1))
    else:
        want = stats.hypergeom.cdf(k - 1, n_items - 1, ranks - 1, sample_size - 1)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)
    prec = expected_sampled_metric(ranks, n_items, sample_size, "precision", k, scheme)
    np.testing.assert_allclose(prec, got / k, rtol=1e-14)


@pytest.mark.parametrize("metric", ["auc", "ap", "ndcg", "recall", "precision"])
def test_single_sample_is_linear_in_rank(metric: str) -> None:
    """m = 1: E[M(r)] = R (M(2) - M(1))/(N-1) + (N M(1) - M(2))/(N-1), linear (Rendle 2019, eq.
    19)."""
    n_items = 1000
    ranks = np.arange(1, n_items + 1)
    k = None if metric == "auc" else 1
    got = expected_sampled_metric(ranks, n_items, 2, metric, k)
    gains = sampled_metric_gains(metric, 2, k)
    want = (ranks * (gains[1] - gains[0]) + n_items * gains[0] - gains[1]) / (n_items - 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    fit = stats.linregress(ranks, got)
    assert fit.rvalue**2 >= 1 - 1e-12
    # Recall@k with k >= 2 is constant (uninformative) at m = 1
    if metric == "recall":
        np.testing.assert_allclose(expected_sampled_metric(ranks, n_items, 2, "recall", 2), 1.0)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_expectation_and_variance_match_monte_carlo(scheme: str) -> None:
    """Rendle 2019: expected_sampled_metric within 3 standard errors of Monte Carlo (both laws)."""
    rng = np.random.default_rng(16)
    n_items, sample_size, runs = 2000, 50, 20000
    for rank in (1, 7, 40, 300, 1999):
        draws = simulate_sampled_ranks(np.full(runs, rank), n_items, sample_size,
                                       replace=scheme == "binomial", rng=rng)
        for metric, k in (("ndcg", 10), ("ap", None), ("recall", 5), ("auc", None)):
            values = sampled_metric_gains(metric, sample_size, k)[draws - 1]
            mean = float(expected_sampled_metric(rank, n_items, sample_size, metric, k, scheme))
            var = float(sampled_metric_variance(rank, n_items, sample_size, metric, k, scheme))
            assert abs(values.mean() - mean) <= 3 * np.sqrt(var / runs) + 1e-12
            # gains lie in [0, 1]: 4th central moment <= var, so sd(sample var) <= sqrt(var/runs)
            assert abs(values.var() - var) <= 5 * np.sqrt(var / runs) + 1e-12


def test_curve_and_sampled_rank_distribution() -> None:
    rng = np.random.default_rng(8)
    n_items, sample_size = 300, 25
    ranks = rng.integers(1, n_items + 1, size=400)
    p_global = global_rank_distribution(ranks, n_items)
    assert p_global.sum() == pytest.approx(1.0)
    p_sampled = sampled_rank_distribution(p_global, n_items, sample_size)
    want = sum(p_global[r - 1] * _scipy_pmf(r, n_items, sample_size, "binomial")
               for r in range(1, n_items + 1))
    np.testing.assert_allclose(p_sampled, want, rtol=1e-11, atol=1e-15)
    for metric in ("recall", "ndcg", "ap", "precision"):
        got = expected_sampled_curve(p_global, n_items, sample_size, metric, 20)
        per_k = [expected_sampled_metric(ranks, n_items, sample_size, metric, k).mean()
                 for k in range(1, 21)]
        np.testing.assert_allclose(got, per_k, rtol=1e-12, atol=1e-15)


def test_sampled_hr_moments() -> None:
    """Li et al. 2020, eqs. 3–5: E[SHR@k] = mean_u p_u, Var = Σ_u p_u(1 - p_u)/M², p_u =
    BinomCDF(k-1; n-1, θ_u)."""
    rng = np.random.default_rng(9)
    n_items, sample_size = 1000, 30
    ranks = rng.integers(1, n_items + 1, size=700)
    mean, var = sampled_hr_moments(ranks, n_items, sample_size, k_max=12)
    k = np.arange(1, 13)
    p = stats.binom.cdf(k[None, :] - 1, sample_size - 1, ((ranks - 1) / (n_items - 1))[:, None])
    np.testing.assert_allclose(mean, p.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(var, (p * (1 - p)).sum(axis=0) / len(ranks) ** 2, rtol=1e-9)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_sampling_theorem(scheme: str) -> None:
    """Thm 2.1: HR_1@K >= HR_2@K for all K => E[SHR_1@k] >= E[SHR_2@k] for all k (1000 pairs)."""
    rng = np.random.default_rng(81)
    violations = 0
    for n_items, sample_size in ((60, 8), (400, 30)):
        all_ranks = np.arange(1, n_items + 1)
        # hit[R-1, k-1] = Pr(r <= k | R) from the library, k = 1..n
        hit = np.stack([expected_sampled_metric(all_ranks, n_items, sample_size, "recall", k,
                                                scheme) for k in range(1, sample_size + 1)],
                       axis=1)
        for _ in range(500):
            n_users = int(rng.integers(1, 50))
            worse = rng.integers(1, n_items + 1, size=n_users)
            # improving every user's rank gives a dominating HR curve
            better = np.maximum(1, worse - rng.integers(0, n_items, size=n_users)
                                * (rng.random(n_users) < 0.5))
            w1 = np.bincount(better - 1, minlength=n_items) / n_users
            w2 = np.bincount(worse - 1, minlength=n_items) / n_users
            assert np.all(np.cumsum(w1) >= np.cumsum(w2) - 1e-15)
            violations += int(np.any(w1 @ hit < w2 @ hit - 1e-12))
    assert violations == 0


def test_pr_hit_is_non_increasing_in_rank() -> None:
    """The proof's key property: Pr(r <= k | R) is non-increasing in R (both laws)."""
    ranks = np.arange(1, 201)
    for scheme in SCHEMES:
        for k in (1, 3, 10):
            hit = expected_sampled_metric(ranks, 200, 15, "recall", k, scheme)
            assert np.all(np.diff(hit) <= 1e-15)


def test_bad_input() -> None:
    with pytest.raises(ConfigError, match=r"sample_size=100 is out of range; allowed: "
                                          r"an integer >= 2 and <= 99"):
        expected_sampled_metric(5, 100, 100, "ap")
    with pytest.raises(ConfigError, match=r"global_rank\[1\]=101 .*\[1, 100\]"):
        expected_sampled_metric([3, 101], 100, 10, "ap")
    with pytest.raises(ConfigError, match=r"global_rank\[0\]=0"):
        expected_sampled_metric([0], 100, 10, "ap")
    with pytest.raises(ConfigError, match="integers"):
        expected_sampled_metric([2.5], 100, 10, "ap")
    with pytest.raises(ConfigError, match="scheme='poisson'"):
        expected_sampled_metric(5, 100, 10, "ap", scheme="poisson")
    with pytest.raises(ConfigError, match="metric='mse'"):
        expected_sampled_metric(5, 100, 10, "mse")
    with pytest.raises(ConfigError, match="k=0"):
        expected_sampled_metric(5, 100, 10, "recall", 0)
    with pytest.raises(ConfigError, match="auc"):
        expected_sampled_metric(5, 100, 10, "auc", 5)
    with pytest.raises(ConfigError, match="k_max=11"):
        expected_sampled_curve(np.full(100, 0.01), 100, 10, "recall", 11)
