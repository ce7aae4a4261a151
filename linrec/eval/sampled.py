"""The sampled block of a run: item-sampled ranks of every held-out item (real sampling inside the
evaluator's batch pass, `repeats` seeded sample sets), every configured estimator of the exact
metric, and their errors against the exact values (spec/evaluation.md §0.2, §10.3).

Metrics here are target-level: each held-out item is one instance with its global rank R, and
T@K = mean over targets of F(R) (spec §1.2). Under leave-one-out they equal the per-user metrics.
`adaptive_mle` runs on adaptive samples (Algorithm 1, spec §8.2) simulated from the global ranks,
exact in distribution (spec §2.4), with one seeded draw per repeat.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from linrec.config import SampledConfig
from linrec.data.splits import EvalSet
from linrec.eval.estimators import estimate, estimate_repeats
from linrec.eval.estimators.accuracy import average_relative_error
from linrec.eval.expected import global_rank_distribution
from linrec.eval.metrics import curve
from linrec.eval.negatives import canonical_targets
from linrec.eval.ranks import RankTable
from linrec.eval.sampled_ranks import SampledRankHook
from linrec.eval.simulate import simulate_adaptive_ranks

#: estimators that need per-target sample sizes from adaptive sampling
ADAPTIVE_ESTIMATORS = ("adaptive_mle",)
#: estimators whose prior is the MLE / MES of the same sampled ranks (per-run prior)
PRIOR_VARIANTS = ("bv_mle", "mn_mle", "bv_mes", "mn_mes")
_ADAPTIVE_SEED_TAG = 0xADA9


def canonical_order(table: RankTable, evalset: EvalSet) -> np.ndarray:
    """Permutation putting the RankTable's entries in the canonical target order of sampling
    (row-major over EvalSet.targets, items ascending within a row): int64 (M,)."""
    rows, items = canonical_targets(evalset)
    order = np.lexsort((table.items, table.rows))
    if not (np.array_equal(table.rows[order], rows) and np.array_equal(table.items[order], items)):
        raise AssertionError("rank table and evaluation set disagree on the held-out items")
    return order


def canonical_global_ranks(table: RankTable, evalset: EvalSet) -> np.ndarray:
    """The RankTable's global ranks in the canonical target order: int64 (M,)."""
    return np.asarray(table.ranks)[canonical_order(table, evalset)]


def sampling_scheme(replace: bool) -> str:
    """The law of the sampled rank the estimators assume: binomial with replacement,
    hypergeometric without (spec §2.1, §2.2)."""
    return "binomial" if replace else "hypergeometric"


def estimate_sharing_priors(name: str, ranks: np.ndarray, n_items: int, sample_size,
                             priors: dict[str, np.ndarray], scheme: str = "binomial"
                             ) -> np.ndarray:
    """p_hat of estimator `name`; the MLE/MES of the same sample is computed once and reused both
    as the `mle`/`mes` estimate and as the prior of bv_mle, mn_mle, bv_mes, mn_mes (identical to
    their own per-run prior, spec §7). scheme: `sampling_scheme(replace)` of the sample."""
    base, _, prior_name = name.partition("_")
    common = {"n_items": n_items, "sample_size": sample_size, "scheme": scheme}
    if name in priors:  # already estimated for this sample (e.g. the batched MLE)
        return priors[name]
    if name in PRIOR_VARIANTS:
        if prior_name not in priors:
            priors[prior_name] = estimate(prior_name, ranks, **common).p_hat
        return estimate(base, ranks, **common, prior=priors[prior_name]).p_hat
    p_hat = estimate(name, ranks, **common).p_hat
    if name in ("mle", "mes"):
        priors[name] = p_hat
    return p_hat


def estimate_samples(names, samples, *, n_items: int, scheme: str = "binomial"
                     ) -> tuple[dict[str, list[np.ndarray]], dict[str, float]]:
    """p_hat of every estimator in `names` for every sample [(sampled ranks, sample size)]
    (e.g. the repeats of a run), and the seconds spent per estimator.

    The MLE of all samples runs as one batched EM (`estimate_repeats`) and is shared as the prior
    of bv_mle / mn_mle; adaptive_mle (samples of per-target sizes) is batched too; the other
    estimators run per sample, samples in parallel with single-threaded BLAS (the outer limit also
    keeps the estimators' own nested limits from leaking). Every p_hat equals a one-sample
    `estimate` call (to rounding)."""
    seconds = dict.fromkeys(names, 0.0)
    p_hats: dict[str, list[np.ndarray]] = {name: [] for name in names}
    priors: list[dict[str, np.ndarray]] = [{} for _ in samples]
    for name in (n for n in names if n in ADAPTIVE_ESTIMATORS):
        t0 = time.perf_counter()
        p_hats[name] = estimate_repeats(name, samples, n_items=n_items, scheme=scheme)
        seconds[name] += time.perf_counter() - t0
    users_of_mle = [n for n in names if n == "mle" or n in ("bv_mle", "mn_mle")]
    if users_of_mle and samples:
        t0 = time.perf_counter()
        hats = estimate_repeats("mle", samples, n_items=n_items, scheme=scheme)
        for prior, p_hat in zip(priors, hats, strict=True):
            prior["mle"] = p_hat
        seconds[users_of_mle[0]] += time.perf_counter() - t0
    per_sample = [n for n in names if n not in ADAPTIVE_ESTIMATORS]

    def one_sample(task) -> dict[str, tuple[np.ndarray, float]]:
        (ranks, size), prior = task
        out = {}
        for name in per_sample:
            t0 = time.perf_counter()
            out[name] = (estimate_sharing_priors(name, ranks, n_items, size, prior, scheme),
                         time.perf_counter() - t0)
        return out

    if per_sample and samples:
        workers = max(1, min(len(samples), len(os.sched_getaffinity(0))))
        with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
            for result in pool.map(one_sample, zip(samples, priors, strict=True)):
                for name, (p_hat, elapsed) in result.items():
                    p_hats[name].append(p_hat)
                    seconds[name] += elapsed
    return p_hats, seconds


class SampledEvaluation:
    """Plugs a SampledRankHook into the evaluator's pass, then estimates from its sampled ranks.

    `hooks()` -> the hooks to pass to `evaluate_split`; `report(rank_table)` -> the JSON block:
    protocol, exact target-level metrics, and per estimator {metrics: {"ndcg@10": {mean, std,
    rel_error}}, are: {metric: {mean, std}}}, and timings {estimator: seconds}."""

    def __init__(self, cfg: SampledConfig, evalset: EvalSet, n_items: int) -> None:
        self.cfg = cfg
        self.evalset = evalset
        self.n_items = n_items
        fixed = [e for e in cfg.estimators if e not in ADAPTIVE_ESTIMATORS]
        self._hook = (
            SampledRankHook(
                evalset,
                n_items,
                sample_size=None if cfg.pool == "given" else cfg.sample_size,
                seed=cfg.seed,
                repeats=cfg.repeats,
                replace=cfg.replace,
                pool=cfg.pool,
            )
            if fixed
            else None
        )

    def hooks(self) -> list[SampledRankHook]:
        return [self._hook] if self._hook is not None else []

    def _estimator_catalogue(self, n_candidates: np.ndarray) -> tuple[int, bool]:
        """(N the estimators assume, whether it is approximate). all_but_target: n_items exactly.
        non_interacted and given (NCF negatives): each target's pool is its own N_u; estimators
        take one N, so use the mean N_u and flag it approximate (spec §13 pitfall 13)."""
        if self.cfg.pool == "all_but_target":
            return self.n_items, False
        return int(round(float(np.mean(n_candidates)))), True

    def _scheme(self) -> str:
        """The law the estimators assume; the dataset's given negatives (NCF) are distinct
        items, i.e. drawn without replacement."""
        return "hypergeometric" if self.cfg.pool == "given" else sampling_scheme(self.cfg.replace)

    def _adaptive_sets(self, global_ranks: np.ndarray, n_items: int):
        """(sampled ranks, per-target sample sizes) of each repeat's adaptive sample."""
        for repeat in range(self.cfg.repeats):
            rng = np.random.default_rng([self.cfg.seed, _ADAPTIVE_SEED_TAG, repeat])
            sample = simulate_adaptive_ranks(
                global_ranks, n_items, rng=rng, n0=self.cfg.adaptive.n0,
                n_max=self.cfg.adaptive.n_max, replace=self.cfg.replace,
            )
            yield sample.sampled_ranks, sample.sample_sizes

    def _fixed_sets(self):
        """(sampled ranks, sample size) of each repeat of the hook's real item sampling."""
        sampled = self._hook.result()
        for repeat in range(sampled.shape[0]):
            yield sampled[repeat], self._hook.sample_size

    def report(self, table: RankTable) -> dict[str, Any]:
        cfg = self.cfg
        order = canonical_order(table, self.evalset)
        global_ranks = np.asarray(table.ranks)[order]
        n_items, approximate = self._estimator_catalogue(np.asarray(table.n_candidates)[order])
        global_ranks = np.minimum(global_ranks, n_items)  # only clips when approximate
        k_max = min(cfg.k_max, n_items)
        p_exact = global_rank_distribution(global_ranks, n_items)
        exact_curves = {m: curve(p_exact, m, k_max) for m in cfg.metrics}
        ks = [k for k in (1, 5, 10, 20, 50) if k <= k_max]
        out: dict[str, Any] = {
            "protocol": {
                "sample_size": self._hook.sample_size if self._hook else cfg.sample_size,
                "replace": cfg.replace,
                "pool": cfg.pool,
                "repeats": cfg.repeats,
                "seed": cfg.seed,
                "n_items": n_items,
                "n_items_approximate": approximate,
                "n_targets": int(len(global_ranks)),
                "k_max": k_max,
                "metrics": list(cfg.metrics),
                "adaptive": {"n0": cfg.adaptive.n0, "n_max": cfg.adaptive.n_max,
                             "simulated_from_global_ranks": True},
            },
            "exact": {f"{m}@{k}": float(exact_curves[m][k - 1]) for m in cfg.metrics for k in ks},
            "estimators": {},
            "timings": {},
        }
        scheme = self._scheme()
        fixed = [e for e in cfg.estimators if e not in ADAPTIVE_ESTIMATORS]
        adaptive = [e for e in cfg.estimators if e in ADAPTIVE_ESTIMATORS]
        p_hats, seconds = estimate_samples(fixed, list(self._fixed_sets()) if fixed else [],
                                           n_items=n_items, scheme=scheme)
        if adaptive:
            more, more_seconds = estimate_samples(
                adaptive, list(self._adaptive_sets(global_ranks, n_items)), n_items=n_items,
                scheme=scheme)
            p_hats.update(more)
            seconds.update(more_seconds)
        for name in cfg.estimators:
            values = {m: [curve(p, m, k_max) for p in p_hats[name]] for m in cfg.metrics}
            out["estimators"][name] = self._summarise(values, exact_curves, ks)
        out["timings"] = seconds  # per estimator, summed over the repeats
        return out

    @staticmethod
    def _summarise(values, exact_curves, ks) -> dict[str, Any]:
        metrics: dict[str, Any] = {}
        are: dict[str, Any] = {}
        for m, curves in values.items():
            curves = np.asarray(curves)  # (repeats, k_max)
            exact = exact_curves[m]
            for k in ks:
                mean = float(curves[:, k - 1].mean())
                metrics[f"{m}@{k}"] = {
                    "mean": mean,
                    "std": float(curves[:, k - 1].std()),
                    "rel_error": (mean - exact[k - 1]) / exact[k - 1] if exact[k - 1] else None,
                }
            ks_all = range(1, len(exact) + 1)
            per_repeat = [average_relative_error(c, exact, ks=ks_all) for c in curves]
            are[m] = {"mean": float(np.mean(per_repeat)), "std": float(np.std(per_repeat))}
        return {"metrics": metrics, "are": are}
