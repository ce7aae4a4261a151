"""The prior P(R) that BV and MN plug in (Li et al. 2023, eq. 15; eqs. 10–11): a
given array, the MLE of the same run, and the MLE pooled over several runs."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.errors import ConfigError
from linrec.eval.estimators import estimate, pooled_prior
from tests.eval.estimators.conftest import draw, scipy_law


def test_prior_variants_and_pooled_prior():
    _, runs = zip(*[draw(400, 20, 300, seed=s) for s in range(3)], strict=True)
    per_run = [estimate("mle", r, n_items=400, sample_size=20).p_hat for r in runs]
    pooled = pooled_prior("mle", runs, n_items=400, sample_size=20)
    np.testing.assert_allclose(pooled, np.mean(per_run, axis=0), rtol=1e-13)
    a = estimate("bv_mle", runs[0], n_items=400, sample_size=20, prior="pooled", prior_runs=runs)
    b = estimate("bv", runs[0], n_items=400, sample_size=20, prior=pooled)
    np.testing.assert_allclose(a.p_hat, b.p_hat, rtol=1e-12, atol=1e-16)
    assert a.prior == "pooled:mle(runs=3)" and b.prior == "array"
    c = estimate("mn_mle", runs[0], n_items=400, sample_size=20)
    d = estimate("mn", runs[0], n_items=400, sample_size=20, prior=per_run[0])
    np.testing.assert_allclose(c.p_hat, d.p_hat, rtol=1e-12, atol=1e-16)
    assert c.prior == "mle" and c.params == {"variance_weight": "unweighted"}
    e = estimate("bv", runs[0], n_items=400, sample_size=20, prior="mle")
    f = estimate("bv_mle", runs[0], n_items=400, sample_size=20)
    np.testing.assert_array_equal(e.p_hat, f.p_hat)


def test_each_prior_source_passes_its_settings_on():
    from linrec.eval.estimators.em import mes, mle
    from linrec.eval.estimators.priors import prior_estimate

    law = scipy_law(30, 8)
    _, sampled = draw(30, 8, 200, seed=2)
    hist = np.bincount(sampled - 1, minlength=8) / len(sampled)
    np.testing.assert_array_equal(prior_estimate("uniform", law, hist, 200), np.full(30, 1 / 30))
    start = np.linspace(2, 1, 30) / np.linspace(2, 1, 30).sum()
    settings = {"n_iter": 7, "init": start, "tol": 1e-3}
    np.testing.assert_array_equal(prior_estimate("mle", law, hist, 200, settings),
                                  mle(law, hist, **settings)[0])
    assert not np.allclose(prior_estimate("mle", law, hist, 200, settings),
                           prior_estimate("mle", law, hist, 200))
    mes_settings = {"fit_scale": "M", "entropy_weight": 0.1, "solver": "dual"}
    np.testing.assert_allclose(prior_estimate("mes", law, hist, 200, mes_settings),
                               mes(law, hist, 200.0, entropy_weight=0.1, solver="dual")[0],
                               rtol=0, atol=1e-12)
    for source, bad in (("mle", {"fit_scale": "n"}), ("mes", {"n_iter": 3})):
        with pytest.raises(ConfigError, match=rf"prior_params \['{list(bad)[0]}'\] are not "
                                              rf"parameters of the '{source}' prior"):
            prior_estimate(source, law, hist, 200, bad)


def test_a_pooled_prior_is_the_mean_of_each_runs_estimate_under_its_scheme():
    from linrec.eval.estimators.em import mle

    runs = [draw(30, 8, 150, seed=s)[1] for s in (3, 4)]
    law = scipy_law(30, 8, "hypergeometric")
    expected = np.mean([mle(law, np.bincount(r - 1, minlength=8) / len(r), n_iter=9)[0]
                        for r in runs], axis=0)
    pooled = pooled_prior("mle", runs, n_items=30, sample_size=8, scheme="hypergeometric",
                          params={"n_iter": 9})
    np.testing.assert_allclose(pooled, expected, rtol=1e-10, atol=1e-14)
    one = pooled_prior("mle", runs[:1], n_items=30, sample_size=8, params={"n_iter": 9})
    assert one.shape == (30,)
    with pytest.raises(ConfigError, match="at least one array"):
        pooled_prior("mle", [], n_items=30, sample_size=8)
    for source in ("uniform", "MES"):
        with pytest.raises(ConfigError, match=f"pooled prior source '{source}' must be"):
            pooled_prior(source, runs, n_items=30, sample_size=8)
    mes_pooled = pooled_prior("mes", runs, n_items=30, sample_size=8,
                              params={"fit_scale": "M"})
    assert mes_pooled.shape == (30,) and abs(mes_pooled.sum() - 1) < 1e-9


def test_an_estimator_takes_its_prior_with_the_runs_size_settings_and_scheme():
    """BV with a prior named by source equals BV given that prior as an array: MES of this run
    (fit scale M = its number of targets), and the MES pooled over runs under the run's scheme."""
    from linrec.eval.estimators.priors import prior_estimate

    runs = [draw(30, 8, 150, seed=s)[1] for s in (3, 4)]
    sampled = runs[0]
    hist = np.bincount(sampled - 1, minlength=8) / len(sampled)
    settings = {"fit_scale": "M"}
    common = dict(n_items=30, sample_size=8, scheme="hypergeometric")
    own = prior_estimate("mes", scipy_law(30, 8, "hypergeometric"), hist, len(sampled), settings)
    named = estimate("bv", sampled, prior="mes", prior_params=settings, **common)
    given = estimate("bv", sampled, prior=own, **common)
    np.testing.assert_allclose(named.p_hat, given.p_hat, rtol=1e-9, atol=1e-12)
    pooled = pooled_prior("mes", runs, params=settings, **common)
    named = estimate("bv_mes", sampled, prior="pooled", prior_runs=runs, prior_params=settings,
                     **common)
    given = estimate("bv", sampled, prior=pooled, **common)
    np.testing.assert_allclose(named.p_hat, given.p_hat, rtol=1e-9, atol=1e-12)
    assert named.prior == "pooled:mes(runs=2)"
