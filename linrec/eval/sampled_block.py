"""The sampled block of one split: item-sampled ranks of every held-out item for each sampled
setting, every configured estimator of the exact metric on every repeat, and their errors against
the exact values (Li et al. 2020, §2.1; Li et al. 2023, Tables 1–11).

Settings: one per sample size n ('n=100'), with `repeats` seeded sample sets each, drawn either by
real item sampling inside the evaluator's batch pass (`SampledRankHook`, method "sample") or from
their exact law given the global ranks (method "simulate", docs/concepts/sampled.md); and
'adaptive', adaptive samples (Li et al. 2023, Algorithm 1) simulated from the global ranks. Seeds:
`simulate.repeat_rng`.

Metrics here are target-level: each held-out item is one instance with its global rank R, and
T@K = mean over targets of F(R) (Rendle 2019, eqs. 9–15). Under leave-one-out they equal the
per-user metrics.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from linrec.console import tracked
from linrec.data.splits import EvalSet
from linrec.errors import ConfigError
from linrec.eval._checks import check_sample_size
from linrec.eval.configs import SampledConfig
from linrec.eval.estimators import ESTIMATORS, estimate, estimate_repeats
from linrec.eval.expected import global_rank_distribution
from linrec.eval.metrics import curve
from linrec.eval.negatives import canonical_targets
from linrec.eval.ranks import RankTable
from linrec.eval.report import SampledSetting
from linrec.eval.sampled_ranks import SampledRankHook
from linrec.eval.simulate import (
    adaptive_levels,
    repeat_rng,
    simulate_adaptive_ranks,
    simulate_sampled_ranks,
)
from linrec.hardware import blas_threads, thread_limit


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
    hypergeometric without (Li et al. 2020, eq. 6)."""
    return "binomial" if replace else "hypergeometric"


def estimate_sharing_priors(name: str, ranks: np.ndarray, n_items: int, sample_size,
                             priors: dict[str, np.ndarray], scheme: str = "binomial"
                             ) -> np.ndarray:
    """p_hat of estimator `name` on one sample. `priors` holds the estimates of this sample
    that other estimators take as their prior (`EstimatorSpec.prior_from`): each is computed
    once, and is both that estimator's own estimate and the others' prior (identical to their
    own per-run prior, Li et al. 2023, §3). scheme: `sampling_scheme(replace)` of the sample."""
    spec = ESTIMATORS.entry(name)
    common = {"n_items": n_items, "sample_size": sample_size, "scheme": scheme}
    if name in priors:  # already estimated for this sample (e.g. the batched MLE)
        return priors[name]
    if spec.prior_from is not None:
        if spec.prior_from not in priors:
            priors[spec.prior_from] = estimate(spec.prior_from, ranks, **common).p_hat
        return estimate(spec.base, ranks, **common, prior=priors[spec.prior_from]).p_hat
    p_hat = estimate(name, ranks, **common).p_hat
    if name in _prior_sources():
        priors[name] = p_hat
    return p_hat


def _prior_sources() -> frozenset[str]:
    """The estimators whose estimate of a sample is another's prior."""
    return frozenset(s.prior_from for s in ESTIMATORS.values() if s.prior_from)


def estimate_samples(names, samples, *, n_items: int, scheme: str = "binomial"
                     ) -> tuple[dict[str, list[np.ndarray]], dict[str, float]]:
    """p_hat of every estimator in `names` for every sample [(sampled ranks, sample size)]
    (e.g. the repeats of a run), and the seconds spent per estimator.

    Batched estimators run as one EM over all samples (`estimate_repeats`): those of per-target
    sizes on their own, and a batched prior source (the MLE) once for every estimator that needs
    it, its estimates shared as the others' prior; the other estimators run per sample, samples
    in parallel with single-threaded BLAS (the outer limit also keeps the estimators' own nested
    limits from leaking). Every p_hat equals a one-sample `estimate` call (to rounding)."""
    specs = {name: ESTIMATORS.entry(name) for name in names}
    seconds = dict.fromkeys(names, 0.0)
    p_hats: dict[str, list[np.ndarray]] = {name: [] for name in names}
    priors: list[dict[str, np.ndarray]] = [{} for _ in samples]
    for name in (n for n, spec in specs.items() if spec.per_target_sizes):
        t0 = time.perf_counter()
        p_hats[name] = estimate_repeats(name, samples, n_items=n_items, scheme=scheme)
        seconds[name] += time.perf_counter() - t0
    for source in sorted(_prior_sources()):
        users = [n for n, spec in specs.items() if source in (n, spec.prior_from)]
        if not (users and samples and ESTIMATORS[source].batched):
            continue
        t0 = time.perf_counter()
        hats = estimate_repeats(source, samples, n_items=n_items, scheme=scheme)
        for prior, p_hat in zip(priors, hats, strict=True):
            prior[source] = p_hat
        seconds[users[0]] += time.perf_counter() - t0
    per_sample = [n for n, spec in specs.items() if not spec.per_target_sizes]

    def one_sample(task) -> dict[str, tuple[np.ndarray, float]]:
        (ranks, size), prior = task
        out = {}
        for name in per_sample:
            t0 = time.perf_counter()
            out[name] = (estimate_sharing_priors(name, ranks, n_items, size, prior, scheme),
                         time.perf_counter() - t0)
        return out

    if per_sample and samples:
        workers = max(1, min(len(samples), thread_limit()))
        with blas_threads(1), ThreadPoolExecutor(workers) as pool:
            results = pool.map(one_sample, zip(samples, priors, strict=True))
            for result in tracked(results, "estimators", len(samples), unit="repeats"):
                for name, (p_hat, elapsed) in result.items():
                    p_hats[name].append(p_hat)
                    seconds[name] += elapsed
    return p_hats, seconds


def check_against_catalogue(cfg: SampledConfig, n_items: int) -> None:
    """ConfigError naming every eval.sampled field that does not fit a catalogue of n_items
    (sample sizes and the adaptive start n0 must be below it), each with what to do."""
    problems = []
    if cfg.estimators and cfg.pool != "given":  # "given": the dataset's own sampled sets
        for n in cfg.sample_sizes:
            try:
                check_sample_size(n_items, n, "eval.sampled.sample_sizes", hint=(
                    f"lower eval.sampled.sample_sizes below the catalogue's {n_items} items "
                    f"(e.g. eval.sampled.sample_sizes=[{max(2, n_items // 2)}]), or turn the "
                    "sampled evaluation off (eval.sampled.enabled=false)"))
            except ConfigError as exc:
                problems.append(str(exc))
    if cfg.adaptive.estimators:
        try:
            check_sample_size(n_items, cfg.adaptive.n0, "eval.sampled.adaptive.n0", hint=(
                f"lower eval.sampled.adaptive.n0 below the catalogue's {n_items} items, or turn "
                "adaptive sampling off (eval.sampled.adaptive.estimators=[])"))
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError("\n".join(dict.fromkeys(problems)))


class SampledBlock:
    """The sampled settings of one EvalSet: `hooks()` go into the evaluator's pass (real item
    sampling); `settings(rank_table)` then estimates every setting from its sample sets.

    Construction checks everything that needs only the data (sample sizes against n_items, the
    pools, the adaptive levels), so a run can build it before the (possibly long) fit."""

    def __init__(self, cfg: SampledConfig, evalset: EvalSet, n_items: int,
                 exclude_foldin: bool = True) -> None:
        self.cfg = cfg
        self.evalset = evalset
        self.n_items = n_items
        fixed = cfg.sample_sizes if cfg.estimators else ()
        check_against_catalogue(cfg, n_items)
        self._hooks: dict[int, SampledRankHook] = {}
        if cfg.method == "sample":
            self._hooks = {n: SampledRankHook(
                evalset, n_items, sample_size=None if cfg.pool == "given" else n, seed=cfg.seed,
                repeats=cfg.repeats, replace=cfg.replace, pool=cfg.pool,
                exclude_foldin=exclude_foldin) for n in fixed}
        if cfg.adaptive.estimators:
            adaptive_levels(n_items, cfg.adaptive.n0, cfg.adaptive.n_max)

    def hooks(self) -> list[SampledRankHook]:
        return list(self._hooks.values())

    def _estimator_catalogue(self, n_candidates: np.ndarray) -> tuple[int, bool]:
        """(N the estimators assume, whether it is approximate). all_but_target: n_items exactly.
        non_interacted and given (NCF negatives): each target's pool is its own N_u; estimators
        take one N, so use the mean N_u and flag it approximate (docs/concepts/sampled.md)."""
        if self.cfg.pool == "all_but_target":
            return self.n_items, False
        return int(round(float(np.mean(n_candidates)))), True

    def _scheme(self) -> str:
        """The law the estimators assume; the dataset's given negatives (NCF) are distinct
        items, i.e. drawn without replacement."""
        return "hypergeometric" if self.cfg.pool == "given" else sampling_scheme(self.cfg.replace)

    def _samples(self, size: int, global_ranks: np.ndarray, n_items: int):
        """(sampled ranks, sample size) of each repeat of the fixed-size setting `size`."""
        cfg = self.cfg
        if size in self._hooks:
            hook = self._hooks[size]
            return [(ranks, hook.sample_size) for ranks in hook.result()]
        return [(simulate_sampled_ranks(global_ranks, n_items, size, replace=cfg.replace,
                                        rng=repeat_rng(cfg.seed, repeat, size)), size)
                for repeat in range(cfg.repeats)]

    def _adaptive_samples(self, global_ranks: np.ndarray, n_items: int):
        """(sampled ranks, per-target sample sizes) of each repeat's adaptive sample."""
        cfg = self.cfg
        samples = []
        for repeat in range(cfg.repeats):
            sample = simulate_adaptive_ranks(
                global_ranks, n_items, rng=repeat_rng(cfg.seed, repeat), n0=cfg.adaptive.n0,
                n_max=cfg.adaptive.n_max, replace=cfg.replace)
            samples.append((sample.sampled_ranks, sample.sample_sizes))
        return samples

    def settings(self, table: RankTable) -> dict[str, SampledSetting]:
        """Every configured setting, estimated from its sample sets."""
        cfg = self.cfg
        order = canonical_order(table, self.evalset)
        global_ranks = np.asarray(table.ranks)[order]
        n_items, approximate = self._estimator_catalogue(np.asarray(table.n_candidates)[order])
        global_ranks = np.minimum(global_ranks, n_items)  # only clips when approximate
        k_max = min(cfg.k_max, n_items)
        p_exact = global_rank_distribution(global_ranks, n_items)
        exact_curves = {m: curve(p_exact, m, k_max) for m in cfg.metrics}
        protocol = {"replace": cfg.replace, "pool": cfg.pool, "method": cfg.method,
                    "repeats": cfg.repeats, "seed": cfg.seed, "n_items": n_items,
                    "n_items_approximate": approximate, "n_targets": int(len(global_ranks)),
                    "k_max": k_max, "metrics": list(cfg.metrics)}
        jobs = []
        for label in cfg.settings():
            if label == "adaptive":
                jobs.append((label, cfg.adaptive.estimators,
                             self._adaptive_samples(global_ranks, n_items),
                             {"sample_size": "adaptive", "method": "simulate",
                              "adaptive": {"n0": cfg.adaptive.n0, "n_max": cfg.adaptive.n_max}}))
            else:
                samples = self._samples(int(label[2:]), global_ranks, n_items)
                jobs.append((label, cfg.estimators, samples, {"sample_size": samples[0][1]}))
        out = {}
        for label, names, samples, extra in jobs:
            p_hats, seconds = estimate_samples(names, samples, n_items=n_items,
                                               scheme=self._scheme())
            curves = {name: {m: np.asarray([curve(p, m, k_max) for p in p_hats[name]])
                             for m in cfg.metrics} for name in names}
            out[label] = SampledSetting(label=label, protocol={**protocol, **extra},
                                        exact_curves=exact_curves, curves=curves,
                                        first_sample=samples[0], timings=seconds)
        return out
