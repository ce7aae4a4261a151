"""Metric functions of ranks, metric curves of a global-rank distribution, and the exact
full-ranking metrics of a RankTable (Rendle 2019)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from linrec.errors import ConfigError, DataError

if TYPE_CHECKING:
    from linrec.eval.ranks import RankTable

#: metrics that are a per-target gain w(R) of a single 1-based rank, summed over R <= K (Rendle
#: 2019, eqs. 9–15)
CURVE_METRICS = ("recall", "hr", "ndcg", "ap", "precision")


def rank_gain(metric: str, ranks: np.ndarray) -> np.ndarray:
    """w(R) for one relevant item at 1-based rank R: 1 (recall/hr), 1/log2(R+1) (ndcg),
    1/R (ap/rr/mrr), 1 (precision; divide by K afterwards).
    ranks: int array (any shape) -> float64 array."""
    ranks = np.asarray(ranks, dtype=np.float64)
    if metric in ("recall", "hr", "precision"):
        return np.ones_like(ranks)
    if metric == "ndcg":
        return 1.0 / np.log2(ranks + 1.0)
    if metric in ("ap", "rr", "mrr"):
        return 1.0 / ranks
    raise ConfigError(f"metric={metric!r} is not a rank-gain metric; choose one of {CURVE_METRICS}")


def curve(p_hat: np.ndarray, metric: str, k_max: int) -> np.ndarray:
    """T@1..T@k_max implied by a global-rank distribution p_hat (length n_items, p_hat[R-1] = P(R)):
    T@K = sum_{R<=K} P(R) w(R) (precision divides by K). Returns float64 (k_max,).
    p_hat may hold negative entries (BV/MN); nothing is clipped."""
    if k_max <= 0:
        raise ConfigError(f"k_max={k_max} must be a positive integer")
    p = np.asarray(p_hat, dtype=np.float64)
    k_max_eff = min(k_max, len(p))
    ranks = np.arange(1, k_max_eff + 1)
    out = np.cumsum(p[:k_max_eff] * rank_gain(metric, ranks))
    if k_max > k_max_eff:
        out = np.concatenate([out, np.full(k_max - k_max_eff, out[-1] if len(out) else 0.0)])
    if metric == "precision":
        out = out / np.arange(1, k_max + 1)
    return out


# ---------------------------------------------------------------------------------------------
# exact full-ranking metrics of a RankTable (Rendle 2019, eqs. 2–8, Liang et al. 2018)
# ---------------------------------------------------------------------------------------------

#: exact metrics; all but "auc" are reported at every K as "<metric>@<K>"
EXACT_METRICS = ("recall", "recall_trunc", "ndcg", "precision", "hr", "ap", "mrr", "auc")


def check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    """The cut-offs as positive ints (sorted, unique); ConfigError naming a bad value."""
    ks = tuple(ks)
    if not ks:
        raise ConfigError("ks is empty; give at least one cut-off K >= 1")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
            raise ConfigError(f"K={k!r} in ks={list(ks)} must be a positive integer")
    return tuple(sorted({int(k) for k in ks}))


def check_metrics(metrics: Sequence[str]) -> tuple[str, ...]:
    """The metric names, checked against EXACT_METRICS (ConfigError naming an unknown one)."""
    metrics = tuple(metrics)
    for name in metrics:
        if name not in EXACT_METRICS:
            raise ConfigError(f"metric={name!r} is unknown; choose from {list(EXACT_METRICS)}")
    if not metrics:
        raise ConfigError(f"metrics is empty; choose from {list(EXACT_METRICS)}")
    return metrics


def parse_metric_key(key: str, where: str = "metric") -> tuple[str, int | None]:
    """'ndcg@100' -> ('ndcg', 100); 'auc' -> ('auc', None). ConfigError for anything else."""
    name, at, k = str(key).partition("@")
    well_formed = not at if name == "auc" else k.isdigit() and int(k) > 0
    if name not in EXACT_METRICS or not well_formed:
        raise ConfigError(
            f"{where}={key!r}: expected <metric>@<K> with metric in {list(EXACT_METRICS)}"
            " and K a positive integer, or 'auc'"
        )
    return name, (int(k) if k else None)


def resolve_selection(selection: str, n_items: int) -> str:
    """The selection key a run reports: K is lowered to n_items when the catalogue is smaller."""
    name, k = parse_metric_key(selection, where="eval.selection")
    return selection if k is None or k <= n_items else f"{name}@{n_items}"


@dataclass(frozen=True)
class ExactMetrics:
    """means: {"ndcg@100": mean over users with >= 1 target, ..., "auc": ...};
    per_user: the same keys -> float64 (n_users,) aligned with rows / users / n_targets
    (eval rows that have >= 1 held-out item, ascending)."""

    means: dict[str, float]
    per_user: dict[str, np.ndarray]
    rows: np.ndarray
    users: np.ndarray
    n_targets: np.ndarray


@dataclass(frozen=True)
class TargetPositions:
    """Positions of each user's held-out items in the ranked list of all non-fold-in items.

    For a user's targets sorted by global rank, p_i = R_i + (i - 1) (i = 1..|T|): the other
    targets ahead of it are added back to its rank among candidates. positions / index_in_user:
    int64 (n_targets_total,), grouped by user, ascending within a user; starts: int64 (n_users,)
    first entry of each user; n_targets, n_pool (= n_items - |foldin|): int64 (n_users,)."""

    positions: np.ndarray
    index_in_user: np.ndarray
    starts: np.ndarray
    n_targets: np.ndarray
    n_pool: np.ndarray
    rows: np.ndarray
    users: np.ndarray


def target_positions(table: RankTable) -> TargetPositions:
    """TargetPositions of a RankTable (entries in any order)."""
    rows, ranks = np.asarray(table.rows, np.int64), np.asarray(table.ranks, np.int64)
    if len(ranks) == 0:
        raise DataError("the rank table is empty: no evaluation user has a held-out item")
    bad = (ranks < 1) | (ranks > table.n_candidates)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"rank table entry {i}: rank={ranks[i]} outside [1, n_candidates="
                        f"{table.n_candidates[i]}]")
    order = np.lexsort((ranks, rows))
    rows, ranks = rows[order], ranks[order]
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    n_targets = np.diff(np.r_[starts, len(rows)])
    index_in_user = np.arange(len(rows)) - np.repeat(starts, n_targets)
    n_pool = np.asarray(table.n_candidates, np.int64)[order][starts] + n_targets - 1
    return TargetPositions(positions=ranks + index_in_user, index_in_user=index_in_user,
                           starts=starts, n_targets=n_targets, n_pool=n_pool, rows=rows[starts],
                           users=np.asarray(table.users, np.int64)[order][starts])


def _per_user_sum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return np.add.reduceat(values, starts, dtype=np.float64)


def _at_k(metric: str, k: int, pos: TargetPositions) -> np.ndarray:
    """Per-user value of a top-K metric (Rendle 2019, eqs. 2–8) from the list positions."""
    p, starts, m = pos.positions, pos.starts, pos.n_targets
    hit = p <= k
    hits = np.add.reduceat(hit, starts, dtype=np.int64)
    if metric == "recall":  # hits / |T| (LightGCN, BARS)
        return hits / m
    if metric == "recall_trunc":  # hits / min(K, |T|) (VAE-CF, EASE; Liang et al. 2018)
        return hits / np.minimum(k, m)
    if metric == "precision":
        return hits / k
    if metric == "hr":  # at least one held-out item in the top K
        return (hits > 0).astype(np.float64)
    if metric == "ndcg":  # binary gains, IDCG over min(K, |T|) positions
        dcg = _per_user_sum(np.where(hit, rank_gain("ndcg", p), 0.0), starts)
        ideal = np.cumsum(rank_gain("ndcg", np.arange(1, min(k, int(m.max())) + 1)))
        return dcg / ideal[np.minimum(k, m) - 1]
    if metric == "ap":  # (1/min(|T|,K)) sum_{i<=K} delta(i in R) Prec_i; j-th hit: Prec = j/p
        precision_at_hit = (pos.index_in_user + 1) * rank_gain("ap", p)
        return _per_user_sum(np.where(hit, precision_at_hit, 0.0), starts) / np.minimum(k, m)
    if metric == "mrr":  # RR@K = delta(min p <= K) / min p
        first = p[starts]
        return np.where(first <= k, rank_gain("mrr", first), 0.0)
    raise ConfigError(f"metric={metric!r} is unknown; choose from {list(EXACT_METRICS)}")


def _auc(pos: TargetPositions) -> np.ndarray:
    """Rendle 2019, eqs. 2–8: (n_pool - (|R|-1)/2 - mean(p)) / (n_pool - |R|); NaN when no item is
    left to rank below the targets (n_pool == |R|)."""
    m, n_pool = pos.n_targets.astype(np.float64), pos.n_pool.astype(np.float64)
    mean_p = _per_user_sum(pos.positions, pos.starts) / m
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = (n_pool - (m - 1) / 2 - mean_p) / (n_pool - m)
    return np.where(n_pool > m, auc, np.nan)


def exact_metrics(table: RankTable, ks: Sequence[int], metrics: Sequence[str]) -> ExactMetrics:
    """Exact metrics of every user with >= 1 held-out item, and their means over those users.

    Metrics are functions of the positions of the held-out items in the list of all non-fold-in
    items (`target_positions`), which reproduces the top-K lists of Liang et al.'s
    Recall_at_k_batch / NDCG_binary_at_k_batch. K larger than n_items is clipped to n_items
    (only precision changes: hits / min(K, n_items)); keys keep the requested K.
    AUC is NaN for a user without candidate items and left out of its mean."""
    ks, metrics = check_ks(ks), check_metrics(metrics)
    pos = target_positions(table)
    per_user: dict[str, np.ndarray] = {}
    for metric in metrics:
        if metric == "auc":
            per_user["auc"] = _auc(pos)
            continue
        for k in ks:
            per_user[f"{metric}@{k}"] = _at_k(metric, min(k, int(table.n_items)), pos)
    means = {}
    for key, values in per_user.items():
        defined = values[~np.isnan(values)]
        means[key] = float(defined.mean()) if len(defined) else float("nan")
    return ExactMetrics(means=means, per_user=per_user, rows=pos.rows, users=pos.users,
                        n_targets=pos.n_targets)
