"""The estimator registry: `estimate(name, sampled_ranks, *, n_items, sample_size, **params)` runs
the estimator `name` on one sample and returns an `EstimateResult` whose `p_hat` (length n_items) is
the implied global-rank distribution (Krichene & Rendle 2020; Li et al. 2023, §4); every metric
curve comes from it (`result.curve("ndcg", 50)`). `estimate_repeats` runs one estimator on several
samples, batching the EM ones."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linrec.errors import ConfigError
from linrec.eval.conditional import SCHEMES, conditional_operator
from linrec.eval.estimators import adaptive, bv, corrected, em, mn
from linrec.eval.estimators._context import EstimatorInput
from linrec.eval.estimators._input import check_sampled_ranks, common_sample_size, rank_histogram
from linrec.eval.estimators.result import EstimateResult
from linrec.params import check_choice, check_int
from linrec.registry import Registry


@dataclass(frozen=True)
class EstimatorSpec:
    """One estimator: its runner and what running it over many samples needs to know.

    runner: `runner(EstimatorInput, **params)`, or for per-target sizes `runner(name, ranks,
    n_items, sizes, scheme, **params)`; per_target_sizes: it estimates samples whose sizes
    differ per target (adaptive sampling, Li et al. 2023, §4); batched: `estimate_repeats` runs it
    as one EM over all samples; prior_from / base: it is `base` with, as its default prior, the
    estimate of `prior_from` on the same sample (bv_mle = bv with the MLE prior), so the
    sampled block computes that estimate once and shares it; params: its keyword parameters."""

    name: str
    runner: Callable[..., EstimateResult]
    per_target_sizes: bool = False
    batched: bool = False
    prior_from: str | None = None
    base: str | None = None
    params: tuple[str, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        skip = 5 if self.per_target_sizes else 1  # the positional inputs of its runner
        names = tuple(inspect.signature(self.runner).parameters)[skip:]
        object.__setattr__(self, "params", names)

    def check_params(self, params: Mapping[str, Any]) -> None:
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise ConfigError(f"estimator {self.name!r} has no parameter(s) {unknown}; allowed: "
                              f"{list(self.params) or 'none'}")


def _with_prior(base: str, source: str, runner: Callable[..., EstimateResult]) -> EstimatorSpec:
    return EstimatorSpec(f"{base}_{source}", runner, prior_from=source, base=base)


#: every estimator, by the name `estimate` takes
ESTIMATORS: Registry[EstimatorSpec] = Registry("estimator", ((s.name, s) for s in (
    EstimatorSpec("naive", corrected.run_naive),
    EstimatorSpec("unbiased_rank", corrected.run_unbiased_rank),
    EstimatorSpec("ls", corrected.run_ls),
    EstimatorSpec("cls", corrected.run_cls),
    EstimatorSpec("bv", bv.runner("uniform")),
    EstimatorSpec("mle", em.run_mle, batched=True),
    EstimatorSpec("weighted_mle", em.run_weighted_mle),
    EstimatorSpec("mes", em.run_mes),
    EstimatorSpec("mn", mn.runner("uniform")),
    _with_prior("bv", "mle", bv.runner("mle")),
    _with_prior("bv", "mes", bv.runner("mes")),
    _with_prior("mn", "mle", mn.runner("mle")),
    _with_prior("mn", "mes", mn.runner("mes")),
    EstimatorSpec("adaptive_mle", adaptive.run_adaptive_mle, per_target_sizes=True,
                  batched=True),
)))


def fixed_size_estimators() -> tuple[str, ...]:
    """The registered estimators of samples with one common sample size."""
    return tuple(name for name, spec in ESTIMATORS.items() if not spec.per_target_sizes)


def adaptive_estimators() -> tuple[str, ...]:
    """The registered estimators of samples with per-target sizes (adaptive sampling, Li et al.
    2023, §4)."""
    return tuple(name for name, spec in ESTIMATORS.items() if spec.per_target_sizes)


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
    spec = ESTIMATORS.entry(name)
    check_choice(scheme, "scheme", SCHEMES)
    check_int(n_items, "n_items", ge=2)
    spec.check_params(params)
    if spec.per_target_sizes:
        sizes = np.broadcast_to(np.asarray(sample_size), np.shape(sampled_ranks))
        if np.any(sizes < 1) or np.any(sizes != np.round(sizes)):
            raise ConfigError("sample_size must hold integers >= 1 for every target")
        sizes = sizes.astype(np.int64)
        ranks = check_sampled_ranks(sampled_ranks, sizes)
        return spec.runner(name, ranks, int(n_items), sizes, scheme, **params)
    size = common_sample_size(sample_size, name)
    ranks = check_sampled_ranks(sampled_ranks, size)
    return spec.runner(EstimatorInput(name, ranks, int(n_items), size, scheme), **params)


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
    spec = ESTIMATORS.entry(name)
    if not spec.batched or not samples:
        return [estimate(name, ranks, n_items=n_items, sample_size=size, scheme=scheme).p_hat
                for ranks, size in samples]
    for ranks, size in samples:  # the same validation as one-sample calls
        if spec.per_target_sizes:
            check_sampled_ranks(ranks, np.broadcast_to(np.asarray(size), np.shape(ranks)))
        else:
            check_sampled_ranks(ranks, common_sample_size(size, name))
    if spec.per_target_sizes:
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

