"""MLE (EM), weighted MLE, MES and the adaptive EM (spec/evaluation.md §6, §8.3, §14.1 V14–V15)."""

import numpy as np
import pytest
from scipy import stats

from linrec.errors import ConfigError
from linrec.eval.conditional import conditional_matrix
from linrec.eval.estimators import estimate
from linrec.eval.estimators.em import mes

N_ITEMS, SAMPLE_SIZE = 400, 30


def _power_law(n_items, exponent=0.9):
    p = np.arange(1, n_items + 1, dtype=np.float64) ** -exponent
    return p / p.sum()


def _draw(n_items, sample_size, n_targets, seed):
    rng = np.random.default_rng(seed)
    global_ranks = rng.choice(n_items, size=n_targets, p=_power_law(n_items)) + 1
    return global_ranks, rng.binomial(sample_size - 1, (global_ranks - 1) / (n_items - 1)) + 1


def _per_user_em(sampled_ranks, sample_sizes, n_items, n_iter):
    """Textbook EM of spec §6.2 / §8.3 over users (posterior φ_u per user, scipy.stats pmf)."""
    theta = np.arange(n_items) / (n_items - 1)
    lik = stats.binom.pmf(sampled_ranks[:, None] - 1, sample_sizes[:, None] - 1, theta[None, :])
    pi = np.full(n_items, 1.0 / n_items)
    for _ in range(n_iter):
        post = pi * lik
        post /= post.sum(axis=1, keepdims=True)
        pi = post.mean(axis=0)
    return pi


def test_mle_equals_per_user_em():
    _, sampled = _draw(N_ITEMS, SAMPLE_SIZE, 700, seed=0)
    result = estimate("mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, n_iter=40)
    reference = _per_user_em(sampled, np.full(len(sampled), SAMPLE_SIZE), N_ITEMS, 40)
    np.testing.assert_allclose(result.p_hat, reference, rtol=1e-9, atol=1e-15)
    assert result.iterations == 40 and result.params == {"init": "uniform", "tol": None}


def test_v14_em_log_likelihood_non_decreasing_and_matches_definition():
    _, sampled = _draw(N_ITEMS, SAMPLE_SIZE, 2000, seed=1)
    result = estimate("mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, n_iter=200)
    trace = result.log_likelihood
    assert len(trace) == 201 and np.all(np.diff(trace) >= -1e-14)
    # the last entry is the average log-likelihood of the returned p_hat, (1/M) Σ_u log p(r_u|Π)
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    assert trace[-1] == pytest.approx(np.mean(np.log((result.p_hat @ cond)[sampled - 1])),
                                      abs=1e-12)


def test_v14_moment_matching_at_convergence():
    # spec §6.5: with M → ∞ (the histogram equals Aᵀπ_true) the implied P(r) fits P~; EM
    # converges sublinearly here (the MLE is a flat set, spec §6.2), so a small N and many steps
    n_items, sample_size = 60, 30
    cond = conditional_matrix(n_items, sample_size)
    counts = np.round(_power_law(n_items) @ cond * 1e6).astype(np.int64)
    sampled = np.repeat(np.arange(1, sample_size + 1), counts)
    histogram = counts / counts.sum()
    result = estimate("mle", sampled, n_items=n_items, sample_size=sample_size, n_iter=20000)
    np.testing.assert_allclose(result.p_hat @ cond, histogram, atol=1e-6)
    assert np.all(np.diff(result.log_likelihood) >= -1e-14)
    # and recall at large K is accurate (spec §6.5)
    true_recall = np.cumsum(_power_law(n_items))
    np.testing.assert_allclose(result.curve("recall", 60)[20:], true_recall[20:], atol=5e-3)


def test_em_tolerance_stops_early():
    _, sampled = _draw(N_ITEMS, SAMPLE_SIZE, 2000, seed=2)
    result = estimate("mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, n_iter=5000,
                      tol=1e-6)
    assert result.iterations < 5000 and len(result.log_likelihood) == result.iterations + 1
    assert result.log_likelihood[-1] - result.log_likelihood[-2] < 1e-6 * abs(
        result.log_likelihood[-1])


def test_weighted_mle_is_mle_of_reweighted_histogram():
    # spec §6.3: π_new = Σ_r w(r)P~(r) φ(R|r) / Σ_r w(r)P~(r), written out per sampled rank
    _, sampled = _draw(N_ITEMS, SAMPLE_SIZE, 1500, seed=3)
    scale = 4.0
    result = estimate("weighted_mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE,
                      weights="ndcg", weight_scale=scale, n_iter=30)
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    hist = np.bincount(sampled - 1, minlength=SAMPLE_SIZE) / len(sampled)
    w = 1.0 / np.log2(1.0 + np.arange(1, SAMPLE_SIZE + 1) / scale)
    pi = np.full(N_ITEMS, 1.0 / N_ITEMS)
    for _ in range(30):
        post = pi[:, None] * cond / (pi @ cond)[None, :]
        pi = post @ (w * hist) / (w * hist).sum()
    np.testing.assert_allclose(result.p_hat, pi, rtol=1e-10, atol=1e-16)
    ap = estimate("weighted_mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE,
                  weights=lambda r: 1 / (1 + (r - 1) / 10), n_iter=30)
    ap_named = estimate("weighted_mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE,
                        weights="ap", weight_scale=10, n_iter=30)
    np.testing.assert_allclose(ap.p_hat, ap_named.p_hat, rtol=1e-13)


def _mes_objective(pi, cond, hist, scale, eta):
    y = pi @ cond
    entropy = -np.sum(pi * np.log(np.maximum(pi, 1e-300)))
    return scale * np.sum(hist * (y - hist) ** 2) - eta * entropy


@pytest.mark.parametrize("fit_scale,eta", [("n", 0.01), ("M", 0.001), (100.0, 1e-4)])
def test_mes_dual_matches_cvxpy(fit_scale, eta):
    _, sampled = _draw(N_ITEMS, SAMPLE_SIZE, 3000, seed=4)
    kwargs = {"n_items": N_ITEMS, "sample_size": SAMPLE_SIZE, "fit_scale": fit_scale,
              "entropy_weight": eta}
    dual = estimate("mes", sampled, solver="dual", **kwargs)
    ref = estimate("mes", sampled, solver="clarabel", **kwargs)
    assert dual.solver == "dual-newton" and ref.solver.startswith("cvxpy/CLARABEL")
    scale = {"n": SAMPLE_SIZE, "M": 3000}.get(fit_scale, fit_scale)
    assert dual.params["fit_scale_value"] == scale
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    hist = np.bincount(sampled - 1, minlength=SAMPLE_SIZE) / len(sampled)
    # the dual optimum is at least as good as the conic solver's (accurate to ~1e-6 here), and
    # the two agree in the implied P(r) and, to the conic solver's accuracy, in π
    f_dual = _mes_objective(dual.p_hat, cond, hist, scale, eta)
    assert f_dual <= _mes_objective(ref.p_hat, cond, hist, scale, eta) + 1e-12
    np.testing.assert_allclose(dual.p_hat @ cond, ref.p_hat @ cond, atol=5e-6)
    np.testing.assert_allclose(dual.p_hat, ref.p_hat, atol=1e-4)
    # simplex feasibility (spec §6.4)
    assert dual.p_hat.min() > 0 and abs(dual.p_hat.sum() - 1) < 1e-12


def test_mes_kkt_and_limits():
    _, sampled = _draw(N_ITEMS, SAMPLE_SIZE, 3000, seed=5)
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    hist = np.bincount(sampled - 1, minlength=SAMPLE_SIZE) / len(sampled)
    scale, eta = 100.0, 0.01
    pi, _, _ = mes(cond, hist, scale, eta, solver="dual")
    # KKT on the simplex interior: ∂f/∂π_R is the same constant for every R
    grad = cond @ (2 * scale * hist * (pi @ cond - hist)) + eta * (np.log(pi) + 1)
    assert np.ptp(grad) < 1e-8
    # η → ∞: uniform; η → 0: the implied P(r) fits a histogram that some π produces (§6.4)
    big, _, _ = mes(cond, hist, scale, 1e6, solver="dual")
    np.testing.assert_allclose(big, 1.0 / N_ITEMS, rtol=1e-4)
    reachable = _power_law(N_ITEMS, 0.6) @ cond
    fits = [np.abs(mes(cond, reachable, scale, eta, solver="dual")[0] @ cond - reachable).max()
            for eta in (1e-3, 1e-5, 1e-7)]
    assert fits[0] > fits[1] > fits[2] and fits[2] < 1e-5


def test_mes_bad_solver():
    _, sampled = _draw(N_ITEMS, SAMPLE_SIZE, 100, seed=5)
    with pytest.raises(ConfigError, match="solver='mosek'"):
        estimate("mes", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, solver="mosek")


def test_mes_auto_uses_dual_and_falls_back_to_cvxpy(monkeypatch):
    from linrec.eval.estimators import em as rankdist

    _, sampled = _draw(N_ITEMS, SAMPLE_SIZE, 500, seed=8)
    kwargs = {"n_items": N_ITEMS, "sample_size": SAMPLE_SIZE}
    auto = estimate("mes", sampled, **kwargs)
    assert auto.solver == "dual-newton"
    np.testing.assert_array_equal(auto.p_hat, estimate("mes", sampled, solver="dual",
                                                       **kwargs).p_hat)

    def stall(*args, **kwargs):
        raise ArithmeticError("stalled")

    monkeypatch.setattr(rankdist, "_mes_dual", stall)
    fallback = estimate("mes", sampled, **kwargs)
    assert fallback.solver.startswith("cvxpy/CLARABEL") and fallback.solver.endswith("stalled)")
    np.testing.assert_allclose(fallback.p_hat, auto.p_hat, atol=1e-4)
    with pytest.raises(ArithmeticError):
        estimate("mes", sampled, solver="dual", **kwargs)


def _simulate_doubling(global_ranks, n_items, n0, n_max, rng):
    """Algorithm 1 of spec §8.2 with replacement, written here per level as an oracle."""
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
    global_ranks = rng.choice(2000, size=1500, p=_power_law(2000)) + 1
    return _simulate_doubling(global_ranks, 2000, 10, 160, rng)


def test_adaptive_em_equals_per_user_em(adaptive_sample):
    sampled, sizes = adaptive_sample
    result = estimate("adaptive_mle", sampled, n_items=2000, sample_size=sizes, n_iter=25)
    reference = _per_user_em(sampled, sizes, 2000, 25)
    np.testing.assert_allclose(result.p_hat, reference, rtol=1e-9, atol=1e-15)
    assert result.iterations == 25 and np.array_equal(result.sample_size, sizes)
    assert result.params["mean_sample_size"] == pytest.approx(sizes.mean())


def test_v15_adaptive_posterior_equal_under_both_likelihoods(adaptive_sample):
    sampled, sizes = adaptive_sample
    paper = estimate("adaptive_mle", sampled, n_items=2000, sample_size=sizes)
    nested = estimate("adaptive_mle", sampled, n_items=2000, sample_size=sizes,
                      likelihood="nested", initial_size=10)
    np.testing.assert_allclose(nested.p_hat, paper.p_hat, rtol=1e-12, atol=1e-15)
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
    # spec §8.3 reference values (N = 2000, n0 = 10, R = 40) at (n_u, r_u) = (20, 2)
    paper_pmf = stats.binom.pmf(1, 19, theta)
    nested_pmf = paper_pmf * np.exp(nested_log_factor(np.array([20]), np.array([2]), n0))[0]
    # (the spec prints 0.1369 for 0.136846, a last-digit rounding slip)
    assert nested_pmf == pytest.approx(0.1369, abs=1e-4) and round(paper_pmf, 4) == 0.2600


def test_adaptive_with_one_size_equals_fixed_mle():
    _, sampled = _draw(N_ITEMS, SAMPLE_SIZE, 800, seed=7)
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


def test_banded_operator_gives_the_dense_results():
    # large N·n use the banded CSR form of P(r|R) (spec §2.5, §13 pitfall 8); same estimates
    from linrec.eval.conditional import conditional_band
    from linrec.eval.estimators.bv import bv
    from linrec.eval.estimators.em import mle
    from linrec.eval.estimators.mn import mn

    n_items, sample_size = 2000, 400
    _, sampled = _draw(n_items, sample_size, 4000, seed=9)
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
