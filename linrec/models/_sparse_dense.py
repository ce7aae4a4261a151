"""foldin @ W for a sparse foldin and a dense W: the scores of the item-item models.

scipy's `csr @ dense` adds, for each stored entry (r, k) in storage order, v · W[k] to output
row r: one pass over the output row per entry, in one thread. The compiled kernel
(`linrec._row_kernels.product_rows`) does the same arithmetic in the same order (each output
element is ((o + v0·w0) + v1·w1) + ..., a multiplication then an addition, never fused), so
its result is bitwise scipy's, but it reads and writes each output row once per four entries
and runs chunks of rows on several threads (the kernel releases the GIL).

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

For top-K lists (`product_top_k`, which `Recommender.recommend` takes for the models that score
by this product) the row-by-row product also selects: each row is summed into a buffer of its
thread's own, its excluded items set to -inf and its k best taken while the row is in the
cache, so the score matrix is never written out, masked and read again. Against that, the
column-blocked product then `item_order.top_k`: again the faster of the two, timed on a
process's first lists of a shape; both give `top_k` of the masked product, bit for bit.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import scipy.sparse as sp

from linrec.hardware import on_row_chunks
from linrec.item_order import BatchKeys, bad_scores, top_k, user_key_bases

T = TypeVar("T")

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


#: seconds per multiply-add of each path (`sparse_dense_product`, blocked: True / False; and
#: `product_top_k`, fused: True / False), timed on the first calls of each (W's shape, dtype,
#: threads, which) in this process
_PATH_TIMES: dict[tuple, dict[bool, float]] = {}


def _by_faster_path(key: tuple, paths: tuple[bool, bool], run: Callable[[bool], T],
                    multiply_adds: int, load: Callable[[], object]) -> T:
    """run(path) for the path of `paths` timed faster under `key`; while one is untimed, that
    one, timed (per multiply-add) after `load()` has loaded its kernels (numba's cache)."""
    times = _PATH_TIMES.setdefault(key, {})
    untimed = [path for path in paths if path not in times]
    if not untimed:
        return run(min(times, key=times.__getitem__))
    load()
    start = time.perf_counter()
    out = run(untimed[0])
    times[untimed[0]] = (time.perf_counter() - start) / max(1, multiply_adds)
    return out


def sparse_dense_product(foldin: sp.spmatrix, W: np.ndarray, threads: int,
                         blocked: bool | None = None) -> np.ndarray:
    """foldin (m x n, sparse) @ W (n x d, dense float32/float64) in W's dtype: (m, d), equal to
    scipy's `sp.csr_matrix(foldin, dtype=W.dtype) @ W` bit for bit, on `threads` threads.
    blocked: True, in column blocks of W; False, row by row over the whole of W; None, the
    faster of the two here: the first product of a shape runs blocked, the second row by row,
    each timed, and every later one the faster (the module docstring). Below
    KERNEL_MIN_MULTIPLY_ADDS it is scipy's product itself."""
    X = _checked(foldin, W)
    if X.nnz * W.shape[1] < KERNEL_MIN_MULTIPLY_ADDS:
        return np.asarray(X @ W)
    if blocked is not None:
        return _product(X, W, threads, blocked)
    return _by_faster_path((W.shape, W.dtype.str, int(threads)), (True, False),
                           lambda path: _product(X, W, threads, path), X.nnz * W.shape[1],
                           lambda: _product(X[:0], W, 1, False))


def product_top_k(foldin: sp.spmatrix, W: np.ndarray, exclude: sp.csr_matrix | None, k: int,
                  keys: BatchKeys, threads: int, fused: bool | None = None,
                  min_rows: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`item_order.top_k(scores, k, keys, exclude)` of scores = foldin @ W (as
    `sparse_dense_product` computes them), bit for bit: items int64 (m, k') and scores (m, k')
    in W's dtype, k' = min(k, d). exclude: CSR (m x d) whose entries are never returned, or
    None. fused: True, each row scored and selected in one pass (row by row over W); False, the
    column-blocked product, then `top_k`; None, the faster of the two, timed on the first two
    calls of a shape. Fewer than `min_rows` rows, or fewer than KERNEL_MIN_MULTIPLY_ADDS
    multiply-adds: scipy's product, then `top_k` (no compiled kernel to load)."""
    X = _checked(foldin, W)
    if X.shape[0] < min_rows or X.nnz * W.shape[1] < KERNEL_MIN_MULTIPLY_ADDS:
        return top_k(np.asarray(X @ W), k, keys, exclude=exclude)
    if exclude is None:
        exclude = sp.csr_matrix(X.shape, dtype=W.dtype)
    if exclude.shape != (X.shape[0], W.shape[1]):
        raise ValueError(f"exclude has shape {exclude.shape}; expected {(X.shape[0], W.shape[1])}")

    def run(path: bool) -> tuple[np.ndarray, np.ndarray]:
        if path:
            return _product_top_k(X, W, exclude, min(int(k), W.shape[1]), keys, threads)
        return top_k(_product(X, W, threads, True), k, keys, exclude=exclude)

    if fused is not None:
        return run(fused)
    return _by_faster_path((W.shape, W.dtype.str, int(threads), "top-k"), (True, False), run,
                           X.nnz * W.shape[1], lambda: _load_kernels(W))


def product_top_k_for(model: object) -> Callable[..., tuple[np.ndarray, np.ndarray]] | None:
    """`product_top_k` bound to the model's W and threads, for a model whose scores are
    `linrec.models.ease.ItemItemRecommender`'s product foldin @ W_ (it keeps that class's
    `_score`: EASE, DLAE, EDLAE, debiased EASE, and a plugin's subclass that does not score
    otherwise); None for every other model. Called as f(foldin, exclude, k, keys)."""
    ease = sys.modules.get("linrec.models.ease")  # not imported: no model of it exists
    if ease is None or getattr(type(model), "_score", None) is not ease.ItemItemRecommender._score:
        return None
    from linrec.models.linalg import thread_count

    W, threads = model.W_, thread_count(model.num_threads)
    return lambda foldin, exclude, k, keys: product_top_k(
        foldin, W, exclude, k, keys, threads, min_rows=ease.COMPILED_FROM_ROWS)


def _checked(foldin: sp.spmatrix, W: np.ndarray) -> sp.csr_matrix:
    X = sp.csr_matrix(foldin, dtype=W.dtype)
    if X.shape[1] != W.shape[0]:
        raise ValueError(f"foldin has {X.shape[1]} columns but W has {W.shape[0]} rows")
    return X


def _load_kernels(W: np.ndarray) -> None:
    """Load both top-K paths' kernels for W's dtype (numba's cache), each run on no rows."""
    from linrec._row_kernels import product_rows, product_top_k_rows, top_k_rows

    none, one = np.zeros(1, np.int64), np.empty(0, np.int64)
    items, best = np.empty((0, 1), np.int64), np.empty((0, 1), W.dtype)
    bases, bad = np.empty(0, np.uint64), np.empty(0, np.int8)
    product_rows(none, one, W[:0, 0], W, W[:0], 0, 0, 0, W.shape[1])
    product_top_k_rows(none, one, W[:0, 0], W, none, one, bases, 1, items, best, bad, 0, 0)
    top_k_rows(W[:0], bases, 1, items, best, bad, 0, 0)


def _product_top_k(X: sp.csr_matrix, W: np.ndarray, exclude: sp.csr_matrix, k: int,
                   keys: BatchKeys, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """The fused kernel's `product_top_k` (k <= W's columns)."""
    from linrec._row_kernels import product_top_k_rows  # numba: loaded when needed

    W = np.ascontiguousarray(W)
    n_rows = X.shape[0]
    items, best = np.empty((n_rows, k), np.int64), np.empty((n_rows, k), W.dtype)
    bad = np.zeros(n_rows, np.int8)
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    ex_indptr, ex_indices = exclude.indptr.astype(np.int64), exclude.indices.astype(np.int64)
    bases = user_key_bases(keys)
    on_row_chunks(lambda start, stop: product_top_k_rows(
        indptr, indices, X.data, W, ex_indptr, ex_indices, bases, k, items, best, bad, start,
        stop), n_rows, threads)
    if bad.any():
        raise bad_scores(int(np.argmax(bad)))
    return items, best


def _product(X: sp.csr_matrix, W: np.ndarray, threads: int, blocked: bool) -> np.ndarray:
    """The compiled product of `sparse_dense_product` by one path."""
    from linrec._row_kernels import product_rows  # numba: loaded when needed

    W = np.ascontiguousarray(W)
    out = np.empty((X.shape[0], W.shape[1]), dtype=W.dtype)
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    blocks = column_blocks(*W.shape, W.itemsize) if blocked else [(0, W.shape[1])]
    for c0, c1 in blocks:
        on_row_chunks(lambda start, stop, c0=c0, c1=c1: product_rows(indptr, indices, X.data, W,
                                                                     out, start, stop, c0, c1),
                      X.shape[0], threads)
    return out
