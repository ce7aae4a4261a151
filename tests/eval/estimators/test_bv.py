"""The bias-variance estimator BV (Li et al. 2023, eq. 15; docs/concepts/sampled.md): its closed
form is the BFGS minimiser of L_BV, the weighting as printed in the paper (a typo) is not, and γ = 1
gives the posterior mean."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.eval.estimators import estimate
from linrec.eval.metrics import curve
from tests.eval.estimators.conftest import N_ITEMS, SAMPLE_SIZE, bfgs, bv_loss, metric_target


@pytest.mark.parametrize("metric,k", [("recall", 10), ("ndcg", 25)])
def test_bv_closed_form_is_bfgs_minimiser(small, metric, k):
    sampled, hist, prior, cond = small
    gamma = 0.05
    target = metric_target(metric, k)
    x_bfgs = bfgs(lambda x: bv_loss(x, cond, prior, target, gamma), SAMPLE_SIZE)
    result = estimate("bv", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, gamma=gamma,
                      prior=prior)
    # the estimate is Σ_r P~(r) x_r; compare both the metric value and the minimiser's value
    np.testing.assert_allclose(result.curve(metric, k)[-1], hist @ x_bfgs, atol=1e-6)
    # and x itself, recovered column by column from P̂ = G^T P~ with unit histograms
    x_closed = np.array([
        curve(estimate("bv", np.array([r]), n_items=N_ITEMS, sample_size=SAMPLE_SIZE,
                       gamma=gamma, prior=prior).p_hat, metric, k)[-1]
        for r in range(1, SAMPLE_SIZE + 1)
    ])
    np.testing.assert_allclose(x_closed, x_bfgs, atol=1e-6)
    assert bv_loss(x_closed, cond, prior, target, gamma) <= bv_loss(
        x_bfgs, cond, prior, target, gamma) + 1e-12


def test_bv_literal_typo_weighting_is_not_the_minimiser(small):
    # Li et al. 2023, eq. 15: the printed Ã = √(P(R)P(r|R)) gives a higher L_BV than the corrected
    # form
    _, _, prior, cond = small
    gamma, target = 0.01, metric_target("recall", 10)
    typo = np.sqrt(prior[:, None] * cond)
    c = prior @ cond
    x_typo = np.linalg.solve((1 - gamma) * typo.T @ typo + gamma * np.diag(c),
                             typo.T @ (np.sqrt(prior) * target))
    x_right = np.array([
        curve(estimate("bv", np.array([r]), n_items=N_ITEMS, sample_size=SAMPLE_SIZE,
                       prior=prior).p_hat, "recall", 10)[-1]
        for r in range(1, SAMPLE_SIZE + 1)
    ])
    assert bv_loss(x_right, cond, prior, target, gamma) < bv_loss(
        x_typo, cond, prior, target, gamma)


def test_bv_gamma_one_is_posterior_mean(small):
    # Li et al. 2023, eq. 15: γ = 1 gives x_r = E[F(R) | r] under the prior
    _, _, prior, cond = small
    posterior = prior[:, None] * cond / (prior @ cond)[None, :]
    target = metric_target("ndcg", 20)
    x = np.array([
        curve(estimate("bv", np.array([r]), n_items=N_ITEMS, sample_size=SAMPLE_SIZE, gamma=1.0,
                       prior=prior).p_hat, "ndcg", 20)[-1]
        for r in range(1, SAMPLE_SIZE + 1)
    ])
    np.testing.assert_allclose(x, posterior.T @ target, rtol=1e-12)


@pytest.mark.parametrize("gamma", [0.0, -0.1, 1.5])
def test_a_gamma_outside_its_range_is_refused_with_the_papers_value(gamma):
    """γ must lie in (0, 1]; the error names the value the papers use."""
    from linrec.errors import ConfigError
    from linrec.eval.estimators.bv import check_gamma

    with pytest.raises(ConfigError, match=rf"gamma={gamma} is out of range.*"
                                          r"; 0\.01 in the papers \(Li et al\. 2023, eq\. 15\)$"):
        check_gamma(gamma)
