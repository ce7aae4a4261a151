"""EASE and its family: DLAE, EDLAE (full rank and low rank), debiased EASE
(Steck 2019, 2020; Jin & Li 2023, Theorem 3; docs/concepts/models.md).

Every model here learns a dense item-item matrix W (n_items x n_items) from one Gram matrix
G = XᵀX and one in-place SPD inverse (`linrec.models.linalg`); scores are `foldin @ W`.
The loss is the one *without* the ½ of the dissertation's eq. 59 (Steck's, and its eq. 100).
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from linrec.errors import NumericalError
from linrec.hardware import blas_threads
from linrec.models.base import Recommender, Validation
from linrec.models.configs import (
    DebiasedEASEConfig,
    DLAEConfig,
    EASEConfig,
    EDLAEConfig,
    LowRankEDLAEConfig,
)
from linrec.models.device import is_tensor, to_device, to_host, torch_device
from linrec.models.linalg import (
    add_to_diagonal,
    cast_like,
    check_dense_memory,
    check_device_memory,
    gram,
    spd_inverse,
    thread_count,
    zero_diagonal_weights,
)

log = logging.getLogger(__name__)
#: dense n x n arrays alive at the peak of `fit` (G, inverted in place) plus scratch headroom
_FIT_MATRICES = 1.25
#: on a CUDA device: G, its Cholesky factor and the inverse (linrec.models.device.spd_inverse)
_DEVICE_MATRICES = 3.0


#: fold-in rows from which the compiled, threaded, column-blocked product scores a batch; below,
#: scipy's (bitwise the same): a process's first small request then skips numba's import and
#: the kernel's load (about half a second of a 100-user call)
COMPILED_FROM_ROWS = 256


class ItemItemRecommender(Recommender):
    """Base of the dense item-item models: fit builds G and hands it to `_weights_from_gram`,
    score(foldin) = foldin @ W (rows x n_items, the model's dtype; bitwise scipy's product, by
    a threaded kernel). `users` is ignored. `num_threads` caps the threads of fit and score
    (0: all cores). A config `device` other than "cpu" runs `_weights_from_gram` on that torch
    device (G copied there, W copied back; linrec.models.device); scoring stays on the host."""

    binary_input = False  # the closed form takes weighted interactions as they are

    W_: np.ndarray

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        """W from the dense Gram matrix G (n x n, may be overwritten)."""
        raise NotImplementedError

    def _memory_alternative(self, n_items: int) -> str:
        return "Use dtype=float32, or a low-rank model (model=lrr with rank <= 2000)."

    def _dense_matrices(self) -> float:
        """Dense n x n arrays alive at the peak of fit."""
        return _FIT_MATRICES

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        X = sp.csr_matrix(train, dtype=self.dtype)
        n_items = X.shape[1]
        what = f"{self.name} on {n_items} items"
        name = getattr(self.config, "device", "cpu")  # a plugin's config may have none
        target = None if name == "cpu" else torch_device(name, f"{self.name}.device")
        # on a device the host holds G, then W (one array at a time)
        check_dense_memory(n_items, self.dtype, 1.0 if target else self._dense_matrices(), what,
                           self._memory_alternative(n_items))
        if target is not None:
            check_device_memory(n_items, self.dtype, _DEVICE_MATRICES, what,
                                self._memory_alternative(n_items), target)
        threads = thread_count(self.num_threads)
        with blas_threads(threads):
            G = gram(X, self.dtype, n_threads=threads)
            if target is None:
                self.W_ = self._weights_from_gram(G)
                return
            G = to_device(G, target)
            self.W_ = to_host(self._weights_from_gram(G))

    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        if foldin.shape[0] < COMPILED_FROM_ROWS:  # scipy's product: the same bits, one thread
            return np.asarray(sp.csr_matrix(foldin, dtype=self.W_.dtype) @ self.W_)
        from linrec.models._sparse_dense import sparse_dense_product  # numba, when scoring

        return sparse_dense_product(foldin, self.W_, thread_count(self.num_threads))

    def weights(self) -> np.ndarray:
        self.check_fitted()
        return self.W_


class EASE(ItemItemRecommender):
    """EASE (Steck 2019; Li 2023, eq. 100): min ‖X − XW‖² + λ‖W‖² s.t. diag(W) = 0;
    P = (G + λI)⁻¹, W = I − P·diagM(1 ⊘ diag(P))."""

    config_class = EASEConfig

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        P = spd_inverse(add_to_diagonal(G, self.lam))
        return zero_diagonal_weights(P)


def dropout_penalty(G: np.ndarray, p: float, lam: float) -> np.ndarray:
    """Diagonal Λ = p/(1−p)·diag(G) + λ (length n, float64) of DLAE/EDLAE (Steck 2020, irspack's
    form); a tensor for a tensor G."""
    diagonal = G.diagonal()
    diagonal = diagonal.double() if is_tensor(G) else diagonal.astype(np.float64)
    return p / (1.0 - p) * diagonal + lam


class DLAE(ItemItemRecommender):
    """Denoising linear autoencoder (Steck 2020): min ‖X − XW‖² + ‖Λ^{1/2}W‖², no diagonal
    constraint; W = (G + Λ)⁻¹G = I − (G + Λ)⁻¹Λ."""

    config_class = DLAEConfig

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        penalty = cast_like(dropout_penalty(G, self.p, self.lam), G)
        P = spd_inverse(add_to_diagonal(G, penalty))
        P *= -penalty[None, :]  # −PΛ: column j scaled by Λ_jj
        return add_to_diagonal(P, 1.0)


class EDLAE(ItemItemRecommender):
    """Emphasized DLAE, full rank (Steck 2020): the DLAE objective with diag(W) = 0;
    P = (G + Λ)⁻¹, W = I − P·diagM(1 ⊘ diag(P))."""

    config_class = EDLAEConfig

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        penalty = cast_like(dropout_penalty(G, self.p, self.lam), G)
        return zero_diagonal_weights(spd_inverse(add_to_diagonal(G, penalty)))


class DebiasedEASE(ItemItemRecommender):
    """Debiased EASE (Jin & Li 2023, Theorems 2 and 3; Li 2023, eqs. 101–103): min ‖X − XW‖² −
    α‖XW‖² + λ‖W‖² s.t. diag(W) = 0.

    From its own KKT conditions: ((1−α)G + λI)W = G − diagM(ν) with ν chosen so that diag(W) = 0,
    hence with Q = ((1−α)G + λI)⁻¹: W = (1/(1−α))·(I − Q·diagM(1 ⊘ diag(Q))) (eq. 103; Q is
    P/(1−α) for eq. 103's P, and the ratios Q_ij/Q_jj = P_ij/P_jj)."""

    config_class = DebiasedEASEConfig

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        G *= 1.0 - self.alpha
        Q = spd_inverse(add_to_diagonal(G, self.lam))
        return zero_diagonal_weights(Q, scale=1.0 / (1.0 - self.alpha))


class LowRankEDLAE(ItemItemRecommender):
    """Low-rank EDLAE (Steck 2020, dissertation A.4.2): the EDLAE objective with
    W = B − diagM(diag(B)), B = UVᵀ of rank `rank`, solved by ADMM on the split β = diag(B).

    Objective (eq. 109–110): ‖X(I + diagM(β)) − XB‖² + ‖Λ^{1/2}B‖² − ‖Λ^{1/2}diagM(β)‖²
    s.t. β = diag(B), which equals the EDLAE loss of W when the constraint holds. With Ω = Λ + ωI
    and scaled multipliers γ, one iteration is (Steck 2020, eq. 111):

    * U ← (G + Λ + Ω)⁻¹ R V (VᵀV)⁻¹ and Vᵀ ← (Uᵀ(G + Λ + Ω)U)⁻¹ UᵀR (one ALS sweep), where
      R = G·diagM(1 + β) + Ω·T and the penalty target T has diagonal β − γ.
    * β ← [diag(GUVᵀ) − diag(G) + diag(Ω) ⊙ (diag(UVᵀ) + γ)] ⊘ [diag(G) + diag(Ω − Λ)]
    * γ ← γ + diag(UVᵀ) − β

    Deviation from the printed updates (Li 2023, eq. 111): there T = diagM(β − γ), so the Ω penalty
    also pulls the off-diagonal of B to 0, and the full-rank fixed point is EDLAE with penalty 2Λ +
    ωI, not Λ. Here the off-diagonal of T is the previous B (a proximal term that vanishes at a
    fixed point), so at rank = n_items the iteration converges to the full-rank EDLAE (tested).
    Cost: one n³ inverse, then O(n²·rank) per iteration; memory about two n x n arrays."""

    config_class = LowRankEDLAEConfig

    def _memory_alternative(self, n_items: int) -> str:
        return "Use dtype=float32, or model=lrr with rank <= 2000."

    def _dense_matrices(self) -> float:
        return 2 * _FIT_MATRICES

    def _weights_from_gram(self, G: np.ndarray) -> np.ndarray:
        """W of the ADMM iteration; a singular solve in float32 is retried in float64 (the
        result cast back), a second failure is a NumericalError that says what to change."""
        try:
            return self._admm(G)
        except np.linalg.LinAlgError as exc:
            failure = exc
        if G.dtype != np.float64:
            log.warning("%s: singular solve in %s (%s); retrying in float64", self.name,
                        G.dtype, failure)
            try:
                return self._admm(G.astype(np.float64)).astype(G.dtype)
            except np.linalg.LinAlgError as exc:  # the retry failed too: explain, not a traceback
                failure = exc
        raise NumericalError(
            f"{self.name}: the ADMM solve is singular ({failure}) even in float64; raise "
            f"omega (now {self.omega}) or lam (now {self.lam}), or lower rank") from failure

    def _components(self, G: np.ndarray) -> np.ndarray:
        """V (n x k): the top-k eigenvectors of G with k = the rank (`rank_for`: an explicit rank
        above n is a ConfigError, as for the other low-rank models) lowered to the numerical rank
        of G. Directions with a zero eigenvalue carry no signal and make the first ALS step
        singular (G has rank <= n_users, e.g. 943 on ML-100K)."""
        n = G.shape[0]
        rank = self.config.rank_for(n)
        values, vectors = sla.eigh(G, subset_by_index=[n - rank, n - 1])
        keep = values > n * np.finfo(G.dtype).eps * max(values.max(initial=0.0), 1.0)
        if not keep.all():
            log.warning("%s: rank %d lowered to %d, the numerical rank of XᵀX", self.name, rank,
                        int(keep.sum()))
        self.rank_ = int(keep.sum())
        return vectors[:, keep].astype(G.dtype)

    def _admm(self, G: np.ndarray) -> np.ndarray:
        n = G.shape[0]
        g = np.diag(G).copy()
        penalty = dropout_penalty(G, self.p, self.lam).astype(G.dtype)
        omega = penalty + G.dtype.type(self.omega)  # Ω = Λ + ωI (diagonal, as a vector)
        A_inv = spd_inverse(add_to_diagonal(G.copy(), penalty + omega))  # (G + Λ + Ω)⁻¹
        V = self._components(G)
        rank = V.shape[1]
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
            self.n_iter_run_ = iteration
            if residual < self.tol * max(1.0, np.abs(beta).max()):
                break
        del A_inv
        W = U @ V.T
        np.fill_diagonal(W, 0.0)
        return W

