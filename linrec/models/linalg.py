"""Shared dense linear algebra for the item-item models (docs/concepts/models.md): memory guard,
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
buffer without slicing, and writes past it once a matrix row is long enough (about 124 KB with
2 threads): past the buffer memory is silently corrupted, then the process segfaults
(experiments/benchmarks/bench_openblas_probe.py reproduces it). So the "lapack" path is allowed
only while a row has at most LAPACK_SAFE_ROW_BYTES (32 KiB: n ≤ 4 096 in float64, 8 192 in
float32, a quarter of the smallest overflow seen), whatever `large_n` asks; the recursive path
calls `?syrk`, `?potrf`, `?trtri` and `?lauum` only on blocks of at most `block` rows (capped by
the same limit, `recursive_block`), and puts everything else in `?gemm`, `?trsm` and `?trmm`,
whose threaded drivers walk the output in slices of bounded width.

Below that limit the two paths are close in speed (`bench_inverse.py --calibrate` measures them
against the GEMM rate; experiments/LOG.md keeps the dated figures), so the rule is fixed rather
than timed at first use, which keeps a fit reproducible to the last bit: "lapack" wherever it is
safe, "recursive" beyond (LARGE_N_THRESHOLD = None: no size threshold of its own; `large_n`
forces the recursive path in tests and benchmarks). "lapack" factors the upper triangle of the
Fortran view, so the fits that take it keep the bits they have always had; the recursive path
rounds differently (a few ulps). DEFAULT_BLOCK = 1024: the fewest calls, within a few percent of
the best block at every size measured.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.lib.stride_tricks import as_strided

from linrec.errors import ConfigError, MemoryBudgetError
from linrec.hardware import available_memory_bytes, blas_threads, thread_limit
from linrec.models import _spd_kernels as kernels
from linrec.models import device
from linrec.models.device import is_tensor
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


def check_device_memory(n: int, dtype: np.dtype | str, n_matrices: float, what: str,
                        alternative: str, device: Any) -> None:
    """`check_dense_memory` for a torch device: the free memory of a CUDA device (the host's
    for any other)."""
    if device.type != "cuda":
        check_dense_memory(n, dtype, n_matrices, what, alternative)
        return
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    need = n_matrices * n * n * np.dtype(dtype).itemsize
    if need > free:
        raise MemoryBudgetError(
            f"{what} on {device}: needs about {need / 2**30:.1f} GiB ({n_matrices:g} dense "
            f"{n}x{n} {np.dtype(dtype).name} matrices) but only {free / 2**30:.1f} GiB of the "
            f"device is free. {alternative}".rstrip())


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
    X = sp.csr_matrix(X)  # duplicate entries need no summing: the sparse products add them up
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


def cast_like(values: Any, like: Any) -> Any:
    """`values` in the dtype (and, for a torch tensor, on the device) of `like`."""
    if is_tensor(like):
        return device.cast_like(values, like)
    return np.asarray(values).astype(like.dtype)


def add_to_diagonal(A: np.ndarray, values: float | np.ndarray) -> np.ndarray:
    """A[i, i] += values[i] in place (values: scalar or length n). Returns A. A may be a torch
    tensor (linrec.models.device)."""
    if is_tensor(A):
        return device.add_to_diagonal(A, values)
    n = A.shape[0]
    A.reshape(-1)[:: n + 1] += values
    return A


def _symmetrize(A: np.ndarray, from_upper: bool, tile: int = 16) -> None:
    """Copy one triangle of the square array A onto the other, in place: the upper onto the
    lower (`from_upper`) or the lower onto the upper. Fast for C order: the destination is cut
    into strips of `tile` columns, each of whose rows gathers `tile` values from `tile` rows of
    the source, each on its own page once a row is a few KB long; 16 pages stay within the TLB,
    where wider strips (or strips of rows, as a Fortran view copies) thrash it and cost a large
    share of the inverse. The diagonal tiles are mirrored last, all in one batched pass (a
    strided view of the tiles) rather than one small copy per strip. Every value is copied,
    not recomputed: the result is bit for bit the source triangle's."""
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
    """Inverse of the symmetric positive definite A (n x n) via Cholesky (docs/concepts/models.md).

    With `overwrite` (and A already C-contiguous of `dtype`), A itself is overwritten and returned:
    the peak memory is one n x n array (no scratch beyond BLAS's packing buffers). One triangle
    of A is read (the lower on the "lapack" path, the upper on the recursive one): A must be
    symmetric. The path is `solver_path(n, dtype, large_n)`; `block` is the leaf size
    of the recursive path (capped by `recursive_block`; see the module docstring). `n_threads`
    limits the BLAS threads (None: BLAS default, all cores; on a machine whose cores are busy with
    other work, 1 is several times faster). Raises NotPositiveDefiniteError when A is not SPD.
    A torch tensor is inverted where it lies (linrec.models.device.spd_inverse; the other
    arguments do not apply)."""
    if is_tensor(A):
        A, bad = device.cholesky_inverse(A)
        if bad:
            raise NotPositiveDefiniteError(
                f"cholesky on the device: the matrix is not positive definite (leading minor "
                f"{bad} is not positive); increase the regularization (e.g. lam > 0)")
        return A
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
    W_jj = 0 exactly (EASE closed form, Steck 2019; Li 2023, eq. 100; EDLAE Steck 2020; eq. 103 Jin
    & Li 2023, Theorems 2 and 3). P (n x n) is the inverse of the regularized Gram matrix. Returns
    the same array (a torch tensor stays one: linrec.models.device)."""
    if is_tensor(P):
        return device.zero_diagonal_weights(P, scale)
    column_scale = -scale / np.diag(P)
    P *= column_scale.astype(P.dtype, copy=False)[None, :]
    np.fill_diagonal(P, 0.0)
    return P
