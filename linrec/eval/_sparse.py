"""Vectorised helpers on CSR index arrays used by item sampling and the sampled-rank kernel."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + l) for each (s, l), vectorised. int64."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return shift + np.arange(total, dtype=np.int64)


def binary_sorted_csr(matrix: sp.spmatrix | sp.sparray) -> sp.csr_matrix:
    out = sp.csr_matrix(matrix, copy=True)
    out.sum_duplicates()
    out.eliminate_zeros()
    out.sort_indices()
    return out


def csr_contains(matrix: sp.csr_matrix, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Boolean array (shape of items): is items[i, ...] a stored entry of row rows[i] of a
    canonical (sorted, duplicate-free) CSR matrix? rows broadcasts against items."""
    rows, items = np.broadcast_arrays(np.asarray(rows, np.int64), np.asarray(items, np.int64))
    n_cols = matrix.shape[1]
    entry_rows = np.repeat(np.arange(matrix.shape[0], dtype=np.int64), np.diff(matrix.indptr))
    keys = entry_rows * n_cols + matrix.indices.astype(np.int64)
    query = rows * n_cols + items
    pos = np.searchsorted(keys, query)
    pos_ok = np.minimum(pos, max(len(keys) - 1, 0))
    return (pos < len(keys)) & (keys[pos_ok] == query) if len(keys) else np.zeros(query.shape, bool)

