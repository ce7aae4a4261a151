"""Compiled (numba) kernels of the MF trainer's step on a CPU (linrec.models.mf_ops).

Bookkeeping of `sampled_dot`, which works on the (batch, draw) pattern sorted by item. torch
builds that order with a stable sort of the B·N item ids, a bincount, a cumsum and a division,
and permutes the scores and their gradients with indexed copies. Here the same order comes from
one counting sort (stable, so the per-item sums run in the same order and the numbers are
identical), and the permutations are plain loops. Serial.

Row passes over a table, each reading what it needs once (torch's element-wise ops take three
or four passes over the 10 MB item table and write temporaries): the backward of the row
normalisation, and the squared norm of the gradient with the L2 term (for clipping). A kernel
runs the rows [start, stop) of one chunk without the GIL; the caller hands chunks to threads.
Per-row results do not depend on the chunking. Arithmetic is reordered by the compiler
(fastmath) and sums run in float64, so these agree with the torch formulas to rounding.

Lazy Adam's row update (`optimizer: sparse_adam`): torch's ten element-wise ops per table and
step (index_select, sub, mul, add, pow, index_copy, sqrt, div, index_add), each a pass and a
temporary, become two passes over the touched rows with torch's square root between them. No
fastmath there: the operations are torch's, in its order and precision, so the numbers are
SparseAdam's bit for bit.

The compiled code is cached on disk (cache=True).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: reordering (vectorised sums) and fused multiply-adds (as in linrec.models._als_kernels)
_FAST = {"reassoc", "contract", "nsz"}


@njit(nogil=True, cache=True)
def sort_by_item(index, n_items, counts, offsets, order, bag_rows):  # pragma: no cover
    """The stable sort of index (B, N) by item: counts (n_items,) and offsets (n_items,) of each
    item's segment, order (B·N,) the flat position b·N + n of each sorted entry and bag_rows
    (B·N,) its batch row b (int32 or int64, written in place)."""
    batch, n = index.shape
    counts[:] = 0
    for b in range(batch):
        for j in range(n):
            counts[index[b, j]] += 1
    total = 0
    for i in range(n_items):
        offsets[i] = total
        total += counts[i]
    cursor = offsets.copy()
    flat = 0
    for b in range(batch):
        for j in range(n):
            item = index[b, j]
            slot = cursor[item]
            order[slot] = flat
            bag_rows[slot] = b
            cursor[item] = slot + 1
            flat += 1


@njit(nogil=True, cache=True)
def gather(source, order, out):  # pragma: no cover
    """out[k] = source[order[k]] (1-d)."""
    for k in range(order.shape[0]):
        out[k] = source[order[k]]


@njit(nogil=True, cache=True)
def scatter(source, order, out):  # pragma: no cover
    """out[order[k]] = source[k] (1-d)."""
    for k in range(order.shape[0]):
        out[order[k]] = source[k]


@njit(nogil=True, fastmath=_FAST, cache=True)
def normalize_backward_rows(grad, y, inverse, normalized, out, start, stop):  # pragma: no cover
    """out[i] = (grad[i] − y[i]⟨grad[i], y[i]⟩)·inverse[i] for start <= i < stop, the
    backward of x ↦ y = x/‖x‖ with inverse = 1/max(‖x‖, EPS) (n,); rows whose `normalized`
    (n,) is false were only scaled: out[i] = grad[i]·inverse[i]. grad, y, out (n, d); out may
    be grad."""
    d = grad.shape[1]
    for i in range(start, stop):
        scale = inverse[i]
        along = 0.0  # summed in float64
        if normalized[i]:
            for j in range(d):
                along += grad[i, j] * y[i, j]
            along *= scale
        for j in range(d):
            out[i, j] = grad[i, j] * scale - y[i, j] * along


@njit(nogil=True, fastmath=_FAST, cache=True)
def pair_dots(rows, table, index, out, start, stop):  # pragma: no cover
    """out[b, j] = ⟨rows[b], table[index[b, j]]⟩ for start <= b < stop: rows (B, d), table
    (n, d), index (B, m), out (B, m). Each row of `rows` is read once and each product reads
    its table row in place, without a gather or a sort (scoring only: no gradient)."""
    d = rows.shape[1]
    for b in range(start, stop):
        for j in range(index.shape[1]):
            item = index[b, j]
            total = rows.dtype.type(0.0)
            for k in range(d):
                total += rows[b, k] * table[item, k]
            out[b, j] = total


@njit(nogil=True, fastmath=_FAST, cache=True)
def shifted_square_norms(grad, weights, shift, out, start, stop):  # pragma: no cover
    """out[i] = ‖grad[i] + shift·weights[i]‖² (float64 sums) for start <= i < stop."""
    d = grad.shape[1]
    for i in range(start, stop):
        total = 0.0
        for j in range(d):
            value = np.float64(grad[i, j]) + shift * np.float64(weights[i, j])
            total += value * value
        out[i] = total


@njit(nogil=True, fastmath=_FAST, cache=True)
def square_sum(values):  # pragma: no cover
    """Σ values² over a 2-d array, summed in float64 in any order (a float32 value's square is
    exact in float64, so the sum is within (k·d)·2⁻⁵³ of the exact one, relatively)."""
    total = 0.0
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            value = np.float64(values[i, j])
            total += value * value
    return total


@njit(nogil=True, error_model="numpy", cache=True)
def row_adam_moments(rows, grads, exp_avg, exp_avg_sq, keep1, keep2, means,
                     squares):  # pragma: no cover
    """Lazy Adam's moments on the rows `rows` (k,) (unique) of exp_avg, exp_avg_sq (n, d), from
    their gradients grads (k, d), in torch SparseAdam's operations and order (no fastmath: no
    fused multiply-adds): m += (g − m)·keep1, v += (g² − v)·keep2 with keep1 = 1 − β1, keep2 =
    1 − β2 (in the tables' precision, as torch casts its scalars). The rows' new m and v are
    also written to means and squares (k, d)."""
    d = grads.shape[1]
    for k in range(rows.shape[0]):
        i = rows[k]
        for j in range(d):
            g = grads[k, j]
            old = exp_avg[i, j]
            mean = (g - old) * keep1 + old
            old = exp_avg_sq[i, j]
            square = (g * g - old) * keep2 + old
            exp_avg[i, j] = mean
            exp_avg_sq[i, j] = square
            means[k, j] = mean
            squares[k, j] = square


@njit(nogil=True, error_model="numpy", cache=True)
def row_adam_update(rows, means, roots, param, scale, eps):  # pragma: no cover
    """p[rows[k]] += scale·(means[k] / (roots[k] + eps)) (no fastmath), with roots =
    √v taken by torch (whose vectorised square root is not always the correctly rounded one:
    the same call keeps SparseAdam's numbers) and scale = −lr·√(1 − β2ᵗ)/(1 − β1ᵗ)."""
    d = means.shape[1]
    for k in range(rows.shape[0]):
        i = rows[k]
        for j in range(d):
            param[i, j] = param[i, j] + scale * (means[k, j] / (roots[k, j] + eps))
