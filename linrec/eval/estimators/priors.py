"""The prior P(R) that BV, MN and LS plug in (Li et al. 2023, eq. 15; eqs. 10–11):
uniform, a given array, the MLE or MES of the same run, or an estimate pooled over several runs (the
authors' code)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from linrec.errors import ConfigError
from linrec.eval.conditional import conditional_operator
from linrec.eval.estimators._input import (
    check_sampled_ranks,
    normalise_distribution,
    rank_histogram,
)
from linrec.eval.estimators._linalg import ConditionalOp
from linrec.eval.estimators.em import fit_scale_value, mes, mle

if TYPE_CHECKING:
    from linrec.eval.estimators._context import EstimatorInput

PRIOR_SOURCES = ("uniform", "mle", "mes")


def prior_estimate(
    source: str, cond: ConditionalOp, histogram: np.ndarray, n_targets: int,
    params: dict[str, Any] | None = None,
) -> np.ndarray:
    """P(R) from one run's histogram: "uniform", "mle" (EM, params n_iter/init/tol) or "mes"
    (params fit_scale/entropy_weight/solver). float64 (N,)."""
    params = dict(params or {})
    n_items, sample_size = cond.shape
    if source == "uniform":
        return np.full(n_items, 1.0 / n_items)
    if source == "mle":
        allowed = {"n_iter", "init", "tol"}
        _check_params(params, allowed, source)
        return mle(cond, histogram, **params)[0]
    if source == "mes":
        _check_params(params, {"fit_scale", "entropy_weight", "solver"}, source)
        scale = fit_scale_value(params.pop("fit_scale", "n"), sample_size, n_targets)
        return mes(cond, histogram, scale, **params)[0]
    raise ConfigError(
        f"prior source {source!r} must be one of {PRIOR_SOURCES}, an array, or 'pooled'"
    )


def _check_params(params: dict[str, Any], allowed: set[str], source: str) -> None:
    unknown = set(params) - allowed
    if unknown:
        raise ConfigError(
            f"prior_params {sorted(unknown)} are not parameters of the {source!r} prior; "
            f"allowed: {sorted(allowed)}"
        )


def pooled_prior(
    source: str,
    runs: Sequence[np.ndarray],
    *,
    n_items: int,
    sample_size: int,
    scheme: str = "binomial",
    params: dict[str, Any] | None = None,
) -> np.ndarray:
    """The mean of the per-run MLE/MES estimates over several runs of sampled ranks (the authors'
    code's `get_estimate(...).mean(0)`, Li et al. 2023, eq. 15); reproduces the published tables.
    float64 (N,)."""
    if source not in ("mle", "mes"):
        raise ConfigError(f"pooled prior source {source!r} must be 'mle' or 'mes'")
    if len(runs) == 0:
        raise ConfigError("prior_runs must hold at least one array of sampled ranks")
    cond = conditional_operator(n_items, sample_size, scheme)
    total = np.zeros(n_items)
    for ranks in runs:
        ranks = check_sampled_ranks(ranks, sample_size)
        histogram = rank_histogram(ranks, sample_size)
        total += prior_estimate(source, cond, histogram, len(ranks), params)
    return total / len(runs)


def resolve_prior(
    prior: str | np.ndarray,
    *,
    default_source: str,
    cond: ConditionalOp,
    histogram: np.ndarray,
    n_targets: int,
    scheme: str,
    prior_runs: Sequence[np.ndarray] | None = None,
    prior_params: dict[str, Any] | None = None,
) -> tuple[np.ndarray, str]:
    """(P(R) float64 (N,) summing to 1, label). prior: an array, one of PRIOR_SOURCES, "run"
    (default_source estimated from this run) or "pooled" (default_source pooled over prior_runs)."""
    n_items, sample_size = cond.shape
    if not isinstance(prior, str):
        return normalise_distribution(prior, n_items, "prior"), "array"
    if prior == "pooled":
        if default_source not in ("mle", "mes") or prior_runs is None:
            raise ConfigError(
                "prior='pooled' needs an mle/mes prior (e.g. estimator 'bv_mle') and prior_runs="
                "[sampled ranks of each run]"
            )
        pooled = pooled_prior(default_source, prior_runs, n_items=n_items,
                              sample_size=sample_size, scheme=scheme, params=prior_params)
        return pooled, f"pooled:{default_source}(runs={len(prior_runs)})"
    source = default_source if prior == "run" else prior
    return prior_estimate(source, cond, histogram, n_targets, prior_params), source


def prior_of(run: EstimatorInput, prior: str | np.ndarray, default_source: str,
             prior_runs: Sequence[np.ndarray] | None,
             prior_params: dict[str, Any] | None) -> tuple[np.ndarray, str]:
    """`resolve_prior` for one estimation call (its histogram, P(r|R) and scheme)."""
    return resolve_prior(prior, default_source=default_source, cond=run.cond,
                         histogram=run.histogram, n_targets=run.n_targets, scheme=run.scheme,
                         prior_runs=prior_runs, prior_params=prior_params)
