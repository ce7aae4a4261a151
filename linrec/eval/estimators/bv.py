"""The bias-variance estimator BV (Li et al. 2023, eq. 15, corrected weighting
Ã = √P(R)·P(r|R)), with a uniform prior or the MLE/MES prior of the same sample."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from linrec.eval.estimators._linalg import (
    ConditionalOp,
    implied_distribution,
    weighted_gram,
)
from linrec.eval.estimators.priors import prior_of
from linrec.eval.estimators.result import EstimateResult
from linrec.params import check_real

if TYPE_CHECKING:
    from linrec.eval.estimators._context import EstimatorInput


def check_gamma(gamma: float) -> float:
    return check_real(gamma, "gamma", gt=0.0, le=1.0,
                      hint="0.01 in the papers (Li et al. 2023, eq. 15)")


def bv(
    cond: ConditionalOp, histogram: np.ndarray, prior: np.ndarray, gamma: float = 0.01
) -> tuple[np.ndarray, str]:
    """Bias-variance estimator (Li et al. 2023, eq. 15, corrected weighting Ã = √P(R)·P(r|R)):
    x = ((1−γ)AᵀDA + γ diag(Aᵀπ))⁻¹ AᵀD b, so P̂ = D A H⁻¹ P~. Returns (p_hat, solve method)."""
    gamma = check_gamma(gamma)
    system = (1.0 - gamma) * weighted_gram(cond, prior)
    system[np.diag_indices_from(system)] += gamma * np.asarray(prior @ cond).ravel()
    return implied_distribution(cond, prior, system, histogram)


def runner(default_source: str) -> Callable[..., EstimateResult]:
    """The registry's BV runner whose default prior is `default_source` (uniform, mle, mes)."""
    default_prior = "uniform" if default_source == "uniform" else "run"

    def run_bv(run: EstimatorInput, *, gamma: float = 0.01,
               prior: str | np.ndarray = default_prior,
               prior_runs: Sequence[np.ndarray] | None = None,
               prior_params: dict[str, Any] | None = None) -> EstimateResult:
        check_gamma(gamma)
        prior_p, label = prior_of(run, prior, default_source, prior_runs, prior_params)
        p_hat, solver = bv(run.cond, run.histogram, prior_p, gamma)
        return run.result(p_hat, prior=label, params={"gamma": gamma}, solver=solver)

    return run_bv
