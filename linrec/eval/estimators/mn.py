"""The MSE-optimised "multinomial" estimator MN (Li et al. 2023, §3)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from linrec.eval.estimators._linalg import (
    ConditionalOp,
    column_sums,
    implied_distribution,
    weighted_gram,
)
from linrec.eval.estimators.priors import prior_of
from linrec.eval.estimators.result import EstimateResult
from linrec.params import check_choice, check_int

if TYPE_CHECKING:
    from linrec.eval.estimators._context import EstimatorInput

VARIANCE_WEIGHTS = ("unweighted", "prior")


def mn_system(
    cond: ConditionalOp, prior: np.ndarray, n_targets: int, variance_weight: str = "unweighted"
) -> np.ndarray:
    """H of x_MN = H⁻¹ AᵀD b (Li et al. 2023, eqs. 10–11): AᵀDA − (1/M)AᵀA + (1/M)Λ1 with Λ1 =
    diag(column sums). variance_weight="prior" weighs Var[x|R] by P(R) (docs/concepts/sampled.md,
    the exact variance), i.e. BV with γ = 1/M: AᵀDA − (1/M)AᵀDA + (1/M)diag(Aᵀπ)."""
    check_choice(variance_weight, "variance_weight", VARIANCE_WEIGHTS)
    check_int(n_targets, "n_targets", ge=1)
    if variance_weight == "unweighted":
        # AᵀDA − (1/M)AᵀA = Aᵀ diag(P(R) − 1/M) A: one Gram product instead of two
        system = weighted_gram(cond, prior - 1.0 / n_targets)
        system[np.diag_indices_from(system)] += column_sums(cond) / n_targets
    else:
        system = (1.0 - 1.0 / n_targets) * weighted_gram(cond, prior)
        system[np.diag_indices_from(system)] += np.asarray(prior @ cond).ravel() / n_targets
    return system


def mn(
    cond: ConditionalOp, histogram: np.ndarray, prior: np.ndarray, n_targets: int,
    variance_weight: str = "unweighted",
) -> tuple[np.ndarray, str]:
    """MN estimator: implied P̂ = D A H⁻¹ P~ (Krichene & Rendle 2020; Li et al. 2023, eq. 14; Li et
    al. 2023, eqs. 10–11). Returns (p_hat, solve method)."""
    system = mn_system(cond, prior, n_targets, variance_weight)
    return implied_distribution(cond, prior, system, histogram)


def runner(default_source: str) -> Callable[..., EstimateResult]:
    """The registry's MN runner whose default prior is `default_source` (uniform, mle, mes)."""
    default_prior = "uniform" if default_source == "uniform" else "run"

    def run_mn(run: EstimatorInput, *, prior: str | np.ndarray = default_prior,
               variance_weight: str = "unweighted",
               prior_runs: Sequence[np.ndarray] | None = None,
               prior_params: dict[str, Any] | None = None) -> EstimateResult:
        prior_p, label = prior_of(run, prior, default_source, prior_runs, prior_params)
        p_hat, solver = mn(run.cond, run.histogram, prior_p, run.n_targets, variance_weight)
        params = {"variance_weight": variance_weight}
        return run.result(p_hat, prior=label, params=params, solver=solver)

    return run_mn
