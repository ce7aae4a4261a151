"""The prior P(R) that BV and MN plug in (Li et al. 2023, eq. 15; eqs. 10–11): a
given array, the MLE of the same run, and the MLE pooled over several runs."""

from __future__ import annotations

import numpy as np

from linrec.eval.estimators import estimate, pooled_prior
from tests.eval.estimators.conftest import draw


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
