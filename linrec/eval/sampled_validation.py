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

With `adaptive_mle` (adaptive sampling, Li et al. 2023, Algorithm 1) a target ranked first among
its n0 items is ranked again among a fresh set of 2·n0, and so on up to n_max; each level is a
draw of its own (the sampler's repeat = the level), fixed for the whole fit like the first, and
only the targets that reach a level are scored there. The estimator takes each target's last
rank and set size.

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
from linrec.eval._sparse import binary_sorted_csr, csr_keys, keys_contain
from linrec.eval.estimators.registry import adaptive_estimators, estimate
from linrec.eval.metrics import curve, parse_metric_key
from linrec.eval.negatives import NegativeSampler, canonical_targets
from linrec.eval.sampled_block import sampling_scheme
from linrec.eval.simulate import adaptive_levels
from linrec.item_order import sampled_wins, tie_break_keys_at
from linrec.scoring import gather_scores


class SampledValidation:
    """model -> the estimate of the target-level `key` ("recall@20") on `evalset`.

    evalset: the validation (or test) users; n_items: catalogue size; estimator: a fixed-size
    estimator name or adaptive_mle; sample_size: n (the target and n − 1 sampled items; the
    first set of adaptive_mle); replace: binomial
    (True) or hypergeometric sampling; seed: the run seed (sampled items and tie-break keys);
    users_known: score users by id (weak generalization) or fold them in; exclude_foldin=False:
    the fold-in items may beat a target like any other item; n_max: the largest set of the
    adaptive estimator (ignored by the others). After each call, `ranks` holds the sampled ranks
    and `sizes` the size of the set each was ranked in (int64 (T,), canonical target order),
    `seconds` / `calls` the time spent in passes so far, and `draw_seconds` the one-off drawing
    of the first sample sets."""

    def __init__(self, evalset: EvalSet, n_items: int, *, key: str, estimator: str,
                 sample_size: int, replace: bool, seed: int, users_known: bool,
                 memory_budget_mb: float = 512, exclude_foldin: bool = True,
                 n_max: int | None = None) -> None:
        self.metric, self.k = parse_metric_key(key, where="eval.selection")
        if self.k is None:
            raise ConfigError(f"eval.selection={key}: sampled validation estimates a metric at "
                              "a cut-off K")
        self.key, self.estimator, self.n_items = key, estimator, int(n_items)
        self.sample_size = check_sample_size(
            n_items, sample_size, where="eval.validation.sample_size",
            hint=f"lower it below the catalogue's {n_items} items")
        #: the set sizes n0·2^j a target may reach (one level unless the estimator is adaptive)
        self.levels = (adaptive_levels(n_items, self.sample_size, n_max or self.sample_size)
                       if estimator in adaptive_estimators() else np.array([self.sample_size]))
        self.scheme = sampling_scheme(replace)
        self.seed, self.users_known = int(seed), bool(users_known)
        self.evalset, self.replace = evalset, bool(replace)
        self.exclude_foldin = bool(exclude_foldin)
        self.rows, self._targets = canonical_targets(evalset)
        self.users = np.asarray(evalset.users, dtype=np.int64)[self.rows]
        self.memory_budget_mb = memory_budget_mb
        self.items: np.ndarray | None = None  # drawn at the first pass (a model may never ask)
        #: `csr_keys` of the items that never beat a target (made with the sample sets)
        self._excluded_keys: np.ndarray | None = None
        self._samplers: dict[int, NegativeSampler] = {}  # one per level, made when first needed
        self.ranks = np.zeros(len(self.rows), dtype=np.int64)
        self.sizes = np.full(len(self.rows), self.sample_size, dtype=np.int64)
        self.seconds, self.calls, self.draw_seconds = 0.0, 0, 0.0

    def _draw(self) -> None:
        """The sample sets: `items` int (T, n), each target then its sampled items; and the
        items that never beat a target: the user's other targets and (unless exclude_foldin is
        false) fold-in items."""
        never_beat = sp.csr_matrix(self.evalset.targets)
        if self.exclude_foldin:
            never_beat = never_beat + sp.csr_matrix(self.evalset.foldin)
        self._excluded_keys = csr_keys(binary_sorted_csr(never_beat))
        negatives = self._sampler(0).all(0)
        self.items = np.concatenate([self._targets[:, None], negatives], axis=1).astype(
            np.int32 if self.n_items < 2**31 else np.int64)

    def _sampler(self, level: int) -> NegativeSampler:
        """The sampler of the sets of size levels[level]; each level draws its own stream
        (repeat = level), the same at every pass."""
        if level not in self._samplers:
            self._samplers[level] = NegativeSampler(
                self.seed, self.rows, self._targets, self.n_items, int(self.levels[level]),
                self.replace, "all_but_target")
        return self._samplers[level]

    def _grow(self, model: Any) -> None:
        """Adaptive sampling (Li et al. 2023, Algorithm 1): a target ranked first among its
        levels[j] items is ranked again among a fresh set of levels[j + 1] items, up to the
        last level; `ranks` and `sizes` end at each target's last set. Each call's sets are
        drawn for that call's targets only (ascending, so a sampling block they share is drawn
        once): memory stays at one call's sets, not every growing target's."""
        self.sizes[:] = self.levels[0]
        for level in range(1, len(self.levels)):
            grow = np.flatnonzero(self.ranks == 1)  # first among its set at the last level
            if grow.size == 0:
                return
            sampler, step = self._sampler(level), self.targets_per_call(level)
            for lo in range(0, grow.size, step):
                part = grow[lo:lo + step]
                items = np.concatenate([self._targets[part, None],
                                        sampler.negatives(level, part)], axis=1)
                self.ranks[part] = self._pair_ranks(model, part, items)
            self.sizes[grow] = self.levels[level]

    def targets_per_call(self, level: int) -> int:
        """Targets per call of score_items at a level, bounded as if each pair's item row (64
        float32) were gathered; a model that reads full rows batches those itself."""
        return max(1, int(self.memory_budget_mb * 2**20) // (int(self.levels[level]) * 64 * 4))

    def __call__(self, model: Any) -> float:
        if self.items is None:
            start = time.perf_counter()
            self._draw()
            self.draw_seconds = time.perf_counter() - start
        start = time.perf_counter()
        chunk = self.targets_per_call(0)
        for lo in range(0, len(self.rows), chunk):
            part = np.arange(lo, min(lo + chunk, len(self.rows)))
            self.ranks[part] = self._pair_ranks(model, part, self.items[part])
        adaptive = len(self.levels) > 1
        if adaptive:
            self._grow(model)
        p_hat = estimate(self.estimator, self.ranks, n_items=self.n_items,
                         sample_size=self.sizes if adaptive else self.sample_size,
                         scheme=self.scheme).p_hat
        value = float(curve(p_hat, self.metric, self.k)[self.k - 1])
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return value

    def _pair_ranks(self, model: Any, part: np.ndarray, items: np.ndarray) -> np.ndarray:
        """1 + #{sampled items beating the target} of the targets at positions `part`: int64.
        items (len(part), m): each target then its m − 1 sampled items. Whether an item may
        beat its target at all (not one of the user's excluded items) is looked up for the
        items that beat it on score only: a few per target, against m − 1 lookups."""
        rows, users = self.rows[part], self.users[part]
        foldin, known = self.evalset.foldin[rows], users if self.users_known else None
        if hasattr(model, "score_items"):
            scores = np.asarray(model.score_items(foldin, known, items))
        else:  # any scorer: its full rows, read at the items
            scores = gather_scores(model.score, foldin, known, items,
                                   memory_budget_mb=self.memory_budget_mb)
        won = sampled_wins(scores[:, 1:], scores[:, :1],
                           lambda t, j: tie_break_keys_at(self.seed, users[t], items[t, j + 1]),
                           lambda t: tie_break_keys_at(self.seed, users[t], items[t, 0]))
        won_t, won_j = np.nonzero(won)
        blocked = keys_contain(self._excluded_keys, self.evalset.targets.shape[1], rows[won_t],
                               items[won_t, won_j + 1])
        return 1 + np.bincount(won_t[~blocked], minlength=len(part)).astype(np.int64)

    def describe(self) -> dict[str, Any]:
        """What selected the epochs, for results.json."""
        described = {"method": "sampled", "metric": f"target-level {self.key}",
                     "estimator": self.estimator, "sample_size": self.sample_size,
                     "scheme": self.scheme, "seed": self.seed, "n_targets": int(len(self.rows)),
                     "passes": self.calls, "draw_seconds": self.draw_seconds,
                     "seconds_per_pass": self.seconds / self.calls if self.calls else None}
        if len(self.levels) > 1:
            described.update(n_max=int(self.levels[-1]), mean_sample_size=(
                float(self.sizes.mean()) if self.calls else None))
        return described
