"""The Krichene–Rendle corrections (Rendle 2019, §4; Krichene & Rendle 2020): the naive reading of
sampled ranks as global ones, the unbiased-rank correction, constrained least squares against
cvxpy, and least squares as weighted least squares."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.eval.conditional import conditional_matrix
from linrec.eval.estimators import estimate
from tests.eval.estimators.conftest import N_ITEMS, SAMPLE_SIZE, metric_target, scipy_law


def test_naive_reads_sampled_rank_as_global(small):
    sampled, hist, _, _ = small
    result = estimate("naive", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE)
    for k in (1, 3, 10):
        assert result.curve("recall", k)[-1] == pytest.approx(np.mean(sampled <= k), abs=1e-15)
    ndcg_naive = np.mean((sampled <= 10) / np.log2(sampled + 1))
    assert result.curve("ndcg", 10)[-1] == pytest.approx(ndcg_naive, abs=1e-15)


@pytest.mark.parametrize("n_items, sample_size", [(37, 5), (300, 20), (1000, 100)])
def test_naive_and_unbiased_rank_at_every_k_equal_each_targets_metric(n_items, sample_size):
    """Every metric at every K from 1 to N equals the mean over the targets of the metric of
    each target's rank estimate, written out here: the sampled rank r itself (naive) and
    R̂ = 1 + (r − 1)(N − 1)/(n − 1) (unbiased rank; NDCG and AP gains at ⌈R̂⌉, the position the
    estimate puts the mass at, recall at R̂ itself)."""
    from tests.eval.estimators.conftest import draw

    _, sampled = draw(n_items, sample_size, 600, seed=7)
    r_hat = 1 + (sampled - 1) * (n_items - 1) / (sample_size - 1)
    placed = np.ceil(r_hat - 1e-9)
    ks = np.arange(1, n_items + 1)[:, None]
    for name, rank, at in (("naive", sampled, sampled), ("unbiased_rank", r_hat, placed)):
        result = estimate(name, sampled, n_items=n_items, sample_size=sample_size)
        expected = {
            "recall": np.mean(rank[None, :] <= ks, axis=1),
            "ndcg": np.mean((at[None, :] <= ks) / np.log2(at[None, :] + 1), axis=1),
            "ap": np.mean((at[None, :] <= ks) / at[None, :], axis=1),
        }
        for metric, values in expected.items():
            np.testing.assert_allclose(result.curve(metric, n_items), values, rtol=0,
                                       atol=1e-13, err_msg=f"{name} {metric}")


def test_unbiased_rank_places_mass_at_unbiased_rank(small):
    sampled, _, _, _ = small
    result = estimate("unbiased_rank", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE)
    r_hat = 1 + (sampled - 1) * (N_ITEMS - 1) / (SAMPLE_SIZE - 1)  # Krichene & Rendle 2020
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
        fit = cp.sum(cp.multiply(prior, cp.square(cond @ x - metric_target("ndcg", k))))
        cp.Problem(cp.Minimize(fit), [x[:-1] >= x[1:]]).solve(solver="CLARABEL")
        assert np.all(np.diff(x.value) <= 1e-7)
        assert est[k - 1] == pytest.approx(hist @ x.value, abs=1e-6)
    assert np.all(result.p_hat[20:] == 0)



def exact_cls(cond, hist, prior, target, nonnegative):
    """hist @ x of CLS's optimum, solved exactly (Lawson–Hanson's active set, scipy's nnls) in
    the increments x_r = Σ_{j>=r} d_j: d_j >= 0 for j < n, and d_n >= 0 or free (projected out
    of the problem, then recovered from the others)."""
    from scipy.optimize import nnls

    n = cond.shape[1]
    design = (np.sqrt(prior)[:, None] * cond) @ np.triu(np.ones((n, n)))
    rhs = np.sqrt(prior) * target
    if nonnegative:
        d = nnls(design, rhs)[0]
    else:
        last = design[:, -1]
        project = np.eye(len(rhs)) - np.outer(last, last) / (last @ last)
        z = nnls(project @ design[:, :-1], project @ rhs)[0]
        d = np.append(z, last @ (rhs - design[:, :-1] @ z) / (last @ last))
    return hist @ np.cumsum(d[::-1])[::-1]


@pytest.mark.parametrize("nonnegative", [False, True])
@pytest.mark.parametrize("metric", ["recall", "ndcg", "ap"])
def test_cls_is_the_exact_optimum_at_every_k(small, metric, nonnegative):
    """CLS solves its bound-constrained problem exactly (bounded-variable least squares), not to
    an iterative solver's tolerance: equal to an active-set solution to 1e-13 at K = 1..20 (an
    interior-point or trust-region solve is off by about 1e-9)."""
    from linrec.eval.estimators.corrected import cls
    from linrec.eval.metrics import rank_gain

    _, hist, prior, cond = small
    p_hat = cls(cond, hist, prior, metric, 20, nonnegative)
    estimates = np.cumsum(p_hat * rank_gain(metric, np.arange(1, N_ITEMS + 1)))[:20]
    expected = [exact_cls(cond, hist, prior, metric_target(metric, k), nonnegative)
                for k in range(1, 21)]
    np.testing.assert_allclose(estimates, expected, rtol=0, atol=1e-13)

def test_ls_is_weighted_least_squares(small):
    # Krichene & Rendle 2020 on a well-posed case (recall at a large K): x = argmin ||√D (A x − b)||
    _, hist, prior, cond = small
    sampled = np.repeat(np.arange(1, SAMPLE_SIZE + 1), 3)
    result = estimate("ls", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior)
    target = metric_target("recall", 200)
    x, *_ = np.linalg.lstsq(np.sqrt(prior)[:, None] * cond, np.sqrt(prior) * target, rcond=None)
    assert result.p_hat @ target == pytest.approx(np.full(SAMPLE_SIZE, 1 / SAMPLE_SIZE) @ x,
                                                  abs=1e-9)


def test_unbiased_rank_with_one_or_two_sampled_positions():
    """n = 1: every target is ranked first, the mass stays at R = 1; n = 2: R̂ = 1 and N. The
    result always has N entries, and the naive reading allows n = N."""
    from linrec.eval.estimators.corrected import naive, unbiased_rank

    np.testing.assert_array_equal(unbiased_rank(np.array([1.0]), 5), [1.0, 0, 0, 0, 0])
    np.testing.assert_array_equal(unbiased_rank(np.array([0.75, 0.25]), 5),
                                  [0.75, 0, 0, 0, 0.25])
    np.testing.assert_array_equal(unbiased_rank(np.array([0.5, 0.3, 0.2]), 6),  # 1, 3.5, 6
                                  [0.5, 0, 0, 0.3, 0, 0.2])
    np.testing.assert_array_equal(naive(np.array([0.5, 0.5]), 2), [0.5, 0.5])
    with pytest.raises(Exception, match="sample_size <= n_items"):
        naive(np.array([0.5, 0.25, 0.25]), 2)


@pytest.mark.parametrize("rcond", [None, 0.3])
def test_ls_is_the_minimum_norm_weighted_solution(rcond):
    """P̂ = √D y with y the minimum-norm solution of (√D A)ᵀ y = P~ (np.linalg.lstsq, written
    here), the condition matrix given sparse, and its result's prior, settings and rank."""
    import scipy.sparse as sp

    from linrec.eval.estimators.corrected import ls

    n_items, sample_size = 40, 6
    law = scipy_law(n_items, sample_size)
    prior = np.linspace(2.0, 0.5, n_items)
    prior /= prior.sum()
    hist = np.array([0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
    weighted = (np.sqrt(prior)[:, None] * law).T  # (n, N)
    y, _, rank, s = np.linalg.lstsq(weighted, hist,
                                    rcond=rcond if rcond is not None else None)
    if rcond is not None:  # lstsq's rcond is relative to the largest singular value too
        assert np.sum(s > rcond * s[0]) == rank < sample_size
    p_hat, solver = ls(sp.csr_matrix(law), hist, prior, rcond)
    np.testing.assert_allclose(p_hat, np.sqrt(prior) * y, rtol=0, atol=1e-12)
    assert solver == f"svd(rank={rank})"


def test_ls_drops_exactly_zero_singular_values_at_rcond_zero():
    from linrec.eval.estimators.corrected import ls

    law = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])  # rank 1
    p_hat, solver = ls(law, np.array([0.6, 0.4]), np.full(3, 1 / 3), rcond=0.0)
    assert solver == "svd(rank=1)" and np.all(np.isfinite(p_hat))
    np.testing.assert_allclose(p_hat, [0.3, 0.3, 0.0], atol=1e-15)


def test_ls_default_cutoff_is_numpys_and_relative_to_the_largest_singular_value():
    """Singular values 1, 2e-16 (times 1/√3 from the uniform prior): below eps·max(N, n) of
    the largest, so dropped, as np.linalg.lstsq drops it."""
    from linrec.eval.estimators.corrected import ls

    law = np.array([[1.0, 0.0], [0.0, 2e-16], [0.0, 0.0]])
    prior = np.full(3, 1 / 3)
    p_hat, solver = ls(law, np.array([0.6, 0.4]), prior)
    y = np.linalg.lstsq((np.sqrt(prior)[:, None] * law).T, np.array([0.6, 0.4]), rcond=None)[0]
    assert solver == "svd(rank=1)"
    np.testing.assert_allclose(p_hat, np.sqrt(prior) * y, rtol=0, atol=1e-15)


def test_ls_through_estimate_records_its_prior_settings_and_rank():
    sampled = np.array([1, 1, 2, 3, 3, 6])
    result = estimate("ls", sampled, n_items=40, sample_size=6, rcond=0.3)
    assert result.prior == "uniform" and result.params == {"rcond": 0.3}
    assert result.name == "ls"
    full = estimate("ls", sampled, n_items=40, sample_size=6)
    assert int(result.solver[len("svd(rank="):-1]) < int(full.solver[len("svd(rank="):-1])
    # prior="run" is the estimator's own default source: the uniform prior for LS
    run = estimate("ls", sampled, n_items=40, sample_size=6, prior="run")
    assert run.prior == "uniform" and np.array_equal(run.p_hat, full.p_hat)
    # a prior estimated from the run takes its settings
    short, long = (estimate("ls", sampled, n_items=40, sample_size=6, prior="mle",
                            prior_params={"n_iter": n}) for n in (2, 50))
    assert short.prior == "mle" and not np.allclose(short.p_hat, long.p_hat)


@pytest.mark.parametrize("nonnegative", [False, True])
def test_cls_of_a_sparse_law_with_and_without_the_sign_constraint(small, nonnegative):
    """CLS from a sparse P(r|R) against cvxpy with x_1 >= ... >= x_n (and x_n >= 0 when
    nonnegative, which makes every x >= 0) at K = 1..k_max; the default k_max is 50."""
    import cvxpy as cp
    import scipy.sparse as sp

    from linrec.eval.estimators.corrected import cls

    _, hist, prior, cond = small
    # a metric whose unconstrained CLS weights go negative at the tail
    p_hat = cls(sp.csr_matrix(cond), hist, prior, "ap", 5, nonnegative)
    est = np.cumsum(p_hat * (1.0 / np.arange(1, N_ITEMS + 1)))  # AP@K with w(K) = 1/K
    for k in range(1, 6):
        x = cp.Variable(SAMPLE_SIZE)
        fit = cp.sum(cp.multiply(prior, cp.square(cond @ x - metric_target("ap", k))))
        constraints = [x[:-1] >= x[1:]] + ([x[-1] >= 0] if nonnegative else [])
        cp.Problem(cp.Minimize(fit), constraints).solve(solver="CLARABEL")
        assert est[k - 1] == pytest.approx(hist @ x.value, abs=1e-6)
    if not nonnegative:  # the default
        np.testing.assert_array_equal(cls(cond, hist, prior, "ap", 5), p_hat)
    result = estimate("cls", np.array([1, 2, 2, 9]), n_items=N_ITEMS, sample_size=SAMPLE_SIZE)
    assert result.params == {"metric": "recall", "k_max": 50, "nonnegative": False}
    assert np.all(result.p_hat[50:] == 0) and np.any(result.p_hat[45:50] != 0)
    with pytest.raises(Exception, match=r"metric='precision' .*; cls corrects every curve "
                                        r"metric but precision$"):
        cls(cond, hist, prior, "precision", 5)


def test_cls_names_its_prior_and_solver_and_passes_its_settings_on():
    """As LS: the uniform prior by default, also for prior="run" (its own default source), a
    prior estimated from the run with that prior's settings, the sign constraint passed to the
    solve (and recorded), and a pooled prior refused (CLS has no mle/mes source to pool)."""
    from linrec.errors import ConfigError

    sampled = np.array([1, 1, 1, 2, 2, 3, 4, 6, 6, 6])
    call = dict(n_items=40, sample_size=6, metric="ap", k_max=5)
    default = estimate("cls", sampled, **call)
    assert (default.name, default.prior, default.solver) == ("cls", "uniform", "qr+bvls")
    run = estimate("cls", sampled, **call, prior="run")
    assert run.prior == "uniform" and np.array_equal(run.p_hat, default.p_hat)
    short, long = (estimate("cls", sampled, **call, prior="mle", prior_params={"n_iter": n})
                   for n in (2, 50))
    assert short.prior == "mle" and not np.allclose(short.p_hat, long.p_hat)
    signed = estimate("cls", sampled, **call, nonnegative=True)
    assert signed.params == {"metric": "ap", "k_max": 5, "nonnegative": True}
    assert np.all(np.cumsum(signed.p_hat / np.arange(1, 41)) >= -1e-12)
    assert not np.allclose(signed.p_hat, default.p_hat)
    with pytest.raises(ConfigError, match="prior='pooled' needs an mle/mes prior"):
        estimate("cls", sampled, **call, prior="pooled", prior_runs=[sampled])
