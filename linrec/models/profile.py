"""Per-component shrinkage profile f_i = v_iᵀ W v_i of any item–item model
(Jin et al. 2021, §3.3, the Figure 11 view)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from linrec.errors import ConfigError
from linrec.models.base import Recommender
from linrec.models.spectral import LRR, SpectralFilterModel, Spectrum

_ITEM_BATCH = 1024


def _profile_from_weights(weights: np.ndarray | sp.spmatrix, vectors: np.ndarray) -> np.ndarray:
    """diag(Vᵀ W V) (r,) without forming the r x r product: Σ_rows V ⊙ (W V)."""
    wv = weights @ vectors
    return np.einsum("ij,ij->j", vectors, np.asarray(wv), dtype=np.float64)


def _profile_from_scores(model: Recommender, vectors: np.ndarray) -> np.ndarray:
    """diag(Vᵀ W V) for a model that only scores: row block b of W is score(I[b]) (x_u W with
    x_u the unit vector e_b), accumulated over item batches of 1024 (memory 1024 x n_items)."""
    n_items = vectors.shape[0]
    identity = sp.identity(n_items, dtype=np.float32, format="csr")
    profile = np.zeros(vectors.shape[1], dtype=np.float64)
    for start in range(0, n_items, _ITEM_BATCH):
        rows = slice(start, min(start + _ITEM_BATCH, n_items))
        w_rows = np.asarray(model.score(identity[rows]), dtype=np.float64)
        profile += np.einsum("ij,ij->j", vectors[rows], w_rows @ vectors, dtype=np.float64)
    return profile


def spectral_profile(model: Recommender, spectrum: Spectrum | None = None) -> np.ndarray:
    """f (r,) float64 with f_i = v_iᵀ W v_i for the r components of `spectrum` (Jin et al. 2021,
    §3.3).

    * Spectral-filter models (LRR eq. 70, PureSVD, ClosedFormMF, Ridge): f directly, zero-padded
      past the model's rank; `spectrum` defaults to the model's own.
    * Any other fitted item–item model: the diagonal of VᵀWV, with W from `model.weights()`
      (dense or sparse) or, for a model without one, recovered from `score` on unit rows
      (requires scores linear in the fold-in row, x_u W).
      `spectrum` is required (e.g. `compute_spectrum(train)` of the model's training matrix).
    For models that are not diagonal in V (EASE, EDLAE) this is the diagonal only.
    """
    if isinstance(model, SpectralFilterModel) and hasattr(model, "filter_"):
        own = getattr(model, "spectrum_", None)
        spectral = not isinstance(model, LRR) or model.is_spectral
        if spectral and own is not None and (spectrum is None or spectrum is own):
            profile = np.zeros(own.n_components, dtype=np.float64)
            profile[: model.filter_.shape[0]] = model.filter_
            return profile
    if spectrum is None:
        raise ConfigError(f"spectral_profile: {type(model).__name__} is not a fitted spectral "
                          "model; pass spectrum=compute_spectrum(train) of its training matrix")
    try:
        weights = model.weights()
    except (NotImplementedError, AttributeError):  # no W (or a bare scorer): read it by scoring
        weights = None
    if weights is not None:
        if weights.shape != (spectrum.n_items, spectrum.n_items):
            raise ConfigError(f"spectral_profile: W has shape {weights.shape} but the spectrum "
                              f"has {spectrum.n_items} items")
        return _profile_from_weights(weights, spectrum.vectors)
    return _profile_from_scores(model, spectrum.vectors)
