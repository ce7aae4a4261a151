"""Benchmark the sampled block of a run against the EASE fit it accompanies (issue target: the
whole default sampled block under 10 % of an EASE fit at n_items = 20 000, M ~ 100 000 held-out
items, 2 cores).

Synthetic data (`linrec.data.sources.load_source("synthetic")`), a holdout (or leave-one-out)
split, EASE(lam=500, float32) fitted in this process, then one evaluator pass
(`linrec.eval.exact.evaluate_exact`) with two timed hooks: the `SampledRankHook` of the run's
`SampledBlock` (the fast path) and `ReferenceHook`, the straightforward implementation the
hook had before (dense exclusion mask per batch, every sampled item that beats the target looked up
in it). Both must give identical sampled ranks ("agree"). Then the estimator loop of
`SampledBlock.settings` (each configured estimator once per repeat, and the adaptive setting).

Rows: EASE fit, scoring, exact ranking, each hook, each estimator, the whole sampled block (fast
hook + report) and its ratio to the fit.

    python experiments/benchmarks/bench_sampled_block.py --quick
    python experiments/benchmarks/bench_sampled_block.py               # 20 000 items, ~100k targets
"""

from __future__ import annotations

import argparse
import resource
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

import linrec.eval.sampled_block as sampled_module
from linrec.data.sources import load_source
from linrec.data.splits import holdout, leave_one_out
from linrec.eval.configs import SampledConfig
from linrec.eval.exact import evaluate_exact
from linrec.eval.negatives import NegativeSampler, canonical_targets
from linrec.eval.sampled_block import SampledBlock
from linrec.eval.sampled_ranks import SampledRankHook
from linrec.models.ease import EASE


class ReferenceHook:
    """The hook's previous algorithm, kept as the reference: per batch a dense (B, n_items) bool
    mask of fold-in ∪ targets; per repeat gather the sampled items' scores, compare with the
    target's score (keys on exact ties), then drop every winner that the mask excludes."""

    def __init__(self, hook: SampledRankHook, n_items: int, seed: int) -> None:
        self.repeats, self.sample_size = hook.repeats, hook.sample_size
        self.target_rows, self.target_items = canonical_targets(hook._eval_set)
        evalset = hook._eval_set
        self._excluded = (sp.csr_matrix(evalset.foldin) + sp.csr_matrix(evalset.targets)).tocsr()
        self._excluded.sort_indices()
        self._indptr = np.concatenate([[0], np.cumsum(np.bincount(
            self.target_rows, minlength=evalset.n_users))]).astype(np.int64)
        self._sampler = NegativeSampler(seed, self.target_rows, self.target_items, n_items,
                                        self.sample_size, hook._sampler.replace, hook.pool,
                                        self._excluded)
        self.sampled_ranks = np.zeros((self.repeats, len(self.target_items)), dtype=np.int64)

    def __call__(self, rows: np.ndarray, scores: np.ndarray, keys: Any, *_: Any) -> None:
        counts = self._indptr[rows + 1] - self._indptr[rows]
        starts = self._indptr[rows]
        positions = (np.repeat(starts - (np.cumsum(counts) - counts), counts)
                     + np.arange(counts.sum(), dtype=np.int64))
        batch_rows = np.repeat(np.arange(len(rows)), counts)
        items = self.target_items[positions]
        batch_excluded = self._excluded[rows]
        excluded = np.zeros(batch_excluded.shape, dtype=bool)
        excluded[np.repeat(np.arange(len(rows)), np.diff(batch_excluded.indptr)),
                 batch_excluded.indices] = True
        n_cols = scores.shape[1]
        for repeat in range(self.repeats):
            negatives = self._sampler.negatives(repeat, positions)
            neg_score = np.take(np.ascontiguousarray(scores).ravel(),
                                batch_rows[:, None] * n_cols + negatives)
            target_score = scores[batch_rows, items][:, None]
            won = neg_score > target_score
            tie_t, tie_j = np.nonzero(neg_score == target_score)
            if tie_t.size:
                won[tie_t, tie_j] = (keys[batch_rows[tie_t], negatives[tie_t, tie_j]]
                                     < keys[batch_rows[tie_t], items[tie_t]])
            win_t, win_j = np.nonzero(won)
            drop = excluded[batch_rows[win_t], negatives[win_t, win_j]]
            won[win_t[drop], win_j[drop]] = False
            self.sampled_ranks[repeat, positions] = 1 + won.sum(axis=1)


class Timed:
    """Wraps a hook and adds up the seconds spent in it."""

    def __init__(self, hook: Any) -> None:
        self.hook, self.seconds, self.cpu = hook, 0.0, 0.0

    def __call__(self, *args: Any) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        self.hook(*args)
        self.seconds += time.perf_counter() - t0
        self.cpu += time.process_time() - c0


def _count_estimator_cpu() -> dict[str, float]:
    """Wrap the `estimate` that SampledBlock.settings calls so that the CPU seconds of each
    estimator are added up (settings() itself records wall seconds only)."""
    cpu: dict[str, float] = {}
    estimate = sampled_module.estimate

    def timed_estimate(name: str, *args: Any, **kwargs: Any) -> Any:
        c0 = time.process_time()
        try:
            return estimate(name, *args, **kwargs)
        finally:
            cpu[name] = cpu.get(name, 0.0) + time.process_time() - c0

    sampled_module.estimate = timed_estimate
    return cpu


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000, help="catalogue size N")
    parser.add_argument("--users", type=int, default=14_500,
                        help="synthetic users (holdout 0.2 of ~35 items: ~7 targets per user)")
    parser.add_argument("--split", choices=("holdout", "loo"), default="holdout")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--pool", default="all_but_target",
                        choices=("all_but_target", "non_interacted"))
    parser.add_argument("--memory-budget-mb", type=float, default=512,
                        help="evaluator batch budget (the run's default eval.memory_budget_mb)")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference hook")
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.items, args.users = 3_000, 3_000

    t0 = time.perf_counter()
    inter = load_source("synthetic", n_users=args.users, n_items=args.items, seed=0)
    split = (holdout(inter, test_fraction=0.2, seed=1) if args.split == "holdout"
             else leave_one_out(inter, seed=1, valid=False))
    evalset, n_items = split.test, split.train.shape[1]
    print(f"data: {inter.n_users} users, {n_items} items, {split.train.nnz} train entries, "
          f"{evalset.targets.nnz} test targets of {evalset.n_users} users "
          f"({time.perf_counter() - t0:.1f} s)")

    model = EASE(lam=500.0, dtype="float32")
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(split.train)
    fit_s, fit_cpu = time.perf_counter() - t0, time.process_time() - c0

    cfg = SampledConfig(repeats=args.repeats, pool=args.pool)
    sampled = SampledBlock(cfg, evalset=evalset, n_items=n_items)
    fast = Timed(sampled.hooks()[0])
    hooks = [fast]
    reference = None
    if not args.no_reference:
        reference = Timed(ReferenceHook(sampled.hooks()[0], n_items, cfg.seed))
        hooks.append(reference)
    result = evaluate_exact(model, evalset, ks=[10, 20, 50, 100], metrics=["recall", "ndcg"],
                            seed=0, users_known=True, batch_hooks=hooks,
                            memory_budget_mb=args.memory_budget_mb)
    estimator_cpu = _count_estimator_cpu()
    t0, c0 = time.perf_counter(), time.process_time()
    settings = sampled.settings(result.rank_table)
    report_s, report_cpu = time.perf_counter() - t0, time.process_time() - c0
    timings = {name: s for setting in settings.values() for name, s in setting.timings.items()}
    estimator_s = sum(timings.values())

    agree = "-"
    if reference is not None:
        agree = str(bool(np.array_equal(reference.hook.sampled_ranks, fast.hook.result())))
    sampled_block = fast.seconds + report_s
    nan = float("nan")
    rows = [  # (step, wall seconds, CPU seconds of all threads, note)
        ("EASE fit (lam=500, float32)", fit_s, fit_cpu, ""),
        ("scoring pass (model.score)", result.timings["score"], nan, ""),
        ("exact ranking", result.timings["rank"], nan, ""),
        (f"hook, reference ({args.repeats} repeats)",
         reference.seconds if reference else nan, reference.cpu if reference else nan, ""),
        (f"hook, fast ({args.repeats} repeats)", fast.seconds, fast.cpu, f"agree={agree}"),
    ]
    rows += [(f"estimator {name} ({args.repeats} repeats)", seconds,
              estimator_cpu.get(name, nan), "")
             for name, seconds in timings.items()]
    rows.append(("settings() outside the estimators", report_s - estimator_s, nan, ""))
    rows.append(("sampled block (fast hook + report)", sampled_block, fast.cpu + report_cpu,
                 f"{100 * sampled_block / fit_s:.1f} % of the fit (CPU: "
                 f"{100 * (fast.cpu + report_cpu) / fit_cpu:.1f} %)"))
    if reference is not None:
        old, old_cpu = reference.seconds + report_s, reference.cpu + report_cpu
        rows.append(("sampled block with the reference hook", old, old_cpu,
                     f"{100 * old / fit_s:.1f} % of the fit (CPU: "
                     f"{100 * old_cpu / fit_cpu:.1f} %)"))
    width = max(len(r[0]) for r in rows)
    print(f"\nN={n_items}, M={len(result.rank_table)} targets, {evalset.n_users} users, "
          f"sample_sizes={list(cfg.sample_sizes)}, pool={cfg.pool}, "
          f"peak RSS {_peak_rss_gb():.2f} GB")
    print(f"{'step':<{width}}  {'wall s':>8}  {'CPU s':>8}  note")
    for name, seconds, cpu, note in rows:
        print(f"{name:<{width}}  {seconds:8.3f}  {cpu:8.3f}  {note}")

if __name__ == "__main__":
    main()
