"""The linear algebra the estimators share (Krichene & Rendle 2020; Li et al. 2023, eq. 14;
 docs/concepts/sampled.md): the implied distribution P̂ = D A H⁻¹ P~ of BV, MN and LS equals the
weights solved from the papers' formulas, the symmetric solve falls back to least squares below
machine precision without touching the warnings filters, and the banded P(r|R) of large N·n gives
the dense results (MLE, BV, MN, MES)."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from linrec.eval.conditional import conditional_matrix
from linrec.eval.estimators import estimate
from linrec.eval.estimators._linalg import solve_symmetric
from linrec.eval.estimators.em import mes
from tests.eval.estimators.conftest import (
    N_ITEMS,
    N_TARGETS,
    SAMPLE_SIZE,
    direct_weights,
    draw,
    metric_target,
)


@pytest.mark.parametrize("name", ["bv", "mn", "ls"])
@pytest.mark.parametrize("metric", ["recall", "ndcg", "ap"])
def test_implied_distribution_identity(small, name, metric):
    sampled, hist, prior, cond = small
    result = estimate(name, sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior)
    for k in (1, 5, 20, 50):
        target = metric_target(metric, k)
        x = direct_weights(name, cond, prior, 0.01, N_TARGETS, target)
        scale = _ls_term_scale(cond, prior, hist, target) if name == "ls" else 1.0
        assert abs(hist @ x - result.p_hat @ target) <= 1e-12 * max(scale, 1.0)


def _ls_term_scale(cond, prior, hist, target):
    """Σ_i |(Uᵀ√D b)_i (Vᵀ P~)_i / s_i|: the size of the terms that cancel in P~ᵀx for LS, whose
    singular values span ~1e-9..1 (Krichene & Rendle 2020), hence the scale of its rounding
    error."""
    u, s, vt = np.linalg.svd(np.sqrt(prior)[:, None] * cond, full_matrices=False)
    return np.abs((u.T @ (np.sqrt(prior) * target)) * (vt @ hist) / s).sum()


def _ill_and_well_conditioned(n=40, seed=0):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    ill = (q * np.r_[np.ones(n - 1), 1e-19]) @ q.T  # rcond ~ 1e-19 < eps
    well = (q * np.linspace(1.0, 2.0, n)) @ q.T
    return (ill + ill.T) / 2, (well + well.T) / 2, rng.normal(size=n)


def test_solve_symmetric_falls_back_below_machine_precision_without_warning_filters(monkeypatch):
    """Regression: solve_symmetric switched warnings filters (`warnings.catch_warnings`, not
    thread-safe); under the sampled block's threads that leaked a process-wide 'error' filter for
    LinAlgWarning and let an ill-conditioned solve through at random. It must decide from LAPACK's
    condition estimate alone."""
    ill, well, rhs = _ill_and_well_conditioned()
    x, method = solve_symmetric(well, rhs)
    assert method == "solve(sym)"
    np.testing.assert_allclose(x, np.linalg.solve(well, rhs), rtol=1e-12)
    x, method = solve_symmetric(ill, rhs)
    assert method == "lstsq"
    np.testing.assert_allclose(x, np.linalg.lstsq(ill, rhs, rcond=None)[0], rtol=1e-6, atol=1e-9)
    assert solve_symmetric(np.zeros((3, 3)), np.ones(3))[1] == "lstsq"

    before = list(warnings.filters)
    with ThreadPoolExecutor(4) as pool:
        methods = list(pool.map(lambda _: (solve_symmetric(ill, rhs)[1],
                                           solve_symmetric(well, rhs)[1]), range(400)))
    assert set(methods) == {("lstsq", "solve(sym)")}
    assert list(warnings.filters) == before

    def forbidden(*args, **kwargs):
        raise AssertionError("warnings.catch_warnings is not thread-safe")

    monkeypatch.setattr(warnings, "catch_warnings", forbidden)
    assert solve_symmetric(ill, rhs)[1] == "lstsq"


def test_banded_operator_gives_the_dense_results():
    # large N·n use the banded CSR form of P(r|R) (docs/concepts/sampled.md); same estimates
    from linrec.eval.conditional import conditional_band
    from linrec.eval.estimators.bv import bv
    from linrec.eval.estimators.em import mle
    from linrec.eval.estimators.mn import mn

    n_items, sample_size = 2000, 400
    _, sampled = draw(n_items, sample_size, 4000, seed=9)
    hist = np.bincount(sampled - 1, minlength=sample_size) / len(sampled)
    dense, band = conditional_matrix(n_items, sample_size), conditional_band(n_items, sample_size)
    assert band.nnz < 0.45 * dense.size
    p_dense, trace_dense, _ = mle(dense, hist, n_iter=30)
    p_band, trace_band, _ = mle(band, hist, n_iter=30)
    np.testing.assert_allclose(p_band, p_dense, rtol=1e-10, atol=1e-18)
    np.testing.assert_allclose(trace_band, trace_dense, rtol=1e-12)
    for prior in (np.full(n_items, 1.0 / n_items), p_dense):
        np.testing.assert_allclose(bv(band, hist, prior)[0], bv(dense, hist, prior)[0],
                                   rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(mn(band, hist, prior, 4000)[0], mn(dense, hist, prior, 4000)[0],
                                   rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(mes(band, hist, 400.0, solver="dual")[0],
                               mes(dense, hist, 400.0, solver="dual")[0], rtol=1e-8, atol=1e-14)


def test_bias_variance_loss_is_the_squared_bias_plus_the_weighted_variance():
    """The BV and MN objective (Li et al. 2023, eq. 15; eqs. 7–8), written out per
    global rank R with the variance as E[(x − E[x|R])² | R] (the helper uses E[x²] − E[x]²)."""
    from linrec.eval.estimators._linalg import bias_variance_loss
    from linrec.eval.estimators.bv import bv_objective
    from linrec.eval.estimators.mn import mn_objective

    n_items, sample_size = 40, 6
    cond = conditional_matrix(n_items, sample_size)
    rng = np.random.default_rng(3)
    x, target = rng.random(sample_size), rng.random(n_items)
    prior = rng.random(n_items)
    prior /= prior.sum()
    weights = rng.random(n_items)
    want = 0.0
    for big_r in range(n_items):
        mean = sum(cond[big_r, r] * x[r] for r in range(sample_size))
        var = sum(cond[big_r, r] * (x[r] - mean) ** 2 for r in range(sample_size))
        want += prior[big_r] * (mean - target[big_r]) ** 2 + weights[big_r] * var
    assert bias_variance_loss(x, cond, prior, target, weights) == pytest.approx(want, rel=1e-12)
    gamma, m = 0.3, 17
    assert bv_objective(x, cond, prior, target, gamma) == pytest.approx(
        bias_variance_loss(x, cond, prior, target, gamma * prior), rel=1e-15)
    assert mn_objective(x, cond, prior, target, m) == pytest.approx(
        bias_variance_loss(x, cond, prior, target, np.full(n_items, 1 / m)), rel=1e-15)
