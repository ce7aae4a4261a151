"""Validation on item-sampled ranks with an estimator (eval.validation.method=sampled): the
metric a trainer selects epochs and drives its schedule on, estimated from n − 1 sampled items
per held-out item instead of a ranking of the whole catalogue (Krichene & Rendle 2020; Li et
al. 2023, §3–4).

The sampled items are drawn once, when training starts, exactly as the sampled block of the
evaluation draws its first repeat (`NegativeSampler`, seeded by the run seed, uniform over every
item but the target): every epoch is judged on the same sample sets, so two epochs differ by the
model only. Each pass scores only the (user, item) pairs it needs (`Recommender.score_items`;
MF computes B·n dot products instead of B·n_items), ranks each target among its sampled items
with the exact ranking's rules (score descending, then the seeded tie-break key; the user's
fold-in items and other targets never beat a target), estimates the distribution of the global
ranks with the chosen estimator and returns the target-level metric at K that it implies
(`EstimateResult.curve`).

The value is the target-level metric (each held-out item counts once), an estimate of the
exact one; it is what the trainer compares between epochs, and results.json records which
validation selected the epochs (`describe`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.data.splits import EvalSet
from linrec.errors import ConfigError
from linrec.eval._checks import check_sample_size
from linrec.eval._sparse import binary_sorted_csr, csr_contains
from linrec.eval.estimators.registry import estimate
from linrec.eval.metrics import curve, parse_metric_key
from linrec.eval.negatives import NegativeSampler, canonical_targets
from linrec.eval.sampled_block import sampling_scheme
from linrec.item_order import sampled_wins, tie_break_keys_at
from linrec.scoring import gather_scores


class SampledValidation:
    """model -> the estimate of the target-level `key` ("recall@20") on `evalset`.

    evalset: the validation (or test) users; n_items: catalogue size; estimator: a fixed-size
    estimator name; sample_size: n (the target and n − 1 sampled items); replace: binomial
    (True) or hypergeometric sampling; seed: the run seed (sampled items and tie-break keys);
    users_known: score users by id (weak generalization) or fold them in; exclude_foldin=False:
    the fold-in items may beat a target like any other item. After each call,
    `ranks` holds the sampled ranks (int64 (T,), canonical target order), `seconds` / `calls`
    the time spent in passes so far, and `draw_seconds` the one-off drawing of the sample sets
    at the first pass."""

    def __init__(self, evalset: EvalSet, n_items: int, *, key: str, estimator: str,
                 sample_size: int, replace: bool, seed: int, users_known: bool,
                 memory_budget_mb: float = 512, exclude_foldin: bool = True) -> None:
        self.metric, self.k = parse_metric_key(key, where="eval.selection")
        if self.k is None:
            raise ConfigError(f"eval.selection={key}: sampled validation estimates a metric at "
                              "a cut-off K")
        self.key, self.estimator, self.n_items = key, estimator, int(n_items)
        self.sample_size = check_sample_size(
            n_items, sample_size, where="eval.validation.sample_size",
            hint=f"lower it below the catalogue's {n_items} items")
        self.scheme = sampling_scheme(replace)
        self.seed, self.users_known = int(seed), bool(users_known)
        self.evalset, self.replace = evalset, bool(replace)
        self.exclude_foldin = bool(exclude_foldin)
        self.rows, self._targets = canonical_targets(evalset)
        self.users = np.asarray(evalset.users, dtype=np.int64)[self.rows]
        #: targets per call of score_items, bounded as if each pair's item row (64 float32) were
        #: gathered; a model that reads full rows batches those itself
        self.chunk = max(1, int(memory_budget_mb * 2**20) // (self.sample_size * 64 * 4))
        self.memory_budget_mb = memory_budget_mb
        self.items: np.ndarray | None = None  # drawn at the first pass (a model may never ask)
        self.never_beats: np.ndarray | None = None
        self.ranks = np.zeros(len(self.rows), dtype=np.int64)
        self.seconds, self.calls, self.draw_seconds = 0.0, 0, 0.0

    def _draw(self) -> None:
        """The sample sets: `items` int (T, n), each target then its sampled items, and
        `never_beats` bool (T, n − 1), the sampled items that are the user's other targets or
        (unless exclude_foldin is false) fold-in items."""
        never_beat = sp.csr_matrix(self.evalset.targets)
        if self.exclude_foldin:
            never_beat = never_beat + sp.csr_matrix(self.evalset.foldin)
        excluded = binary_sorted_csr(never_beat)
        negatives = NegativeSampler(self.seed, self.rows, self._targets, self.n_items,
                                    self.sample_size, self.replace, "all_but_target",
                                    excluded).all(0)
        self.items = np.concatenate([self._targets[:, None], negatives], axis=1).astype(
            np.int32 if self.n_items < 2**31 else np.int64)
        self.never_beats = csr_contains(excluded, self.rows[:, None], negatives)

    def __call__(self, model: Any) -> float:
        if self.items is None:
            start = time.perf_counter()
            self._draw()
            self.draw_seconds = time.perf_counter() - start
        start = time.perf_counter()
        for lo in range(0, len(self.rows), self.chunk):
            hi = min(lo + self.chunk, len(self.rows))
            self.ranks[lo:hi] = self._ranks(model, slice(lo, hi))
        p_hat = estimate(self.estimator, self.ranks, n_items=self.n_items,
                         sample_size=self.sample_size, scheme=self.scheme).p_hat
        value = float(curve(p_hat, self.metric, self.k)[self.k - 1])
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return value

    def _ranks(self, model: Any, part: slice) -> np.ndarray:
        """1 + #{sampled items beating the target} of the targets in `part`: int64."""
        rows, users, items = self.rows[part], self.users[part], self.items[part]
        foldin, known = self.evalset.foldin[rows], users if self.users_known else None
        if hasattr(model, "score_items"):
            scores = np.asarray(model.score_items(foldin, known, items))
        else:  # any scorer: its full rows, read at the items
            scores = gather_scores(model.score, foldin, known, items,
                                   memory_budget_mb=self.memory_budget_mb)
        won = sampled_wins(scores[:, 1:], scores[:, :1],
                           lambda t, j: tie_break_keys_at(self.seed, users[t], items[t, j + 1]),
                           lambda t: tie_break_keys_at(self.seed, users[t], items[t, 0]))
        won &= ~self.never_beats[part]
        return 1 + won.sum(axis=1, dtype=np.int64)

    def describe(self) -> dict[str, Any]:
        """What selected the epochs, for results.json."""
        return {"method": "sampled", "metric": f"target-level {self.key}",
                "estimator": self.estimator, "sample_size": self.sample_size,
                "scheme": self.scheme, "seed": self.seed, "n_targets": int(len(self.rows)),
                "passes": self.calls, "draw_seconds": self.draw_seconds,
                "seconds_per_pass": self.seconds / self.calls if self.calls else None}
