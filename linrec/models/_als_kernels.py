"""Compiled (numba) row solvers of the iALS back-end `numba` (linrec.models.als).

Each kernel solves, for every row r in `rows` (in parallel, one row per task), the system of
linrec.models.als with the other side's factors `fixed` (n_other, k):

    (Y_Sᵀ diag(q) Y_S + shift + lam[r] I) x_r = Y_Sᵀ l,    shift = α₀ YᵀY (k, k),

where S = indices[indptr[r]:indptr[r + 1]] and q / l = quad / lin on the same slots, and writes
x_r into out[r]. Like implicit's CPU solvers, a row reads its interactions' factor rows once
(CG copies them into a contiguous buffer, re-read by every step) and never forms a padded block.
Arithmetic is in the factors' dtype, reordered by the compiler (fastmath), so the numbers agree
with the numpy back-end to rounding, not bitwise.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, fastmath=True, cache=True)
def cg_rows(indptr, indices, quad, lin, fixed, shift, lam, rows, out, steps):  # pragma: no cover
    """`steps` conjugate-gradient iterations from out[r] (warm start) for every row."""
    k = fixed.shape[1]
    for t in prange(rows.shape[0]):
        r = rows[t]
        lo = indptr[r]
        n = indptr[r + 1] - lo
        local = np.empty((n, k), fixed.dtype)
        x = out[r].copy()
        res = np.empty(k, fixed.dtype)
        image = np.empty(k, fixed.dtype)
        lam_r = lam[r]
        # residual = Y_Sᵀ l − A x, gathering the factor rows once
        for f in range(k):
            res[f] = -lam_r * x[f]
        for g in range(k):
            xg = x[g]
            for f in range(k):
                res[f] -= shift[g, f] * xg
        for p in range(n):
            j = indices[lo + p]
            dot = x[0] * 0
            for f in range(k):
                value = fixed[j, f]
                local[p, f] = value
                dot += value * x[f]
            weight = lin[lo + p] - quad[lo + p] * dot
            for f in range(k):
                res[f] += weight * local[p, f]
        direction = res.copy()
        res_norm = x[0] * 0
        for f in range(k):
            res_norm += res[f] * res[f]
        for _ in range(steps):
            for f in range(k):
                image[f] = lam_r * direction[f]
            for g in range(k):
                dg = direction[g]
                for f in range(k):
                    image[f] += shift[g, f] * dg
            for p in range(n):
                dot = x[0] * 0
                for f in range(k):
                    dot += local[p, f] * direction[f]
                dot *= quad[lo + p]
                for f in range(k):
                    image[f] += dot * local[p, f]
            curvature = x[0] * 0
            for f in range(k):
                curvature += direction[f] * image[f]
            step = res_norm / (curvature if curvature != 0 else 1)  # 0 once converged
            new_norm = x[0] * 0
            for f in range(k):
                x[f] += step * direction[f]
                res[f] -= step * image[f]
                new_norm += res[f] * res[f]
            beta = new_norm / (res_norm if res_norm != 0 else 1)
            for f in range(k):
                direction[f] = res[f] + beta * direction[f]
            res_norm = new_norm
        out[r] = x


@njit(parallel=True, fastmath=True, cache=True)
def cholesky_rows(indptr, indices, quad, lin, fixed, shift, lam, rows, out,
                  failed):  # pragma: no cover
    """The exact solution of every row (Cholesky of the k x k system, lower triangle only).
    failed[t] = 1 where row rows[t] is not positive definite (out[rows[t]] is then untouched)."""
    k = fixed.shape[1]
    for t in prange(rows.shape[0]):
        r = rows[t]
        system = np.empty((k, k), fixed.dtype)
        rhs = np.zeros(k, fixed.dtype)
        for f in range(k):
            for g in range(f + 1):
                system[f, g] = shift[f, g]
            system[f, f] += lam[r]
        for p in range(indptr[r], indptr[r + 1]):
            j = indices[p]
            for f in range(k):
                scaled = quad[p] * fixed[j, f]
                rhs[f] += lin[p] * fixed[j, f]
                for g in range(f + 1):
                    system[f, g] += scaled * fixed[j, g]
        ok = True
        for c in range(k):  # system <- L (lower), system = L Lᵀ
            pivot = system[c, c]
            for m in range(c):
                pivot -= system[c, m] * system[c, m]
            if not pivot > 0:
                ok = False
                break
            pivot = np.sqrt(pivot)
            system[c, c] = pivot
            for i in range(c + 1, k):
                value = system[i, c]
                for m in range(c):
                    value -= system[i, m] * system[c, m]
                system[i, c] = value / pivot
        if not ok:
            failed[t] = 1
            continue
        for i in range(k):  # L z = rhs
            value = rhs[i]
            for m in range(i):
                value -= system[i, m] * rhs[m]
            rhs[i] = value / system[i, i]
        for i in range(k - 1, -1, -1):  # Lᵀ x = z
            value = rhs[i]
            for m in range(i + 1, k):
                value -= system[m, i] * rhs[m]
            rhs[i] = value / system[i, i]
        out[r] = rhs


@njit(parallel=True, fastmath=True, cache=True)
def observed_loss(indptr, indices, quad, lin, row_factors, col_factors,
                  rows):  # pragma: no cover
    """Per row t: Σ over the interactions of rows[t] of q ŷ² − 2 l ŷ + l, with
    ŷ = row_factors[r]·col_factors[j] (float64, (len(rows),); the caller sums them in a fixed
    order, so the total does not depend on the threads)."""
    k = row_factors.shape[1]
    parts = np.zeros(rows.shape[0])
    for t in prange(rows.shape[0]):
        r = rows[t]
        part = 0.0
        for p in range(indptr[r], indptr[r + 1]):
            j = indices[p]
            predicted = 0.0
            for f in range(k):
                predicted += row_factors[r, f] * col_factors[j, f]
            part += (quad[p] * predicted - 2.0 * lin[p]) * predicted + lin[p]
        parts[t] = part
    return parts
