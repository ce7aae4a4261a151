"""EvalReport: the typed record `evaluate` returns, and its one JSON form (the `splits` and
`selection` blocks of results.json).

Arrays a report keeps for callers (rank tables, per-user values, per-repeat estimator curves,
the first sample of each setting) stay in memory; `to_json` writes the numbers a reader of
results.json needs: exact metrics, and per sampled setting the protocol, the exact target-level
metrics, each estimator's mean, std and relative error at the reported K, its average relative
error over K = 1..k_max, and timings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linrec.eval.ranks import RankTable

#: the K at which a sampled setting reports every estimator (those <= k_max)
SAMPLED_REPORT_KS = (1, 5, 10, 20, 50)


def valid_estimates(values: np.ndarray) -> np.ndarray:
    """Per K, whether every repeat's estimate can be a metric's value (finite, in [0, 1]):
    values (repeats, k_max) -> bool (k_max,)."""
    values = np.asarray(values, dtype=np.float64)
    return np.all(np.isfinite(values) & (values >= 0.0) & (values <= 1.0), axis=0)


@dataclass
class SampledSetting:
    """One sampled setting ('n=100' or 'adaptive') of one split.

    exact_curves: metric -> exact target-level T@1..k_max, float64 (k_max,);
    curves: estimator -> metric -> estimates of every repeat, float64 (repeats, k_max);
    first_sample: (sampled ranks, sample sizes) of repeat 0 in the canonical target order;
    protocol: sample size(s), pool, repeats, seed, N the estimators assumed, ...;
    timings: estimator -> seconds over all repeats."""

    label: str
    protocol: dict[str, Any]
    exact_curves: dict[str, np.ndarray]
    curves: dict[str, dict[str, np.ndarray]]
    first_sample: tuple[np.ndarray, np.ndarray | int] | None
    timings: dict[str, float]

    @property
    def k_max(self) -> int:
        return int(self.protocol["k_max"])

    def exact_at(self) -> dict[str, float]:
        """{'ndcg@10': exact T@10, ...} at the reported K."""
        return {f"{m}@{k}": float(c[k - 1]) for m, c in self.exact_curves.items()
                for k in SAMPLED_REPORT_KS if k <= self.k_max}

    def average_relative_errors(self, estimator: str, metric: str) -> np.ndarray:
        """ARE in % over K = 1..k_max of each repeat of `estimator` (Li et al. 2023, Tables 1–11):
        (repeats,)."""
        from linrec.eval.estimators.accuracy import average_relative_error

        exact = self.exact_curves[metric]
        ks = range(1, len(exact) + 1)
        return np.array([average_relative_error(c, exact, ks=ks)
                         for c in self.curves[estimator][metric]])

    def to_json(self) -> dict[str, Any]:
        """The setting's block of results.json. An estimate that cannot be a metric's value
        (a repeat outside [0, 1] or not finite at that K: an estimator that diverged, as LS can
        on few samples per rank) is written as null with `"status": "diverged"`, never as a
        number; so is its point of the mean curve, and the average relative error of a curve
        with such a point."""
        estimators: dict[str, Any] = {}
        for name, by_metric in self.curves.items():
            metrics: dict[str, Any] = {}
            are: dict[str, Any] = {}
            for m, values in by_metric.items():
                exact = self.exact_curves[m]
                valid = valid_estimates(values)
                for k in (k for k in SAMPLED_REPORT_KS if k <= self.k_max):
                    if not valid[k - 1]:
                        metrics[f"{m}@{k}"] = {"mean": None, "std": None, "rel_error": None,
                                               "status": "diverged"}
                        continue
                    mean = float(values[:, k - 1].mean())
                    metrics[f"{m}@{k}"] = {
                        "mean": mean,
                        "std": float(values[:, k - 1].std()),
                        "rel_error": (mean - exact[k - 1]) / exact[k - 1] if exact[k - 1] else None,
                    }
                per_repeat = self.average_relative_errors(name, m)
                if valid.all() and np.all(np.isfinite(per_repeat)):
                    are[m] = {"mean": float(np.mean(per_repeat)), "std": float(np.std(per_repeat))}
                else:
                    are[m] = {"mean": None, "std": None, "status": "diverged"}
            estimators[name] = {"metrics": metrics, "are": are}
        return {"protocol": self.protocol, "exact": self.exact_at(), "estimators": estimators,
                "curves": self.mean_curves(), "rank_histogram": self.rank_histogram(),
                "timings": self.timings}

    def mean_curves(self) -> dict[str, dict[str, list[float | None]]]:
        """{'exact': {metric: T@1..k_max}, estimator: {metric: mean over repeats}} for the
        figures (metric and relative error vs K); a K where a repeat diverged is None."""
        out: dict[str, dict[str, list[float | None]]] = {
            "exact": {m: [float(x) for x in c] for m, c in self.exact_curves.items()}}
        for name, by_metric in self.curves.items():
            out[name] = {m: [float(x) if ok else None
                             for x, ok in zip(v.mean(axis=0), valid_estimates(v), strict=True)]
                         for m, v in by_metric.items()}
        return out

    def rank_histogram(self) -> dict[str, list[int]] | None:
        """Counts of the sampled ranks of repeat 0 ({'rank': [...], 'count': [...]}, ranks
        that occur), or None without a stored sample."""
        if self.first_sample is None:
            return None
        ranks, counts = np.unique(np.asarray(self.first_sample[0], dtype=np.int64),
                                  return_counts=True)
        return {"rank": ranks.tolist(), "count": counts.tolist()}


@dataclass
class SplitReport:
    """The evaluation of one split ('valid' or 'test').

    exact: {'ndcg@100': mean over users with >= 1 held-out item, ..., 'auc': ...};
    per_user: the same keys -> float64 arrays aligned with per_user_rows;
    rank_table: the global rank of every held-out item (saved as ranks.npz);
    sampled: setting label -> SampledSetting; timings: seconds of score, rank, hooks, metrics."""

    name: str
    n_users: int
    exact: dict[str, float]
    rank_table: RankTable
    per_user: dict[str, np.ndarray] = field(repr=False)
    per_user_rows: np.ndarray = field(repr=False)
    timings: dict[str, float] = field(default_factory=dict)
    sampled: dict[str, SampledSetting] = field(default_factory=dict)

    def per_user_users(self) -> np.ndarray:
        """int64 (len(per_user_rows),): the user (row id of the split's user vocabulary, as in
        ranks.npz) of each per-user value."""
        rows, first = np.unique(self.rank_table.rows, return_index=True)
        return self.rank_table.users[first[np.searchsorted(rows, self.per_user_rows)]]

    def to_json(self) -> dict[str, Any]:
        block: dict[str, Any] = {"n_users": self.n_users,
                                 "n_targets": int(self.rank_table.ranks.size),
                                 "exact": self.exact, "timings": self.timings}
        if self.sampled:
            block["sampled"] = {label: s.to_json() for label, s in self.sampled.items()}
        return block


@dataclass
class EvalReport:
    """Every evaluated split, the selection metric (metric key, the split it was read on, its
    value) and the total seconds."""

    splits: dict[str, SplitReport]
    selection_metric: str
    selection_split: str
    seconds: float = 0.0

    @property
    def selection_value(self) -> float | None:
        split = self.splits.get(self.selection_split)
        value = None if split is None else split.exact.get(self.selection_metric)
        return None if value is None else float(value)

    def to_json(self) -> dict[str, Any]:
        """The `splits` and `selection` blocks of results.json."""
        return {"splits": {name: s.to_json() for name, s in self.splits.items()},
                "selection": {"metric": self.selection_metric, "split": self.selection_split,
                              "value": self.selection_value}}
