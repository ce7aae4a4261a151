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
the faster: experiments/LOG.md). Since both give the same bits, a process's first product of
a shape runs half its rows each way, timed, and later ones take the faster.

For top-K lists (`product_top_k`, which `Recommender.recommend` takes for the models that score
by this product) the row-by-row product also selects: each row is summed into a buffer of its
thread's own, its excluded items set to -inf and its k best taken while the row is in the
cache, so the score matrix is never written out, masked and read again. Against that, the
column-blocked product then `item_order.top_k`: again the fastest, timed on shares of a
process's first list of a shape; every path gives `top_k` of the masked product, bit for bit.

A third top-K path reads a quarter of the bytes: an int8 copy of W (one float32 scale per row
and block of 64 columns, built once per W) screens each row, a rigorous bound on the
screen's error per block then rules out every item that k others beat for certain, and only
the few left (~k) are scored exactly from W, in the product's order, and selected
(`linrec._row_kernels.screened_top_k_rows`). The lists and scores are the exact path's; a row
the screen cannot settle takes the exact path. It needs W float32 and n_items bytes per item
of memory more, and must not see W changed in place after its copy was made (a model's fit
assigns a new W).
"""

from __future__ import annotations

import sys
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import scipy.sparse as sp

from linrec.hardware import available_memory_bytes, on_row_chunks
from linrec.item_order import BatchKeys, bad_scores, top_k, user_key_bases

T = TypeVar("T")

#: bytes of W one column block holds (the block is read once per batch, then from the cache)
BLOCK_BYTES = 8 << 20
#: narrowest column block (a few SIMD registers wide)
MIN_BLOCK_COLUMNS = 64
#: the compiled kernel serves a process's products once they add up to this many
#: multiply-adds (`_kernel_pays`); before, scipy's product (the same result, bit for bit):
#: loading the kernel takes ~0.6 s a process (numba's import and its cache; its first
#: compilation ~0.5 s an install), about what it saves on a product this size (~0.2 against
#: ~0.55 ns a multiply-add here), so a single small request does not pay it, and a pass of
#: many batches (the evaluator's over 30 000 users at 41 000 items: 818-row batches of
#: 9e8 each) takes the kernel from its second batch on
KERNEL_MIN_MULTIPLY_ADDS = 2**30
#: ... and then every product of at least this many (or of KERNEL_MIN_MULTIPLY_ADDS, if less)
KERNEL_MIN_LOADED = 2**22
#: multiply-adds of the products asked of `sparse_dense_product` and `product_top_k` so far
_ASKED = [0]


def _kernel_pays(multiply_adds: int) -> bool:
    """Whether the compiled kernel serves a product of `multiply_adds`: once this process's
    products (this one included) add up to KERNEL_MIN_MULTIPLY_ADDS, for every product of at
    least KERNEL_MIN_LOADED."""
    _ASKED[0] += multiply_adds
    return (_ASKED[0] >= KERNEL_MIN_MULTIPLY_ADDS
            and multiply_adds >= min(KERNEL_MIN_LOADED, KERNEL_MIN_MULTIPLY_ADDS))


#: top-K lists through the int8 screen for k up to this share of the columns
SCREEN_MAX_K_SHARE = 1 / 16
#: the screen's copy of W (one byte an entry) is made only within this share of free memory
SCREEN_MEMORY_SHARE = 0.25


def column_blocks(n_rows: int, n_columns: int, itemsize: int) -> list[tuple[int, int]]:
    """(c0, c1) blocks of W's columns of about BLOCK_BYTES each (at least MIN_BLOCK_COLUMNS
    columns, a multiple of 16)."""
    width = max(MIN_BLOCK_COLUMNS, BLOCK_BYTES // max(1, n_rows * itemsize) // 16 * 16)
    return [(c0, min(n_columns, c0 + width)) for c0 in range(0, n_columns, width)]


#: seconds per multiply-add of each path (`sparse_dense_product`, blocked: True / False; and
#: `product_top_k`, TOP_K_PATHS), timed on shares of the first call of each (W's shape,
#: dtype, threads, which) in this process
_PATH_TIMES: dict[tuple, dict[bool | str, float]] = {}
#: `product_top_k`'s paths, in the order they are timed
TOP_K_PATHS = ("screened", "fused", "blocked")
#: the int8 screen of each W in use (None: W cannot be screened, or its screen was dropped
#: because another path was timed faster), by id(W) while W lives
_SCREENS: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}
#: rows served by the screen, and rows the screened path was asked for, in this process
SCREEN_ROWS = {"screened": 0, "rows": 0}


def _by_fastest_path(key: tuple, paths: tuple, run: Callable[[bool | str, slice], T],
                     X: sp.csr_matrix, width: int, load: Callable[[], object],
                     join: Callable[[list[T]], T]) -> T:
    """run(path, rows) over all of X's rows for the path of `paths` timed fastest under `key`.
    While some are untimed, X's rows are split evenly among them instead, each part run by
    one of them and timed per multiply-add (nnz x width) after `load()` has loaded the
    kernels (numba's cache), and the parts' results joined: a process's first call costs
    about one call of the average path, not one of each."""
    times = _PATH_TIMES.setdefault(key, {})
    untimed = [path for path in paths if path not in times]
    if not untimed:
        return run(min(paths, key=times.__getitem__), slice(0, X.shape[0]))
    load()
    bounds = np.linspace(0, X.shape[0], len(untimed) + 1).astype(int)
    parts = []
    for path, start_row, stop_row in zip(untimed, bounds[:-1], bounds[1:], strict=True):
        rows = slice(int(start_row), int(stop_row))
        start = time.perf_counter()
        parts.append(run(path, rows))
        seconds = time.perf_counter() - start
        nnz = int(X.indptr[rows.stop] - X.indptr[rows.start])
        if nnz:  # an empty part times nothing
            times[path] = seconds / (nnz * width)
    return join(parts)


def sparse_dense_product(foldin: sp.spmatrix, W: np.ndarray, threads: int,
                         blocked: bool | None = None) -> np.ndarray:
    """foldin (m x n, sparse) @ W (n x d, dense float32/float64) in W's dtype: (m, d), equal to
    scipy's `sp.csr_matrix(foldin, dtype=W.dtype) @ W` bit for bit, on `threads` threads.
    blocked: True, in column blocks of W; False, row by row over the whole of W; None, the
    faster of the two here: the first product of a shape runs half its rows blocked and half
    row by row, each timed, and every later one the faster (the module docstring). Below
    the kernel's threshold (`_kernel_pays`) it is scipy's product itself."""
    X = _checked(foldin, W)
    if not _kernel_pays(X.nnz * W.shape[1]):
        return np.asarray(X @ W)
    if blocked is not None:
        return _product(X, W, threads, blocked)
    return _by_fastest_path((W.shape, W.dtype.str, int(threads)), (True, False),
                            lambda path, rows: _product(X[rows], W, threads, path), X,
                            W.shape[1], lambda: _product(X[:0], W, 1, False), np.vstack)


def product_top_k(foldin: sp.spmatrix, W: np.ndarray, exclude: sp.csr_matrix | None, k: int,
                  keys: BatchKeys, threads: int, path: str | None = None,
                  compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`item_order.top_k(scores, k, keys, exclude)` of scores = foldin @ W (as
    `sparse_dense_product` computes them), bit for bit: items int64 (m, k') and scores (m, k')
    in W's dtype, k' = min(k, d). exclude: CSR (m x d) whose entries are never returned, or
    None. path: "screened" (the int8 screen, then the few items left scored exactly), "fused"
    (each row scored and selected in one pass), "blocked" (the column-blocked product, then
    `top_k`), or None: the fastest of them, each timed on its share of the rows of the first
    call of a shape (the screen only for float32 W and k up to SCREEN_MAX_K_SHARE of the
    columns, and only where its copy of W fits). compiled False (default: under the kernel's
    threshold, `_kernel_pays`): scipy's product, then numpy's `top_k` (no compiled kernel to
    load); a caller listing a large request in small batches passes True."""
    X = _checked(foldin, W)
    if not (_kernel_pays(X.nnz * W.shape[1]) if compiled is None else compiled):
        return top_k(np.asarray(X @ W), k, keys, exclude=exclude, compiled=False)
    if exclude is None:
        exclude = sp.csr_matrix((X.shape[0], W.shape[1]), dtype=W.dtype)
    if exclude.shape != (X.shape[0], W.shape[1]):
        raise ValueError(f"exclude has shape {exclude.shape}; expected {(X.shape[0], W.shape[1])}")
    kk = min(int(k), W.shape[1])
    key = (W.shape, W.dtype.str, int(threads), "top-k")
    screenable = kk <= SCREEN_MAX_K_SHARE * W.shape[1]
    if path is None:
        times = _PATH_TIMES.get(key, {})
        if screenable and "screened" not in times:  # made before any path is timed
            screenable = _screen_of(W, threads) is not None
        elif len(times) == len(TOP_K_PATHS) and min(times, key=times.__getitem__) != "screened":
            _SCREENS[id(W)] = None  # timed slower than another path: its copy is dropped
            screenable = False
        paths = TOP_K_PATHS if screenable else TOP_K_PATHS[1:]
    elif path not in TOP_K_PATHS:
        raise ValueError(f"path={path!r}: one of {TOP_K_PATHS} or None")
    elif path == "screened" and (not screenable or _screen_of(W, threads) is None):
        raise ValueError(f"W of {W.dtype} {W.shape} cannot be screened for k={kk}")

    def run(chosen: str, rows: slice) -> tuple[np.ndarray, np.ndarray]:
        part, part_exclude = X[rows], exclude[rows]
        part_keys = BatchKeys(keys.seed, keys.users[rows], keys.n_items)
        # a screen dropped, or one W of a shape whose screen was timed fastest that cannot be
        # screened: the fused path
        screen = _screen_of(W, threads) if chosen == "screened" else None
        if screen is not None:
            return _screened_top_k(part, W, screen, part_exclude, kk, part_keys, threads)
        if chosen == "blocked":
            return top_k(_product(part, W, threads, True), kk, part_keys, exclude=part_exclude,
                         compiled=True)
        return _product_top_k(part, W, part_exclude, kk, part_keys, threads)

    if path is not None:
        return run(path, slice(0, X.shape[0]))
    return _by_fastest_path(key, paths, run, X, W.shape[1], lambda: _load_kernels(W),
                            lambda parts: (np.vstack([items for items, _ in parts]),
                                           np.vstack([best for _, best in parts])))


def product_top_k_for(model: object, foldin: sp.csr_matrix
                      ) -> Callable[..., tuple[np.ndarray, np.ndarray]] | None:
    """`product_top_k` bound to the model's W and threads for the batches of one request
    `foldin`, for a model whose scores are `linrec.models.ease.ItemItemRecommender`'s product
    foldin @ W_ (it keeps that class's `_score`: EASE, DLAE, EDLAE, debiased EASE, and a
    plugin's subclass that does not score otherwise); None for every other model. Called as
    f(batch, exclude, k, keys). The compiled paths serve a request of at least the model's
    COMPILED_FROM_ROWS rows and KERNEL_MIN_MULTIPLY_ADDS multiply-adds, whatever its batches."""
    ease = sys.modules.get("linrec.models.ease")  # not imported: no model of it exists
    if ease is None or getattr(type(model), "_score", None) is not ease.ItemItemRecommender._score:
        return None
    from linrec.models.linalg import thread_count

    W, threads = model.W_, thread_count(model.num_threads)
    compiled = (foldin.shape[0] >= ease.COMPILED_FROM_ROWS
                and foldin.nnz * W.shape[1] >= KERNEL_MIN_MULTIPLY_ADDS)
    return lambda batch, exclude, k, keys: product_top_k(batch, W, exclude, k, keys, threads,
                                                         compiled=compiled)


def _checked(foldin: sp.spmatrix, W: np.ndarray) -> sp.csr_matrix:
    X = sp.csr_matrix(foldin, dtype=W.dtype)
    if X.shape[1] != W.shape[0]:
        raise ValueError(f"foldin has {X.shape[1]} columns but W has {W.shape[0]} rows")
    return X


def _load_kernels(W: np.ndarray) -> None:
    """Load the top-K paths' kernels for W's dtype (numba's cache), each run on no rows."""
    from linrec._row_kernels import (
        product_rows,
        product_top_k_rows,
        screened_top_k_rows,
        top_k_rows,
    )

    none, one = np.zeros(1, np.int64), np.empty(0, np.int64)
    items, best = np.empty((0, 1), np.int64), np.empty((0, 1), W.dtype)
    bases, bad = np.empty(0, np.uint64), np.empty(0, np.int8)
    product_rows(none, one, W[:0, 0], W, W[:0], 0, 0, 0, W.shape[1])
    product_top_k_rows(none, one, W[:0, 0], W, none, one, bases, 1, items, best, bad, 0, 0)
    top_k_rows(W[:0], bases, 1, items, best, bad, 0, 0)
    screen = _SCREENS.get(id(W))
    if screen is not None:
        screened_top_k_rows(none, one, W[:0, 0], W, *screen, none, one, bases, 1, 1, items,
                            best, bad, bad, 0, 0)


def _screen_of(W: np.ndarray, threads: int) -> tuple[np.ndarray, np.ndarray] | None:
    """W's int8 screen (Q int8 (n, d), S float32 (n, ceil(d / 64))), made on the first call
    for this W (`linrec._row_kernels.quantize_rows`); None where W is not float32 and
    C-contiguous, the copy would not fit, or W holds NaN, infinities or tiny blocks."""
    if id(W) in _SCREENS:
        return _SCREENS[id(W)]
    screen = None
    if (W.dtype == np.float32 and W.flags.c_contiguous
            and W.size <= SCREEN_MEMORY_SHARE * available_memory_bytes()):
        from linrec._row_kernels import SCREEN_BLOCK, quantize_rows  # numba

        Q = np.empty(W.shape, np.int8)
        S = np.empty((W.shape[0], -(-W.shape[1] // SCREEN_BLOCK)), np.float32)
        usable = np.ones(W.shape[0], np.int8)
        on_row_chunks(lambda start, stop: quantize_rows(W, Q, S, usable, start, stop),
                      W.shape[0], threads)
        screen = (Q, S) if usable.all() else None
    _SCREENS[id(W)] = screen
    weakref.finalize(W, _SCREENS.pop, id(W), None)
    return screen


def _screened_top_k(X: sp.csr_matrix, W: np.ndarray, screen: tuple[np.ndarray, np.ndarray],
                    exclude: sp.csr_matrix, k: int, keys: BatchKeys, threads: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """`product_top_k` through W's int8 screen (k <= W's columns)."""
    from linrec._row_kernels import screened_top_k_rows  # numba: loaded when needed

    screened = np.zeros(X.shape[0], np.int8)
    out = _kernel_top_k(X, W.dtype, exclude, k, keys, threads,
                        lambda foldin, excluded, bases, lists, start, stop: screened_top_k_rows(
                            *foldin, W, *screen, *excluded, bases, k, 4 * k + 256, *lists,
                            screened, start, stop))
    SCREEN_ROWS["screened"] += int(screened.sum())
    SCREEN_ROWS["rows"] += X.shape[0]
    return out


def _product_top_k(X: sp.csr_matrix, W: np.ndarray, exclude: sp.csr_matrix, k: int,
                   keys: BatchKeys, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """The fused kernel's `product_top_k` (k <= W's columns)."""
    from linrec._row_kernels import product_top_k_rows  # numba: loaded when needed

    W = np.ascontiguousarray(W)
    return _kernel_top_k(X, W.dtype, exclude, k, keys, threads,
                         lambda foldin, excluded, bases, lists, start, stop: product_top_k_rows(
                             *foldin, W, *excluded, bases, k, *lists, start, stop))


def _kernel_top_k(X: sp.csr_matrix, dtype: np.dtype, exclude: sp.csr_matrix, k: int,
                  keys: BatchKeys, threads: int, kernel: Callable[..., None]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """items, best (m, k) from a compiled top-K kernel run on row chunks as
    kernel((indptr, indices, data), (ex_indptr, ex_indices), bases, (items, best, bad), start,
    stop); a row it marks bad (a NaN or +inf score) raises DataError."""
    n_rows = X.shape[0]
    items, best = np.empty((n_rows, k), np.int64), np.empty((n_rows, k), dtype)
    bad = np.zeros(n_rows, np.int8)
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    ex_indptr, ex_indices = exclude.indptr.astype(np.int64), exclude.indices.astype(np.int64)
    bases = user_key_bases(keys)
    on_row_chunks(lambda start, stop: kernel((indptr, indices, X.data), (ex_indptr, ex_indices),
                                             bases, (items, best, bad), start, stop),
                  n_rows, threads)
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
