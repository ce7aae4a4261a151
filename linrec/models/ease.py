"""EASE and its family: DLAE, EDLAE (full rank and low rank), debiased EASE
(spec/linear_models.md §3.1, §3.3, §3.10; spec/losses.md §4.3–4.4).

Every model here learns a dense item-item matrix W (n_items x n_items) from one Gram matrix
G = XᵀX and one in-place SPD inverse (`linrec.models.linalg`); scores are `foldin @ W`.
The loss is the one *without* the ½ of eq. 59 (Steck's and eq. 100's), spec §3.1.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from linrec.errors import ConfigError, DataError
from linrec.models.base import Recommender
from linrec.models.linalg import (
    add_to_diagonal,
    blas_threads,
    check_dense_memory,
    float_dtype,
    gram,
    spd_inverse,
    zero_diagonal_weights,
)

#: dense n x n arrays alive at the peak of `fit` (G, inverted in place) plus scratch headroom
_FIT_MATRICES = 1.25


def _check_nonnegative(name: str, value: float, model: str) -> float:
    value = float(value)
    if not np.isfinite(value) or value < 0:
        raise ConfigError(f"{model}.{name}={value!r} is out of range; allowed: a finite value >= 0")
    return value


def _check_dropout(p: float, model: str) -> float:
    p = float(p)
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"{model}.p={p!r} (dropout probability) is out of range; allowed: [0, 1)")
    return p


def as_train_matrix(train: sp.spmatrix, dtype: np.dtype) -> sp.csr_matrix:
    """The users x items training matrix as CSR of `dtype` (DataError if it is not a 2-D matrix)."""
    if not (sp.issparse(train) or isinstance(train, np.ndarray)) or train.ndim != 2:
        raise DataError("train must be a 2-D users x items sparse matrix, got "
                        f"{type(train).__name__}")
    return sp.csr_matrix(train, dtype=dtype)


class ItemItemRecommender(Recommender):
    """Base of the dense item-item models: fit builds G and hands it to `_weights_from_gram`,
    score(foldin) = foldin @ W (rows x n_items, the model's dtype). `users` is ignored.
    `num_threads` caps the Gram and BLAS threads during fit (0: all cores)."""

    name = "item_item"
    W: np.ndarray

    def __init__(self, dtype: str = "float32", num_threads: int = 0) -> None:
        self.dtype = float_dtype(dtype)
        if int(num_threads) < 0:
            raise ConfigError(f"{self.name}.num_threads={num_threads!r} is out of range; "
                              "allowed: 0 (all cores) or >= 1")
        self.num_threads = int(num_threads)

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        """W from the dense Gram matrix G (n x n, may be overwritten)."""
        raise NotImplementedError

    def _memory_alternative(self, n_items: int) -> str:
        return "Use dtype=float32, or a low-rank model (model=lrr with rank <= 2000)."

    def fit(self, train: sp.csr_matrix, valid=None) -> ItemItemRecommender:
        X = as_train_matrix(train, self.dtype)
        n_items = X.shape[1]
        check_dense_memory(n_items, self.dtype, _FIT_MATRICES, f"{self.name} on {n_items} items",
                           self._memory_alternative(n_items))
        threads = self.num_threads or None
        with blas_threads(threads):
            self.W = self._weights_from_gram(gram(X, self.dtype, n_threads=threads))
        return self

    def score(self, foldin: sp.csr_matrix, users: np.ndarray | None = None) -> np.ndarray:
        if not hasattr(self, "W"):
            raise ConfigError(f"{self.name}: call fit() before score()")
        if foldin.shape[1] != self.W.shape[0]:
            raise DataError(f"{self.name}: foldin has {foldin.shape[1]} items, the model was "
                            f"fitted on {self.W.shape[0]}")
        return np.asarray(sp.csr_matrix(foldin, dtype=self.W.dtype) @ self.W)


class EASE(ItemItemRecommender):
    """EASE (spec §3.1): min ‖X − XW‖² + λ‖W‖² s.t. diag(W) = 0;
    P = (G + λI)⁻¹, W = I − P·diagM(1 ⊘ diag(P))."""

    name = "ease"

    def __init__(self, lam: float = 500.0, dtype: str = "float32", num_threads: int = 0) -> None:
        super().__init__(dtype, num_threads)
        self.lam = _check_nonnegative("lam", lam, self.name)

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        P = spd_inverse(add_to_diagonal(G, self.lam))
        return zero_diagonal_weights(P)


def dropout_penalty(G: np.ndarray, p: float, lam: float) -> np.ndarray:
    """Diagonal Λ = p/(1−p)·diag(G) + λ (length n) of DLAE/EDLAE (spec §3.3, irspack's form)."""
    return p / (1.0 - p) * np.diag(G).astype(np.float64) + lam


class _DropoutModel(ItemItemRecommender):
    """DLAE/EDLAE parameters: dropout probability p in [0, 1) and extra L2 λ >= 0."""

    def __init__(self, p: float = 0.25, lam: float = 10.0, dtype: str = "float32",
                 num_threads: int = 0) -> None:
        super().__init__(dtype, num_threads)
        self.p = _check_dropout(p, self.name)
        self.lam = _check_nonnegative("lam", lam, self.name)


class DLAE(_DropoutModel):
    """Denoising linear autoencoder (spec §3.3): min ‖X − XW‖² + ‖Λ^{1/2}W‖², no diagonal
    constraint; W = (G + Λ)⁻¹G = I − (G + Λ)⁻¹Λ."""

    name = "dlae"

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        penalty = dropout_penalty(G, self.p, self.lam)
        P = spd_inverse(add_to_diagonal(G, penalty.astype(G.dtype)))
        P *= -penalty.astype(P.dtype)[None, :]  # −PΛ: column j scaled by Λ_jj
        return add_to_diagonal(P, 1.0)


class EDLAE(_DropoutModel):
    """Emphasized DLAE, full rank (spec §3.3): the DLAE objective with diag(W) = 0;
    P = (G + Λ)⁻¹, W = I − P·diagM(1 ⊘ diag(P))."""

    name = "edlae"

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        penalty = dropout_penalty(G, self.p, self.lam)
        return zero_diagonal_weights(spd_inverse(add_to_diagonal(G, penalty.astype(G.dtype))))


class DebiasedEASE(ItemItemRecommender):
    """Debiased EASE (spec §3.10, losses.md §4.4): min ‖X − XW‖² − α‖XW‖² + λ‖W‖² s.t. diag(W) = 0.

    From its own KKT conditions: ((1−α)G + λI)W = G − diagM(ν) with ν chosen so that diag(W) = 0,
    hence with Q = ((1−α)G + λI)⁻¹: W = (1/(1−α))·(I − Q·diagM(1 ⊘ diag(Q))) (eq. 103; Q is
    P/(1−α) for eq. 103's P, and the ratios Q_ij/Q_jj = P_ij/P_jj)."""

    name = "debiased_ease"

    def __init__(self, lam: float = 500.0, alpha: float = 0.0, dtype: str = "float32",
                 num_threads: int = 0) -> None:
        super().__init__(dtype, num_threads)
        self.lam = _check_nonnegative("lam", lam, self.name)
        alpha = float(alpha)
        if not 0.0 <= alpha < 1.0:
            raise ConfigError(f"{self.name}.alpha={alpha!r} is out of range; allowed: [0, 1) "
                              "(alpha = (c-1)/c, spec/losses.md §4.4)")
        self.alpha = alpha

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        G *= 1.0 - self.alpha
        Q = spd_inverse(add_to_diagonal(G, self.lam))
        return zero_diagonal_weights(Q, scale=1.0 / (1.0 - self.alpha))


class LowRankEDLAE(_DropoutModel):
    """Low-rank EDLAE (spec §3.3, dissertation A.4.2): the EDLAE objective with
    W = B − diagM(diag(B)), B = UVᵀ of rank `rank`, solved by ADMM on the split β = diag(B).

    Objective (eq. 109–110): ‖X(I + diagM(β)) − XB‖² + ‖Λ^{1/2}B‖² − ‖Λ^{1/2}diagM(β)‖²
    s.t. β = diag(B), which equals the EDLAE loss of W when the constraint holds. With Ω = Λ + ωI
    and scaled multipliers γ, one iteration is (spec §3.3, eq. 111):

    * U ← (G + Λ + Ω)⁻¹ R V (VᵀV)⁻¹ and Vᵀ ← (Uᵀ(G + Λ + Ω)U)⁻¹ UᵀR (one ALS sweep), where
      R = G·diagM(1 + β) + Ω·T and the penalty target T has diagonal β − γ.
    * β ← [diag(GUVᵀ) − diag(G) + diag(Ω) ⊙ (diag(UVᵀ) + γ)] ⊘ [diag(G) + diag(Ω − Λ)]
    * γ ← γ + diag(UVᵀ) − β

    Deviation from the spec's reading: there T = diagM(β − γ), so the Ω penalty also pulls the
    off-diagonal of B to 0, and the full-rank fixed point is EDLAE with penalty 2Λ + ωI, not Λ.
    Here the off-diagonal of T is the previous B (a proximal term that vanishes at a fixed
    point), so at rank = n_items the iteration converges to the full-rank EDLAE (tested).
    Cost: one n³ inverse, then O(n²·rank) per iteration; memory about two n x n arrays."""

    name = "edlae_lowrank"

    def __init__(self, p: float = 0.25, lam: float = 10.0, rank: int = 1000, n_iter: int = 50,
                 tol: float = 1e-6, omega: float = 10.0, dtype: str = "float32",
                 num_threads: int = 0) -> None:
        super().__init__(p, lam, dtype, num_threads)
        self.omega = _check_nonnegative("omega", omega, self.name)
        if self.omega == 0:
            raise ConfigError(f"{self.name}.omega=0 is out of range; allowed: > 0")
        if int(rank) < 1 or int(n_iter) < 1:
            raise ConfigError(f"{self.name}: rank={rank!r}, n_iter={n_iter!r} are out of range; "
                              "allowed: >= 1")
        self.rank, self.n_iter, self.tol = int(rank), int(n_iter), float(tol)
        self.n_iter_run = 0

    def _memory_alternative(self, n_items: int) -> str:
        return "Use dtype=float32, or model=lrr with rank <= 2000."

    def fit(self, train: sp.csr_matrix, valid=None) -> LowRankEDLAE:
        n_items = train.shape[1]
        check_dense_memory(n_items, self.dtype, 2 * _FIT_MATRICES, f"{self.name} on {n_items} "
                           "items", self._memory_alternative(n_items))
        return super().fit(train, valid)

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        n, rank = G.shape[0], min(self.rank, G.shape[0])
        g = np.diag(G).copy()
        penalty = dropout_penalty(G, self.p, self.lam).astype(G.dtype)
        omega = penalty + G.dtype.type(self.omega)  # Ω = Λ + ωI (diagonal, as a vector)
        A_inv = spd_inverse(add_to_diagonal(G.copy(), penalty + omega))  # (G + Λ + Ω)⁻¹
        V = sla.eigh(G, subset_by_index=[n - rank, n - 1])[1].astype(G.dtype)
        U = np.zeros((n, rank), G.dtype)
        beta = np.zeros(n, G.dtype)
        gamma = np.zeros(n, G.dtype)
        for iteration in range(1, self.n_iter + 1):
            diag_b = np.einsum("ij,ij->i", U, V)
            shift = beta - gamma - diag_b  # T = UVᵀ − diagM(diag(UVᵀ)) + diagM(β − γ)
            VtV = V.T @ V
            RV = G @ ((1 + beta)[:, None] * V) + omega[:, None] * (U @ VtV + shift[:, None] * V)
            U_new = A_inv @ np.linalg.solve(VtV, RV.T).T
            GU = G @ U_new
            omega_u = omega[:, None] * U_new
            RtU = ((1 + beta)[:, None] * GU + V @ (U.T @ omega_u) + shift[:, None] * omega_u)
            UtAU = U_new.T @ (GU + (penalty + omega)[:, None] * U_new)
            V = np.linalg.solve(UtAU, RtU.T).T
            U = U_new
            diag_b = np.einsum("ij,ij->i", U, V)
            diag_gb = np.einsum("ij,ij->i", G @ U, V)
            beta_new = (diag_gb - g + omega * (diag_b + gamma)) / (g + omega - penalty)
            gamma += diag_b - beta_new
            residual = max(np.abs(diag_b - beta_new).max(), np.abs(beta_new - beta).max())
            beta = beta_new
            self.n_iter_run = iteration
            if residual < self.tol * max(1.0, np.abs(beta).max()):
                break
        del A_inv
        W = U @ V.T
        np.fill_diagonal(W, 0.0)
        return W
