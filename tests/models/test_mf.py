"""The PyTorch MF and its trainer (linrec.models.mf): determinism, resume equal to an
uninterrupted run, refused foreign checkpoints, early stopping and the best epoch, NaN
detection, every loss learning something, and bad settings."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import linrec.models.mf as mf_module
from linrec.data.pipeline import prepare_data
from linrec.errors import ConfigError, NumericalError
from linrec.eval import EvalConfig, evaluate, validation_score
from linrec.models import MF, build_model, mf_optim, training
from linrec.models.losses import LOSS_CONFIGS
from tests.models.conftest import tensors_in

FAST = {"lr": 0.01, "init_std": 0.1, "batch_size": 256, "sampling": {"n_negatives": 40}}
EVAL = EvalConfig(ks=(10, 20), selection="ndcg@20", sampled={"enabled": False})


def synthetic_split(n_users: int, n_items: int, mean_user_interactions: float):
    return prepare_data({"source": {"name": "synthetic", "n_users": n_users, "n_items": n_items,
                                    "mean_user_interactions": mean_user_interactions, "seed": 2},
                         "split": {"kind": "holdout", "valid_fraction": 0.15},
                         "cache": False}).split


@pytest.fixture(scope="module")
def split():
    return synthetic_split(300, 120, 15.0)


def trainer_of(model: MF, train) -> mf_module.MFTrainer:
    """The trainer of a fit of `model` on `train`, its tables drawn as a fit draws them."""
    generator = torch.Generator().manual_seed(model.config.seed)
    model._init_tables(*train.shape, generator)
    return mf_module.MFTrainer(model, train, generator)


def fit(split, tmp_path, name: str = "run", validation: bool = True, **params):
    params = {**FAST, **params, "checkpoint_dir": str(tmp_path / name)}
    model = MF(**params)
    return model.fit(split.train, validation_score(split, EVAL) if validation else None)


@pytest.mark.parametrize("setting", [
    {},
    {"sampling": {"negatives": "shared", "n_negatives": 40}},
    {"loss": {"name": "softmax"}, "temperature": 0.2},
    {"loss": {"name": "debiased_ccl"}, "sampling": {"n_negatives": 40, "n_positives": 5},
     "dropout": 0.1},
    {"sampling": {"negatives": "shared", "n_negatives": 40}, "optimizer": "sparse_adam",
     "reg_mode": "batch_rows"},
    {"sampling": {"examples": "users", "n_negatives": 1, "pool": "unlabeled"},
     "loss": {"name": "bpr"}, "similarity": "dot", "batch_size": 64},
], ids=["per_example", "shared", "full catalogue", "debiased with dropout", "sparse adam",
        "bpr on user-uniform examples"])
def test_same_seed_same_fit_and_another_seed_another(split, tmp_path, setting, device):
    """Bitwise equal on two threads (the bmm backward this replaced was not) and on a GPU."""
    a = fit(split, tmp_path, "a", epochs=3, num_threads=2, device=device, **setting)
    b = fit(split, tmp_path, "b", epochs=3, num_threads=2, device=device, **setting)
    c = fit(split, tmp_path, "c", epochs=3, num_threads=2, seed=1, device=device, **setting)
    np.testing.assert_array_equal(a.item_embeddings_, b.item_embeddings_)
    np.testing.assert_array_equal(a.user_embeddings_, b.user_embeddings_)
    assert [e["loss"] for e in a.history_] == [e["loss"] for e in b.history_]
    assert not np.allclose(a.item_embeddings_, c.item_embeddings_)


DEBIASED = {"loss": {"name": "debiased_ccl"}, "sampling": {"n_negatives": 40, "n_positives": 5}}


def _kill_after_the_epoch_3_checkpoint(monkeypatch):
    real_save = training.EpochDriver._save

    def killed(self):
        real_save(self)
        if self.epoch == 3:
            raise KeyboardInterrupt  # the process dies right after writing the checkpoint

    monkeypatch.setattr(training.EpochDriver, "_save", killed)


def _kill_in_the_middle_of_epoch_4(monkeypatch):
    real_step = mf_module.MFTrainer._step
    steps = []

    def killed(self, batch):
        steps.append(1)
        per_epoch = -(-len(self.pair_users) // self.cfg.batch_size)
        if len(steps) == 3 * per_epoch + 4:
            raise KeyboardInterrupt  # after three steps of epoch 4 changed the parameters
        return real_step(self, batch)

    monkeypatch.setattr(mf_module.MFTrainer, "_step", killed)


SPARSE = {"optimizer": "sparse_adam", "reg_mode": "batch_rows",
          "sampling": {"negatives": "shared", "n_negatives": 40}}


@pytest.mark.parametrize("kill, settings", [
    (_kill_after_the_epoch_3_checkpoint, DEBIASED),
    (_kill_in_the_middle_of_epoch_4, DEBIASED),
    (_kill_in_the_middle_of_epoch_4, SPARSE),
    (_kill_in_the_middle_of_epoch_4, {"sampling": {"examples": "users", "n_negatives": 40}}),
], ids=["after a checkpoint", "mid-epoch", "mid-epoch, sparse adam",
        "mid-epoch, user-uniform examples"])
def test_a_killed_run_resumes_to_the_numbers_of_an_uninterrupted_one(split, tmp_path,
                                                                     monkeypatch, kill,
                                                                     settings, device):
    settings = {**settings, "device": device}
    whole = fit(split, tmp_path, "whole", epochs=5, **settings)
    with monkeypatch.context() as patch:
        kill(patch)
        with pytest.raises(KeyboardInterrupt):
            fit(split, tmp_path, "killed", epochs=5, **settings)
    resumed = fit(split, tmp_path, "killed", epochs=5, **settings)
    assert resumed.resumed_from_ == 3 and whole.resumed_from_ is None
    np.testing.assert_array_equal(resumed.item_embeddings_, whole.item_embeddings_)
    np.testing.assert_array_equal(resumed.user_embeddings_, whole.user_embeddings_)
    assert [e["loss"] for e in resumed.history_] == [e["loss"] for e in whole.history_]
    assert [e["valid"] for e in resumed.history_] == [e["valid"] for e in whole.history_]


def test_a_checkpoint_of_another_config_is_refused(split, tmp_path):
    fit(split, tmp_path, "shared", epochs=1)
    with pytest.raises(ConfigError, match="written by another config"):
        fit(split, tmp_path, "shared", epochs=1, dim=8)
    fit(split, tmp_path, "shared", epochs=1, dim=8, resume=False)  # explicit fresh start


def test_a_checkpoint_selected_on_another_metric_is_refused(split, tmp_path):
    """Its best epoch and plateau counts were measured on another metric."""
    params = {**FAST, "epochs": 1, "checkpoint_dir": str(tmp_path / "c")}
    MF(**params).fit(split.train, validation_score(split, EVAL))
    other = EvalConfig(ks=(10, 20), selection="recall@10", sampled={"enabled": False})
    with pytest.raises(ConfigError, match="written by another config"):
        MF(**params).fit(split.train, validation_score(split, other))
    assert MF(**params).fit(split.train, validation_score(split, EVAL)).resumed_from_ == 1


def test_early_stopping_restores_the_best_epoch(split, tmp_path, monkeypatch):
    scores = iter([0.1, 0.3, 0.2, 0.25, 0.28, 0.9, 0.9])
    seen = []

    def validation(model):
        seen.append(model.item_embeddings_.copy())
        return next(scores)

    model = MF(**FAST, epochs=7, stop_patience=3, checkpoint_dir=str(tmp_path / "es"))
    model.fit(split.train, validation)
    assert model.stop_reason_ == "early_stopping" and model.best_epoch_ == 2
    assert len(model.history_) == 5
    np.testing.assert_array_equal(model.item_embeddings_, seen[1])
    lrs = [e["lr"] for e in model.history_]
    assert lrs[:3] == [0.01, 0.01, 0.01] and lrs[3] == pytest.approx(0.005)
    # the training record a run writes to results.json
    assert model.training_log() == {"epochs": model.history_, "best_epoch": 2,
                                    "stop_reason": "early_stopping", "resumed_from": None}


def test_the_dissertation_rule_stops_at_a_plateau_once_the_rate_is_minimal(split, tmp_path):
    model = MF(**FAST, epochs=30, lr_factor=0.1, min_lr=1e-4,
               checkpoint_dir=str(tmp_path / "rule"))
    model.fit(split.train, lambda m: 0.5)  # never improves after the first evaluation
    assert model.stop_reason_ == "early_stopping"
    assert [round(e["lr"], 8) for e in model.history_][-1] == 1e-4
    assert len(model.history_) < 30


def scripted(values, seen=None):
    """A validation callback returning `values` in turn (recording the item table if asked)."""
    values = iter(values)

    def validation(model):
        if seen is not None:
            seen.append(model.item_embeddings_.copy())
        return next(values)

    return validation


def test_the_plateau_schedule_is_torchs_reduce_lr_on_plateau(split, tmp_path):
    """With a patience, the rate falls as torch.optim.lr_scheduler.ReduceLROnPlateau(mode=max,
    absolute threshold min_delta) lets it: the count of bad evaluations restarts after a cut."""
    # 0.205 beats 0.2 by less than min_delta: not an improvement
    metrics = [0.1, 0.2, 0.15, 0.18, 0.19, 0.205, 0.2, 0.25, 0.1, 0.1, 0.1, 0.1, 0.3, 0.3]
    for patience in (0, 1, 2):
        model = MF(**FAST, epochs=len(metrics), lr_patience=patience, min_lr=1e-4,
                   min_delta=0.01, checkpoint_dir=str(tmp_path / f"p{patience}"))
        model.fit(split.train, scripted(metrics))
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=FAST["lr"])
        reference = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max", factor=0.5, patience=patience, threshold=0.01,
            threshold_mode="abs", min_lr=1e-4)
        expected = []
        for value in metrics:
            reference.step(value)
            expected.append(optimizer.param_groups[0]["lr"])
        # history records the rate an epoch trained with; the cut applies from the next one
        got = [e["lr"] for e in model.history_[1:]]
        np.testing.assert_allclose(got, expected[:len(got)], rtol=1e-12)
        assert model.stop_reason_ in ("epochs", "early_stopping")


def test_simplex_schedule_reloads_the_best_parameters_on_a_plateau(split, tmp_path,
                                                                   monkeypatch):
    """SimpleX's variant: every non-improving evaluation multiplies the rate by 0.1 and training
    goes on from the best evaluated parameters; three in a row stop it."""
    seen, starts = [], []
    real_epoch = mf_module.MFTrainer.train_epoch

    def epoch(self, number):
        starts.append(self.model.item_embeddings_.copy())
        return real_epoch(self, number)

    monkeypatch.setattr(mf_module.MFTrainer, "train_epoch", epoch)
    model = MF(**FAST, epochs=10, lr_factor=0.1, reload_best_on_plateau=True, stop_patience=3,
               checkpoint_dir=str(tmp_path / "simplex"))
    model.fit(split.train, scripted([0.1, 0.3, 0.2, 0.25, 0.29, 0.9], seen))
    assert model.stop_reason_ == "early_stopping" and len(model.history_) == 5
    assert model.best_epoch_ == 2
    np.testing.assert_allclose([e["lr"] for e in model.history_],
                               [0.01, 0.01, 0.01, 0.001, 0.0001], rtol=1e-12)
    for after_plateau in (3, 4):  # epochs 4 and 5 start from epoch 2's parameters
        np.testing.assert_array_equal(starts[after_plateau], seen[1])
    assert not np.array_equal(seen[2], seen[1])  # epoch 3 moved them: the reload undid it
    np.testing.assert_array_equal(model.item_embeddings_, seen[1])


def test_the_tables_start_as_init_std_normals_from_the_seed_users_first(split, tmp_path):
    """Before the first step: U then V drawn from one generator seeded by the model's seed."""
    params = {**FAST, "init_std": 0.37, "seed": 11, "dim": 5}
    seen = []
    MF(**params, epochs=1, checkpoint_dir=str(tmp_path)).fit(
        split.train, lambda m: seen.append(m.item_embeddings_.copy()) or 0.5)
    stream = torch.Generator().manual_seed(11)
    n_users, n_items = split.train.shape
    users = torch.randn((n_users, 5), generator=stream).numpy() * 0.37
    items = torch.randn((n_items, 5), generator=stream).numpy() * 0.37
    trainer = trainer_of(MF(**params), split.train)
    np.testing.assert_array_equal(trainer.model.user_embeddings_, users.astype(np.float32))
    np.testing.assert_array_equal(trainer.model.item_embeddings_, items.astype(np.float32))
    assert trainer.model.n_items_ == n_items
    assert trainer.model._users.requires_grad and trainer.model._items.requires_grad
    # the fit started there: one epoch moved every table a little, none beyond a few lr steps
    assert 0 < np.abs(seen[0] - items).max() < 20 * FAST["lr"]


def test_a_fit_runs_on_its_num_threads_and_gives_torch_its_count_back(split, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("LINREC_THREADS", "1")  # what num_threads=None would take
    before = torch.get_num_threads()
    seen = []

    def validation(model):
        seen.append(torch.get_num_threads())
        return 0.5

    fit_model = MF(**FAST, epochs=2, num_threads=3, checkpoint_dir=str(tmp_path / "t"))
    fit_model.fit(split.train, validation)
    assert seen == [3, 3] and torch.get_num_threads() == before


def test_eval_every_validates_on_its_epochs_and_the_last(split, tmp_path):
    calls = []
    model = MF(**FAST, epochs=7, eval_every=3, checkpoint_dir=str(tmp_path / "every"))
    model.fit(split.train, lambda m: calls.append(1) or 0.1 * len(calls))
    assert [e["epoch"] for e in model.history_ if e["valid"] is not None] == [3, 6, 7]
    assert len(calls) == 3 and model.best_epoch_ == 7


def test_dot_scores_are_the_inner_products_over_the_temperature(split, tmp_path, device):
    model = fit(split, tmp_path, "dot", validation=False, epochs=2, similarity="dot",
                temperature=0.5, loss={"name": "bpr"}, device=device)
    users = split.test.users
    expected = model.user_embeddings_[users] @ model.item_embeddings_.T / 0.5
    np.testing.assert_allclose(model.score(split.test.foldin, users), expected, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("similarity, temperature", [("cosine", 0.2), ("dot", 0.5)])
def test_pair_and_tensor_scores_are_those_of_the_embeddings(split, tmp_path, similarity,
                                                            temperature):
    """The sampled evaluation's pairs (`score_items`) and the on-device scores (`score_tensor`)
    are the scores written from the embeddings here: rows normalised for cosine, over t."""
    model = fit(split, tmp_path, similarity, validation=False, epochs=1, similarity=similarity,
                temperature=temperature, loss={"name": "bpr"})
    users = split.test.users
    U, V = model.user_embeddings_.astype(np.float64), model.item_embeddings_.astype(np.float64)
    if similarity == "cosine":
        U = U / np.linalg.norm(U, axis=1, keepdims=True)
        V = V / np.linalg.norm(V, axis=1, keepdims=True)
    full = U[users] @ V.T / temperature
    items = np.random.default_rng(0).integers(0, V.shape[0], (len(users), 7))
    pairs = model.score_items(split.test.foldin, users, items)
    assert pairs.shape == (len(users), 7)
    np.testing.assert_allclose(pairs, np.take_along_axis(full, items, axis=1), rtol=1e-5,
                               atol=1e-5)
    tensor = model.score_tensor(split.test.foldin, users)
    np.testing.assert_allclose(tensor.numpy(), full, rtol=1e-5, atol=1e-5)
    assert np.array_equal(model.score_items(split.test.foldin, users, items.astype(np.int32)),
                          pairs)  # any integer dtype of the item ids
    for bad in (300, -1):  # n_users = 300: the ids are 0..299
        with pytest.raises(ConfigError, match=r"^mf.score: users must be row ids in \[0, 300\)$"):
            model.score_items(split.test.foldin, np.r_[users[1:], bad], items)


def test_a_model_trained_on_any_device_is_saved_to_score_on_the_cpu(split, tmp_path, device):
    """A model trained on a GPU is written with its tables on the CPU and device "cpu", so that
    a machine without a GPU loads it and scores as the trained model did."""
    model = fit(split, tmp_path, "saved", epochs=1, device=device)
    # fitted tables take no gradients: a user's torch code on them builds no autograd graph
    assert not any(t.requires_grad for t in tensors_in(model.__dict__))
    model.save(tmp_path / "model.pkl")
    loaded = MF.load(tmp_path / "model.pkl")
    tensors = tensors_in(loaded.__dict__)
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    assert loaded.config.device == "cpu" and model.config.device == device
    users = split.test.users
    np.testing.assert_allclose(loaded.score(split.test.foldin, users),
                               model.score(split.test.foldin, users), rtol=1e-5, atol=1e-6)


def test_batch_rows_penalises_the_batch_user_and_positive_rows(split, tmp_path):
    """reg_mode=batch_rows: (reg/2)·(‖U[users]‖² + ‖V[positives]‖²) added to the batch mean (the
    sampled negatives' rows are not penalised)."""
    import dataclasses

    model = MF(**FAST, epochs=1, reg=0.3, reg_mode="batch_rows", dropout=0.0,
               checkpoint_dir=str(tmp_path / "rows"))
    trainer = trainer_of(model, split.train.tocsr())
    batch = torch.arange(0, 200, 3)
    state = trainer.generator.get_state()
    with torch.no_grad():
        penalised = trainer._batch_loss(batch)
        trainer.generator.set_state(state)
        trainer.cfg = dataclasses.replace(trainer.cfg, reg=0.0)
        plain = trainer._batch_loss(batch)
        users, items = trainer.pair_users[batch], trainer.pair_items[batch]
        expected = 0.15 * (model._users[users].double() ** 2).sum() \
            + 0.15 * (model._items[items].double() ** 2).sum()
    assert float(penalised - plain) == pytest.approx(float(expected), rel=1e-4)


def test_a_diverging_loss_names_the_epoch_and_step_and_keeps_the_last_checkpoint(
        split, tmp_path, monkeypatch):
    real_loss = mf_module.MFTrainer._batch_loss
    calls = []

    def diverging(self, batch):
        calls.append(1)
        value = real_loss(self, batch)
        return value * float("nan") if len(calls) == 9 else value  # epoch 2, step 4
    # (300 users x ~15 items x 0.85 = 3 824 pairs in batches of 512 -> 8 steps per epoch)

    monkeypatch.setattr(mf_module.MFTrainer, "_batch_loss", diverging)
    with pytest.raises(NumericalError, match=r"nan at epoch 2, step 4; lower model.lr"):
        fit(split, tmp_path, "nan", validation=False, epochs=3, batch_size=512)

    saved = torch.load(tmp_path / "nan" / training.CHECKPOINT_FILE, weights_only=False)
    assert saved["epoch"] == 1 and len(saved["history"]) == 1


@pytest.fixture(scope="module")
def larger_split():
    """Enough data per item (600 x 200, ~20 items per user) for MF to beat popularity."""
    return synthetic_split(600, 200, 20.0)


#: settings for 40 negatives on 200 items (the published ones are for 800 of 40 000): the
#: negative weights 150 (CCL) and 800 (debiased InfoNCE) assume N = 800
LOSS_SETTINGS = {
    "ccl": {"loss": {"negative_weight": 1.0}},
    "debiased_ccl": {"loss": {"negative_weight": 1.0}},
    "mse": {"loss": {"negative_weight": 0.3}},
    "debiased_mse": {"loss": {"negative_weight": 0.3}},
    "debiased_infonce": {"loss": {"negative_weight": 40.0}, "temperature": 0.2},
    "bpr": {"temperature": 1.0},
    "linear_pairwise": {},
}


@pytest.mark.slow
@pytest.mark.parametrize("loss", sorted(LOSS_CONFIGS))
def test_every_loss_beats_most_popular_on_validation_ndcg(larger_split, tmp_path, loss):
    settings = LOSS_SETTINGS.get(loss, {"temperature": 0.2})
    params = {**settings, "loss": {"name": loss, **settings.get("loss", {})},
              "sampling": {"n_negatives": 40, "n_positives": 5}}
    model = fit(larger_split, tmp_path, loss, epochs=15, **params)
    score = validation_score(larger_split, EVAL)
    assert score(model) > score(build_model("most_popular").fit(larger_split.train)), loss


def test_strong_generalization_is_refused_without_a_fold_in(split, tmp_path):
    model = fit(split, tmp_path, "s", validation=False, epochs=1)
    with pytest.raises(ConfigError) as err:
        model.score(split.test.foldin)
    assert str(err.value) == (
        "mf scores the users it was trained on (weak generalization); strong generalization "
        "needs a fold-in, which mf does not implement: use a split that keeps the evaluation "
        "users in training (holdout, loo, predefined)")
    scores = model.score(split.test.foldin, split.test.users)
    users, items = model.user_embeddings_, model.item_embeddings_
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(scores, unit(users[split.test.users]) @ unit(items).T, rtol=1e-4,
                               atol=1e-6)
    assert evaluate(model, split, EVAL).splits["test"].exact["ndcg@20"] >= 0


@pytest.mark.parametrize("params, match", [
    ({"loss": {"name": "ccl"}, "similarity": "dot"}, "loss ccl is defined for cosine scores"),
    ({"temperature": 0.0}, "mf.temperature=0.0 is out of range"),
    ({"dim": 0}, "mf.dim=0 is out of range"),
    ({"loss": {"name": "cclx"}}, "loss.name='cclx' is unknown"),
    ({"loss": {"name": "ccl", "margin": 1.2}}, "loss.margin=1.2 is out of range"),
    ({"sampling": {"pool": "nearby"}}, "pool='nearby' is not allowed"),
    ({"device": "tpu"}, "mf.device='tpu' is not allowed"),
    ({"sampling": {"tau_plus": 1.0, "prior": "fixed"}}, "sampling.tau_plus=1.0 is out of range"),
    ({"sampling": {"tau_plus": -0.1}}, "sampling.tau_plus=-0.1 is out of range"),
    ({"sampling": {"n_negatives": 0}}, "sampling.n_negatives=0 is out of range"),
    ({"sampling": {"negatives": "batch"}}, "negatives='batch' is not allowed"),
    ({"loss": {"name": "debiased_infonce"}, "similarity": "dot"}, "defined for cosine scores"),
    ({"optimizer": "sparse_adam", "sampling": {"negatives": "shared"}},
     "reg=1e-08 with reg_mode=full_table touches every row"),
    ({"optimizer": "sparse_adam", "reg_mode": "batch_rows"}, "needs model.sampling.negatives"),
    ({"optimizer": "sparse_adam", "reg": 0.0, "loss": {"name": "softmax"}},
     "loss softmax scores every item"),
    ({"optimizer": "lazy"}, "optimizer='lazy' is not allowed"),
])
def test_bad_settings_are_clear_errors(split, tmp_path, params, match):
    with pytest.raises(ConfigError, match=match):
        MF(**params, checkpoint_dir=str(tmp_path / "bad")).fit(split.train)
    assert not (tmp_path / "bad").exists()  # refused before anything is written


_UNBOUNDED = ("loss {} with dot-product scores is unbounded below (Li 2023, eqs. 84–86): expect "
              "diverging embeddings unless reg is large; cosine is safer")


@pytest.mark.parametrize(("params", "said"), [
    ({"loss": {"name": "mine"}, "similarity": "dot"}, ("WARNING", _UNBOUNDED.format("mine"))),
    ({"loss": {"name": "infonce_plus"}, "similarity": "dot"},
     ("WARNING", _UNBOUNDED.format("infonce_plus"))),
    ({"loss": {"name": "mine"}}, None),  # cosine scores are bounded
    ({"loss": {"name": "bpr"}, "similarity": "dot"}, None),
    ({"loss": {"name": "softmax"}, "sampling": {"negatives": "shared"}},
     ("INFO", "loss softmax scores every item: the negative sampler is not used")),
    ({"loss": {"name": "softmax"}}, None),
    ({"sampling": {"negatives": "shared"}}, None),  # CCL uses its negatives
])
def test_a_fit_says_what_its_settings_make_of_the_loss(tmp_path, caplog, params, said):
    model = MF(**params, checkpoint_dir=str(tmp_path))
    with caplog.at_level("INFO", logger=mf_module.log.name):
        model._check_config()
    assert [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == mf_module.log.name] == ([said] if said else [])


def test_a_cosine_loss_with_dot_scores_fails_at_composition():
    from hydra.errors import ConfigCompositionException

    from tests.conftest import compose_config

    with pytest.raises((ConfigError, ConfigCompositionException), match="cosine"):
        from linrec.config import run_config

        run_config(compose_config("model=mf", "loss=ccl", "model.similarity=dot"))


@pytest.mark.parametrize(("sampler", "pool"), [("uniform_all", "all"),
                                               ("uniform_unlabeled", "unlabeled"),
                                               ("popularity", "popularity")])
@pytest.mark.parametrize("prior", ["ratio_alpha", "count_k", "fixed"])
def test_the_spec_sampler_and_prior_groups_set_model_sampling(sampler, pool, prior):
    """`sampler=` and `prior=` (Li 2023, §4.4.1's groups) set model.sampling.pool / .prior and
    nothing else; on a model without a sampler they fail at composition."""
    from hydra.errors import ConfigCompositionException

    from linrec.config import run_config
    from linrec.models.samplers import SamplingConfig
    from tests.conftest import compose_config

    model = run_config(compose_config("model=mf", "loss=debiased_ccl", f"sampler={sampler}",
                                      f"prior={prior}")).model
    assert model.sampling == SamplingConfig(pool=pool, prior=prior)
    with pytest.raises(ConfigCompositionException, match="sampling"):
        compose_config("model=ease", f"sampler={sampler}")


@pytest.mark.parametrize("clip", [1e-4, 1e4, 0.0], ids=["clipped", "not clipped", "off"])
def test_a_step_is_the_textbook_l2_clip_and_adam_step(split, tmp_path, monkeypatch, clip):
    """Three `_step`s equal three steps written out here from the tables and the sampler's
    draws: cosine scores, CCL (relu(1 − s⁺) + w·mean_j relu(s⁻_j − ε)), the batch mean plus
    (reg/2)‖W‖², its gradient by autograd, the global-norm clip (coefficient
    clip/(‖g‖ + 1e-6), at most 1) and Adam's update (β = 0.9, 0.999, ε = 1e-8, bias-corrected)
    in plain tensor arithmetic."""
    reg, lr = 0.05, FAST["lr"]
    model = MF(**FAST, reg=reg, grad_clip=clip, dropout=0.0,
               checkpoint_dir=str(tmp_path / "step"))
    trainer = trainer_of(model, split.train.astype(np.float64))
    tables = (model._users, model._items)
    start = [t.detach().clone().double() for t in tables]
    drawn: list[torch.Tensor] = []
    draw = trainer.sampler.negatives

    def recorded(users):
        negatives = draw(users)
        drawn.append(negatives[0].clone())
        return negatives

    monkeypatch.setattr(trainer.sampler, "negatives", recorded)
    batch = next(trainer._batches())
    for _ in range(3):
        trainer._step(batch)
    ours = [t.detach().clone().double() for t in tables]

    users_of = trainer.pair_users[batch].long()
    positives = trainer.pair_items[batch].long()
    loss_config = model.loss
    weights = [t.clone().requires_grad_(True) for t in start]
    moments = [torch.zeros_like(w) for w in weights]
    squares = [torch.zeros_like(w) for w in weights]
    for step, negatives in enumerate(drawn, start=1):
        users, items = weights
        u = users[users_of] / users[users_of].norm(dim=1, keepdim=True)
        v = items / items.norm(dim=1, keepdim=True)
        s_pos = (u * v[positives]).sum(1)
        s_neg = torch.einsum("bd,bnd->bn", u, v[negatives.long()])
        per_pair = torch.relu(1 - s_pos) + loss_config.negative_weight * torch.relu(
            s_neg - loss_config.margin).mean(1)
        loss = per_pair.mean() + reg / 2 * sum((w ** 2).sum() for w in weights)
        grads = torch.autograd.grad(loss, weights)
        if clip > 0:
            norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
            grads = [g * min(1.0, clip / (float(norm) + 1e-6)) for g in grads]
        with torch.no_grad():
            for w, g, m, v2 in zip(weights, grads, moments, squares, strict=True):
                m.mul_(0.9).add_(0.1 * g)
                v2.mul_(0.999).add_(0.001 * g * g)
                m_hat, v_hat = m / (1 - 0.9 ** step), v2 / (1 - 0.999 ** step)
                w -= lr * m_hat / (v_hat.sqrt() + 1e-8)
    assert len(drawn) == 3
    for got, want, before in zip(ours, weights, start, strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-4, atol=1e-6)
        assert not torch.equal(got, before)


@pytest.mark.parametrize("settings, clip", [({}, 0.115), (SPARSE, 0.113)],
                         ids=["adam", "sparse_adam"])
def test_the_no_clip_bound_skips_the_exact_norm_without_changing_a_number(split, tmp_path,
                                                                         monkeypatch,
                                                                         settings, clip):
    """Steps whose cheap norm bound is below grad_clip skip the exact norm (dense Adam: the
    weight bound; sparse_adam: the float64 sum of the values' squares); three epochs in which
    some steps are clipped, some skipped and some computed exactly end with the tables and
    losses of the same run that always computes the exact norm."""
    def run(name):
        model = MF(**{**FAST, **settings}, reg=1e-4, grad_clip=clip,
                   checkpoint_dir=str(tmp_path / name))
        trainer = trainer_of(model, split.train.astype(np.float64))
        losses = [trainer.train_epoch(epoch)["loss"] for epoch in (1, 2, 3)]
        return losses, model._users.detach().clone(), model._items.detach().clone()

    decisions, coefficients = [], []
    bound, exact = mf_optim.NoClipBound.unclipped, mf_optim.clip_coefficient
    monkeypatch.setattr(mf_optim.NoClipBound, "unclipped",
                        lambda *args: decisions.append(bound(*args)) or decisions[-1])
    monkeypatch.setattr(mf_optim, "clip_coefficient",
                        lambda *args: coefficients.append(exact(*args)) or coefficients[-1])
    with_bound = run("bound")
    assert any(decisions) and not all(decisions), decisions  # both kinds of steps
    assert any(c < 1.0 for c in coefficients)
    if not settings:  # the dense bound is loose: some exact norms are below the threshold
        assert any(c == 1.0 for c in coefficients)
    monkeypatch.setattr(mf_optim.NoClipBound, "unclipped", lambda *args: False)
    always_exact = run("exact")
    assert with_bound[0] == always_exact[0]
    for ours, theirs in zip(with_bound[1:], always_exact[1:], strict=True):
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("fused", [True, False], ids=["fused adam", "adam"])
def test_the_weight_norm_bound_holds_through_adam_steps(fused):
    """B_t ≥ ‖W_t‖ after every Adam step, for gradients that push every weight the same way
    (the fastest drift) or at random, with weight decay, a large rate and a rate cut."""
    generator = torch.Generator().manual_seed(0)
    tables = [torch.randn((n, 8), generator=generator).requires_grad_(True) for n in (50, 30)]
    optimizer = torch.optim.Adam(tables, lr=0.5, weight_decay=0.1, fused=fused)
    bound = mf_optim.NoClipBound()
    bound.reset(tables, 0)
    for step in range(1, 301):
        for table in tables:
            table.grad = -torch.ones_like(table) if step < 150 else \
                torch.randn(table.shape, generator=generator) * 10 ** (step % 5)
        optimizer.step()
        bound.advance(tables, optimizer.param_groups[0])
        if step == 200:
            optimizer.param_groups[0]["lr"] = 0.05
        for table, limit in zip(tables, bound.weight_norms, strict=True):
            norm = float(torch.linalg.vector_norm(table.detach(), dtype=torch.float64))
            assert norm <= limit, (step, norm, limit)


def test_the_no_clip_bound_never_skips_a_clipped_step():
    """Whenever `unclipped` says so, the exact clipping coefficient is 1.0: random gradients
    scaled around the threshold, with the L2 term, the user gradient on the batch's rows."""
    generator = torch.Generator().manual_seed(1)
    tables = [torch.randn((n, 16), generator=generator).requires_grad_(True) for n in (40, 60)]
    users = torch.tensor([3, 7, 7, 12, 30])
    bound = mf_optim.NoClipBound()
    bound.reset(tables, 0)
    skipped = clipped = 0
    for scale in np.geomspace(0.5, 2.0, 200):
        user_grad = torch.zeros(40, 16)
        user_grad[users] = torch.randn((len(users), 16), generator=generator)
        item_grad = torch.randn((60, 16), generator=generator)
        norm = float(torch.linalg.vector_norm(torch.cat([user_grad, item_grad])))
        for table, grad in zip(tables, (user_grad, item_grad), strict=True):
            table.grad = grad * (scale * 10.0 / norm)
        if bound.unclipped(tables, users, 10.0, 1e-3):
            skipped += 1
            assert mf_optim.clip_coefficient(tables, 10.0, 1e-3) == 1.0, scale
        clipped += mf_optim.clip_coefficient(tables, 10.0, 1e-3) < 1.0
    assert skipped > 50 and clipped > 50


def test_the_sparse_no_clip_bound_never_skips_a_clipped_step():
    """For coalesced sparse gradients (sparse_adam), `unclipped` is True only when the exact
    clipping coefficient is 1.0, down to norms a few float32 ulps from the threshold, and it
    lets most steps below the threshold through."""
    generator = torch.Generator().manual_seed(2)
    tables = [torch.zeros((n, 16)).requires_grad_(True) for n in (40, 60)]
    rows = [torch.tensor([3, 7, 12, 30]), torch.tensor([0, 5, 6, 59, 20, 41])]
    bound = mf_optim.NoClipBound()  # never reset: sparse gradients need no weight bound
    values = [torch.randn((len(r), 16), generator=generator) for r in rows]
    norm = math.sqrt(sum(float(torch.linalg.vector_norm(v, dtype=torch.float64)) ** 2
                         for v in values))
    target = 10.0 - 1e-6  # the exact coefficient is max/(norm + 1e-6): 1.0 up to here
    skipped = clipped = 0
    scales = np.concatenate([np.geomspace(0.5, 2.0, 100), 1 + np.linspace(-3e-7, 3e-7, 101)])
    for scale in scales:
        for table, row, value in zip(tables, rows, values, strict=True):
            table.grad = torch.sparse_coo_tensor(row[None], value * (scale * target / norm),
                                                 table.shape, check_invariants=True).coalesce()
        exact = mf_optim.clip_coefficient(tables, 10.0, 0.0)
        if bound.unclipped(tables, rows[0], 10.0, 0.0):
            skipped += 1
            assert exact == 1.0, scale
        clipped += exact < 1.0
    assert skipped > 50 and clipped > 50


def test_the_batch_rows_l2_term_on_the_scored_rows_keeps_the_sparse_gradient(split, tmp_path):
    """`batch_rows` L2 on the rows the scores gathered gives the loss and the coalesced sparse
    gradients of the textbook term on rows gathered apart, bit for bit: sparse_adam's numbers
    are those it had when the term gathered its own rows."""
    import dataclasses

    import torch.nn.functional as F

    model = MF(**{**FAST, **SPARSE}, reg=0.05, dropout=0.2, checkpoint_dir=str(tmp_path))
    trainer = trainer_of(model, split.train.astype(np.float64))
    tables = (model._users, model._items)
    state, cfg = trainer.generator.get_state(), trainer.cfg
    batches = trainer._batches()
    for _ in range(2):  # the weights move between the checks
        batch = next(batches)
        results = []
        for reg in (cfg.reg, 0.0):
            trainer.generator.set_state(state)
            trainer.cfg = dataclasses.replace(cfg, reg=reg)
            for table in tables:
                table.grad = None
            loss = trainer._batch_loss(batch)
            if reg == 0.0:  # the textbook term, on its own gathers
                rows = torch.cat([F.embedding(trainer.pair_users[batch], tables[0], sparse=True),
                                  F.embedding(trainer.pair_items[batch], tables[1], sparse=True)])
                loss = loss + cfg.reg / 2 * (rows ** 2).sum()
            loss.backward()
            results.append((loss.detach(), [t.grad.coalesce() for t in tables]))
        trainer.cfg = cfg
        (ours, our_grads), (theirs, their_grads) = results
        assert torch.equal(ours, theirs)
        for got, want in zip(our_grads, their_grads, strict=True):
            assert torch.equal(got.indices(), want.indices())
            assert torch.equal(got.values(), want.values())
        trainer.generator.set_state(state)
        trainer._step(batch)
        state = trainer.generator.get_state()


@pytest.mark.parametrize("n_rows, dim, draws, dtype", [
    (50, 4, 30, "float32"), (400, 64, 300, "float32"), (400, 64, 300, "float64")])
def test_the_row_adam_is_torchs_sparse_adam_bitwise(n_rows, dim, draws, dtype):
    """The compiled row update against torch's SparseAdam, bit for bit (torch's vectorised
    square root is not always the correctly rounded one: ours calls it, so wide rows are
    covered too)."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    start = torch.randn(n_rows, dim, generator=g, dtype=getattr(torch, dtype))
    results = []
    for make in (lambda p: torch.optim.SparseAdam(p, lr=1e-2),
                 lambda p: mf_optim.sparse_adam(p, 1e-2)):
        table = start.clone().requires_grad_(True)
        optimizer, drawn = make([table]), torch.Generator().manual_seed(1)
        for _ in range(6):
            table.grad = None
            ids = torch.randint(n_rows, (draws,), generator=drawn)  # repeats: summed, coalesced
            (F.embedding(ids, table, sparse=True) ** 2).sum().backward()
            optimizer.step()
        results.append((table.detach(), optimizer.state_dict()["state"][0]))
    (ours, ours_state), (theirs, theirs_state) = results
    assert torch.equal(ours, theirs)
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(ours_state[key], theirs_state[key])
    assert ours_state["step"] == theirs_state["step"] == 6


def test_sparse_adam_moves_only_the_rows_a_step_touches(split, tmp_path):
    """Lazy Adam: the batch's users, positives and shared negatives change, nothing else;
    plain Adam with the full-table L2 moves every row. (InfoNCE: every negative gets a
    gradient; CCL's negatives below the margin would get none and stay put.)"""
    shared = {**FAST, "batch_size": 8, "sampling": {"negatives": "shared", "n_negatives": 5},
              "loss": {"name": "infonce"}, "temperature": 0.2}
    for params, moves_all in (({"optimizer": "sparse_adam", "reg_mode": "batch_rows"}, False),
                              ({"optimizer": "adam", "reg": 1e-3}, True)):
        model = MF(**shared, **params, checkpoint_dir=str(tmp_path / params["optimizer"]))
        trainer = trainer_of(model, split.train.astype(np.float64))
        drawn = []

        def recorded(users, draw=trainer.sampler.negatives, drawn=drawn):
            drawn.append(draw(users))
            return drawn[-1]

        trainer.sampler.negatives = recorded
        before = [t.detach().clone() for t in (model._users, model._items)]
        batch = next(trainer._batches())
        trainer._step(batch)
        changed = [set(torch.nonzero((t.detach() != b).any(1))[:, 0].tolist())
                   for t, b in zip((model._users, model._items), before, strict=True)]
        if moves_all:
            assert changed == [set(range(len(before[0]))), set(range(len(before[1])))]
        else:
            users = set(trainer.pair_users[batch].tolist())
            items = set(trainer.pair_items[batch].tolist()) | set(drawn[0][0].tolist())
            assert changed == [users, items]


def test_debiased_infonce_logs_the_share_of_clamped_rows(split, tmp_path):
    """Li 2023, eqs. 81–83: while g sits on its floor every negative gets zero gradient; the trainer
    records the share of such rows per epoch (none at τ⁺ = 0, most at τ⁺ = 0.9)."""
    shares = {}
    for tau in (0.0, 0.9):
        model = fit(split, tmp_path, f"tau{tau}", validation=False, epochs=2,
                    loss={"name": "debiased_infonce", "negative_weight": 40.0},
                    temperature=0.2,
                    sampling={"n_negatives": 40, "n_positives": 5, "prior": "fixed",
                              "tau_plus": tau})
        shares[tau] = [record["clamped_fraction"] for record in model.history_]
        assert len(shares[tau]) == 2 and all(0.0 <= s <= 1.0 for s in shares[tau])
    assert shares[0.0] == [0.0, 0.0]
    assert min(shares[0.9]) > 0.5


@pytest.mark.parametrize("reg_mode", ["full_table", "batch_rows"])
def test_an_epochs_record_weights_each_step_by_its_examples(split, tmp_path, monkeypatch,
                                                            reg_mode):
    """train_epoch's loss is Σ_b |b|·loss_b / Σ_b |b| over its steps (the last batch shorter),
    plus (reg/2)(‖U‖² + ‖V‖²) of the tables at the epoch's end under `full_table`; a loss's
    diagnostic is the same example-weighted mean of its per-step values."""
    model = MF(**{**FAST, "batch_size": 97, "sampling": {"n_negatives": 40, "n_positives": 5,
                                                         "prior": "fixed", "tau_plus": 0.9}},
               epochs=1, reg=0.05, reg_mode=reg_mode,
               loss={"name": "debiased_infonce", "negative_weight": 40.0}, temperature=0.2,
               checkpoint_dir=str(tmp_path / reg_mode))
    trainer = trainer_of(model, split.train.tocsr())
    steps, shares = [], []
    real_step, loss_class = mf_module.MFTrainer._step, type(model.loss)
    real_call = loss_class.__call__

    def recorded_step(self, batch):
        value = real_step(self, batch)
        steps.append((len(batch), float(value)))
        return value

    def recorded_call(self, *args, stats=None, **kwargs):
        value = real_call(self, *args, stats=stats, **kwargs)
        shares.append(float(stats["clamped_fraction"]))
        return value

    monkeypatch.setattr(mf_module.MFTrainer, "_step", recorded_step)
    monkeypatch.setattr(loss_class, "__call__", recorded_call)
    record = trainer.train_epoch(1)
    sizes = np.array([size for size, _ in steps], dtype=np.float64)
    n_pairs = split.train.nnz
    assert sizes.sum() == n_pairs and len(steps) == -(-n_pairs // 97) and sizes[-1] < 97
    expected = np.dot(sizes, [value for _, value in steps]) / n_pairs
    if reg_mode == "full_table":
        expected += 0.025 * sum(float((table.detach().double() ** 2).sum())
                                for table in (model._users, model._items))
    assert record["loss"] == pytest.approx(expected, rel=1e-6)
    assert len(shares) == len(steps) and 0.0 < min(shares) < max(shares) <= 1.0
    assert record["clamped_fraction"] == pytest.approx(np.dot(sizes, shares) / n_pairs, rel=1e-6)
    assert set(record) == {"loss", "clamped_fraction"}


@pytest.mark.parametrize("reg_mode", ["full_table", "batch_rows"])
def test_a_resumed_adam_takes_its_weight_decay_from_the_config_not_the_checkpoint(
        split, tmp_path, reg_mode):
    """The full-table L2 gradient is Adam's weight decay; a checkpoint whose optimizer state
    holds another one (written by a linrec that added the L2 term itself, or by a clipped step's
    scaled value) resumes with reg (full_table) or 0 (batch_rows), the config's."""
    model = MF(**FAST, reg=0.05, reg_mode=reg_mode, checkpoint_dir=str(tmp_path))
    trainer = trainer_of(model, split.train)
    trainer.train_epoch(1)
    state = trainer.state_dict()
    state["optimizer"]["param_groups"][0]["weight_decay"] = 0.0125
    resumed = trainer_of(model, split.train)
    resumed.load_state_dict(state)
    want = 0.05 if reg_mode == "full_table" else 0.0
    assert [group["weight_decay"] for group in resumed.optimizer.param_groups] == [want]
    assert resumed.optimizer.state_dict()["state"].keys() == state["optimizer"]["state"].keys()


def test_the_no_clip_bound_counts_adams_steps_across_epochs(split, tmp_path):
    """train_epoch resets the bound at Adam's own step count (the bias correction its weight
    bound uses shrinks with t: a count behind Adam's would be loose, one ahead unsafe), and each
    step advances both by one."""
    model = MF(**{**FAST, "batch_size": 128}, epochs=2, grad_clip=1.0,
               checkpoint_dir=str(tmp_path / "bound"))
    trainer = trainer_of(model, split.train.tocsr())
    per_epoch = -(-split.train.nnz // 128)
    for epoch in (1, 2, 3):
        trainer.train_epoch(epoch)
        adam_steps = int(trainer.optimizer.state[model._users]["step"])
        assert adam_steps == epoch * per_epoch
        assert trainer.no_clip_bound.steps == adam_steps


@pytest.mark.parametrize("bad_step", ["first", "after_a_check", "last"])
def test_an_epochs_first_non_finite_step_is_named(split, tmp_path, monkeypatch, bad_step):
    """An epoch of more steps than the finiteness check's cadence (`_CHECK_EVERY`): a NaN loss
    from one step on is reported at that step, 1-based, whether it is the first step, the one
    after a check or the epoch's last."""
    from linrec.models.training import NonFiniteLoss

    model = MF(**{**FAST, "batch_size": 16}, epochs=1, checkpoint_dir=str(tmp_path / bad_step))
    trainer = trainer_of(model, split.train.tocsr())
    n_steps = -(-split.train.nnz // 16)
    assert n_steps > mf_module._CHECK_EVERY + 1
    first_bad = {"first": 1, "after_a_check": mf_module._CHECK_EVERY + 1,
                 "last": n_steps}[bad_step]
    real_loss, calls = mf_module.MFTrainer._batch_loss, []

    def poisoned(self, batch):
        calls.append(1)
        value = real_loss(self, batch)
        return value * torch.nan if len(calls) >= first_bad else value

    monkeypatch.setattr(mf_module.MFTrainer, "_batch_loss", poisoned)
    with pytest.raises(NonFiniteLoss) as raised:
        trainer.train_epoch(1)
    assert raised.value.step == first_bad and math.isnan(raised.value.value)


def test_a_clipped_step_leaves_adams_weight_decay_as_configured(split, tmp_path, monkeypatch):
    """A clipped step scales the full-table L2 term through Adam's weight decay for that step
    only: after it the decay is reg again, so the next, unclipped step is not shrunk."""
    model = MF(**FAST, epochs=1, reg=0.1, reg_mode="full_table", grad_clip=1e-3,
               checkpoint_dir=str(tmp_path / "decay"))
    trainer = trainer_of(model, split.train.tocsr())
    coefficients, real = [], mf_module.mf_optim.clip_coefficient

    def recorded(*args, **kwargs):
        coefficients.append(real(*args, **kwargs))
        return coefficients[-1]

    monkeypatch.setattr(mf_module.mf_optim, "clip_coefficient", recorded)
    trainer._step(torch.arange(0, 64))
    assert coefficients and coefficients[-1] < 1.0
    assert trainer.optimizer.param_groups[0]["weight_decay"] == 0.1
