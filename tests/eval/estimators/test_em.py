"""MLE by EM, weighted MLE and MES (Jin et al. 2021b; Li 2023, §2.4; docs/concepts/sampled.md):
the MLE equals a per-user EM, its log-likelihood never decreases and it matches the moments at
convergence, the tolerance stops it early; the weighted MLE is the MLE of the reweighted histogram;
MES by its dual against cvxpy, its KKT conditions and limits, and the solver choice and fallback."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.errors import ConfigError
from linrec.eval.conditional import conditional_matrix
from linrec.eval.estimators import estimate
from linrec.eval.estimators.em import mes
from tests.eval.estimators.conftest import (
    draw,
    draw_histogram,
    per_user_em,
    power_law,
    scipy_law,
)

N_ITEMS, SAMPLE_SIZE = 400, 30


def test_mle_equals_per_user_em():
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 700, seed=0)
    result = estimate("mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, n_iter=40)
    reference = per_user_em(sampled, np.full(len(sampled), SAMPLE_SIZE), N_ITEMS, 40)
    np.testing.assert_allclose(result.p_hat, reference, rtol=1e-9, atol=1e-15)
    assert result.iterations == 40 and result.params == {"init": "uniform", "tol": None}


def test_em_log_likelihood_non_decreasing_and_matches_definition():
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 2000, seed=1)
    result = estimate("mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, n_iter=200)
    trace = result.log_likelihood
    assert len(trace) == 201 and np.all(np.diff(trace) >= -1e-14)
    # the last entry is the average log-likelihood of the returned p_hat, (1/M) Σ_u log p(r_u|Π)
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    assert trace[-1] == pytest.approx(np.mean(np.log((result.p_hat @ cond)[sampled - 1])),
                                      abs=1e-12)


def test_moment_matching_at_convergence():
    # Li 2023, §2.4: with M → ∞ (the histogram equals Aᵀπ_true) the implied P(r) fits P~; EM
    # converges sublinearly here (the MLE is a flat set, Li 2023, eqs. 28–33), so a small N and many
    # steps
    n_items, sample_size = 60, 30
    cond = conditional_matrix(n_items, sample_size)
    counts = np.round(power_law(n_items) @ cond * 1e6).astype(np.int64)
    sampled = np.repeat(np.arange(1, sample_size + 1), counts)
    histogram = counts / counts.sum()
    result = estimate("mle", sampled, n_items=n_items, sample_size=sample_size, n_iter=20000)
    np.testing.assert_allclose(result.p_hat @ cond, histogram, atol=1e-6)
    assert np.all(np.diff(result.log_likelihood) >= -1e-14)
    # and recall at large K is accurate (Li 2023, §2.4)
    true_recall = np.cumsum(power_law(n_items))
    np.testing.assert_allclose(result.curve("recall", 60)[20:], true_recall[20:], atol=5e-3)


def test_em_tolerance_stops_early():
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 2000, seed=2)
    result = estimate("mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, n_iter=5000,
                      tol=1e-6)
    assert result.iterations < 5000 and len(result.log_likelihood) == result.iterations + 1
    assert result.log_likelihood[-1] - result.log_likelihood[-2] < 1e-6 * abs(
        result.log_likelihood[-1])


def test_em_tolerance_stops_at_the_first_iteration_whose_increase_is_below_it():
    """The rule read from a run without a tolerance: EM stops after the first iteration `it`
    whose increase L[it+1] − L[it] is below tol·|L[it+1]|. The tolerance lies between that
    iteration's relative increase measured against L[it+1] and against L[it−1], so a rule that
    read another iteration's log-likelihood would stop elsewhere."""
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 2000, seed=2)
    common = dict(n_items=N_ITEMS, sample_size=SAMPLE_SIZE, n_iter=200)
    full = estimate("mle", sampled, **common).log_likelihood
    increase = np.diff(full)
    it = 5
    tol = 0.5 * (increase[it] / abs(full[it + 1]) + increase[it] / abs(full[it - 1]))
    below = np.flatnonzero(increase < tol * np.abs(full[1:]))
    assert below[0] > it  # the documented rule goes on past `it`
    stopped = estimate("mle", sampled, tol=tol, **common)
    assert stopped.iterations == below[0] + 1
    np.testing.assert_array_equal(stopped.log_likelihood, full[: below[0] + 2])

def test_weighted_mle_is_mle_of_reweighted_histogram():
    # Li 2023, eqs. 34–35: π_new = Σ_r w(r)P~(r) φ(R|r) / Σ_r w(r)P~(r), written out per sampled
    # rank
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 1500, seed=3)
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
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 3000, seed=4)
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
    # simplex feasibility (Li 2023, eqs. 36–38)
    assert dual.p_hat.min() > 0 and abs(dual.p_hat.sum() - 1) < 1e-12


def test_mes_kkt_and_limits():
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 3000, seed=5)
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    hist = np.bincount(sampled - 1, minlength=SAMPLE_SIZE) / len(sampled)
    scale, eta = 100.0, 0.01
    pi, _, _ = mes(cond, hist, scale, eta, solver="dual")
    # KKT on the simplex interior: ∂f/∂π_R is the same constant for every R
    grad = cond @ (2 * scale * hist * (pi @ cond - hist)) + eta * (np.log(pi) + 1)
    assert np.ptp(grad) < 1e-8
    # η → ∞: uniform; η → 0: the implied P(r) fits a histogram that some π produces (Li 2023, eqs.
    # 36–38)
    big, _, _ = mes(cond, hist, scale, 1e6, solver="dual")
    np.testing.assert_allclose(big, 1.0 / N_ITEMS, rtol=1e-4)
    reachable = power_law(N_ITEMS, 0.6) @ cond
    fits = [np.abs(mes(cond, reachable, scale, eta, solver="dual")[0] @ cond - reachable).max()
            for eta in (1e-3, 1e-5, 1e-7)]
    assert fits[0] > fits[1] > fits[2] and fits[2] < 1e-5


def test_mes_bad_solver():
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 100, seed=5)
    with pytest.raises(ConfigError, match="solver='mosek'"):
        estimate("mes", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, solver="mosek")


def test_mes_auto_uses_dual_and_falls_back_to_cvxpy(monkeypatch):
    from linrec.eval.estimators import em as rankdist

    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 500, seed=8)
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


def _blas_threads_now() -> list[int]:
    from threadpoolctl import threadpool_info

    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_em_and_the_mes_dual_run_on_one_blas_thread_and_restore_it(monkeypatch):
    """The EM steps and the MES dual solve are cache-sized BLAS work, faster on one thread
    (linrec.hardware.blas_threads); the caller's BLAS setting is restored afterwards."""
    from threadpoolctl import threadpool_limits

    import linrec.eval.estimators.em as em

    seen = []
    real_step, real_dual = em._em_step_dense, em._mes_dual
    monkeypatch.setattr(em, "_em_step_dense",
                        lambda *a: seen.append(("em", _blas_threads_now())) or real_step(*a))
    monkeypatch.setattr(em, "_mes_dual",
                        lambda *a: seen.append(("mes", _blas_threads_now())) or real_dual(*a))
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 300, seed=3)
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads_now()
        estimate("mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, n_iter=3)
        estimate("mes", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE)
        assert _blas_threads_now() == before
    assert {kind for kind, _ in seen} == {"em", "mes"}
    assert all(threads and set(threads) == {1} for _, threads in seen), seen


@pytest.mark.parametrize("kind", ["dense", "csr", "banded"])
@pytest.mark.parametrize("n_iter", [1, 2, 3])
def test_every_em_step_equals_the_textbook_em_on_every_operator(kind, n_iter):
    """After 1, 2 and 3 iterations the MLE's π is the textbook EM's, written out here
    (π ← π ⊙ A(w ⊘ Aᵀπ) with Aᵀπ from the π of the same iteration), whether A is dense, sparse
    or cut into the banded blocks of large catalogues: a step that read a stale Aᵀπ would keep
    a rising likelihood for a few steps yet give another π."""
    import scipy.sparse as sp

    from linrec.eval.conditional import conditional_operator
    from linrec.eval.estimators.em import em_mixture

    n_items, sample_size = 3000, 40
    operator = conditional_operator(n_items, sample_size, banded=kind == "banded")
    dense = operator.toarray() if sp.issparse(operator) else np.asarray(operator)
    if kind == "csr":
        operator = sp.csr_array(dense)
    elif kind == "dense":
        operator = dense
    weights = draw_histogram(n_items, sample_size, 2000, seed=4)
    pi = np.full(n_items, 1.0 / n_items)
    for _ in range(n_iter):  # the textbook EM (Li 2023, eqs. 28–33)
        mixture = dense.T @ pi
        ratio = np.divide(weights, mixture, out=np.zeros_like(weights), where=weights > 0)
        pi = pi * (dense @ ratio)
    found, trace, done = em_mixture(operator, weights, n_iter, np.full(n_items, 1.0 / n_items))
    assert done == n_iter
    np.testing.assert_allclose(found, pi / pi.sum(), rtol=1e-10, atol=1e-16)
    mixture = dense.T @ pi
    observed = weights > 0
    assert trace[-1] == pytest.approx(float(weights[observed] @ np.log(mixture[observed])),
                                      rel=1e-12)


def test_mes_is_the_minimiser_of_its_objective_found_here_over_the_simplex():
    """MES (Li 2023, eqs. 36–38) against a minimisation done here: s·Σ_r P~(r)((Aᵀπ)_r − P~(r))²
    − η·H(π) (written out in `_mes_objective`), minimised over π = softmax(z) by L-BFGS with its
    gradient written out; the estimator's π reaches the same objective (1e-10) and the same π."""
    from scipy import optimize

    n_items, sample_size, scale, eta = 60, 8, 8.0, 0.01
    _, sampled = draw(n_items, sample_size, 2000, seed=9)
    cond = conditional_matrix(n_items, sample_size)
    hist = np.bincount(sampled - 1, minlength=sample_size) / len(sampled)

    def objective(z):
        pi = np.exp(z - z.max())
        pi /= pi.sum()
        residual = cond.T @ pi - hist
        value = scale * np.sum(hist * residual ** 2) + eta * np.sum(pi * np.log(pi))
        grad_pi = 2 * scale * cond @ (hist * residual) + eta * (np.log(pi) + 1)
        return value, pi * (grad_pi - pi @ grad_pi)  # through the softmax

    found = optimize.minimize(objective, np.zeros(n_items), jac=True, method="L-BFGS-B",
                              options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 20000})
    pi_here = np.exp(found.x - found.x.max())
    pi_here /= pi_here.sum()
    mes = estimate("mes", sampled, n_items=n_items, sample_size=sample_size, fit_scale=scale,
                   entropy_weight=eta, solver="dual").p_hat
    assert _mes_objective(mes, cond, hist, scale, eta) <= \
        _mes_objective(pi_here, cond, hist, scale, eta) + 1e-10
    np.testing.assert_allclose(mes, pi_here, atol=1e-6)


def _weighted_em(law: np.ndarray, histogram: np.ndarray, weights: np.ndarray,
                 n_iter: int) -> np.ndarray:
    """Li 2023, eqs. 34–35 written out: EM on the re-weighted histogram w·P~ / Σ w·P~ from the
    uniform start, `n_iter` steps p(R) ← Σ_r h̃_r p(R)P(r|R) / Σ_R' p(R')P(r|R')."""
    h = weights * histogram
    h = h / h.sum()
    p = np.full(law.shape[0], 1.0 / law.shape[0])
    for _ in range(n_iter):
        joint = p[:, None] * law  # (N, n)
        p = (joint / joint.sum(axis=0, keepdims=True)) @ h
    return p


@pytest.mark.parametrize("weights, settings", [
    (lambda r: 1.0 / (1.0 + (r - 1.0) / 10.0), {}),  # the defaults: "ap", C = 10, 100 steps
    (lambda r: 1.0 / np.log2(1.0 + r / 3.0), {"weights": "ndcg", "weight_scale": 3.0,
                                              "n_iter": 40}),
    (lambda r: 1.0 / r, {"weights": lambda r: 1.0 / r, "n_iter": 40}),
    (lambda r: np.r_[1.0, 0.0, np.ones(len(r) - 2)], {"weights": np.r_[1.0, 0.0, np.ones(8)],
                                                     "n_iter": 40}),
])
def test_weighted_mle_is_the_em_of_the_reweighted_histogram(weights, settings):
    n_items, sample_size = 30, 10
    _, sampled = draw(n_items, sample_size, 400, seed=4)
    law = scipy_law(n_items, sample_size)
    histogram = np.bincount(sampled - 1, minlength=sample_size) / len(sampled)
    n_iter = settings.get("n_iter", 100)
    expected = _weighted_em(law, histogram, weights(np.arange(1.0, sample_size + 1)), n_iter)
    result = estimate("weighted_mle", sampled, n_items=n_items, sample_size=sample_size,
                      **settings)
    np.testing.assert_allclose(result.p_hat, expected, rtol=1e-9, atol=1e-14)
    kind = settings.get("weights", "ap")
    assert result.params == {"weights": kind if isinstance(kind, str) else "custom",
                             "weight_scale": settings.get("weight_scale", 10.0),
                             "init": "uniform", "tol": None}
    assert result.iterations == n_iter and result.solver == "em"
    assert len(result.log_likelihood) == n_iter + 1


@pytest.mark.parametrize("settings, match", [
    ({"weight_scale": 0.0}, r"^weight_scale=0\.0 is out of range"),
    ({"weights": "map"}, r"weights='map' must be 'ap', 'ndcg'"),
    ({"weights": np.ones(9)}, "of length sample_size=10"),
    ({"weights": np.r_[np.ones(9), np.nan]}, "must be finite"),
    ({"weights": np.r_[np.ones(9), -1.0]}, "must be finite, >= 0"),
    ({"weights": np.r_[np.zeros(9), 1.0]}, "zero on every observed sampled rank"),
])
def test_weighted_mle_refuses_weights_that_cannot_weigh(settings, match):
    sampled = np.array([1, 2, 2, 5])
    with pytest.raises(ConfigError, match=match):
        estimate("weighted_mle", sampled, n_items=30, sample_size=10, **settings)
    # a weight of exactly 0 on unobserved ranks, and a scale below 1, are allowed
    estimate("weighted_mle", sampled, n_items=30, sample_size=10, n_iter=3,
             weights=np.r_[1.0, 1.0, np.zeros(8)])
    estimate("weighted_mle", sampled, n_items=30, sample_size=10, n_iter=3, weight_scale=0.5)


def test_weighted_mle_called_directly_has_the_estimators_defaults():
    from linrec.eval.estimators.em import weighted_mle

    law = scipy_law(30, 10)
    histogram = np.bincount(draw(30, 10, 400, seed=4)[1] - 1, minlength=10) / 400
    p_hat, trace, iterations = weighted_mle(law, histogram)
    ap = 1.0 / (1.0 + (np.arange(1.0, 11.0) - 1.0) / 10.0)
    np.testing.assert_allclose(p_hat, _weighted_em(law, histogram, ap, 100), rtol=1e-9,
                               atol=1e-14)
    assert iterations == 100 and len(trace) == 101


def test_mes_fit_scale_accepts_any_positive_number():
    from linrec.eval.estimators.em import fit_scale_value

    assert fit_scale_value(0.5, 10, 400) == 0.5 and fit_scale_value("M", 10, 400) == 400.0
    for bad in (0.0, -1.0, "m"):
        with pytest.raises(ConfigError, match="must be 'n', 'M' or a positive number"):
            fit_scale_value(bad, 10, 400)


def test_weighted_mle_passes_its_start_and_tolerance_to_the_em():
    _, sampled = draw(30, 10, 400, seed=4)
    start = np.linspace(2.0, 1.0, 30) / np.linspace(2.0, 1.0, 30).sum()
    common = dict(n_items=30, sample_size=10, n_iter=2000)
    stopped = estimate("weighted_mle", sampled, tol=1e-6, **common)
    assert stopped.iterations < 2000 and stopped.params["tol"] == 1e-6
    from_start = estimate("weighted_mle", sampled, init=start, n_iter=5, n_items=30,
                          sample_size=10)
    uniform = estimate("weighted_mle", sampled, n_iter=5, n_items=30, sample_size=10)
    assert from_start.params["init"] == "array"
    assert not np.allclose(from_start.p_hat, uniform.p_hat)


def test_mes_through_cvxpy_meets_the_same_optimality_conditions():
    """CLARABEL's solution of the MES objective written out in test_mes_kkt_and_limits: the same
    KKT conditions (to the conic solver's accuracy), a distribution summing to 1, and a record
    with the solver's iteration count and status; MES's default η is 0.01."""
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 3000, seed=5)
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    hist = np.bincount(sampled - 1, minlength=SAMPLE_SIZE) / len(sampled)
    scale, eta = 100.0, 0.01
    pi, iterations, solver = mes(cond, hist, scale, eta, solver="clarabel")
    assert abs(pi.sum() - 1) < 1e-14 and iterations > 0
    assert solver == "cvxpy/CLARABEL (optimal)"
    grad = cond @ (2 * scale * hist * (pi @ cond - hist)) + eta * (np.log(pi) + 1)
    assert np.ptp(grad) < 1e-4
    dual, _, _ = mes(cond, hist, scale, eta, solver="dual")
    np.testing.assert_allclose(pi, dual, rtol=1e-3)
    result = estimate("mes", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE,
                      solver="clarabel")
    assert result.params == {"fit_scale": "n", "fit_scale_value": float(SAMPLE_SIZE),
                             "entropy_weight": 0.01}
    assert result.iterations > 0 and result.solver.startswith("cvxpy/CLARABEL")


def test_the_mle_record_names_its_tolerance():
    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 500, seed=6)
    result = estimate("mle", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, tol=1e-4,
                      n_iter=1000)
    assert result.params == {"init": "uniform", "tol": 1e-4} and result.iterations < 1000


def test_mes_defaults_checks_and_a_sparse_law():
    """η defaults to 0.01 and must be > 0; a histogram on every rank takes the dual solver; a
    sparse law with an unobserved rank takes the cvxpy path as a dense one does."""
    import scipy.sparse as sp

    _, sampled = draw(N_ITEMS, SAMPLE_SIZE, 3000, seed=5)
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    hist = np.bincount(sampled - 1, minlength=SAMPLE_SIZE) / len(sampled)
    assert np.all(hist > 0)
    default = mes(cond, hist, 100.0)
    np.testing.assert_array_equal(default[0], mes(cond, hist, 100.0, 0.01)[0])
    assert default[2] == "dual-newton"
    for eta in (0.0, -1.0):
        with pytest.raises(ConfigError, match=rf"^entropy_weight={eta} is out of range"):
            mes(cond, hist, 100.0, eta)
    gap = hist.copy()
    gap[3] = 0.0
    gap /= gap.sum()
    dense = mes(cond, gap, 100.0, solver="clarabel")[0]
    np.testing.assert_allclose(mes(sp.csr_matrix(cond), gap, 100.0, solver="clarabel")[0], dense,
                               rtol=1e-9, atol=1e-12)


def test_the_mes_dual_counts_its_checks_and_stops_at_max_iter():
    """A histogram that the uniform prior produces exactly is the dual's start (λ = 0, π
    uniform): it stops at its first gradient check, iteration 1. A generic one converges in n
    iterations: `max_iter=n` reaches it, `max_iter=n − 1` says it did not converge in n − 1."""
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    uniform = np.full(N_ITEMS, 1.0 / N_ITEMS) @ cond
    # at λ = 0 the residual is s·0 + P~ − Aᵀπ, zero for P~ = Aᵀ·uniform (and η·H is flat there)
    _, first, used = mes(cond, uniform, 10.0, 0.01, solver="dual")
    assert (first, used) == (1, "dual-newton")
    hist = draw_histogram(N_ITEMS, SAMPLE_SIZE, 3000, seed=5)
    pi, n, _ = mes(cond, hist, 100.0, 0.01, solver="dual")
    assert n > 2
    again, same, _ = mes(cond, hist, 100.0, 0.01, solver="dual", max_iter=n)
    assert same == n and np.array_equal(again, pi)
    with pytest.raises(ArithmeticError, match=f"did not converge in {n - 1} iterations"):
        mes(cond, hist, 100.0, 0.01, solver="dual", max_iter=n - 1)


def test_the_mes_dual_below_its_rounding_floor_says_it_did_not_converge():
    """A tolerance no float64 gradient can reach: the Newton steps stop shrinking the gradient
    at its rounding floor, far above 1000·tol, and the dual says it did not converge (the
    "auto" solver then falls back to cvxpy)."""
    cond = conditional_matrix(N_ITEMS, SAMPLE_SIZE)
    hist = draw_histogram(N_ITEMS, SAMPLE_SIZE, 3000, seed=5)
    with pytest.raises(ArithmeticError, match="did not converge in 200 iterations"):
        mes(cond, hist, 100.0, 0.01, solver="dual", tol=1e-30)


def test_the_mes_dual_is_exactly_invariant_to_scaling_s_and_eta_together():
    """s and η times c scale the dual's objective by c and leave its optimum π as it is. For
    c a power of two every float operation scales exactly, so a solver whose stopping tests are
    relative to |f| takes the same steps: the same π bit for bit and the same iteration count
    at c = 2^10 and 2^40, down to the rounding floor (tol = 1e-16)."""
    cond = conditional_matrix(300, 20)
    hist = draw_histogram(300, 20, 3000, seed=5)
    small, n_small, _ = mes(cond, hist, 1e5 * 2.0 ** 10, 0.01 * 2.0 ** 10, solver="dual",
                            tol=1e-16)
    large, n_large, _ = mes(cond, hist, 1e5 * 2.0 ** 40, 0.01 * 2.0 ** 40, solver="dual",
                            tol=1e-16)
    assert n_small == n_large and np.array_equal(small, large)


def test_the_mes_dual_stops_where_its_newton_steps_stop_changing_the_gradient():
    """Near 1e-17 the Newton step falls below the multipliers' rounding, the same gradient comes
    back, and the dual stops there (the floor, about 3e-17 here, is within 1000·tol of a
    tolerance no float64 gradient reaches) instead of repeating the step until `max_iter`."""
    cond = conditional_matrix(300, 20)
    hist = draw_histogram(300, 20, 3000, seed=0)
    pi, iterations, _ = mes(cond, hist, 10.0, 1.0, solver="dual", tol=1e-17)
    assert iterations < 20
    np.testing.assert_allclose(pi, mes(cond, hist, 10.0, 1.0, solver="dual")[0], rtol=1e-9)


def test_the_mes_dual_tries_the_full_newton_step_first(monkeypatch):
    """The line search starts from the full Newton step, which on this well-damped instance
    (s = 10, η = 1) passes the Armijo test at every iteration: one evaluation of the objective
    at the start and one per step, as many as the iterations it reports."""
    import linrec.eval.estimators.em as em

    calls = []
    logsumexp = em.logsumexp
    monkeypatch.setattr(em, "logsumexp", lambda x: calls.append(1) or logsumexp(x))
    cond = conditional_matrix(300, 20)
    _, iterations, _ = mes(cond, draw_histogram(300, 20, 3000, seed=5), 10.0, 1.0, solver="dual")
    assert iterations > 3 and len(calls) == iterations

def test_the_mes_dual_line_search_carries_a_hard_instance_to_the_optimum():
    """η = 1e-6 against s = 1000: undamped Newton steps overshoot and wander (200 iterations
    are not enough), the Armijo search reaches the optimum, whose KKT conditions on the simplex
    (the objective's gradient in π equal over π's support, written out here) hold."""
    n_items, sample_size = 300, 20
    cond = conditional_matrix(n_items, sample_size)
    hist = draw_histogram(n_items, sample_size, 3000, seed=1)
    scale, eta = 1000.0, 1e-6
    pi, iterations, _ = mes(cond, hist, scale, eta, solver="dual")
    assert iterations < 200 and abs(pi.sum() - 1) < 1e-12
    support = pi > 1e-30
    grad = (cond @ (2 * scale * hist * (pi @ cond - hist)))[support] + \
        eta * (np.log(pi[support]) + 1)
    assert np.ptp(grad) < 1e-7
    assert _mes_objective(pi, cond, hist, scale, eta) <= \
        _mes_objective(np.full(n_items, 1.0 / n_items), cond, hist, scale, eta)


def test_the_em_start_is_a_positive_distribution_and_is_left_untouched():
    """A given start is normalised in float64 (from integers or float32 too); a zero, negative,
    infinite or NaN entry or a wrong length is refused; EM leaves the caller's start array as
    it was; zero iterations return the start; a batch of histograms has each sample's own
    log-likelihood trace from its first entry on."""
    from linrec.errors import ConfigError
    from linrec.eval.conditional import conditional_matrix
    from linrec.eval.estimators.em import em_mixture, initial_distribution, mle

    for start in (np.array([1, 2, 3, 4]), np.array([1, 2, 3, 4], np.float32),
                  np.array([0.1, 0.2, 0.3, 0.4])):
        got = initial_distribution(start, 4)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, start.astype(np.float64) / start.astype(np.float64).sum(),
                                   rtol=1e-15)
    for bad in ([1.0, 0.0, 1.0, 1.0], [1.0, -1.0, 1.0, 1.0], [1.0, np.inf, 1.0, 1.0],
                [1.0, np.nan, 1.0, 1.0], [1.0, 1.0, 1.0]):
        with pytest.raises(ConfigError, match="positive finite array of length n_items=4"):
            initial_distribution(np.array(bad), 4)
    cond = conditional_matrix(30, 5)
    hist = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    start = np.linspace(1.0, 2.0, 30)
    start /= start.sum()
    kept = start.copy()
    em_mixture(cond, hist, 20, start)
    np.testing.assert_array_equal(start, kept)
    p_hat, trace, iterations = mle(cond, hist, n_iter=0, init=start)
    np.testing.assert_allclose(p_hat, start, rtol=1e-14)
    assert iterations == 0 and len(trace) == 1
    other = np.array([0.1, 0.1, 0.2, 0.3, 0.3])
    _, batched, _ = mle(cond, np.stack([hist, other], axis=1), n_iter=5)
    for column, h in enumerate((hist, other)):
        np.testing.assert_allclose(batched[:, column], mle(cond, h, n_iter=5)[1], rtol=1e-13)


@pytest.mark.parametrize("tol", [1e-3, 1e-4, 1e-5])
def test_em_stops_at_the_first_step_whose_relative_gain_is_below_tol(tol):
    """With tol, EM stops after the first iteration whose log-likelihood gain is below tol
    times the new log-likelihood's magnitude, found here on the trace of a run without tol; the
    two traces agree up to there."""
    from linrec.eval.conditional import conditional_matrix
    from linrec.eval.estimators.em import mle

    rng = np.random.default_rng(2)
    cond = conditional_matrix(80, 10)
    hist = rng.dirichlet(np.ones(10))
    _, full, _ = mle(cond, hist, n_iter=500)
    gains = np.diff(full)
    first = next(i for i in range(len(gains)) if gains[i] < tol * abs(full[i + 1]))
    _, trace, iterations = mle(cond, hist, n_iter=500, tol=tol)
    assert iterations == first + 1
    np.testing.assert_allclose(trace, full[: first + 2], rtol=1e-13)


@pytest.mark.parametrize("trace, fires", [
    ([-20.0, -20.0 - 3e-9], True),      # a decrease above 1e-10 |final log-likelihood|
    ([-20.0, -20.0 - 1e-9], False),     # and one below it
    ([-1.0, -1.0 - 1.8e-10], True),     # below |ll| = 1 the bound is 1e-10 itself
    ([-40.0, -20.0, -20.0 - 1e-9, -2.0], True),  # the bound scales with the final value only
])
def test_em_refuses_a_log_likelihood_that_decreases_beyond_rounding(monkeypatch, trace, fires):
    """EM's log-likelihood never decreases (Li 2023, eqs. 28–33): a step that lowers it by more
    than 1e-10 · max(1, |final log-likelihood|) raises, a smaller decrease (rounding) does
    not. The steps here are scripted so that the trace is exactly the given one."""
    import linrec.eval.estimators.em as em

    scripted = iter(np.exp(trace[1:]))
    monkeypatch.setattr(em, "_em_step_dense",
                        lambda cond, pi, ratio: np.full((1, 1), next(scripted)))
    cond = np.full((3, 1), np.exp(trace[0]))

    def run():
        return em.em_mixture(cond, np.array([1.0]), len(trace) - 1, np.full(3, 1 / 3))

    if fires:
        with pytest.raises(ArithmeticError, match="log-likelihood decreased"):
            run()
    else:
        np.testing.assert_allclose(run()[1], trace, rtol=1e-15)


@pytest.mark.parametrize("status, accepted", [("optimal", True), ("optimal_inaccurate", True),
                                              ("infeasible", False), ("unbounded", False)])
def test_mes_through_cvxpy_uses_the_asked_solver_and_refuses_a_failed_solve(
        monkeypatch, status, accepted):
    """The cvxpy path solves with the solver it was asked for; it accepts an optimal (or
    optimal but inaccurate) status, refuses any other even with a value, and reports the
    solver's iteration count, 0 when the solver gives none."""
    import cvxpy as cp

    from linrec.eval.conditional import conditional_matrix
    from linrec.eval.estimators.em import mes

    solve, asked = cp.Problem.solve, []

    def solve_and_report(problem, *args, **kwargs):
        asked.append(kwargs.get("solver"))
        value = solve(problem, *args, **kwargs)
        problem._status = status
        problem._solver_stats.num_iters = None
        return value

    monkeypatch.setattr(cp.Problem, "solve", solve_and_report)
    cond = conditional_matrix(40, 6)
    hist = np.array([0.4, 0.3, 0.1, 0.1, 0.05, 0.05])
    if accepted:
        p_hat, iterations, solver = mes(cond, hist, 100.0, 0.01, solver="clarabel")
        assert iterations == 0 and solver == f"cvxpy/CLARABEL ({status})"
        assert abs(p_hat.sum() - 1) < 1e-12 and np.all(p_hat >= 0)
    else:
        with pytest.raises(ArithmeticError, match=f"finished with status {status}"):
            mes(cond, hist, 100.0, 0.01, solver="clarabel")
    assert asked == ["CLARABEL"]
