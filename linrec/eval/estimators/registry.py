"""The estimator registry: `estimate(name, sampled_ranks, *, n_items, sample_size, **params)` runs
the estimator `name` on one sample and returns an `EstimateResult` whose `p_hat` (length
n_items) is the implied global-rank distribution (spec/evaluation.md §5–§8); every metric curve
comes from it (`result.curve("ndcg", 50)`). `estimate_repeats` runs one estimator on several
samples, batching the EM ones."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from linrec.errors import ConfigError
from linrec.eval.conditional import SCHEMES, conditional_operator
from linrec.eval.estimators import adaptive, bv, corrected, em, mn
from linrec.eval.estimators._context import EstimatorInput
from linrec.eval.estimators._input import check_sampled_ranks, common_sample_size, rank_histogram
from linrec.eval.estimators.result import EstimateResult
from linrec.params import check_choice, check_int

_FIXED_SIZE: dict[str, Callable[..., EstimateResult]] = {
    "naive": corrected.run_naive,
    "unbiased_rank": corrected.run_unbiased_rank,
    "ls": corrected.run_ls,
    "cls": corrected.run_cls,
    "bv": bv.runner("uniform"),
    "mle": em.run_mle,
    "weighted_mle": em.run_weighted_mle,
    "mes": em.run_mes,
    "mn": mn.runner("uniform"),
    "bv_mle": bv.runner("mle"),
    "bv_mes": bv.runner("mes"),
    "mn_mle": mn.runner("mle"),
    "mn_mes": mn.runner("mes"),
}

#: estimators of samples with one common sample size
FIXED_SIZE_ESTIMATORS: tuple[str, ...] = tuple(_FIXED_SIZE)
#: estimators of samples with per-target sizes (adaptive sampling, spec §8)
ADAPTIVE_ESTIMATORS: tuple[str, ...] = ("adaptive_mle",)
#: every estimator name accepted by `estimate`
ESTIMATORS: tuple[str, ...] = (*FIXED_SIZE_ESTIMATORS, *ADAPTIVE_ESTIMATORS)


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
    check_choice(scheme, "scheme", SCHEMES)
    check_int(n_items, "n_items", ge=2)
    if name == "adaptive_mle":
        sizes = np.broadcast_to(np.asarray(sample_size), np.shape(sampled_ranks))
        if np.any(sizes < 1) or np.any(sizes != np.round(sizes)):
            raise ConfigError("sample_size must hold integers >= 1 for every target")
        sizes = sizes.astype(np.int64)
        ranks = check_sampled_ranks(sampled_ranks, sizes)
        _check_params(name, adaptive.run_adaptive_mle, params, skip=5)
        return adaptive.run_adaptive_mle(name, ranks, int(n_items), sizes, scheme, **params)
    size = common_sample_size(sample_size, name)
    ranks = check_sampled_ranks(sampled_ranks, size)
    runner = _FIXED_SIZE[name]
    _check_params(name, runner, params, skip=1)
    return runner(EstimatorInput(name, ranks, int(n_items), size, scheme), **params)


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
        p_hat = em.mle(cond, histograms)[0]
    return list(p_hat.T)

