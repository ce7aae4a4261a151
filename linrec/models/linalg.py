"""Shared dense linear algebra for the item-item models (spec/linear_models.md §2): memory guard,
Gram matrix G = XᵀX, in-place SPD inverse (Cholesky), and the zero-diagonal (EASE-type) weights.

`spd_inverse` computes A⁻¹ = L⁻ᵀ L⁻¹ (A = L Lᵀ) in place in about n³ flops (Cholesky n³/3,
triangular inverse n³/3, LᵀL n³/3) on one triangle, then mirrors it onto the other. Two paths
(`solver_path`):

* "lapack": one `?potrf` + `?potri` call on the whole matrix (OpenBLAS, multithreaded).
* "recursive": linrec.models._spd_kernels: the same three steps split recursively into BLAS-3
  calls on blocks of the matrix, in place (scipy's BLAS through function pointers, with a
  leading dimension: no copies, no temporaries), all but O(n²·block) of the flops in `?gemm`.

Why two. OpenBLAS's threaded `?syrk` (which its threaded `?potrf` and `?lauum`, i.e. `?potri`,
call on the trailing matrix) packs (output rows per thread) x GEMM_Q values into a fixed 32 MiB
buffer without slicing, and writes past it once a matrix row has more than about
32 MiB / (0.71 · 384) ≈ 124 KB with 2 threads. Measured on this machine type (OpenBLAS 0.3.30,
SkylakeX, 2 threads, each call in a child process): segfaults for float64 `dpotrf` at n = 18 000
and `dsyrk` at 20 000 (fine at 14 000), and float32 `ssyrk` at 41 000 (fine at 30 000; `spotrf`
crashed from about 30 000). Past the buffer, memory is silently corrupted before anything
segfaults. So the "lapack" path is allowed only while a row has at most LAPACK_SAFE_ROW_BYTES
(32 KiB: n ≤ 4 096 in float64, 8 192 in float32, a quarter of the smallest overflow), whatever
`large_n` asks; the recursive path calls `?syrk`, `?potrf`, `?trtri` and `?lauum` only on
blocks of at most `block` rows (capped by the same limit, `recursive_block`), and puts
everything else in `?gemm`, `?trsm` and `?trmm`, whose threaded drivers walk the output in
slices of bounded width (`bench_ease.py --probe-openblas` reproduces the crash).

Below that limit the choice is one of speed, measured (experiments/benchmarks/bench_ease.py
--calibrate: each path interleaved with a GEMM, ratio time / (n³ / GEMM rate), median of 3).
One thread, CPU time (steady on a loaded machine), block 1024 vs lapack, float32 / float64:
n = 1 000: 1.68 / 1.54 vs 1.77 / 1.55; 2 000: 1.33 / 1.23 vs 1.35 / 1.27; 4 096: 1.17 / 1.13
vs 1.19 / 1.14; 8 192 float32: 1.11 vs 1.10; beyond the limit (12 000 float32, 8 192 float64):
1.04 / 1.08; blocks of 128-512 within a few % of 1024, 128 best below 1 000. Two threads
beside a busy core, every threaded call waits for a descheduled partner thread: both paths
slow down 2-50x, the recursive path with 1024 blocks least (fewest calls; at 8 192 float32
1.6 vs 2.7). Where "lapack" is safe the two paths are within 2 % of each other, so the rule is:
"lapack" wherever it is safe, "recursive" beyond (LARGE_N_THRESHOLD = None: no size threshold
of its own; `large_n` forces the recursive path in tests and benchmarks). "lapack" factors the
upper triangle of the Fortran view, as linrec's first releases did, so a fit that took that path
before the recursive one existed gives the same bits today; the recursive path rounds
differently (a few ulps). DEFAULT_BLOCK = 1024. A fixed rule rather than a timing at first use
keeps a fit reproducible to the last bit. Two quiet threads (wall time, median of 3), lapack
vs recursive with 1024 blocks, float32 / float64: n = 500: 4.14 / 3.09 vs 3.09 / 2.55; 1 000:
2.15 / 1.89 vs 2.01 / 1.80; 2 000: 1.51 / 1.39 vs 1.44 / 1.44; 3 000 float64: 1.24 vs 1.25;
4 096: 1.36 / 1.36 vs 1.31 / 1.20; 8 192 float32: 1.21 vs 1.21; the best block per size is
within 0.08 of 1024. So on two threads the recursive path is faster at n = 500 (by a fifth
to a quarter, in a few ms), by 4-12 % from 1 000 to 4 096 except float64 at 2 000 and 3 000
(0-4 % slower), and level at 8 192. The rule still keeps "lapack" where it is safe: those
inverses take at most 3.3 s, and the fits that take them keep the bits they have had since
the first releases. Re-measured at stop 19 on another VM of the type (AMD EPYC, OpenBLAS
0.3.31 with its Haswell kernels; GEMM 241 / 118 GFLOP/s), after the final triangle copy was
made TLB-friendly (`_symmetrize`): lapack vs recursive 1024, float32 / float64: 500: 3.09 /
2.27 vs 2.41 / 1.99; 1 000: 1.64 / 1.53 vs 1.54 / 1.46; 2 000: 1.35 / 1.34 vs 1.26 / 1.28;
3 000 float64: 1.25 vs 1.18; 4 096: 1.14 / 1.20 vs 1.12 / 1.14; 8 192 float32: 1.08 vs 1.09.
The same picture (the recursive path up to a tenth faster below 4 096 items, in inverses of
at most 0.8 s; level above), so the rule stands.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
from numpy.lib.stride_tricks import as_strided

from linrec.errors import ConfigError, MemoryBudgetError
from linrec.hardware import available_memory_bytes, blas_threads, thread_limit
from linrec.models import _spd_kernels as kernels
from linrec.params import check_float_dtype

#: largest n · itemsize (bytes per row) given to OpenBLAS's threaded potrf/potri (module docstring)
LAPACK_SAFE_ROW_BYTES = 32 * 1024
#: n at and above which `spd_inverse` takes the recursive path even where "lapack" is safe
#: (None: none; the rule is the safe row size, module docstring)
LARGE_N_THRESHOLD: int | None = None
#: leaf size of the recursive path (rows of the blocks given to potrf, trtri, lauum, syrk, ...)
DEFAULT_BLOCK = 1024

FloatDtype = np.dtype | str | type


class NotPositiveDefiniteError(ConfigError, np.linalg.LinAlgError):
    """The matrix to invert is not (numerically) positive definite: regularization too small."""


def check_dense_memory(n: int, dtype: np.dtype | str, n_matrices: float, what: str,
                       alternative: str = "", budget_bytes: int | None = None) -> int:
    """Refuse (MemoryBudgetError) when `n_matrices` dense n x n arrays of `dtype` would not fit in
    `budget_bytes` (default: available memory). Returns the estimate in bytes."""
    itemsize = np.dtype(dtype).itemsize
    need = int(n_matrices * n * n * itemsize)
    budget = available_memory_bytes() if budget_bytes is None else budget_bytes
    if need > budget:
        hints = [alternative] if alternative else []
        if itemsize > 4:
            hints.append(f"dtype=float32 would need {need / itemsize * 4 / 2**30:.1f} GiB.")
        hint = (" " + " ".join(hints)) if hints else ""
        raise MemoryBudgetError(
            f"{what}: needs about {need / 2**30:.1f} GiB ({n_matrices:g} dense {n}x{n} "
            f"{np.dtype(dtype).name} matrices) but only {budget / 2**30:.1f} GiB is available."
            f"{hint}"
        )
    return need


def thread_count(num_threads: int | None = 0) -> int:
    """The threads a model uses: `num_threads` when > 0, else every core this process may run on
    or $LINREC_THREADS when set (0 or None). The one place where linrec turns a thread setting
    into a count."""
    if num_threads:
        return max(1, int(num_threads))
    return thread_limit()


def gram_block(Xt: sp.csr_matrix, X: sp.csr_matrix, start: int, stop: int,
               out: np.ndarray) -> None:
    """Write rows start:stop of G = XᵀX into `out` ((stop-start) x n_items, zero-filled).

    `Xt` is Xᵀ as CSR (items x users). The sparse product of the row block is scattered into the
    dense rows with one flat fancy-index assignment (much faster than `.toarray()`)."""
    block = Xt[start:stop] @ X
    n_items = X.shape[1]
    rows = np.repeat(np.arange(stop - start, dtype=np.int64), np.diff(block.indptr))
    out.reshape(-1)[rows * n_items + block.indices] = block.data


def gram(X: sp.csr_matrix, dtype: np.dtype | str = np.float64, block_rows: int = 1024,
         n_threads: int | None = None) -> np.ndarray:
    """Dense item Gram matrix G = XᵀX (n_items x n_items, C order) of a users x items CSR matrix.

    Row blocks of G are sparse products Xᵀ[block] @ X (scipy releases the GIL in them) computed by
    `n_threads` threads (default: all cores) and scattered straight into G, so no sparse n x n
    intermediate is ever built (benchmark: experiments/benchmarks/bench_ease.py)."""
    X = sp.csr_matrix(X)
    if not X.has_canonical_format:  # duplicates are summed on a copy, never in the caller's X
        X = X.copy()
        X.sum_duplicates()
    n_items = X.shape[1]
    Xt = X.T.tocsr()
    G = np.zeros((n_items, n_items), dtype=check_float_dtype(dtype))
    starts = range(0, n_items, block_rows)

    def work(start: int) -> None:
        stop = min(n_items, start + block_rows)
        gram_block(Xt, X, start, stop, G[start:stop])

    threads = min(thread_count(n_threads), len(starts))
    if threads <= 1:
        for start in starts:
            work(start)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, starts))
    return G


def add_to_diagonal(A: np.ndarray, values: float | np.ndarray) -> np.ndarray:
    """A[i, i] += values[i] in place (values: scalar or length n). Returns A."""
    n = A.shape[0]
    A.reshape(-1)[:: n + 1] += values
    return A


def _symmetrize(A: np.ndarray, from_upper: bool, tile: int = 16) -> None:
    """Copy one triangle of the square array A onto the other, in place: the upper onto the
    lower (`from_upper`) or the lower onto the upper. Fast for C order: the destination is cut
    into strips of `tile` columns, each of whose rows gathers `tile` values from `tile` rows of
    the source, each on its own page once a row is a few KB long; 16 pages stay within the TLB.
    With strips of 256 the copy took 84-1 580 ms at n = 8 192 float32 after an inverse (the same
    matrix; the spread is from one allocation to the next on this VM), with 16 37 ms every
    time. Strips of rows instead of columns (the lapack path's Fortran view, until stop 19)
    thrash the TLB the same way: 60-110 ms at n = 4 096 float32. The diagonal tiles are mirrored
    last, all in one batched pass (a strided view of the tiles): one numpy call per strip
    instead of five, 2.9 -> 1.9 ms at n = 2 000 float32 (0.087 -> 0.058 of the inverse's
    roofline time) and 10.8 -> 8.1 ms at 4 096. Every value is copied, not recomputed: the
    result is bit for bit the source triangle's."""
    n = A.shape[0]
    for start in range(0, n, tile):
        stop = min(n, start + tile)
        if from_upper:
            A[stop:, start:stop] = A[start:stop, stop:].T
        else:
            A[:start, start:stop] = A[start:stop, :start].T
    full, (row, column) = n // tile, A.strides
    diagonal = [as_strided(A, shape=(full, tile, tile),  # the full tiles on the diagonal
                           strides=(tile * (row + column), row, column))]
    if n % tile:
        diagonal.append(A[full * tile:, full * tile:][None])
    for tiles in diagonal:
        size = tiles.shape[1]
        keep = np.tri(size, dtype=bool)  # the source triangle, diagonal included
        if from_upper:
            keep = keep.T
        tiles[...] = np.where(keep, tiles, tiles.swapaxes(1, 2))  # a copy: -0.0 stays -0.0


def solver_path(n: int, dtype: FloatDtype, large_n: int | None = LARGE_N_THRESHOLD) -> str:
    """The path `spd_inverse` takes for an n x n matrix of `dtype`: "lapack" (one threaded
    `?potrf` + `?potri` call) when a row of the matrix has at most LAPACK_SAFE_ROW_BYTES (and
    n < large_n, if given), else "recursive" (see the module docstring)."""
    row_bytes = n * np.dtype(dtype).itemsize
    below = large_n is None or n < large_n
    return "lapack" if below and row_bytes <= LAPACK_SAFE_ROW_BYTES else "recursive"


def recursive_block(dtype: FloatDtype, block: int = DEFAULT_BLOCK) -> int:
    """Leaf size of the recursive path: `block`, capped so that a leaf row has at most
    LAPACK_SAFE_ROW_BYTES (its leaves go to OpenBLAS's threaded syrk / potrf)."""
    return max(1, min(int(block), LAPACK_SAFE_ROW_BYTES // np.dtype(dtype).itemsize))


def spd_inverse(A: np.ndarray, dtype: FloatDtype | None = None, overwrite: bool = True,
                large_n: int | None = LARGE_N_THRESHOLD, block: int = DEFAULT_BLOCK,
                n_threads: int | None = None) -> np.ndarray:
    """Inverse of the symmetric positive definite A (n x n) via Cholesky (spec §2.4).

    With `overwrite` (and A already C-contiguous of `dtype`), A itself is overwritten and returned:
    the peak memory is one n x n array (no scratch beyond BLAS's packing buffers). One triangle
    of A is read (the lower on the "lapack" path, the upper on the recursive one): A must be
    symmetric. The path is `solver_path(n, dtype, large_n)`; `block` is the leaf size
    of the recursive path (capped by `recursive_block`; see the module docstring). `n_threads`
    limits the BLAS threads (None: BLAS default, all cores; on a machine whose cores are busy with
    other work, 1 is several times faster). Raises NotPositiveDefiniteError when A is not SPD."""
    target = check_float_dtype(A.dtype if dtype is None else dtype)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ConfigError(f"spd_inverse needs a square matrix, got shape {A.shape}")
    if int(block) < 1:
        raise ConfigError(f"spd_inverse: block={block} must be >= 1")
    if not overwrite or A.dtype != target or not A.flags.c_contiguous:
        A = np.array(A, dtype=target, order="C", copy=True)
    n = A.shape[0]
    if n == 0:
        return A
    fortran_view = A.T  # the same symmetric matrix; its lower triangle is A's upper triangle
    path = solver_path(n, target, large_n)
    try:
        with blas_threads(n_threads):
            if path == "lapack":
                kernels.lapack_spd_inverse_upper(fortran_view)  # A's lower triangle
            else:
                kernels.spd_inverse_lower(fortran_view, recursive_block(target, block))
    except kernels.LapackInfoError as err:
        raise NotPositiveDefiniteError(
            f"{err.routine}: the matrix is not positive definite (leading minor {err.index} is "
            "not positive); increase the regularization (e.g. lam > 0)"
        ) from None
    _symmetrize(A, from_upper=path != "lapack")  # where the kernels wrote: A's lower / upper
    return A


def zero_diagonal_weights(P: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """In place: P <- scale · (I − P·diagM(1 ⊘ diag(P))), i.e. W_ij = −scale·P_ij / P_jj (i ≠ j) and
    W_jj = 0 exactly (EASE closed form, spec/linear_models.md §3.1; EDLAE §3.3; eq. 103 §3.10).
    P (n x n) is the inverse of the regularized Gram matrix. Returns the same array."""
    column_scale = -scale / np.diag(P)
    P *= column_scale.astype(P.dtype, copy=False)[None, :]
    np.fill_diagonal(P, 0.0)
    return P
