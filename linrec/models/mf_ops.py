"""The MF trainer's hot operations: two custom autograd functions and the clipping norm.

`normalize_rows(x)`: x / ‖x‖ per row, with a backward that is one compiled pass on a CPU (two
torch ops elsewhere) instead of the five temporaries of `F.normalize` (the item table is
normalised every step).

`squared_norm_with_l2(grad, weights, reg)`: ‖grad + reg·weights‖², the clipping norm with the
L2 gradient that Adam adds itself, in one read of each table.

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
  `embedding_bag` over the pattern sorted by item (a stable sort, bags = items: one compiled
  counting sort on a CPU, `_mf_kernels`, with the permutations of the scores and their
  gradients; torch's sort elsewhere).

Every output element is a sum in a fixed order, so results do not depend on thread timing (the
bmm backward does on CPU). Works on any device; shapes: rows (B, d), table (n, d), index (B, N)
int64 -> (B, N).

`pair_scores(rows, table, index)`: the same scores without a gradient (sampled validation). On
a CPU the sort that only the backward needs is skipped: one compiled pass computes each dot
product from the table row in place (`_mf_kernels.pair_dots`; `experiments/benchmarks/
bench_validation.py` times the whole validation pass against the exact one).
"""

from __future__ import annotations

import ctypes
import logging
import sys
import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from linrec.hardware import on_row_chunks

log = logging.getLogger(__name__)

#: the norm below which a row is not scaled up (as F.normalize's eps)
EPS = 1e-12


def sampled_dot(rows: Any, table: Any, index: Any) -> Any:
    """s (B, N) with s[b, n] = ⟨rows[b], table[index[b, n]]⟩, differentiable in rows and table."""
    return SampledDot.apply(rows, table, index)


def pair_scores(rows: Any, table: Any, index: Any) -> Any:
    """`sampled_dot`'s value (B, N), no gradient: a compiled pass over the rows on a CPU (in
    row chunks on torch's threads), `sampled_dot` on other devices."""
    with torch.no_grad():
        if table.device.type != "cpu":
            return sampled_dot(rows, table, index)
        from linrec.models import _mf_kernels

        rows, table = rows.contiguous(), table.contiguous()
        out = torch.empty(index.shape, dtype=rows.dtype)
        run_on_rows(_mf_kernels.pair_dots, index.shape[0], rows.numpy(), table.numpy(),
                    index.contiguous().numpy(), out.numpy())
        return out


def normalize_rows(x: Any) -> Any:
    """x (n, d) / max(‖x_i‖, EPS) row-wise, differentiable (the value of F.normalize)."""
    return NormalizeRows.apply(x)


def squared_norm_with_l2(grad: Any, weights: Any, reg: float) -> float:
    """‖grad + reg·weights‖² of one table (n, d), summed in float64, without writing the sum
    (one read of each on a CPU)."""
    if grad.is_sparse:  # coalesced, as the sparse Adam gets it (and no L2 term: reg = 0)
        return float(torch.linalg.vector_norm(grad.values(), dtype=torch.float64) ** 2)
    if grad.device.type != "cpu":
        return float(torch.linalg.vector_norm(  # in float64 from the sum on, as on a CPU
            grad.double().add(weights.detach().double(), alpha=reg)) ** 2)
    from linrec.models import _mf_kernels

    rows = np.empty(grad.shape[0])
    run_on_rows(_mf_kernels.shifted_square_norms, grad.shape[0], grad.contiguous().numpy(),
                weights.detach().contiguous().numpy(), float(reg), rows)
    return float(rows.sum())


def square_sum(values: Any) -> float:
    """Σ values² of a (k, d) tensor in float64, summed in any order (within (k·d)·2⁻⁵² of the
    exact sum, relatively): one read on a CPU, without torch's float64 copy."""
    if values.device.type != "cpu" or values.dtype not in (torch.float32, torch.float64):
        return float(values.detach().double().square().sum())
    from linrec.models import _mf_kernels

    return float(_mf_kernels.square_sum(values.detach().contiguous().numpy()))


def run_on_rows(kernel, n_rows: int, *args: Any) -> None:
    """kernel(*args, start, stop) over [0, n_rows) in chunks on torch's thread count
    (`hardware.on_row_chunks`, this thread among them; a thread gets at least
    `_ROWS_PER_THREAD` rows, so tables under twice that run in this thread alone)."""
    on_row_chunks(lambda start, stop: kernel(*args, start, stop), n_rows,
                  torch.get_num_threads(), rows_per_task=_ROWS_PER_THREAD)


#: fewer rows than this per thread are not worth a hand-off (and chunks are at most this long)
_ROWS_PER_THREAD = 8192


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


def _pattern_csr(offsets, counts, columns, shape, like):
    """An all-zero CSR matrix of `shape` with the given row offsets and column indices."""
    crow = torch.cat([offsets, (offsets[-1:] + counts[-1:])])
    zeros = torch.zeros(columns.numel(), dtype=like.dtype, device=like.device)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": used as documented
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, columns, zeros, shape, check_invariants=False)


def _sort_by_item(index, n_items):
    """The (batch, draw) pattern of index (B, N) sorted by item, stably: each table row is
    then read once, and the backward's per-item sums run in (b, n) order. Returns order
    (B·N,) (flat positions), counts and offsets (n_items,) of the items' segments and
    bag_rows (B·N,) (batch rows), int32 (int64 beyond 2³¹ draws): one counting sort on a
    CPU; elsewhere torch's stable sort of int32 keys (its cheapest), int64."""
    if index.device.type == "cpu":
        from linrec.models import _mf_kernels

        # int32 where it fits: half the memory traffic of the random writes
        dtype = torch.int32 if index.numel() < 2**31 else torch.int64
        order, bag_rows = (torch.empty(index.numel(), dtype=dtype) for _ in "ob")
        counts, offsets = (torch.empty(n_items, dtype=dtype) for _ in "co")
        _mf_kernels.sort_by_item(index.contiguous().numpy(), n_items, counts.numpy(),
                                 offsets.numpy(), order.numpy(), bag_rows.numpy())
        return order, counts, offsets, bag_rows
    flat = index.reshape(-1)
    order = torch.sort(flat.to(torch.int32), stable=True)[1]
    counts = torch.bincount(flat, minlength=n_items)
    bag_rows = torch.div(order, index.shape[1], rounding_mode="floor")
    return order, counts, torch.cumsum(counts, 0) - counts, bag_rows


def _gather(values, order):
    """values[order] (1-d)."""
    if values.device.type != "cpu":
        return values[order]
    from linrec.models import _mf_kernels

    out = torch.empty(order.shape, dtype=values.dtype)
    _mf_kernels.gather(values.detach().contiguous().numpy(), order.numpy(), out.numpy())
    return out


def _scatter(values, order):
    """out with out[order] = values (1-d; order a permutation)."""
    if values.device.type != "cpu":
        out = torch.empty_like(values)
        out[order] = values
        return out
    from linrec.models import _mf_kernels

    out = torch.empty(order.shape, dtype=values.dtype)
    _mf_kernels.scatter(values.detach().contiguous().numpy(), order.numpy(), out.numpy())
    return out


class SampledDot(torch.autograd.Function):
    """`sampled_dot` (the module docstring)."""

    @staticmethod
    def forward(ctx, rows, table, index):
        batch, n = index.shape
        order, counts, offsets, bag_rows = _sort_by_item(index, table.shape[0])
        ctx.save_for_backward(rows, table, index, order, offsets, bag_rows)
        if n >= table.shape[0]:  # more draws per row than items: the dense product is
            # cheaper (and the CSR pattern would hold more entries than its matrix)
            return (rows @ table.T).gather(1, index)
        by_item = _pattern_csr(offsets, counts, bag_rows, (table.shape[0], batch), rows)
        values = torch.sparse.sampled_addmm(by_item, table, rows.T, beta=0.0).values()
        return _scatter(values, order).view(batch, n)

    @staticmethod
    def backward(ctx, grad):
        rows, table, index, order, offsets, bag_rows = ctx.saved_tensors
        grad = grad.contiguous()
        grad_rows = grad_table = None
        if ctx.needs_input_grad[0]:  # one bag per batch row
            grad_rows = F.embedding_bag(index, table, per_sample_weights=grad, mode="sum")
        if ctx.needs_input_grad[1]:  # one bag per item
            grad_table = F.embedding_bag(bag_rows, rows, offsets,
                                         per_sample_weights=_gather(grad.reshape(-1), order),
                                         mode="sum")
        return grad_rows, grad_table, None


class NormalizeRows(torch.autograd.Function):
    """`normalize_rows` with a one-pass backward."""

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
        if grad.device.type != "cpu":
            along = (grad * y).sum(1, keepdim=True).mul_(normalized).mul_(inverse)
            return (grad * inverse).addcmul_(y, along, value=-1.0)
        from linrec.models import _mf_kernels

        out = torch.empty_like(y)  # one pass (torch's ops: four, and two temporaries)
        run_on_rows(_mf_kernels.normalize_backward_rows, len(y),
                    grad.contiguous().numpy(), y.numpy(), inverse.view(-1).numpy(),
                    normalized.view(-1).numpy(), out.numpy())
        return out
