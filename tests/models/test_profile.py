"""spectral_profile (Jin et al. 2021, §3.3): the per-component shrinkage of any item-item
model (the plot is tested in tests/test_plots.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.errors import ConfigError
from linrec.models.profile import spectral_profile
from linrec.models.spectral import (
    LRR,
    ClosedFormMF,
    PureSVD,
    Ridge,
    compute_spectrum,
)

TOL = 1e-10
N_ITEMS = 30


class _DenseItemModel:
    """Item–item model that gives its W through the `weights()` accessor (as EASE does)."""

    def __init__(self, weights):
        self.W_ = weights

    def weights(self):
        return self.W_

    def score(self, foldin, users=None):
        return np.asarray(foldin @ self.W_)


class _ScoreOnlyModel:
    """Item–item model that exposes only score (x_u W)."""

    def __init__(self, weights: np.ndarray):
        self._hidden = weights

    def score(self, foldin, users=None):
        return np.asarray(foldin @ self._hidden)


@pytest.fixture(scope="module")
def train() -> sp.csr_matrix:
    rng = np.random.default_rng(21)
    dense = rng.random((200, N_ITEMS)) < 0.2
    dense[rng.integers(0, 200, N_ITEMS), np.arange(N_ITEMS)] = True
    return sp.csr_matrix(dense.astype(np.float32))


def _reference(train: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """G and its descending eigendecomposition, computed with numpy from the dense X."""
    x = train.toarray().astype(np.float64)
    g = x.T @ x
    e, v = np.linalg.eigh(g)
    assert np.min(-np.diff(e[::-1])) > 1e-3  # no ties
    return g, e[::-1], v[:, ::-1]


def _ease_weights(g: np.ndarray, lam: float) -> np.ndarray:
    """EASE closed form (Steck 2019; Li 2023, eq. 100): P = (G + λI)⁻¹, W = I − P diagM(1 ⊘
    diag(P))."""
    p = np.linalg.inv(g + lam * np.eye(g.shape[0]))
    return np.eye(g.shape[0]) - p / np.diag(p)[None, :]


def test_profile_of_ease_equals_diag_vtwv(train):
    g, _, v = _reference(train)
    w = _ease_weights(g, lam=15.0)
    assert np.allclose(np.diag(w), 0.0)
    expected = np.array([v[:, i] @ w @ v[:, i] for i in range(N_ITEMS)])
    spectrum = compute_spectrum(train)
    for model in (_DenseItemModel(w), _DenseItemModel(sp.csr_matrix(w)), _ScoreOnlyModel(w)):
        np.testing.assert_allclose(spectral_profile(model, spectrum), expected, atol=TOL)


def test_profile_of_linrec_ease_model(train):
    """The real EASE model (its weights W_) through spectral_profile, against the test's own W."""
    from linrec.models.ease import EASE

    g, _, v = _reference(train)
    model = EASE(lam=15.0, dtype="float64").fit(train)
    expected = np.diag(v.T @ _ease_weights(g, lam=15.0) @ v)
    np.testing.assert_allclose(spectral_profile(model, compute_spectrum(train)), expected,
                               atol=TOL)


@pytest.mark.parametrize("model", [LRR(rank=12, lam=30.0), PureSVD(rank=7),
                                   ClosedFormMF(rank=N_ITEMS, lam=3.0), Ridge(lam=8.0)],
                         ids=["lrr", "puresvd", "mf", "ridge"])
def test_profile_of_spectral_models_is_their_filter(train, model):
    _, e, v = _reference(train)
    model.fit(train)
    profile = spectral_profile(model)
    assert profile.shape == (N_ITEMS,)
    # independent: the diagonal of Vᵀ W V with V and W built from numpy
    np.testing.assert_allclose(profile, np.diag(v.T @ model.weights() @ v), atol=TOL)
    sigma = np.sqrt(e)
    formulas = {
        LRR: lambda: np.where(np.arange(N_ITEMS) < 12, e / (e + 30.0), 0.0),
        PureSVD: lambda: (np.arange(N_ITEMS) < 7).astype(float),
        ClosedFormMF: lambda: np.maximum(0.0, 1.0 - 3.0 / sigma),
        Ridge: lambda: e / (e + 8.0),
    }
    np.testing.assert_allclose(profile, formulas[type(model)](), atol=TOL)
    # the generic (score-based) path gives the same numbers
    np.testing.assert_allclose(spectral_profile(_ScoreOnlyModel(model.weights()),
                                                model.spectrum_), profile, atol=TOL)


def test_profile_with_other_spectrum_uses_generic_path(train):
    model = LRR(rank=10, lam=5.0).fit(train)
    partial = compute_spectrum(train, rank=4, cache=False)
    profile = spectral_profile(model, partial)
    assert profile.shape == (4,)
    np.testing.assert_allclose(profile, model.filter_[:4], atol=TOL)


def test_profile_of_general_lrr_is_diag_vtwv(train):
    _, _, v = _reference(train)
    model = LRR(rank=8, lam=2.0, dropout=0.4).fit(train)
    spectrum = compute_spectrum(train)
    np.testing.assert_allclose(spectral_profile(model, spectrum),
                               np.diag(v.T @ model.weights() @ v), atol=TOL)
    with pytest.raises(ConfigError, match="spectrum"):
        spectral_profile(model)


def test_profile_errors(train):
    w = np.eye(N_ITEMS + 1)
    spectrum = compute_spectrum(train)
    with pytest.raises(ConfigError, match="spectrum"):
        spectral_profile(_DenseItemModel(np.eye(N_ITEMS)))
    with pytest.raises(ConfigError, match="shape"):
        spectral_profile(_DenseItemModel(w), spectrum)
    with pytest.raises(ConfigError, match="not a fitted spectral"):
        spectral_profile(PureSVD(rank=3))
