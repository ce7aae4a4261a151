"""The MSE-optimised "multinomial" estimator MN (Li et al. 2023, §3; docs/concepts/sampled.md): its
closed form is the BFGS minimiser, its Hessian is PSD with the ones vector in its null space, it
approaches LS as the number of targets grows, and with the prior variance weight it is BV
with γ = 1/M."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.eval.estimators import estimate
from linrec.eval.metrics import curve
from tests.eval.estimators.conftest import (
    N_ITEMS,
    N_TARGETS,
    SAMPLE_SIZE,
    bfgs,
    direct_weights,
    metric_target,
    mn_loss,
)


@pytest.mark.parametrize("metric,k", [("recall", 10), ("ap", 30)])
def test_mn_closed_form_is_bfgs_minimiser(small, metric, k):
    sampled, hist, prior, cond = small
    target = metric_target(metric, k)
    x_bfgs = bfgs(lambda x: mn_loss(x, cond, prior, target, N_TARGETS), SAMPLE_SIZE)
    x_closed = np.array([
        curve(estimate("mn", np.array([r] * N_TARGETS), n_items=N_ITEMS,
                       sample_size=SAMPLE_SIZE, prior=prior).p_hat, metric, k)[-1]
        for r in range(1, SAMPLE_SIZE + 1)
    ])
    np.testing.assert_allclose(x_closed, x_bfgs, atol=1e-6)
    result = estimate("mn", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior)
    np.testing.assert_allclose(result.curve(metric, k)[-1], hist @ x_bfgs, atol=1e-6)


def test_mn_hessian_psd_and_ones_null_space(small):
    _, _, _, cond = small
    lam_minus_gram = np.diag(cond.sum(axis=0)) - cond.T @ cond
    assert np.linalg.eigvalsh(lam_minus_gram).min() >= -1e-12
    np.testing.assert_allclose(lam_minus_gram @ np.ones(SAMPLE_SIZE), 0.0, atol=1e-12)


def test_mn_approaches_ls_as_targets_grow(small):
    # Li et al. 2023, §3: as M → ∞ the MN regularisation vanishes and its bias term L1 falls to the
    # LS minimum (the LS minimiser itself is ill-posed, Krichene & Rendle 2020, so compare objective
    # values)
    _, _, prior, cond = small
    target = metric_target("ndcg", 30)
    weighted = np.sqrt(prior)[:, None] * cond
    x_ls, *_ = np.linalg.lstsq(weighted, np.sqrt(prior) * target, rcond=None)

    def bias(x):
        return prior @ (cond @ x - target) ** 2

    gaps = [bias(direct_weights("mn", cond, prior, 0.0, m, target)) - bias(x_ls)
            for m in (10**2, 10**5, 10**8, 10**11, 10**14)]
    assert all(g >= -1e-15 for g in gaps) and all(np.diff(gaps) < 0)
    assert gaps[-1] < 1e-3 * gaps[0]


def test_mn_prior_variance_weight_is_bv_with_gamma_one_over_m(small):
    sampled, _, prior, _ = small
    a = estimate("mn", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior,
                 variance_weight="prior")
    b = estimate("bv", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior,
                 gamma=1.0 / N_TARGETS)
    np.testing.assert_allclose(a.p_hat, b.p_hat, rtol=1e-10, atol=1e-15)


def test_mn_system_defaults_to_the_unweighted_variance_and_checks_its_inputs():
    """H = AᵀDA − (1/M)AᵀA + (1/M)diag(column sums), written out (eqs. 10–11), as the default."""
    from linrec.errors import ConfigError
    from linrec.eval.estimators.mn import mn_system
    from tests.eval.estimators.conftest import scipy_law

    law = scipy_law(25, 6)
    prior = np.linspace(2.0, 1.0, 25) / np.linspace(2.0, 1.0, 25).sum()
    m = 40
    expected = law.T @ (prior[:, None] * law) - law.T @ law / m + np.diag(law.sum(0)) / m
    np.testing.assert_allclose(mn_system(law, prior, m), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(mn_system(law, prior, 1), law.T @ (prior[:, None] * law)
                               - law.T @ law + np.diag(law.sum(0)), rtol=1e-12, atol=1e-15)
    with pytest.raises(ConfigError, match=r"^n_targets=0 is out of range"):
        mn_system(law, prior, 0)
    with pytest.raises(ConfigError, match=r"^variance_weight='exact' is not allowed"):
        mn_system(law, prior, m, "exact")
