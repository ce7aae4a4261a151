"""Spectral linear models against independent computations (Jin et al. 2021; Li 2023, eqs. 66–74):
float64, tolerance 1e-10."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import linrec.models.linalg as linalg
import linrec.models.spectral as spectral
from linrec.errors import ConfigError, DataError, MemoryBudgetError
from linrec.models.registry import build_model
from linrec.models.spectral import (
    LRR,
    ClosedFormMF,
    FilteredScorer,
    ProjectionCache,
    PureSVD,
    Ridge,
    Spectrum,
    clear_spectrum_cache,
    compute_spectrum,
    spectral_grid,
)

TOL = 1e-10
N_USERS, N_ITEMS = 300, 40


def _binary(rng: np.random.Generator, n_users: int, n_items: int,
            density: float) -> sp.csr_matrix:
    """Random binary CSR with every item clicked at least once."""
    dense = rng.random((n_users, n_items)) < density
    dense[rng.integers(0, n_users, n_items), np.arange(n_items)] = True
    return sp.csr_matrix(dense.astype(np.float32))


def _reference_eig(train: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """Independent eigendecomposition (numpy, descending) of G = XᵀX from the dense X."""
    x = train.toarray().astype(np.float64)
    e, v = np.linalg.eigh(x.T @ x)
    return e[::-1], v[:, ::-1]


@pytest.fixture(scope="module")
def train() -> sp.csr_matrix:
    x = _binary(np.random.default_rng(7), N_USERS, N_ITEMS, 0.15)
    e, _ = _reference_eig(x)
    # no ties anywhere in the spectrum, so every cut k is well defined (docs/concepts/models.md)
    assert np.min(-np.diff(e)) > 1e-3 and e[-1] > 1e-3
    return x


@pytest.fixture(scope="module")
def foldin() -> sp.csr_matrix:
    return _binary(np.random.default_rng(8), 25, N_ITEMS, 0.2)


def _gram(train: sp.csr_matrix) -> np.ndarray:
    x = train.toarray().astype(np.float64)
    return x.T @ x


def _stacked_lrr(train: sp.csr_matrix, gamma: np.ndarray, k: int) -> np.ndarray:
    """eq. 68 by brute force: W* = (G + ΓᵀΓ)⁻¹G, SVD of the stacked [XW*; ΓW*], W = W*Q_kQ_kᵀ."""
    x = train.toarray().astype(np.float64)
    g = x.T @ x
    w_ridge = np.linalg.solve(g + gamma.T @ gamma, g)
    _, _, qt = np.linalg.svd(np.vstack([x @ w_ridge, gamma @ w_ridge]))
    q_k = qt[:k].T
    return w_ridge @ q_k @ q_k.T


# ---------------------------------------------------------------------------- spectrum


def test_spectrum_descending_orthonormal_and_matches_numpy(train):
    spectrum = compute_spectrum(train)
    e_ref, v_ref = _reference_eig(train)
    assert spectrum.eigenvalues.dtype == np.float64
    assert np.all(np.diff(spectrum.eigenvalues) <= 0)
    np.testing.assert_allclose(spectrum.eigenvalues, e_ref, rtol=0, atol=TOL * e_ref[0])
    np.testing.assert_allclose(spectrum.singular_values, np.sqrt(e_ref), rtol=1e-12)
    v = spectrum.vectors
    np.testing.assert_allclose(v.T @ v, np.eye(N_ITEMS), atol=TOL)
    # columns are the eigenvectors in the same order (signs arbitrary)
    np.testing.assert_allclose(np.abs(np.sum(v * v_ref, axis=0)), 1.0, atol=1e-9)
    np.testing.assert_allclose(_gram(train) @ v, v * spectrum.eigenvalues, atol=TOL * e_ref[0])


def test_spectrum_flip_and_clamp(monkeypatch, train):
    """eigh's ascending output is flipped and round-off negatives are clamped to exactly 0."""
    ascending = np.array([-3e-13, -1e-14, 0.5] + list(range(1, N_ITEMS - 2)), dtype=np.float64)
    basis = np.linalg.qr(np.random.default_rng(0).standard_normal((N_ITEMS, N_ITEMS)))[0]
    monkeypatch.setattr(spectral.sla, "eigh", lambda *a, **k: (ascending.copy(), basis.copy()))
    spectrum = compute_spectrum(train, cache=False)
    np.testing.assert_array_equal(spectrum.eigenvalues[:-2], ascending[::-1][:-2])
    assert spectrum.eigenvalues[-1] == 0.0 and spectrum.eigenvalues[-2] == 0.0
    np.testing.assert_array_equal(spectrum.vectors, basis[:, ::-1])
    assert spectrum.vectors.flags.c_contiguous


def test_spectrum_of_rank_deficient_matrix_is_clamped():
    rng = np.random.default_rng(3)
    x = _binary(rng, 50, 12, 0.3).toarray()
    x = sp.csr_matrix(np.hstack([x, x[:, :6], np.zeros((50, 3), np.float32)]))  # 9 zero e_i
    spectrum = compute_spectrum(x)
    assert spectrum.eigenvalues.min() >= 0.0
    assert np.all(np.isfinite(spectrum.singular_values))
    assert np.sum(spectrum.eigenvalues < 1e-9) == 9


def test_partial_spectrum_equals_leading_part_of_full(train):
    full = compute_spectrum(train, cache=False)
    k = 6  # 6 <= 0.2 * 40: partial eigh
    part = compute_spectrum(train, rank=k, cache=False)
    assert part.n_components == k and not part.is_full
    np.testing.assert_allclose(part.eigenvalues, full.eigenvalues[:k], rtol=0,
                               atol=TOL * full.eigenvalues[0])
    proj_part = part.vectors @ part.vectors.T
    proj_full = full.vectors[:, :k] @ full.vectors[:, :k].T
    np.testing.assert_allclose(proj_part, proj_full, atol=1e-9)


def test_spectrum_cache_reuse_and_keys(train):
    first = compute_spectrum(train)
    assert not first.vectors.flags.writeable and not first.eigenvalues.flags.writeable
    assert compute_spectrum(train.copy()) is first  # same content -> cached
    assert compute_spectrum(train, rank=5) is first  # full spectrum serves any rank
    assert compute_spectrum(train, dtype="float32") is not first
    other = train.copy()
    other.data[0] = 2.0
    assert compute_spectrum(other) is not first
    clear_spectrum_cache()
    assert compute_spectrum(train) is not first


def test_spectrum_cache_refreshes_when_more_components_needed(train):
    part = compute_spectrum(train, rank=4)
    limit = int(spectral._PARTIAL_EIGH_MAX_FRACTION * train.shape[1])
    assert part.n_components == max(4, limit)  # cached: every rank up to the partial limit
    assert compute_spectrum(train, rank=4, cache=False).n_components == 4
    more = compute_spectrum(train, rank=30)
    assert more.n_components >= 30
    assert compute_spectrum(train, rank=4) is more


def test_memory_guard_refuses_before_building_gram(monkeypatch, train):
    monkeypatch.setattr(linalg, "available_memory_bytes", lambda: 1000)

    def _no_gram(*args, **kwargs):
        raise AssertionError("gram must not be built when memory is refused")

    monkeypatch.setattr(spectral, "gram", _no_gram)
    with pytest.raises(MemoryBudgetError, match="GiB"):
        compute_spectrum(train, cache=False)
    with pytest.raises(MemoryBudgetError):
        LRR(rank=5, lam=1.0, dropout=0.5).fit(train)


def test_spectrum_dataclass_validates_shapes():
    with pytest.raises(DataError, match="disagree"):
        Spectrum(eigenvalues=np.ones(3), vectors=np.ones((5, 4)))


# ---------------------------------------------------------------------------- LRR


@pytest.mark.parametrize("k", [3, 10, 25])
@pytest.mark.parametrize("lam", [0.5, 30.0, 400.0])
def test_lrr_eq70_equals_stacked_eq68(train, k, lam):
    expected = _stacked_lrr(train, np.sqrt(lam) * np.eye(N_ITEMS), k)
    w70 = LRR(rank=k, lam=lam).fit(train).weights()
    np.testing.assert_allclose(w70, expected, atol=TOL)
    # the general code path (Γ given explicitly) gives the same W
    w68 = LRR(rank=k, lam=0.0, gamma=np.sqrt(lam) * np.eye(N_ITEMS)).fit(train).weights()
    np.testing.assert_allclose(w68, expected, atol=TOL)


def test_lrr_eq70_formula_from_numpy_eigh(train):
    e, v = _reference_eig(train)
    k, lam = 12, 50.0
    expected = v[:, :k] @ np.diag(e[:k] / (e[:k] + lam)) @ v[:, :k].T
    model = LRR(rank=k, lam=lam).fit(train)
    np.testing.assert_allclose(model.weights(), expected, atol=TOL)
    assert np.linalg.matrix_rank(model.weights(), tol=1e-8) == k
    # Vᵀ W V is diagonal with the LRR ratios (Jin et al. 2021; Li 2023, eqs. 66–70 test 3)
    vwv = v.T @ model.weights() @ v
    ratios = np.concatenate([e[:k] / (e[:k] + lam), np.zeros(N_ITEMS - k)])
    np.testing.assert_allclose(vwv, np.diag(ratios), atol=TOL)


def test_lrr_general_gamma_matches_stacked_svd(train):
    rng = np.random.default_rng(11)
    gamma = rng.standard_normal((N_ITEMS + 5, N_ITEMS))
    k = 7
    model = LRR(rank=k, lam=0.0, gamma=gamma).fit(train)
    np.testing.assert_allclose(model.weights(), _stacked_lrr(train, gamma, k), atol=TOL)
    assert np.linalg.matrix_rank(model.weights(), tol=1e-8) == k


def test_lrr_low_rank_dlae_matches_stacked_svd(train, foldin):
    """dropout p: ΓᵀΓ = λI + p/(1−p) diagM(diag G) (Li 2023, eq. 62 (3)); diagonal gamma adds to
    it."""
    p, lam, k = 0.3, 5.0, 9
    extra = np.linspace(0.5, 2.0, N_ITEMS)
    g_diag = np.diag(_gram(train))
    gamma = np.diag(np.sqrt(lam + p / (1 - p) * g_diag + extra**2))
    model = LRR(rank=k, lam=lam, dropout=p, gamma=extra).fit(train)
    expected = _stacked_lrr(train, gamma, k)
    np.testing.assert_allclose(model.weights(), expected, atol=TOL)
    x = foldin.toarray().astype(np.float64)
    np.testing.assert_allclose(model.score(foldin), x @ expected, atol=TOL)


def test_lrr_full_rank_equals_ridge(train):
    lam = 25.0
    g = _gram(train)
    ridge = np.linalg.solve(g + lam * np.eye(N_ITEMS), g)
    np.testing.assert_allclose(LRR(rank=N_ITEMS, lam=lam).fit(train).weights(), ridge, atol=TOL)
    np.testing.assert_allclose(Ridge(lam=lam).fit(train).weights(), ridge, atol=TOL)


@pytest.mark.parametrize("k", [1, 5, 17, N_ITEMS])
def test_lambda_zero_reduces_to_puresvd(train, k):
    _, _, vt = np.linalg.svd(train.toarray().astype(np.float64), full_matrices=False)
    projection = vt[:k].T @ vt[:k]
    for model in (LRR(rank=k, lam=0.0), ClosedFormMF(rank=k, lam=0.0), PureSVD(rank=k)):
        np.testing.assert_allclose(model.fit(train).weights(), projection, atol=TOL)


def test_score_matches_explicit_w(train, foldin):
    x = foldin.toarray().astype(np.float64)
    for model in (LRR(rank=15, lam=40.0), PureSVD(rank=8), ClosedFormMF(rank=30, lam=2.0),
                  Ridge(lam=3.0)):
        model.fit(train)
        scores = model.score(foldin)
        assert scores.shape == (25, N_ITEMS) and scores.dtype == np.float64
        np.testing.assert_allclose(scores, x @ model.weights(), atol=TOL)


# ---------------------------------------------------------------------------- MF


def _als_regularized_mf(x: np.ndarray, k: int, lam: float, seed: int) -> np.ndarray:
    """Alternating least squares on eq. 72, ‖X − PQᵀ‖² + λ′(‖P‖² + ‖Q‖²); returns PQᵀ."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((x.shape[0], k))
    q = rng.standard_normal((x.shape[1], k))
    eye = np.eye(k)
    previous = p @ q.T
    for _ in range(5000):
        p = np.linalg.solve(q.T @ q + lam * eye, q.T @ x.T).T
        q = np.linalg.solve(p.T @ p + lam * eye, p.T @ x).T
        current = p @ q.T
        if np.max(np.abs(current - previous)) < 1e-15:
            break
        previous = current
    return current


@pytest.mark.parametrize("k", [4, 6])
def test_als_converges_to_soft_threshold(k):
    train = _binary(np.random.default_rng(1), 60, 15, 0.3)
    x = train.toarray().astype(np.float64)
    sigma = np.linalg.svd(x, compute_uv=False)
    lam = 0.5 * (sigma[3] + sigma[4])  # 4 singular values above λ′, no tie at the cut
    model = ClosedFormMF(rank=k, lam=lam).fit(train)
    assert model.filter_.shape == (4,)  # clipped: k_eff = #{σ > λ′}
    np.testing.assert_allclose(_als_regularized_mf(x, k, lam, seed=k), x @ model.weights(),
                               atol=TOL)


def test_mf_factors_balanced_and_reproduce_xw(train):
    lam = 3.0
    model = ClosedFormMF(rank=20, lam=lam).fit(train)
    x = train.toarray().astype(np.float64)
    p, q = model.factors(train)
    np.testing.assert_allclose(p @ q.T, x @ model.weights(), atol=TOL)
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    k = 20
    soft = u[:, :k] @ np.diag(np.maximum(s[:k] - lam, 0)) @ vt[:k]
    np.testing.assert_allclose(p @ q.T, soft, atol=TOL)
    np.testing.assert_allclose(p.T @ p, q.T @ q, atol=TOL)  # balanced split (Li 2023, eqs. 72–74)
    np.testing.assert_allclose(np.diag(q.T @ q), s[: q.shape[1]] - lam, atol=TOL)


def test_mf_filter_uses_singular_values_and_vwv_diagonal(train):
    lam = 4.0
    e, v = _reference_eig(train)
    sigma = np.sqrt(e)
    model = ClosedFormMF(rank=N_ITEMS, lam=lam).fit(train)
    expected = np.maximum(0.0, 1.0 - lam / sigma)
    np.testing.assert_allclose(v.T @ model.weights() @ v, np.diag(expected), atol=TOL)


def test_mf_clipping_makes_results_k_invariant(train, foldin):
    sigma = np.sqrt(_reference_eig(train)[0])
    lam = 0.5 * (sigma[9] + sigma[10])  # 10 singular values above λ′
    reference = ClosedFormMF(rank=10, lam=lam).fit(train).score(foldin)
    for k in (10, 11, 20, N_ITEMS):
        model = ClosedFormMF(rank=k, lam=lam).fit(train)
        assert model.filter_.shape == (10,)
        assert np.all(model.filter_ > 0)
        np.testing.assert_allclose(model.score(foldin), reference, atol=TOL)
    below = ClosedFormMF(rank=9, lam=lam).fit(train).score(foldin)
    assert np.max(np.abs(below - reference)) > 1e-3


def test_puresvd_factors_with_zero_singular_values():
    """λ′ = 0 and k beyond rank(X): f = 1 on σ = 0 components, factors stay finite."""
    x = sp.csr_matrix(np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=np.float32))
    model = ClosedFormMF(rank=3, lam=0.0).fit(x)
    p, q = model.factors(x)
    assert np.all(np.isfinite(p)) and np.all(np.isfinite(q))
    np.testing.assert_allclose(p @ q.T, x.toarray(), atol=TOL)


def test_cut_inside_a_tie_warns():
    block = _binary(np.random.default_rng(4), 30, 6, 0.4).toarray()
    x = sp.csr_matrix(np.kron(np.eye(2, dtype=np.float32), block))  # every e_i twice
    with pytest.warns(RuntimeWarning, match="tied eigenvalues"):
        PureSVD(rank=3).fit(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PureSVD(rank=4).fit(x)
        LRR(rank=12, lam=1.0).fit(x)


def test_mf_zero_singular_value_is_clipped_not_nan():
    x = sp.csr_matrix(np.array([[1, 1, 0], [1, 1, 0], [0, 0, 0]], dtype=np.float32))
    model = ClosedFormMF(rank=3, lam=0.5).fit(x)
    assert np.all(np.isfinite(model.weights()))
    np.testing.assert_allclose(model.filter_, [1 - 0.5 / 2.0])


# ---------------------------------------------------------------------------- grid reuse


def test_spectral_grid_equals_independent_fits(train, foldin):
    spectrum = compute_spectrum(train)
    grid = {"rank": [5, 12, 30], "lam": [0.0, 20.0, 300.0]}
    points = list(spectral_grid("lrr", spectrum, grid))
    assert [p for p, _ in points] == [{"rank": r, "lam": lam} for r in grid["rank"]
                                      for lam in grid["lam"]]
    e, v = _reference_eig(train)
    x = foldin.toarray().astype(np.float64)
    for params, scorer in points:
        k, lam = params["rank"], params["lam"]
        w = v[:, :k] @ np.diag(e[:k] / (e[:k] + lam)) @ v[:, :k].T
        np.testing.assert_allclose(scorer.score(foldin), x @ w, atol=TOL)


def test_spectral_grid_projects_each_batch_once(monkeypatch, train, foldin):
    spectrum = compute_spectrum(train)
    calls = []
    original = spectral._matrix_key
    monkeypatch.setattr(spectral, "_matrix_key", lambda m: calls.append(1) or original(m))
    projections = ProjectionCache(spectrum, k_max=30)
    points = list(spectral_grid("mf_closed", spectrum, {"rank": [10, 30], "lam": [0.0, 2.0]},
                                projections=projections))
    batches = [foldin[:10], foldin[10:]]
    for _, scorer in points:
        for batch in batches:
            scorer.score(batch)
    assert len(projections._store) == 2  # Z computed once per batch for 4 grid points
    for params, scorer in points:
        model = ClosedFormMF(**params).fit(train)
        np.testing.assert_allclose(scorer.score(foldin[10:]), model.score(foldin[10:]), atol=TOL)


def test_spectral_grid_rejects_non_spectral_and_bad_points(train):
    spectrum = compute_spectrum(train)
    with pytest.raises(ConfigError, match="not a spectral"):
        list(spectral_grid("ease", spectrum, {"lam": [1.0]}))
    with pytest.raises(ConfigError, match="rank"):
        list(spectral_grid("lrr", spectrum, {"rank": [N_ITEMS + 1], "lam": [1.0]}))
    with pytest.raises(ConfigError, match="lam"):
        list(spectral_grid("lrr", spectrum, {"rank": [3], "lam": [-1.0]}))
    with pytest.raises(ConfigError, match="dropout"):
        list(spectral_grid("lrr", spectrum, {"rank": [3]}, lam=1.0, dropout=0.2))
    with pytest.raises(ConfigError, match="both"):
        list(spectral_grid("lrr", spectrum, {"rank": [3]}, rank=4, lam=1.0))
    with pytest.raises(ConfigError, match="k_max"):
        FilteredScorer(ProjectionCache(spectrum, k_max=2), np.ones(5)).score(
            sp.csr_matrix((1, N_ITEMS)))


def test_ridge_grid_needs_full_spectrum(train):
    part = compute_spectrum(train, rank=4, cache=False)
    with pytest.raises(ConfigError, match="full spectrum"):
        list(spectral_grid("ridge", part, {"lam": [1.0]}))
    with pytest.raises(ConfigError, match="only 4"):
        LRR(rank=6, lam=1.0).fit_spectrum(part)


# ---------------------------------------------------------------------------- precision


def test_float32_top10_agrees_with_float64(foldin):
    train = _binary(np.random.default_rng(5), 400, 60, 0.1)
    fold = _binary(np.random.default_rng(6), 50, 60, 0.1)
    s64 = LRR(rank=30, lam=20.0).fit(train).score(fold)
    s32 = LRR(rank=30, lam=20.0, dtype="float32").fit(train).score(fold)
    assert s32.dtype == np.float32
    top64 = np.argsort(-s64, axis=1)[:, :10]
    top32 = np.argsort(-s32, axis=1)[:, :10]
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top64, top32, strict=True)])
    assert overlap >= 0.99
    np.testing.assert_allclose(s32, s64, atol=1e-4)


# ---------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("kwargs", [
    {"rank": 0}, {"rank": -3}, {"rank": 2.5}, {"rank": True}, {"rank": "10"},
    {"lam": -1.0}, {"lam": True}, {"lam": float("nan")}, {"lam": float("inf")}, {"lam": "big"},
    {"dropout": 1.0}, {"dropout": -0.1}, {"dtype": "int32"}, {"dtype": "float16"},
    {"gamma": np.ones((2, 2, 2))}, {"gamma": np.array([1.0, np.nan])},
])
def test_lrr_rejects_bad_parameters(kwargs):
    params = {"rank": 5, "lam": 1.0} | kwargs
    with pytest.raises(ConfigError):
        LRR(**params)


@pytest.mark.parametrize("make", [
    lambda: PureSVD(rank=0), lambda: ClosedFormMF(rank=3, lam=-0.1), lambda: Ridge(lam=-2.0),
    lambda: build_model("lrr", rank=5, lam=1.0, alpha=3),
])
def test_other_models_reject_bad_parameters(make):
    with pytest.raises(ConfigError):
        make()


def test_rank_larger_than_n_items_is_config_error(train):
    for model in (LRR(rank=N_ITEMS + 1, lam=1.0), PureSVD(rank=N_ITEMS + 1),
                  ClosedFormMF(rank=500, lam=1.0), LRR(rank=N_ITEMS + 1, lam=1.0, dropout=0.1)):
        with pytest.raises(ConfigError, match=f"n_items={N_ITEMS}"):
            model.fit(train)
    with pytest.raises(ConfigError, match="exceeds"):
        compute_spectrum(train, rank=N_ITEMS + 1)


def test_bad_data_and_unfitted_use(train):
    with pytest.raises(DataError, match="scipy.sparse"):
        LRR(rank=3, lam=1.0).fit(train.toarray())
    bad = train.copy()
    bad.data[0] = np.nan
    with pytest.raises(DataError, match="NaN"):
        compute_spectrum(bad)
    with pytest.raises(ConfigError, match="not fitted"):
        PureSVD(rank=3).score(train)
    with pytest.raises(ConfigError, match="not fitted"):
        LRR(rank=3, lam=1.0, dropout=0.2).score(train)
    model = PureSVD(rank=3).fit(train)
    with pytest.raises(DataError, match="items"):
        model.score(sp.csr_matrix((2, N_ITEMS + 1)))
    with pytest.raises(DataError, match="scipy.sparse"):
        model.score(np.zeros((2, N_ITEMS)))


def test_lrr_general_gamma_shape_and_definiteness_errors(train):
    with pytest.raises(ConfigError, match="length"):
        LRR(rank=3, lam=1.0, gamma=np.ones(N_ITEMS - 1)).fit(train)
    with pytest.raises(ConfigError, match="shape"):
        LRR(rank=3, lam=1.0, gamma=np.ones((4, N_ITEMS + 2))).fit(train)
    singular = sp.csr_matrix(np.hstack([train.toarray(), np.zeros((N_USERS, 2), np.float32)]))
    with pytest.raises(ConfigError, match="positive definite"):
        LRR(rank=3, lam=0.0, gamma=np.zeros(N_ITEMS + 2)).fit(singular)
    with pytest.raises(ConfigError, match="not a spectral filter"):
        LRR(rank=3, lam=1.0, dropout=0.2).filter(compute_spectrum(train))


def test_model_save_load_roundtrip(tmp_path, train, foldin):
    model = LRR(rank=10, lam=5.0).fit(train)
    path = tmp_path / "lrr.pkl"
    model.save(path)
    loaded = LRR.load(path)
    np.testing.assert_array_equal(loaded.score(foldin), model.score(foldin))


def test_grid_scorers_plug_into_the_evaluator(train):
    """Every grid point through evaluate_exact gives the metrics of an independently fitted
    model; Z = foldin V is computed once per evaluation batch for the whole grid."""
    from linrec.data.splits import EvalSet
    from linrec.eval import exact as evaluator

    rng = np.random.default_rng(9)
    rows = _binary(rng, 40, N_ITEMS, 0.25).tocoo()
    held_out = rng.random(rows.nnz) < 0.2

    def part(mask):
        return sp.csr_matrix((rows.data[mask], (rows.row[mask], rows.col[mask])),
                             shape=rows.shape)

    evalset = EvalSet(users=np.arange(40), foldin=part(~held_out), targets=part(held_out))
    options = {"ks": [5, 10], "metrics": ["recall_trunc", "ndcg"], "seed": 3,
               "users_known": False, "batch_size": 16}
    spectrum = compute_spectrum(train)
    projections = ProjectionCache(spectrum, k_max=20)
    for params, scorer in spectral_grid("lrr", spectrum, {"rank": [8, 20], "lam": [1.0, 50.0]},
                                        projections=projections):
        got = evaluator.evaluate_exact(scorer, evalset, **options).metrics
        want = evaluator.evaluate_exact(LRR(**params).fit(train), evalset, **options).metrics
        assert got.keys() == want.keys()
        for name in want:
            assert got[name] == pytest.approx(want[name], abs=1e-12)
    assert len(projections._store) == 3  # 40 users in batches of 16


def test_filter_shapes_of_spec_section_4():
    """Jin et al. 2021, §3.3 derived checks: LRR ratio ½ at σ = √λ where its absolute reduction σ(1
    − f) peaks at √λ/2; MF ratio ½ at σ = 2λ′ and a constant reduction λ′ above the threshold."""
    lam = 1e4
    sigma = np.arange(400.0, 0.0, -1.0)  # 400, 399, ..., 1 (contains √λ = 100 and 2λ′)
    spectrum = Spectrum(eigenvalues=sigma**2, vectors=np.eye(sigma.size))
    f_lrr = LRR(rank=sigma.size, lam=lam).filter(spectrum)
    at_root = np.flatnonzero(sigma == 100.0)[0]
    assert f_lrr[at_root] == pytest.approx(0.5, abs=1e-15)
    reduction = sigma * (1.0 - f_lrr)
    assert np.argmax(reduction) == at_root
    assert reduction[at_root] == pytest.approx(np.sqrt(lam) / 2, abs=1e-12)
    f_mf = ClosedFormMF(rank=sigma.size, lam=50.0).filter(spectrum)
    assert f_mf[at_root] == pytest.approx(0.5, abs=1e-15)
    above = sigma > 50.0
    np.testing.assert_allclose(sigma[above] * (1.0 - f_mf[above]), 50.0, atol=1e-12)
    assert np.all(f_mf[~above] == 0.0)


def test_mf_threshold_above_every_singular_value_scores_zero(train, foldin):
    sigma_max = np.sqrt(_reference_eig(train)[0][0])
    model = ClosedFormMF(rank=10, lam=2 * sigma_max).fit(train)
    assert model.filter_.shape == (0,)
    np.testing.assert_array_equal(model.score(foldin), np.zeros((25, N_ITEMS)))
    spectrum = compute_spectrum(train)
    [(_, scorer)] = spectral_grid("mf_closed", spectrum, {"lam": [2 * sigma_max]}, rank=10)
    np.testing.assert_array_equal(scorer.score(foldin), np.zeros((25, N_ITEMS)))


def test_mf_lambda_defaults_to_the_singular_value_at_the_rank_cut(train):
    """λ′ is in the units of σ: the default takes σ_k (a fixed λ′ = 50, published for ML-20M,
    removes every component of a small catalogue)."""
    sigma = compute_spectrum(train).singular_values
    auto = ClosedFormMF(rank=10).fit(train)
    explicit = ClosedFormMF(rank=10, lam=float(sigma[9])).fit(train)
    assert auto.lam is None and auto.lam_ == pytest.approx(sigma[9])
    np.testing.assert_allclose(auto.filter_, explicit.filter_, rtol=1e-12)
    np.testing.assert_allclose(auto.filter_, 1.0 - sigma[9] / sigma[:auto.filter_.size])
    assert auto.filter_.size == 9  # f_k = 0: the taper ends at the cut


@pytest.mark.parametrize("rank", [3, 6])
def test_the_user_side_decomposition_equals_the_item_side(rank):
    """Fewer users than items: the top components come from XXᵀ (an m³ eigh) and V = XᵀU e^-½;
    they equal numpy's eigh of G = XᵀX written out here (eigenvalues to 1e-10 of the largest,
    the same projector)."""
    rng = np.random.default_rng(11)
    x = _binary(rng, 30, 90, 0.2)
    dense = x.toarray().astype(np.float64)
    values, vectors = np.linalg.eigh(dense.T @ dense)
    values, vectors = values[::-1][:rank], vectors[:, ::-1][:, :rank]
    spectrum = compute_spectrum(x, rank=rank, cache=False)
    assert spectrum.n_components == rank and spectrum.n_items == 90
    np.testing.assert_allclose(spectrum.eigenvalues, values, rtol=0, atol=1e-10 * values[0])
    np.testing.assert_allclose(spectrum.vectors.T @ spectrum.vectors, np.eye(rank), atol=1e-10)
    np.testing.assert_allclose(spectrum.vectors @ spectrum.vectors.T, vectors @ vectors.T,
                               atol=1e-9)
