"""Scoring fold-in rows in batches under a memory budget: the one loop behind the evaluator's
batch pass (`eval.ranks.score_batches`) and `Recommender.recommend`; and reading chosen items'
scores from full rows (`gather_scores`, behind `Recommender.score_items`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import scipy.sparse as sp

from linrec.errors import ConfigError, DataError
from linrec.hardware import batch_size_for


def scored_batches(score: Callable[[sp.csr_matrix, np.ndarray | None], np.ndarray],
                   foldin: sp.csr_matrix, users: np.ndarray | None, *, owner: str,
                   batch_size: int | None = None, memory_budget_mb: float = 512
                   ) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield (rows, scores) over the fold-in rows: scores = score(foldin[rows], users[rows] or
    None), a fresh writable float array (rows, n_items) that the caller may mask in place
    (read-only results are copied, integer or half-precision ones cast to float64). Rows per
    batch from `memory_budget_mb` unless `batch_size` is given; `owner` names the scorer in
    the error a wrong shape raises."""
    for rows in row_batches(foldin.shape, batch_size=batch_size,
                            memory_budget_mb=memory_budget_mb):
        yield rows, scored_batch(score, foldin, users, rows, owner=owner)


def row_batches(shape: tuple[int, int], *, batch_size: int | None = None,
                memory_budget_mb: float = 512) -> list[slice]:
    """The batches of rows of `scored_batches` for a fold-in of `shape` (rows, n_items)."""
    n_rows, n_items = shape
    if batch_size is None:
        batch_size = batch_size_for(n_items, memory_budget_mb)
    elif isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size!r} must be a positive integer")
    return [slice(start, min(n_rows, start + int(batch_size)))
            for start in range(0, n_rows, int(batch_size))]


def scored_batch(score: Callable[[sp.csr_matrix, np.ndarray | None], np.ndarray],
                 foldin: sp.csr_matrix, users: np.ndarray | None, rows: slice, *,
                 owner: str) -> np.ndarray:
    """One batch of `scored_batches`: the checked, writable float scores of foldin[rows]."""
    scores = np.asarray(score(foldin[rows], None if users is None else users[rows]))
    expected = (rows.stop - rows.start, foldin.shape[1])
    if scores.shape != expected:
        raise DataError(f"{owner}.score returned shape {scores.shape} for rows "
                        f"{rows.start}:{rows.stop}; expected {expected}")
    if not np.issubdtype(scores.dtype, np.floating) or scores.dtype.itemsize < 4:
        return scores.astype(np.float64)
    if not scores.flags.writeable:
        return scores.copy()
    return scores


def gather_scores(score: Callable[[sp.csr_matrix, np.ndarray | None], np.ndarray],
                  foldin: sp.csr_matrix, users: np.ndarray | None, items: np.ndarray, *,
                  memory_budget_mb: float = 512) -> np.ndarray:
    """Scores (B, m) of items[b] for the b-th fold-in row, read from `score`'s full rows
    (`scored_batches`): one row per distinct user id (rows of one user are that user's one
    fold-in row), or per fold-in row when `users` is None."""
    if users is None:
        rows, inverse = foldin, np.arange(foldin.shape[0])
    else:
        users, first, inverse = np.unique(np.asarray(users), return_index=True,
                                          return_inverse=True)
        rows = foldin[first]
    out = np.empty(items.shape, dtype=np.float64)
    order = np.argsort(inverse, kind="stable")  # the asked rows grouped by the row they read
    sorted_rows = inverse[order]
    for part, scores in scored_batches(score, rows, users, owner="score_items",
                                       memory_budget_mb=memory_budget_mb):
        lo, hi = np.searchsorted(sorted_rows, (part.start, part.stop))
        mine = order[lo:hi]
        out[mine] = scores[inverse[mine, None] - part.start, items[mine]]
    return out
