"""Compiled (numba) kernels over the rows of a score matrix, in one module so that numba's
cache, which sees edits to a kernel's own file only, never links a stale copy of one into
another.

* `top_k_rows`: the k best items of each score row, one pass over the row with a heap of the k
  best so far, in the order of `linrec.item_order` (score descending, then the seeded key
  ascending, the key hashed here from the user's base as `item_order.tie_break_keys_at` hashes
  it). O(n log k) per row on the row's own thread, no sort of the row and no torch: a process's
  first top-k list costs the kernel's load from numba's cache, not torch's import.
* `product_rows`: rows of foldin @ W for a sparse foldin and a dense W, over one block of W's
  columns, the additions in scipy's order (`linrec.models._sparse_dense`).
* `product_top_k_rows`: both in one pass: each row's scores are summed into a buffer of the
  thread's own that stays in its cache, its excluded items set to -inf and its k best taken,
  without the score matrix ever being written out (`linrec.models._sparse_dense.product_top_k`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

_GAMMA_ITEM = uint64(0xD1B54A32D192ED03)
_MIX1 = uint64(0xBF58476D1CE4E5B9)
_MIX2 = uint64(0x94D049BB133111EB)


@njit(cache=True, nogil=True, inline="always")
def _key(base, item):  # pragma: no cover - compiled
    """item_order's key: mix64(base_u + item · gamma) (splitmix64's finalizer)."""
    x = base + uint64(item) * _GAMMA_ITEM
    x ^= x >> uint64(30)
    x *= _MIX1
    x ^= x >> uint64(27)
    x *= _MIX2
    x ^= x >> uint64(31)
    return x


@njit(cache=True, nogil=True, inline="always")
def _worse(s_a, k_a, s_b, k_b):  # pragma: no cover - compiled
    """Whether (s_a, k_a) comes after (s_b, k_b): a lower score, or the same and a larger key."""
    return s_a < s_b or (s_a == s_b and k_a > k_b)


@njit(cache=True, nogil=True)
def select_row(row, base, k, heap_s, heap_k, heap_i, items, best):  # pragma: no cover - compiled
    """items, best (k each, best first; -1 and -inf past the row's candidates) of the score row
    `row` (n,), -inf entries excluded; heap_s, heap_k, heap_i: scratch of k entries. Returns
    False, leaving items and best unset, when the row holds a NaN or +inf score."""
    size = 0
    for j in range(len(row)):
        s = row[j]
        if s == -np.inf:
            continue
        if s != s or s == np.inf:
            return False
        if size == k and s < heap_s[0]:
            continue  # the common case: below the k-th best, no key needed
        key = _key(base, j)
        if size < k:  # sift up: the root is the worst of the heap
            pos = size
            size += 1
            while pos > 0:
                parent = (pos - 1) // 2
                if not _worse(s, key, heap_s[parent], heap_k[parent]):
                    break
                heap_s[pos], heap_k[pos], heap_i[pos] = (heap_s[parent], heap_k[parent],
                                                         heap_i[parent])
                pos = parent
            heap_s[pos], heap_k[pos], heap_i[pos] = s, key, j
        elif _worse(heap_s[0], heap_k[0], s, key):  # better than the worst: replace it
            pos = 0
            while True:
                child = 2 * pos + 1
                if child >= size:
                    break
                if child + 1 < size and _worse(heap_s[child + 1], heap_k[child + 1],
                                               heap_s[child], heap_k[child]):
                    child += 1
                if not _worse(heap_s[child], heap_k[child], s, key):
                    break
                heap_s[pos], heap_k[pos], heap_i[pos] = (heap_s[child], heap_k[child],
                                                         heap_i[child])
                pos = child
            heap_s[pos], heap_k[pos], heap_i[pos] = s, key, j
    # best first: repeatedly take the heap's worst into the last free place
    for place in range(size - 1, -1, -1):
        items[place], best[place] = heap_i[0], heap_s[0]
        last = place
        s, key, item = heap_s[last], heap_k[last], heap_i[last]
        pos = 0
        while True:
            child = 2 * pos + 1
            if child >= last:
                break
            if child + 1 < last and _worse(heap_s[child + 1], heap_k[child + 1],
                                           heap_s[child], heap_k[child]):
                child += 1
            if not _worse(heap_s[child], heap_k[child], s, key):
                break
            heap_s[pos], heap_k[pos], heap_i[pos] = heap_s[child], heap_k[child], heap_i[child]
            pos = child
        heap_s[pos], heap_k[pos], heap_i[pos] = s, key, item
    for place in range(size, k):
        items[place], best[place] = -1, -np.inf
    return True


@njit(cache=True, nogil=True)
def top_k_rows(scores, bases, k, items, best, bad, start, stop):  # pragma: no cover - compiled
    """items[r], best[r] (k each, best first; -1 and -inf past a row's candidates) of rows
    start:stop of `scores` (rows, n), -inf entries excluded; bad[r] = 1 for a row with a NaN or
    +inf score. bases: uint64 (rows,), the rows' key bases (`item_order.user_key_bases`)."""
    heap_s = np.empty(k, scores.dtype)
    heap_k = np.empty(k, np.uint64)
    heap_i = np.empty(k, np.int64)
    for r in range(start, stop):
        if not select_row(scores[r], bases[r], k, heap_s, heap_k, heap_i, items[r], best[r]):
            bad[r] = 1


@njit(cache=True, nogil=True, inline="always")
def _product_row(indptr, indices, data, W, r, o, c0, c1):  # pragma: no cover - compiled
    """o (c1 - c0,) = sum over the entries p of row r of data[p] · W[indices[p], c0:c1]: each
    element ((0 + v0·w0) + v1·w1) + ..., in storage order, a multiplication then an addition,
    never fused (scipy's csr @ dense), with o read and written once per four entries."""
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


@njit(cache=True, nogil=True)
def product_rows(indptr, indices, data, W, out, start, stop, c0,  # pragma: no cover - compiled
                 c1):
    """out[r, c0:c1] = sum over the entries p of row r of data[p] · W[indices[p], c0:c1], r in
    start:stop."""
    for r in range(start, stop):
        _product_row(indptr, indices, data, W, r, out[r, c0:c1], c0, c1)


@njit(cache=True, nogil=True)
def product_top_k_rows(indptr, indices, data, W, ex_indptr, ex_indices, bases, k, items,
                       best, bad, start, stop):  # pragma: no cover - compiled
    """items[r], best[r] as `top_k_rows` gives them for the score row r = the product row of
    `product_rows` (the whole of W) with the entries ex_indices[ex_indptr[r]:ex_indptr[r + 1]]
    set to -inf, r in start:stop; the row is summed into one buffer, never written out."""
    n = W.shape[1]
    row = np.empty(n, W.dtype)
    heap_s = np.empty(k, W.dtype)
    heap_k = np.empty(k, np.uint64)
    heap_i = np.empty(k, np.int64)
    for r in range(start, stop):
        _product_row(indptr, indices, data, W, r, row, 0, n)
        for q in range(ex_indptr[r], ex_indptr[r + 1]):
            row[ex_indices[q]] = -np.inf
        if not select_row(row, bases[r], k, heap_s, heap_k, heap_i, items[r], best[r]):
            bad[r] = 1
