"""What every test and interval of linrec.eval.significance records, field by field (the test's
name, statistic, p-value, alternative and details; an interval's estimate, bounds, confidence
and method), against values written out here from the textbook formulas or scipy's own
distributions; and the edges of what each function accepts."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from linrec.errors import ConfigError, DataError
from linrec.eval import significance as sig
from tests.eval.conftest import fair_binomial_pvalue, signed_rank_null, tail_pvalues

ALTERNATIVES = ("two-sided", "less", "greater")
X = np.array([0.31, 0.52, 0.12, 0.77, 0.45, 0.61, 0.08, 0.90, 0.33, 0.58])
Y = np.array([0.25, 0.55, 0.02, 0.60, 0.47, 0.40, 0.11, 0.70, 0.30, 0.44])


def record(result) -> dict:
    return dataclasses.asdict(result)


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_the_paired_tests_record_their_name_statistic_pvalue_and_alternative(alternative):
    diff = X - Y
    t = diff.mean() / (diff.std(ddof=1) / math.sqrt(diff.size))
    t_p = tail_pvalues(stats.t(diff.size - 1), t)
    got = record(sig.paired_t(X, Y, alternative))
    assert (got["test"], got["alternative"], got["details"]) == ("paired_t", alternative, {})
    assert got["statistic"] == pytest.approx(t, rel=1e-12)
    assert got["pvalue"] == pytest.approx(t_p[alternative], rel=1e-9)

    wins, losses = int(np.sum(X > Y)), int(np.sum(X < Y))
    assert record(sig.sign_test(X, Y, alternative)) == {
        "test": "sign", "statistic": float(wins),
        "pvalue": pytest.approx(fair_binomial_pvalue(wins, wins + losses, alternative), rel=1e-9),
        "alternative": alternative, "details": {"wins": float(wins), "losses": float(losses)}}

    # Wilcoxon: W+ is the sum of the ranks of the positive differences (no ties, no zeros
    # here), its exact null law enumerated over the 2^10 sign patterns
    ranks, w_plus, p = signed_rank_null(diff)
    got = record(sig.wilcoxon_signed_rank(X, Y, alternative))
    statistic = min(w_plus, ranks.sum() - w_plus) if alternative == "two-sided" else w_plus
    assert got == {"test": "wilcoxon", "statistic": statistic,
                   "pvalue": pytest.approx(p[alternative], rel=1e-9),
                   "alternative": alternative, "details": {}}


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_equal_samples_give_the_null_record(alternative):
    """Without a single difference there is nothing to test: the null record, without the
    warnings scipy's Wilcoxon would raise on its all-zero differences."""
    for test in (sig.wilcoxon_signed_rank, sig.sign_test):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = test(X, X, alternative)
        assert record(result) == {
            "test": {"wilcoxon_signed_rank": "wilcoxon", "sign_test": "sign"}[test.__name__],
            "statistic": 0.0, "pvalue": 1.0, "alternative": alternative, "details": {}}
    assert record(sig.two_proportion_z(5, 5, 8, 8, alternative)) == {
        "test": "two_proportion_z", "statistic": 0.0, "pvalue": 1.0,
        "alternative": alternative, "details": {"diff": 0.0}}


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_two_proportion_z_and_the_unpaired_t_record_everything(alternative):
    s1, n1, s2, n2 = 30, 80, 18, 70
    p1, p2 = s1 / n1, s2 / n2
    pooled = (s1 + s2) / (n1 + n2)
    z = (p1 - p2) / math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    z_p = tail_pvalues(stats.norm(), z)[alternative]
    assert record(sig.two_proportion_z(s1, n1, s2, n2, alternative)) == {
        "test": "two_proportion_z", "statistic": pytest.approx(z, rel=1e-12),
        "pvalue": pytest.approx(z_p, rel=1e-9), "alternative": alternative,
        "details": {"diff": pytest.approx(p1 - p2, rel=1e-15)}}

    for equal_var, name in ((False, "welch_t"), (True, "student_t")):
        vx, vy, m, n = X.var(ddof=1), Y.var(ddof=1), X.size, Y.size
        if equal_var:
            se2 = ((m - 1) * vx + (n - 1) * vy) / (m + n - 2) * (1 / m + 1 / n)
            df = m + n - 2
        else:
            se2 = vx / m + vy / n
            df = se2**2 / ((vx / m) ** 2 / (m - 1) + (vy / n) ** 2 / (n - 1))
        t = (X.mean() - Y.mean()) / math.sqrt(se2)
        t_p = tail_pvalues(stats.t(df), t)[alternative]
        assert record(sig.two_sample_t(X, Y, alternative, equal_var)) == {
            "test": name, "statistic": pytest.approx(t, rel=1e-12),
            "pvalue": pytest.approx(t_p, rel=1e-9), "alternative": alternative, "details": {}}


@pytest.mark.parametrize("b, c, test", [(0, 0, "mcnemar_exact"), (15, 9, "mcnemar_exact"),
                                        (15, 10, "mcnemar_chi2"), (40, 2, "mcnemar_chi2"),
                                        (5, 5, "mcnemar_exact"), (20, 20, "mcnemar_chi2")])
def test_mcnemar_records_its_form_counts_and_pvalue(b, c, test):
    """Exact binomial below b + c = 25 (24 still exact), the continuity-corrected chi-square
    from 25 on, and b + c = 0 the null record."""
    hits1 = np.array([1] * b + [0] * c + [1] * 7 + [0] * 5, dtype=bool)
    hits2 = np.array([0] * b + [1] * c + [1] * 7 + [0] * 5, dtype=bool)
    if b + c == 0:
        statistic, pvalue = 0.0, 1.0
    elif test == "mcnemar_exact":
        statistic, pvalue = float(b), fair_binomial_pvalue(b, b + c, "two-sided")
    else:
        statistic = (abs(b - c) - 1) ** 2 / (b + c)
        pvalue = stats.chi2.sf(statistic, 1)
    assert record(sig.mcnemar(hits1, hits2)) == {
        "test": test, "statistic": pytest.approx(statistic, rel=1e-12),
        "pvalue": pytest.approx(pvalue, rel=1e-9), "alternative": "two-sided",
        "details": {"b": float(b), "c": float(c)}}


def test_the_intervals_record_estimate_bounds_confidence_and_method():
    z90 = stats.norm.ppf(0.95)
    half = z90 * math.sqrt(0.3 * 0.7 / 50) * math.sqrt((200 - 50) / 199)
    assert record(sig.proportion_ci(15, 50, 0.9, population_size=200)) == {
        "estimate": 0.3, "low": pytest.approx(0.3 - half, rel=1e-12),
        "high": pytest.approx(0.3 + half, rel=1e-12), "confidence": 0.9, "method": "wald"}
    for dist, q in (("normal", stats.norm.ppf(0.975)), ("t", stats.t.ppf(0.975, X.size - 1))):
        half = q * X.std(ddof=1) / math.sqrt(X.size)
        assert record(sig.mean_ci(X, dist=dist)) == {
            "estimate": pytest.approx(X.mean(), rel=1e-15),
            "low": pytest.approx(X.mean() - half, rel=1e-12),
            "high": pytest.approx(X.mean() + half, rel=1e-12), "confidence": 0.95,
            "method": dist}
    # three comparisons: the Bonferroni z at 1 − 0.05/6
    z = stats.norm.ppf(1 - 0.05 / 6)
    half = z * math.sqrt(0.4 * 0.6 / 100 + 0.25 * 0.75 / 80)
    assert record(sig.difference_ci(40, 100, 20, 80, n_comparisons=3)) == {
        "estimate": pytest.approx(0.15, rel=1e-14),
        "low": pytest.approx(0.15 - half, rel=1e-12),
        "high": pytest.approx(0.15 + half, rel=1e-12), "confidence": 0.95,
        "method": "wald_difference"}
    assert sig.critical_value(0.9, two_sided=False) == pytest.approx(stats.norm.ppf(0.9),
                                                                      rel=1e-14)
    assert sig.sample_size_proportion(0.05, n_comparisons=4) == pytest.approx(
        stats.norm.ppf(1 - 0.05 / 8) ** 2 * 0.25 / 0.05**2, rel=1e-12)


def test_the_defaults():
    """Confidence 0.95, alpha 0.05 (a p-value equal to alpha is not rejected), 2 000
    resamples from seed 0."""
    assert sig.critical_value() == pytest.approx(stats.norm.ppf(0.975), rel=1e-14)
    assert sig.mean_ci(X).confidence == 0.95
    assert sig.TestResult("t", 0.0, 0.05, "two-sided").reject() is False
    assert sig.TestResult("t", 0.0, 0.5, "two-sided").reject(0.6) is True
    for correct in (sig.bonferroni, sig.holm):
        assert correct([0.05, 0.9])[1].tolist() == [False, False]
        assert correct([0.02, 0.9], alpha=0.04)[1].tolist() == [False, False]
    assert sig.paired_bootstrap_ci(X, Y) == sig.paired_bootstrap_ci(X, Y, 0.95, 2000, 0)
    assert sig.paired_bootstrap_cis(X[:, None], Y[:, None]) == \
        sig.paired_bootstrap_cis(X[:, None], Y[:, None], 0.95, 2000, 0)


def test_hit_lists_as_booleans_give_the_numbers_of_zeros_and_ones():
    """Per-user hits (Recall@K of one held-out item) may come as bool arrays: the paired and
    unpaired tests, the bootstrap and the user-sampling estimate read them as 0 / 1."""
    rng = np.random.default_rng(3)
    hx, hy = rng.random(40) < 0.5, rng.random(40) < 0.4
    fx, fy = hx.astype(float), hy.astype(float)
    for test in (sig.paired_t, sig.wilcoxon_signed_rank, sig.sign_test, sig.two_sample_t):
        assert record(test(hx, hy)) == record(test(fx, fy)), test.__name__
    assert sig.paired_bootstrap_ci(hx, hy) == sig.paired_bootstrap_ci(fx, fy)
    assert sig.paired_bootstrap_cis(np.c_[hx, hy], np.c_[hy, hx]) == \
        sig.paired_bootstrap_cis(np.c_[fx, fy], np.c_[fy, fx])
    assert sig.mean_ci(hx) == sig.mean_ci(fx)
    assert sig.user_sampling_estimate(hx, 20, np.random.default_rng(1)) == \
        sig.user_sampling_estimate(fx, 20, np.random.default_rng(1))
    np.testing.assert_array_equal(sig.ranks_curve(np.array([1.0, 3.0, 7.0]), "recall", 5),
                                  [1 / 3, 1 / 3, 2 / 3, 2 / 3, 2 / 3])


def test_user_sampling_passes_its_confidence_and_quantile_on():
    values = np.random.default_rng(0).random(300)
    chosen = sig.sample_users(300, 40, np.random.default_rng(5))
    assert sig.user_sampling_estimate(values, 40, np.random.default_rng(5), 0.8, "t") == \
        sig.mean_ci(values[chosen], 0.8, population_size=300, dist="t")


def test_the_smallest_inputs_each_function_accepts():
    assert sig.proportion_ci(0, 1).estimate == 0.0 and sig.proportion_ci(1, 1).estimate == 1.0
    assert sig.proportion_ci(1, 2, population_size=2).half_width == 0.0
    assert sig.mean_ci([0.0, 1.0], population_size=2).half_width == 0.0
    assert sig.hoeffding_bound(1, 0.01) == 1.0  # 2 e^{-0.0002} > 1: the bound is a probability
    assert sig.hoeffding_bound(1, 2.0) == pytest.approx(2 * math.exp(-8), rel=1e-14)
    assert sig.hoeffding_margin(1, 0.5) == pytest.approx(math.sqrt(math.log(4) / 2), rel=1e-14)
    assert sig.sample_size_proportion(0.1, p=0.0) == 0.0 == sig.sample_size_proportion(0.1, p=1)
    assert sig.two_proportion_z(0, 1, 1, 1).details == {"diff": -1.0}
    assert record(sig.paired_t([0.0, 1.0], [1.0, 3.0]))["statistic"] == pytest.approx(-3.0)
    assert sig.paired_bootstrap_ci([0.0, 1.0], [0.0, 0.0], n_resamples=1).estimate == 0.5
    assert sig.sample_users(5, 1, np.random.default_rng(0)).shape == (1,)
    drawn = sig.sample_users(3, 10, np.random.default_rng(0), replace=True)
    assert drawn.dtype == np.int64 and drawn.shape == (10,) and np.all(np.diff(drawn) >= 0)
    assert sig.user_sampled_curve(np.array([2]), 1, "recall", 3,
                                  np.random.default_rng(0)).tolist() == [0.0, 1.0, 1.0]
    adjusted, reject = sig.holm([0.0, 1.0])
    assert adjusted.tolist() == [0.0, 1.0] and reject.tolist() == [True, False]
    assert sig.bonferroni([0.01])[0].tolist() == [0.01]


@pytest.mark.parametrize("call", [
    lambda: sig.critical_value(0.0), lambda: sig.critical_value(1.0),
    lambda: sig.critical_value(n_comparisons=0), lambda: sig.critical_value(n_comparisons=1.5),
    lambda: sig.proportion_ci(0, 0), lambda: sig.proportion_ci(1, 2.5),
    lambda: sig.proportion_ci(-1, 3), lambda: sig.proportion_ci(4, 3),
    lambda: sig.proportion_ci(1, 3, population_size=2),
    lambda: sig.proportion_ci(1, 3, population_size=3.5),
    lambda: sig.mean_ci([1.0, 2.0], population_size=1),
    lambda: sig.sample_size_proportion(1.0), lambda: sig.sample_size_proportion(1.5),
    lambda: sig.sample_size_proportion(0.1, p=-0.1), lambda: sig.sample_size_proportion(0.1, p=1.5),
    lambda: sig.hoeffding_bound(0, 0.1), lambda: sig.hoeffding_bound(5, 0.0),
    lambda: sig.hoeffding_margin(0, 0.1), lambda: sig.hoeffding_margin(5, 0.0),
    lambda: sig.hoeffding_margin(5, 1.0), lambda: sig.hoeffding_margin(5, 1.5),
    lambda: sig.hoeffding_sample_size(0.0, 0.1), lambda: sig.hoeffding_sample_size(0.1, 0.0),
    lambda: sig.hoeffding_sample_size(0.1, 1.0), lambda: sig.hoeffding_sample_size(0.1, 1.5),
    lambda: sig.two_proportion_z(0, 0, 1, 2), lambda: sig.two_proportion_z(3, 2, 1, 2),
    lambda: sig.two_proportion_z(-1, 2, 1, 2),
    lambda: sig.bonferroni([]), lambda: sig.bonferroni([-0.01]), lambda: sig.bonferroni([1.01]),
    lambda: sig.holm([np.nan]), lambda: sig.holm([0.1], alpha=0.0),
    lambda: sig.holm([0.1], alpha=1.0), lambda: sig.holm([0.1], alpha=1.5),
    lambda: sig.paired_bootstrap_ci(X, Y, n_resamples=0),
    lambda: sig.mean_ci(X, confidence=1.0), lambda: sig.mean_ci(X, confidence=0.0),
    lambda: sig.sample_users(5, 0, np.random.default_rng(0)),
    lambda: sig.sample_users(5, 1.5, np.random.default_rng(0)),
    lambda: sig.sample_users(5, 6, np.random.default_rng(0)),
    lambda: sig.user_sampled_curve(np.array([0, 2]), 1, "recall", 3, np.random.default_rng(0)),
    lambda: sig.user_sampled_curve(np.array([], dtype=int), 1, "recall", 3,
                                   np.random.default_rng(0)),
])
def test_what_each_function_refuses(call):
    with pytest.raises(ConfigError):
        call()


@pytest.mark.parametrize("call", [
    lambda: sig.mean_ci([1.0]), lambda: sig.paired_t([1.0], [2.0]),
    lambda: sig.paired_bootstrap_cis(np.ones((1, 2)), np.ones((1, 2))),
])
def test_one_user_is_too_few(call):
    with pytest.raises(DataError):
        call()


def test_the_probability_bounds_accept_their_edges():
    for p in ([0.0], [1.0], [0.0, 1.0]):
        sig.bonferroni(p)
        sig.holm(p, alpha=0.999)
    assert sig.critical_value(0.999999) > 4.0
    assert sig.sample_size_proportion(0.999) == pytest.approx(
        stats.norm.ppf(0.975) ** 2 * 0.25 / 0.999**2, rel=1e-12)


def test_a_tie_of_wins_and_losses_is_still_counted():
    """As many wins as losses: p = 1 by the binomial law, with the counts recorded (the null
    record is only for samples without a single difference)."""
    x, y = np.array([1.0, 0.0, 2.0, 3.0, 0.0]), np.array([0.0, 1.0, 2.0, 1.0, 2.0])
    assert record(sig.sign_test(x, y)) == {"test": "sign", "statistic": 2.0,
                                           "pvalue": pytest.approx(1.0, abs=1e-15),
                                           "alternative": "two-sided",
                                           "details": {"wins": 2.0, "losses": 2.0}}


def test_float32_values_are_summed_in_float64():
    """Per-user metrics saved as float32 give the numbers of their float64 values, bit for
    bit: every function converts before it sums."""
    rng = np.random.default_rng(4)
    x32, y32 = rng.random(1001).astype(np.float32), rng.random(1001).astype(np.float32)
    x64, y64 = x32.astype(np.float64), y32.astype(np.float64)
    assert sig.mean_ci(x32) == sig.mean_ci(x64)
    assert sig.user_sampling_estimate(x32, 300, np.random.default_rng(1)) == \
        sig.user_sampling_estimate(x64, 300, np.random.default_rng(1))
    for test in (sig.paired_t, sig.two_sample_t, sig.wilcoxon_signed_rank, sig.sign_test):
        assert record(test(x32, y32)) == record(test(x64, y64)), test.__name__
    assert sig.paired_bootstrap_ci(x32, y32, n_resamples=50) == \
        sig.paired_bootstrap_ci(x64, y64, n_resamples=50)
    assert sig.paired_bootstrap_cis(np.c_[x32, y32], np.c_[y64, x64], n_resamples=50) == \
        sig.paired_bootstrap_cis(np.c_[x64, y64], np.c_[y32, x32], n_resamples=50)
    p32 = np.array([0.01, 0.2, 0.03], dtype=np.float32)
    for correct in (sig.bonferroni, sig.holm):
        adjusted, _ = correct(p32)
        assert adjusted.dtype == np.float64
        np.testing.assert_array_equal(adjusted, correct(p32.astype(np.float64))[0])
