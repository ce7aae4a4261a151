"""Ranking a score batch where it was computed: a torch tensor on a GPU is masked and counted
there, and only the ranks come back to the host (docs/concepts/evaluation.md, "On a GPU").

The ranks are `ranks.batch_global_ranks`'s to the last digit for the same scores: per held-out
item t, the candidates with a higher score are counted on the device (comparisons in the
scores' dtype, exact integer counts), and so are the candidates whose score equals t's; only
for the pairs with such a tie are the tied items' keys compared, on the host, as the host
kernel does. Scores of continuous models almost never tie, so a batch copies back its ranks and
nothing else. The functions take a tensor on any device: the CPU tests run this code.
"""

from __future__ import annotations

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


def count_beaten(scores: Any, foldin: sp.csr_matrix, targets: sp.csr_matrix,
                 keys: BatchKeys, chunk_elements: int = PAIR_CHUNK_ELEMENTS
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For each held-out item (the CSR order of `targets`): the candidates that beat it, and its
    score, as host arrays (int64, the scores' dtype).

    scores: torch tensor (b, n_items), float, masked in place (fold-in and held-out entries
    -inf); foldin, targets: canonical CSR (b, n_items), disjoint (`ranks.checked_batch_rows`);
    keys: the batch's tie-break keys."""
    import torch

    n_rows, n_items = scores.shape
    if not scores.is_floating_point() or scores.element_size() < 4:
        scores = scores.to(torch.float32)
    finite = torch.isfinite(scores).all(dim=1)
    if not bool(finite.all()):
        raise DataError(non_finite_scores(int(torch.nonzero(~finite)[0, 0])))
    t_rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(targets.indptr))
    t_items = targets.indices.astype(np.int64)
    f_rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(foldin.indptr))
    on = scores.device
    rows_d, items_d = torch.from_numpy(t_rows).to(on), torch.from_numpy(t_items).to(on)
    t_scores = scores[rows_d, items_d]
    # excluded items rank below every candidate: -inf, which no finite score ties or beats
    scores[torch.from_numpy(f_rows).to(on),
           torch.from_numpy(foldin.indices.astype(np.int64)).to(on)] = -np.inf
    scores[rows_d, items_d] = -np.inf
    greater = torch.empty(len(t_items), dtype=torch.int64, device=on)
    equal = torch.empty_like(greater)
    step = max(1, int(chunk_elements) // max(n_items, 1))
    for start in range(0, len(t_items), step):
        stop = min(len(t_items), start + step)
        rows = scores[rows_d[start:stop]]
        threshold = t_scores[start:stop, None]
        greater[start:stop] = (rows > threshold).sum(dim=1)
        equal[start:stop] = (rows == threshold).sum(dim=1)
    beaten_by = greater.cpu().numpy()
    t_host = t_scores.cpu().numpy()
    tied = np.flatnonzero(equal.cpu().numpy())
    if tied.size:
        beaten_by[tied] += _key_wins(scores, t_rows[tied], t_items[tied], t_host[tied], keys)
    return beaten_by, t_host


def _key_wins(masked: Any, rows: np.ndarray, items: np.ndarray, values: np.ndarray,
              keys: BatchKeys) -> np.ndarray:
    """For each (row, held-out item, its score) pair: how many candidates of the row tie the
    score and win on the key. The rows are copied to the host once each."""
    import torch

    wins = np.zeros(len(rows), dtype=np.int64)
    distinct, inverse = np.unique(rows, return_inverse=True)
    host = masked[torch.from_numpy(distinct).to(masked.device)].cpu().numpy()
    own = keys[rows, items]  # arrays throughout: numpy's uint64 scalars warn as they wrap
    for p in range(len(rows)):
        tied = np.flatnonzero(host[inverse[p]] == values[p])
        wins[p] = np.count_nonzero(keys[rows[p:p + 1], tied] < own[p])
    return wins
