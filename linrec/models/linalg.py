"""Shared dense linear algebra for the item-item models (spec/linear_models.md §2): memory guard,
Gram matrix G = XᵀX, in-place SPD inverse (Cholesky), and the zero-diagonal (EASE-type) weights.

Solver paths of `spd_inverse` (spec §2.4), chosen by `n` against `large_n`:

* default (n < large_n): LAPACK `?potrf` + `?potri` from scipy, in place on the array, with the
  multithreaded OpenBLAS that scipy ships.
* large (n >= large_n, default 20 000): our own blocked Cholesky, triangular inverse and LᵀL product
  (LAPACK's right-looking POTRF / TRTRI / LAUUM algorithms) written with numpy GEMMs on blocks.
  Why: multithreaded OpenBLAS `potrf` (scipy's and numpy's, `np.linalg.cholesky` included)
  segfaults on this machine type from about n = 30 000 (fine at 23 500). Single-threaded LAPACK
  works but runs at half speed (2 cores); `torch.linalg.cholesky` is out of place (one more n²
  array) and took 220 s for the factor alone at n = 40 981. The blocked path does all n³ flops in
  multithreaded GEMMs, in place, with O(n·block) scratch, and calls LAPACK only on the
  block x block diagonal blocks.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.linalg import lapack

from linrec.errors import ConfigError, MemoryBudgetError
from linrec.hardware import available_memory_bytes, blas_threads, thread_limit
from linrec.params import check_float_dtype

#: n at and above which `spd_inverse` uses the blocked GEMM path (see the module docstring)
LARGE_N_THRESHOLD = 20_000
#: block size of the blocked path (GEMMs of n x block x block; scratch about 3 * n * block floats)
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


def _symmetrize_from_lower(A: np.ndarray, block: int) -> None:
    """Copy the lower triangle of the square C-order array A onto its upper triangle, in place."""
    n = A.shape[0]
    for start in range(0, n, block):
        stop = min(n, start + block)
        diag = A[start:stop, start:stop]
        diag[...] = np.tril(diag) + np.tril(diag, -1).T
        A[start:stop, stop:] = A[stop:, start:stop].T


def _check_info(info: int, routine: str, offset: int = 0) -> None:
    if info > 0:
        raise NotPositiveDefiniteError(
            f"{routine}: the matrix is not positive definite (leading minor {offset + info} is not "
            "positive); increase the regularization (e.g. lam > 0)"
        )
    if info < 0:  # pragma: no cover - an argument error is a bug in this module
        raise RuntimeError(f"{routine}: illegal argument {-info}")


def _potrf_block(A: np.ndarray, offset: int) -> np.ndarray:
    """Lower Cholesky factor (upper part zero) of a small diagonal block (a copy). Single-threaded:
    OpenBLAS's parallel potrf is the routine that crashes at large n and that slows down most when
    the cores are shared, and one block x block factor is cheap."""
    potrf = lapack.get_lapack_funcs("potrf", (A,))
    with blas_threads(1):
        factor, info = potrf(A, lower=1, clean=1)
    _check_info(info, "potrf", offset)
    return factor


def _cholesky_lower_blocked(A: np.ndarray, block: int) -> None:
    """Right-looking blocked Cholesky (LAPACK POTRF): lower triangle of A <- L, A = L Lᵀ."""
    n = A.shape[0]
    for k0 in range(0, n, block):
        k1 = min(n, k0 + block)
        factor = _potrf_block(A[k0:k1, k0:k1], k0)
        A[k0:k1, k0:k1] = factor
        if k1 == n:
            break
        # panel L21 = A21 L11^-T, then the trailing lower triangle A22 -= L21 L21ᵀ column block by
        # column block (GEMMs; never the full square, never an (n-k) x (n-k) temporary)
        panel = sla.solve_triangular(factor, A[k1:, k0:k1].T, lower=True, check_finite=False).T
        A[k1:, k0:k1] = panel
        for j0 in range(k1, n, block):
            j1 = min(n, j0 + block)
            A[j0:, j0:j1] -= panel[j0 - k1:] @ panel[j0 - k1:j1 - k1].T


def _triangular_inverse_lower_blocked(A: np.ndarray, block: int) -> None:
    """Blocked inverse of the lower-triangular L held in A (LAPACK TRTRI, lower, backwards):
    [[L11, 0], [L21, L22]]⁻¹ = [[L11⁻¹, 0], [-L22⁻¹ L21 L11⁻¹, L22⁻¹]]. Diagonal blocks must have
    a zero upper part; they keep one."""
    n = A.shape[0]
    trtri = lapack.get_lapack_funcs("trtri", (A,))
    for k0 in reversed(range(0, n, block)):
        k1 = min(n, k0 + block)
        with blas_threads(1):
            inv_kk, info = trtri(A[k0:k1, k0:k1], lower=1)
        _check_info(info, "trtri", k0)
        inv_kk = np.tril(inv_kk)
        if k1 < n:
            l21 = A[k1:, k0:k1].copy()
            prod = np.empty_like(l21)  # L22⁻¹ L21, block row by block row of the triangle
            for i0 in range(k1, n, block):
                i1 = min(n, i0 + block)
                prod[i0 - k1:i1 - k1] = A[i0:i1, k1:i1] @ l21[:i1 - k1]
            A[k1:, k0:k1] = -(prod @ inv_kk)
        A[k0:k1, k0:k1] = inv_kk


def _lower_gram_blocked(A: np.ndarray, block: int) -> None:
    """Lower triangle of A <- lower triangle of MᵀM for the lower-triangular M held in A
    (LAPACK LAUUM): block row i of MᵀM needs only rows >= i of M, which are still intact."""
    n = A.shape[0]
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        A[i0:i1, :i1] = A[i0:, i0:i1].T @ A[i0:, :i1]


def _spd_inverse_lapack(A: np.ndarray) -> None:
    """In place: lower triangle of the C-order A <- lower triangle of A⁻¹ (LAPACK potrf + potri).
    The C-order A is the Fortran-order Aᵀ = A, whose upper triangle is A's lower one."""
    fortran_view = A.T
    potrf, potri = lapack.get_lapack_funcs(("potrf", "potri"), (fortran_view,))
    _, info = potrf(fortran_view, lower=0, overwrite_a=1, clean=0)
    _check_info(info, "potrf")
    _, info = potri(fortran_view, lower=0, overwrite_c=1)
    _check_info(info, "potri")


def spd_inverse(A: np.ndarray, dtype: FloatDtype | None = None, overwrite: bool = True,
                large_n: int = LARGE_N_THRESHOLD, block: int = DEFAULT_BLOCK,
                n_threads: int | None = None) -> np.ndarray:
    """Inverse of the symmetric positive definite A (n x n) via Cholesky (spec §2.4).

    With `overwrite` (and A already C-contiguous of `dtype`), A itself is overwritten and returned:
    the peak memory is one n x n array plus O(n·block) scratch. `n >= large_n` selects the blocked
    GEMM path (see the module docstring). `n_threads` limits the BLAS threads (None: BLAS default,
    all cores; on a machine whose cores are busy with other work, 1 is several times faster).
    Raises NotPositiveDefiniteError when A is not SPD."""
    target = check_float_dtype(A.dtype if dtype is None else dtype)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ConfigError(f"spd_inverse needs a square matrix, got shape {A.shape}")
    if not overwrite or A.dtype != target or not A.flags.c_contiguous:
        A = np.array(A, dtype=target, order="C", copy=True)
    n = A.shape[0]
    if n == 0:
        return A
    with blas_threads(n_threads):
        if n < large_n:
            _spd_inverse_lapack(A)
        else:
            _cholesky_lower_blocked(A, block)
            _triangular_inverse_lower_blocked(A, block)
            _lower_gram_blocked(A, block)
    _symmetrize_from_lower(A, block)
    return A


def zero_diagonal_weights(P: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """In place: P <- scale · (I − P·diagM(1 ⊘ diag(P))), i.e. W_ij = −scale·P_ij / P_jj (i ≠ j) and
    W_jj = 0 exactly (EASE closed form, spec/linear_models.md §3.1; EDLAE §3.3; eq. 103 §3.10).
    P (n x n) is the inverse of the regularized Gram matrix. Returns the same array."""
    column_scale = -scale / np.diag(P)
    P *= column_scale.astype(P.dtype, copy=False)[None, :]
    np.fill_diagonal(P, 0.0)
    return P
