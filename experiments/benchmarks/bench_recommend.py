"""Benchmark of top-K lists (`Recommender.recommend`): score + mask + select, against the
hand-written masking + argpartition + sort a user would otherwise write, in the same run.

Data: the ML-20M-like users of bench_eval (log-normal activity, Zipf popularity), n_users users
whose whole rows are the fold-in; model: EASE fitted on them (float32; the fit is not timed).
Rows, each the best of --repeats:
  score      the model's scores in the same batches (foldin @ W), nothing else;
  recommend  model.recommend(foldin, k): score, mask the fold-in, exact top-k in the evaluator's
             tie order (torch.topk on the batch, key order inside the list);
  reference  what a user writes with scipy and numpy: scores = foldin @ W (scipy), mask,
             np.argpartition(-scores, k) then argsort of the k, checked to give the same lists
             (continuous scores: no ties).
bench_peers.py measures LensKit's and Cornac's own top-k calls beside linrec's, each in a fresh
process with the peer installed.
Goal: top-20 for 10 000 users at 20 000 items in <= 3 s on 2 cores.

Run: python experiments/benchmarks/bench_recommend.py [--quick]
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

from linrec.hardware import batch_size_for  # noqa: E402
from linrec.models import EASE  # noqa: E402


def best_of(repeats: int, fn):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--n-items", type=int, default=None)
    parser.add_argument("--n-users", type=int, default=None)
    parser.add_argument("-k", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-budget-mb", type=float, default=512)
    args = parser.parse_args()
    n_items = args.n_items or (2_000 if args.quick else 20_000)
    n_users = args.n_users or (1_000 if args.quick else 10_000)
    k, budget = args.k, args.memory_budget_mb

    evalset = make_evalset(n_users, n_items, seed=0)
    foldin = (evalset.foldin + evalset.targets).tocsr()
    t0 = time.perf_counter()
    model = EASE(lam=500.0, dtype="float32").fit(foldin)
    print(f"EASE fit on {n_users} x {n_items} ({foldin.nnz} interactions): "
          f"{time.perf_counter() - t0:.1f} s (not part of the comparison)")
    step = batch_size_for(n_items, budget)
    batches = [slice(s, min(n_users, s + step)) for s in range(0, n_users, step)]

    def score_only():
        for rows in batches:
            model.score(foldin[rows])

    def reference():
        out = []
        for rows in batches:
            part = foldin[rows]
            scores = np.asarray(sp.csr_matrix(part, dtype=model.W_.dtype) @ model.W_)
            scores[np.repeat(np.arange(part.shape[0]), np.diff(part.indptr)),
                   part.indices] = -np.inf
            top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
            out.append(np.take_along_axis(top, order, axis=1))
        return np.vstack(out)

    t_score, _ = best_of(args.repeats, score_only)
    t_rec, (items, _) = best_of(args.repeats, lambda: model.recommend(foldin, k,
                                                                      memory_budget_mb=budget))
    t_ref, ref_items = best_of(args.repeats, reference)
    same = np.array_equal(items, ref_items)
    print(f"top-{k} for {n_users} users at {n_items} items, batches of {step} rows, "
          f"best of {args.repeats}:")
    print(f"  score only          {t_score:7.2f} s")
    print(f"  recommend           {t_rec:7.2f} s   (mask + select: {t_rec - t_score:.2f} s, "
          f"{100 * (t_rec - t_score) / t_score:.0f} % of scoring)")
    print(f"  reference numpy     {t_ref:7.2f} s   recommend is {t_ref / t_rec:.2f}x faster; "
          f"same lists: {same}")
    print("  goal: <= 3 s at 10 000 users x 20 000 items on 2 cores (the peers' own top-k calls: "
          "bench_peers.py)")
    if not same:
        raise SystemExit("recommend and the reference disagree")


if __name__ == "__main__":
    main()
