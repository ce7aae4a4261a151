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


def csr_keys(matrix: sp.csr_matrix) -> np.ndarray:
    """row · n_cols + column of every stored entry of a canonical (sorted, duplicate-free) CSR
    matrix: int64 (nnz,), sorted; what `keys_contain` searches."""
    entry_rows = np.repeat(np.arange(matrix.shape[0], dtype=np.int64), np.diff(matrix.indptr))
    return entry_rows * matrix.shape[1] + matrix.indices.astype(np.int64)


def keys_contain(keys: np.ndarray, n_cols: int, rows: np.ndarray,
                 items: np.ndarray) -> np.ndarray:
    """`csr_contains` on the matrix's `csr_keys` (computed once for many queries)."""
    rows, items = np.broadcast_arrays(np.asarray(rows, np.int64), np.asarray(items, np.int64))
    if not len(keys):
        return np.zeros(rows.shape, bool)
    query = rows * n_cols + items
    pos = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
    return keys[pos] == query


def csr_contains(matrix: sp.csr_matrix, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Boolean array (shape of items): is items[i, ...] a stored entry of row rows[i] of a
    canonical (sorted, duplicate-free) CSR matrix? rows broadcasts against items."""
    return keys_contain(csr_keys(matrix), matrix.shape[1], rows, items)
