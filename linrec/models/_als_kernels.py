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
and factorised by one rank-8 update routine (8 gathered factor rows at a time, or the 8 rows
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
_PANEL = 8
#: reordering (vectorised sums) and fused multiply-adds; not `arcp`/`ninf`/`nnan`: a CG step
#: past convergence divides denormals, which the reciprocal rewrite turns into inf * 0 = NaN
_FAST = {"reassoc", "contract", "nsz"}


@njit(nogil=True, inline="always")
def _span(length):  # pragma: no cover
    """`length` rounded up to a whole number of vector widths (>= 0)."""
    return (length + _WIDTH - 1) // _WIDTH * _WIDTH


@njit(nogil=True, fastmath=_FAST, inline="always")
def _rank8_update(a, src, base, weights, first, k):  # pragma: no cover
    """a[i, j] += Σ_{m<8} weights[m] src[base+m, i] src[base+m, j] for first <= i < k, j >= i
    (the upper triangle; j runs on to a whole vector width, into src's zero padding)."""
    w0, w1, w2, w3 = weights[0], weights[1], weights[2], weights[3]
    w4, w5, w6, w7 = weights[4], weights[5], weights[6], weights[7]
    s0, s1, s2, s3 = src[base], src[base + 1], src[base + 2], src[base + 3]
    s4, s5, s6, s7 = src[base + 4], src[base + 5], src[base + 6], src[base + 7]
    for i in range(first, k):
        c0, c1, c2, c3 = w0 * s0[i], w1 * s1[i], w2 * s2[i], w3 * s3[i]
        c4, c5, c6, c7 = w4 * s4[i], w5 * s5[i], w6 * s6[i], w7 * s7[i]
        row = a[i]
        for j in range(np.uint64(i), np.uint64(i + _span(k - i))):
            row[j] += (c0 * s0[j] + c1 * s1[j] + c2 * s2[j] + c3 * s3[j]
                       + c4 * s4[j] + c5 * s5[j] + c6 * s6[j] + c7 * s7[j])


@njit(nogil=True, fastmath=_FAST)
def _cholesky_upper(a, k, minus):  # pragma: no cover
    """In place: the upper triangle of a[:k, :k] (an SPD system) becomes U with A = UᵀU.
    Right-looking, panels of 8 rows; minus = 8 x -1. False if a pivot is not positive."""
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
            _rank8_update(a, a, c0, minus, c0 + _PANEL, k)
    return True


@njit(nogil=True, fastmath=_FAST)
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
    rank-8 updates of the gathered factor rows y, factorised by `_cholesky_upper` and solved.
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
        for f in range(k):
            target, source = system[f], shift[f]
            for g in range(np.uint64(f), np.uint64(k)):
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
            _rank8_update(system, gathered, 0, weights, 0, k)
        if not _cholesky_upper(system, k, minus):
            failures += 1
            continue
        _solve_upper(system, rhs, k)
        for f in range(k):
            out[r, f] = rhs[f]
    return failures


@njit(nogil=True, fastmath=_FAST, cache=True)
def cg_rows(indptr, indices, quad, lin, fixed, shift, lam, rows, out, steps):  # pragma: no cover
    """`steps` conjugate-gradient iterations from out[r] (warm start) for every row, without
    forming the k x k systems: A d = lam d + shift d + Σ_S q (y·d) y. Like implicit, the
    interactions' factor rows are read in place (they stay in cache across the steps)."""
    k = fixed.shape[1]
    x = np.empty(k, fixed.dtype)
    res = np.empty(k, fixed.dtype)
    direction = np.empty(k, fixed.dtype)
    image = np.empty(k, fixed.dtype)
    zero = np.zeros(1, fixed.dtype)[0]  # in the factors' dtype (a literal promotes float32)
    unit = np.ones(1, fixed.dtype)[0]
    width = np.uint64(k)
    for t in range(rows.shape[0]):
        r = rows[t]
        lo, hi = indptr[r], indptr[r + 1]
        lam_r = lam[r]
        for f in range(width):
            x[f] = out[r, f]
            res[f] = -lam_r * x[f]
        for g in range(k):  # residual = Y_Sᵀ l − A x
            xg = x[g]
            row = shift[g]
            for f in range(width):
                res[f] -= row[f] * xg
        for p in range(lo, hi):
            source = fixed[indices[p]]
            dot = zero
            for f in range(width):
                dot += source[f] * x[f]
            weight = lin[p] - quad[p] * dot
            for f in range(width):
                res[f] += weight * source[f]
        res_norm = zero
        for f in range(width):
            direction[f] = res[f]
            res_norm += res[f] * res[f]
        for _ in range(steps):
            for f in range(width):
                image[f] = lam_r * direction[f]
            for g in range(k):
                dg = direction[g]
                row = shift[g]
                for f in range(width):
                    image[f] += row[f] * dg
            for p in range(lo, hi):
                source = fixed[indices[p]]
                dot = zero
                for f in range(width):
                    dot += source[f] * direction[f]
                dot *= quad[p]
                for f in range(width):
                    image[f] += dot * source[f]
            curvature = zero
            for f in range(width):
                curvature += direction[f] * image[f]
            step = res_norm / (curvature if curvature != 0 else unit)  # 0 once converged
            new_norm = zero
            for f in range(width):
                x[f] += step * direction[f]
                res[f] -= step * image[f]
                new_norm += res[f] * res[f]
            beta = new_norm / (res_norm if res_norm != 0 else unit)
            for f in range(width):
                direction[f] = res[f] + beta * direction[f]
            res_norm = new_norm
        for f in range(width):
            out[r, f] = x[f]


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
