"""Global ranks of held-out items (ARCHITECTURE §3, docs/concepts/evaluation.md, ties).

The global rank R of a held-out item t of user u is 1 + #{candidates j that beat t}, where the
candidates are the items that are neither in u's fold-in row nor other held-out items of u, and
j beats t when s_j > s_t, or s_j == s_t and key(u, j) < key(u, t). `key` is a seeded hash of
(seed, user id, item id) (`linrec.item_order.tie_break_keys`, shared with `recommend`): the same
key for exact and sampled ranking, the same whatever the batching. Excluded items rank below
every candidate, so R lies in [1, n_candidates] with
n_candidates = n_items - |foldin_u| - |T_u| + 1.

Ranking a batch (`batch_global_ranks`) needs no sort of the score rows: compiled passes over
each row (rows in parallel) count, per target, the items with a higher score, and compare keys
only for items tied with a target (`linrec.eval._rank_kernel`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from linrec.atomic import atomic_open
from linrec.data.splits import EvalSet
from linrec.errors import DataError
from linrec.eval import device_ranks
from linrec.eval.device_ranks import non_finite_scores
from linrec.hardware import batch_size_for, on_row_chunks, thread_limit
from linrec.item_order import (  # noqa: F401  (re-exported: the keys the ranks use)
    BatchKeys,
    beats,
    tie_break_keys,
    tie_break_keys_at,
    user_key_bases,
)
from linrec.scoring import scored_batches

#: rows with at most this many held-out items are ranked by one vectorised pass per target
#: (`linrec.eval._rank_kernel`), the others by the sorted path (faster beyond ~100 targets)
_LINEAR_MAX_TARGETS = 128
#: a batch with fewer (held-out item, item) pairs is counted by NumPy's vectorised comparisons
#: (`device_ranks.count_beaten`, ~0.2 s per 10^8 pairs) instead of the compiled kernel, whose
#: loading takes ~0.2 s a process and whose first compilation ~3 s an install: a small run
#: never waits for numba
_KERNEL_MIN_PAIRS = 2**27
#: score elements one vectorised host comparison gathers (a few MB: they stay in the cache)
_HOST_CHUNK_ELEMENTS = 2**20


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


def _canonical(matrix: sp.spmatrix) -> sp.csr_matrix:
    """CSR with sorted, unique indices (a copy only when the input is not already so)."""
    matrix = sp.csr_matrix(matrix)
    if not matrix.has_canonical_format:
        matrix = matrix.copy()
        matrix.sum_duplicates()
    return matrix


def checked_batch_rows(foldin: sp.spmatrix, targets: sp.spmatrix
                       ) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """A batch's fold-in and held-out rows in canonical CSR; DataError when they overlap."""
    foldin, targets = _canonical(foldin), _canonical(targets)
    if targets.multiply(foldin).nnz:
        raise DataError("a held-out item is also in its user's fold-in row; EvalSet.targets and "
                        "EvalSet.foldin must be disjoint")
    return foldin, targets


def batch_global_ranks(scores: np.ndarray, foldin: sp.csr_matrix, targets: sp.csr_matrix,
                       keys: BatchKeys) -> BatchRanks:
    """Global ranks of every held-out item of a batch (module docstring).

    scores: float (b, n_items) model scores, modified in place: on return fold-in entries are
    -inf, held-out entries keep their scores. foldin, targets: CSR (b, n_items), disjoint.
    keys: the batch's tie-break keys. Returns BatchRanks (entries sorted by (row, rank)).
    A batch of fewer than _KERNEL_MIN_PAIRS (held-out item, item) pairs is counted by NumPy,
    a larger one by the compiled kernel: the same ranks."""
    n_rows, n_items = scores.shape
    if scores.dtype not in (np.float32, np.float64) or not scores.flags.c_contiguous:
        scores_in = scores
        scores = np.ascontiguousarray(scores, dtype=np.result_type(scores.dtype, np.float32))
    else:
        scores_in = None
    foldin, targets = checked_batch_rows(foldin, targets)
    t_rows, t_items = _row_ids(targets), targets.indices.astype(np.int64)
    if len(t_items) * n_items < _KERNEL_MIN_PAIRS:
        beaten_by, t_scores = device_ranks.count_beaten(scores, foldin, targets, keys,
                                                        chunk_elements=_HOST_CHUNK_ELEMENTS)
        scores[t_rows, t_items] = t_scores  # held-out entries keep their scores
    else:
        beaten_by = _kernel_beaten(scores, foldin, targets, keys)
        t_scores = scores[t_rows, t_items]
    if scores_in is not None:
        scores_in[...] = scores
    return _batch_ranks(foldin, targets, beaten_by, t_scores)


def _kernel_beaten(scores: np.ndarray, foldin: sp.csr_matrix, targets: sp.csr_matrix,
                   keys: BatchKeys) -> np.ndarray:
    """The candidates beating each held-out item (CSR order of `targets`), counted by the
    compiled kernel on row chunks in threads; `scores` (b, n_items) C-contiguous float32/64
    gets -inf at the fold-in entries. DataError on a non-finite score."""
    from linrec.eval._rank_kernel import rank_rows  # numba: imported when first needed

    t_items = targets.indices.astype(np.int64)
    beaten_by = np.empty(len(t_items), dtype=np.int64)
    arrays = (scores, foldin.indptr.astype(np.int64), foldin.indices.astype(np.int64),
              targets.indptr.astype(np.int64), t_items, user_key_bases(keys), beaten_by,
              _LINEAR_MAX_TARGETS)
    found = on_row_chunks(lambda start, stop: rank_rows(*arrays, start, stop), scores.shape[0],
                          thread_limit())
    bad = next((b for b in found if b >= 0), -1)
    if bad >= 0:
        raise DataError(non_finite_scores(bad))
    return beaten_by


def device_batch_ranks(scores: Any, foldin: sp.csr_matrix, targets: sp.csr_matrix,
                       keys: BatchKeys, chunk_elements: int | None = None) -> BatchRanks:
    """`batch_global_ranks` of a torch tensor of scores, counted on its device
    (`linrec.eval.device_ranks`; the same ranks): `scores` is masked in place there (fold-in
    and held-out entries -inf), and only the counts come back. chunk_elements: score elements
    compared at once (default `device_ranks.PAIR_CHUNK_ELEMENTS`)."""
    foldin, targets = checked_batch_rows(foldin, targets)
    beaten_by, t_scores = device_ranks.count_beaten(
        scores, foldin, targets, keys,
        chunk_elements=chunk_elements or device_ranks.PAIR_CHUNK_ELEMENTS)
    return _batch_ranks(foldin, targets, beaten_by, t_scores)


def _batch_ranks(foldin: sp.csr_matrix, targets: sp.csr_matrix, beaten_by: np.ndarray,
                 t_scores: np.ndarray) -> BatchRanks:
    """BatchRanks from the candidates beating each held-out item (in the CSR order of
    `targets`) and the items' scores."""
    t_rows, t_items = _row_ids(targets), targets.indices.astype(np.int64)
    per_row_candidates = (targets.shape[1] - np.diff(foldin.indptr) - np.diff(targets.indptr)
                          + 1)
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
    users = np.asarray(evalset.users) if users_known else None
    yield from scored_batches(lambda foldin, rows: model.score(foldin, users=rows),
                              evalset.foldin, users, owner=type(model).__name__,
                              batch_size=batch_size, memory_budget_mb=memory_budget_mb)


@dataclass(frozen=True)
class RankedBatch:
    """One scored and ranked batch. rows: int64 eval-row positions; scores: (b, n_items), fold-in
    entries -inf (None when the batch was ranked on the model's device); keys: the batch's
    BatchKeys; ranks: BatchRanks (rows are batch positions)."""

    rows: np.ndarray
    scores: np.ndarray | None
    keys: BatchKeys
    ranks: BatchRanks


def ranked_batches(model: Scorer, evalset: EvalSet, *, seed: int, users_known: bool,
                   batch_size: int | None = None, memory_budget_mb: float = 512,
                   timings: dict[str, float] | None = None,
                   exclude_foldin: bool = True, host_scores: bool = True
                   ) -> Iterator[RankedBatch]:
    """Score, mask and rank the eval rows batch by batch. Adds the seconds spent in scoring and
    ranking to timings["score"] and timings["rank"] when a dict is given. exclude_foldin=False:
    the fold-in items are not masked but ranked like any other item (Li et al. 2020's
    "binom"/"hyper" protocol); a user's other held-out items are excluded either way.
    host_scores=False lets a model whose scores lie on a device (`scores_on_device`) be
    ranked there (`linrec.eval.device_ranks`, the same ranks): the batches then carry no
    scores, and are sized by the device's free memory unless batch_size is given. With
    host_scores, such a model's batches come back through one reused (pinned) buffer: a
    batch's scores are valid until the next batch."""
    timings = {} if timings is None else timings
    timings.setdefault("score", 0.0)
    timings.setdefault("rank", 0.0)
    n_items = evalset.foldin.shape[1]
    users = np.asarray(evalset.users, dtype=np.int64)
    device_scores = getattr(model, "scores_on_device", False)
    on_device = device_scores and not host_scores
    if on_device:
        batches = _device_score_batches(model, evalset, users_known, batch_size)
    elif device_scores:  # the hooks need the scores: copied into one reused host buffer
        rows = batch_size or batch_size_for(n_items, memory_budget_mb)
        batches = _host_copies(_device_score_batches(model, evalset, users_known, rows))
    else:
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
        masked = (evalset.foldin[rows] if exclude_foldin
                  else sp.csr_matrix((rows.stop - rows.start, n_items), dtype=np.float32))
        if on_device:
            ranks = device_batch_ranks(scores, masked, evalset.targets[rows], keys)
            scores = None
        else:
            ranks = batch_global_ranks(scores, masked, evalset.targets[rows], keys)
        timings["rank"] += time.perf_counter() - t1
        yield RankedBatch(np.arange(rows.start, rows.stop, dtype=np.int64), scores, keys, ranks)


def _device_score_batches(model: Any, evalset: EvalSet, users_known: bool,
                          batch_size: int | None) -> Iterator[tuple[slice, Any]]:
    """(row_slice, scores tensor) over the eval rows from `model.score_tensor`, on its device;
    rows per batch from a quarter of the device's free memory (`device_batch_rows`)."""
    n_rows, n_items = evalset.foldin.shape
    users = np.asarray(evalset.users) if users_known else None
    if batch_size is None:
        batch_size = device_batch_rows(model.score_device, n_items)
    for start in range(0, n_rows, int(batch_size)):
        rows = slice(start, min(n_rows, start + int(batch_size)))
        scores = model.score_tensor(evalset.foldin[rows],
                                    None if users is None else users[rows])
        expected = (rows.stop - rows.start, n_items)
        if tuple(scores.shape) != expected:
            raise DataError(f"{type(model).__name__}.score_tensor returned shape "
                            f"{tuple(scores.shape)} for rows {rows.start}:{rows.stop}; expected "
                            f"{expected}")
        yield rows, scores


def _host_copies(batches: Iterator[tuple[slice, Any]]) -> Iterator[tuple[slice, np.ndarray]]:
    """The device batches as host arrays, each copied into the same buffer (pinned for a CUDA
    device, so that the copy runs at the bus's rate): a batch's array is valid until the next
    batch, which the hooks' contract allows (they keep nothing)."""
    import torch

    buffer = None
    for rows, scores in batches:
        if scores.dtype not in (torch.float32, torch.float64):
            scores = scores.to(torch.float32)
        if buffer is None or buffer.shape[0] < scores.shape[0] or buffer.dtype != scores.dtype:
            buffer = torch.empty(tuple(scores.shape), dtype=scores.dtype,
                                 pin_memory=scores.device.type == "cuda")
        view = buffer[: scores.shape[0]]
        view.copy_(scores)
        yield rows, view.numpy()


#: bytes of device memory per score element of a batch ranked there: the scores, the rows a
#: count chunk gathers and its masks are bounded apart (`device_ranks.PAIR_CHUNK_ELEMENTS`)
_DEVICE_BYTES_PER_CELL = 8


def device_batch_rows(device: Any, n_items: int, fraction: float = 0.25) -> int:
    """Rows of a batch scored and ranked on `device`: `fraction` of its free memory (a CUDA
    device), or 512 MiB's worth (any other)."""
    import torch

    free = (torch.cuda.mem_get_info(device)[0] if torch.device(device).type == "cuda"
            else 512 * 2**20 / fraction)
    return max(1, int(fraction * free // (max(n_items, 1) * _DEVICE_BYTES_PER_CELL)))


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
