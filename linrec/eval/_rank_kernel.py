"""The compiled (numba) kernel of `linrec.eval.ranks.batch_global_ranks`.

For every row of a score batch (chunks of rows on threads: the kernel releases the GIL): check
the scores are finite, count for each held-out item t the candidates j that beat it (s_j > s_t,
or s_j == s_t and key(u, j) < key(u, t)), and set the fold-in entries to -inf. Two ways to
count, by the row's number m of targets:

* linear (m <= linear_max, nearly every user): per target one branch-free pass over the row
  that counts greater and equal scores (SIMD, the row stays in cache), and for a score that
  ties other items one more pass comparing keys;
* sorted (larger m): one pass that places each item among the m sorted target scores (a binary
  search, or one comparison for the usual item below every target).

The row's other targets and its fold-in items are no candidates: what they counted is taken
out afterwards. Comparisons are in the scores' dtype, so the counts are exact integers,
whatever the path or the order of the work.

Keys: key(u, j) = mix64(base_u + j * gamma) (`linrec.item_order`), with base_u computed by the
caller; uint64 arithmetic wraps as in numpy.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from linrec.item_order import _GAMMA_ITEM as GAMMA_ITEM
from linrec.item_order import _MIX1 as MIX1
from linrec.item_order import _MIX2 as MIX2

# the constants of linrec.item_order's hash, as numba sees them (compile-time uint64)
_GAMMA_ITEM = np.uint64(GAMMA_ITEM)
_MIX1 = np.uint64(MIX1)
_MIX2 = np.uint64(MIX2)


@njit(cache=True, inline="always")
def _key(base, item):
    x = base + np.uint64(item) * _GAMMA_ITEM
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return x


@njit(cache=True, inline="always")
def _count_below(sorted_scores, m, s):
    """#{i < m: sorted_scores[i] < s} (sorted ascending)."""
    if s <= sorted_scores[0]:
        return 0
    lo, hi = 1, m
    while lo < hi:
        mid = (lo + hi) >> 1
        if sorted_scores[mid] < s:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always")
def _tied_wins(sorted_scores, sorted_keys, wins, m, first, s, key, step):
    """The targets from `first` on whose score equals s and whose key exceeds `key` gain
    `step` beaters."""
    i = first
    while i < m and sorted_scores[i] == s:
        if key < sorted_keys[i]:
            wins[i] += step
        i += 1


@njit(cache=True, inline="always")
def _uncount(sorted_scores, sorted_keys, counts, wins, m, s, key):
    """Take out what an item of score s and key `key` counted in the pass."""
    c = _count_below(sorted_scores, m, s)
    counts[c] -= 1
    _tied_wins(sorted_scores, sorted_keys, wins, m, c, s, key, -1)


@njit(cache=True, inline="always")
def _sift_down(values, order, root, end):
    """Restore the max-heap of order[root:end] (ordered by values[order[.]])."""
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and values[order[child]] < values[order[child + 1]]:
            child += 1
        if not values[order[root]] < values[order[child]]:
            return
        order[root], order[child] = order[child], order[root]
        root = child


@njit(cache=True)
def _argsort(values):
    """Indices that sort `values` (finite) ascending, by heap sort; equal values in any order.
    Written out because numba's own argsort (merge or quick sort) takes seconds to compile,
    which a fresh install's first run would wait for."""
    m = len(values)
    order = np.arange(m)
    for root in range(m // 2 - 1, -1, -1):
        _sift_down(values, order, root, m)
    for end in range(m - 1, 0, -1):
        order[0], order[end] = order[end], order[0]
        _sift_down(values, order, 0, end)
    return order


@njit(cache=True, inline="always")
def _finite_row(row):
    bad = 0
    for j in range(len(row)):
        bad += not (np.abs(row[j]) < np.inf)
    return bad == 0


@njit(cache=True, nogil=True)
def _count_linear(row, f_idx, t_idx, base, out):
    """Beaters of each of the m targets (m small): one vectorised pass over the row per target
    (counts of greater and equal scores), one more pass per tied score value for the keys, then
    what the excluded items (fold-in, targets) counted taken out."""
    m = len(t_idx)
    t_scores = np.empty(m, dtype=row.dtype)
    t_keys = np.empty(m, dtype=np.uint64)
    tied = np.zeros(m, dtype=np.bool_)
    for i in range(m):
        t_scores[i] = row[t_idx[i]]
        t_keys[i] = _key(base, t_idx[i])
    for i in range(m):
        t = t_scores[i]
        greater = 0
        equal = 0
        for j in range(len(row)):
            s = row[j]
            greater += s > t
            equal += s == t
        out[i] = greater
        tied[i] = equal > 1
    for i in range(m):  # items tied with a target win by key; one pass per tied score value
        if not tied[i]:
            continue
        t = t_scores[i]
        for j in range(len(row)):
            if row[j] == t:
                key = _key(base, j)
                for q in range(i, m):
                    if tied[q] and t_scores[q] == t and key < t_keys[q]:
                        out[q] += 1
        for q in range(i + 1, m):
            if t_scores[q] == t:
                tied[q] = False
    for i in range(m):  # the targets are no candidates
        for q in range(m):
            if t_scores[q] > t_scores[i] or (t_scores[q] == t_scores[i] and t_keys[q] < t_keys[i]):
                out[i] -= 1
    for p in range(len(f_idx)):  # nor are the fold-in items
        j = f_idx[p]
        s = row[j]
        key = _key(base, j)
        for i in range(m):
            if s > t_scores[i] or (s == t_scores[i] and key < t_keys[i]):
                out[i] -= 1


@njit(cache=True, nogil=True)
def _count_sorted(row, f_idx, t_idx, base, out):
    """Beaters of each of the m targets (m large): one pass that places each item among the
    sorted target scores (binary search), then what the excluded items counted taken out."""
    m = len(t_idx)
    t_scores = np.empty(m, dtype=row.dtype)
    for i in range(m):
        t_scores[i] = row[t_idx[i]]
    order = _argsort(t_scores)
    sorted_scores = np.empty(m, dtype=row.dtype)
    sorted_keys = np.empty(m, dtype=np.uint64)
    for i in range(m):
        sorted_scores[i] = t_scores[order[i]]
        sorted_keys[i] = _key(base, t_idx[order[i]])
    counts = np.zeros(m + 1, dtype=np.int64)  # counts[c]: items above exactly c targets
    wins = np.zeros(m, dtype=np.int64)  # tied items with a smaller key, per sorted target
    lowest = sorted_scores[0]
    for j in range(len(row)):
        s = row[j]
        if s < lowest:
            counts[0] += 1
            continue
        c = _count_below(sorted_scores, m, s)
        counts[c] += 1
        if c < m and sorted_scores[c] == s:
            _tied_wins(sorted_scores, sorted_keys, wins, m, c, s, _key(base, j), 1)
    for i in range(m):
        _uncount(sorted_scores, sorted_keys, counts, wins, m, sorted_scores[i], sorted_keys[i])
    for p in range(len(f_idx)):
        j = f_idx[p]
        _uncount(sorted_scores, sorted_keys, counts, wins, m, row[j], _key(base, j))
    # an item in interval c beats the c lowest targets: target i is beaten by
    # sum_{c > i} counts[c] items plus its tied winners
    above = np.int64(0)
    for i in range(m - 1, -1, -1):
        above += counts[i + 1]
        out[order[i]] = above + wins[i]


@njit(cache=True, nogil=True)
def rank_rows(scores, f_indptr, f_indices, t_indptr, t_indices, bases, beaten_by,
              linear_max, start, stop):
    """Rows start:stop of a batch. scores (b, n) float32/float64, modified: fold-in entries
    -inf. f_*/t_*: CSR of the fold-in and held-out items of the b rows (disjoint, no
    duplicates). bases: uint64 (b,) key bases of the rows' users. beaten_by: int64 (nnz
    targets,) output, aligned with t_indices. Rows with at most `linear_max` targets take the
    linear path. Returns the first row with a non-finite score (nothing changed in it), or -1.
    Releases the GIL: the caller runs chunks of rows on several threads."""
    for r in range(start, stop):
        row = scores[r]
        if not _finite_row(row):
            return r
        t0, t1 = t_indptr[r], t_indptr[r + 1]
        f_idx = f_indices[f_indptr[r]:f_indptr[r + 1]]
        if t1 > t0:
            if t1 - t0 <= linear_max:
                _count_linear(row, f_idx, t_indices[t0:t1], bases[r], beaten_by[t0:t1])
            else:
                _count_sorted(row, f_idx, t_indices[t0:t1], bases[r], beaten_by[t0:t1])
        for p in range(len(f_idx)):
            row[f_idx[p]] = -np.inf
    return -1
