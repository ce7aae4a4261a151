"""The Krichene–Rendle corrections (Rendle 2019, §4; Krichene & Rendle 2020): the naive reading of
sampled ranks as global ones, the unbiased-rank correction, constrained least squares against
cvxpy, and least squares as weighted least squares."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.eval.conditional import conditional_matrix
from linrec.eval.estimators import estimate
from tests.eval.estimators.conftest import N_ITEMS, SAMPLE_SIZE, metric_target


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


def test_ls_is_weighted_least_squares(small):
    # Krichene & Rendle 2020 on a well-posed case (recall at a large K): x = argmin ||√D (A x − b)||
    _, hist, prior, cond = small
    sampled = np.repeat(np.arange(1, SAMPLE_SIZE + 1), 3)
    result = estimate("ls", sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior)
    target = metric_target("recall", 200)
    x, *_ = np.linalg.lstsq(np.sqrt(prior)[:, None] * cond, np.sqrt(prior) * target, rcond=None)
    assert result.p_hat @ target == pytest.approx(np.full(SAMPLE_SIZE, 1 / SAMPLE_SIZE) @ x,
                                                  abs=1e-9)
