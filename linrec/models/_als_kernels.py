"""Compiled (numba) row solvers of the iALS back-end `numba` (linrec.models.als).

Each kernel solves, for every row r in `rows`, the system of linrec.models.als with the other
side's factors `fixed` (n_other, k):

    (Y_Sᵀ diag(q) Y_S + shift + lam[r] I) x_r = Y_Sᵀ l,    shift = α₀ YᵀY (k, k),

where S = indices[indptr[r]:indptr[r + 1]] and q / l = quad / lin on the same slots, and writes
x_r into out[r]. A kernel runs the rows of one chunk serially without the GIL (nogil); the
caller hands chunks to its threads, each taking the next chunk when it finishes one (as
implicit's OpenMP `guided` schedule does). Work arrays are allocated once per chunk; the
compiled code is cached on disk (cache=True).

Vectorisation: numba wraps negative indices, which keeps LLVM from vectorising a loop unless
its index is unsigned, so the inner loops run over `np.uint64` ranges. The Cholesky kernel
keeps the k x k system in the upper triangle of a (k, k + pad) array whose padding columns are
0 and stay 0: its row loops run over whole vector widths (a multiple of `_WIDTH` columns from
the diagonal, into the padding) instead of a scalar remainder. The k x k systems are formed
and factorised by one rank-4 update routine (4 gathered factor rows at a time, or the 4 rows
of a Cholesky panel), a small right-looking blocked Cholesky that beats LAPACK's `posv` at
these sizes (no call overhead, no recursion). Arithmetic is in the factors' dtype, reordered by
the compiler (fastmath), so the numbers agree with the numpy back-end to rounding.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: columns per vector loop (16 float32 / 8 float64 lanes of AVX-512, 2 or 4 of AVX2 vectors)
_WIDTH = 16
#: rows per rank update (gathered interactions, Cholesky panel)
_PANEL = 4
#: reordering (vectorised sums) and fused multiply-adds; not `arcp`/`ninf`/`nnan`: a CG step
#: past convergence divides denormals, which the reciprocal rewrite turns into inf * 0 = NaN
_FAST = {"reassoc", "contract", "nsz"}
#: rows that go through the conjugate-gradient steps together (one pass over shift per step)
_GROUP = 8


@njit(nogil=True, inline="always")
def _span(length):  # pragma: no cover
    """`length` rounded up to a whole number of vector widths (>= 0)."""
    return (length + _WIDTH - 1) // _WIDTH * _WIDTH


@njit(nogil=True, fastmath=_FAST, inline="always")
def _rank4_update(a, src, base, weights, first, k):  # pragma: no cover
    """a[i, j] += Σ_{m<4} weights[m] src[base+m, i] src[base+m, j] for first <= i < k, j >= i
    (the upper triangle; j runs on to a whole vector width, into src's zero padding).
    Register-blocked 4 rows of `a` x the 4 rows of src (8 loads and 4 stores per 16
    multiply-adds); rows i+1..i+3 of a block also get the update at the few columns
    [i, i+3) below their diagonal, which nothing reads (src is only read at columns >= i,
    above the diagonal of its rows base..base+3 < first)."""
    w0, w1, w2, w3 = weights[0], weights[1], weights[2], weights[3]
    s0, s1, s2, s3 = src[base], src[base + 1], src[base + 2], src[base + 3]
    i = first
    while i + 4 <= k:
        r0, r1, r2, r3 = a[i], a[i + 1], a[i + 2], a[i + 3]
        a0, a1, a2, a3 = w0 * s0[i], w1 * s1[i], w2 * s2[i], w3 * s3[i]
        b0, b1, b2, b3 = w0 * s0[i + 1], w1 * s1[i + 1], w2 * s2[i + 1], w3 * s3[i + 1]
        c0, c1, c2, c3 = w0 * s0[i + 2], w1 * s1[i + 2], w2 * s2[i + 2], w3 * s3[i + 2]
        d0, d1, d2, d3 = w0 * s0[i + 3], w1 * s1[i + 3], w2 * s2[i + 3], w3 * s3[i + 3]
        for j in range(np.uint64(i), np.uint64(i + _span(k - i))):
            t0, t1, t2, t3 = s0[j], s1[j], s2[j], s3[j]
            r0[j] += a0 * t0 + a1 * t1 + a2 * t2 + a3 * t3
            r1[j] += b0 * t0 + b1 * t1 + b2 * t2 + b3 * t3
            r2[j] += c0 * t0 + c1 * t1 + c2 * t2 + c3 * t3
            r3[j] += d0 * t0 + d1 * t1 + d2 * t2 + d3 * t3
        i += 4
    while i < k:  # the last k mod 4 rows
        row = a[i]
        a0, a1, a2, a3 = w0 * s0[i], w1 * s1[i], w2 * s2[i], w3 * s3[i]
        for j in range(np.uint64(i), np.uint64(i + _span(k - i))):
            row[j] += a0 * s0[j] + a1 * s1[j] + a2 * s2[j] + a3 * s3[j]
        i += 1


@njit(nogil=True, fastmath=_FAST, cache=True)
def _cholesky_upper(a, k, minus):  # pragma: no cover
    """In place: the upper triangle of a[:k, :k] (an SPD system) becomes U with A = UᵀU.
    Right-looking, panels of 4 rows; minus = 4 x -1. False if a pivot is not positive."""
    unit = minus[0] * minus[0]
    for c0 in range(0, k, _PANEL):
        width = min(_PANEL, k - c0)
        for c in range(c0, c0 + width):
            pivot = a[c, c]
            if not pivot > 0:
                return False
            pivot = np.sqrt(pivot)
            inverse = unit / pivot
            row = a[c]
            for j in range(np.uint64(c + 1), np.uint64(c + 1 + _span(k - c - 1))):
                row[j] *= inverse
            row[c] = pivot
            for i in range(c + 1, c0 + width):  # the panel's own rows
                coefficient = row[i]
                target = a[i]
                for j in range(np.uint64(i), np.uint64(i + _span(k - i))):
                    target[j] -= coefficient * row[j]
        if width == _PANEL:
            _rank4_update(a, a, c0, minus, c0 + _PANEL, k)
    return True


@njit(nogil=True, fastmath=_FAST, cache=True)
def _solve_upper(a, rhs, k):  # pragma: no cover
    """rhs <- (UᵀU)⁻¹ rhs for U in the upper triangle of a (zero padding past k in both)."""
    for c in range(k):  # Uᵀ z = rhs
        rhs[c] /= a[c, c]
        value = rhs[c]
        row = a[c]
        for j in range(np.uint64(c + 1), np.uint64(c + 1 + _span(k - c - 1))):
            rhs[j] -= row[j] * value
    for c in range(k - 1, -1, -1):  # U x = z
        row = a[c]
        total = row[c] - row[c]
        for j in range(np.uint64(c + 1), np.uint64(c + 1 + _span(k - c - 1))):
            total += row[j] * rhs[j]
        rhs[c] = (rhs[c] - total) / row[c]


@njit(nogil=True, fastmath=_FAST, cache=True)
def cholesky_rows(indptr, indices, quad, lin, fixed, shift, lam, rows,
                  out):  # pragma: no cover
    """The exact solution of every row: the system shift + lam I + Σ_S q y yᵀ is formed by
    rank-4 updates of the gathered factor rows y, factorised by `_cholesky_upper` and solved.
    Returns the number of rows whose system is not positive definite (out[r] left as is)."""
    k = fixed.shape[1]
    padded = _span(k) + _WIDTH  # room for the whole-width loops past column k
    system = np.zeros((k, padded), fixed.dtype)
    rhs = np.zeros(padded, fixed.dtype)
    gathered = np.zeros((_PANEL, padded), fixed.dtype)
    weights = np.zeros(_PANEL, fixed.dtype)
    minus = -np.ones(_PANEL, fixed.dtype)
    failures = 0
    for t in range(rows.shape[0]):
        r = rows[t]
        for f in range(k):  # the upper triangle and the 3 entries left of the diagonal
            target, source = system[f], shift[f]  # that `_rank4_update` also writes
            for g in range(np.uint64(max(f - 3, 0)), np.uint64(k)):
                target[g] = source[g]
            for g in range(k, padded):  # 0 again even after a row of infinities
                target[g] = 0
            target[f] += lam[r]
        for f in range(padded):
            rhs[f] = 0
        lo, hi = indptr[r], indptr[r + 1]
        for start in range(lo, hi, _PANEL):
            stop = min(start + _PANEL, hi)
            for m in range(_PANEL):
                target = gathered[m]
                if start + m < stop:
                    p = start + m
                    weights[m] = quad[p]
                    source = fixed[indices[p]]
                    weight = lin[p]
                    for f in range(np.uint64(0), np.uint64(k)):
                        target[f] = source[f]
                        rhs[f] += weight * source[f]
                else:  # a short last group: rows of zeros
                    weights[m] = 0
                    for f in range(np.uint64(0), np.uint64(k)):
                        target[f] = 0
            _rank4_update(system, gathered, 0, weights, 0, k)
        if not _cholesky_upper(system, k, minus):
            failures += 1
            continue
        _solve_upper(system, rhs, k)
        for f in range(k):
            out[r, f] = rhs[f]
    return failures


@njit(nogil=True, fastmath=_FAST, inline="always")
def _shift_product(shift, vectors, images, k):  # pragma: no cover
    """images[b] += shift @ vectors[b] for all _GROUP rows b (shift symmetric, so row g of
    shift is column g). Register-blocked 4 rows of shift x 4 vectors: 8 loads and 4 stores
    per 16 multiply-adds, where one vector at a time needs 3 memory operations per one."""
    width = np.uint64(k)
    for b in range(0, _GROUP, 4):
        p0, p1, p2, p3 = images[b], images[b + 1], images[b + 2], images[b + 3]
        v0, v1, v2, v3 = vectors[b], vectors[b + 1], vectors[b + 2], vectors[b + 3]
        g = 0
        while g + 4 <= k:
            s0, s1, s2, s3 = shift[g], shift[g + 1], shift[g + 2], shift[g + 3]
            a0, a1, a2, a3 = v0[g], v0[g + 1], v0[g + 2], v0[g + 3]
            b0, b1, b2, b3 = v1[g], v1[g + 1], v1[g + 2], v1[g + 3]
            c0, c1, c2, c3 = v2[g], v2[g + 1], v2[g + 2], v2[g + 3]
            d0, d1, d2, d3 = v3[g], v3[g + 1], v3[g + 2], v3[g + 3]
            for f in range(width):
                t0, t1, t2, t3 = s0[f], s1[f], s2[f], s3[f]
                p0[f] += a0 * t0 + a1 * t1 + a2 * t2 + a3 * t3
                p1[f] += b0 * t0 + b1 * t1 + b2 * t2 + b3 * t3
                p2[f] += c0 * t0 + c1 * t1 + c2 * t2 + c3 * t3
                p3[f] += d0 * t0 + d1 * t1 + d2 * t2 + d3 * t3
            g += 4
        while g < k:  # k not a multiple of 4
            row = shift[g]
            a0, b0, c0, d0 = v0[g], v1[g], v2[g], v3[g]
            for f in range(width):
                t0 = row[f]
                p0[f] += a0 * t0
                p1[f] += b0 * t0
                p2[f] += c0 * t0
                p3[f] += d0 * t0
            g += 1


@njit(nogil=True, fastmath=_FAST, inline="always")
def _observed_product(indptr, indices, quad, fixed, r, vector, image, zero,
                      k):  # pragma: no cover
    """image += Σ_{p in row r} q_p (y_p·vector) y_p, the factor rows y_p read in place."""
    width = np.uint64(k)
    for p in range(indptr[r], indptr[r + 1]):
        source = fixed[indices[p]]
        dot = zero
        for f in range(width):
            dot += source[f] * vector[f]
        dot *= quad[p]
        for f in range(width):
            image[f] += dot * source[f]


@njit(nogil=True, fastmath=_FAST, cache=True)
def cg_rows(indptr, indices, quad, lin, fixed, shift, lam, rows, out, steps):  # pragma: no cover
    """`steps` conjugate-gradient iterations from out[r] (warm start) for every row, without
    forming the k x k systems: A d = lam d + shift d + Σ_S q (y·d) y. Rows go through the
    steps in groups of _GROUP, so that shift d is one pass over shift for the group. Like
    implicit, the interactions' factor rows are read in place (they stay in cache across the
    steps)."""
    k = fixed.shape[1]
    width = np.uint64(k)
    x = np.empty((_GROUP, k), fixed.dtype)
    res = np.empty((_GROUP, k), fixed.dtype)
    direction = np.empty((_GROUP, k), fixed.dtype)
    image = np.empty((_GROUP, k), fixed.dtype)
    res_norm = np.empty(_GROUP, fixed.dtype)
    zero = np.zeros(1, fixed.dtype)[0]  # in the factors' dtype (a literal promotes float32)
    unit = np.ones(1, fixed.dtype)[0]
    for start in range(0, rows.shape[0], _GROUP):
        count = min(_GROUP, rows.shape[0] - start)
        for b in range(_GROUP):  # residual = Y_Sᵀ l − A x; a short last group: zero rows
            xb, rb, ib = x[b], res[b], image[b]
            for f in range(width):
                xb[f] = out[rows[start + b], f] if b < count else zero
                rb[f] = zero
                ib[f] = zero
            if b < count:
                r = rows[start + b]
                for p in range(indptr[r], indptr[r + 1]):
                    source = fixed[indices[p]]
                    dot = zero
                    for f in range(width):
                        dot += source[f] * xb[f]
                    weight = lin[p] - quad[p] * dot
                    for f in range(width):
                        rb[f] += weight * source[f]
                lam_r = lam[r]
                for f in range(width):
                    rb[f] -= lam_r * xb[f]
        _shift_product(shift, x, image, k)
        for b in range(_GROUP):
            rb, db, ib = res[b], direction[b], image[b]
            total = zero
            for f in range(width):
                rb[f] -= ib[f]
                db[f] = rb[f]
                total += rb[f] * rb[f]
            res_norm[b] = total
        for _ in range(steps):
            for b in range(_GROUP):
                ib, db = image[b], direction[b]
                lam_r = lam[rows[start + b]] if b < count else zero
                for f in range(width):
                    ib[f] = lam_r * db[f]
                if b < count:
                    _observed_product(indptr, indices, quad, fixed, rows[start + b], db, ib,
                                      zero, k)
            _shift_product(shift, direction, image, k)
            for b in range(count):
                xb, rb, db, ib = x[b], res[b], direction[b], image[b]
                curvature = zero
                for f in range(width):
                    curvature += db[f] * ib[f]
                step = res_norm[b] / (curvature if curvature != 0 else unit)  # 0 if converged
                new_norm = zero
                for f in range(width):
                    xb[f] += step * db[f]
                    rb[f] -= step * ib[f]
                    new_norm += rb[f] * rb[f]
                beta = new_norm / (res_norm[b] if res_norm[b] != 0 else unit)
                for f in range(width):
                    db[f] = rb[f] + beta * db[f]
                res_norm[b] = new_norm
        for b in range(count):
            r = rows[start + b]
            for f in range(width):
                out[r, f] = x[b, f]


@njit(nogil=True, fastmath=_FAST, cache=True)
def observed_loss(indptr, indices, quad, lin, row_factors, col_factors,
                  rows):  # pragma: no cover
    """Per row t: Σ over the interactions of rows[t] of q ŷ² − 2 l ŷ + l, with
    ŷ = row_factors[r]·col_factors[j] (float64, (len(rows),); the caller sums them in a fixed
    order, so the total does not depend on the threads)."""
    width = np.uint64(row_factors.shape[1])
    parts = np.zeros(rows.shape[0])
    for t in range(rows.shape[0]):
        r = rows[t]
        factor = row_factors[r]
        part = 0.0
        for p in range(indptr[r], indptr[r + 1]):
            other = col_factors[indices[p]]
            predicted = 0.0
            for f in range(width):
                predicted += factor[f] * other[f]
            part += (quad[p] * predicted - 2.0 * lin[p]) * predicted + lin[p]
        parts[t] = part
    return parts
