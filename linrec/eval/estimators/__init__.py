"""Estimators that recover exact top-K metrics from sampled ranks (spec/evaluation.md §5–§8).

One entry point, `estimate(name, sampled_ranks, *, n_items, sample_size, **params)`, returns an
`EstimateResult` whose `p_hat` (length n_items) is the implied global-rank distribution; every
metric curve comes from it (`result.curve("ndcg", 50)`). The §4 mapping functions are in mapping.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from linrec.errors import ConfigError
from linrec.eval.conditional import SCHEMES, conditional_operator
from linrec.eval.estimators import adaptive, corrected, mn, rankdist
from linrec.eval.estimators.base import (
    ConditionalOp,
    EstimateResult,
    check_sampled_ranks,
    common_sample_size,
    rank_histogram,
)
from linrec.eval.estimators.priors import pooled_prior, resolve_prior


@dataclass
class _Run:
    """One estimation call: validated ranks, their histogram and the (cached) P(r|R) operator."""

    name: str
    ranks: np.ndarray
    n_items: int
    sample_size: int
    scheme: str

    @cached_property
    def histogram(self) -> np.ndarray:
        return rank_histogram(self.ranks, self.sample_size)

    @cached_property
    def cond(self) -> ConditionalOp:
        return conditional_operator(self.n_items, self.sample_size, self.scheme)

    @property
    def n_targets(self) -> int:
        return len(self.ranks)

    def result(self, p_hat: np.ndarray, **fields: Any) -> EstimateResult:
        return EstimateResult(
            name=self.name, p_hat=np.asarray(p_hat, dtype=np.float64), n_items=self.n_items,
            sample_size=self.sample_size, n_targets=self.n_targets, scheme=self.scheme, **fields,
        )

    def prior(self, prior: str | np.ndarray, default_source: str, prior_runs, prior_params):
        return resolve_prior(
            prior, default_source=default_source, cond=self.cond, histogram=self.histogram,
            n_targets=self.n_targets, scheme=self.scheme, prior_runs=prior_runs,
            prior_params=prior_params,
        )


def _naive(run: _Run) -> EstimateResult:
    return run.result(corrected.naive(run.histogram, run.n_items))


def _unbiased_rank(run: _Run) -> EstimateResult:
    return run.result(corrected.unbiased_rank(run.histogram, run.n_items))


def _ls(run: _Run, *, prior: str | np.ndarray = "uniform", rcond: float | None = None,
        prior_runs=None, prior_params=None) -> EstimateResult:
    prior_p, label = run.prior(prior, "uniform", prior_runs, prior_params)
    p_hat, solver = corrected.ls(run.cond, run.histogram, prior_p, rcond)
    return run.result(p_hat, prior=label, params={"rcond": rcond}, solver=solver)


def _cls(run: _Run, *, metric: str = "recall", k_max: int = 50, nonnegative: bool = False,
         prior: str | np.ndarray = "uniform", prior_runs=None, prior_params=None) -> EstimateResult:
    prior_p, label = run.prior(prior, "uniform", prior_runs, prior_params)
    p_hat = corrected.cls(run.cond, run.histogram, prior_p, metric, k_max, nonnegative)
    params = {"metric": metric, "k_max": k_max, "nonnegative": nonnegative}
    return run.result(p_hat, prior=label, params=params, solver="qr+bvls")


def _make_bv(default_source: str) -> Callable[..., EstimateResult]:
    default_prior = "uniform" if default_source == "uniform" else "run"

    def run_bv(run: _Run, *, gamma: float = 0.01, prior: str | np.ndarray = default_prior,
               prior_runs: Sequence[np.ndarray] | None = None,
               prior_params: dict[str, Any] | None = None) -> EstimateResult:
        corrected.check_gamma(gamma)
        prior_p, label = run.prior(prior, default_source, prior_runs, prior_params)
        p_hat, solver = corrected.bv(run.cond, run.histogram, prior_p, gamma)
        return run.result(p_hat, prior=label, params={"gamma": gamma}, solver=solver)

    return run_bv


def _make_mn(default_source: str) -> Callable[..., EstimateResult]:
    default_prior = "uniform" if default_source == "uniform" else "run"

    def run_mn(run: _Run, *, prior: str | np.ndarray = default_prior,
               variance_weight: str = "unweighted",
               prior_runs: Sequence[np.ndarray] | None = None,
               prior_params: dict[str, Any] | None = None) -> EstimateResult:
        prior_p, label = run.prior(prior, default_source, prior_runs, prior_params)
        p_hat, solver = mn.mn(run.cond, run.histogram, prior_p, run.n_targets, variance_weight)
        params = {"variance_weight": variance_weight}
        return run.result(p_hat, prior=label, params=params, solver=solver)

    return run_mn


def _mle(run: _Run, *, n_iter: int = 100, init: str | np.ndarray = "uniform",
         tol: float | None = None) -> EstimateResult:
    p_hat, trace, iterations = rankdist.mle(run.cond, run.histogram, n_iter, init, tol)
    return run.result(p_hat, params=_init_params(init, tol), iterations=iterations,
                      solver="em", log_likelihood=trace)


def _weighted_mle(run: _Run, *, weights="ap", weight_scale: float = 10.0, n_iter: int = 100,
                  init: str | np.ndarray = "uniform", tol: float | None = None) -> EstimateResult:
    p_hat, trace, iterations = rankdist.weighted_mle(
        run.cond, run.histogram, weights, weight_scale, n_iter, init, tol
    )
    params = {"weights": weights if isinstance(weights, str) else "custom",
              "weight_scale": weight_scale, **_init_params(init, tol)}
    return run.result(p_hat, params=params, iterations=iterations, solver="em",
                      log_likelihood=trace)


def _mes(run: _Run, *, fit_scale: str | float = "n", entropy_weight: float = 0.01,
         solver: str = "auto") -> EstimateResult:
    scale = rankdist.fit_scale_value(fit_scale, run.sample_size, run.n_targets)
    p_hat, iterations, used = rankdist.mes(run.cond, run.histogram, scale, entropy_weight, solver)
    params = {"fit_scale": fit_scale, "fit_scale_value": scale, "entropy_weight": entropy_weight}
    return run.result(p_hat, params=params, iterations=iterations, solver=used)


def _init_params(init: str | np.ndarray, tol: float | None) -> dict[str, Any]:
    return {"init": init if isinstance(init, str) else "array", "tol": tol}


_FIXED_SIZE: dict[str, Callable[..., EstimateResult]] = {
    "naive": _naive,
    "unbiased_rank": _unbiased_rank,
    "ls": _ls,
    "cls": _cls,
    "bv": _make_bv("uniform"),
    "mle": _mle,
    "weighted_mle": _weighted_mle,
    "mes": _mes,
    "mn": _make_mn("uniform"),
    "bv_mle": _make_bv("mle"),
    "bv_mes": _make_bv("mes"),
    "mn_mle": _make_mn("mle"),
    "mn_mes": _make_mn("mes"),
}

#: every estimator name accepted by `estimate`
ESTIMATORS: tuple[str, ...] = (*_FIXED_SIZE, "adaptive_mle")


def _adaptive_mle(name: str, ranks: np.ndarray, n_items: int, sizes: np.ndarray, scheme: str, *,
                  n_iter: int = 50, init: str | np.ndarray = "uniform", tol: float | None = None,
                  likelihood: str = "paper", initial_size: int | None = None) -> EstimateResult:
    p_hat, trace, iterations, n_cells = adaptive.adaptive_mle(
        ranks, sizes, n_items, scheme, n_iter, init, tol, likelihood, initial_size
    )
    params = {"likelihood": likelihood, "n_cells": n_cells, "mean_sample_size": sizes.mean(),
              **_init_params(init, tol)}
    return EstimateResult(name=name, p_hat=p_hat, n_items=n_items, sample_size=sizes,
                          n_targets=len(ranks), scheme=scheme, params=params,
                          iterations=iterations, solver="em", log_likelihood=trace)


def _check_params(name: str, runner: Callable, params: dict[str, Any], skip: int) -> None:
    allowed = list(inspect.signature(runner).parameters)[skip:]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ConfigError(
            f"estimator {name!r} has no parameter(s) {unknown}; allowed: {allowed or 'none'}"
        )


def estimate(
    name: str,
    sampled_ranks: np.ndarray,
    *,
    n_items: int,
    sample_size: int | np.ndarray,
    scheme: str = "binomial",
    **params: Any,
) -> EstimateResult:
    """Estimate the global-rank distribution P̂(R) from sampled ranks.

    sampled_ranks: int (M,), 1-based, each in [1, sample_size]. sample_size: the common set size n
    (target + n-1 sampled items), or an int array (M,) of per-target sizes for "adaptive_mle" only.
    scheme: "binomial" (with replacement) or "hypergeometric". params: the estimator's options
    (e.g. gamma for bv, n_iter for mle, fit_scale/entropy_weight/solver for mes, prior for bv/mn/ls,
    prior="pooled" with prior_runs for the *_mle/*_mes priors). Returns an EstimateResult.
    """
    if name not in ESTIMATORS:
        raise ConfigError(f"unknown estimator {name!r}; choose one of {list(ESTIMATORS)}")
    if scheme not in SCHEMES:
        raise ConfigError(f"scheme={scheme!r} is not supported; choose one of {SCHEMES}")
    if int(n_items) != n_items or n_items < 2:
        raise ConfigError(f"n_items={n_items} must be an integer >= 2")
    if name == "adaptive_mle":
        sizes = np.broadcast_to(np.asarray(sample_size), np.shape(sampled_ranks))
        if np.any(sizes < 1) or np.any(sizes != np.round(sizes)):
            raise ConfigError("sample_size must hold integers >= 1 for every target")
        sizes = sizes.astype(np.int64)
        ranks = check_sampled_ranks(sampled_ranks, sizes)
        _check_params(name, _adaptive_mle, params, skip=5)
        return _adaptive_mle(name, ranks, int(n_items), sizes, scheme, **params)
    size = common_sample_size(sample_size, name)
    ranks = check_sampled_ranks(sampled_ranks, size)
    runner = _FIXED_SIZE[name]
    _check_params(name, runner, params, skip=1)
    return runner(_Run(name, ranks, int(n_items), size, scheme), **params)


#: estimators that `estimate_repeats` runs as one batched EM over all samples
BATCHED = ("mle", "adaptive_mle")


def estimate_repeats(
    name: str,
    samples: Sequence[tuple[np.ndarray, int | np.ndarray]],
    *,
    n_items: int,
    scheme: str = "binomial",
) -> list[np.ndarray]:
    """p_hat of estimator `name` (default parameters) for each of several independent samples
    [(sampled_ranks, sample_size)], e.g. the repeats of a run. `mle` and `adaptive_mle` run one
    EM over all samples, streaming P(r|R) once per iteration for all of them (the estimates equal
    the one-sample ones to rounding); other names call `estimate` per sample."""
    if name not in BATCHED or not samples:
        return [estimate(name, ranks, n_items=n_items, sample_size=size, scheme=scheme).p_hat
                for ranks, size in samples]
    for ranks, size in samples:  # the same validation as one-sample calls
        if name == "mle":
            check_sampled_ranks(ranks, common_sample_size(size, name))
        else:
            check_sampled_ranks(ranks, np.broadcast_to(np.asarray(size), np.shape(ranks)))
    if name == "adaptive_mle":
        p_hat = adaptive.adaptive_mle_repeats(
            [(r, np.broadcast_to(np.asarray(n), np.shape(r))) for r, n in samples],
            int(n_items), scheme)
    else:
        size = common_sample_size(samples[0][1], name)
        if any(common_sample_size(n, name) != size for _, n in samples):
            raise ConfigError("estimate_repeats('mle'): every sample needs the same sample_size")
        histograms = np.stack([rank_histogram(np.asarray(r), size) for r, _ in samples], axis=1)
        cond = conditional_operator(int(n_items), size, scheme)
        p_hat = rankdist.mle(cond, histograms)[0]
    return list(p_hat.T)


__all__ = ["BATCHED", "ESTIMATORS", "EstimateResult", "estimate", "estimate_repeats",
           "pooled_prior"]
