"""Exact full-ranking evaluation of one split in one pass over user batches.

`evaluate_exact` scores the eval users in batches sized by a memory budget, masks each user's
fold-in items, ranks every held-out item (`linrec.eval.ranks`), hands each batch to the hooks,
and computes the exact metrics from the resulting RankTable. The score matrix of all users is
never stored.

Hook protocol (sampled evaluation plugs in here). A hook is any callable

    hook(rows, scores, keys, batch_ranks) -> None

called once per batch, in eval-row order, after the batch is ranked:
- rows: int64 (b,) positions of the batch's users in the EvalSet (evalset.users[rows] are the
  user ids, evalset.foldin[rows] / evalset.targets[rows] their rows);
- scores: float (b, n_items) model scores; fold-in entries are -inf (unless the pass ranks
  them, exclude_foldin=False), held-out entries keep their scores (a hook must itself treat a
  user's *other* held-out items as excluded). A hook may change entries in place only if it
  restores them before it returns (the sampled-rank hook masks targets that way); the array is
  not kept after the batch.
- keys: `BatchKeys` of the batch: keys[r, items] gives uint64 tie-break keys of (rows[r], items)
  pairs (integer arrays, broadcast; cheap: only those pairs are hashed); np.asarray(keys) the
  dense (b, n_items) matrix (costs about as much as ranking the batch). Item j beats
  target t when s_j > s_t, or s_j == s_t and key_j < key_t (`linrec.eval.ranks.beats`).
- batch_ranks: `BatchRanks` of the batch (rows are positions within the batch, entries sorted by
  (row, rank)): items, global ranks R, target_scores, n_candidates.
A hook keeps its own state (e.g. an object with __call__ and a result method).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from linrec.console import tracked
from linrec.data.splits import EvalSet
from linrec.errors import DataError
from linrec.eval.metrics import check_ks, check_metrics, exact_metrics
from linrec.eval.ranks import (
    BatchKeys,
    BatchRanks,
    RankTable,
    Scorer,
    ranked_batches,
    table_from_batch,
)

#: hook(rows, scores, keys, batch_ranks) -> None (module docstring)
BatchHook = Callable[[np.ndarray, np.ndarray, BatchKeys, BatchRanks], None]


@dataclass(frozen=True)
class ExactResult:
    """rank_table: global rank of every held-out item; metrics: {"ndcg@100": mean, ..., "auc"};
    per_user: same keys -> float64 arrays aligned with per_user_rows (eval rows with >= 1
    held-out item); timings: seconds spent in score, rank, hooks, metrics, total."""

    rank_table: RankTable
    metrics: dict[str, float]
    per_user: dict[str, np.ndarray]
    per_user_rows: np.ndarray
    timings: dict[str, float]


def evaluate_exact(model: Scorer, evalset: EvalSet, *, ks: Sequence[int],
                   metrics: Sequence[str], seed: int, users_known: bool,
                   batch_hooks: Sequence[BatchHook] = (), memory_budget_mb: float = 512,
                   batch_size: int | None = None, exclude_foldin: bool = True) -> ExactResult:
    """Exact metrics of `model` on `evalset` (Rendle 2019, eqs. 2–8) in one batch pass.

    users_known: pass evalset.users to model.score (weak generalization) or None (strong:
    fold in from evalset.foldin). seed: the tie-break seed (docs/concepts/evaluation.md, ties).
    batch_hooks: see the module docstring. batch_size overrides the size derived from
    memory_budget_mb. exclude_foldin=False ranks the fold-in items among all items instead of
    masking them (`ranks.ranked_batches`). Without hooks, a model whose scores lie on a GPU
    (`scores_on_device`) is ranked there and only the ranks come back
    (`linrec.eval.device_ranks`)."""
    t_start = time.perf_counter()
    ks, metrics = check_ks(ks), check_metrics(metrics)
    if evalset.targets.nnz == 0:
        raise DataError("the evaluation set has no held-out items (EvalSet.targets is empty)")
    n_items = evalset.foldin.shape[1]
    timings = {"score": 0.0, "rank": 0.0, "hooks": 0.0}
    tables = []
    batches = ranked_batches(model, evalset, seed=seed, users_known=users_known,
                             batch_size=batch_size, memory_budget_mb=memory_budget_mb,
                             timings=timings, exclude_foldin=exclude_foldin,
                             host_scores=bool(batch_hooks))
    n_batches = -(-evalset.n_users // batch_size) if batch_size else None
    for batch in tracked(batches, "evaluate", n_batches, unit="batches"):
        t0 = time.perf_counter()
        for hook in batch_hooks:
            hook(batch.rows, batch.scores, batch.keys, batch.ranks)
        t1 = time.perf_counter()
        timings["hooks"] += t1 - t0
        tables.append(table_from_batch(batch, evalset.users, n_items))
        timings["rank"] += time.perf_counter() - t1
    t0 = time.perf_counter()
    table = RankTable.concat(tables, n_items)
    exact = exact_metrics(table, ks, metrics)
    timings["metrics"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    return ExactResult(rank_table=table, metrics=exact.means, per_user=exact.per_user,
                      per_user_rows=exact.rows, timings=timings)
