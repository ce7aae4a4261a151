"""Factor models fitted by alternating least squares (Hu et al. 2008; Rendle et al. 2022; Jin &
Li 2023, Theorem 2; docs/concepts/models.md).

* `IALS`: iALS with frequency-scaled regularization (Rendle et al. 2022; Li 2023, eq. 99). Exact row
  solves with the Gramian trick, Cholesky or warm-started conjugate gradient; back-ends: numba
  (compiled per-row solvers on the CSR rows, `_als_kernels`, the default), numpy or torch
  (vectorised over padded blocks of rows of similar length).
* `DebiasedIALS`: iALS with the debiased MSE and the per-user confidence c_u (Li 2023, App. A.3;
  Theorem 2: one step = the mapped iALS step × 1/(1−α₀); a whole fit = the iALS fit at
  λ' = λ/c, scaled).
* `WMF`: Hu et al.'s weighted MF through `implicit.cpu.als.AlternatingLeastSquares`.

Both iALS variants minimise, per row r of one side with the other side's factors Y fixed,
    wᵀ(Y_Sᵀ diag(q) Y_S + α₀ YᵀY + Λ_r I) w − 2 wᵀ Y_Sᵀ l,
where S are the row's interactions, q / l the per-interaction quadratic / linear weights
(iALS: q = l = 1; debiased: q = c_u(1−α₀), l = c_u) and Λ_r = λ(|S| + α₀·n_other)^ν.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.console import tracked
from linrec.errors import ConfigError, DataError
from linrec.hardware import blas_threads, torch_threads
from linrec.models.base import Recommender, Validation, binary_pattern
from linrec.models.configs import DebiasedIALSConfig, IALSConfig, WMFConfig
from linrec.models.device import torch_device
from linrec.models.linalg import thread_count

#: memory for the arrays of one block. CG re-reads the gathered factors (B, L, k) 2(steps + 1)
#: times, so its blocks are small enough to stay in cache; Cholesky forms B k x k systems once.
_BLOCK_BYTES = {"cg": 2 << 20, "cholesky": 32 << 20}


# --------------------------------------------------------------------------------------------
# Array back-ends: the solver below is written once against numpy-like arrays; these supply
# the few calls whose names differ between numpy and torch.


def _normal_rows(rng: np.random.Generator, std: float, shape: tuple[int, int], dtype: str,
                 zero_rows: np.ndarray) -> np.ndarray:
    """rng.normal(0, std, shape) cast to `dtype`, with the rows where `zero_rows` (bool) set
    to 0: the numbers of one float64 draw cast at once (a Generator's draws are one stream,
    whatever the sizes asked), drawn in chunks of about 64 K values instead: no n × k float64
    temporary (100 MB at 50 000 × 256, twice the float32 factors) to fault in and cast. The
    draws themselves stay (0.14 s for both sides at 50 000 + 10 000 rows × 256)."""
    out = np.empty(shape, dtype=dtype)
    rows = max(1, (1 << 16) // max(1, shape[1]))
    for start in range(0, shape[0], rows):
        stop = min(shape[0], start + rows)
        out[start:stop] = rng.normal(0.0, std, (stop - start, shape[1]))
    out[zero_rows] = 0.0
    return out


class _NumpyOps:
    name = "numpy"
    on_host = True

    def __init__(self, dtype: str) -> None:
        self.dtype = np.dtype(dtype)

    def array(self, values: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(values, dtype=self.dtype)

    def index(self, values: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(values, dtype=np.int64)

    def numpy(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values)

    def arange(self, n: int) -> np.ndarray:
        return np.arange(n)

    def gather_rows(self, matrix: np.ndarray, index: np.ndarray) -> np.ndarray:
        """matrix[index]: (B, L, k) from (n, k) and (B, L)."""
        return matrix[index]

    def matvec(self, matrices: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """(B, L) = matrices (B, L, k) times vectors (B, k), row by row."""
        return (matrices @ vectors[..., None])[..., 0]

    def cholesky_solve(self, systems: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        """x (B, k) with systems[b] x[b] = rhs[b]; systems (B, k, k) SPD."""
        # batched LAPACK potrf (gufunc, C loop); numpy's float64 potrf is faster than its
        # float32 one (about twice at k = 256), so float32 systems are promoted
        try:
            chol = np.linalg.cholesky(systems.astype(np.float64, copy=False))
        except np.linalg.LinAlgError:
            raise _NotPositiveDefinite from None
        solution = _batched_cholesky_substitution(chol, rhs.astype(np.float64, copy=False))
        return solution.astype(self.dtype, copy=False)

    @contextmanager
    def single_threaded_kernels(self) -> Iterator[None]:
        # one BLAS thread per worker: the blocks run in parallel instead (as implicit does)
        with blas_threads(1):
            yield


class _TorchOps:
    """torch tensors on `device` (a torch.device; the CPU unless the config names another):
    the blocks, both sides' factors and every solve live there, the factors come back once."""

    name = "torch"

    def __init__(self, dtype: str, device: Any = "cpu") -> None:
        import torch

        self.torch = torch
        self.dtype = getattr(torch, dtype)
        self.device = torch.device(device)

    def array(self, values: np.ndarray) -> Any:
        return self.torch.as_tensor(np.ascontiguousarray(values), dtype=self.dtype,
                                    device=self.device)

    def index(self, values: np.ndarray) -> Any:
        return self.torch.as_tensor(np.ascontiguousarray(values, dtype=np.int64),
                                    device=self.device)

    def numpy(self, values: Any) -> np.ndarray:
        return values.cpu().numpy()

    def arange(self, n: int) -> Any:
        return self.torch.arange(n, device=self.device)

    @property
    def on_host(self) -> bool:
        return self.device.type == "cpu"

    def gather_rows(self, matrix: Any, index: Any) -> Any:
        # index_select is several times faster than advanced indexing on CPU
        return matrix.index_select(0, index.reshape(-1)).view(*index.shape, matrix.shape[1])

    def matvec(self, matrices: Any, vectors: Any) -> Any:
        # vecdot beats the batched (L, k) @ (k, 1) products of bmm for these shapes
        return self.torch.linalg.vecdot(matrices, vectors[:, None, :])

    def cholesky_solve(self, systems: Any, rhs: Any) -> Any:
        chol, info = self.torch.linalg.cholesky_ex(systems)
        if bool((info != 0).any()):
            raise _NotPositiveDefinite
        return self.torch.cholesky_solve(rhs[..., None], chol)[..., 0]

    @contextmanager
    def single_threaded_kernels(self) -> Iterator[None]:
        with torch_threads(1), blas_threads(1):
            yield


class _NumbaOps(_NumpyOps):
    """numpy arrays; rows are solved by the compiled kernels of `_als_kernels` on a CSR side
    (`_CsrSide`) instead of padded blocks, in `chunks_per_thread` x `threads` chunks of rows
    handed to the worker threads as they come free (the kernels release the GIL)."""

    name = "numba"
    #: chunks per worker thread: enough for a thread slowed by other processes to be caught
    #: up by the others, few enough that dispatch stays negligible (~20 us per chunk)
    chunks_per_thread = 8

    def __init__(self, dtype: str, threads: int = 0) -> None:
        super().__init__(dtype)
        self.threads = thread_count(threads)

    def chunks(self, rows: np.ndarray) -> list[np.ndarray]:
        """`rows` cut into consecutive chunks (one chunk when single-threaded)."""
        n_chunks = 1 if self.threads == 1 else self.threads * self.chunks_per_thread
        return np.array_split(rows, min(n_chunks, max(len(rows), 1)))


class _NotPositiveDefinite(Exception):
    """A k x k system of the ALS step is not positive definite (reg = 0 and rank-deficient)."""


def _batched_cholesky_substitution(chol: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve L Lᵀ x = rhs for a batch: chol (B, k, k) lower, rhs (B, k). Vectorised over the
    batch; the loop runs over the k factor dimensions (2k steps of O(B·k))."""
    k = rhs.shape[1]
    forward = np.empty_like(rhs)
    for j in range(k):
        partial = np.einsum("bi,bi->b", chol[:, j, :j], forward[:, :j])
        forward[:, j] = (rhs[:, j] - partial) / chol[:, j, j]
    solution = np.empty_like(rhs)
    for j in range(k - 1, -1, -1):
        partial = np.einsum("bi,bi->b", chol[:, j + 1:, j], solution[:, j + 1:])
        solution[:, j] = (forward[:, j] - partial) / chol[:, j, j]
    return solution


def _make_ops(backend: str, dtype: str, threads: int = 0, device: str = "cpu",
              owner: str = "ials") -> _NumpyOps | _TorchOps:
    """The array operations of a back-end; `device` (torch only, checked by the config) is
    resolved here, so that a missing GPU fails naming `<owner>.device`."""
    if backend == "numba":
        return _NumbaOps(dtype, threads)
    if backend == "numpy":
        return _NumpyOps(dtype)
    return _TorchOps(dtype, torch_device(device, f"{owner}.device"))


# --------------------------------------------------------------------------------------------
# Blocks of rows of similar length, padded (the vectorisation unit)


@dataclass(frozen=True)
class _Block:
    """Rows solved together. rows (B,); neighbours (B, L) column ids (0 on padding);
    quad_weights / lin_weights (B, L) the q / l weights of each interaction (0 on padding)."""

    rows: Any
    neighbours: Any
    quad_weights: Any
    lin_weights: Any


@dataclass(frozen=True)
class _CsrSide:
    """All rows of one side for the numba kernels: the CSR pattern (indptr, indices), the q / l
    weights of each interaction (nnz,), and the non-empty rows in a fixed shuffled order (rows
    of similar cost spread over the chunks; the solution does not depend on the order), cut
    into the chunks the threads take."""

    indptr: np.ndarray
    indices: np.ndarray
    quad_weights: np.ndarray
    lin_weights: np.ndarray
    rows: np.ndarray
    chunks: list[np.ndarray]


def _plan_spans(sorted_lengths: np.ndarray, bytes_per_row: Callable[[np.ndarray], np.ndarray],
                max_rows: int, budget: int) -> list[tuple[int, int]]:
    """Cut rows sorted by ascending length into consecutive spans of at most `max_rows` rows
    whose padded arrays take at most `budget` bytes (a span has at least one row)."""
    spans = []
    start, n_rows = 0, len(sorted_lengths)
    while start < n_rows:
        window = sorted_lengths[start:start + max_rows]
        cost = np.arange(1, len(window) + 1) * bytes_per_row(window)  # increasing
        end = start + max(1, int(np.searchsorted(cost, budget, side="right")))
        spans.append((start, end))
        start = end
    return spans


def _build_blocks(pattern: sp.csr_matrix, quad_nnz: np.ndarray, lin_nnz: np.ndarray,
                  ops: _NumpyOps | _TorchOps, bytes_per_row: Callable[[np.ndarray], np.ndarray],
                  max_rows: int, budget: int) -> list[_Block]:
    """Blocks of the non-empty rows of `pattern` (rows x cols CSR) grouped by length.
    quad_nnz / lin_nnz: (nnz,) weights aligned with pattern.indices. The numba back-end takes
    the whole side as one `_CsrSide` instead."""
    lengths = np.diff(pattern.indptr)
    if ops.name == "numba":
        rows = np.random.default_rng(0).permutation(np.flatnonzero(lengths > 0))
        return [_CsrSide(np.ascontiguousarray(pattern.indptr),
                         np.ascontiguousarray(pattern.indices), ops.array(quad_nnz),
                         ops.array(lin_nnz), rows, ops.chunks(rows))]
    order = np.argsort(lengths, kind="stable")
    order = order[lengths[order] > 0]  # empty rows have the exact solution 0
    sorted_lengths = lengths[order]
    blocks = []
    for start, end in _plan_spans(sorted_lengths, bytes_per_row, max_rows, budget):
        rows = order[start:end]
        width = int(sorted_lengths[end - 1])
        slots = np.arange(width)
        valid = slots[None, :] < lengths[rows][:, None]
        positions = np.where(valid, pattern.indptr[rows][:, None] + slots[None, :], 0)
        blocks.append(_Block(
            rows=ops.index(rows),
            neighbours=ops.index(np.where(valid, pattern.indices[positions], 0)),
            quad_weights=ops.array(np.where(valid, quad_nnz[positions], 0.0)),
            lin_weights=ops.array(np.where(valid, lin_nnz[positions], 0.0)),
        ))
    return blocks


# --------------------------------------------------------------------------------------------
# iALS


class _FactorModel(Recommender):
    """Scoring shared by the factor models: U[users] Vᵀ for training users, or, with
    users=None, the exact fold-in user factors (`solve_users(foldin)`, V fixed) times Vᵀ."""

    def solve_users(self, foldin: sp.csr_matrix) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        """Scores (rows x n_items) of the users (see the class docstring)."""
        if users is None:
            return self.solve_users(foldin) @ self.item_factors_.T
        users = np.asarray(users)
        n_users = self.user_factors_.shape[0]
        if users.ndim != 1 or (users.size and (users.min() < 0 or users.max() >= n_users)):
            raise DataError(f"{self.name}.score: users must be row ids in "
                            f"[0, {n_users}), got shape {users.shape}")
        return self.user_factors_[users] @ self.item_factors_.T


class IALS(_FactorModel):
    """iALS with frequency-scaled regularization (Rendle et al. 2022; Li 2023, eq. 99; eq.
    99):

        L = Σ_{(u,i)∈S} (ŷ_ui − 1)² + α₀ Σ_u Σ_i ŷ_ui²
            + λ ( Σ_u (|I_u| + α₀|I|)^ν ‖w_u‖² + Σ_i (|U_i| + α₀|U|)^ν ‖h_i‖² ),   ŷ_ui = w_uᵀh_i.

    Each epoch solves every user (then every item) exactly given the other side, with the
    Gramian YᵀY computed once per sweep; the exact Cholesky solve, or `cg_steps` warm-started
    conjugate-gradient steps as in implicit. numba (default): compiled row solvers on the CSR
    rows, in chunks the `num_threads` threads (0 = all cores) take as they come free. numpy /
    torch: rows in padded blocks of similar length (batched products and Cholesky), blocks on
    `num_threads` threads with single-threaded kernels.

    Parameters: factors k; reg λ >= 0; alpha0 α₀ >= 0 (unobserved weight); nu ν >= 0;
    epochs; solver "cholesky" | "cg"; cg_steps; backend "numba" | "numpy" | "torch" (same
    numbers to rounding); device ("cpu", or "cuda[:n]" with the torch back-end); block_size
    (numpy / torch: max rows per block; blocks are also capped at 2 MiB for CG, 32 MiB for
    Cholesky); seed; init_std (factors start as
    N(0, init_std²/k)); dtype "float32" | "float64"; num_threads; record_loss.
    After fit: user_factors_ (n_users x k), item_factors_ (n_items x k), loss_history_ (the
    objective after each epoch; empty when record_loss is False), epoch_seconds_ (wall time of
    each epoch's two sweeps). Users with an empty training row get the zero vector.
    `score(foldin, users=None)` folds users in by the exact (Cholesky) user step.
    """

    config_class = IALSConfig

    # -- weights of the objective (overridden by DebiasedIALS) ---------------------------------

    def confidence(self, row_counts: np.ndarray, n_items: int) -> np.ndarray:
        """c_u (n_rows,) float64: the linear weight of each user's observed entries (iALS: 1)."""
        return np.ones(len(row_counts))

    def observed_weight(self, confidence: np.ndarray) -> np.ndarray:
        """q_u = weight of ŷ² on a user's observed entries beyond α₀ (iALS: 1; (ŷ−1)² = ŷ²−2ŷ+1)."""
        return np.ones_like(confidence)

    def regularization(self, counts: np.ndarray, n_other: int) -> np.ndarray:
        """Λ_r = λ(|S_r| + α₀·n_other)^ν (n_rows,) float64 (Li 2023, eq. 99)."""
        return self.reg * (counts + self.alpha0 * n_other) ** self.nu

    # -- fit --------------------------------------------------------------------------------------

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        """`epochs` sweeps (users, then items) over train (users x items, binary)."""
        pattern = train  # binary (Recommender.fit)
        n_users, n_items = pattern.shape
        ops = self._ops()
        user_blocks, item_blocks, user_reg, item_reg = self._training_blocks(pattern, ops)

        # both sides drawn, users first: a seed keeps giving the fit it always gave (drawing
        # only the items would be a little cheaper but change every seeded result)
        rng = np.random.default_rng(self.seed)
        std = self.init_std / math.sqrt(self.factors)
        # rows without interactions have the exact solution 0 and are never visited
        initial_users = _normal_rows(rng, std, (n_users, self.factors), self.dtype,
                                     np.diff(pattern.indptr) == 0)
        initial_items = _normal_rows(rng, std, (n_items, self.factors), self.dtype,
                                     np.bincount(pattern.indices, minlength=n_items) == 0)
        user_factors, item_factors = ops.array(initial_users), ops.array(initial_items)
        user_reg, item_reg = ops.array(user_reg), ops.array(item_reg)

        history, seconds = [], []
        with self._workers(ops) as pool:
            for _ in tracked(range(self.epochs), self.name, unit="sweeps"):
                started = time.perf_counter()
                self._sweep(ops, pool, user_blocks, item_factors, user_reg, user_factors,
                            self.solver)
                self._sweep(ops, pool, item_blocks, user_factors, item_reg, item_factors,
                            self.solver)
                seconds.append(time.perf_counter() - started)
                if self.record_loss:
                    history.append(self._objective(ops, pool, user_blocks, user_factors,
                                                   item_factors, user_reg, item_reg))
        self.user_factors_ = ops.numpy(user_factors)
        self.item_factors_ = ops.numpy(item_factors)
        self.loss_history_ = np.asarray(history)
        self.epoch_seconds_ = np.asarray(seconds)

    def _training_blocks(self, pattern: sp.csr_matrix, ops: _NumpyOps | _TorchOps
                         ) -> tuple[list[_Block], list[_Block], np.ndarray, np.ndarray]:
        n_users, n_items = pattern.shape
        by_item = pattern.T.tocsr()
        user_counts, item_counts = np.diff(pattern.indptr), np.diff(by_item.indptr)
        confidence = self.confidence(user_counts, n_items)
        quad = self.observed_weight(confidence)
        row_bytes, budget = self._bytes_per_row(self.solver), _BLOCK_BYTES[self.solver]
        user_blocks = _build_blocks(pattern, np.repeat(quad, user_counts),
                                    np.repeat(confidence, user_counts), ops, row_bytes,
                                    self.block_size, budget)
        item_blocks = _build_blocks(by_item, quad[by_item.indices], confidence[by_item.indices],
                                    ops, row_bytes, self.block_size, budget)
        return (user_blocks, item_blocks, self.regularization(user_counts, n_items),
                self.regularization(item_counts, n_users))

    def _bytes_per_row(self, solver: str) -> Callable[[np.ndarray], np.ndarray]:
        k, itemsize = self.factors, np.dtype(self.dtype).itemsize
        per_row = 3 * k * k if solver == "cholesky" else 8 * k

        def bytes_per_row(width: np.ndarray) -> np.ndarray:
            # gathered (L, k) factors + a weighted copy + the k x k systems or the CG vectors
            return itemsize * (2 * width * k + 3 * width + per_row)

        return bytes_per_row

    def _ops(self) -> _NumpyOps | _TorchOps:
        return _make_ops(self.backend, self.dtype, self.num_threads, self.device, self.name)

    @contextmanager
    def _workers(self, ops: _NumpyOps | _TorchOps) -> Iterator[ThreadPoolExecutor]:
        # on a GPU one host thread queues the blocks: the device runs them in order anyway
        workers = thread_count(self.num_threads) if ops.on_host else 1
        with ops.single_threaded_kernels(), ThreadPoolExecutor(max_workers=workers) as pool:
            yield pool

    # -- one half-sweep --------------------------------------------------------------------------

    def _sweep(self, ops: _NumpyOps | _TorchOps, pool: ThreadPoolExecutor, blocks: list[_Block],
               fixed: Any, reg_diag: Any, out: Any, solver: str) -> None:
        """Solve every row of `blocks` given the other side's factors `fixed`; writes `out`."""
        if ops.name == "numba":
            shift = self.alpha0 * _gram(pool, fixed)
            self._sweep_compiled(pool, blocks[0], fixed, shift, reg_diag, out, solver)
            return
        shift = self.alpha0 * (fixed.T @ fixed)  # α₀ YᵀY: the Gramian trick, once per sweep
        diagonal = ops.arange(self.factors)

        def solve(block: _Block) -> None:
            gathered = ops.gather_rows(fixed, block.neighbours)  # (B, L, k)
            rhs = (block.lin_weights[:, None, :] @ gathered)[:, 0, :]  # Y_Sᵀ l
            lam = reg_diag[block.rows]
            if solver == "cholesky":
                systems = (gathered * block.quad_weights[..., None]).mT @ gathered
                systems += shift
                systems[:, diagonal, diagonal] += lam[:, None]
                try:
                    out[block.rows] = ops.cholesky_solve(systems, rhs)
                except _NotPositiveDefinite:
                    raise self._not_positive_definite() from None
            else:
                out[block.rows] = _conjugate_gradient(ops, gathered, block.quad_weights, shift,
                                                      lam, rhs, out[block.rows], self.cg_steps)

        list(pool.map(solve, blocks))

    def _sweep_compiled(self, pool: ThreadPoolExecutor, side: _CsrSide, fixed: np.ndarray,
                        shift: np.ndarray, reg_diag: np.ndarray, out: np.ndarray,
                        solver: str) -> None:
        """`_sweep` of the numba back-end: the chunks of `side` by a compiled kernel."""
        from linrec.models import _als_kernels as kernels

        args = (side.indptr, side.indices, side.quad_weights, side.lin_weights, fixed,
                np.ascontiguousarray(shift, dtype=fixed.dtype), reg_diag)
        if solver == "cg":
            _map_chunks(pool, side.chunks,
                        lambda rows: kernels.cg_rows(*args, rows, out, self.cg_steps))
            return
        failures = _map_chunks(pool, side.chunks,
                               lambda rows: kernels.cholesky_rows(*args, rows, out))
        if any(failures):
            raise self._not_positive_definite()

    def _not_positive_definite(self) -> ConfigError:
        return ConfigError(f"{self.name}: an ALS system is not positive definite "
                           f"(reg={self.reg}, alpha0={self.alpha0}); use reg > 0")

    # -- objective -------------------------------------------------------------------------------

    def _objective(self, ops: _NumpyOps | _TorchOps, pool: ThreadPoolExecutor,
                   user_blocks: list[_Block], user_factors: Any, item_factors: Any,
                   user_reg: Any, item_reg: Any) -> float:
        """The training objective: Σ_S (q ŷ² − 2 l ŷ + l) + α₀ Σ_{u,i} ŷ² + Σ_r Λ_r ‖factor_r‖²,
        with Σ_{u,i} ŷ² = ⟨WᵀW, HᵀH⟩ (no dense score matrix)."""

        def observed(block: _Block) -> float:
            predicted = ops.matvec(ops.gather_rows(item_factors, block.neighbours),
                                   user_factors[block.rows])
            value = (block.quad_weights * predicted - 2.0 * block.lin_weights) * predicted
            return float((value + block.lin_weights).sum())

        if ops.name == "numba":
            from linrec.models._als_kernels import observed_loss

            side = user_blocks[0]
            parts = _map_chunks(pool, side.chunks, lambda rows: observed_loss(
                side.indptr, side.indices, side.quad_weights, side.lin_weights, user_factors,
                item_factors, rows))
            total = math.fsum(np.concatenate(parts))  # in the fixed order of the rows
        else:
            total = math.fsum(pool.map(observed, user_blocks))
        total += self.alpha0 * float(((user_factors.T @ user_factors)
                                      * (item_factors.T @ item_factors)).sum())
        total += float((user_reg * (user_factors * user_factors).sum(1)).sum())
        total += float((item_reg * (item_factors * item_factors).sum(1)).sum())
        return total

    # -- exact steps for given interactions (fold-in, tests) -------------------------------------

    def solve_users(self, interactions: sp.csr_matrix,
                    item_factors: np.ndarray | None = None) -> np.ndarray:
        """Exact user step (Cholesky): factors (rows x k) of the rows of `interactions`
        (rows x n_items) given `item_factors` (default: the fitted ones)."""
        if item_factors is None:
            self.check_fitted()
            item_factors = self.item_factors_
        item_factors = np.asarray(item_factors)
        pattern = binary_pattern(interactions, f"{self.name}.solve_users", item_factors.shape[0])
        counts = np.diff(pattern.indptr)
        confidence = self.confidence(counts, pattern.shape[1])
        return self._exact_side(pattern, np.repeat(self.observed_weight(confidence), counts),
                                np.repeat(confidence, counts),
                                self.regularization(counts, pattern.shape[1]), item_factors)

    def solve_items(self, interactions: sp.csr_matrix, user_factors: np.ndarray) -> np.ndarray:
        """Exact item step (Cholesky): item factors (n_items x k) given `user_factors`
        (n_users x k) for the users x items matrix `interactions`."""
        user_factors = np.asarray(user_factors)
        pattern = binary_pattern(interactions, f"{self.name}.solve_items")
        if pattern.shape[0] != user_factors.shape[0]:
            raise DataError(f"{self.name}.solve_items: {pattern.shape[0]} users in "
                            f"interactions but user_factors has {user_factors.shape[0]} rows")
        by_item = pattern.T.tocsr()
        confidence = self.confidence(np.diff(pattern.indptr), pattern.shape[1])
        quad = self.observed_weight(confidence)
        return self._exact_side(by_item, quad[by_item.indices], confidence[by_item.indices],
                                self.regularization(np.diff(by_item.indptr), pattern.shape[0]),
                                user_factors)

    def _exact_side(self, pattern: sp.csr_matrix, quad_nnz: np.ndarray, lin_nnz: np.ndarray,
                    reg_diag: np.ndarray, fixed: np.ndarray) -> np.ndarray:
        if fixed.ndim != 2 or fixed.shape[1] != self.factors:
            raise DataError(f"{self.name}: factors of shape {fixed.shape}, need "
                            f"(n, {self.factors})")
        ops = self._ops()
        blocks = _build_blocks(pattern, quad_nnz, lin_nnz, ops,
                               self._bytes_per_row("cholesky"), self.block_size,
                               _BLOCK_BYTES["cholesky"])
        out = ops.array(np.zeros((pattern.shape[0], self.factors)))
        with self._workers(ops) as pool:
            self._sweep(ops, pool, blocks, ops.array(fixed), ops.array(reg_diag), out,
                        "cholesky")
        return ops.numpy(out)




#: row blocks of the Gram matrix YᵀY: a fixed number, so the sum does not depend on the threads
_GRAM_PARTS = 4


def _gram(pool: ThreadPoolExecutor, matrix: np.ndarray) -> np.ndarray:
    """matrixᵀ matrix (k x k) as the sum of _GRAM_PARTS row-block products (`syrk`, one BLAS
    thread each), taken by the pool's threads: the Gram matrix of a sweep on every core."""
    blocks = np.array_split(matrix, _GRAM_PARTS)
    return sum(pool.map(lambda block: block.T @ block, blocks))


def _map_chunks(pool: ThreadPoolExecutor, chunks: list[np.ndarray],
                solve: Callable[[np.ndarray], Any]) -> list[Any]:
    """solve(chunk) for every chunk, in the pool's threads (each takes the next chunk when it
    finishes one), or in this thread when there is a single chunk. Results in chunk order."""
    if len(chunks) == 1:
        return [solve(chunks[0])]
    return list(pool.map(solve, chunks))


def _conjugate_gradient(ops: _NumpyOps | _TorchOps, gathered: Any, quad_weights: Any,
                        shift: Any, lam: Any, rhs: Any, start: Any, steps: int) -> Any:
    """`steps` CG iterations from `start` for every row b of the block:
    (Y_bᵀ diag(q_b) Y_b + α₀YᵀY + Λ_b I) x_b = rhs_b, without forming the k x k systems.
    gathered (B, L, k), quad_weights (B, L), shift (k, k), lam (B,), rhs / start (B, k)."""

    def apply(direction: Any) -> Any:
        projected = ops.matvec(gathered, direction) * quad_weights  # (B, L)
        return ((projected[:, None, :] @ gathered)[:, 0, :] + direction @ shift
                + lam[:, None] * direction)

    solution = start
    residual = rhs - apply(solution)
    direction = residual
    res_norm = (residual * residual).sum(1)
    for _ in range(steps):
        image = apply(direction)
        curvature = (direction * image).sum(1)
        step = res_norm / (curvature + (curvature == 0))  # 0/1 once a row has converged
        solution = solution + step[:, None] * direction
        residual = residual - step[:, None] * image
        new_norm = (residual * residual).sum(1)
        direction = residual + (new_norm / (res_norm + (res_norm == 0)))[:, None] * direction
        res_norm = new_norm
    return solution


# --------------------------------------------------------------------------------------------
# Debiased iALS


class DebiasedIALS(IALS):
    """Debiased iALS (Jin & Li 2023, Theorems 2 and 3; Li 2023, eq. 99): the first line of eq. 99
    becomes Σ_u [ c_u Σ_{i∈I_u⁺} ((ŷ_ui − 1)² − α₀ ŷ_ui²) + α₀ Σ_t ŷ_ut² ] (regularizer kept),
    so the user step is w_u = (c_u(1−α₀) H_SᵀH_S + α₀HᵀH + Λ_u I)⁻¹ c_u H_Sᵀ1.

    c_u = τ_u⁺ |I| / |I_u⁺| (Li 2023, App. A.3) with the prior τ_u⁺ of
    `linrec.models.positive_prior` (ratio_alpha gives c_u = 1 + prior_alpha, constant).
    Requires 0 <= alpha0 < 1. Theorem 2: for constant c, one step equals the iALS step with
    α₀' = α₀/((1−α₀)c), λ' = λ/((1−α₀)c) times 1/(1−α₀), from the same fixed side (exact for
    ν = 0). A whole fit is the iALS fit at α₀' and λ' = λ/c instead, its factors × √(1−α₀)
    on both sides, when started from the initial factors × √(1−α₀) (ν = 0): the objective is
    then (1−α₀)/c times iALS's, and exact alternating steps keep that scaling.
    """

    config_class = DebiasedIALSConfig

    def confidence(self, row_counts: np.ndarray, n_items: int) -> np.ndarray:
        """c_u = τ_u⁺|I|/|I_u⁺| (Li 2023, App. A.3); 1 for empty rows (they have no positives)."""
        counts = np.asarray(row_counts, dtype=np.float64)
        tau = self.config.tau_plus_of(counts, n_items)
        return np.where(counts > 0, tau * n_items / np.maximum(counts, 1.0), 1.0)

    def observed_weight(self, confidence: np.ndarray) -> np.ndarray:
        """q_u = c_u(1 − α₀): c(ŷ−1)² − cα₀ŷ² = c(1−α₀)ŷ² − 2cŷ + c."""
        return confidence * (1.0 - self.alpha0)


# --------------------------------------------------------------------------------------------
# WMF through implicit


class WMF(_FactorModel):
    """Weighted MF, Σ_{u,i} c_ui (x_ui − p_uᵀq_i)² + λ(‖P‖² + ‖Q‖²) (Hu et al. 2008; Li 2023, eq.
    64, Hu et al.), fitted by `implicit.cpu.als.AlternatingLeastSquares`. Missing entries have
    weight 1; observed entries weight c = alpha (confidence="alpha", implicit's convention) or c = 1
    + alpha (confidence="one_plus_alpha", Hu et al.'s c = 1 + α·x). Hu et al. 2008; Li 2023, eq. 64
    leaves open which one the dissertation's "C" is, so both are expressible.

    Parameters: factors, reg λ, alpha, confidence, iterations, seed, use_cg (implicit's CG
    solver, 3 steps), num_threads (implicit's OpenMP threads, 0 = all cores; BLAS is held to one
    thread meanwhile, which also silences implicit's threadpool warning), dtype, record_loss
    (implicit's training loss per iteration into loss_history_; costs one pass per iteration).
    Fold-in (`users=None`) uses implicit's exact `recalculate_user`.
    """

    config_class = WMFConfig

    @property
    def observed_confidence(self) -> float:
        """c of an observed entry (missing entries have weight 1)."""
        return self.alpha if self.confidence == "alpha" else 1.0 + self.alpha

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        """`iterations` ALS sweeps of implicit on train (users x items, binary)."""
        from implicit.cpu.als import AlternatingLeastSquares

        pattern = train.astype(np.float32)  # binary (Recommender.fit)
        history: list[float] = []
        with blas_threads(1), warnings.catch_warnings():
            # implicit warns about BLAS threads once per process; BLAS is limited here
            warnings.filterwarnings("ignore", message=".*threadpool.*", category=RuntimeWarning)
            model = AlternatingLeastSquares(
                factors=self.factors, regularization=self.reg, alpha=self.observed_confidence,
                dtype=np.dtype(self.dtype), use_cg=self.use_cg, iterations=self.iterations,
                calculate_training_loss=self.record_loss, num_threads=self.num_threads,
                random_state=np.random.default_rng(self.seed))
            model.fit(pattern, show_progress=False,
                      callback=(lambda _it, _sec, loss: history.append(float(loss)))
                      if self.record_loss else None)
        self.model_ = model
        self.user_factors_ = np.asarray(model.user_factors)
        self.item_factors_ = np.asarray(model.item_factors)
        self.loss_history_ = np.asarray(history)

    def solve_users(self, foldin: sp.csr_matrix) -> np.ndarray:
        """Exact user factors (rows x k) of the rows of `foldin` with the item factors fixed."""
        self.check_fitted()
        pattern = binary_pattern(foldin, "wmf.solve_users",
                                 self.item_factors_.shape[0]).astype(np.float32)
        with blas_threads(1):
            return np.asarray(self.model_.recalculate_user(np.arange(pattern.shape[0]),
                                                           pattern))

