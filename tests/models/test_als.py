"""iALS, debiased iALS and WMF (Hu et al. 2008; Li 2023, eq. 64; Jin & Li 2023, Theorems 2 and 3;
docs/concepts/models.md; Li 2023, eq. 99). Every solve is checked against normal equations written
out densely here (float64)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.errors import ConfigError, DataError
from linrec.models.als import IALS, WMF, DebiasedIALS
from tests.models.conftest import brute_item_factors, brute_user_factors, random_binary

CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "model"


def brute_objective(x: np.ndarray, user_factors: np.ndarray, item_factors: np.ndarray,
                    alpha0: float, reg: float, nu: float) -> float:
    """eq. 99 with a dense score matrix."""
    scores = user_factors @ item_factors.T
    n_users, n_items = x.shape
    observed = x > 0
    loss = ((scores[observed] - 1.0) ** 2).sum() + alpha0 * (scores**2).sum()
    user_reg = reg * (observed.sum(1) + alpha0 * n_items) ** nu
    item_reg = reg * (observed.sum(0) + alpha0 * n_users) ** nu
    return float(loss + (user_reg * (user_factors**2).sum(1)).sum()
                 + (item_reg * (item_factors**2).sum(1)).sum())


PARAMS = dict(factors=4, reg=0.05, alpha0=0.3, nu=1.0, dtype="float64", block_size=7)


# --------------------------------------------------------------------------------------------
# iALS


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
@pytest.mark.parametrize("backend", ["numpy", "torch", "numba"])
def test_ials_loss_decreases_monotonically(solver: str, backend: str) -> None:
    model = IALS(**PARAMS, epochs=12, solver=solver, backend=backend).fit(random_binary())
    loss = model.loss_history_
    assert loss.shape == (12,)
    assert np.all(np.diff(loss) <= 1e-12 * loss[:-1])
    assert loss[-1] < loss[0]


def test_ials_loss_history_is_the_objective() -> None:
    x = random_binary()
    model = IALS(**PARAMS, epochs=3).fit(x)
    expected = brute_objective(x.toarray(), model.user_factors_, model.item_factors_,
                               PARAMS["alpha0"], PARAMS["reg"], PARAMS["nu"])
    assert model.loss_history_[-1] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("nu", [0.0, 1.0, 0.5])
def test_ials_user_and_item_steps_equal_brute_force(nu: float) -> None:
    x = random_binary(seed=1)
    rng = np.random.default_rng(2)
    model = IALS(**{**PARAMS, "nu": nu})
    item_factors = rng.normal(size=(x.shape[1], 4))
    user_factors = rng.normal(size=(x.shape[0], 4))
    ones = np.ones(x.shape[0])
    expected_users = brute_user_factors(x.toarray(), item_factors, 0.3, 0.05, nu, ones, ones)
    expected_items = brute_item_factors(x.toarray(), user_factors, 0.3, 0.05, nu, ones, ones)
    np.testing.assert_allclose(model.solve_users(x, item_factors), expected_users, atol=1e-10)
    np.testing.assert_allclose(model.solve_items(x, user_factors), expected_items, atol=1e-10)
    assert np.all(model.solve_users(x, item_factors)[3] == 0.0)  # empty row


def test_ials_fit_epoch_equals_brute_force_sweep() -> None:
    """One fitted epoch = brute user step from the seeded init, then brute item step."""
    x = random_binary(seed=3)
    model = IALS(**PARAMS, epochs=1, seed=7, init_std=0.5).fit(x)
    rng = np.random.default_rng(7)
    std = 0.5 / np.sqrt(4)
    rng.normal(0.0, std, (x.shape[0], 4))  # the user init is overwritten by the user step
    items0 = rng.normal(0.0, std, (x.shape[1], 4))
    ones = np.ones(x.shape[0])
    users1 = brute_user_factors(x.toarray(), items0, 0.3, 0.05, 1.0, ones, ones)
    items1 = brute_item_factors(x.toarray(), users1, 0.3, 0.05, 1.0, ones, ones)
    np.testing.assert_allclose(model.user_factors_, users1, atol=1e-10)
    np.testing.assert_allclose(model.item_factors_, items1, atol=1e-10)


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
@pytest.mark.parametrize("other", ["torch", "numba"])
def test_backends_agree_with_numpy(solver: str, other: str) -> None:
    x = random_binary(seed=4)
    fits = [IALS(**PARAMS, epochs=4, solver=solver, backend=b).fit(x) for b in ("numpy", other)]
    np.testing.assert_allclose(fits[0].user_factors_, fits[1].user_factors_, atol=1e-10)
    np.testing.assert_allclose(fits[0].item_factors_, fits[1].item_factors_, atol=1e-10)
    np.testing.assert_allclose(fits[0].loss_history_, fits[1].loss_history_, rtol=1e-12)
    np.testing.assert_allclose(fits[0].score(x, users=None), fits[1].score(x, users=None),
                               atol=1e-10)


def test_cg_with_enough_steps_equals_cholesky() -> None:
    x = random_binary(seed=5)
    exact = IALS(**PARAMS, epochs=3).fit(x)
    cg = IALS(**PARAMS, epochs=3, solver="cg", cg_steps=12).fit(x)
    np.testing.assert_allclose(cg.user_factors_, exact.user_factors_, atol=1e-10)
    np.testing.assert_allclose(cg.item_factors_, exact.item_factors_, atol=1e-10)
    few = IALS(**PARAMS, epochs=3, solver="cg", cg_steps=1).fit(x)
    assert np.abs(few.item_factors_ - exact.item_factors_).max() > 1e-6  # a real difference


def test_foldin_of_training_user_reproduces_its_factor() -> None:
    x = random_binary(n_users=30, n_items=12, seed=6)
    model = IALS(factors=3, reg=0.1, alpha0=0.2, nu=1.0, epochs=300, dtype="float64").fit(x)
    users = np.arange(x.shape[0])
    np.testing.assert_allclose(model.solve_users(x), model.user_factors_, atol=1e-8)
    np.testing.assert_allclose(model.score(x, users=None), model.score(x, users=users),
                               atol=1e-8)


def test_ials_scores_of_known_users() -> None:
    x = random_binary()
    model = IALS(**PARAMS, epochs=2).fit(x)
    users = np.array([7, 0, 7])
    scores = model.score(x[users], users=users)
    np.testing.assert_allclose(scores, model.user_factors_[users] @ model.item_factors_.T)
    assert np.all(model.user_factors_[3] == 0.0)
    with pytest.raises(DataError):
        model.score(x[:2], users=np.array([0, x.shape[0]]))
    with pytest.raises(DataError):
        model.score(sp.csr_matrix((2, x.shape[1] + 1)))


def test_ials_is_deterministic_and_threads_do_not_matter() -> None:
    x = random_binary(seed=8)
    one = IALS(**PARAMS, epochs=3, solver="cg", num_threads=1).fit(x)
    two = IALS(**PARAMS, epochs=3, solver="cg", num_threads=2).fit(x)
    np.testing.assert_array_equal(one.item_factors_, two.item_factors_)
    np.testing.assert_array_equal(one.loss_history_, two.loss_history_)


def test_float32_close_to_float64() -> None:
    x = random_binary(seed=9)
    single = IALS(**{**PARAMS, "dtype": "float32"}, epochs=3).fit(x)
    double = IALS(**PARAMS, epochs=3).fit(x)
    assert single.item_factors_.dtype == np.float32
    np.testing.assert_allclose(single.item_factors_, double.item_factors_, atol=1e-4)


# --------------------------------------------------------------------------------------------
# Debiased iALS


def test_debiased_steps_equal_brute_force_with_per_user_confidence() -> None:
    x = random_binary(seed=10)
    rng = np.random.default_rng(11)
    item_factors = rng.normal(size=(x.shape[1], 4))
    user_factors = rng.normal(size=(x.shape[0], 4))
    model = DebiasedIALS(**PARAMS, prior="count_k", prior_k=3)
    counts = x.getnnz(1)
    n_items = x.shape[1]
    # Li 2023, App. A.3: c_u = τ_u⁺|I|/|I_u⁺|, τ_u⁺ = (|I_u⁺| + K)/|I| clipped to 1 − 1e-6
    tau = np.minimum((counts + 3) / n_items, 1 - 1e-6)
    confidence = np.where(counts > 0, tau * n_items / np.maximum(counts, 1), 1.0)
    np.testing.assert_allclose(model.confidence(counts, n_items), confidence, rtol=1e-15)
    quad = confidence * (1 - 0.3)
    expected_users = brute_user_factors(x.toarray(), item_factors, 0.3, 0.05, 1.0,
                                        confidence, quad)
    expected_items = brute_item_factors(x.toarray(), user_factors, 0.3, 0.05, 1.0,
                                        confidence, quad)
    np.testing.assert_allclose(model.solve_users(x, item_factors), expected_users, atol=1e-10)
    np.testing.assert_allclose(model.solve_items(x, user_factors), expected_items, atol=1e-10)


def test_debiased_prior_modes() -> None:
    model = DebiasedIALS(prior="ratio_alpha", prior_alpha=0.5)
    np.testing.assert_allclose(model.confidence(np.array([1, 4, 9]), 100), 1.5, rtol=1e-15)
    fixed = DebiasedIALS(prior="fixed", tau_plus=0.05)
    np.testing.assert_allclose(fixed.confidence(np.array([1, 4, 0]), 100), [5.0, 1.25, 1.0])


@pytest.mark.parametrize("alpha0,c", [(0.2, 1.0), (0.2, 2.5), (0.6, 1.3)])
def test_theorem2_debiased_step_is_scaled_mapped_ials_step(alpha0: float, c: float) -> None:
    """Li 2023, eq. 99 Theorem 2 (ν = 0): debiased step = mapped iALS step / (1 − α₀).
    c_u = 1 + prior_alpha is constant while τ_u⁺ = c|I_u⁺|/|I| < 1 (no clipping), hence the
    sparse rows."""
    x = random_binary(density=0.15, seed=12, full_row=False)
    assert (x.getnnz(1) * c < x.shape[1]).all()
    rng = np.random.default_rng(13)
    item_factors = rng.normal(size=(x.shape[1], 4))
    user_factors = rng.normal(size=(x.shape[0], 4))
    reg = 0.7
    debiased = DebiasedIALS(factors=4, reg=reg, alpha0=alpha0, nu=0.0, dtype="float64",
                            prior="ratio_alpha", prior_alpha=c - 1.0)
    mapped = IALS(factors=4, reg=reg / ((1 - alpha0) * c),
                  alpha0=alpha0 / ((1 - alpha0) * c), nu=0.0, dtype="float64")
    np.testing.assert_allclose(debiased.solve_users(x, item_factors),
                               mapped.solve_users(x, item_factors) / (1 - alpha0), atol=1e-10)
    np.testing.assert_allclose(debiased.solve_items(x, user_factors),
                               mapped.solve_items(x, user_factors) / (1 - alpha0), atol=1e-10)


@pytest.mark.parametrize("alpha0,c", [(0.2, 2.0), (0.6, 1.3)])
def test_theorem2_a_whole_debiased_fit_is_a_mapped_ials_fit(alpha0: float, c: float) -> None:
    """The debiased objective with constant c and ν = 0 is (1 − α₀)/c times iALS's objective at
    α₀' = α₀/((1−α₀)c), λ' = λ/c in the factors scaled by a = √(1−α₀) on both sides (expand
    (ŷ' − 1)² with ŷ' = a²ŷ). Exact alternating minimisation commutes with that change of
    variables, so a fit started from factors scaled by a (init_std × a) stays a × the debiased
    fit at every sweep: the same rankings. The per-step identity's λ/((1−α₀)c) holds for one
    step from the same fixed side only; over sweeps the 1/(1−α₀) it leaves on one side feeds
    back."""
    x = random_binary(density=0.15, seed=12, full_row=False)
    assert (x.getnnz(1) * c < x.shape[1]).all()  # c_u stays constant (no clipping)
    reg, scale = 0.7, np.sqrt(1 - alpha0)
    debiased = DebiasedIALS(factors=4, reg=reg, alpha0=alpha0, nu=0.0, dtype="float64", epochs=6,
                            init_std=0.1, prior="ratio_alpha", prior_alpha=c - 1.0).fit(x)
    mapped = IALS(factors=4, reg=reg / c, alpha0=alpha0 / ((1 - alpha0) * c), nu=0.0,
                  dtype="float64", epochs=6, init_std=0.1 * scale).fit(x)
    np.testing.assert_allclose(debiased.user_factors_ * scale, mapped.user_factors_, atol=1e-12)
    np.testing.assert_allclose(debiased.item_factors_ * scale, mapped.item_factors_, atol=1e-12)
    stepwise = IALS(factors=4, reg=reg / ((1 - alpha0) * c), alpha0=alpha0 / ((1 - alpha0) * c),
                    nu=0.0, dtype="float64", epochs=6, init_std=0.1 * scale).fit(x)
    assert np.abs(debiased.user_factors_ * scale - stepwise.user_factors_).max() > 1e-3


def test_debiased_loss_decreases() -> None:
    model = DebiasedIALS(**PARAMS, epochs=10, prior="count_k", prior_k=5).fit(random_binary())
    assert np.all(np.diff(model.loss_history_) <= 1e-12 * np.abs(model.loss_history_[:-1]))


# --------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("cls,params", [
    (IALS, {"reg": -1.0}),
    (IALS, {"factors": 0}),
    (IALS, {"factors": -3}),
    (IALS, {"alpha0": -0.1}),
    (IALS, {"nu": float("nan")}),
    (IALS, {"epochs": 0}),
    (IALS, {"solver": "lu"}),
    (IALS, {"backend": "jax"}),
    (IALS, {"dtype": "int32"}),
    (IALS, {"cg_steps": 0}),
    (DebiasedIALS, {"alpha0": 1.0}),
    (DebiasedIALS, {"alpha0": 1.5}),
    (DebiasedIALS, {"prior": "uniform"}),
    (DebiasedIALS, {"tau_plus": 1.0}),
    (WMF, {"factors": 0}),
    (WMF, {"reg": -1.0}),
    (WMF, {"alpha": 0.0}),
    (WMF, {"confidence": "c"}),
])
def test_bad_parameters_raise_config_error(cls: type, params: dict) -> None:
    with pytest.raises(ConfigError, match=next(iter(params))):
        cls(**params)


def test_bad_data_and_unfitted() -> None:
    with pytest.raises(DataError):
        IALS().fit(np.ones((3, 3)))
    with pytest.raises(DataError):
        IALS().fit(sp.csr_matrix((4, 3)))
    with pytest.raises(ConfigError, match="not fitted"):
        IALS().score(sp.csr_matrix((1, 3)))
    with pytest.raises(ConfigError, match="positive definite"):
        IALS(factors=6, reg=0.0, alpha0=0.0, dtype="float64").fit(random_binary(n_items=5))


# --------------------------------------------------------------------------------------------
# WMF (implicit)


def planted_blocks(seed: int = 0) -> sp.csr_matrix:
    """4 user groups x 4 item groups; a user likes items of its own group with p = 0.6 and
    other items with p = 0.03."""
    rng = np.random.default_rng(seed)
    user_group = np.repeat(np.arange(4), 30)
    item_group = np.repeat(np.arange(4), 15)
    prob = np.where(user_group[:, None] == item_group[None, :], 0.6, 0.03)
    return sp.csr_matrix((rng.random(prob.shape) < prob).astype(np.float32))


def held_out_auc(scores: np.ndarray, foldin: sp.csr_matrix, targets: sp.csr_matrix) -> float:
    """Mean over users of P(score of a held-out item > score of a never-seen item)."""
    aucs = []
    for u in range(scores.shape[0]):
        positives = targets[u].indices
        negatives = np.setdiff1d(np.arange(scores.shape[1]),
                                 np.union1d(foldin[u].indices, positives))
        if positives.size and negatives.size:
            diff = scores[u, positives][:, None] - scores[u, negatives][None, :]
            aucs.append((diff > 0).mean() + 0.5 * (diff == 0).mean())
    return float(np.mean(aucs))


def split_rows(matrix: sp.csr_matrix, seed: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    rng = np.random.default_rng(seed)
    coo = matrix.tocoo()
    held = rng.random(coo.nnz) < 0.2
    def part(mask: np.ndarray) -> sp.csr_matrix:
        return sp.csr_matrix((coo.data[mask], (coo.row[mask], coo.col[mask])),
                             shape=matrix.shape)
    return part(~held), part(held)


@pytest.mark.parametrize("confidence", ["alpha", "one_plus_alpha"])
def test_wmf_ranks_held_out_items_above_chance(confidence: str) -> None:
    train, targets = split_rows(planted_blocks(), seed=1)
    model = WMF(factors=8, reg=1.0, alpha=5.0, confidence=confidence, iterations=10,
                num_threads=1, record_loss=True).fit(train)
    users = np.arange(train.shape[0])
    auc = held_out_auc(model.score(train, users=users), train, targets)
    assert auc > 0.85
    assert held_out_auc(model.score(train, users=None), train, targets) > 0.85
    assert model.loss_history_.shape == (10,)


@pytest.mark.parametrize("confidence,c", [("alpha", 4.0), ("one_plus_alpha", 5.0)])
def test_wmf_foldin_solves_the_confidence_weighted_normal_equations(confidence: str,
                                                                    c: float) -> None:
    """p_u = (QᵀQ + (c − 1)Q_SᵀQ_S + λI)⁻¹ c Q_Sᵀ1 (Hu et al. 2008; Li 2023, eq. 64) with c = α or 1
    + α."""
    x = random_binary(seed=14)
    model = WMF(factors=3, reg=0.5, alpha=4.0, confidence=confidence, iterations=3,
                use_cg=False, dtype="float64", num_threads=1).fit(x)
    q = model.item_factors_.astype(np.float64)
    expected = np.zeros((x.shape[0], 3))
    for u in range(x.shape[0]):
        q_s = q[x[u].indices]
        system = q.T @ q + (c - 1.0) * q_s.T @ q_s + 0.5 * np.eye(3)
        expected[u] = np.linalg.solve(system, c * q_s.sum(0))
    np.testing.assert_allclose(model.solve_users(x), expected, atol=1e-5)


def test_wmf_with_unit_confidence_is_regularized_mf() -> None:
    """Hu et al. 2008; Li 2023, eq. 64 test 2: c = 1 everywhere gives eq. 72, whose product is the
    soft-thresholded SVD U diag((σ − λ)₊) Vᵀ (Li 2023, eqs. 72–74)."""
    x = random_binary(n_users=25, n_items=10, seed=15)
    reg = 1.5
    model = WMF(factors=10, reg=reg, alpha=1.0, iterations=400, use_cg=False, dtype="float64",
                num_threads=1).fit(x)
    u, sigma, vt = np.linalg.svd(x.toarray().astype(np.float64), full_matrices=False)
    expected = (u * np.maximum(sigma - reg, 0.0)) @ vt
    np.testing.assert_allclose(model.user_factors_ @ model.item_factors_.T, expected, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Configs


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_numba_backend_float32_and_debiased_agree_with_numpy(solver: str) -> None:
    """The compiled kernels in float32 (rounding only) and with the debiased weights q, l."""
    x = random_binary(n_users=300, n_items=60, density=0.1, seed=8)
    for cls, extra in ((IALS, {}), (DebiasedIALS, {"prior": "count_k", "prior_k": 3})):
        fits = [cls(**{**PARAMS, **extra, "dtype": "float32"}, epochs=3, solver=solver, backend=b,
                    num_threads=2).fit(x) for b in ("numpy", "numba")]
        scale = np.abs(fits[0].user_factors_).max()
        np.testing.assert_allclose(fits[1].user_factors_, fits[0].user_factors_,
                                   atol=2e-4 * scale)
        np.testing.assert_allclose(fits[1].loss_history_, fits[0].loss_history_, rtol=1e-4)


@pytest.mark.parametrize("factors", [4, 37, 64])
@pytest.mark.parametrize("nu", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("cls", [IALS, DebiasedIALS])
@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_numba_backend_equals_numpy_in_float64(solver: str, cls: type, nu: float,
                                               factors: int) -> None:
    """The compiled kernels (vectorised loops, own blocked Cholesky, CG in groups of 8 rows)
    give the numpy back-end's factors, objective and fold-in scores to 1e-10 in float64, at
    factors 4, 37 (no multiple of the 4-wide blocks or 16-wide vectors) and 64, for every ν
    and for the debiased weights q = c(1−α₀), l = c."""
    x = random_binary(n_users=150, n_items=90, density=0.12, seed=12)
    extra = {"prior": "count_k", "prior_k": 3} if cls is DebiasedIALS else {}
    fits = [cls(**{**PARAMS, **extra, "factors": factors, "nu": nu}, epochs=3, solver=solver,
                backend=backend, num_threads=2).fit(x) for backend in ("numpy", "numba")]
    scale = np.abs(fits[0].item_factors_).max()
    assert scale > 1e-3  # a real fit, not factors collapsed to 0
    np.testing.assert_allclose(fits[1].user_factors_, fits[0].user_factors_, rtol=0,
                               atol=1e-10 * scale)
    np.testing.assert_allclose(fits[1].item_factors_, fits[0].item_factors_, rtol=0,
                               atol=1e-10 * scale)
    np.testing.assert_allclose(fits[1].loss_history_, fits[0].loss_history_, rtol=1e-12)
    foldin = x[:40]
    np.testing.assert_allclose(fits[1].score(foldin, users=None),
                               fits[0].score(foldin, users=None), rtol=0, atol=1e-10)


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_numba_backend_threads_and_chunks_do_not_change_the_numbers(solver: str) -> None:
    """One thread (one chunk) and three threads (24 chunks, partial CG groups) give the same
    bits: every row is solved alone and the Gram matrix is summed over fixed blocks."""
    x = random_binary(n_users=203, n_items=50, density=0.15, seed=13)
    fits = [IALS(**{**PARAMS, "factors": 19}, epochs=2, solver=solver, backend="numba",
                 num_threads=threads).fit(x) for threads in (1, 3)]
    np.testing.assert_array_equal(fits[0].user_factors_, fits[1].user_factors_)
    np.testing.assert_array_equal(fits[0].item_factors_, fits[1].item_factors_)
    np.testing.assert_array_equal(fits[0].loss_history_, fits[1].loss_history_)


@pytest.mark.parametrize("factors", [1, 5, 16, 45])
def test_compiled_cholesky_equals_lapack(factors: int) -> None:
    """`_cholesky_upper` + `_solve_upper` against numpy's LAPACK Cholesky and solve, on the
    padded layout (zero columns past k) the kernel uses."""
    from linrec.models._als_kernels import _WIDTH, _cholesky_upper, _solve_upper

    rng = np.random.default_rng(factors)
    half = rng.normal(size=(factors, factors + 3))
    system = half @ half.T + 0.1 * np.eye(factors)
    padded = (factors + _WIDTH - 1) // _WIDTH * _WIDTH + _WIDTH
    work = np.zeros((factors, padded))
    work[:, :factors] = system
    rhs = np.zeros(padded)
    rhs[:factors] = rng.normal(size=factors)
    expected = np.linalg.solve(system, rhs[:factors])
    assert _cholesky_upper(work, factors, -np.ones(4))
    np.testing.assert_allclose(np.triu(work[:, :factors]),
                               np.linalg.cholesky(system).T, atol=1e-12)
    assert not work[:, factors:].any()  # the padding stays 0
    _solve_upper(work, rhs, factors)
    np.testing.assert_allclose(rhs[:factors], expected, atol=1e-10)
    indefinite = system - 2 * np.linalg.eigvalsh(system)[-1] * np.eye(factors)
    work[:, :factors] = indefinite
    assert not _cholesky_upper(work, factors, -np.ones(4))


def test_numba_backend_reports_an_indefinite_system() -> None:
    with pytest.raises(ConfigError, match="not positive definite"):
        IALS(factors=30, reg=0.0, alpha0=0.0, epochs=1, backend="numba",
             dtype="float64").fit(random_binary(n_users=10, n_items=40, density=0.05))


@pytest.mark.parametrize("shape", [(1000, 7), (70, 256), (5, 0), (0, 8)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_initial_factors_drawn_in_chunks_equal_one_draw(shape, dtype) -> None:
    """`_normal_rows` gives the numbers of one float64 draw of the whole array cast at once,
    bit for bit, with the empty rows zeroed, and leaves the generator where one draw does
    (so the item factors drawn next are the same too)."""
    from linrec.models.als import _normal_rows

    zero_rows = np.arange(shape[0]) % 3 == 1
    expected_rng, rng = np.random.default_rng(4), np.random.default_rng(4)
    expected = expected_rng.normal(0.0, 0.1, shape)
    expected[zero_rows] = 0.0
    expected = np.ascontiguousarray(expected, dtype=dtype)
    got = _normal_rows(rng, 0.1, shape, dtype, zero_rows)
    assert got.dtype == np.dtype(dtype) and got.flags.c_contiguous
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))
    assert rng.random() == expected_rng.random()
