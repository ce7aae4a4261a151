"""EASE family (Steck 2019; Li 2023, eq. 100; Steck 2020; Jin & Li 2023, Theorems 2 and 3; Li 2023,
eqs. 101–103) against independent per-column solves written here (np.linalg.lstsq / solve), in
float64 to 1e-10."""

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.errors import ConfigError, DataError, MemoryBudgetError
from linrec.models import build_model, linalg
from linrec.models.ease import DLAE, EASE, EDLAE, DebiasedEASE, LowRankEDLAE
from tests.models.conftest import binary_matrix, sized_advice_ease, zero_diag_column_solve

TOL = 1e-10


@pytest.fixture(scope="module")
def X() -> sp.csr_matrix:
    return binary_matrix(120, 25, 0.2, seed=0)


def test_ease_equals_columnwise_constrained_ridge(X):
    lam = 7.0
    W = EASE(lam=lam, dtype="float64").fit(X).W_
    dense = X.toarray()
    n = dense.shape[1]
    expected = np.column_stack([zero_diag_column_solve(dense, np.full(n, lam), j)
                                for j in range(n)])
    np.testing.assert_allclose(W, expected, rtol=0, atol=TOL)
    assert np.all(np.diag(W) == 0.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ease_diagonal_exactly_zero_and_scores(X, dtype):
    model = EASE(lam=3.0, dtype=dtype).fit(X)
    assert model.W_.dtype == np.dtype(dtype)
    assert np.all(np.diag(model.W_) == 0.0)
    foldin = X[:7]
    scores = model.score(foldin)
    assert scores.shape == (7, X.shape[1]) and scores.dtype == np.dtype(dtype)
    np.testing.assert_allclose(scores, foldin.toarray() @ model.W_, rtol=1e-6, atol=1e-6)


def test_ease_single_thread_fit_equals_default(X):
    np.testing.assert_allclose(EASE(lam=2.0, dtype="float64", num_threads=1).fit(X).W_,
                               EASE(lam=2.0, dtype="float64").fit(X).W_, rtol=0, atol=TOL)


def test_ease_large_lambda_tends_to_cooccurrence(X):
    G = (X.T @ X).toarray()
    offdiag = G - np.diag(np.diag(G))
    errors = []
    for lam in (1e6, 1e7):
        W = EASE(lam=lam, dtype="float64").fit(X).W_
        errors.append(np.abs(lam * W - offdiag).max())
    assert errors[1] < 1e-3 * offdiag.max()
    assert errors[1] < errors[0] / 5  # the gap shrinks like 1/λ


def test_ease_float32_and_float64_top100_agree():
    X = binary_matrix(1500, 400, 0.03, seed=1)
    foldin = X[:200]
    s64 = EASE(lam=50.0, dtype="float64").fit(X).score(foldin)
    s32 = EASE(lam=50.0, dtype="float32").fit(X).score(foldin)
    top64 = np.argsort(-s64, axis=1)[:, :100]
    top32 = np.argsort(-s32, axis=1)[:, :100]
    overlap = np.mean([np.intersect1d(a, b).size / 100 for a, b in zip(top64, top32, strict=True)])
    assert overlap >= 0.99  # docs/concepts/models.md: fp32 vs fp64 top-100 agreement >= 99 %


def test_ease_large_n_solver_path_gives_the_same_model(X, monkeypatch):
    default = EASE(lam=5.0, dtype="float64").fit(X).W_
    original = linalg.spd_inverse

    def forced(A, *args, **kwargs):
        return original(A, large_n=1, block=8)

    monkeypatch.setattr("linrec.models.ease.spd_inverse", forced)
    blocked = EASE(lam=5.0, dtype="float64").fit(X).W_
    np.testing.assert_allclose(blocked, default, rtol=0, atol=TOL)


def test_dlae_equals_normal_equations(X):
    p, lam = 0.3, 2.0
    W = DLAE(p=p, lam=lam, dtype="float64").fit(X).W_
    dense = X.toarray()
    G = dense.T @ dense
    penalty = p / (1 - p) * np.diag(G) + lam
    # min ‖X − XW‖² + ‖Λ^{1/2}W‖² column by column: stacked least squares [X; √Λ] w = [x_j; 0]
    design = np.vstack([dense, np.diag(np.sqrt(penalty))])
    target = np.vstack([dense, np.zeros_like(G)])
    expected = np.linalg.lstsq(design, target, rcond=None)[0]
    np.testing.assert_allclose(W, expected, rtol=0, atol=TOL)


def test_edlae_equals_columnwise_weighted_ridge(X):
    p, lam = 0.4, 1.5
    W = EDLAE(p=p, lam=lam, dtype="float64").fit(X).W_
    dense = X.toarray()
    penalty = p / (1 - p) * (dense ** 2).sum(axis=0) + lam
    expected = np.column_stack([zero_diag_column_solve(dense, penalty, j)
                                for j in range(dense.shape[1])])
    np.testing.assert_allclose(W, expected, rtol=0, atol=TOL)
    assert np.all(np.diag(W) == 0.0)


def test_edlae_without_dropout_is_ease(X):
    np.testing.assert_allclose(EDLAE(p=0.0, lam=9.0, dtype="float64").fit(X).W_,
                               EASE(lam=9.0, dtype="float64").fit(X).W_, rtol=0, atol=TOL)


def test_debiased_ease_equals_its_own_kkt_solve(X):
    lam, alpha = 4.0, 0.6
    W = DebiasedEASE(lam=lam, alpha=alpha, dtype="float64").fit(X).W_
    dense = X.toarray()
    G = dense.T @ dense
    n = G.shape[0]
    expected = np.zeros((n, n))
    for j in range(n):
        # stationarity of ‖x_j − X_{−j}w‖² − α‖X_{−j}w‖² + λ‖w‖²: ((1−α)G_{−j,−j} + λI) w = G_{−j,j}
        others = np.delete(np.arange(n), j)
        system = (1 - alpha) * G[np.ix_(others, others)] + lam * np.eye(n - 1)
        expected[others, j] = np.linalg.solve(system, G[others, j])
    np.testing.assert_allclose(W, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.9, 0.999])
def test_debiased_ease_theorem3(X, alpha):
    lam = 6.0
    debiased = DebiasedEASE(lam=lam, alpha=alpha, dtype="float64").fit(X).W_
    ease = EASE(lam=lam / (1 - alpha), dtype="float64").fit(X).W_ / (1 - alpha)
    np.testing.assert_allclose(debiased, ease, rtol=0, atol=TOL * max(1.0, np.abs(ease).max()))


@pytest.mark.parametrize("make", [
    lambda: EASE(lam=-1.0),
    lambda: EASE(lam=float("nan")),
    lambda: EASE(dtype="float16"),
    lambda: EASE(num_threads=-1),
    lambda: DLAE(p=1.0),
    lambda: EDLAE(p=-0.1),
    lambda: EDLAE(lam=-2.0),
    lambda: DebiasedEASE(alpha=1.0),
    lambda: DebiasedEASE(alpha=1.5),
    lambda: DebiasedEASE(alpha=-0.1),
])
def test_bad_parameters_raise_config_error(make):
    with pytest.raises(ConfigError, match="allowed"):
        make()


def test_singular_gram_without_regularization_is_reported():
    X = sp.csr_matrix(np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 1.0]]))  # item 1 never seen
    with pytest.raises(ConfigError, match="increase the regularization"):
        EASE(lam=0.0, dtype="float64").fit(X)


def test_too_large_matrix_raises_memory_budget_error(X, monkeypatch):
    monkeypatch.setattr(linalg, "available_memory_bytes", lambda: 1000)
    with pytest.raises(MemoryBudgetError) as err:
        EASE(dtype="float64").fit(X)
    msg = str(err.value)
    assert "GiB" in msg and "25x25" in msg and "float32" in msg and "lrr" in msg


def test_score_checks_item_count_and_registry(X):
    model = build_model("ease", lam=3.0, dtype="float64").fit(X)
    assert isinstance(model, EASE)
    with pytest.raises(DataError, match="items"):
        model.score(sp.csr_matrix((2, 3)))
    with pytest.raises(ConfigError, match="fit"):
        EASE().score(X)


def edlae_objective(dense: np.ndarray, W: np.ndarray, penalty: np.ndarray) -> float:
    return ((dense - dense @ W) ** 2).sum() + (penalty[:, None] * W ** 2).sum()


def test_lowrank_edlae_full_rank_converges_to_edlae(X):
    p, lam = 0.3, 2.0
    full = EDLAE(p=p, lam=lam, dtype="float64").fit(X).W_
    model = LowRankEDLAE(p=p, lam=lam, rank=X.shape[1], n_iter=2000, tol=1e-14,
                         dtype="float64").fit(X)
    assert model.n_iter_run_ < 2000  # converged before the cap
    np.testing.assert_allclose(model.W_, full, rtol=0, atol=1e-9)
    assert np.all(np.diag(model.W_) == 0.0)


def test_lowrank_edlae_approaches_full_rank_as_rank_grows(X):
    p, lam = 0.3, 2.0
    dense = X.toarray()
    penalty = p / (1 - p) * dense.sum(axis=0) + lam
    optimum = edlae_objective(dense, EDLAE(p=p, lam=lam, dtype="float64").fit(X).W_, penalty)
    gaps = []
    for rank in (5, 15, 25):
        W = LowRankEDLAE(p=p, lam=lam, rank=rank, n_iter=300, dtype="float64").fit(X).W_
        assert np.all(np.diag(W) == 0.0)
        gaps.append(edlae_objective(dense, W, penalty) - optimum)
    # the zero-diagonal EDLAE is the optimum over all ranks: no gap is negative, and the gap
    # shrinks as the rank grows towards n_items = 25 (where it is < 1e-8 relative)
    assert min(gaps) > -1e-9 * optimum
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < 1e-8 * optimum


@pytest.mark.parametrize("kwargs", [{"rank": 0}, {"omega": 0.0}, {"p": 1.2}, {"lam": -1.0},
                                    {"n_iter": 0}])
def test_lowrank_edlae_bad_parameters(kwargs):
    with pytest.raises(ConfigError, match="allowed"):
        LowRankEDLAE(**kwargs)


def _solve_failing_in(dtypes: tuple, monkeypatch) -> list:
    """np.linalg.solve raising LinAlgError("Singular matrix") on arrays of `dtypes` (what
    ML-100K in LightGCN format did in float32 at rank 1000); returns the dtypes it saw."""
    real = np.linalg.solve
    seen = []

    def solve(a, b):
        seen.append(np.asarray(a).dtype)
        if np.asarray(a).dtype in dtypes:
            raise np.linalg.LinAlgError("Singular matrix")
        return real(a, b)

    monkeypatch.setattr(np.linalg, "solve", solve)
    return seen


def test_lowrank_edlae_retries_a_singular_float32_solve_in_float64(X, monkeypatch, caplog):
    """A numerical failure in float32 is caught, explained in a warning and recovered from by
    the float64 solve: the weights are the float64 model's, cast to float32."""
    params = dict(p=0.3, lam=2.0, rank=10, n_iter=50)
    reference = LowRankEDLAE(**params, dtype="float64").fit(X)
    seen = _solve_failing_in((np.dtype(np.float32),), monkeypatch)
    with caplog.at_level("WARNING", logger="linrec.models.ease"):
        model = LowRankEDLAE(**params, dtype="float32").fit(X)
    assert seen[0] == np.float32 and set(seen[1:]) == {np.dtype(np.float64)}  # failed, retried
    assert "edlae_lowrank: singular solve in float32 (Singular matrix); retrying in float64" \
        in caplog.text
    assert model.W_.dtype == np.float32
    np.testing.assert_array_equal(model.W_, reference.W_.astype(np.float32))
    assert model.n_iter_run_ == reference.n_iter_run_ and model.rank_ == reference.rank_


def test_lowrank_edlae_failing_in_float64_says_what_to_change(X, monkeypatch):
    from linrec.errors import NumericalError

    _solve_failing_in((np.dtype(np.float32), np.dtype(np.float64)), monkeypatch)
    for dtype in ("float32", "float64"):  # float32: after the float64 retry failed too
        with pytest.raises(NumericalError, match=r"edlae_lowrank: the ADMM solve is singular "
                                                 r"\(Singular matrix\) even in float64; raise "
                                                 r"omega \(now .*\) or lam \(now 2.0\), or lower "
                                                 r"rank"):
            LowRankEDLAE(p=0.3, lam=2.0, rank=10, dtype=dtype).fit(X)


def reference_admm(G: np.ndarray, p: float, lam: float, omega: float, rank: int, n_iter: int,
                   tol: float) -> tuple[np.ndarray, int, list, list]:
    """Low-rank EDLAE's ADMM from its formulas (Steck 2020, eq. 111, with the penalty target T's
    off-diagonal the previous B, as the model's docstring states), with whole matrices and
    explicit inverses: W, the iterations run, and per iteration the residual and max(1, max|β|).
    V starts as the top-`rank` eigenvectors (numpy's eigh; B does not depend on their basis)."""
    n = G.shape[0]
    g = np.diag(G)
    Lam = np.diag(p / (1 - p) * g + lam)
    Om = Lam + omega * np.eye(n)
    A = G + Lam + Om
    V = np.linalg.eigh(G)[1][:, ::-1][:, :rank]
    B, beta, gamma = np.zeros((n, n)), np.zeros(n), np.zeros(n)
    residuals, scales = [], []
    for _ in range(n_iter):
        T = B - np.diag(np.diag(B)) + np.diag(beta - gamma)
        R = G @ np.diag(1 + beta) + Om @ T
        U = np.linalg.inv(A) @ R @ V @ np.linalg.inv(V.T @ V)  # min over U of the ALS sweep
        Vt = np.linalg.inv(U.T @ A @ U) @ U.T @ R  # then over V
        V, B = Vt.T, U @ Vt
        b = np.diag(B)
        beta_new = (np.diag(G @ B) - g + np.diag(Om) * (b + gamma)) / (g + np.diag(Om - Lam))
        gamma = gamma + b - beta_new
        residuals.append(max(np.abs(b - beta_new).max(), np.abs(beta_new - beta).max()))
        beta = beta_new
        scales.append(max(1.0, np.abs(beta).max()))
        if residuals[-1] < tol * scales[-1]:
            break
    return B - np.diag(np.diag(B)), len(residuals), residuals, scales


def weighted(X: sp.csr_matrix) -> sp.csr_matrix:
    """X with its ones replaced by weights 1..5 (the item-item family takes weights as given)."""
    return X.multiply(np.random.default_rng(3).integers(1, 6, X.shape)).tocsr()


@pytest.mark.parametrize("n_iter", [1, 2, 7])
@pytest.mark.parametrize("weights", ["binary", "1..5"])
def test_lowrank_edlae_iterates_are_the_admm_updates(X, n_iter, weights):
    """Every iterate, not only the full-rank fixed point (which any β update with the same
    constraint reaches): W after 1, 2 and 7 iterations to 1e-12."""
    X = X if weights == "binary" else weighted(X)
    G = (X.T @ X).toarray()
    expected, _, _, _ = reference_admm(G, 0.3, 2.0, 10.0, 10, n_iter, tol=1e-300)
    model = LowRankEDLAE(p=0.3, lam=2.0, rank=10, omega=10.0, n_iter=n_iter, tol=1e-300,
                         dtype="float64").fit(X)
    assert model.n_iter_run_ == n_iter and model.rank_ == 10
    np.testing.assert_allclose(model.W_, expected, rtol=0, atol=1e-12)


def test_lowrank_edlae_stops_at_the_first_residual_below_tol(X):
    """The stopping rule residual < tol·max(1, max|β|), read from the reference's trace: tol is
    set so that the iteration it stops at differs from the one a doubled tolerance stops at."""
    G = (X.T @ X).toarray()
    _, _, residuals, scales = reference_admm(G, 0.3, 2.0, 10.0, 10, 40, tol=1e-300)
    tol = 0.75 * residuals[5] / scales[5]
    stop = next(i for i, (r, s) in enumerate(zip(residuals, scales, strict=True)) if r < tol * s)
    doubled = next(i for i, (r, s) in enumerate(zip(residuals, scales, strict=True))
                   if r < 2 * tol * s)
    assert doubled < stop < 39
    expected, iterations, _, _ = reference_admm(G, 0.3, 2.0, 10.0, 10, 40, tol)
    assert iterations == stop + 1
    model = LowRankEDLAE(p=0.3, lam=2.0, rank=10, n_iter=40, tol=tol, dtype="float64").fit(X)
    assert model.n_iter_run_ == stop + 1
    np.testing.assert_allclose(model.W_, expected, rtol=0, atol=1e-12)


def test_lowrank_edlae_rank_defaults_to_the_catalogue_rule_and_refuses_more_than_n_items(X):
    model = LowRankEDLAE(p=0.3, lam=2.0, n_iter=3, dtype="float64").fit(X)
    assert model.rank_ == 8  # max(min(8, 25), min(1000, 25 // 20))
    G = (X.T @ X).toarray()
    expected, _, _, _ = reference_admm(G, 0.3, 2.0, 10.0, 8, 3, tol=1e-6)
    np.testing.assert_allclose(model.W_, expected, rtol=0, atol=1e-12)
    with pytest.raises(ConfigError, match="edlae_lowrank.rank=26 exceeds n_items=25"):
        LowRankEDLAE(rank=26).fit(X)


def test_lowrank_edlae_lowers_the_rank_to_the_numerical_rank_of_the_gram_matrix(caplog):
    """6 users: XᵀX has rank 6 whatever the rank asked; the other directions are dropped with
    a warning (their zero eigenvalues would make the first ALS step singular)."""
    X = binary_matrix(6, 25, 0.4, seed=2)
    numerical = np.linalg.matrix_rank(X.toarray())
    assert numerical == 6
    with caplog.at_level("WARNING", logger="linrec.models.ease"):
        model = LowRankEDLAE(p=0.3, lam=2.0, rank=20, n_iter=3, dtype="float64").fit(X)
    assert model.rank_ == 6
    assert caplog.messages == ["edlae_lowrank: rank 20 lowered to 6, the numerical rank of XᵀX"]
    expected, _, _, _ = reference_admm((X.T @ X).toarray(), 0.3, 2.0, 10.0, 6, 3, tol=1e-6)
    np.testing.assert_allclose(model.W_, expected, rtol=0, atol=1e-10)
    caplog.clear()
    with caplog.at_level("WARNING", logger="linrec.models.ease"):
        LowRankEDLAE(p=0.3, lam=2.0, rank=6, n_iter=3, dtype="float64").fit(X)
    assert caplog.messages == []  # the full numerical rank: nothing lowered, nothing said


@pytest.mark.parametrize("make, dtype, matrices, alternative", [
    (lambda: EASE(dtype="float64"), "float64", "1.25",
     "Use dtype=float32, or a low-rank model (model=lrr with rank <= 2000). dtype=float32 would "
     "need 0.0 GiB."),
    (lambda: EASE(dtype="float32"), "float32", "1.25",
     "Use dtype=float32, or a low-rank model (model=lrr with rank <= 2000)."),
    (lambda: LowRankEDLAE(dtype="float32"), "float32", "2.5",
     "Use dtype=float32, or model=lrr with rank <= 2000."),
])
def test_the_memory_guard_names_the_model_its_matrices_and_what_to_change(
        X, monkeypatch, make, dtype, matrices, alternative):
    """The whole message: the model and catalogue, the dense matrices alive at the fit's peak
    (EASE 1.25, the low-rank ADMM twice that) in the model's dtype, and the alternative."""
    model = make()
    monkeypatch.setattr(linalg, "available_memory_bytes", lambda: 1000)
    with pytest.raises(MemoryBudgetError) as err:
        model.fit(X)
    assert str(err.value) == (
        f"{model.name} on 25 items: needs about 0.0 GiB ({matrices} dense 25x25 {dtype} "
        f"matrices) but only 0.0 GiB is available. {alternative}")
    need = int(float(matrices) * 25 * 25 * np.dtype(dtype).itemsize)
    monkeypatch.setattr(linalg, "available_memory_bytes", lambda: need)
    make().fit(X)  # exactly enough fits


def test_the_memory_advice_may_depend_on_the_catalogue(X, monkeypatch):
    monkeypatch.setattr(linalg, "available_memory_bytes", lambda: 1000)
    with pytest.raises(MemoryBudgetError, match=r"\. Try model=lrr with rank <= 5\. dtype="):
        sized_advice_ease(dtype="float64").fit(X)


def test_singular_retry_warning_is_the_whole_message(X, monkeypatch, caplog):
    _solve_failing_in((np.dtype(np.float32),), monkeypatch)
    with caplog.at_level("WARNING", logger="linrec.models.ease"):
        LowRankEDLAE(p=0.3, lam=2.0, rank=10, n_iter=5, dtype="float32").fit(X)
    assert caplog.messages == [
        "edlae_lowrank: singular solve in float32 (Singular matrix); retrying in float64"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scoring_many_rows_is_scipys_product_bit_for_bit(dtype, monkeypatch):
    """From 256 fold-in rows the product goes through `sparse_dense_product`, whose compiled
    kernel (here from the first multiply-add on) gives the same bits as scipy's product, in
    the model's dtype, for every thread count."""
    from linrec.models import _sparse_dense

    monkeypatch.setattr(_sparse_dense, "KERNEL_MIN_MULTIPLY_ADDS", 0)
    X = binary_matrix(600, 40, 0.1, seed=5)
    foldin = weighted(X)[:300]
    for threads in (0, 1, 2):
        model = EASE(lam=3.0, dtype=dtype, num_threads=threads).fit(X)
        scores = model.score(foldin)
        expected = np.asarray(sp.csr_matrix(foldin, dtype=dtype) @ model.W_)
        assert scores.dtype == np.dtype(dtype) and scores.shape == (300, 40)
        np.testing.assert_array_equal(scores, expected)


def test_lowrank_edlae_in_float32_iterates_in_float32(X):
    """Every array of the float32 iteration stays float32 (a float64 one would promote the
    whole iteration: twice the memory), and W agrees with the float64 model to float32
    precision."""
    model = LowRankEDLAE(p=0.3, lam=2.0, rank=10, n_iter=5, dtype="float32").fit(X)
    assert model.W_.dtype == np.float32 and model.score(X[:3]).dtype == np.float32
    reference = LowRankEDLAE(p=0.3, lam=2.0, rank=10, n_iter=5, dtype="float64").fit(X)
    np.testing.assert_allclose(model.W_, reference.W_, rtol=0, atol=1e-5)


def test_a_plugin_config_without_a_device_fits_on_the_host(X):
    """A plugin's item-item model whose config has no `device` field fits on the CPU."""
    from dataclasses import dataclass

    from linrec.models.base import ModelConfig

    @dataclass
    class PlainConfig(ModelConfig):
        name: str = "plain_ease"
        lam: float = 7.0
        dtype: str = "float64"
        num_threads: int = 0

    class PlainEASE(EASE):
        config_class = PlainConfig

    assert not hasattr(PlainConfig(), "device")
    W = PlainEASE().fit(X).W_
    np.testing.assert_array_equal(W, EASE(lam=7.0, dtype="float64").fit(X).W_)
