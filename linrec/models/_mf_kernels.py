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
def shifted_square_norms(grad, weights, shift, out, start, stop):  # pragma: no cover
    """out[i] = ‖grad[i] + shift·weights[i]‖² (float64 sums) for start <= i < stop."""
    d = grad.shape[1]
    for i in range(start, stop):
        total = 0.0
        for j in range(d):
            value = np.float64(grad[i, j]) + shift * np.float64(weights[i, j])
            total += value * value
        out[i] = total
