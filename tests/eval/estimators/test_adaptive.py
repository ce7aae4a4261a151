"""The adaptive EM for sampled ranks with heterogeneous sample sizes (Li et al. 2023, eq. 12): it
equals a per-user EM on doubling samples, its posterior is the same under the paper and the nested
likelihood (the nested one a pmf of the doubling process), with one sample
size it is the fixed-size MLE, and its bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from linrec.errors import ConfigError
from linrec.eval.estimators import estimate
from tests.eval.estimators.conftest import draw, per_user_em, power_law

N_ITEMS, SAMPLE_SIZE = 400, 30


def _simulate_doubling(global_ranks, n_items, n0, n_max, rng):
    """Algorithm 1 of Li et al. 2023, Algorithm 1 with replacement, written here per level as an
    oracle."""
    theta = (global_ranks - 1) / (n_items - 1)
    sampled = 1 + rng.binomial(n0 - 1, theta)
    sizes = np.full(len(global_ranks), n0)
    while True:
        grow = (sampled == 1) & (sizes < n_max)
        if not grow.any():
            return sampled, sizes
        sampled[grow] = 1 + rng.binomial(sizes[grow], theta[grow])
        sizes[grow] *= 2


@pytest.fixture(scope="module")
def adaptive_sample():
    rng = np.random.default_rng(6)
    global_ranks = rng.choice(2000, size=1500, p=power_law(2000)) + 1
    return _simulate_doubling(global_ranks, 2000, 10, 160, rng)


def test_adaptive_em_equals_per_user_em(adaptive_sample):
    sampled, sizes = adaptive_sample
    result = estimate("adaptive_mle", sampled, n_items=2000, sample_size=sizes, n_iter=25)
    reference = per_user_em(sampled, sizes, 2000, 25)
    np.testing.assert_allclose(result.p_hat, reference, rtol=1e-9, atol=1e-15)
    assert result.iterations == 25 and np.array_equal(result.sample_size, sizes)
    assert result.params["mean_sample_size"] == pytest.approx(sizes.mean())


def test_adaptive_posterior_equal_under_both_likelihoods(adaptive_sample):
    sampled, sizes = adaptive_sample
    paper = estimate("adaptive_mle", sampled, n_items=2000, sample_size=sizes)
    nested = estimate("adaptive_mle", sampled, n_items=2000, sample_size=sizes,
                      likelihood="nested", initial_size=10)
    np.testing.assert_allclose(nested.p_hat, paper.p_hat, rtol=1e-12, atol=1e-15)
    # but not the same likelihood: at the uniform start, the mean log-likelihood per target of
    # Bin(r − 1; n − 1, θ_R), and of the nested form, whose C(n − 1, r − 1) is C(n/2, r − 1)
    # for r > 1 above the first level (Li et al. 2023, eq. 12), written out with scipy here
    from scipy import stats
    from scipy.special import comb

    theta = np.arange(2000) / 1999
    at_start = stats.binom.pmf(sampled[:, None] - 1, sizes[:, None] - 1, theta).mean(axis=1)
    halved = np.where((sampled > 1) & (sizes > 10),
                      comb(sizes // 2, sampled - 1) / comb(sizes - 1, sampled - 1), 1.0)
    assert paper.log_likelihood[0] == pytest.approx(np.log(at_start).mean(), rel=1e-12)
    assert nested.log_likelihood[0] == pytest.approx(np.log(at_start * halved).mean(), rel=1e-12)
    # the nested form is a pmf of the doubling process: it sums to 1 over the reachable (n, r)
    from linrec.eval.estimators.adaptive import nested_log_factor

    n0, n_max, big_r = 10, 160, 40
    theta = (big_r - 1) / 1999
    total = 0.0
    size = n0
    while size <= n_max:
        ranks = np.arange(1 if size == n_max else 2, (size if size == n0 else size // 2 + 1) + 1)
        if size == n0 and n0 < n_max:
            ranks = ranks[ranks > 1]
        pmf = stats.binom.pmf(ranks - 1, size - 1, theta)
        total += (pmf * np.exp(nested_log_factor(np.full(len(ranks), size), ranks, n0))).sum()
        size *= 2
    assert total == pytest.approx(1.0, abs=1e-12)
    # Li et al. 2023, eq. 12 reference values (N = 2000, n0 = 10, R = 40) at (n_u, r_u) = (20, 2)
    paper_pmf = stats.binom.pmf(1, 19, theta)
    nested_pmf = paper_pmf * np.exp(nested_log_factor(np.array([20]), np.array([2]), n0))[0]
    # (0.1369 when rounded up, as one reference prints it)
    assert nested_pmf == pytest.approx(0.1369, abs=1e-4) and round(paper_pmf, 4) == 0.2600


def test_adaptive_with_one_size_equals_fixed_mle():
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 800, seed=7)
    fixed = estimate("mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, n_iter=50)
    adaptive = estimate("adaptive_mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE)
    np.testing.assert_allclose(adaptive.p_hat, fixed.p_hat, rtol=1e-9, atol=1e-16)


def test_adaptive_bad_input():
    with pytest.raises(ConfigError, match=r"sampled rank 41 .*\[1, 40\]"):
        estimate("adaptive_mle", np.array([1, 41]), n_items=N_ITEMS, sample_size=np.array([20, 40]))
    with pytest.raises(ConfigError, match="initial_size"):
        estimate("adaptive_mle", np.array([1, 3]), n_items=N_ITEMS, sample_size=np.array([20, 30]),
                 likelihood="nested")
    with pytest.raises(ConfigError, match="likelihood='exact'"):
        estimate("adaptive_mle", np.array([1, 3]), n_items=N_ITEMS, sample_size=np.array([20, 40]),
                 likelihood="exact")


def test_batched_repeats_equal_each_sample_alone_under_both_likelihoods(adaptive_sample):
    """adaptive_mle_repeats: one EM over B samples' cells, each column the per-user EM of its
    own sample (written in the test), the default scheme binomial, the nested likelihood checked
    per sample as the single-sample estimator checks it."""
    from linrec.eval.estimators.adaptive import adaptive_mle_repeats

    sampled, sizes = adaptive_sample
    halves = [(sampled[:700], sizes[:700]), (sampled[700:], sizes[700:])]
    for likelihood in ("paper", "nested"):
        batched = adaptive_mle_repeats(halves, 2000, n_iter=15, likelihood=likelihood)
        for b, (ranks, n) in enumerate(halves):
            np.testing.assert_allclose(batched[:, b], per_user_em(ranks, n, 2000, 15),
                                       rtol=1e-9, atol=1e-15)
    not_doubling = [(np.array([1, 3]), np.array([20, 30]))]
    with pytest.raises(ConfigError, match="initial_size"):
        adaptive_mle_repeats(not_doubling, N_ITEMS, likelihood="nested")
    with pytest.raises(ConfigError, match="likelihood='exact'"):
        adaptive_mle_repeats(not_doubling, N_ITEMS, likelihood="exact")


def test_nested_factor_by_hand_and_its_guards():
    """log C(n/2, r−1) − log C(n−1, r−1) above the first level for r > 1, else 0 (eq. 12)."""
    from scipy.special import comb

    from linrec.eval.estimators.adaptive import nested_log_factor

    sizes, ranks = np.array([10, 20, 20, 40, 40]), np.array([3, 1, 11, 2, 21])
    expected = [0.0, 0.0, np.log(comb(10, 10) / comb(19, 10)), np.log(comb(20, 1) / comb(39, 1)),
                np.log(comb(20, 20) / comb(39, 20))]
    np.testing.assert_allclose(nested_log_factor(sizes, ranks, 10), expected, rtol=1e-12,
                               atol=1e-12)
    with pytest.raises(ConfigError, match="needs sample sizes initial_size"):
        nested_log_factor(np.array([5, 20]), np.array([1, 1]), 10)  # below the first level
    with pytest.raises(ConfigError, match="impossible under doubling"):
        nested_log_factor(np.array([20]), np.array([12]), 10)  # r = n/2 + 2


def test_adaptive_mle_defaults_settings_and_record(adaptive_sample):
    """Called directly with its defaults (binomial, 50 steps, uniform start, the paper's
    likelihood) it is the per-user EM written in the test; through `estimate` its start,
    tolerance and first level reach the EM, and the record names them."""
    from linrec.eval.estimators.adaptive import adaptive_mle

    sampled, sizes = adaptive_sample
    p_hat, trace, iterations, n_cells = adaptive_mle(sampled, sizes, 2000)
    np.testing.assert_allclose(p_hat, per_user_em(sampled, sizes, 2000, 50), rtol=1e-9,
                               atol=1e-15)
    assert iterations == 50 and len(trace) == 51
    assert n_cells == len(set(zip(sizes.tolist(), sampled.tolist(), strict=True)))
    # the trace ends at the average log-likelihood of p_hat, per target, by scipy's binomial
    theta = np.arange(2000) / 1999
    likelihood = p_hat @ stats.binom.pmf(sampled - 1, sizes - 1, theta[:, None])  # (M,)
    assert trace[-1] == pytest.approx(np.mean(np.log(likelihood)), abs=1e-10)
    # integer-valued floats are the same cells; the scheme reaches the law of every level
    again = adaptive_mle(sampled.astype(float), sizes.astype(float), 2000, n_iter=5)
    np.testing.assert_array_equal(again[0], adaptive_mle(sampled, sizes, 2000, n_iter=5)[0])
    hyper = adaptive_mle(sampled, sizes, 2000, "hypergeometric", n_iter=5)[0]
    assert not np.allclose(hyper, again[0])

    result = estimate("adaptive_mle", sampled, n_items=2000, sample_size=sizes, n_iter=400,
                      tol=1e-4)
    assert result.iterations < 400 and result.name == "adaptive_mle"
    assert result.n_items == 2000 and result.n_targets == len(sampled)
    assert result.scheme == "binomial" and result.solver == "em"
    assert result.params == {"likelihood": "paper", "n_cells": n_cells,
                             "mean_sample_size": pytest.approx(sizes.mean()),
                             "init": "uniform", "tol": 1e-4}
    assert len(result.log_likelihood) == result.iterations + 1

    start = np.linspace(2, 1, 2000) / np.linspace(2, 1, 2000).sum()
    from_start = estimate("adaptive_mle", sampled, n_items=2000, sample_size=sizes, n_iter=3,
                          init=start)
    uniform = estimate("adaptive_mle", sampled, n_items=2000, sample_size=sizes, n_iter=3)
    assert from_start.params["init"] == "array"
    assert not np.allclose(from_start.p_hat, uniform.p_hat)

    # the nested factor counts levels from initial_size: the same posterior, another likelihood
    upper = sizes >= 20
    nested = [estimate("adaptive_mle", sampled[upper], n_items=2000, sample_size=sizes[upper],
                       n_iter=3, likelihood="nested", initial_size=first) for first in (10, 20)]
    np.testing.assert_allclose(nested[0].p_hat, nested[1].p_hat, rtol=1e-12)
    assert not np.allclose(nested[0].log_likelihood, nested[1].log_likelihood)
