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
from llvmlite import ir
from numba import njit, types, uint64
from numba.core import cgutils
from numba.extending import intrinsic

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


@njit(cache=True, nogil=True, inline="always")
def _sift_down(heap_s, heap_k, heap_i, size, s, key, item):  # pragma: no cover - compiled
    """Put (s, key, item) at the root of the heap [:size] (the worst at its root) and sift
    it down to its place."""
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and _worse(heap_s[child + 1], heap_k[child + 1], heap_s[child],
                                       heap_k[child]):
            child += 1
        if not _worse(heap_s[child], heap_k[child], s, key):
            break
        heap_s[pos], heap_k[pos], heap_i[pos] = heap_s[child], heap_k[child], heap_i[child]
        pos = child
    heap_s[pos], heap_k[pos], heap_i[pos] = s, key, item


@njit(cache=True, nogil=True)
def select_row(row, ids, count, base, k, heap_s, heap_k, heap_i, items,  # pragma: no cover
               best):
    """items, best (k each, best first; -1 and -inf past the row's candidates) of the items
    ids[:count] scored row[:count], -inf entries excluded; heap_s, heap_k, heap_i: scratch of k
    entries. Returns False, leaving items and best unset, when a score is NaN or +inf."""
    size = 0
    for t in range(count):
        s = row[t]
        if s == -np.inf:
            continue
        if s != s or s == np.inf:
            return False
        if size == k and s < heap_s[0]:
            continue  # the common case: below the k-th best, no key needed
        j = ids[t]
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
            _sift_down(heap_s, heap_k, heap_i, size, s, key, j)
    # best first: repeatedly take the heap's worst into the last free place
    for place in range(size - 1, -1, -1):
        items[place], best[place] = heap_i[0], heap_s[0]
        _sift_down(heap_s, heap_k, heap_i, place, heap_s[place], heap_k[place], heap_i[place])
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
    ids = np.arange(scores.shape[1])
    for r in range(start, stop):
        if not select_row(scores[r], ids, len(ids), bases[r], k, heap_s, heap_k, heap_i,
                          items[r], best[r]):
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
    ids = np.arange(n)
    for r in range(start, stop):
        if not _exact_top_k_row(indptr, indices, data, W, ex_indptr, ex_indices, r, bases[r], k,
                                row, ids, heap_s, heap_k, heap_i, items[r], best[r]):
            bad[r] = 1


@njit(cache=True, nogil=True, inline="always")
def _exact_top_k_row(indptr, indices, data, W, ex_indptr, ex_indices, r, base, k, row, ids,
                     heap_s, heap_k, heap_i, items, best):  # pragma: no cover - compiled
    """`product_top_k_rows` for row r: its whole product row in `row`, excluded, selected."""
    _product_row(indptr, indices, data, W, r, row, 0, W.shape[1])
    for q in range(ex_indptr[r], ex_indptr[r + 1]):
        row[ex_indices[q]] = -np.inf
    return select_row(row, ids, len(ids), base, k, heap_s, heap_k, heap_i, items, best)


# ---------------------------------------------------------------------------------------------
# top-K through an int8 screen: the product's reads of W at a quarter of the bytes
# ---------------------------------------------------------------------------------------------

#: columns per block of the int8 copy of W: one scale per row of W and block
SCREEN_BLOCK = 64
#: the screen's error per unit of sum_p |v_p| * max_block |W[i_p]|: 0.5/127 for the rounding to
#: int8 plus the float32 roundings of scales and products, with 1.6 % to spare
#: (`screened_top_k_rows`)
SCREEN_ERROR = 0.004
#: a block whose largest |W| is below this (and not 0) is not screened (its int8 scale would
#: be subnormal)
SCREEN_TINY = 2.0 ** -100


@njit(cache=True, nogil=True)
def quantize_rows(W, Q, S, usable, start, stop):  # pragma: no cover - compiled
    """The int8 copy of rows start:stop of W (n x d, float32): for each block b of
    SCREEN_BLOCK columns, S[i, b] = fl(M / 127) with M = max |W[i, block]|, and
    Q[i, c] = rint(W[i, c] · fl(1 / S[i, b])) clipped to ±127 (0 where M = 0), so
    |W[i, c] - S[i, b]·Q[i, c]| <= (0.5 + 2^-16)·S[i, b]. usable[i] = 0 for a row with a NaN or
    infinite entry, or a block with 0 < M < SCREEN_TINY."""
    d = W.shape[1]
    for i in range(start, stop):
        for b in range(S.shape[1]):
            c0 = b * SCREEN_BLOCK
            w = W[i, c0:min(d, c0 + SCREEN_BLOCK)]
            q = Q[i, c0:min(d, c0 + SCREEN_BLOCK)]
            m = np.float32(0.0)
            nonfinite = 0
            for c in range(len(w)):
                a = abs(w[c])
                nonfinite += not (a < np.inf)
                m = max(m, a)
            if nonfinite or (m > 0 and m < SCREEN_TINY):
                usable[i] = 0
            s = m / np.float32(127.0)
            S[i, b] = s
            if m > 0 and not nonfinite:
                inv = np.float32(1.0) / s
                for c in range(len(w)):
                    q[c] = np.int8(min(np.float32(127.0),
                                       max(np.float32(-127.0), np.rint(w[c] * inv))))
            else:
                q[:] = 0


@intrinsic
def _prefetch(typingctx, address):  # pragma: no cover - compiled
    """A hint to load the cache line at `address` (an integer) into every cache level."""
    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32]),
            "llvm.prefetch.p0")
        # read, locality 3 (keep in all levels), data cache
        builder.call(function, [pointer, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(types.intp), codegen


@njit(cache=True, nogil=True, inline="always")
def _screen_row(indptr, indices, data, Q, S, r, o):  # pragma: no cover - compiled
    """o (d,) = the screened scores of row r: sum over its entries p of
    fl(data[p]·S[i, b])·Q[i, c], i = indices[p], b = c // SCREEN_BLOCK (float32). Four entries
    at a time, block by block; each block of a Q row is one cache line, which is asked for
    while the four entries before use the same block (Q's rows are read at random: the
    hardware prefetcher stops at each page's end)."""
    d = Q.shape[1]
    full = d // SCREEN_BLOCK
    o[:] = 0
    p, end = indptr[r], indptr[r + 1]
    base = Q.ctypes.data
    last = indptr[len(indptr) - 1] - 1
    while p + 4 <= end:
        i0, i1, i2, i3 = indices[p], indices[p + 1], indices[p + 2], indices[p + 3]
        v0, v1, v2, v3 = data[p], data[p + 1], data[p + 2], data[p + 3]
        s0, s1, s2, s3 = S[i0], S[i1], S[i2], S[i3]
        # the next four entries' rows, a block ahead of their use (a block is one cache line)
        n0 = base + indices[min(p + 4, last)] * d
        n1 = base + indices[min(p + 5, last)] * d
        n2 = base + indices[min(p + 6, last)] * d
        n3 = base + indices[min(p + 7, last)] * d
        for b in range(S.shape[1]):
            c0 = b * SCREEN_BLOCK
            _prefetch(n0 + c0)
            _prefetch(n1 + c0)
            _prefetch(n2 + c0)
            _prefetch(n3 + c0)
            a0, a1, a2, a3 = v0 * s0[b], v1 * s1[b], v2 * s2[b], v3 * s3[b]
            if b < full:  # a constant trip count: the loop is vectorised whole
                ob = o[c0:c0 + SCREEN_BLOCK]
                x0, x1 = Q[i0, c0:c0 + SCREEN_BLOCK], Q[i1, c0:c0 + SCREEN_BLOCK]
                x2, x3 = Q[i2, c0:c0 + SCREEN_BLOCK], Q[i3, c0:c0 + SCREEN_BLOCK]
                for c in range(SCREEN_BLOCK):
                    ob[c] = (((ob[c] + a0 * np.float32(x0[c])) + a1 * np.float32(x1[c]))
                             + a2 * np.float32(x2[c])) + a3 * np.float32(x3[c])
            else:
                for c in range(c0, d):
                    o[c] = (((o[c] + a0 * np.float32(Q[i0, c])) + a1 * np.float32(Q[i1, c]))
                            + a2 * np.float32(Q[i2, c])) + a3 * np.float32(Q[i3, c])
        p += 4
    while p < end:
        i0, v0 = indices[p], data[p]
        for b in range(S.shape[1]):
            c0 = b * SCREEN_BLOCK
            a0 = v0 * S[i0, b]
            for c in range(c0, min(d, c0 + SCREEN_BLOCK)):
                o[c] = o[c] + a0 * np.float32(Q[i0, c])
        p += 1


@njit(cache=True, nogil=True, inline="always")
def _push_largest(heap, size, k, x):  # pragma: no cover - compiled
    """Keep the k largest values seen in the min-heap heap[:size]; returns the new size."""
    if size < k:
        pos = size
        while pos > 0:
            parent = (pos - 1) // 2
            if heap[parent] <= x:
                break
            heap[pos] = heap[parent]
            pos = parent
        heap[pos] = x
        return size + 1
    if x <= heap[0]:
        return size
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= x:
            break
        heap[pos] = heap[child]
        pos = child
    heap[pos] = x
    return size


@njit(cache=True, nogil=True)
def screened_top_k_rows(indptr, indices, data, W, Q, S, ex_indptr, ex_indices, bases, k, cap,
                        items, best, bad, screened, start, stop):  # pragma: no cover - compiled
    """`product_top_k_rows`, the same items and scores, from the int8 copy (Q, S) of W
    (`quantize_rows`, every row usable): per row r in start:stop,

    1. the screened scores t_j (`_screen_row`, excluded items -inf), and a bound e_b per block
       of columns with |s_j - t_j| <= e_b for the exact product row s (float64: the int8
       rounding, every float32 rounding of t and of s with m entries,
       gamma = (m + 4)·2^-24 / (1 - (m + 4)·2^-24)):
       e_b = (SCREEN_ERROR + 4·gamma)·127·(1 + 2^-20)·sum_p |v_p|·S[i_p, b] + a term for
       subnormal roundings;
    2. blocks in decreasing order of max_j t_j + e_b, each item's lower bound t_j - e_b kept
       among the k largest seen (tau: the k-th, -inf while fewer), until a block's upper bound
       falls below tau: no item of it or of a later block reaches tau, so each is beaten by
       k others for certain;
    3. the items of the blocks looked at with t_j + e_b >= tau (at most `cap`) are scored
       exactly, as the product row sums them (the row's entries in storage order), and
       selected (`select_row`).

    A row whose weights are not finite, whose bound could overflow float32, with more than
    ~4 000 entries (the bound loosens) or that keeps more than `cap` items takes the exact path
    (`_exact_top_k_row`) instead; screened[r] = 1 for a row served by the screen."""
    d = W.shape[1]
    n_blocks = S.shape[1]
    row = np.empty(d, np.float32)
    exact = np.empty(d, W.dtype)
    bound = np.empty(n_blocks, np.float64)
    upper = np.empty(n_blocks, np.float64)
    looked = np.empty(n_blocks, np.int64)
    lows = np.empty(k, np.float64)
    cand = np.empty(cap, np.int64)
    cand_s = np.empty(cap, W.dtype)
    ids = np.arange(d)
    heap_s = np.empty(k, W.dtype)
    heap_k = np.empty(k, np.uint64)
    heap_i = np.empty(k, np.int64)
    for r in range(start, stop):
        p0, p1 = indptr[r], indptr[r + 1]
        bound[:] = 0.0
        vmax = 0.0
        finite = True
        for p in range(p0, p1):
            av = abs(np.float64(data[p]))
            finite &= av < np.inf  # False for NaN too
            vmax = max(vmax, av)
            srow = S[indices[p]]
            for b in range(n_blocks):
                bound[b] += av * np.float64(srow[b])
        m = p1 - p0 + 4
        gamma = m * 2.0 ** -24 / (1.0 - m * 2.0 ** -24)
        ok = finite and gamma < 2.0 ** -12  # rows of up to ~4 000 entries
        if ok:  # partial sums of t and s stay below sum |v|·M: finite if that is
            ok = bound.max() * 127.0 * 1.01 < 1e38
        count = 0
        if ok:
            _screen_row(indptr, indices, data, Q, S, r, row)
            for q in range(ex_indptr[r], ex_indptr[r + 1]):
                row[ex_indices[q]] = -np.inf
            factor = (SCREEN_ERROR + 4.0 * gamma) * 127.0 * (1.0 + 2.0 ** -20)
            tiny = (m + 1) * (vmax * 2.0 ** -100 + 2.0 ** -140)
            for b in range(n_blocks):
                bound[b] = bound[b] * factor + tiny
                c0 = b * SCREEN_BLOCK
                top = np.float32(-np.inf)
                if c0 + SCREEN_BLOCK <= d:
                    block = row[c0:c0 + SCREEN_BLOCK]
                    for c in range(SCREEN_BLOCK):  # a constant trip count: vectorised
                        top = max(top, block[c])
                else:
                    for c in range(c0, d):
                        top = max(top, row[c])
                upper[b] = np.float64(top) + bound[b] if top > -np.inf else -np.inf
            size, n_looked = 0, 0
            while True:
                b = np.argmax(upper)
                if upper[b] == -np.inf or (size == k and upper[b] < lows[0]):
                    break
                upper[b] = -np.inf
                looked[n_looked] = b
                n_looked += 1
                e = bound[b]
                for c in range(b * SCREEN_BLOCK, min(d, (b + 1) * SCREEN_BLOCK)):
                    t = row[c]
                    if t != -np.inf:
                        size = _push_largest(lows, size, k, np.float64(t) - e)
            tau = lows[0] if size == k else -np.inf
            for u in range(n_looked):
                b = looked[u]
                e = bound[b]
                for c in range(b * SCREEN_BLOCK, min(d, (b + 1) * SCREEN_BLOCK)):
                    t = row[c]
                    if t != -np.inf and np.float64(t) + e >= tau:
                        if count == cap:
                            ok = False
                            break
                        cand[count] = c
                        count += 1
                if not ok:
                    break
        if ok:
            cand_s[:count] = 0
            for p in range(p0, p1):  # each candidate's sum in the row's storage order
                v, w = data[p], W[indices[p]]
                for u in range(count):
                    cand_s[u] = cand_s[u] + v * w[cand[u]]
            if not select_row(cand_s, cand, count, bases[r], k, heap_s, heap_k, heap_i,
                              items[r], best[r]):
                bad[r] = 1
            screened[r] = 1
        elif not _exact_top_k_row(indptr, indices, data, W, ex_indptr, ex_indices, r, bases[r],
                                  k, exact, ids, heap_s, heap_k, heap_i, items[r], best[r]):
            bad[r] = 1
