"""The epoch driver (linrec.models.training) with a small trainer of its own: the plateau
schedule against torch's ReduceLROnPlateau, the validation cadence, early stopping and the best
epoch, a resume equal to an uninterrupted fit, refused checkpoints and non-finite losses."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from linrec.errors import ConfigError, NumericalError
from linrec.models import training
from linrec.models.configs import ResumableConfig
from linrec.models.training import EpochDriver, NonFiniteLoss, PlateauSchedule

TRAIN = sp.random(20, 8, density=0.3, format="csr", random_state=0)


class LeastSquares:
    """w minimising ‖Xw − y‖² by SGD on random mini-batches: parameters, an optimizer with a
    state and a generator, as a model's trainer has."""

    name = "toy"
    divergence_hint = "lower the rate"

    def __init__(self, seed: int = 0, lr: float = 0.05) -> None:
        data = torch.Generator().manual_seed(123)
        self.x = torch.randn((64, 3), generator=data, dtype=torch.float64)
        self.y = self.x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
        self.w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
        self.optimizer = torch.optim.Adam([self.w], lr=lr)
        self.generator = torch.Generator().manual_seed(seed)
        self.epochs_trained: list[int] = []

    @property
    def learning_rate(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self.optimizer.param_groups[0]["lr"] = value

    def train_epoch(self, epoch: int) -> dict[str, float]:
        self.epochs_trained.append(epoch)
        total = 0.0
        for batch in training.batch_order(64, 16, self.generator):
            self.optimizer.zero_grad()
            loss = ((self.x[batch] @ self.w - self.y[batch]) ** 2).mean()
            loss.backward()
            self.optimizer.step()
            total += float(loss.detach()) / 4
        return {"loss": total, "norm": float(self.w.detach().norm())}

    def parameters(self) -> dict[str, torch.Tensor]:
        return {"w": self.w.detach().clone()}

    def load_parameters(self, params) -> None:
        with torch.no_grad():
            self.w.copy_(params["w"])

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])


def drive(tmp_path, trainer=None, *, epochs=6, validation=None, schedule=None, resume=True,
          eval_every=1, name="run", train=TRAIN, reload_best=False):
    trainer = trainer or LeastSquares()
    config = ResumableConfig(checkpoint_dir=str(tmp_path / name), resume=resume)
    driver = EpochDriver("the model", trainer, train=train, config=config, epochs=epochs,
                         validation=validation,
                         schedule=schedule or PlateauSchedule(0.5, 0, 1e-6, 0),
                         eval_every=eval_every, reload_best_on_plateau=reload_best)
    return driver.run(), trainer


def test_the_schedule_is_torchs_reduce_lr_on_plateau():
    metrics = [0.1, 0.2, 0.15, 0.18, 0.19, 0.2, 0.2, 0.25, 0.1, 0.1, 0.1, 0.1, 0.3, 0.3]
    for patience in (0, 1, 2):
        schedule, lr, ours = PlateauSchedule(0.5, patience, 1e-3, 0, 0.01), 0.01, []
        for value in metrics:
            lr = schedule.step(value, lr)[1]
            ours.append(lr)
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.01)
        reference = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max", factor=0.5, patience=patience, threshold=0.01,
            threshold_mode="abs", min_lr=1e-3)
        theirs = []
        for value in metrics:
            reference.step(value)
            theirs.append(optimizer.param_groups[0]["lr"])
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_without_a_factor_the_rate_never_moves_and_patience_stops():
    schedule = PlateauSchedule(None, 0, 0.0, stop_patience=2)
    steps = [schedule.step(value, 0.1) for value in (0.3, 0.2, 0.25)]
    assert [s[1] for s in steps] == [0.1, 0.1, 0.1] and not any(s[2] for s in steps)
    assert schedule.stop and schedule.best == 0.3


def test_history_cadence_and_stats(tmp_path):
    calls = []
    done, _ = drive(tmp_path, epochs=7, eval_every=3,
                    validation=lambda model: calls.append(model) or len(calls))
    assert [r["epoch"] for r in done.history if r["valid"] is not None] == [3, 6, 7]
    assert calls == ["the model"] * 3 and done.best_epoch == 7
    assert list(done.history[0]) == ["epoch", "loss", "lr", "valid", "seconds", "norm"]
    losses = [r["loss"] for r in done.history]
    assert losses[-1] < losses[0] and done.stop_reason == "epochs"
    assert done.resumed_from is None


def test_the_progress_line_counts_the_epoch_it_describes(tmp_path, monkeypatch, capsys):
    """Off a terminal, each line after an epoch says how many epochs are done with that
    epoch's loss and validation value (one line an epoch here)."""
    from linrec import console

    monkeypatch.setenv(console.PROGRESS_ENV, "plain")
    monkeypatch.setattr(console, "QUIET_BELOW", 0.0)
    monkeypatch.setattr(console, "PLAIN_EVERY", 0.0)
    done, _ = drive(tmp_path, epochs=3, validation=lambda model: 0.25)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.endswith("0.25000")]
    assert len(lines) == 3
    for epoch, (line, record) in enumerate(zip(lines, done.history, strict=True), start=1):
        assert line.startswith(f"linrec: toy: {epoch}/3 epochs, ")
        assert f"; loss {record['loss']:.5f}, lr " in line


def test_early_stopping_keeps_the_best_evaluated_parameters(tmp_path):
    seen = []

    def validation(_model):
        seen.append(trainer.parameters()["w"])
        return [0.1, 0.5, 0.2, 0.3, 0.9][len(seen) - 1]

    trainer = LeastSquares()
    done, _ = drive(tmp_path, trainer, epochs=5, validation=validation,
                    schedule=PlateauSchedule(None, 0, 0.0, stop_patience=2))
    assert done.stop_reason == "early_stopping" and len(done.history) == 4
    assert done.best_epoch == 2 and torch.equal(trainer.w.detach(), seen[1])


@pytest.mark.parametrize("kill_after", [1, 3])
def test_a_killed_fit_resumes_to_the_numbers_of_an_uninterrupted_one(tmp_path, monkeypatch,
                                                                     kill_after):
    scores = [0.1, 0.3, 0.2, 0.25, 0.2, 0.1]
    whole, whole_trainer = drive(tmp_path, name="whole", validation=lambda m: scores.pop(0))
    scores = [0.1, 0.3, 0.2, 0.25, 0.2, 0.1]
    real_save = EpochDriver._save

    def killed(self):
        real_save(self)
        if self.epoch == kill_after:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(EpochDriver, "_save", killed)
        with pytest.raises(KeyboardInterrupt):
            drive(tmp_path, name="killed", validation=lambda m: scores.pop(0))
    resumed, trainer = drive(tmp_path, name="killed", validation=lambda m: scores.pop(0))
    assert resumed.resumed_from == kill_after and trainer.epochs_trained[0] == kill_after + 1
    assert torch.equal(trainer.w.detach(), whole_trainer.w.detach())
    for ours, theirs in zip(resumed.history, whole.history, strict=True):
        assert {k: v for k, v in ours.items() if k != "seconds"} == \
            {k: v for k, v in theirs.items() if k != "seconds"}
    assert resumed.best_epoch == whole.best_epoch == 2


def test_a_finished_fit_is_read_back_without_training(tmp_path):
    first, _ = drive(tmp_path, epochs=3)
    again, trainer = drive(tmp_path, epochs=3)
    assert again.resumed_from == 3 and trainer.epochs_trained == []
    assert [r["loss"] for r in again.history] == [r["loss"] for r in first.history]


def test_a_checkpoint_of_other_data_is_refused_and_resume_false_starts_over(tmp_path):
    drive(tmp_path, epochs=2)
    other = TRAIN.copy()
    other.data[:] = 1.0
    other.indices[0] = (other.indices[0] + 1) % 8
    with pytest.raises(ConfigError, match="written by another config or training data"):
        drive(tmp_path, epochs=2, train=other)
    done, trainer = drive(tmp_path, epochs=2, train=other, resume=False)
    assert done.resumed_from is None and trainer.epochs_trained == [1, 2]


def test_the_fingerprint_ignores_runtime_fields_and_sees_the_rest():
    base = {"lr": 0.1, "checkpoint_dir": "/a", "resume": True, "device": "cpu",
            "num_threads": 2}
    same = {**base, "checkpoint_dir": "/b", "resume": False, "num_threads": 1}
    assert training.fingerprint(base, TRAIN, None) == training.fingerprint(same, TRAIN, None)
    assert training.fingerprint(base, TRAIN, None) != \
        training.fingerprint({**base, "lr": 0.2}, TRAIN, None)


def test_a_gpu_fit_has_its_own_fingerprint_and_a_cpu_fit_the_one_it_had():
    """A fit on a GPU never continues a CPU fit's checkpoint (nor the other way round), and
    the CPU's fingerprint stays the hash without a device, so that existing checkpoints
    resume."""
    cpu = {"lr": 0.1, "device": "cpu"}
    on = {device: training.fingerprint({**cpu, "device": device}, TRAIN, None)
          for device in ("cpu", "cuda", "cuda:0", "cuda:1")}
    assert on["cpu"] == training.fingerprint({"lr": 0.1}, TRAIN, None)
    assert on["cuda"] == on["cuda:0"] == on["cuda:1"] != on["cpu"]


class Exploding(LeastSquares):
    def __init__(self, at_epoch: int, step: int | None) -> None:
        super().__init__()
        self.at_epoch, self.step = at_epoch, step

    def train_epoch(self, epoch):
        stats = super().train_epoch(epoch)
        if epoch == self.at_epoch:
            if self.step is not None:
                raise NonFiniteLoss(self.step, float("inf"))
            stats["loss"] = float("nan")
        return stats


@pytest.mark.parametrize("step, where", [(None, "at epoch 2;"), (5, "at epoch 2, step 5;")])
def test_a_non_finite_loss_names_where_and_keeps_the_last_good_checkpoint(tmp_path, step,
                                                                         where):
    with pytest.raises(NumericalError, match=f"toy: the loss is (nan|inf) {where} lower the "
                                             "rate; the last good checkpoint is .*checkpoint.pt"):
        drive(tmp_path, Exploding(2, step), epochs=4)
    saved = torch.load(tmp_path / "run" / training.CHECKPOINT_FILE, weights_only=False)
    assert saved["epoch"] == 1 and len(saved["history"]) == 1


def test_in_batches_cuts_an_order_into_consecutive_batches():
    order = torch.randperm(50, generator=torch.Generator().manual_seed(0))
    batches = list(training.in_batches(order, 16))
    assert [len(b) for b in batches] == [16, 16, 16, 2]
    assert torch.equal(torch.cat(batches), order)
