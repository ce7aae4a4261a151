"""Learned λ_i and the nearby models (Jin et al. 2021, §3.4; docs/concepts/models.md learner tests),
float64."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from linrec.errors import ConfigError
from linrec.models.ease import EDLAE
from linrec.models.nearby import LearnedLambda, NearbyItemItem
from linrec.models.spectral import LRR
from tests.models.conftest import tensors_in

CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "model"


def planted(n_users: int = 80, n_items: int = 24, seed: int = 0) -> sp.csr_matrix:
    """3 user groups x 3 item groups (in-group p = 0.5, else 0.08)."""
    rng = np.random.default_rng(seed)
    user_group = np.arange(n_users) % 3
    item_group = np.arange(n_items) % 3
    prob = np.where(user_group[:, None] == item_group[None, :], 0.5, 0.08)
    return sp.csr_matrix((rng.random(prob.shape) < prob).astype(np.float32))


TRAIN = planted()
FOLDIN = planted(n_users=15, seed=1)
BASE = dict(rank=10, lam=5.0, c=2.0, dtype="float64", bpr_scale=1.0, batch_size=32, n_pairs=8)


def lrr_weights() -> np.ndarray:
    return LRR(rank=10, lam=5.0).fit(TRAIN).weights()


# --------------------------------------------------------------------------------------------
# Initialization reproduces the closed forms (Li 2023, §3.4.1; eq. 76)


@pytest.mark.parametrize("head_tail", [False, True])
def test_learned_lambda_at_init_equals_lrr(head_tail: bool) -> None:
    model = LearnedLambda(**BASE, head_tail=head_tail, epochs=0).fit(TRAIN)
    closed = LRR(rank=10, lam=5.0).fit(TRAIN)
    np.testing.assert_allclose(model.lambdas_, 5.0, rtol=0, atol=0)
    np.testing.assert_allclose(model.filter_, closed.filter_, rtol=1e-15, atol=0)
    np.testing.assert_allclose(model.score(FOLDIN), FOLDIN.toarray() @ lrr_weights(),
                               atol=1e-10)


def test_rmd_at_init_is_lrr_without_diagonal() -> None:
    model = LearnedLambda(**BASE, head_tail=True, rmd=True, epochs=0).fit(TRAIN)
    weights = lrr_weights()
    np.fill_diagonal(weights, 0.0)
    np.testing.assert_allclose(model.score(FOLDIN), FOLDIN.toarray() @ weights, atol=1e-10)


def test_rmd_output_has_zero_diagonal_after_training() -> None:
    model = LearnedLambda(**BASE, head_tail=True, rmd=True, epochs=3, lr=0.1).fit(TRAIN)
    identity = sp.identity(TRAIN.shape[1], format="csr")
    assert np.abs(np.diag(model.score(identity))).max() < 1e-14
    assert np.abs(model.alpha_).max() > 0  # it did train


def test_nearby_item_item_at_init_equals_base() -> None:
    base = EDLAE(p=0.3, lam=2.0, dtype="float64").fit(TRAIN)
    params = dict(base="edlae", base_params={"p": 0.3, "lam": 2.0, "dtype": "float64"},
                  dtype="float64", epochs=0)
    ht = NearbyItemItem(head_tail=True, **params).fit(TRAIN)
    np.testing.assert_allclose(ht.score(FOLDIN), FOLDIN.toarray() @ base.W_, atol=1e-10)
    keep_all = NearbyItemItem(head_tail=False, sparsify=True, **params).fit(TRAIN)
    np.testing.assert_allclose(keep_all.score(FOLDIN), FOLDIN.toarray() @ base.W_, atol=1e-10)
    sparse = NearbyItemItem(head_tail=True, sparsify=True, sparsify_threshold=0.01,
                            **params).fit(TRAIN)
    expected = FOLDIN.toarray() @ (base.W_ * (base.W_ > 0.01))
    np.testing.assert_allclose(sparse.score(FOLDIN), expected, atol=1e-10)


def test_nearby_item_item_rmd_zero_diagonal() -> None:
    model = NearbyItemItem(base="dlae", base_params={"p": 0.3, "lam": 2.0, "dtype": "float64"},
                           head_tail=True, rmd=True, dtype="float64", epochs=2,
                           lr=0.1).fit(TRAIN)
    identity = sp.identity(TRAIN.shape[1], format="csr")
    assert np.abs(np.diag(model.score(identity))).max() == 0.0


# --------------------------------------------------------------------------------------------
# Training


@pytest.mark.parametrize("options", [{}, {"head_tail": True}, {"head_tail": True, "rmd": True},
                                     {"dropout": 0.5}])
def test_training_decreases_bpr_loss(options: dict) -> None:
    start = LearnedLambda(**BASE, **options, epochs=0).fit(TRAIN)
    trained = LearnedLambda(**BASE, **options, epochs=15, lr=0.05).fit(TRAIN)
    assert trained.bpr_loss(TRAIN, seed=3) < start.bpr_loss(TRAIN, seed=3)
    scale = BASE["bpr_scale"]  # the objective written apart from the model, on its weights
    assert _bpr_objective(trained.weights(), scale) < _bpr_objective(start.weights(), scale)
    assert trained.loss_history_.shape == (15,)


def _bpr_objective(weights: np.ndarray, scale: float) -> float:
    """The BPR objective the learners minimise, written out apart from them: the mean over
    users of the mean over (positive i, unobserved j) of softplus(−t (s_ui − s_uj)), with
    s = x_u W on the training rows (Li 2023, §3.4.1)."""
    X = TRAIN.toarray().astype(np.float64)
    S = X @ weights
    per_user = []
    for u in range(X.shape[0]):
        pos, neg = np.flatnonzero(X[u] > 0), np.flatnonzero(X[u] == 0)
        if len(pos) and len(neg):
            gaps = S[u, pos][:, None] - S[u, neg][None, :]
            per_user.append(np.logaddexp(0.0, -scale * gaps).mean())
    return float(np.mean(per_user))


def test_learned_lambda_reaches_the_optimum_of_the_objective() -> None:
    """LRR with λ_i free in [λ − c, λ + c] on the top 3 components: the optimum of the objective
    above, over that box (L-BFGS-B on W(λ) = V_k diag(e/(e + λ_i)) V_kᵀ from numpy's
    eigendecomposition), lies at λ_i = λ − c here; the learner, from λ_i = λ, gets at least
    95 % of the way to the optimum's objective, its λ_i in the lowest tenth of the box."""
    from scipy.optimize import minimize

    rank, lam, c, scale = 3, 5.0, 4.0, 1.0
    X = TRAIN.toarray().astype(np.float64)
    eigenvalues, vectors = np.linalg.eigh(X.T @ X)
    top = np.argsort(eigenvalues)[::-1][:rank]
    e, v = eigenvalues[top], vectors[:, top]

    def weights(lambdas: np.ndarray) -> np.ndarray:
        return (v * (e / (e + lambdas))) @ v.T

    optimum = minimize(lambda x: _bpr_objective(weights(x), scale), np.full(rank, lam),
                       method="L-BFGS-B", bounds=[(lam - c, lam + c)] * rank)
    start = _bpr_objective(weights(np.full(rank, lam)), scale)
    model = LearnedLambda(rank=rank, lam=lam, c=c, dtype="float64", bpr_scale=scale,
                          batch_size=200, n_pairs=64, epochs=100, lr=0.05).fit(TRAIN)
    learned = _bpr_objective(model.weights(), scale)
    np.testing.assert_allclose(model.weights(), weights(model.lambdas_), atol=1e-10)
    assert np.allclose(optimum.x, lam - c)
    assert learned - optimum.fun <= 0.05 * (start - optimum.fun)
    assert np.all(model.lambdas_ < lam - c + 0.1 * 2 * c)


def test_nearby_item_item_training_decreases_bpr_loss() -> None:
    params = dict(base="edlae", base_params={"p": 0.3, "lam": 2.0, "dtype": "float64"},
                  head_tail=True, sparsify=True, sparsify_threshold=0.0, dtype="float64",
                  bpr_scale=5.0, batch_size=32, n_pairs=8, dropout=0.0)
    start = NearbyItemItem(**params, epochs=0).fit(TRAIN)
    trained = NearbyItemItem(**params, epochs=15, lr=0.05).fit(TRAIN)
    assert trained.bpr_loss(TRAIN, seed=3) < start.bpr_loss(TRAIN, seed=3)
    dense = lambda w: w.toarray() if sp.issparse(w) else w  # noqa: E731
    assert _bpr_objective(dense(trained.weights()), 5.0) < \
        _bpr_objective(dense(start.weights()), 5.0)


@pytest.mark.parametrize("options", [{}, {"head_tail": True, "rmd": True}])
def test_sampled_pair_scores_equal_full_scores(options: dict) -> None:
    """The training forward pass at sampled items (Li 2023, §3.4.1) = the scoring path at those
    items."""
    model = LearnedLambda(**BASE, **options, epochs=4, lr=0.1).fit(TRAIN)
    inputs = torch.as_tensor(FOLDIN.toarray(), dtype=torch.float64)
    items = torch.as_tensor(np.random.default_rng(0).integers(0, 24, (15, 6)))
    with torch.no_grad():
        pair = model._pair_scores(inputs, items, torch.gather(inputs, 1, items)).numpy()
    full = model.score(FOLDIN)
    np.testing.assert_allclose(pair, np.take_along_axis(full, items.numpy(), 1), atol=1e-12)


def test_lambdas_stay_in_the_search_range() -> None:
    """λ_i = λ + c·tanh(α_i) ∈ [λ − c, λ + c] (open in exact arithmetic; tanh rounds to ±1 in
    floating point for |α| > 19), even with a huge learning rate."""
    model = LearnedLambda(**{**BASE, "c": 4.9}, epochs=5, lr=50.0).fit(TRAIN)
    assert np.all(model.lambdas_ >= 5.0 - 4.9) and np.all(model.lambdas_ <= 5.0 + 4.9)
    assert np.abs(model.alpha_).max() > 1.0
    assert np.all(model.filter_ > 0) and np.all(np.isfinite(model.filter_))


def test_gradcheck_of_the_bpr_loss() -> None:
    model = LearnedLambda(**BASE, head_tail=True, rmd=True, epochs=1, lr=0.1).fit(TRAIN)
    users = np.arange(10)

    def loss(alpha: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        model.params_["alpha"], model.params_["head"] = alpha, head
        return model._batch_loss(TRAIN, users, torch.Generator().manual_seed(0), train=False)

    alpha = model.params_["alpha"].detach().clone().requires_grad_(True)
    head = model.params_["head"].detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(loss, (alpha, head), eps=1e-6, atol=1e-6)


def test_training_is_deterministic(device: str) -> None:
    one = LearnedLambda(**BASE, head_tail=True, dropout=0.5, epochs=3, device=device).fit(TRAIN)
    two = LearnedLambda(**BASE, head_tail=True, dropout=0.5, epochs=3, device=device).fit(TRAIN)
    np.testing.assert_array_equal(one.alpha_, two.alpha_)
    np.testing.assert_array_equal(one.head_, two.head_)


@pytest.mark.parametrize("model", [
    lambda device: LearnedLambda(**BASE, head_tail=True, rmd=True, dropout=0.5, epochs=3,
                                 device=device),
    lambda device: NearbyItemItem(base="edlae", base_params={"p": 0.3, "lam": 2.0,
                                                             "dtype": "float64"},
                                  sparsify=True, sparsify_threshold=0.0, dtype="float64",
                                  bpr_scale=1.0, batch_size=32, n_pairs=8, epochs=3,
                                  device=device),
], ids=["learned lambda", "nearby sparse"])
def test_a_fit_on_cuda_is_the_fit_on_the_cpu(model, device: str) -> None:
    """The batches, pairs and dropout are drawn on the CPU whatever the device, so a float64 fit
    on a GPU ends where the CPU's does, to rounding."""
    if device == "cpu":
        pytest.skip("compares a fit on a CUDA device with the CPU's")
    on_cpu, on_device = model("cpu").fit(TRAIN), model(device).fit(TRAIN)
    np.testing.assert_allclose(on_device.loss_history_, on_cpu.loss_history_, rtol=1e-9)
    np.testing.assert_allclose(on_device.score(FOLDIN), on_cpu.score(FOLDIN), rtol=1e-9,
                               atol=1e-12)


def test_a_model_trained_on_any_device_is_saved_to_score_on_the_cpu(tmp_path,
                                                                   device: str) -> None:
    model = LearnedLambda(**BASE, head_tail=True, epochs=2, device=device).fit(TRAIN)
    model.save(tmp_path / "model.pkl")
    loaded = LearnedLambda.load(tmp_path / "model.pkl")
    tensors = tensors_in(loaded.__dict__)
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    assert loaded.config.device == "cpu"
    np.testing.assert_allclose(loaded.score(FOLDIN), model.score(FOLDIN), rtol=1e-9, atol=1e-12)


def test_a_killed_fit_resumes_to_the_numbers_of_an_uninterrupted_one(tmp_path, monkeypatch,
                                                                     device: str) -> None:
    """The nearby models train under the epoch driver: a fit killed after epoch 2's checkpoint
    continues from it and ends where an uninterrupted fit does (dropout and pair draws
    included)."""
    from linrec.models.training import EpochDriver

    params = dict(**BASE, head_tail=True, dropout=0.5, epochs=4, device=device)
    whole = LearnedLambda(**params, checkpoint_dir=str(tmp_path / "whole")).fit(TRAIN)
    real_save = EpochDriver._save

    def killed(self) -> None:
        real_save(self)
        if self.epoch == 2:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(EpochDriver, "_save", killed)
        with pytest.raises(KeyboardInterrupt):
            LearnedLambda(**params, checkpoint_dir=str(tmp_path / "killed")).fit(TRAIN)
    resumed = LearnedLambda(**params, checkpoint_dir=str(tmp_path / "killed")).fit(TRAIN)
    assert resumed.resumed_from_ == 2 and whole.resumed_from_ is None
    np.testing.assert_array_equal(resumed.alpha_, whole.alpha_)
    np.testing.assert_array_equal(resumed.head_, whole.head_)
    np.testing.assert_array_equal(resumed.loss_history_, whole.loss_history_)


def test_early_stopping_keeps_the_best_epoch_of_the_validation_callback() -> None:
    """The run passes a validation callback (model -> score); with patience p the trainer stops
    p epochs after the best one and restores that epoch's parameters."""
    scores = iter([0.1, 0.3, 0.2, 0.25, 0.9])
    seen = []

    def validation(model) -> float:
        seen.append(model.alpha_.copy())
        return next(scores)

    model = LearnedLambda(**BASE, epochs=5, patience=2, lr=0.05).fit(TRAIN, validation)
    assert len(model.loss_history_) == 4  # best at epoch 2, stale at 3 and 4
    np.testing.assert_array_equal(model.alpha_, seen[1])


def test_early_stopping_with_the_runs_validation_score() -> None:
    """The callback linrec.eval.validation_score builds from a split (the run's selection
    metric on the validation users) drives the trainer end to end."""
    from linrec.data.splits import EvalSet, Split
    from linrec.eval import validation_score

    targets = planted(n_users=15, seed=2)
    targets = sp.csr_matrix(targets.toarray() * (FOLDIN.toarray() == 0))
    valid = EvalSet(users=np.arange(15), foldin=FOLDIN, targets=targets)
    split = Split(TRAIN, valid, valid, strong=True)
    score = validation_score(split)
    model = LearnedLambda(**BASE, epochs=6, patience=2, lr=0.05).fit(TRAIN, score)
    valid = [record["valid"] for record in model.history_]
    assert model.best_epoch_ == 1 + int(np.argmax(valid))
    if model.stop_reason_ == "early_stopping":
        assert len(valid) == model.best_epoch_ + 2  # patience 2 after the best
    else:
        assert model.stop_reason_ == "epochs" and len(valid) == 6
    assert score(model) == max(valid)  # the best epoch's parameters were kept


def test_fit_refuses_an_evaluation_set_in_place_of_a_callback() -> None:
    from linrec.data.splits import EvalSet

    valid = EvalSet(users=np.arange(15), foldin=FOLDIN, targets=FOLDIN)
    with pytest.raises(ConfigError, match="validation_score"):
        LearnedLambda(**BASE, epochs=1).fit(TRAIN, valid)


# --------------------------------------------------------------------------------------------
# Bad input and configs


@pytest.mark.parametrize("params,field", [
    ({"lam": 0.0}, "lam"), ({"lam": -1.0}, "lam"), ({"c": 6.0}, "c"), ({"c": -1.0}, "c"),
    ({"rank": 0}, "rank"), ({"dropout": 1.0}, "dropout"), ({"epochs": -1}, "epochs"),
    ({"lr": 0.0}, "lr"), ({"dtype": "float16"}, "dtype"), ({"bpr_scale": 0.0}, "bpr_scale"),
])
def test_learned_lambda_bad_parameters(params: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        LearnedLambda(**{**BASE, **params})


def test_nearby_item_item_bad_parameters() -> None:
    with pytest.raises(ConfigError, match="at least one"):
        NearbyItemItem(head_tail=False)
    with pytest.raises(ConfigError, match="sparsify_threshold"):
        NearbyItemItem(sparsify=True, sparsify_threshold="high")
    with pytest.raises(ConfigError, match="base='ials'.*allowed.*edlae"):
        NearbyItemItem(base="ials", base_params={"factors": 2, "epochs": 1})
    with pytest.raises(ConfigError, match="rank"):
        LearnedLambda(**{**BASE, "rank": 30}).fit(TRAIN)


@pytest.mark.parametrize("model", [
    lambda: LearnedLambda(**BASE, head_tail=True, rmd=True, epochs=4, lr=0.1),
    lambda: LearnedLambda(**BASE, epochs=2, lr=0.1),
    lambda: NearbyItemItem(base="edlae", base_params={"p": 0.3, "lam": 2.0, "dtype": "float64"},
                           head_tail=True, sparsify=True, sparsify_threshold=0.0,
                           dtype="float64", bpr_scale=5.0, batch_size=32, n_pairs=8,
                           epochs=3, lr=0.05),
    lambda: NearbyItemItem(base="edlae", base_params={"p": 0.3, "lam": 2.0, "dtype": "float64"},
                           head_tail=True, rmd=True, dtype="float64", batch_size=32, n_pairs=8,
                           epochs=3, lr=0.05),
], ids=["learned lambda, head/tail, rmd", "learned lambda", "sparsified", "head/tail, rmd"])
def test_weights_give_the_scores(model) -> None:
    """weights() is the W of score(foldin) = foldin @ W (the linear-model study draws its
    spectral profile from it)."""
    fitted = model().fit(TRAIN)
    weights = fitted.weights()
    product = FOLDIN @ weights
    product = product.toarray() if sp.issparse(product) else product
    np.testing.assert_allclose(product, fitted.score(FOLDIN), atol=1e-12)
