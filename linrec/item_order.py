"""The one order of a user's items, shared by the evaluator and `Recommender.recommend`
(docs/concepts/evaluation.md, ties): score descending, then a seeded key ascending.

`key` is a hash of (seed, user id, item id) (`tie_break_keys`): the same key for exact and
sampled ranking and for top-K lists, the same whatever the batching. `top_k` selects the k best
items of each score row in that order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from linrec.errors import ConfigError, DataError
from linrec.hardware import on_row_chunks, thread_limit

if TYPE_CHECKING:
    import scipy.sparse as sp

_MASK64 = (1 << 64) - 1
# splitmix64 constants (Steele, Lea, Flood 2014; finalizer "Mix13" of Stafford)
_GAMMA_USER = 0x9E3779B97F4A7C15
_GAMMA_ITEM = 0xD1B54A32D192ED03
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
#: key cells per cache-sized block of `tie_break_keys`
_CHUNK_CELLS = 1 << 19

def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, in place on a uint64 array (a bijection of uint64)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(_MIX1)
    x ^= x >> np.uint64(27)
    x *= np.uint64(_MIX2)
    x ^= x >> np.uint64(31)
    return x


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or int(seed) != seed or not 0 <= seed <= _MASK64:
        raise ConfigError(f"seed={seed!r} must be an integer in [0, 2**64 - 1]")
    return int(seed)


def _user_bases(seed: int, users: np.ndarray) -> np.ndarray:
    users = np.asarray(users)
    if users.size and (not np.issubdtype(users.dtype, np.integer) or users.min() < 0):
        raise DataError("user ids for tie-break keys must be non-negative integers")
    seed_word = np.array([(_check_seed(seed) * _GAMMA_USER + _MIX2) & _MASK64], dtype=np.uint64)
    seed_word = _mix64(seed_word)
    return _mix64(seed_word[0] + users.astype(np.uint64) * np.uint64(_GAMMA_USER))


def user_key_bases(keys: BatchKeys) -> np.ndarray:
    """uint64 (len(users),): base_u with key(u, j) = mix64(base_u + j * gamma), for compiled
    code that hashes the pairs itself (`linrec.eval._rank_kernel`)."""
    return _user_bases(keys.seed, keys.users)


def tie_break_keys_at(seed: int, users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Tie-break key of each (user, item) pair: uint64, shape of np.broadcast(users, items).

    key = mix64(mix64(seed, user) + item * gamma): distinct items of one user get distinct keys
    (both steps are bijections of uint64), and a key depends on (seed, user, item) only."""
    items = np.asarray(items)
    if items.size and (not np.issubdtype(items.dtype, np.integer) or items.min() < 0):
        raise DataError("item ids for tie-break keys must be non-negative integers")
    bases = _user_bases(seed, users)
    return _mix64(bases + items.astype(np.uint64) * np.uint64(_GAMMA_ITEM))


def tie_break_keys(seed: int, users: np.ndarray, n_items: int) -> np.ndarray:
    """Keys of every item for each user: uint64 (len(users), n_items), equal to
    tie_break_keys_at(seed, users[:, None], arange(n_items)) (computed in cache-sized blocks)."""
    bases = _user_bases(seed, np.asarray(users))
    item_terms = np.arange(n_items, dtype=np.uint64) * np.uint64(_GAMMA_ITEM)
    out = np.empty((len(bases), n_items), dtype=np.uint64)
    chunk = max(1, _CHUNK_CELLS // max(n_items, 1))
    for start in range(0, len(bases), chunk):  # cache-sized blocks of rows
        block = out[start:start + chunk]
        np.add(bases[start:start + chunk, None], item_terms, out=block)
        _mix64(block)
    return out


class BatchKeys:
    """Tie-break keys of one batch of users, computed on demand.

    `keys[rows, items]` (integer arrays, broadcast) gives the keys of (users[rows], items) pairs;
    `np.asarray(keys)` gives the dense (len(users), n_items) uint64 matrix (cached)."""

    def __init__(self, seed: int, users: np.ndarray, n_items: int) -> None:
        self.seed = _check_seed(seed)
        self.users = np.asarray(users, dtype=np.int64)
        self.n_items = int(n_items)
        self.shape = (len(self.users), self.n_items)
        self._dense: np.ndarray | None = None

    def __getitem__(self, index: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        rows, items = index
        if self._dense is not None:
            return self._dense[rows, items]
        return tie_break_keys_at(self.seed, self.users[np.asarray(rows)], np.asarray(items))

    def dense(self) -> np.ndarray:
        """uint64 (len(users), n_items)."""
        if self._dense is None:
            self._dense = tie_break_keys(self.seed, self.users, self.n_items)
        return self._dense

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        dense = self.dense()
        return dense if dtype is None else dense.astype(dtype)


def beats(score_j: np.ndarray, key_j: np.ndarray, score_t: np.ndarray,
          key_t: np.ndarray) -> np.ndarray:
    """Does item j rank above item t (score descending, then key ascending;
    docs/concepts/evaluation.md, ties)? bool."""
    return (score_j > score_t) | ((score_j == score_t) & (key_j < key_t))


def sampled_wins(sampled_scores: np.ndarray, target_scores: np.ndarray,
                 sampled_key: Callable[[np.ndarray, np.ndarray], np.ndarray],
                 target_key: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Which sampled items beat their target, in the order of `beats`: bool (T, m).

    sampled_scores (T, m): the scores of each target's m sampled items; target_scores (T, 1).
    Keys matter on exact ties only (rare for real-valued scores), so they are looked up there
    only: sampled_key(t, j) -> the keys of sampled items j of targets t, target_key(t) -> the keys
    of targets t (index arrays of equal length)."""
    won = sampled_scores > target_scores
    tie_t, tie_j = np.nonzero(sampled_scores == target_scores)
    if tie_t.size:
        won[tie_t, tie_j] = beats(sampled_scores[tie_t, tie_j], sampled_key(tie_t, tie_j),
                                  target_scores[tie_t, 0], target_key(tie_t))
    return won


# ---------------------------------------------------------------------------------------------
# top-K selection
# ---------------------------------------------------------------------------------------------


#: rows from which `top_k` selects with the compiled heap; fewer are selected by numpy, so that
#: a process's first small request skips numba's import and the kernel's load
COMPILED_FROM_ROWS = 256


def bad_scores(row: int) -> DataError:
    """The error of a score row (its position in the batch) holding NaN or +inf."""
    return DataError(f"model scores of row {row} contain NaN or +inf; scores must be finite "
                     "(an item scored -inf is treated as excluded)")


def _top_k_sorted(scores: np.ndarray, k: int, keys: BatchKeys) -> tuple[np.ndarray, np.ndarray]:
    """`top_k` by numpy: each row partitioned at its k-th largest score, then the items at or
    above it (every tie of the k-th included) sorted by (score descending, key ascending)."""
    bad = np.isnan(scores).any(axis=1) | (scores == np.inf).any(axis=1)
    if bad.any():
        raise bad_scores(int(np.argmax(bad)))
    n_rows, n_items = scores.shape
    kth = np.partition(scores, n_items - k, axis=1)[:, n_items - k]
    rows, cols = np.nonzero((scores >= kth[:, None]) & (scores > -np.inf))
    values = scores[rows, cols]
    order = np.lexsort((keys[rows, cols], -values, rows))
    rows, cols, values = rows[order], cols[order], values[order]
    place = np.arange(len(rows)) - np.searchsorted(rows, rows)  # position within its row
    kept = place < k
    items = np.full((n_rows, k), -1, np.int64)
    best = np.full((n_rows, k), -np.inf, scores.dtype)
    items[rows[kept], place[kept]] = cols[kept]
    best[rows[kept], place[kept]] = values[kept]
    return items, best


def top_k(scores: np.ndarray, k: int, keys: BatchKeys, exclude: sp.spmatrix | None = None,
          compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The k best items of each row, best first, in the order of `beats`.

    scores: float (m, n_items); entries of -inf are excluded (masked) items and never returned.
    exclude: a sparse CSR (m, n_items) matrix whose entries are excluded too (set to -inf in
    `scores`, which may be changed in place), or None.
    keys: the rows' tie-break keys (`BatchKeys`). Returns items int64 (m, k') and scores
    (m, k'), k' = min(k, n_items); a row with fewer than k' candidates ends in item -1 with
    score -inf. NaN or +inf scores raise DataError.

    One compiled pass over each row keeps a heap of its k best (linrec._row_kernels), rows on
    the threads linrec may use; the keys are hashed only for the few items that reach the heap.
    compiled False (default: fewer than COMPILED_FROM_ROWS rows) selects by numpy instead (no
    kernel to load): a partition at each row's k-th score, then a sort of the few items at or
    above it; a caller listing many rows in small batches passes True."""
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ConfigError(f"k={k!r} must be a positive integer")
    if not isinstance(keys, BatchKeys):
        raise ConfigError(f"top_k: keys must be the rows' BatchKeys, got {type(keys).__name__}")
    scores = np.ascontiguousarray(scores)
    if scores.ndim != 2 or not np.issubdtype(scores.dtype, np.floating):
        raise DataError(f"top_k needs a float (rows, items) score matrix, got {scores.dtype} "
                        f"{scores.shape}")
    n_rows, n_items = scores.shape
    if exclude is not None:
        if exclude.shape != scores.shape:
            raise DataError(f"top_k: exclude has shape {exclude.shape}; the scores {scores.shape}")
        scores[np.repeat(np.arange(n_rows), np.diff(exclude.indptr)), exclude.indices] = -np.inf
    kk = min(int(k), n_items)
    items = np.empty((n_rows, kk), np.int64)
    best = np.empty((n_rows, kk), scores.dtype)
    if n_rows == 0 or kk == 0:
        return items, best
    if not (n_rows >= COMPILED_FROM_ROWS if compiled is None else compiled):
        return _top_k_sorted(scores, kk, keys)
    from linrec._row_kernels import top_k_rows  # numba, loaded on the first large list

    bases = user_key_bases(keys)
    bad = np.zeros(n_rows, np.int8)
    on_row_chunks(lambda start, stop: top_k_rows(scores, bases, kk, items, best, bad, start,
                                                 stop), n_rows, thread_limit())
    if bad.any():
        raise bad_scores(int(np.argmax(bad)))
    return items, best
