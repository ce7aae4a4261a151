"""The linear algebra every estimator reuses (Krichene & Rendle 2020; Li et al. 2023, eq. 14;
docs/concepts/sampled.md): the dense row blocks of a banded P(r|R), weighted Gram matrices AᵀDA
(dense, banded, cached), symmetric solves with a least-squares fallback, and the implied
distribution P̂ = D A H⁻¹ P~."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.linalg import lapack
from scipy.linalg.blas import dsyrk

#: A = P(r | R) as a dense array or a banded CSR array (linrec.eval.conditional)
ConditionalOp = np.ndarray | sp.csr_array


def weighted_gram(cond: ConditionalOp, weights: np.ndarray | None = None) -> np.ndarray:
    """Aᵀ diag(weights) A (dense n x n float64, symmetric); weights None means the identity and
    may be negative. Dense A uses the BLAS symmetric rank-k update (half the flops of a GEMM);
    the unweighted and uniform-weight Gram of a cached A is itself cached."""
    if sp.issparse(cond):
        bands = band_blocks(cond)
        if bands is None:
            scaled = cond if weights is None else sp.diags_array(weights) @ cond
            return np.asarray((cond.T @ scaled).toarray())
        return _banded_gram(bands, weights)
    if weights is None or np.all(weights == weights[0]):
        scale = 1.0 if weights is None else float(weights[0])
        return scale * _unweighted_gram(cond)
    if np.all(weights >= 0):
        return _syrk(np.sqrt(weights)[:, None] * cond)
    positive, negative = np.maximum(weights, 0.0), np.maximum(-weights, 0.0)
    return _syrk(np.sqrt(positive)[:, None] * cond) - _syrk(np.sqrt(negative)[:, None] * cond)


def _band_rows(cond: sp.csr_array) -> tuple[np.ndarray, np.ndarray] | None:
    """(values (N, width), first column (N,)) if every row of cond stores one contiguous window
    of the same width (the form linrec.eval.conditional.conditional_band builds), else None."""
    n_rows = cond.shape[0]
    if n_rows == 0 or cond.nnz % n_rows or not cond.has_sorted_indices:
        return None
    width = cond.nnz // n_rows
    if not np.array_equal(cond.indptr, np.arange(0, cond.nnz + 1, width)):
        return None
    columns = cond.indices.reshape(n_rows, width)
    if width > 1 and not np.all(np.diff(columns, axis=1) == 1):
        return None
    return cond.data.reshape(n_rows, width), columns[:, 0].astype(np.int64)


#: bytes of one dense block of a banded A (half an L2 cache, as the dense EM step's row blocks)
BAND_BLOCK_BYTES = 1 << 19


@dataclass(frozen=True)
class BandBlocks:
    """A banded A (N, n) as dense row blocks, each with the column window its rows' bands cover:
    block k holds A[rows[k][0]:rows[k][1], cols[k][0]:cols[k][1]] (zeros off the band). A
    product with A is then one BLAS GEMM per block, with no index reads, and an EM step can use
    each block twice while it is in cache."""

    shape: tuple[int, int]
    rows: tuple[tuple[int, int], ...]
    cols: tuple[tuple[int, int], ...]
    blocks: tuple[np.ndarray, ...]

    def __iter__(self):
        return zip(self.rows, self.cols, self.blocks, strict=True)


def band_blocks(cond: ConditionalOp, block_bytes: int = BAND_BLOCK_BYTES) -> BandBlocks | None:
    """`BandBlocks` of a banded CSR A, or None if A is dense or not banded. A read-only A (the
    cached operators of linrec.eval.conditional) keeps its blocks for the next call."""
    if not sp.issparse(cond):
        return None
    cached = not cond.data.flags.writeable
    if cached and (hit := _cache_get(_BLOCKS_CACHE, cond, block_bytes)) is not None:
        return hit
    band = _band_rows(cond)
    if band is None:
        return None
    values, first = band
    width = values.shape[1]
    block_rows = max(1, block_bytes // (8 * (width + 16)))
    rows, cols, blocks = [], [], []
    for lo in range(0, len(first), block_rows):
        starts = first[lo : lo + block_rows]
        c0, c1 = int(starts.min()), int(starts.max()) + width
        block = np.zeros((len(starts), c1 - c0))
        np.put_along_axis(block, (starts - c0)[:, None] + np.arange(width)[None, :],
                          values[lo : lo + block_rows], axis=1)
        block.setflags(write=False)
        rows.append((lo, lo + len(starts)))
        cols.append((c0, c1))
        blocks.append(block)
    out = BandBlocks(cond.shape, tuple(rows), tuple(cols), tuple(blocks))
    if cached:
        _cache_put(_BLOCKS_CACHE, cond, block_bytes, out)
    return out


def _banded_gram(bands: BandBlocks, weights: np.ndarray | None) -> np.ndarray:
    """Aᵀ diag(weights) A for a banded A, one dense column window per block of rows."""
    n_cols = bands.shape[1]
    gram = np.zeros((n_cols, n_cols))
    for (r0, r1), (c0, c1), block in bands:
        scaled = block if weights is None else block * weights[r0:r1, None]
        gram[c0:c1, c0:c1] += scaled.T @ block
    return gram


def _syrk(rows: np.ndarray) -> np.ndarray:
    """rowsᵀ rows for a C-ordered (N, n) array (passed to BLAS as its F-ordered transpose)."""
    upper = dsyrk(1.0, np.ascontiguousarray(rows).T, trans=0)
    return np.triu(upper) + np.triu(upper, 1).T


#: derived forms of read-only (cached) conditional operators, keyed by id and a parameter and
#: checked by a weak reference: AᵀA of a dense A, the `BandBlocks` of a banded one
_GRAM_CACHE: dict[tuple[int, Any], tuple[weakref.ref, Any]] = {}
_BLOCKS_CACHE: dict[tuple[int, Any], tuple[weakref.ref, Any]] = {}


def _cache_get(cache: dict, key_object: Any, parameter: Any) -> Any:
    hit = cache.get((id(key_object), parameter))
    return hit[1] if hit is not None and hit[0]() is key_object else None


def _cache_put(cache: dict, key_object: Any, parameter: Any, value: Any) -> None:
    if len(cache) >= 8:
        cache.clear()
    cache[(id(key_object), parameter)] = (weakref.ref(key_object), value)


def _unweighted_gram(cond: np.ndarray) -> np.ndarray:
    if cond.flags.writeable:
        return _syrk(cond)
    if (gram := _cache_get(_GRAM_CACHE, cond, None)) is not None:
        return gram
    gram = _syrk(cond)
    gram.setflags(write=False)
    _cache_put(_GRAM_CACHE, cond, None, gram)
    return gram


def column_sums(cond: ConditionalOp) -> np.ndarray:
    """Σ_R P(r|R) for each r: Λ1 of Li et al. 2023, eqs. 10–11, float64 (n,)."""
    return np.asarray(cond.sum(axis=0)).ravel()


def solve_symmetric(matrix: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, str]:
    """Solve a symmetric system in float64 (docs/concepts/sampled.md), falling back to least squares
    when the matrix is singular or numerically so (docs/concepts/sampled.md). Returns (solution,
    method).

    LAPACK ?sysv (Bunch–Kaufman, as scipy.linalg.solve(assume_a="sym")) and ?sycon directly: the
    fallback is taken when the reciprocal condition number is below the machine precision, the
    threshold at which scipy warns. No warnings filter is touched: `warnings.catch_warnings` is not
    thread-safe, and the estimators run in threads (linrec.eval.sampled)."""
    a = np.asarray(matrix, dtype=np.float64)
    b = np.asarray(rhs, dtype=np.float64)
    b2 = b.reshape(len(b), -1)
    lwork = int(lapack.dsysv_lwork(a.shape[0])[0])
    factor, pivots, solution, info = lapack.dsysv(a, b2, lwork=max(lwork, 1))
    if info == 0:
        rcond, info = lapack.dsycon(factor, pivots, lapack.dlange("1", a))
        if info == 0 and rcond >= lapack.dlamch("E"):  # NaN fails the test too
            return solution.reshape(b.shape), "solve(sym)"
    solution = scipy.linalg.lstsq(a, b, cond=None, lapack_driver="gelsd")[0]
    return solution, "lstsq"


def implied_distribution(
    cond: ConditionalOp, prior: np.ndarray, system: np.ndarray, histogram: np.ndarray
) -> tuple[np.ndarray, str]:
    """P̂ = D A H⁻¹ P~ for an estimator x = H⁻¹ AᵀD b (Krichene & Rendle 2020; Li et al. 2023, eq.
    14: P̂ = Gᵀ P~ with G = H⁻¹AᵀD). One solve with the histogram as right-hand side gives every
    metric and every K at once."""
    z, method = solve_symmetric(system, histogram)
    return prior * np.asarray(cond @ z).ravel(), method
