"""The MF trainer's two hot operations as custom autograd functions.

`normalize_rows(x)`: x / ‖x‖ per row, with a backward that allocates two tables instead of the
five temporaries of `F.normalize` (the item table is normalised every step).

`sampled_dot(rows, table, index)`: scores of sampled items, s[b, n] = ⟨rows[b], table[index[b,
n]]⟩, without the B·N·d gather.

The obvious `bmm(table[index], rows[..., None])` writes a (B, N, d) tensor every step (105 MB at
B = 512, N = 800, d = 64) and scatters another one back in the backward pass; on a CPU that
traffic, and the page faults of allocating it, are most of an MF epoch. Here:

- forward: a sampled dense-dense product (`torch.sparse.sampled_addmm` on the CSR pattern of
  `index` sorted by item), which reads each table row once and writes only the B·N scores (the
  dense B × n product when N ≥ n);
- backward, rows: grad_rows[b] = Σ_n g[b, n] · table[index[b, n]] is one `embedding_bag` (bags =
  batch rows, per-sample weights = g);
- backward, table: grad_table[i] = Σ_{(b,n): index[b,n] = i} g[b, n] · rows[b] is another
  `embedding_bag` over the pattern sorted by item (a stable argsort: bags = items).

Every output element is a sum in a fixed order, so results do not depend on thread timing (the
bmm backward does on CPU). Works on any device; shapes: rows (B, d), table (n, d), index (B, N)
int64 -> (B, N).
"""

from __future__ import annotations

import ctypes
import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

#: the norm below which a row is not scaled up (as F.normalize's eps)
EPS = 1e-12


def sampled_dot(rows: Any, table: Any, index: Any) -> Any:
    """s (B, N) with s[b, n] = ⟨rows[b], table[index[b, n]]⟩, differentiable in rows and table."""
    return _functions()[0].apply(rows, table, index)


def normalize_rows(x: Any) -> Any:
    """x (n, d) / max(‖x_i‖, EPS) row-wise, differentiable (the value of F.normalize)."""
    return _functions()[1].apply(x)


def keep_freed_memory() -> None:
    """Let glibc reuse freed table-sized blocks instead of unmapping them: a training step
    allocates and frees a dozen (n × d) temporaries, and with the default settings each is a
    fresh mmap whose pages fault in again (a fifth of a step on a small VM). Allocations up
    to 32 MiB come from the heap and up to 1 GiB of free heap stays mapped. Process-wide and
    idempotent; a no-op where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        libc.mallopt(m_mmap_threshold, 32 << 20)
        libc.mallopt(m_trim_threshold, 1 << 30)
    except (OSError, AttributeError) as exc:  # musl and others: keep their defaults
        log.debug("mallopt unavailable (%s): allocator defaults kept", exc)


_FUNCTIONS = None


def _functions():
    """The autograd Functions, built on first use (linrec imports torch lazily)."""
    global _FUNCTIONS
    if _FUNCTIONS is None:
        _FUNCTIONS = _build()
    return _FUNCTIONS


def _build():
    import warnings

    import torch
    import torch.nn.functional as F

    def pattern_csr(offsets, counts, columns, shape, like):
        """An all-zero CSR matrix of `shape` with the given row offsets and column indices."""
        crow = torch.cat([offsets, (offsets[-1:] + counts[-1:])])
        zeros = torch.zeros(columns.numel(), dtype=like.dtype, device=like.device)
        with warnings.catch_warnings():  # "sparse CSR support is in beta": used as documented
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(crow, columns, zeros, shape, check_invariants=False)

    class SampledDot(torch.autograd.Function):
        @staticmethod
        def forward(ctx, rows, table, index):
            batch, n = index.shape
            flat = index.reshape(-1)
            # the pattern sorted by item (a stable int32 sort is the cheapest on CPU): each
            # table row is then read once, and the backward's per-item sums need this order
            order = torch.sort(flat.to(torch.int32), stable=True)[1]
            counts = torch.bincount(flat, minlength=table.shape[0])
            offsets = torch.cumsum(counts, 0) - counts
            bag_rows = torch.div(order, n, rounding_mode="floor")
            ctx.save_for_backward(rows, table, index, order, offsets, bag_rows)
            if n >= table.shape[0]:  # more draws per row than items: the dense product is
                # cheaper (and the CSR pattern would hold more entries than its matrix)
                return (rows @ table.T).gather(1, index)
            by_item = pattern_csr(offsets, counts, bag_rows, (table.shape[0], batch), rows)
            values = torch.sparse.sampled_addmm(by_item, table, rows.T, beta=0.0).values()
            scores = torch.empty_like(values)
            scores[order] = values
            return scores.view(batch, n)

        @staticmethod
        def backward(ctx, grad):
            rows, table, index, order, offsets, bag_rows = ctx.saved_tensors
            grad = grad.contiguous()
            grad_rows = grad_table = None
            if ctx.needs_input_grad[0]:  # one bag per batch row
                grad_rows = F.embedding_bag(index, table, per_sample_weights=grad, mode="sum")
            if ctx.needs_input_grad[1]:  # one bag per item
                grad_table = F.embedding_bag(bag_rows, rows, offsets,
                                             per_sample_weights=grad.reshape(-1)[order],
                                             mode="sum")
            return grad_rows, grad_table, None

    class NormalizeRows(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            norm = torch.linalg.vector_norm(x, dim=1, keepdim=True)
            normalized = norm >= EPS  # rows below EPS are only scaled by 1/EPS
            inverse = norm.clamp_min_(EPS).reciprocal_()
            y = x * inverse
            ctx.save_for_backward(y, inverse, normalized)
            return y

        @staticmethod
        def backward(ctx, grad):
            y, inverse, normalized = ctx.saved_tensors  # (g − y⟨g, y⟩)/‖x‖
            along = (grad * y).sum(1, keepdim=True).mul_(normalized).mul_(inverse)
            return (grad * inverse).addcmul_(y, along, value=-1.0)

    return SampledDot, NormalizeRows
