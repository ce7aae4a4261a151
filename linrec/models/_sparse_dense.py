"""foldin @ W for a sparse foldin and a dense W: the scores of the item-item models.

scipy's `csr @ dense` adds, for each stored entry (r, k) in storage order, v · W[k] to output
row r: one pass over the output row per entry, in one thread. The compiled kernel
(`_sparse_dense_kernel`) does the same arithmetic in the same order (each output element is
((o + v0·w0) + v1·w1) + ..., a multiplication then an addition, never fused), so its result is
bitwise scipy's, but it reads and writes each output row once per four entries and runs chunks
of rows on several threads (the kernel releases the GIL).

It works through W in blocks of columns: every row of the batch takes its entries' segments of
one block before any row goes on to the next, so the block (items x width, about 8 MB) is read
from memory once per batch and its segments then come from the cache, for every row that
needs them. Row by row over the whole of W, a row's ~50 entries each read a W row of n_items
values from memory (80 KB at 20 000 float32 items): 40 GB for 10 000 users, memory-bound
(experiments/benchmarks/bench_recommend.py). Each output element is still the same sum in the
same order, so the blocked result is the row-by-row result, bit for bit.

Which of the two is faster depends on the machine: blocks read each row's segments from the
last-level cache in short random reads, row by row streams whole W rows from memory with the
prefetcher's help (on some AMD EPYC machines the blocked product is 2.3x slower, on others
the faster: experiments/LOG.md). Since both give the same bits, a process times each on its
first products of a shape and takes the faster from then on.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from linrec.hardware import on_row_chunks

#: bytes of W one column block holds (the block is read once per batch, then from the cache)
BLOCK_BYTES = 8 << 20
#: narrowest column block (a few SIMD registers wide)
MIN_BLOCK_COLUMNS = 64
#: a product of fewer multiply-adds is scipy's (the same result, bit for bit): loading the
#: compiled kernel takes ~0.2 s a process (its first compilation ~0.5 s an install), more than
#: it saves there
KERNEL_MIN_MULTIPLY_ADDS = 2**30


def column_blocks(n_rows: int, n_columns: int, itemsize: int) -> list[tuple[int, int]]:
    """(c0, c1) blocks of W's columns of about BLOCK_BYTES each (at least MIN_BLOCK_COLUMNS
    columns, a multiple of 16)."""
    width = max(MIN_BLOCK_COLUMNS, BLOCK_BYTES // max(1, n_rows * itemsize) // 16 * 16)
    return [(c0, min(n_columns, c0 + width)) for c0 in range(0, n_columns, width)]


#: seconds per multiply-add of each path (blocked: True / False), timed on the first products
#: of each (W's shape, dtype, threads) in this process
_PATH_TIMES: dict[tuple, dict[bool, float]] = {}


def sparse_dense_product(foldin: sp.spmatrix, W: np.ndarray, threads: int,
                         blocked: bool | None = None) -> np.ndarray:
    """foldin (m x n, sparse) @ W (n x d, dense float32/float64) in W's dtype: (m, d), equal to
    scipy's `sp.csr_matrix(foldin, dtype=W.dtype) @ W` bit for bit, on `threads` threads.
    blocked: True, in column blocks of W; False, row by row over the whole of W; None, the
    faster of the two here: the first product of a shape runs blocked, the second row by row,
    each timed, and every later one the faster (the module docstring). Below
    KERNEL_MIN_MULTIPLY_ADDS it is scipy's product itself."""
    X = sp.csr_matrix(foldin, dtype=W.dtype)
    if X.shape[1] != W.shape[0]:
        raise ValueError(f"foldin has {X.shape[1]} columns but W has {W.shape[0]} rows")
    if X.nnz * W.shape[1] < KERNEL_MIN_MULTIPLY_ADDS:
        return np.asarray(X @ W)
    if blocked is not None:
        return _product(X, W, threads, blocked)
    times = _PATH_TIMES.setdefault((W.shape, W.dtype.str, int(threads)), {})
    untimed = [path for path in (True, False) if path not in times]
    if not untimed:
        return _product(X, W, threads, min(times, key=times.__getitem__))
    _product(X[:0], W, 1, False)  # loading the kernel (numba's cache) is not the path's time
    start = time.perf_counter()
    out = _product(X, W, threads, untimed[0])
    times[untimed[0]] = (time.perf_counter() - start) / max(1, X.nnz * W.shape[1])
    return out


def _product(X: sp.csr_matrix, W: np.ndarray, threads: int, blocked: bool) -> np.ndarray:
    """The compiled product of `sparse_dense_product` by one path."""
    from linrec.models._sparse_dense_kernel import product_rows  # numba: loaded when needed

    W = np.ascontiguousarray(W)
    out = np.empty((X.shape[0], W.shape[1]), dtype=W.dtype)
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    blocks = column_blocks(*W.shape, W.itemsize) if blocked else [(0, W.shape[1])]
    for c0, c1 in blocks:
        on_row_chunks(lambda start, stop, c0=c0, c1=c1: product_rows(indptr, indices, X.data, W,
                                                                     out, start, stop, c0, c1),
                      X.shape[0], threads)
    return out
