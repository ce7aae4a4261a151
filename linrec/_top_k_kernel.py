"""The k best items of each score row, compiled (numba): one pass over the row with a heap of
the k best so far, in the order of `linrec.item_order` (score descending, then the seeded key
ascending, the key hashed here from the user's base as `item_order.tie_break_keys_at` hashes
it). O(n log k) per row on the row's own thread, no sort of the row and no torch: a process's
first top-k list costs the kernel's load from numba's cache, not torch's import.
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
def top_k_rows(scores, bases, k, items, best, bad, start, stop):  # pragma: no cover - compiled
    """items[r], best[r] (k each, best first; -1 and -inf past a row's candidates) of rows
    start:stop of `scores` (rows, n), -inf entries excluded; bad[r] = 1 for a row with a NaN or
    +inf score. bases: uint64 (rows,), the rows' key bases (`item_order.user_key_bases`)."""
    n = scores.shape[1]
    heap_s = np.empty(k, scores.dtype)
    heap_k = np.empty(k, np.uint64)
    heap_i = np.empty(k, np.int64)
    for r in range(start, stop):
        row, base, size = scores[r], bases[r], 0
        for j in range(n):
            s = row[j]
            if s == -np.inf:
                continue
            if s != s or s == np.inf:
                bad[r] = 1
                break
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
            items[r, place], best[r, place] = heap_i[0], heap_s[0]
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
            items[r, place], best[r, place] = -1, -np.inf
