"""Sampled ranks of a trained model (docs/concepts/evaluation.md, ties): the rank of each held-out
target among itself and its sampled items, with the exact ranking's tie-break, and
`SampledRankHook`, which computes them for every repeat inside the evaluator's batch pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.data.splits import EvalSet
from linrec.errors import ConfigError, DataError
from linrec.eval._checks import check_foldin_pool, check_pool
from linrec.eval._sparse import binary_sorted_csr, concat_ranges, csr_contains
from linrec.eval.negatives import NegativeSampler, canonical_targets, given_negatives
from linrec.item_order import sampled_wins

#: sampled items compared per chunk of the rank kernel (its buffers stay in cache)
_KERNEL_ENTRIES = 1 << 16
#: largest span of score cells (about the L2 cache) the kernel reads ahead of a gather
_TOUCH_FLOATS = 1 << 18


def _beaten_counts(scores: np.ndarray, keys: Any, rows: np.ndarray, items: np.ndarray,
                   target_scores: np.ndarray, negatives: Sequence[np.ndarray]) -> np.ndarray:
    """#{sampled j beating t} per sample set and target, items scored -inf never counting:
    int64 (len(negatives), T).

    scores: C-contiguous (B, n_items); rows, items, target_scores: (T,); negatives: one int64 (T, n
    - 1) array per sample set (repeat). j beats t when s_j > s_t, or s_j == s_t and key_j < key_t
    (docs/concepts/evaluation.md, ties); keys are looked up on exact ties only. Works in chunks of
    consecutive targets, all sample sets at once, so that the few score rows of a chunk stay in
    cache while every repeat gathers from them."""
    n_sets = len(negatives)
    n_targets = len(rows)
    n_neg = negatives[0].shape[1] if n_sets else 0
    out = np.zeros((n_sets, n_targets), dtype=np.int64)
    if n_sets == 0 or n_targets == 0 or n_neg == 0:
        return out
    flat_scores = scores.reshape(-1)
    n_cols = scores.shape[1]
    chunk = max(1, _KERNEL_ENTRIES // (n_sets * n_neg))
    shape = (n_sets, min(chunk, n_targets), n_neg)
    index = np.empty(shape, dtype=np.int64)
    gathered = np.empty(shape, dtype=scores.dtype)
    compared = np.empty(shape, dtype=bool)
    row_offsets = rows * n_cols
    for lo in range(0, n_targets, chunk):
        hi = min(lo + chunk, n_targets)
        c = hi - lo
        idx, s_j, cmp = index[:, :c], gathered[:, :c], compared[:, :c]
        offsets = row_offsets[lo:hi, None]
        for k, negs in enumerate(negatives):
            np.add(negs[lo:hi], offsets, out=idx[k])
        # one sequential read of the chunk's score rows brings them into cache (the hardware
        # prefetcher cannot follow the random gather); indices are in range, "clip" avoids the
        # buffered out= of mode "raise"
        span = row_offsets[hi - 1] - row_offsets[lo]
        if 0 <= span <= _TOUCH_FLOATS:
            np.max(flat_scores[row_offsets[lo] : row_offsets[hi - 1] + n_cols])
        np.take(flat_scores, idx, out=s_j, mode="clip")
        s_t = target_scores[None, lo:hi, None]
        np.greater(s_j, s_t, out=cmp)
        out[:, lo:hi] = np.count_nonzero(cmp, axis=2)
        np.equal(s_j, s_t, out=cmp)
        if cmp.any():  # exact ties (rare for real-valued scores): compare keys there only
            tie_k, tie_t, tie_j = np.nonzero(cmp)
            tie_rows = rows[lo + tie_t]
            tie_items = idx[tie_k, tie_t, tie_j] - row_offsets[lo + tie_t]
            won = keys[tie_rows, tie_items] < keys[tie_rows, items[lo + tie_t]]
            won &= ~np.isneginf(s_j[tie_k, tie_t, tie_j])  # excluded items tie only at -inf
            np.add.at(out, (tie_k[won], lo + tie_t[won]), 1)
    return out


def sampled_ranks_from_scores(
    scores_batch: np.ndarray,
    keys_batch: Any,
    target_rows: np.ndarray,
    target_items: np.ndarray,
    negatives: np.ndarray,
    excluded_mask: np.ndarray | sp.spmatrix | sp.sparray | None = None,
) -> np.ndarray:
    """1-based rank of each target among itself and its sampled items: int64 (T,).

    scores_batch: (B, n_items) scores of the batch's users; keys_batch: their tie-break keys, a (B,
    n_items) array or any object indexable as keys[rows, items] (`linrec.eval.ranks.BatchKeys`,
    never densified here). target_rows: int (T,) row of each target in the batch; target_items: int
    (T,); negatives: int (T, n - 1) sampled item ids. Item j beats target t when s_j > s_t, or s_j
    == s_t and key_j < key_t (docs/concepts/evaluation.md, ties, `ranks.beats`), so r = 1 +
    #{sampled j beating t}. Excluded items never beat the target: excluded_mask (B, n_items), bool
    array or sparse, True where excluded; if None, items scored -inf (the evaluator's mask) count as
    excluded.
    """
    scores = np.asarray(scores_batch)
    if scores.ndim != 2 or tuple(getattr(keys_batch, "shape", ())) != scores.shape:
        raise ConfigError(f"scores {scores.shape} and keys {getattr(keys_batch, 'shape', None)} "
                          "must be equal 2-d shapes (B, n_items)")
    rows = np.asarray(target_rows, dtype=np.int64)
    items = np.asarray(target_items, dtype=np.int64)
    negatives = np.asarray(negatives, dtype=np.int64)
    if negatives.ndim != 2 or negatives.shape[0] != len(items) or rows.shape != items.shape:
        raise ConfigError(
            f"target_rows {rows.shape}, target_items {items.shape} and negatives "
            f"{negatives.shape} must be (T,), (T,) and (T, n - 1)"
        )
    if negatives.size and (negatives.min() < 0 or negatives.max() >= scores.shape[1]):
        raise DataError(f"sampled item ids must lie in [0, {scores.shape[1] - 1}]")
    if excluded_mask is None:
        scores = np.ascontiguousarray(scores)
        return 1 + _beaten_counts(scores, keys_batch, rows, items, scores[rows, items],
                                  [negatives])[0]
    n_cols = scores.shape[1]
    flat = rows[:, None] * n_cols + negatives
    neg_score = np.take(np.ascontiguousarray(scores).ravel(), flat)
    won = sampled_wins(neg_score, scores[rows, items][:, None],
                       lambda t, j: keys_batch[rows[t], negatives[t, j]],
                       lambda t: keys_batch[rows[t], items[t]])
    # excluded items never beat the target: check only the sampled items that beat it
    win_t, win_j = np.nonzero(won)
    if win_t.size:
        if sp.issparse(excluded_mask):
            excluded = csr_contains(binary_sorted_csr(excluded_mask), rows[win_t],
                                     negatives[win_t, win_j])
        else:
            excluded = np.asarray(excluded_mask, dtype=bool)[rows[win_t], negatives[win_t, win_j]]
        won[win_t[excluded], win_j[excluded]] = False
    return 1 + won.sum(axis=1, dtype=np.int64)


class SampledRankHook:
    """Evaluator hook: sampled ranks of every target of `eval_set`, for each repeat.

    Called once per scoring batch as hook(rows, scores, keys, batch_ranks) (the protocol of
    `linrec.eval.exact`): rows int (B,) positions of the batch's users in eval_set, scores (B,
    n_items) (fold-in entries may be -inf or not), keys the batch's tie-break keys (`BatchKeys` or
    an array); batch_ranks is not used. Fold-in items and the user's other targets never beat a
    target (they rank below every candidate, docs/concepts/evaluation.md, ties); with
    exclude_foldin=False the fold-in items compete like any other item (the evaluator's pass
    then ranks them too). After the pass, `sampled_ranks` is int64 (n_repeats, n_targets) in the
    canonical target order (`canonical_targets`), `sample_size` the set size n (100 for NCF's
    given 99 negatives).

    Cost per batch: the batch's fold-in and target entries are set to -inf in `scores` for the
    duration of the call and restored before it returns (a copy is made when `scores` is
    read-only, not C-contiguous or not floating), so an excluded item can never beat a target
    with a finite score; then one gather of the sampled items' scores and one comparison for all
    repeats at once (`_beaten_counts`), keys looked up on exact ties only. Targets with a
    non-finite score fall back to `sampled_ranks_from_scores` with an explicit exclusion mask.
    """

    def __init__(
        self,
        eval_set: EvalSet,
        n_items: int,
        sample_size: int | None,
        seed: int,
        repeats: int = 1,
        replace: bool = True,
        pool: str = "all_but_target",
        exclude_foldin: bool = True,
    ) -> None:
        check_pool(pool)
        check_foldin_pool(exclude_foldin, pool)
        if int(repeats) != repeats or repeats < 1:
            raise ConfigError(f"repeats={repeats} must be a positive integer")
        self.pool = pool
        self.repeats = int(repeats)
        self.target_rows, self.target_items = canonical_targets(eval_set)
        self._indptr = np.concatenate([[0], np.cumsum(np.bincount(
            self.target_rows, minlength=eval_set.n_users))]).astype(np.int64)
        never_beat = sp.csr_matrix(eval_set.targets)
        if exclude_foldin:
            never_beat = never_beat + sp.csr_matrix(eval_set.foldin)
        self._excluded = binary_sorted_csr(never_beat)
        self._eval_set = eval_set
        if pool == "given":
            n_given = given_negatives(eval_set, np.zeros(0, dtype=np.int64)).shape[1]
            if self.repeats != 1:
                raise ConfigError(f"repeats={repeats}: pool='given' has one fixed sample set; "
                                  "use repeats=1")
            if sample_size not in (None, n_given + 1):
                raise ConfigError(f"sample_size={sample_size} does not match the "
                                  f"{n_given} given negatives per user (sample_size={n_given + 1})")
            given = np.asarray(eval_set.negatives)
            if given.size and (given.min() < 0 or given.max() >= n_items):
                raise DataError(f"EvalSet.negatives holds item ids in [{given.min()}, "
                                f"{given.max()}]; allowed: [0, n_items - 1 = {n_items - 1}]")
            self.sample_size = n_given + 1
            self._sampler = None
        else:
            if sample_size is None:
                raise ConfigError(f"sample_size is required for pool={pool!r}")
            self.sample_size = int(sample_size)
            self._sampler = NegativeSampler(seed, self.target_rows, self.target_items, n_items,
                                            self.sample_size, replace, pool, self._excluded)
        self.sampled_ranks = np.zeros((self.repeats, len(self.target_items)), dtype=np.int64)

    def _negatives(self, repeat: int, positions: np.ndarray, user_rows: np.ndarray) -> np.ndarray:
        if self._sampler is None:
            return given_negatives(self._eval_set, user_rows)
        return self._sampler.negatives(repeat, positions)

    def _pieces(self, positions: np.ndarray, user_rows: np.ndarray):
        """Yield (slice into positions, [sampled items of each repeat]). A run of consecutive
        positions (the evaluator's batches) is cut at the sampling blocks' boundaries, so every
        repeat's sampled items are views of cached blocks; anything else comes in one piece."""
        n = len(positions)
        contiguous = n > 0 and int(positions[-1]) - int(positions[0]) + 1 == n and bool(
            np.all(np.diff(positions) == 1))
        if self._sampler is None or not contiguous:
            yield slice(0, n), [self._negatives(r, positions, user_rows)
                                for r in range(self.repeats)]
            return
        size, first = self._sampler.block_targets, int(positions[0])
        bounds = [first, *range((first // size + 1) * size, first + n, size), first + n]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            yield slice(lo - first, hi - first), [self._sampler.run(r, lo, hi)
                                                  for r in range(self.repeats)]

    def __call__(self, rows: np.ndarray, scores: np.ndarray, keys: Any, *_: Any,
                 **__: Any) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        counts = self._indptr[rows + 1] - self._indptr[rows]
        positions = concat_ranges(self._indptr[rows], counts)
        batch_rows = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
        items = self.target_items[positions]
        scores = np.asarray(scores)
        if scores.ndim != 2 or scores.shape[0] != len(rows):
            raise ConfigError(f"scores {scores.shape} must be (len(rows)={len(rows)}, n_items)")
        # fold-in ∪ targets of the batch's users, as (batch row, item) pairs
        indptr = self._excluded.indptr
        lengths = indptr[rows + 1] - indptr[rows]
        excluded_items = self._excluded.indices[concat_ranges(indptr[rows], lengths)]
        excluded_rows = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
        target_scores = scores[batch_rows, items]
        if not np.all(np.isfinite(target_scores)):
            mask = sp.csr_matrix((np.ones(len(excluded_items), dtype=bool),
                                  (excluded_rows, excluded_items)), shape=scores.shape)
            for repeat in range(self.repeats):
                self.sampled_ranks[repeat, positions] = sampled_ranks_from_scores(
                    scores, keys, batch_rows, items,
                    self._negatives(repeat, positions, rows[batch_rows]), mask)
            return
        floating = np.issubdtype(scores.dtype, np.floating)
        in_place = floating and scores.flags.writeable and scores.flags.c_contiguous
        work = scores if in_place else np.array(scores, order="C",
                                                dtype=None if floating else np.float64)
        saved = work[excluded_rows, excluded_items]
        work[excluded_rows, excluded_items] = -np.inf
        try:
            for piece, negatives in self._pieces(positions, rows[batch_rows]):
                self.sampled_ranks[:, positions[piece]] = 1 + _beaten_counts(
                    work, keys, batch_rows[piece], items[piece], target_scores[piece], negatives)
        finally:
            if in_place:
                work[excluded_rows, excluded_items] = saved

    def result(self) -> np.ndarray:
        """sampled_ranks (n_repeats, n_targets); raises DataError if some target was not scored."""
        missing = self.sampled_ranks == 0
        if np.any(missing):
            raise DataError(f"{int(missing[0].sum())} targets were never scored by the batch pass")
        return self.sampled_ranks

