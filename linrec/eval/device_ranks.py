"""Ranking a score batch by vectorised comparisons, where it was computed: a torch tensor on
a GPU is masked and counted there, and only the ranks come back to the host
(docs/concepts/evaluation.md, "On a GPU"); a small NumPy batch is counted the same way on the
host, where loading the compiled kernel would cost more than the count.

The ranks are `ranks.batch_global_ranks`'s to the last digit for the same scores: per held-out
item t, the candidates with a higher score are counted (comparisons in the scores' dtype,
exact integer counts), and so are the candidates whose score equals t's; only for the pairs
with such a tie are the tied items' keys compared, on the host, as the host kernel does. Scores
of continuous models almost never tie, so a batch copies back its ranks and nothing else. The
functions take a NumPy array or a tensor on any device: the CPU tests run this code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.errors import DataError
from linrec.item_order import BatchKeys

#: score elements compared at once (a chunk of held-out items times n_items): bounds the
#: temporaries of the count to about 5 bytes per element (the gathered rows and one mask)
PAIR_CHUNK_ELEMENTS = 2**26


def non_finite_scores(row: int) -> str:
    """The error of a score batch whose row `row` holds NaN or inf (both rank paths)."""
    return (f"model scores of batch row {row} contain NaN or inf; scores must be finite (the "
            "evaluator masks fold-in items itself)")


def _transfers(scores: Any) -> tuple[Callable[[np.ndarray], Any], Callable[[Any], np.ndarray]]:
    """(to the scores' device, to the host) for host index arrays and results: the identity for
    a NumPy array, torch's copies for a tensor."""
    if isinstance(scores, np.ndarray):
        return (lambda array: array), np.asarray
    import torch

    device = scores.device
    return (lambda array: torch.from_numpy(array).to(device)), (lambda t: t.cpu().numpy())


def count_beaten(scores: Any, foldin: sp.csr_matrix, targets: sp.csr_matrix,
                 keys: BatchKeys, chunk_elements: int = PAIR_CHUNK_ELEMENTS
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For each held-out item (the CSR order of `targets`): the candidates that beat it, and its
    score, as host arrays (int64, the scores' dtype).

    scores: NumPy array (float32/float64) or torch tensor (b, n_items), masked in place
    (fold-in and held-out entries -inf); foldin, targets: canonical CSR (b, n_items), disjoint
    (`ranks.checked_batch_rows`); keys: the batch's tie-break keys."""
    to_device, to_host = _transfers(scores)
    n_rows, n_items = scores.shape
    if isinstance(scores, np.ndarray):
        finite = np.isfinite(scores).all(axis=1)
    else:
        import torch

        if not scores.is_floating_point() or scores.element_size() < 4:
            scores = scores.to(torch.float32)
        finite = torch.isfinite(scores).all(axis=1)
    bad = np.flatnonzero(~to_host(finite))
    if bad.size:
        raise DataError(non_finite_scores(int(bad[0])))
    t_rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(targets.indptr))
    t_items = targets.indices.astype(np.int64)
    f_rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(foldin.indptr))
    rows_d, items_d = to_device(t_rows), to_device(t_items)
    t_scores = scores[rows_d, items_d]
    # excluded items rank below every candidate: -inf, which no finite score ties or beats
    scores[to_device(f_rows), to_device(foldin.indices.astype(np.int64))] = -np.inf
    scores[rows_d, items_d] = -np.inf
    greater, equal = [], []
    step = max(1, int(chunk_elements) // max(n_items, 1))
    for start in range(0, len(t_items), step):
        stop = min(len(t_items), start + step)
        rows = scores[rows_d[start:stop]]
        threshold = t_scores[start:stop, None]
        greater.append((rows > threshold).sum(axis=1))
        equal.append((rows == threshold).sum(axis=1))
    beaten_by = np.concatenate([to_host(g) for g in greater] or [np.zeros(0)]).astype(np.int64)
    t_host = to_host(t_scores)
    tied = np.flatnonzero(np.concatenate([to_host(e) for e in equal] or [np.zeros(0)]))
    if tied.size:
        beaten_by[tied] += _key_wins(scores, t_rows[tied], t_items[tied], t_host[tied], keys,
                                     chunk_elements)
    return beaten_by, t_host


def _key_wins(masked: Any, rows: np.ndarray, items: np.ndarray, values: np.ndarray,
              keys: BatchKeys, chunk_elements: int) -> np.ndarray:
    """For each (row, held-out item, its score) pair: how many candidates of the row tie the
    score and win on the key. Per chunk of pairs, only the positions of the ties come to the
    host."""
    to_device, to_host = _transfers(masked)
    own = keys[rows, items]  # arrays throughout: numpy's uint64 scalars warn as they wrap
    wins = np.zeros(len(rows), dtype=np.int64)
    step = max(1, int(chunk_elements) // max(masked.shape[1], 1))
    for start in range(0, len(rows), step):
        stop = min(len(rows), start + step)
        ties = masked[to_device(rows[start:stop])] == to_device(values[start:stop])[:, None]
        pair, tied_item = np.nonzero(to_host(ties))
        pair += start
        won = keys[rows[pair], tied_item] < own[pair]
        wins[start:stop] = np.bincount(pair[won] - start, minlength=stop - start)
    return wins
