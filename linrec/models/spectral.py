"""Spectral linear models: W = V_k diag(f) V_kᵀ from one eigendecomposition of G = XᵀX
(Jin et al. 2021; Li 2023, eqs. 65–74 and Algorithm 2; docs/concepts/models.md).

Public API (stable; used by `linrec.models.nearby`):
  Spectrum, compute_spectrum, clear_spectrum_cache,
  SpectralFilterModel (base: `filter(spectrum) -> f`), LRR, PureSVD, ClosedFormMF, Ridge,
  ProjectionCache, FilteredScorer, spectral_grid.
"""

from __future__ import annotations

import hashlib
import itertools
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from linrec.cache import file_lock
from linrec.errors import ConfigError, DataError
from linrec.models import spectrum_store
from linrec.models.base import Recommender, Validation, check_foldin, check_train
from linrec.models.configs import (
    MODEL_CONFIGS,
    SPECTRAL_FILTER,
    ClosedFormMFConfig,
    LRRConfig,
    PureSVDConfig,
    RidgeConfig,
    models_in,
)
from linrec.models.device import eigh as device_eigh
from linrec.models.device import to_device, torch_device
from linrec.models.linalg import check_dense_memory, check_device_memory, gram
from linrec.params import check_float_dtype, check_int
from linrec.registry import load

# partial eigh (scipy subset_by_index, driver evr) beats the full divide-and-conquer eigh only for
# a small fraction of the spectrum (measured: k = n/10 at 0.65x the time, k = n/4 at 1.0x).
_PARTIAL_EIGH_MAX_FRACTION = 0.2
# relative gap below which two eigenvalues count as tied (docs/concepts/models.md: never cut inside
# a tie)
_TIE_RTOL = 1e-10
# dense n x n matrices alive during compute_spectrum: G, the eigh work array (2n² for syevd)
_EIGH_DENSE_MATRICES = 3.0
_CACHE_SIZE = 2


# --------------------------------------------------------------------------------------------
# Spectrum of the Gram matrix


@dataclass(frozen=True, eq=False)
class Spectrum:
    """Leading eigenpairs of G = XᵀX (docs/concepts/models.md).

    eigenvalues: float64 (r,) e_i = σ_i², descending, clamped at 0.
    vectors: (n_items, r) orthonormal columns V in the same order (float64 or float32).
    r = n_items for a full decomposition, fewer for a partial one.
    """

    eigenvalues: np.ndarray
    vectors: np.ndarray

    def __post_init__(self) -> None:
        e, v = self.eigenvalues, self.vectors
        if e.ndim != 1 or v.ndim != 2 or v.shape[1] != e.shape[0]:
            raise DataError(
                f"Spectrum: eigenvalues shape {e.shape} and vectors shape {v.shape} disagree; "
                "need eigenvalues (r,) and vectors (n_items, r)"
            )

    @property
    def singular_values(self) -> np.ndarray:
        """σ_i = sqrt(e_i), float64 (r,), descending."""
        return np.sqrt(self.eigenvalues)

    @property
    def n_items(self) -> int:
        return self.vectors.shape[0]

    @property
    def n_components(self) -> int:
        return self.eigenvalues.shape[0]

    @property
    def is_full(self) -> bool:
        return self.n_components == self.n_items


_SPECTRUM_CACHE: OrderedDict[tuple[str, str], Spectrum] = OrderedDict()


def _matrix_key(train: sp.csr_matrix) -> str:
    """Content hash of a CSR matrix (structure, values and shape)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.asarray(train.shape, dtype=np.int64).tobytes())
    for arr in (train.indptr, train.indices, train.data):
        digest.update(str(arr.dtype).encode())
        digest.update(np.ascontiguousarray(arr).tobytes())
    return digest.hexdigest()


def clear_spectrum_cache() -> None:
    """Drop every cached Spectrum (frees their n_items x r arrays)."""
    _SPECTRUM_CACHE.clear()


def compute_spectrum(train: sp.csr_matrix, dtype: np.dtype | str = np.float64,
                     rank: int | None = None, cache: bool = True,
                     device: str = "cpu") -> Spectrum:
    """Eigendecomposition of G = XᵀX (docs/concepts/models.md): eigenvalues flipped to descending
    order and clamped at 0, eigenvectors in the same column order.

    train: CSR (n_users x n_items). dtype: float64 or float32 for G and V (eigenvalues are always
    returned as float64). rank: None for the full spectrum; otherwise at least `rank` leading
    components are returned (a partial `scipy.linalg.eigh(subset_by_index=...)` when that is
    cheaper, i.e. rank <= 0.2 n_items; else the full spectrum). Results are cached per training
    matrix content (a small LRU of 2 entries, and on disk for the other processes of a sweep:
    linrec.models.spectrum_store); a cached spectrum with enough components is reused.
    Raises MemoryBudgetError (with the estimate) before any work when G and the eigh workspace
    would not fit. Ties at a cut: the caller must not cut inside a group of equal eigenvalues.
    device: "cuda" or "cuda:<n>" decomposes there (torch's full eigh; the spectrum comes back
    to the host); its spectra are cached apart from the CPU's and not shared on disk.
    """
    train = check_train(train, "compute_spectrum")
    dtype = check_float_dtype(dtype, "compute_spectrum: dtype")
    n_items = train.shape[1]
    if rank is not None:
        rank = check_int(rank, "compute_spectrum: rank", ge=1)
        if rank > n_items:
            raise ConfigError(f"compute_spectrum: rank={rank} exceeds n_items={n_items}; "
                              f"allowed range 1..{n_items}")
    needed = n_items if rank is None else rank

    target = None if device == "cpu" else torch_device(device, "compute_spectrum: device")
    key = (_matrix_key(train), dtype.name, device) if cache else None
    if key is not None and key in _SPECTRUM_CACHE:
        cached = _SPECTRUM_CACHE[key]
        if cached.n_components >= needed:
            _SPECTRUM_CACHE.move_to_end(key)
            return cached
    limit = int(_PARTIAL_EIGH_MAX_FRACTION * min(train.shape))  # of the Gram decomposed
    if key is not None and needed <= limit:
        # a cached spectrum serves every later rank up to the partial limit (a rank sweep then
        # decomposes once, not once per larger rank): about 30 % dearer than the smallest
        needed = max(needed, limit)
    if target is not None:
        spectrum = _decompose_on(train, dtype, needed, target)
    elif key is not None and spectrum_store.enabled():
        # shared with the other processes of a sweep: the first computes, the others read
        stored = spectrum_store.load(key[0], dtype, needed)
        if stored is None:
            with file_lock(spectrum_store.lock_path(key[0], dtype)):
                stored = spectrum_store.load(key[0], dtype, needed)
                if stored is None:
                    spectrum = _decompose(train, dtype, needed)
                    spectrum_store.save(key[0], dtype, spectrum.eigenvalues, spectrum.vectors)
                    stored = spectrum.eigenvalues, spectrum.vectors
        spectrum = Spectrum(eigenvalues=stored[0], vectors=stored[1])
    else:
        spectrum = _decompose(train, dtype, needed)
    if key is not None:
        _SPECTRUM_CACHE[key] = spectrum
        _SPECTRUM_CACHE.move_to_end(key)
        while len(_SPECTRUM_CACHE) > _CACHE_SIZE:
            _SPECTRUM_CACHE.popitem(last=False)
    return spectrum


def _decompose(train: sp.csr_matrix, dtype: np.dtype, needed: int) -> Spectrum:
    """The eigendecomposition itself (compute_spectrum's docstring), read-only arrays.

    A partial spectrum (at most a fifth of the users' count) of a matrix with fewer users than
    items comes from the smaller user-side Gram XXᵀ = U diag(e) Uᵀ (the same non-zero eigenvalues
    as G = XᵀX), its item vectors V = Xᵀ U diag(e)^(-1/2): an m³ eigendecomposition instead of an
    n³ one (0.4x the time at Gowalla's 29 858 users and 40 981 items), exact in exact
    arithmetic. A component with
    e_i <= 0 has no item vector this way; the path is taken only when every requested
    component has e_i > 0 (else the item side is decomposed)."""
    n_users, n_items = train.shape
    partial = needed < n_items and needed <= _PARTIAL_EIGH_MAX_FRACTION * n_items
    if partial and n_users < n_items and needed <= _PARTIAL_EIGH_MAX_FRACTION * n_users:
        dual = _decompose_dual(train, dtype, needed)
        if dual is not None:
            return dual
    check_dense_memory(
        n_items, dtype, _EIGH_DENSE_MATRICES, what="eigendecomposition of the item Gram matrix",
        alternative="Use float32, a dataset with fewer items, or a partial rank.",
    )
    gram_matrix = gram(train, dtype)
    if partial:
        values, vectors = sla.eigh(gram_matrix, subset_by_index=[n_items - needed, n_items - 1],
                                   overwrite_a=True, check_finite=False)
    else:
        values, vectors = sla.eigh(gram_matrix, driver="evd", overwrite_a=True,
                                   check_finite=False)
    del gram_matrix
    return _spectrum(values, vectors, dtype)


def _decompose_on(train: sp.csr_matrix, dtype: np.dtype, needed: int, target: Any,
                  user_side: bool | None = None) -> Spectrum:
    """`_decompose` on a torch device: the Gram matrix of the smaller side (the users' when
    there are fewer users than items and `needed` of them, as in `_decompose_dual`) is built on
    the host, copied, and decomposed in full there; the `needed` leading pairs come back."""
    n_users, n_items = train.shape
    if user_side is None:
        user_side = n_users < n_items and needed <= n_users
    side = train.T.tocsr() if user_side else train
    n = side.shape[1]
    check_dense_memory(n, dtype, 1.0, what="the Gram matrix of the eigendecomposition",
                       alternative="Use float32 or a partial rank.")
    check_device_memory(n, dtype, _EIGH_DENSE_MATRICES, "the eigendecomposition of the Gram "
                        "matrix", "Use float32 or a partial rank.", target)
    values, vectors = device_eigh(to_device(gram(side, dtype), target), needed)
    if user_side:
        if values.min() <= 0:  # no item vector for a zero eigenvalue: decompose the item side
            return _decompose_on(train, dtype, needed, target, user_side=False)
        vectors = np.asarray(train.T @ vectors, dtype=dtype) / np.sqrt(values).astype(dtype)
    return _spectrum(values, vectors, dtype)


def _decompose_dual(train: sp.csr_matrix, dtype: np.dtype, needed: int) -> Spectrum | None:
    """The top `needed` components from the user-side Gram XXᵀ (see `_decompose`), or None when
    one of them has a zero eigenvalue."""
    n_users = train.shape[0]
    check_dense_memory(
        n_users, dtype, _EIGH_DENSE_MATRICES, what="eigendecomposition of the user Gram matrix",
        alternative="Use float32 or a partial rank.")
    user_gram = gram(train.T.tocsr(), dtype)
    values, user_vectors = sla.eigh(user_gram, subset_by_index=[n_users - needed, n_users - 1],
                                    overwrite_a=True, check_finite=False)
    del user_gram
    if values.min() <= 0:
        return None
    # V = Xᵀ U diag(e)^(-1/2): the item vectors of the same eigenvalues (ascending, as eigh's)
    vectors = np.asarray(train.T @ user_vectors, dtype=dtype) / np.sqrt(values).astype(dtype)
    return _spectrum(values, vectors, dtype)


def _spectrum(values: np.ndarray, vectors: np.ndarray, dtype: np.dtype) -> Spectrum:
    """eigh's ascending pairs as a read-only Spectrum in descending order."""
    # ascending -> descending (docs/concepts/models.md); copy makes the flipped columns contiguous
    eigenvalues = np.maximum(values[::-1].astype(np.float64), 0.0)
    vectors = np.ascontiguousarray(vectors[:, ::-1], dtype=dtype)
    # shared through the caches: read-only so that no model can alter another's spectrum
    eigenvalues.flags.writeable = False
    vectors.flags.writeable = False
    return Spectrum(eigenvalues=eigenvalues, vectors=vectors)


# --------------------------------------------------------------------------------------------
# Spectral-filter models


def _effective_rank(f: np.ndarray) -> int:
    """1 + index of the last non-zero filter value (0 when f is all zero)."""
    nonzero = np.flatnonzero(f)
    return int(nonzero[-1]) + 1 if nonzero.size else 0


def _warn_if_tied_cut(spectrum: Spectrum, k: int, who: str) -> None:
    """RuntimeWarning when the subspace V[:, :k] cuts a group of (near-)equal eigenvalues."""
    e = spectrum.eigenvalues
    if 0 < k < e.shape[0] and e[k - 1] - e[k] <= _TIE_RTOL * max(e[0], 1.0):
        warnings.warn(f"{who}: the cut at k={k} falls inside a group of tied eigenvalues "
                      f"(e_k={e[k - 1]:.6g}, e_k+1={e[k]:.6g}); the rank-k subspace is not "
                      "unique and scores depend on round-off. Choose another rank.",
                      RuntimeWarning, stacklevel=3)


def _filtered_scores(z: np.ndarray, f: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """S = (Z ⊙ f) V_kᵀ (docs/concepts/models.md) for Z (rows x k), f (k,), V_k (n_items x k)."""
    k = f.shape[0]
    return (z[:, :k] * f.astype(z.dtype, copy=False)) @ vectors[:, :k].T


class SpectralFilterModel(Recommender):
    """Base of every model W = V_k diag(f) V_kᵀ (docs/concepts/models.md; Jin et al. 2021, §3.3).

    Subclasses implement `filter(spectrum) -> f`, f float64 (k,) for the k leading components of
    `spectrum` (k = `_rank_for(n_items)`: the config's rank, auto-sized when null). After
    `fit(train)`: `spectrum_` (Spectrum, possibly shared through the cache), `filter_` float64
    (k_eff,) with trailing zeros of f trimmed, `vectors_` (n_items x k_eff) = V[:, :k_eff]. Scores
    are ((foldin @ V_k) ⊙ f) V_kᵀ; W is never formed.
    """

    binary_input = False  # the closed form takes weighted interactions as they are

    def filter(self, spectrum: Spectrum) -> np.ndarray:
        """f float64 (k,) applied to the k leading components of `spectrum`."""
        raise NotImplementedError

    def _rank_for(self, n_items: int) -> int:
        return self.config.rank_for(n_items)

    def _components(self, spectrum: Spectrum) -> int:
        """k = the model's rank, checked against the spectrum."""
        k = self._rank_for(spectrum.n_items)
        if k > spectrum.n_components:
            raise ConfigError(f"{self.name}: rank={k} needs {k} components but the "
                              f"spectrum has only {spectrum.n_components}")
        return k

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        """One (cached) eigendecomposition of XᵀX, then the filter."""
        rank = self._rank_for(train.shape[1])
        device = getattr(self.config, "device", "cpu")  # a plugin's config may have none
        if device != "cpu":
            torch_device(device, f"{self.name}.device")  # refused here, in the model's name
        spectrum = compute_spectrum(train, self.dtype,
                                    rank=None if rank == train.shape[1] else rank, device=device)
        self.fit_spectrum(spectrum)

    def fit_spectrum(self, spectrum: Spectrum) -> SpectralFilterModel:
        """Set the model from an existing spectrum (no decomposition)."""
        f = np.asarray(self.filter(spectrum), dtype=np.float64)
        k_eff = _effective_rank(f)
        _warn_if_tied_cut(spectrum, k_eff, self.name)
        self.spectrum_ = spectrum
        self.n_items_ = spectrum.n_items
        self.filter_ = f[:k_eff]
        # contiguous copy when truncated: sparse @ dense would copy a strided view on every call
        self.vectors_ = np.ascontiguousarray(spectrum.vectors[:, :k_eff])
        return self

    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        """Scores (foldin.shape[0] x n_items) = ((foldin V_k) ⊙ f) V_kᵀ; `users` is ignored."""
        z = np.asarray(foldin.astype(self.vectors_.dtype) @ self.vectors_)
        return _filtered_scores(z, self.filter_, self.vectors_)

    def weights(self) -> np.ndarray:
        """The dense W = V_k diag(f) V_kᵀ (n_items x n_items); for tests and small n only."""
        self.check_fitted()
        return (self.vectors_ * self.filter_.astype(self.vectors_.dtype)) @ self.vectors_.T


class LRR(SpectralFilterModel):
    """Low-rank (Tikhonov) regression, min_{rank W <= k} ‖X − XW‖² + ‖ΓW‖² (Jin et al. 2021; Li
    2023, eq. 66).

    Regularizer R = ΓᵀΓ = λI + p/(1−p)·diagM(diag(G)) [dropout p, low-rank DLAE, Li 2023, eq. 62]
    + gammaᵀgamma [explicit Γ: (r, n_items) matrix, or (n_items,) vector meaning diag(gamma)].
    * Only λ (dropout=0, gamma=None): spectral closed form eq. 70,
      W = V_k diag(σ_i²/(σ_i²+λ)) V_kᵀ, served by the shared spectrum.
    * Otherwise the general closed form eq. 68: W* = (G + R)⁻¹G, Q_k = top-k right singular
      vectors of the stacked X̃W* = [XW*; ΓW*] (= top-k eigenvectors of
      (X̃W*)ᵀX̃W* = G(G + R)⁻¹G), W = W* Q_k Q_kᵀ (about 5 dense n x n matrices).
    Hyper-parameters (Jin et al. 2021; Li 2023, eqs. 66–70): rank k (ML-20M 2000, Netflix 3000), lam
    λ (1e4, 4e4).
    """

    config_class = LRRConfig

    @property
    def is_spectral(self) -> bool:
        """True when R = λI, i.e. eq. 70 applies."""
        return self.dropout == 0.0 and self.gamma is None

    def filter(self, spectrum: Spectrum) -> np.ndarray:
        """f_i = e_i/(e_i + λ) for i < k (eq. 70; Algorithm 2 uses eigenvalues e = σ²)."""
        if not self.is_spectral:
            raise ConfigError("lrr.filter: W is not a spectral filter when dropout > 0 or gamma "
                              "is given (eq. 68); use fit/score")
        e = spectrum.eigenvalues[: self._components(spectrum)]
        if self.lam == 0.0:
            return np.ones_like(e)  # λ = 0: the PCA projection V_kV_kᵀ (Jin et al. 2021)
        return e / (e + self.lam)

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        if self.is_spectral:
            super()._fit(train, validation)
        else:
            self._fit_general(train)

    def _regularizer(self, gram_matrix: np.ndarray) -> np.ndarray:
        """R = λI + p/(1−p) diagM(diag G) + ΓᵀΓ (n x n, dtype of G)."""
        n_items = gram_matrix.shape[0]
        if self.gamma is None:
            reg = np.zeros((n_items, n_items), dtype=gram_matrix.dtype)
        elif self.gamma.ndim == 1:
            if self.gamma.shape[0] != n_items:
                raise ConfigError(f"lrr.gamma has length {self.gamma.shape[0]}, need n_items="
                                  f"{n_items}")
            reg = np.diag(self.gamma**2).astype(gram_matrix.dtype)
        else:
            if self.gamma.shape[1] != n_items:
                raise ConfigError(f"lrr.gamma has shape {self.gamma.shape}, need (r, n_items="
                                  f"{n_items})")
            reg = (self.gamma.T @ self.gamma).astype(gram_matrix.dtype)
        diagonal = self.lam + self.dropout / (1.0 - self.dropout) * np.diag(gram_matrix)
        reg[np.diag_indices(n_items)] += diagonal
        return reg

    def _fit_general(self, train: sp.csr_matrix) -> None:
        """eq. 68 via Cholesky of G + R and an eigh of G(G + R)⁻¹G."""
        n_items = train.shape[1]
        k = self._rank_for(n_items)
        check_dense_memory(n_items, self.dtype, 5.0, what="LRR with a general Γ (eq. 68)",
                           alternative="Use dropout=0 and gamma=None (spectral eq. 70).")
        gram_matrix = gram(train, self.dtype)
        system = gram_matrix + self._regularizer(gram_matrix)
        try:
            factor = sla.cho_factor(system, overwrite_a=True, check_finite=False)
        except np.linalg.LinAlgError:
            raise ConfigError("lrr: G + ΓᵀΓ is not positive definite; use lam > 0 or a Γ of full "
                              "column rank") from None
        ridge = sla.cho_solve(factor, gram_matrix, check_finite=False)  # W* = (G+R)⁻¹G
        del factor, system
        stacked_gram = gram_matrix @ ridge  # (X̃W*)ᵀ X̃W* = G (G+R)⁻¹ G
        stacked_gram = 0.5 * (stacked_gram + stacked_gram.T)
        del gram_matrix
        _, q = sla.eigh(stacked_gram, subset_by_index=[n_items - k, n_items - 1],
                        overwrite_a=True, check_finite=False)
        q_k = np.ascontiguousarray(q[:, ::-1])
        self.left_ = ridge @ q_k  # W = (W* Q_k) Q_kᵀ
        self.right_ = q_k

    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        if self.is_spectral:
            return super()._score(foldin, users)
        return np.asarray(foldin.astype(self.left_.dtype) @ self.left_) @ self.right_.T

    def weights(self) -> np.ndarray:
        if self.is_spectral:
            return super().weights()
        self.check_fitted()
        return self.left_ @ self.right_.T


class PureSVD(SpectralFilterModel):
    """PureSVD / PCA projection W = V_k V_kᵀ (Cremonesi et al. 2010; Li 2023, eq. 65, eq. 65); f = 1
    for i < k."""

    config_class = PureSVDConfig

    def filter(self, spectrum: Spectrum) -> np.ndarray:
        return np.ones(self._components(spectrum))


class ClosedFormMF(SpectralFilterModel):
    """Regularized MF min ‖X − PQᵀ‖² + λ′(‖P‖² + ‖Q‖²) in closed form (Li 2023, eqs.
    72–74): W_MF = V_k diag((1 − λ′/σ_i)₊) V_kᵀ (eq. 74 with the mandatory clipping), so the
    effective rank is min(k, #{σ_i > λ′}); λ′ = 0 gives PureSVD. σ = sqrt(eigenvalue), not the
    eigenvalue.

    Factor-model protocol of Tables 8/9 (Liang et al. 2018): the experiment fits this model on
    X_all = [X_train; X_val_foldin; X_test_foldin]; for any user u present in X_all,
    x_u W_MF = (PQᵀ)_u exactly, so the same W-based `score(foldin)` serves both protocols.
    `factors(X)` returns the balanced split P = U_k diag(√(σ−λ′)₊), Q = V_k diag(√(σ−λ′)₊).
    Hyper-parameters: rank k (1000), lam λ′ (ML-20M 50, Netflix 100). λ′ is in the units of σ, so
    a fixed value suits one dataset only; lam=None takes λ′ = σ_k, the singular value at the rank
    cut (f tapers to 0 at k). On ML-20M Tables 14/15 put the published λ′ = 50 between σ_512 and
    σ_1000; on a 1 683-item Gowalla subset (σ_1 = 25) λ′ = 50 removes every component.
    """

    config_class = ClosedFormMFConfig

    def filter(self, spectrum: Spectrum) -> np.ndarray:
        """f_i = max(0, 1 − λ′/σ_i) for i < k; 0 where σ_i = 0 < λ′ (eq. 74 + clipping)."""
        sigma = spectrum.singular_values[: self._components(spectrum)]
        lam = float(sigma[-1]) if self.lam is None and sigma.size else (self.lam or 0.0)
        self.lam_ = lam
        if lam == 0.0:
            return np.ones_like(sigma)
        with np.errstate(divide="ignore"):
            return np.maximum(0.0, 1.0 - lam / sigma)

    def factors(self, train: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        """Balanced factors (P (n_users x k_eff), Q (n_items x k_eff)) of the fitted model for
        the matrix it was fitted on: PQᵀ = U_k diag((σ_i − λ′)₊) V_kᵀ = X W_MF (Li 2023, eqs.
        72–74)."""
        self.check_fitted()
        train = check_foldin(train, self.vectors_.shape[0], "mf_closed.factors")
        sigma = self.spectrum_.singular_values[: self.filter_.shape[0]]
        root = np.sqrt(sigma * self.filter_)  # √(σ − λ′)
        # U_k = X V_k Σ_k⁻¹, so P = U_k diag(√(σ−λ′)) = X V_k diag(√(σ−λ′)/σ); 0 where σ = 0
        scale = np.divide(root, sigma, out=np.zeros_like(root), where=sigma > 0)
        p = np.asarray(train.astype(self.vectors_.dtype) @ self.vectors_) * scale
        return p, self.vectors_ * root


class Ridge(SpectralFilterModel):
    """Ridge regression W = (G + λI)⁻¹G = V diag(e_i/(e_i+λ)) Vᵀ, i.e. LRR with k = n
    (Jin et al. 2021, §3.3; Li 2023, eqs. 66–70). Uses the full
    spectrum so λ grids reuse it."""

    config_class = RidgeConfig

    def _rank_for(self, n_items: int) -> int:
        return n_items  # the full spectrum

    def filter(self, spectrum: Spectrum) -> np.ndarray:
        if not spectrum.is_full:
            raise ConfigError(f"ridge needs the full spectrum ({spectrum.n_items} components), "
                              f"got {spectrum.n_components}")
        e = spectrum.eigenvalues
        if self.lam == 0.0:
            return np.ones_like(e)
        return e / (e + self.lam)


# --------------------------------------------------------------------------------------------
# Grid reuse (docs/concepts/models.md; Li 2023, Algorithm 2)


class ProjectionCache:
    """Memo of Z = foldin @ V[:, :k_max] per fold-in batch (keyed by the batch's content), so a
    grid over (k, λ) projects every evaluation batch once. Memory: rows x k_max floats."""

    def __init__(self, spectrum: Spectrum, k_max: int | None = None) -> None:
        self.spectrum = spectrum
        self.k_max = spectrum.n_components if k_max is None else min(k_max,
                                                                      spectrum.n_components)
        self._vectors = np.ascontiguousarray(spectrum.vectors[:, : self.k_max])
        self._store: dict[str, np.ndarray] = {}

    def project(self, foldin: sp.csr_matrix, k: int) -> np.ndarray:
        """Z[:, :k] (rows x k) for this fold-in batch."""
        if k > self.k_max:
            raise ConfigError(f"ProjectionCache: k={k} exceeds the cached k_max={self.k_max}")
        foldin = check_foldin(foldin, self.spectrum.n_items, "ProjectionCache.project")
        key = _matrix_key(foldin)
        z = self._store.get(key)
        if z is None:
            z = np.asarray(foldin.astype(self._vectors.dtype) @ self._vectors)
            self._store[key] = z
        return z[:, :k]

    def clear(self) -> None:
        self._store.clear()


class FilteredScorer:
    """Light fitted view of one grid point: scores ((foldin V_k) ⊙ f) V_kᵀ with Z from a shared
    ProjectionCache (a scorer for the evaluator, not a trainable model)."""

    def __init__(self, projections: ProjectionCache, f: np.ndarray,
                 params: Mapping[str, Any] | None = None) -> None:
        k_eff = _effective_rank(f)
        self.projections = projections
        self.filter_ = np.asarray(f, dtype=np.float64)[:k_eff]
        self.vectors_ = projections.spectrum.vectors[:, :k_eff]
        self.params = dict(params or {})

    def score(self, foldin: sp.csr_matrix, users: np.ndarray | None = None) -> np.ndarray:
        k = self.filter_.shape[0]
        return _filtered_scores(self.projections.project(foldin, k), self.filter_, self.vectors_)


def spectral_grid(model_name: str, spectrum: Spectrum, grid: Mapping[str, Iterable[Any]],
                  projections: ProjectionCache | None = None,
                  **fixed: Any) -> Iterator[tuple[dict[str, Any], FilteredScorer]]:
    """Algorithm 2 (Li 2023, Algorithm 2): for every combination of `grid` values (e.g. {"rank":
    [...], "lam": [...]}, last key varying fastest) yield (params, scorer) where scorer shares
    `spectrum` and one ProjectionCache of the evaluation users' Z = foldin V (sized for the
    largest rank). model_name: a registry key of a SpectralFilterModel (lrr, puresvd, mf_closed,
    ridge). `fixed` are further constructor parameters.
    """
    config = MODEL_CONFIGS.get(model_name)
    if config is None or SPECTRAL_FILTER not in config.families:
        raise ConfigError(f"spectral_grid: model {model_name!r} is not a spectral-filter model; "
                          f"choose one of {models_in(SPECTRAL_FILTER)}")
    cls = load(config.model_path)
    names = list(grid)
    overlap = sorted(set(names) & set(fixed))
    if overlap:
        raise ConfigError(f"spectral_grid: {overlap} given both in grid and as fixed parameters")
    values = [list(grid[name]) for name in names]
    points = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]
    models = [cls(**fixed, **point) for point in points]
    for model in models:
        if isinstance(model, LRR) and not model.is_spectral:
            raise ConfigError("spectral_grid: LRR with dropout/gamma is not a spectral filter")
    filters = [model.filter(spectrum) for model in models]  # validates every point first
    if projections is None:
        k_max = max((_effective_rank(f) for f in filters), default=0)
        projections = ProjectionCache(spectrum, max(k_max, 1))
    for point, f in zip(points, filters, strict=True):
        yield point, FilteredScorer(projections, f, point)

