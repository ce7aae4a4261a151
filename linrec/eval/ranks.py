"""Global ranks of held-out items (ARCHITECTURE §3, spec/evaluation.md §0.3).

The global rank R of a held-out item t of user u is 1 + #{candidates j that beat t}, where the
candidates are the items that are neither in u's fold-in row nor other held-out items of u, and
j beats t when s_j > s_t, or s_j == s_t and key(u, j) < key(u, t). `key` is a seeded hash of
(seed, user id, item id) (`linrec.item_order.tie_break_keys`, shared with `recommend`): the same
key for exact and sampled ranking, the same whatever the batching. Excluded items rank below
every candidate, so R lies in [1, n_candidates] with
n_candidates = n_items - |foldin_u| - |T_u| + 1.

Ranking a batch (`batch_global_ranks`) needs no sort of the score rows. Per row, the range
[lowest target score, highest target score] is cut into n_items / 8 equal buckets; an item's
bucket is a monotone function of its score, so an item in a higher bucket than t beats t and one
in a lower bucket does not. Buckets are counted with one `bincount`; only the few items that share
a bucket with a target are compared with it exactly (score, then key). Cost: about ten vectorised
passes over the batch's scores, in row chunks that stay in cache.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from linrec.atomic import atomic_open
from linrec.data.splits import EvalSet
from linrec.errors import ConfigError, DataError
from linrec.hardware import batch_size_for
from linrec.item_order import (  # noqa: F401  (re-exported: the keys the ranks use)
    BatchKeys,
    beats,
    tie_break_keys,
    tie_break_keys_at,
)

#: items per bucket of the rank kernel (on average): fewer = fewer exact comparisons, bigger tables
_ITEMS_PER_BUCKET = 8
#: score cells per cache-sized row chunk of the rank kernel
_CHUNK_CELLS = 1 << 19
#: (item, target) pairs compared exactly at once (bounds memory when scores tie massively)
_PAIR_CHUNK = 1 << 22


class Scorer(Protocol):
    """What ranking needs of a model (linrec.models.base.Recommender.score)."""

    def score(self, foldin: sp.csr_matrix, users: np.ndarray | None = None) -> np.ndarray: ...


# ---------------------------------------------------------------------------------------------
# rank tables
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankTable:
    """One entry per (eval row, held-out item), sorted by (row, rank).

    rows: int64 eval-row index (into EvalSet.users); users: int64 user ids (EvalSet.users[rows]);
    items: int32; ranks: int64 global rank R in [1, n_candidates]; n_candidates: int64, items
    rankable for that row = n_items - |foldin| - |targets| + 1; n_items: catalogue size."""

    rows: np.ndarray
    users: np.ndarray
    items: np.ndarray
    ranks: np.ndarray
    n_candidates: np.ndarray
    n_items: int

    def __len__(self) -> int:
        return len(self.ranks)

    @classmethod
    def concat(cls, tables: list[RankTable], n_items: int) -> RankTable:
        """Entries of several tables (e.g. consecutive batches) in order."""
        fields = ("rows", "users", "items", "ranks", "n_candidates")
        dtypes = (np.int64, np.int64, np.int32, np.int64, np.int64)
        arrays = {
            name: np.concatenate([getattr(t, name) for t in tables]).astype(dt, copy=False)
            if tables else np.zeros(0, dtype=dt)
            for name, dt in zip(fields, dtypes, strict=True)
        }
        return cls(**arrays, n_items=int(n_items))

    def save_npz(self, path: str | Path) -> None:
        """Write ranks.npz (arrays user, item, rank, row, n_candidates, n_items) atomically."""
        with atomic_open(path, "wb") as fh:
            np.savez(fh, user=self.users, item=self.items, rank=self.ranks, row=self.rows,
                     n_candidates=self.n_candidates, n_items=np.int64(self.n_items))

    @classmethod
    def load_npz(cls, path: str | Path) -> RankTable:
        """Read a table written by `save_npz`."""
        needed = ("user", "item", "rank", "row", "n_candidates", "n_items")
        with np.load(path) as data:
            missing = [k for k in needed if k not in data.files]
            if missing:
                raise DataError(f"{path}: missing arrays {missing}; a ranks.npz holds {needed}")
            return cls(rows=data["row"].astype(np.int64), users=data["user"].astype(np.int64),
                       items=data["item"].astype(np.int32), ranks=data["rank"].astype(np.int64),
                       n_candidates=data["n_candidates"].astype(np.int64),
                       n_items=int(data["n_items"]))


@dataclass(frozen=True)
class BatchRanks:
    """Ranks of the held-out items of one batch, entries sorted by (row, rank).

    rows: int64 (t,) positions within the batch; items: int32 (t,); ranks: int64 (t,) global
    ranks; target_scores: (t,) the targets' model scores; n_candidates: int64 (t,)."""

    rows: np.ndarray
    items: np.ndarray
    ranks: np.ndarray
    target_scores: np.ndarray
    n_candidates: np.ndarray


# ---------------------------------------------------------------------------------------------
# the rank kernel
# ---------------------------------------------------------------------------------------------


def _row_ids(matrix: sp.csr_matrix) -> np.ndarray:
    return np.repeat(np.arange(matrix.shape[0], dtype=np.int64), np.diff(matrix.indptr))


def _bucket_grid(t_scores: np.ndarray, indptr: np.ndarray, dtype: np.dtype, n_buckets: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per row: lowest target score lo and bucket scale, so that bucket(s) = (s - lo) * scale
    cuts [lo, hi] into n_buckets buckets. Both of the score dtype, scale finite and > 0."""
    n_rows = len(indptr) - 1
    counts = np.diff(indptr)
    has = counts > 0
    lo = np.zeros(n_rows, dtype=np.float64)
    hi = np.zeros(n_rows, dtype=np.float64)
    if np.any(has):
        lo[has] = np.minimum.reduceat(t_scores, indptr[:-1][has])
        hi[has] = np.maximum.reduceat(t_scores, indptr[:-1][has])
    width = hi / n_buckets - lo / n_buckets
    # one target (or all equal): buckets of relative width 2**-20 around it
    fallback = np.maximum(np.abs(lo) * 2.0**-20, 1e-30)
    width = np.where(width > 0, width, fallback)
    info = np.finfo(dtype)
    scale = np.clip(1.0 / width, info.tiny, info.max)
    return lo.astype(dtype), scale.astype(dtype)


def _bucket_of(values: np.ndarray, lo: np.ndarray, scale: np.ndarray, n_buckets: int,
               out: np.ndarray) -> np.ndarray:
    """Bucket in [-1, n_buckets + 1] (float, truncated later): monotone non-decreasing in values
    (subtraction, multiplication by scale > 0 and clipping are monotone). -inf -> -1."""
    with np.errstate(over="ignore"):  # overflow to +-inf keeps the order
        np.subtract(values, lo, out=out)
        out *= scale
    return np.clip(out, -1, n_buckets + 1, out=out)


def _exact_pair_counts(flag_slots: np.ndarray, flag_scores: np.ndarray, flag_rows: np.ndarray,
                       flag_items: np.ndarray, t_slots: np.ndarray, t_scores: np.ndarray,
                       t_items: np.ndarray, keys: BatchKeys) -> np.ndarray:
    """For each target: #{flagged items in the same bucket slot that beat it}. int64 (len(t),)."""
    out = np.zeros(len(t_slots), dtype=np.int64)
    order = np.argsort(t_slots, kind="stable")
    sorted_slots = t_slots[order]
    first = np.searchsorted(sorted_slots, flag_slots, side="left")
    n_pairs = np.searchsorted(sorted_slots, flag_slots, side="right") - first
    ends = np.cumsum(n_pairs)
    # split the flagged items so that each piece has at most _PAIR_CHUNK pairs
    cuts = np.searchsorted(ends, np.arange(_PAIR_CHUNK, ends[-1] if len(ends) else 0,
                                           _PAIR_CHUNK), side="right")
    for lo_f, hi_f in zip(np.r_[0, cuts], np.r_[cuts, len(ends)], strict=True):
        counts = n_pairs[lo_f:hi_f]
        if counts.sum() == 0:
            continue
        item_idx = np.repeat(np.arange(lo_f, hi_f), counts)
        offset = np.arange(len(item_idx)) - np.repeat(np.cumsum(counts) - counts, counts)
        target_idx = order[first[item_idx] + offset]
        s_j, s_t = flag_scores[item_idx], t_scores[target_idx]
        win = s_j > s_t
        tie = np.flatnonzero(s_j == s_t)
        if len(tie):
            rows = flag_rows[item_idx[tie]]
            win[tie] = keys[rows, flag_items[item_idx[tie]]] < keys[rows, t_items[target_idx[tie]]]
        out += np.bincount(target_idx[win], minlength=len(t_slots))
    return out


def batch_global_ranks(scores: np.ndarray, foldin: sp.csr_matrix, targets: sp.csr_matrix,
                       keys: BatchKeys) -> BatchRanks:
    """Global ranks of every held-out item of a batch (module docstring).

    scores: float (b, n_items) model scores, modified in place: on return fold-in entries are
    -inf, held-out entries keep their scores. foldin, targets: CSR (b, n_items), disjoint.
    keys: the batch's tie-break keys. Returns BatchRanks (entries sorted by (row, rank))."""
    n_rows, n_items = scores.shape
    if not np.all(np.isfinite(scores)):
        bad = int(np.flatnonzero(~np.isfinite(scores).all(axis=1))[0])
        raise DataError(f"model scores of batch row {bad} contain NaN or inf; scores must be "
                        "finite (the evaluator masks fold-in items itself)")
    targets = sp.csr_matrix(targets, copy=True)
    targets.sum_duplicates()
    foldin = sp.csr_matrix(foldin, copy=True)
    foldin.sum_duplicates()
    if targets.multiply(foldin).nnz:
        raise DataError("a held-out item is also in its user's fold-in row; EvalSet.targets and "
                        "EvalSet.foldin must be disjoint")
    t_rows, t_items = _row_ids(targets), targets.indices.astype(np.int64)
    t_scores = scores[t_rows, t_items]
    per_row_candidates = n_items - np.diff(foldin.indptr) - np.diff(targets.indptr) + 1
    scores[_row_ids(foldin), foldin.indices] = -np.inf
    scores[t_rows, t_items] = -np.inf
    n_buckets = max(1, n_items // _ITEMS_PER_BUCKET)
    lo, scale = _bucket_grid(t_scores, targets.indptr, scores.dtype, n_buckets)

    n_slots = n_buckets + 3  # buckets -1 .. n_buckets + 1, shifted by one
    t_bucket = _bucket_of(t_scores, lo[t_rows], scale[t_rows], n_buckets, np.empty_like(t_scores))
    t_slots = t_bucket.astype(np.int64) + 1 + t_rows * n_slots
    beaten_by = np.zeros(len(t_rows), dtype=np.int64)
    chunk = max(1, _CHUNK_CELLS // max(n_items, 1))
    buf = np.empty((chunk, n_items), dtype=scores.dtype)
    slots = np.empty((chunk, n_items), dtype=np.int64)
    flagged_parts = []  # (global slot, row, item) of items that share a slot with a target
    for start in range(0, n_rows, chunk):
        stop = min(n_rows, start + chunk)
        c = stop - start
        t_lo, t_hi = targets.indptr[start], targets.indptr[stop]
        if t_lo == t_hi:
            continue
        _bucket_of(scores[start:stop], lo[start:stop, None], scale[start:stop, None], n_buckets,
                   buf[:c])
        np.copyto(slots[:c], buf[:c], casting="unsafe")  # truncation: still monotone
        slots[:c] += (np.arange(c, dtype=np.int64) * n_slots + 1)[:, None]
        local = slots[:c].ravel()  # slot of each cell, row-local offsets
        # items of the row in slots > k = n_items - #items in slots <= k
        at_or_below = np.cumsum(np.bincount(local, minlength=c * n_slots).reshape(c, n_slots),
                                axis=1)
        ct_slots = t_slots[t_lo:t_hi] - start * n_slots
        beaten_by[t_lo:t_hi] = n_items - at_or_below.ravel()[ct_slots]
        is_target_slot = np.zeros(c * n_slots, dtype=bool)
        is_target_slot[ct_slots] = True
        flagged = np.flatnonzero(np.take(is_target_slot, local))
        flagged_parts.append((local[flagged] + start * n_slots, flagged // n_items + start,
                              flagged % n_items))
    if flagged_parts:
        f_slots, f_rows, f_items = (np.concatenate(p) for p in zip(*flagged_parts, strict=True))
        beaten_by += _exact_pair_counts(f_slots, scores[f_rows, f_items], f_rows, f_items,
                                        t_slots, t_scores, t_items, keys)
    scores[t_rows, t_items] = t_scores
    ranks = 1 + beaten_by
    order = np.lexsort((ranks, t_rows))
    return BatchRanks(rows=t_rows[order], items=t_items[order].astype(np.int32),
                      ranks=ranks[order], target_scores=t_scores[order],
                      n_candidates=per_row_candidates[t_rows[order]].astype(np.int64))


# ---------------------------------------------------------------------------------------------
# batch loop
# ---------------------------------------------------------------------------------------------


def score_batches(model: Scorer, evalset: EvalSet, *, users_known: bool,
                  batch_size: int | None = None, memory_budget_mb: float = 512
                  ) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield (row_slice, scores) over the eval rows: scores = model.score(foldin[rows],
    users=evalset.users[rows] if users_known else None), float (rows, n_items).
    Batch rows come from memory_budget_mb unless batch_size is given. The ranking masks the
    scores in place, so model.score must return a fresh array (read-only arrays are copied)."""
    n_users, n_items = evalset.foldin.shape
    if batch_size is None:
        batch_size = batch_size_for(n_items, memory_budget_mb)
    elif isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size!r} must be a positive integer")
    users = np.asarray(evalset.users)
    for start in range(0, n_users, int(batch_size)):
        rows = slice(start, min(n_users, start + int(batch_size)))
        scores = model.score(evalset.foldin[rows], users=users[rows] if users_known else None)
        scores = np.asarray(scores)
        expected = (rows.stop - rows.start, n_items)
        if scores.shape != expected:
            raise DataError(f"{type(model).__name__}.score returned shape {scores.shape} for "
                            f"rows {rows.start}:{rows.stop}; expected {expected}")
        if not np.issubdtype(scores.dtype, np.floating) or scores.dtype.itemsize < 4:
            scores = scores.astype(np.float64)
        elif not scores.flags.writeable:
            scores = scores.copy()
        yield rows, scores


@dataclass(frozen=True)
class RankedBatch:
    """One scored and ranked batch. rows: int64 eval-row positions; scores: (b, n_items), fold-in
    entries -inf; keys: the batch's BatchKeys; ranks: BatchRanks (rows are batch positions)."""

    rows: np.ndarray
    scores: np.ndarray
    keys: BatchKeys
    ranks: BatchRanks


def ranked_batches(model: Scorer, evalset: EvalSet, *, seed: int, users_known: bool,
                   batch_size: int | None = None, memory_budget_mb: float = 512,
                   timings: dict[str, float] | None = None) -> Iterator[RankedBatch]:
    """Score, mask and rank the eval rows batch by batch. Adds the seconds spent in scoring and
    ranking to timings["score"] and timings["rank"] when a dict is given."""
    timings = {} if timings is None else timings
    timings.setdefault("score", 0.0)
    timings.setdefault("rank", 0.0)
    n_items = evalset.foldin.shape[1]
    users = np.asarray(evalset.users, dtype=np.int64)
    batches = score_batches(model, evalset, users_known=users_known, batch_size=batch_size,
                            memory_budget_mb=memory_budget_mb)
    while True:
        t0 = time.perf_counter()
        item = next(batches, None)
        t1 = time.perf_counter()
        timings["score"] += t1 - t0
        if item is None:
            return
        rows, scores = item
        keys = BatchKeys(seed, users[rows], n_items)
        ranks = batch_global_ranks(scores, evalset.foldin[rows], evalset.targets[rows], keys)
        timings["rank"] += time.perf_counter() - t1
        yield RankedBatch(np.arange(rows.start, rows.stop, dtype=np.int64), scores, keys, ranks)


def table_from_batch(batch: RankedBatch, users: np.ndarray, n_items: int) -> RankTable:
    """The RankTable entries of one ranked batch (rows as eval-row indices)."""
    rows = batch.rows[batch.ranks.rows]
    return RankTable(rows=rows, users=np.asarray(users, dtype=np.int64)[rows],
                     items=batch.ranks.items, ranks=batch.ranks.ranks,
                     n_candidates=batch.ranks.n_candidates, n_items=n_items)


def global_ranks(model: Scorer, evalset: EvalSet, *, seed: int, users_known: bool,
                 batch_size: int | None = None, memory_budget_mb: float = 512) -> RankTable:
    """RankTable of every held-out item of evalset (one full pass over batches)."""
    n_items = evalset.foldin.shape[1]
    tables = [table_from_batch(b, evalset.users, n_items)
              for b in ranked_batches(model, evalset, seed=seed, users_known=users_known,
                                      batch_size=batch_size, memory_budget_mb=memory_budget_mb)]
    return RankTable.concat(tables, n_items)
