"""User sampling and significance (Li 2023, §2.7; Li et al. 2020, eqs. 3–5): reference values and
independent oracles."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from linrec.errors import ConfigError, DataError
from linrec.eval.significance import (
    bonferroni,
    critical_value,
    difference_ci,
    hoeffding_bound,
    hoeffding_margin,
    hoeffding_sample_size,
    holm,
    mcnemar,
    mean_ci,
    paired_bootstrap_ci,
    paired_bootstrap_cis,
    paired_t,
    proportion_ci,
    sample_size_proportion,
    sample_users,
    sampled_users_targets,
    sign_test,
    two_proportion_z,
    two_sample_t,
    user_sampled_curve,
    user_sampling_estimate,
    wilcoxon_signed_rank,
)
from tests.eval.conftest import signed_rank_null


def test_reference_numbers() -> None:
    """Li 2023, §2.7.1–2.7.2, computed from the formulas: 1067.1, 9604.0 (one model), 2134, 19208
    (two), z = 1.96."""
    assert sample_size_proportion(0.03, z=1.96) == pytest.approx(1067.11, abs=0.01)
    assert sample_size_proportion(0.01, z=1.96) == pytest.approx(9604.0, abs=1e-6)
    assert round(sample_size_proportion(0.03, two_sample=True, z=1.96)) == 2134
    assert round(sample_size_proportion(0.01, two_sample=True, z=1.96)) == 19208
    # with the exact 97.5 % quantile, rounding up gives the familiar values
    assert math.ceil(sample_size_proportion(0.01)) == 9604
    assert math.ceil(sample_size_proportion(0.03)) == 1068
    # Hoeffding: t = 0.02, m = 10K -> 2e^-8 = 6.7e-4; Li et al. 2020, M = 30K, t = 0.01 -> 0.00496
    assert hoeffding_bound(10_000, 0.02) == pytest.approx(6.7e-4, abs=5e-6)
    assert hoeffding_bound(30_000, 0.01) == pytest.approx(0.00496, abs=5e-6)
    # Bonferroni: 10 comparisons at a 5 % family-wise level
    assert critical_value(0.95, n_comparisons=10) == pytest.approx(2.807, abs=5e-4)
    assert critical_value(0.95) == pytest.approx(1.959964, abs=1e-6)


def test_hoeffding_inverses() -> None:
    t = hoeffding_margin(10_000, 0.01)
    assert hoeffding_bound(10_000, t) == pytest.approx(0.01, rel=1e-12)
    m = hoeffding_sample_size(0.02, 0.01)
    assert 2 * math.exp(-2 * m * 0.02**2) == pytest.approx(0.01, rel=1e-12)


def test_proportion_ci_formula_and_coverage() -> None:
    ci = proportion_ci(300, 1000)
    half = stats.norm.ppf(0.975) * math.sqrt(0.3 * 0.7 / 1000)
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((0.3, 0.3 - half, 0.3 + half))
    # finite-population correction: the whole population has no sampling error
    assert proportion_ci(300, 1000, population_size=1000).half_width == 0.0
    fpc = proportion_ci(300, 1000, population_size=5000)
    assert fpc.half_width == pytest.approx(half * math.sqrt(4000 / 4999))
    # coverage of the 95 % interval over 2000 binomial draws (sd of the estimate 0.005)
    rng = np.random.default_rng(0)
    intervals = [proportion_ci(h, 2000) for h in rng.binomial(2000, 0.3, size=2000)]
    assert abs(np.mean([ci.low <= 0.3 <= ci.high for ci in intervals]) - 0.95) < 0.015


def test_mean_ci_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    values = rng.random(50)
    sem = stats.sem(values)
    t_low, t_high = stats.t.interval(0.9, df=49, loc=values.mean(), scale=sem)
    ci = mean_ci(values, 0.9, dist="t")
    assert (ci.low, ci.high) == pytest.approx((t_low, t_high), rel=1e-12)
    n_low, n_high = stats.norm.interval(0.9, loc=values.mean(), scale=sem)
    ci = mean_ci(values, 0.9)
    assert (ci.low, ci.high) == pytest.approx((n_low, n_high), rel=1e-12)


def test_two_proportion_z_and_difference_ci() -> None:
    s1, n1, s2, n2 = 420, 1000, 380, 900
    p1, p2 = s1 / n1, s2 / n2
    pooled = (s1 + s2) / (n1 + n2)
    z = (p1 - p2) / math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    res = two_proportion_z(s1, n1, s2, n2)
    assert res.statistic == pytest.approx(z, rel=1e-12)
    assert res.pvalue == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-12)
    assert two_proportion_z(s1, n1, s2, n2, "less").pvalue == pytest.approx(stats.norm.cdf(z))
    assert two_proportion_z(s1, n1, s2, n2, "greater").pvalue == pytest.approx(stats.norm.sf(z))
    # equal sizes: z = (p1 - p2)/sqrt(2 p q / m) (Li 2023, §2.7.2)
    res = two_proportion_z(520, 1000, 480, 1000)
    assert res.statistic == pytest.approx(0.04 / math.sqrt(2 * 0.25 / 1000), rel=1e-12)
    ci = difference_ci(s1, n1, s2, n2)
    half = stats.norm.ppf(0.975) * math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    assert (ci.low, ci.high) == pytest.approx((p1 - p2 - half, p1 - p2 + half), rel=1e-12)


def test_paired_tests() -> None:
    rng = np.random.default_rng(2)
    x = rng.random(200)
    y = x - 0.02 + 0.1 * rng.normal(size=200)
    res = paired_t(x, y)
    one = stats.ttest_1samp(x - y, 0.0)
    assert (res.statistic, res.pvalue) == pytest.approx((one.statistic, one.pvalue), rel=1e-12)
    assert res.test == "paired_t"
    welch = two_sample_t(x, y)
    assert welch.test == "welch_t"
    se = math.sqrt(x.var(ddof=1) / 200 + y.var(ddof=1) / 200)
    assert welch.statistic == pytest.approx((x.mean() - y.mean()) / se, rel=1e-12)


def test_paired_bootstrap_interval_against_scipy_and_the_normal_interval() -> None:
    rng = np.random.default_rng(5)
    x = rng.random(3000)
    y = x - 0.01 + 0.2 * rng.normal(size=3000)
    ci = paired_bootstrap_ci(x, y, confidence=0.9, n_resamples=4000, seed=1)
    d = x - y
    se = d.std(ddof=1) / math.sqrt(d.size)
    assert ci.estimate == pytest.approx(d.mean(), rel=1e-12)
    assert ci.method == "paired_bootstrap_percentile" and ci.confidence == 0.9
    # scipy's own paired percentile bootstrap (another random stream): the same interval up to
    # the Monte Carlo error of a quantile of 4000 resamples
    ref = stats.bootstrap((x, y), lambda a, b, axis: (a - b).mean(axis), paired=True,
                          vectorized=True, confidence_level=0.9, n_resamples=4000,
                          method="percentile", random_state=np.random.default_rng(9))
    assert ci.low == pytest.approx(ref.confidence_interval.low, abs=0.08 * se)
    assert ci.high == pytest.approx(ref.confidence_interval.high, abs=0.08 * se)
    # 3000 users: the mean is close to normal, so the interval is mean ± z se
    z = stats.norm.ppf(0.95)
    assert (ci.low, ci.high) == pytest.approx((d.mean() - z * se, d.mean() + z * se),
                                              abs=0.08 * se)


def test_paired_bootstrap_interval_is_seeded_and_covers_the_mean() -> None:
    rng = np.random.default_rng(6)
    x, y = rng.random(50), rng.random(50)
    assert paired_bootstrap_ci(x, y, n_resamples=333, seed=4) == \
        paired_bootstrap_ci(x, y, n_resamples=333, seed=4)
    assert paired_bootstrap_ci(x, y, seed=4) != paired_bootstrap_ci(x, y, seed=5)
    same = paired_bootstrap_ci(x, x - 0.25)  # a constant difference has no spread
    assert (same.estimate, same.low, same.high) == pytest.approx((0.25, 0.25, 0.25), abs=1e-12)
    # coverage of a true mean difference of 0.1 over 300 data sets of 200 users
    hits = 0
    for trial in range(300):
        draw = np.random.default_rng(100 + trial)
        a = draw.exponential(1.0, 200)
        ci = paired_bootstrap_ci(a + 0.1 + draw.normal(0, 0.5, 200), a, n_resamples=500,
                                 seed=trial)
        hits += ci.low <= 0.1 <= ci.high
    assert 0.90 <= hits / 300 <= 0.98
    with pytest.raises(ConfigError, match="n_resamples"):
        paired_bootstrap_ci(x, y, n_resamples=0)
    with pytest.raises(DataError):
        paired_bootstrap_ci(x, y[:10])


def test_paired_bootstrap_of_several_metrics_resamples_the_same_users_for_each() -> None:
    """Each column's interval is a plain loop over resamples of users (one seeded draw of n
    users per resample, used for every column), and the one the column gets alone."""
    rng = np.random.default_rng(7)
    x, y = rng.random((60, 3)), rng.random((60, 3))
    x[:, 2] = y[:, 2] + rng.normal(0.2, 0.1, 60)
    cis = paired_bootstrap_cis(x, y, confidence=0.8, n_resamples=450, seed=9)
    draw = np.random.default_rng(9)
    users = np.array([draw.integers(0, 60, 60) for _ in range(450)])
    for column, ci in enumerate(cis):
        diff = x[:, column] - y[:, column]
        means = [diff[u].mean() for u in users]
        assert (ci.estimate, ci.low, ci.high) == pytest.approx(
            (diff.mean(), np.quantile(means, 0.1), np.quantile(means, 0.9)), rel=1e-12)
        assert ci == paired_bootstrap_ci(x[:, column], y[:, column], confidence=0.8,
                                         n_resamples=450, seed=9)
    with pytest.raises(DataError):
        paired_bootstrap_cis(x, y[:, :2])


def test_mcnemar() -> None:
    h1 = np.array([1] * 30 + [0] * 12 + [1] * 40 + [0] * 18, dtype=bool)
    h2 = np.array([0] * 30 + [1] * 12 + [1] * 40 + [0] * 18, dtype=bool)
    b, c = 30, 12
    res = mcnemar(h1, h2)  # b + c = 42 >= 25: chi-square with continuity correction
    stat = (abs(b - c) - 1) ** 2 / (b + c)
    assert res.test == "mcnemar_chi2"
    assert (res.statistic, res.pvalue) == pytest.approx((stat, stats.chi2.sf(stat, 1)))
    exact = mcnemar(h1, h2, exact=True)
    tail = sum(math.comb(b + c, i) for i in range(0, min(b, c) + 1)) / 2 ** (b + c)
    assert exact.pvalue == pytest.approx(min(1.0, 2 * tail), rel=1e-10)
    assert mcnemar(h1, h1).pvalue == 1.0


def test_wilcoxon_exact_by_enumeration() -> None:
    x = np.array([1.3, 2.1, 0.4, 3.3, 2.8, 1.9, 0.7, 2.5])
    y = np.array([1.0, 2.6, 0.1, 2.2, 2.0, 1.6, 0.9, 1.3])
    ranks, w_plus, pvalues = signed_rank_null(x - y)
    res = wilcoxon_signed_rank(x, y)
    assert res.pvalue == pytest.approx(pvalues["two-sided"], rel=1e-12)
    assert res.statistic == pytest.approx(min(w_plus, ranks.sum() - w_plus))


def test_sign_test() -> None:
    x = np.array([3, 4, 5, 6, 7, 8, 9, 1, 2, 2], dtype=float)
    y = np.array([1, 1, 1, 1, 1, 1, 1, 3, 3, 2], dtype=float)
    res = sign_test(x, y)  # 7 wins, 2 losses, 1 tie dropped
    tail = sum(math.comb(9, i) for i in range(0, 3)) / 2**9
    assert res.pvalue == pytest.approx(2 * tail, rel=1e-12)


def _holm_brute(p: np.ndarray, alpha: float) -> np.ndarray:
    order = np.argsort(p)
    reject = np.zeros(len(p), bool)
    for i, idx in enumerate(order):
        if p[idx] <= alpha / (len(p) - i) - 1e-15:
            reject[idx] = True
        else:
            break
    return reject


def test_bonferroni_and_holm() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        p = rng.random(8) ** 3
        adj_b, rej_b = bonferroni(p, 0.05)
        np.testing.assert_allclose(adj_b, np.minimum(1, 8 * p))
        np.testing.assert_array_equal(rej_b, p * 8 < 0.05)
        adj_h, rej_h = holm(p, 0.05)
        np.testing.assert_array_equal(rej_h, _holm_brute(p, 0.05))
        assert np.all(adj_h <= adj_b + 1e-15) and np.all(adj_h >= p)


def test_user_sampling_estimate_and_curve() -> None:
    rng = np.random.default_rng(4)
    values = rng.random(5000) < 0.3
    est = user_sampling_estimate(values, 1000, np.random.default_rng(9))
    chosen = sample_users(5000, 1000, np.random.default_rng(9))
    assert len(np.unique(chosen)) == 1000  # without replacement
    assert est.estimate == pytest.approx(values[chosen].mean())
    sd = values[chosen].std(ddof=1)
    half = stats.norm.ppf(0.975) * sd / math.sqrt(1000) * math.sqrt(4000 / 4999)
    assert est.half_width == pytest.approx(half, rel=1e-12)

    global_ranks = rng.integers(1, 200, size=3000)
    got = user_sampled_curve(global_ranks, 500, "ndcg", 20, np.random.default_rng(5))
    chosen = global_ranks[sample_users(3000, 500, np.random.default_rng(5))]
    want = [np.mean((chosen <= k) / np.log2(chosen + 1)) for k in range(1, 21)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_user_sampling_keeps_every_target_of_a_drawn_user() -> None:
    """With several targets per user (a holdout split), m users are drawn and the curve is over
    all their targets; each user's targets are kept or dropped together."""
    rng = np.random.default_rng(6)
    owners = np.repeat(np.arange(300), rng.integers(1, 6, size=300))  # 1-5 targets per user
    global_ranks = rng.integers(1, 100, size=owners.size)
    chosen = sampled_users_targets(owners, 40, np.random.default_rng(2))
    kept = set(owners[chosen].tolist())
    assert len(kept) == 40
    assert all((owners[i] in kept) == (i in set(chosen.tolist())) for i in range(owners.size))
    got = user_sampled_curve(global_ranks, 40, "recall", 30, np.random.default_rng(2),
                             target_users=owners)
    ranks = [r for r, u in zip(global_ranks, owners, strict=True) if u in kept]
    want = [sum(r <= k for r in ranks) / len(ranks) for k in range(1, 31)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(DataError, match="target_users has 3 entries for"):
        user_sampled_curve(global_ranks, 4, "recall", 5, rng, target_users=owners[:3])


def test_bad_input() -> None:
    with pytest.raises(ConfigError, match="confidence=1.5"):
        critical_value(1.5)
    with pytest.raises(ConfigError, match="margin=0"):
        sample_size_proportion(0.0)
    with pytest.raises(ConfigError, match="population_size=10"):
        proportion_ci(5, 20, population_size=10)
    with pytest.raises(ConfigError, match="alternative='bigger'"):
        paired_t(np.ones(3), np.zeros(3), "bigger")
    with pytest.raises(DataError, match="same length"):
        paired_t(np.ones(3), np.zeros(4))
    with pytest.raises(ConfigError, match="pvalues"):
        holm(np.array([0.5, 1.5]))
    with pytest.raises(ConfigError, match=r"n_sampled=20 .*\[1, n_users=10\]"):
        sample_users(10, 20, np.random.default_rng(0))
    with pytest.raises(DataError, match="at least 2"):
        mean_ci(np.array([1.0]))
