"""Benchmark of exact full-ranking evaluation (linrec.eval.exact / ranks / metrics).

Data: n_items items, n_users evaluation users with ML-20M-like activity (log-normal, median 40,
at least 5 items, popularity-skewed items), split 80 % fold-in / 20 % held out (strong
generalization, Liang et al. 2018). Model: an item-item scorer foldin @ W with a dense
random float32 W (n_items x n_items; 1.6 GB at 20,000 items) or, with --scorer lowrank, a rank-r
scorer (foldin @ V) @ V^T of similar cost. A random W puts targets anywhere in the ranking, the
hardest case for the rank kernel. Rows:

  (a) scoring alone (the model's batches, nothing else);
  (b) evaluate_exact: score + mask + global ranks + all exact metrics at K in {1,5,10,20,50,100}
      (after one tiny call that loads the compiled rank kernel, a per-process cost shown apart);
  (c) reference: a per-user Python loop (mask, lexsort of the row by (-score, key), positions,
      metrics) on a subset of users, extrapolated; compared with the vectorised rank + metrics
      on the same users, interleaved, best of 3 (the machine is shared).
  keys: the dense tie-break keys of a batch (what a sampled-evaluation hook may ask for).

Run: python experiments/benchmarks/bench_eval.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_evalset

from linrec.data.splits import EvalSet
from linrec.eval.exact import evaluate_exact
from linrec.eval.metrics import EXACT_METRICS, exact_metrics
from linrec.eval.ranks import (
    BatchKeys,
    RankTable,
    batch_global_ranks,
    score_batches,
    tie_break_keys,
)

KS = (1, 5, 10, 20, 50, 100)


class ItemItemScorer:
    """score(foldin) = foldin @ W (dense W) or (foldin @ V) @ V^T (low rank); float32."""

    def __init__(self, n_items: int, kind: str, rank: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.kind = kind
        shape = (n_items, n_items) if kind == "dense" else (n_items, rank)
        self.weights = rng.standard_normal(shape, dtype=np.float32)

    def score(self, foldin: sp.csr_matrix, users: np.ndarray | None = None) -> np.ndarray:
        if self.kind == "dense":
            return np.asarray(foldin @ self.weights)
        return np.asarray(foldin @ self.weights) @ self.weights.T


def reference_user(scores_row: np.ndarray, foldin_items: np.ndarray, target_items: np.ndarray,
                   user: int, seed: int) -> dict[str, float]:
    """One user, the straightforward way: full lexsort of the masked row, then the formulas."""
    n_items = len(scores_row)
    keys = tie_break_keys(seed, np.array([user]), n_items)[0]
    masked = scores_row.astype(np.float64)
    masked[foldin_items] = -np.inf
    order = np.lexsort((keys, -masked))
    position = np.empty(n_items, dtype=np.int64)
    position[order] = np.arange(1, n_items + 1)
    p = np.sort(position[target_items])
    m, n_pool = len(p), n_items - len(foldin_items)
    out = {"auc": (n_pool - (m - 1) / 2 - p.mean()) / (n_pool - m)}
    for k in KS:
        hit = p <= k
        hits = hit.sum()
        gains = hit / np.log2(p + 1)
        out[f"recall@{k}"] = hits / m
        out[f"recall_trunc@{k}"] = hits / min(k, m)
        out[f"precision@{k}"] = hits / k
        out[f"hr@{k}"] = float(hits > 0)
        out[f"ndcg@{k}"] = gains.sum() / (1 / np.log2(np.arange(2, min(k, m) + 2))).sum()
        out[f"ap@{k}"] = (hit * np.arange(1, m + 1) / p).sum() / min(k, m)
        out[f"mrr@{k}"] = hit[0] / p[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--n-items", type=int, default=None)
    parser.add_argument("--n-users", type=int, default=None)
    parser.add_argument("--scorer", choices=("dense", "lowrank"), default="dense")
    parser.add_argument("--rank", type=int, default=1024, help="rank of the lowrank scorer")
    parser.add_argument("--reference-users", type=int, default=None)
    parser.add_argument("--memory-budget-mb", type=float, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n_items = args.n_items or (4000 if args.quick else 20_000)
    n_users = args.n_users or (500 if args.quick else 3000)
    n_reference = args.reference_users or (50 if args.quick else 200)

    evalset = make_evalset(n_users, n_items, args.seed)
    model = ItemItemScorer(n_items, args.scorer, args.rank, args.seed)
    n_foldin = np.diff(evalset.foldin.indptr)
    n_targets = np.diff(evalset.targets.indptr)
    print(f"n_items={n_items} n_users={n_users} scorer={args.scorer} "
          f"fold-in mean/max={n_foldin.mean():.1f}/{n_foldin.max()} "
          f"targets mean/max={n_targets.mean():.1f}/{n_targets.max()} "
          f"memory_budget_mb={args.memory_budget_mb}")

    # the compiled rank kernel is loaded once per process (from numba's cache, or compiled on
    # the first run on a machine): a fixed cost, timed apart
    t0 = time.perf_counter()
    tiny = slice(0, 2)
    batch_global_ranks(model.score(evalset.foldin[tiny]), evalset.foldin[tiny],
                       evalset.targets[tiny], BatchKeys(args.seed, evalset.users[tiny], n_items))
    kernel_load = time.perf_counter() - t0

    t0 = time.perf_counter()
    for _ in score_batches(model, evalset, users_known=False,
                           memory_budget_mb=args.memory_budget_mb):
        pass
    score_alone = time.perf_counter() - t0

    result = evaluate_exact(model, evalset, ks=KS, metrics=EXACT_METRICS, seed=args.seed,
                            users_known=False, memory_budget_mb=args.memory_budget_mb)
    tm = result.timings
    overhead = tm["rank"] + tm["metrics"]

    # (c) and the vectorised path on the same users, interleaved, best of 3 (shared machine)
    subset = np.arange(n_reference)
    sub = EvalSet(users=evalset.users[subset], foldin=evalset.foldin[subset],
                  targets=evalset.targets[subset])
    scores = model.score(sub.foldin)
    vectorised_times, reference_times = [], []
    for _ in range(3):
        work = scores.copy()
        t0 = time.perf_counter()
        batch = batch_global_ranks(work, sub.foldin, sub.targets,
                                   BatchKeys(args.seed, sub.users, n_items))
        table = RankTable(rows=batch.rows, users=sub.users[batch.rows], items=batch.items,
                          ranks=batch.ranks, n_candidates=batch.n_candidates, n_items=n_items)
        vectorised = exact_metrics(table, KS, EXACT_METRICS)
        vectorised_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        reference = [reference_user(scores[u], sub.foldin[u].indices, sub.targets[u].indices,
                                    int(sub.users[u]), args.seed) for u in subset]
        reference_times.append(time.perf_counter() - t0)
    speedup = min(reference_times) / min(vectorised_times)
    worst = max(abs(reference[i][key] - vectorised.per_user[key][i])
                for i in range(n_reference) for key in vectorised.per_user)
    worst_full = max(abs(reference[i][key] - result.per_user[key][i])
                     for i in range(n_reference) for key in result.per_user)

    batch_rows = min(n_users, 1000)
    keys_times = []
    for _ in range(3):
        t0 = time.perf_counter()
        tie_break_keys(args.seed, evalset.users[:batch_rows], n_items)
        keys_times.append(time.perf_counter() - t0)
    keys_per_user = min(keys_times) / batch_rows
    reference_per_user = min(reference_times) / n_reference

    rows = [
        ("(a) scoring alone", score_alone, n_users),
        ("(b) evaluate_exact total", tm["total"], n_users),
        ("    of which score", tm["score"], n_users),
        ("    of which mask + rank", tm["rank"], n_users),
        ("    of which metrics", tm["metrics"], n_users),
        ("(c) per-user loop reference", reference_per_user * n_users, n_users),
        ("    vectorised rank + metrics", min(vectorised_times) / n_reference * n_users, n_users),
        ("dense tie-break keys", keys_per_user * n_users, n_users),
    ]
    print(f"{'path':32s} {'seconds':>9s} {'users/s':>10s}")
    for name, seconds, users in rows:
        print(f"{name:32s} {seconds:9.3f} {users / seconds:10.0f}")
    print(f"overhead (rank + metrics) / score time: {overhead / tm['score']:.1%} "
          f"(vs scoring alone: {overhead / score_alone:.1%}; target <= 10%)")
    print(f"one-time load of the compiled rank kernel (per process): {kernel_load:.2f} s")
    print(f"per-user loop / vectorised (rank + metrics), same {n_reference} users, interleaved, "
          f"best of 3: {speedup:.1f}x (target >= 20x)")
    print(f"max |reference - vectorised| over {n_reference} users, all metrics: {worst:.2e} "
          f"(evaluate_exact: {worst_full:.2e})")


if __name__ == "__main__":
    main()
