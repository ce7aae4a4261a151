"""foldin @ W for a sparse foldin and a dense W: the scores of the item-item models.

scipy's `csr @ dense` adds, for each stored entry (r, k) in storage order, v · W[k] to output
row r: one pass over the output row per entry, in one thread. The compiled kernel here does the
same arithmetic in the same order (each output element is ((o + v0·w0) + v1·w1) + ..., a
multiplication then an addition, never fused), so its result is bitwise scipy's, but it
reads and writes each output row once per four entries and runs chunks of rows on several
threads (the kernel releases the GIL).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from linrec.hardware import on_row_chunks


@njit(cache=True, nogil=True)
def _rows(indptr, indices, data, W, out, start, stop):  # pragma: no cover - compiled
    """out[r] = sum over the entries p of row r of data[p] · W[indices[p]], r in start:stop."""
    n = W.shape[1]
    for r in range(start, stop):
        o = out[r]
        o[:] = 0
        p, end = indptr[r], indptr[r + 1]
        while p + 4 <= end:
            v0, v1, v2, v3 = data[p], data[p + 1], data[p + 2], data[p + 3]
            w0, w1 = W[indices[p]], W[indices[p + 1]]
            w2, w3 = W[indices[p + 2]], W[indices[p + 3]]
            for c in range(n):
                o[c] = (((o[c] + v0 * w0[c]) + v1 * w1[c]) + v2 * w2[c]) + v3 * w3[c]
            p += 4
        while p < end:
            v, w = data[p], W[indices[p]]
            for c in range(n):
                o[c] = o[c] + v * w[c]
            p += 1


def sparse_dense_product(foldin: sp.spmatrix, W: np.ndarray, threads: int) -> np.ndarray:
    """foldin (m x n, sparse) @ W (n x d, dense float32/float64) in W's dtype: (m, d), equal to
    scipy's `sp.csr_matrix(foldin, dtype=W.dtype) @ W` bit for bit, on `threads` threads."""
    X = sp.csr_matrix(foldin, dtype=W.dtype)
    if X.shape[1] != W.shape[0]:
        raise ValueError(f"foldin has {X.shape[1]} columns but W has {W.shape[0]} rows")
    W = np.ascontiguousarray(W)
    out = np.empty((X.shape[0], W.shape[1]), dtype=W.dtype)
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    on_row_chunks(lambda start, stop: _rows(indptr, indices, X.data, W, out, start, stop),
                  X.shape[0], threads)
    return out
