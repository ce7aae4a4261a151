"""EstimateResult, the common output of every estimator (docs/concepts/sampled.md): its metadata
(name, sizes, scheme, prior, parameters, EM iterations and solver)."""

from __future__ import annotations

import numpy as np

from linrec.eval.estimators import estimate
from tests.eval.estimators.conftest import draw


def test_result_metadata():
    _, sampled = draw(400, 20, 300, seed=1)
    res = estimate("bv", sampled, n_items=400, sample_size=20, gamma=0.02)
    assert (res.name, res.n_items, res.sample_size, res.n_targets, res.scheme) == (
        "bv", 400, 20, 300, "binomial")
    assert res.prior == "uniform" and res.params == {"gamma": 0.02} and res.p_hat.shape == (400,)
    assert res.p_hat.dtype == np.float64
    res = estimate("mle", sampled, n_items=400, sample_size=20, n_iter=7)
    assert res.iterations == 7 and len(res.log_likelihood) == 8 and res.solver == "em"
    hyper = estimate("mle", sampled, n_items=400, sample_size=20, scheme="hypergeometric")
    assert hyper.scheme == "hypergeometric" and not np.allclose(hyper.p_hat, res.p_hat)


def test_curve_defaults_to_the_first_50_cutoffs():
    """T̂@1..T̂@50 unless k_max says otherwise, each the metric of p̂ at that K."""
    _, sampled = draw(400, 20, 300, seed=2)
    res = estimate("mle", sampled, n_items=400, sample_size=20)
    default = res.curve("recall")
    assert default.shape == (50,)
    np.testing.assert_allclose(default, np.cumsum(res.p_hat)[:50], rtol=1e-12)
