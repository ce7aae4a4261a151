"""The linear (closed-form) estimators and the estimate() entry point (spec/evaluation.md §5, §7,
§14.1 V11–V13)."""

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from scipy import optimize, stats

from linrec.errors import ConfigError
from linrec.eval.conditional import conditional_matrix
from linrec.eval.estimators import ESTIMATORS, estimate, pooled_prior
from linrec.eval.estimators._linalg import solve_symmetric
from linrec.eval.estimators.bv import bv_objective
from linrec.eval.estimators.mn import mn_objective
from linrec.eval.metrics import curve, rank_gain

N_ITEMS, SAMPLE_SIZE, N_TARGETS = 300, 20, 500


def _power_law(n_items: int, exponent: float = 0.9) -> np.ndarray:
    p = np.arange(1, n_items + 1, dtype=np.float64) ** -exponent
    return p / p.sum()


def _draw(n_items, sample_size, n_targets, seed, exponent=0.9):
    """Global ranks from a power law and sampled ranks by the binomial law (spec §2.4), drawn here
    directly as an independent oracle."""
    rng = np.random.default_rng(seed)
    global_ranks = rng.choice(n_items, size=n_targets, p=_power_law(n_items, exponent)) + 1
    theta = (global_ranks - 1) / (n_items - 1)
    return global_ranks, rng.binomial(sample_size - 1, theta) + 1


@pytest.fixture(scope="module")
def small():
    global_ranks, sampled = _draw(N_ITEMS, SAMPLE_SIZE, N_TARGETS, seed=3)
    hist = np.bincount(sampled - 1, minlength=SAMPLE_SIZE) / N_TARGETS
    prior = _power_law(N_ITEMS, 0.7)
    return sampled, hist, prior, conditional_matrix(N_ITEMS, SAMPLE_SIZE)


def _metric_target(metric, k):
    ranks = np.arange(1, N_ITEMS + 1)
    return rank_gain(metric, ranks) * (ranks <= k)


def _bfgs(objective, sample_size, seed=0):
    # the objectives are quadratics; BFGS with the finite-difference-free gradient of a quadratic
    x0 = np.random.default_rng(seed).normal(size=sample_size) * 0.1

    def grad(x, h=1e-6):
        # central differences are exact for a quadratic up to rounding
        e = np.eye(len(x)) * h
        return np.array([(objective(x + ei) - objective(x - ei)) / (2 * h) for ei in e])

    res = optimize.minimize(objective, x0, jac=grad, method="BFGS",
                            options={"gtol": 1e-13, "maxiter": 20000})
    return res.x


@pytest.mark.parametrize("metric,k", [("recall", 10), ("ndcg", 25)])
def test_v11_bv_closed_form_is_bfgs_minimiser(small, metric, k):
    sampled, hist, prior, cond = small
    gamma = 0.05
    target = _metric_target(metric, k)
    x_bfgs = _bfgs(lambda x: bv_objective(x, cond, prior, target, gamma), SAMPLE_SIZE)
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
    assert bv_objective(x_closed, cond, prior, target, gamma) <= bv_objective(
        x_bfgs, cond, prior, target, gamma) + 1e-12


def test_v11_bv_literal_typo_weighting_is_not_the_minimiser(small):
    # spec §5.5: the printed Ã = √(P(R)P(r|R)) gives a higher L_BV than the corrected form
    _, _, prior, cond = small
    gamma, target = 0.01, _metric_target("recall", 10)
    typo = np.sqrt(prior[:, None] * cond)
    c = prior @ cond
    x_typo = np.linalg.solve((1 - gamma) * typo.T @ typo + gamma * np.diag(c),
                             typo.T @ (np.sqrt(prior) * target))
    x_right = np.array([
        curve(estimate("bv", np.array([r]), n_items=N_ITEMS, sample_size=SAMPLE_SIZE,
                       prior=prior).p_hat, "recall", 10)[-1]
        for r in range(1, SAMPLE_SIZE + 1)
    ])
    assert bv_objective(x_right, cond, prior, target, gamma) < bv_objective(
        x_typo, cond, prior, target, gamma)


@pytest.mark.parametrize("metric,k", [("recall", 10), ("ap", 30)])
def test_v11_mn_closed_form_is_bfgs_minimiser(small, metric, k):
    sampled, hist, prior, cond = small
    target = _metric_target(metric, k)
    x_bfgs = _bfgs(lambda x: mn_objective(x, cond, prior, target, N_TARGETS), SAMPLE_SIZE)
    x_closed = np.array([
        curve(estimate("mn", np.array([r] * N_TARGETS), n_items=N_ITEMS,
                       sample_size=SAMPLE_SIZE, prior=prior).p_hat, metric, k)[-1]
        for r in range(1, SAMPLE_SIZE + 1)
    ])
    np.testing.assert_allclose(x_closed, x_bfgs, atol=1e-6)
    result = estimate("mn", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior)
    np.testing.assert_allclose(result.curve(metric, k)[-1], hist @ x_bfgs, atol=1e-6)


def _direct_weights(name, cond, prior, gamma, n_targets, target):
    """x = H⁻¹ AᵀD b solved per right-hand side, written out from the spec formulas."""
    gram = cond.T @ (prior[:, None] * cond)
    rhs = cond.T @ (prior * target)
    if name == "bv":  # spec §5.5
        return np.linalg.solve((1 - gamma) * gram + gamma * np.diag(prior @ cond), rhs)
    if name == "mn":  # spec §7.3
        system = gram - cond.T @ cond / n_targets + np.diag(cond.sum(axis=0)) / n_targets
        return np.linalg.solve(system, rhs)
    # ls, spec §5.3: minimum-norm weighted least squares (√D A)⁺ √D b; the same SVD as the
    # estimator (and its prior normalisation), since rounding is amplified ~1e8-fold (§5.3)
    prior = prior / prior.sum()
    u, s, vt = np.linalg.svd(np.sqrt(prior)[:, None] * cond, full_matrices=False)
    return vt.T @ ((u.T @ (np.sqrt(prior) * target)) / s)


@pytest.mark.parametrize("name", ["bv", "mn", "ls"])
@pytest.mark.parametrize("metric", ["recall", "ndcg", "ap"])
def test_v12_implied_distribution_identity(small, name, metric):
    sampled, hist, prior, cond = small
    result = estimate(name, sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior)
    for k in (1, 5, 20, 50):
        target = _metric_target(metric, k)
        x = _direct_weights(name, cond, prior, 0.01, N_TARGETS, target)
        scale = _ls_term_scale(cond, prior, hist, target) if name == "ls" else 1.0
        assert abs(hist @ x - result.p_hat @ target) <= 1e-12 * max(scale, 1.0)


def _ls_term_scale(cond, prior, hist, target):
    """Σ_i |(Uᵀ√D b)_i (Vᵀ P~)_i / s_i|: the size of the terms that cancel in P~ᵀx for LS, whose
    singular values span ~1e-9..1 (spec §5.3), hence the scale of its rounding error."""
    u, s, vt = np.linalg.svd(np.sqrt(prior)[:, None] * cond, full_matrices=False)
    return np.abs((u.T @ (np.sqrt(prior) * target)) * (vt @ hist) / s).sum()


def test_v13_mn_hessian_psd_and_ones_null_space(small):
    _, _, _, cond = small
    lam_minus_gram = np.diag(cond.sum(axis=0)) - cond.T @ cond
    assert np.linalg.eigvalsh(lam_minus_gram).min() >= -1e-12
    np.testing.assert_allclose(lam_minus_gram @ np.ones(SAMPLE_SIZE), 0.0, atol=1e-12)


def test_bv_gamma_one_is_posterior_mean(small):
    # spec §5.5: γ = 1 gives x_r = E[F(R) | r] under the prior
    _, _, prior, cond = small
    posterior = prior[:, None] * cond / (prior @ cond)[None, :]
    target = _metric_target("ndcg", 20)
    x = np.array([
        curve(estimate("bv", np.array([r]), n_items=N_ITEMS, sample_size=SAMPLE_SIZE, gamma=1.0,
                       prior=prior).p_hat, "ndcg", 20)[-1]
        for r in range(1, SAMPLE_SIZE + 1)
    ])
    np.testing.assert_allclose(x, posterior.T @ target, rtol=1e-12)


def test_mn_approaches_ls_as_targets_grow(small):
    # spec §7.6: as M → ∞ the MN regularisation vanishes and its bias term L1 falls to the LS
    # minimum (the LS minimiser itself is ill-posed, spec §5.3, so compare objective values)
    _, _, prior, cond = small
    target = _metric_target("ndcg", 30)
    weighted = np.sqrt(prior)[:, None] * cond
    x_ls, *_ = np.linalg.lstsq(weighted, np.sqrt(prior) * target, rcond=None)

    def bias(x):
        return prior @ (cond @ x - target) ** 2

    gaps = [bias(_direct_weights("mn", cond, prior, 0.0, m, target)) - bias(x_ls)
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


def test_naive_reads_sampled_rank_as_global(small):
    sampled, hist, _, _ = small
    result = estimate("naive", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE)
    for k in (1, 3, 10):
        assert result.curve("recall", k)[-1] == pytest.approx(np.mean(sampled <= k), abs=1e-15)
    ndcg_naive = np.mean((sampled <= 10) / np.log2(sampled + 1))
    assert result.curve("ndcg", 10)[-1] == pytest.approx(ndcg_naive, abs=1e-15)


def test_unbiased_rank_places_mass_at_unbiased_rank(small):
    sampled, _, _, _ = small
    result = estimate("unbiased_rank", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE)
    r_hat = 1 + (sampled - 1) * (N_ITEMS - 1) / (SAMPLE_SIZE - 1)  # spec §5.2
    for k in (1, 16, 17, 100, 300):
        assert result.curve("recall", k)[-1] == pytest.approx(np.mean(r_hat <= k), abs=1e-15)
    # the estimate is unbiased for the mean rank: E[R̂] = R for every R
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    rank_hat = 1 + np.arange(SAMPLE_SIZE) * (N_ITEMS - 1) / (SAMPLE_SIZE - 1)
    np.testing.assert_allclose(cond @ rank_hat, np.arange(1, N_ITEMS + 1), rtol=1e-12)


def test_cls_matches_cvxpy_and_is_monotone(small):
    import cvxpy as cp

    sampled, hist, prior, cond = small
    result = estimate("cls", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior,
                      metric="ndcg", k_max=20)
    est = result.curve("ndcg", 20)
    for k in (1, 7, 20):
        x = cp.Variable(SAMPLE_SIZE)
        fit = cp.sum(cp.multiply(prior, cp.square(cond @ x - _metric_target("ndcg", k))))
        cp.Problem(cp.Minimize(fit), [x[:-1] >= x[1:]]).solve(solver="CLARABEL")
        assert np.all(np.diff(x.value) <= 1e-7)
        assert est[k - 1] == pytest.approx(hist @ x.value, abs=1e-6)
    assert np.all(result.p_hat[20:] == 0)


def test_ls_is_weighted_least_squares(small):
    # spec §5.3 on a well-posed case (recall at a large K): x = argmin ||√D (A x − b)||
    _, hist, prior, cond = small
    sampled = np.repeat(np.arange(1, SAMPLE_SIZE + 1), 3)
    result = estimate("ls", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior)
    target = _metric_target("recall", 200)
    x, *_ = np.linalg.lstsq(np.sqrt(prior)[:, None] * cond, np.sqrt(prior) * target, rcond=None)
    assert result.p_hat @ target == pytest.approx(np.full(SAMPLE_SIZE, 1 / SAMPLE_SIZE) @ x,
                                                  abs=1e-9)


def test_prior_variants_and_pooled_prior():
    _, runs = zip(*[_draw(400, 20, 300, seed=s) for s in range(3)], strict=True)
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


def test_result_metadata():
    _, sampled = _draw(400, 20, 300, seed=1)
    res = estimate("bv", sampled, n_items=400, sample_size=20, gamma=0.02)
    assert (res.name, res.n_items, res.sample_size, res.n_targets, res.scheme) == (
        "bv", 400, 20, 300, "binomial")
    assert res.prior == "uniform" and res.params == {"gamma": 0.02} and res.p_hat.shape == (400,)
    assert res.p_hat.dtype == np.float64
    res = estimate("mle", sampled, n_items=400, sample_size=20, n_iter=7)
    assert res.iterations == 7 and len(res.log_likelihood) == 8 and res.solver == "em"
    hyper = estimate("mle", sampled, n_items=400, sample_size=20, scheme="hypergeometric")
    assert hyper.scheme == "hypergeometric" and not np.allclose(hyper.p_hat, res.p_hat)


@pytest.mark.parametrize(
    "name,kwargs,match",
    [
        ("nope", {}, "unknown estimator 'nope'; choose one of"),
        ("bv", {"gamma": 0.0}, r"gamma=0.0 must be in \(0, 1\]"),
        ("bv", {"gamma": 1.5}, r"gamma=1.5 must be in \(0, 1\]"),
        ("bv", {"gama": 0.1}, r"no parameter\(s\) \['gama'\]"),
        ("mn", {"prior": np.ones(7)}, "prior must have length n_items=400"),
        ("bv", {"prior": "beta"}, "prior source 'beta'"),
        ("bv_mle", {"prior": "pooled"}, "prior_runs"),
        ("mes", {"fit_scale": "N"}, "fit_scale='N'"),
        ("mle", {"n_iter": -1}, "n_iter=-1"),
    ],
)
def test_bad_parameters_raise_config_error(name, kwargs, match):
    _, sampled = _draw(400, 20, 300, seed=1)
    with pytest.raises(ConfigError, match=match):
        estimate(name, sampled, n_items=400, sample_size=20, **kwargs)


@pytest.mark.parametrize("bad", [0, 21, -3])
def test_rank_out_of_range_names_value_and_range(bad):
    sampled = np.array([1, 2, bad, 4])
    with pytest.raises(ConfigError, match=rf"sampled rank {bad} .*\[1, 20\]"):
        estimate("mle", sampled, n_items=400, sample_size=20)


@pytest.mark.parametrize("name", [n for n in ESTIMATORS if n != "adaptive_mle"])
def test_fixed_size_estimators_reject_heterogeneous_sizes(name):
    sizes = np.array([20, 20, 40, 40])
    with pytest.raises(ConfigError, match="one common sample_size"):
        estimate(name, np.array([1, 2, 3, 4]), n_items=400, sample_size=sizes)


def test_homogeneous_size_array_is_accepted():
    _, sampled = _draw(400, 20, 300, seed=1)
    a = estimate("bv", sampled, n_items=400, sample_size=np.full(300, 20))
    b = estimate("bv", sampled, n_items=400, sample_size=20)
    np.testing.assert_array_equal(a.p_hat, b.p_hat)


def test_binomial_pmf_used_by_estimators_matches_scipy():
    # the estimators see P(r|R) only through conditional_operator; spot-check one row
    from linrec.eval.conditional import conditional_operator

    row = conditional_operator(400, 20)[123]
    np.testing.assert_allclose(row, stats.binom.pmf(np.arange(20), 19, 123 / 399), rtol=1e-10)


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
