"""Helpers shared by the estimator tests: global ranks from a power law with sampled ranks drawn
by the binomial law (an independent oracle), a textbook per-user EM, and for the linear estimators
the `small` sample (a fixture, found by pytest) with its sizes, metric targets, a BFGS minimiser of
their quadratic objectives and the weights written out from the papers' formulas. (Import the
helpers with `from tests.eval.estimators.conftest import ...`.)"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

from linrec.eval.conditional import conditional_matrix
from linrec.eval.metrics import rank_gain

#: sizes of the `small` sample
N_ITEMS, SAMPLE_SIZE, N_TARGETS = 300, 20, 500


def power_law(n_items: int, exponent: float = 0.9) -> np.ndarray:
    p = np.arange(1, n_items + 1, dtype=np.float64) ** -exponent
    return p / p.sum()


def scipy_law(n_items: int, sample_size: int, scheme: str = "binomial") -> np.ndarray:
    """P(r | R) (N, n) by scipy.stats, independent of linrec.eval.conditional: r − 1 ~
    Bin(n − 1, (R − 1)/(N − 1)), or hypergeometric (r − 1 of the R − 1 items above among n − 1
    drawn from N − 1)."""
    R, r = np.arange(1, n_items + 1)[:, None], np.arange(sample_size)[None, :]
    if scheme == "binomial":
        return stats.binom.pmf(r, sample_size - 1, (R - 1) / (n_items - 1))
    return stats.hypergeom.pmf(r, n_items - 1, R - 1, sample_size - 1)


def draw(n_items, sample_size, n_targets, seed, exponent=0.9):
    """Global ranks from a power law and sampled ranks by the binomial law
    (docs/concepts/sampled.md), drawn here directly as an independent oracle."""
    rng = np.random.default_rng(seed)
    global_ranks = rng.choice(n_items, size=n_targets, p=power_law(n_items, exponent)) + 1
    theta = (global_ranks - 1) / (n_items - 1)
    return global_ranks, rng.binomial(sample_size - 1, theta) + 1


def draw_histogram(n_items, sample_size, n_targets, seed):
    """The sampled-rank histogram (n,) of `draw`'s targets, as a fraction of them."""
    _, sampled = draw(n_items, sample_size, n_targets, seed)
    return np.bincount(sampled - 1, minlength=sample_size) / len(sampled)


def per_user_em(sampled_ranks, sample_sizes, n_items, n_iter):
    """Textbook EM of Li 2023, eqs. 28–33 / Li et al. 2023, eq. 12 over users (posterior φ_u per
    user, scipy.stats pmf)."""
    theta = np.arange(n_items) / (n_items - 1)
    lik = stats.binom.pmf(sampled_ranks[:, None] - 1, sample_sizes[:, None] - 1, theta[None, :])
    pi = np.full(n_items, 1.0 / n_items)
    for _ in range(n_iter):
        post = pi * lik
        post /= post.sum(axis=1, keepdims=True)
        pi = post.mean(axis=0)
    return pi


@pytest.fixture(scope="module")
def small():
    global_ranks, sampled = draw(N_ITEMS, SAMPLE_SIZE, N_TARGETS, seed=3)
    hist = np.bincount(sampled - 1, minlength=SAMPLE_SIZE) / N_TARGETS
    prior = power_law(N_ITEMS, 0.7)
    return sampled, hist, prior, conditional_matrix(N_ITEMS, SAMPLE_SIZE)


def metric_target(metric, k):
    ranks = np.arange(1, N_ITEMS + 1)
    return rank_gain(metric, ranks) * (ranks <= k)


def bv_loss(x, cond, prior, target, gamma):
    """L_BV written out over the global ranks R (Krichene & Rendle 2020; Li et al. 2023, eq. 15):
    Σ_R P(R) [(E[x|R] − F(R))² + γ Var[x|R]], with E[x|R] = Σ_r P(r|R) x_r and
    Var[x|R] = Σ_r P(r|R) x_r² − E[x|R]²."""
    mean = cond @ x  # E[x|R] for every R
    variance = cond @ (x * x) - mean ** 2
    return float(prior @ ((mean - target) ** 2 + gamma * variance))


def mn_loss(x, cond, prior, target, n_targets):
    """L1 + L2 of Li et al. (2023, eqs. 7–8) written out over the global ranks R: the bias bound
    Σ_R P(R)(E[x|R] − F(R))² plus the variance bound (1/M) Σ_R Var[x|R], with no P(R) weight
    on the variance (as printed)."""
    mean = cond @ x  # E[x|R] for every R
    bias = prior @ (mean - target) ** 2
    variance = np.sum(cond @ (x * x) - mean ** 2)
    return float(bias + variance / n_targets)


def bfgs(objective, sample_size, seed=0):
    # the objectives are quadratics; BFGS with the finite-difference-free gradient of a quadratic
    x0 = np.random.default_rng(seed).normal(size=sample_size) * 0.1

    def grad(x, h=1e-6):
        # central differences are exact for a quadratic up to rounding
        e = np.eye(len(x)) * h
        return np.array([(objective(x + ei) - objective(x - ei)) / (2 * h) for ei in e])

    res = optimize.minimize(objective, x0, jac=grad, method="BFGS",
                            options={"gtol": 1e-13, "maxiter": 20000})
    return res.x


def direct_weights(name, cond, prior, gamma, n_targets, target):
    """x = H⁻¹ AᵀD b solved per right-hand side, written out from the papers' formulas."""
    gram = cond.T @ (prior[:, None] * cond)
    rhs = cond.T @ (prior * target)
    if name == "bv":  # Li et al. 2023, eq. 15
        return np.linalg.solve((1 - gamma) * gram + gamma * np.diag(prior @ cond), rhs)
    if name == "mn":  # Li et al. 2023, eqs. 10–11
        system = gram - cond.T @ cond / n_targets + np.diag(cond.sum(axis=0)) / n_targets
        return np.linalg.solve(system, rhs)
    # ls, Krichene & Rendle 2020: minimum-norm weighted least squares (√D A)⁺ √D b; the same SVD as
    # the estimator (and its prior normalisation), since rounding is amplified ~1e8-fold (Krichene &
    # Rendle 2020)
    prior = prior / prior.sum()
    u, s, vt = np.linalg.svd(np.sqrt(prior)[:, None] * cond, full_matrices=False)
    return vt.T @ ((u.T @ (np.sqrt(prior) * target)) / s)
