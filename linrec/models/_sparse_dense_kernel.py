"""The compiled (numba) kernel of `linrec.models._sparse_dense.sparse_dense_product`: a chunk
of output rows over one column block of W, the additions in scipy's order."""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def product_rows(indptr, indices, data, W, out, start, stop, c0,  # pragma: no cover - compiled
                 c1):
    """out[r, c0:c1] = sum over the entries p of row r of data[p] · W[indices[p], c0:c1], r in
    start:stop."""
    for r in range(start, stop):
        o = out[r, c0:c1]
        o[:] = 0
        p, end = indptr[r], indptr[r + 1]
        while p + 4 <= end:
            v0, v1, v2, v3 = data[p], data[p + 1], data[p + 2], data[p + 3]
            w0, w1 = W[indices[p], c0:c1], W[indices[p + 1], c0:c1]
            w2, w3 = W[indices[p + 2], c0:c1], W[indices[p + 3], c0:c1]
            for c in range(c1 - c0):
                o[c] = (((o[c] + v0 * w0[c]) + v1 * w1[c]) + v2 * w2[c]) + v3 * w3[c]
            p += 4
        while p < end:
            v, w = data[p], W[indices[p], c0:c1]
            for c in range(c1 - c0):
                o[c] = o[c] + v * w[c]
            p += 1
