"""The one epoch driver of every model trained by epochs (MF, the nearby models).

A model supplies an `EpochTrainer`: it is set up when built, trains one epoch
(`train_epoch(epoch) -> stats`), and hands out its parameters and its other state (optimizer,
random generator). `EpochDriver` owns everything around the epochs: the validation cadence, the
plateau schedule of the learning rate (`PlateauSchedule`), early stopping, the best evaluated
parameters (restored at the end), a checkpoint after every epoch and the exact resume from it,
the per-epoch history with its timings, and the check that the loss stays finite.

A checkpoint holds the trainer's state dict and, beside it, the driver's own keys (`_KEYS`);
it is written atomically and tied to a fingerprint of the config, the training matrix and the
validation callback, so that a checkpoint of another config is refused rather than continued.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp
import torch

from linrec.atomic import atomic_open
from linrec.cache import cache_home
from linrec.console import progress as show_progress
from linrec.console import tracked
from linrec.errors import ConfigError, NumericalError
from linrec.interrupts import signals_deferred
from linrec.models.configs import ResumableConfig

log = logging.getLogger(__name__)
CHECKPOINT_FILE = "checkpoint.pt"
#: the driver's keys of a checkpoint; the trainer's state dict fills the rest
_KEYS = ("fingerprint", "epoch", "finished", "stop_reason", "params", "schedule", "history",
         "best_state", "best_epoch")
#: config fields that do not change a fit's numbers (not part of the fingerprint); the device
#: is one only on the CPU: a GPU draws other random streams and sums in other orders
_RUNTIME_FIELDS = ("checkpoint_dir", "resume", "device", "num_threads")


class NonFiniteLoss(Exception):  # noqa: N818 - a signal to the driver, not an error for users
    """Raised by a trainer whose loss is NaN or infinite at `step` (1-based) of an epoch."""

    def __init__(self, step: int, value: float) -> None:
        super().__init__(step, value)
        self.step, self.value = step, value


class EpochTrainer(Protocol):
    """What a model trained by epochs gives the driver."""

    #: the model's name in messages ("mf")
    name: str
    #: what to try when the loss stops being finite (a clause of the error message)
    divergence_hint: str

    def train_epoch(self, epoch: int) -> dict[str, float]:
        """Train one epoch; its mean loss ("loss") and any diagnostics (means over the epoch).
        May raise NonFiniteLoss."""

    @property
    def learning_rate(self) -> float: ...

    @learning_rate.setter
    def learning_rate(self, value: float) -> None: ...

    def parameters(self) -> dict[str, torch.Tensor]:
        """A copy of the trained parameters."""

    def load_parameters(self, params: Mapping[str, torch.Tensor]) -> None:
        """Set the trained parameters to `params` (in place)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything else a resume needs (optimizer, generator), none of `_KEYS`."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class TorchTrainerState:
    """What every EpochTrainer with an optimizer `optimizer` (a torch optimizer, or one with its
    `param_groups` and `state_dict`: `mf_optim.TableOptimizer`) and a random generator
    `generator` shares: the learning rate (of every parameter group) and the resume state."""

    optimizer: Any
    generator: torch.Generator

    @property
    def learning_rate(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = value

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        # a generator's state is a CPU byte tensor whatever its device
        self.generator.set_state(state["generator"].cpu())


class PlateauSchedule:
    """The learning-rate schedule on the validation metric (higher is better), as torch's
    ReduceLROnPlateau: after more than `patience` non-improving evaluations since the last
    improvement or cut, the rate is multiplied by `factor` (not below `min_lr`; factor None:
    never) and the count starts again. An evaluation improves when it beats the best by more
    than `min_delta`. `stop`: after `stop_patience` non-improving evaluations in a row, or, with
    stop_patience 0, at a plateau once the rate is at `min_lr`."""

    def __init__(self, factor: float | None, patience: int, min_lr: float, stop_patience: int,
                 min_delta: float = 0.0) -> None:
        self.factor, self.patience, self.min_lr = factor, patience, min_lr
        self.min_delta = min_delta
        self.stop_patience = stop_patience
        self.best = -math.inf
        self.bad = 0
        self.since_cut = 0
        self.plateau_at_min = False

    def step(self, metric: float, lr: float) -> tuple[bool, float, bool]:
        """(improved, new learning rate, whether this evaluation was a plateau) after one
        evaluation."""
        if metric > self.best + self.min_delta:
            self.best, self.bad, self.since_cut = metric, 0, 0
            return True, lr, False
        self.bad += 1
        self.since_cut += 1
        if self.factor is None or self.since_cut <= self.patience:
            return False, lr, False
        self.since_cut = 0
        self.plateau_at_min = lr <= self.min_lr * (1 + 1e-9)
        return False, max(lr * self.factor, self.min_lr), True

    @property
    def stop(self) -> bool:
        if self.stop_patience > 0:
            return self.bad >= self.stop_patience
        return self.plateau_at_min

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad": self.bad, "since_cut": self.since_cut,
                "plateau_at_min": self.plateau_at_min}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.bad = state["best"], state["bad"]
        self.since_cut = state["since_cut"]
        self.plateau_at_min = state["plateau_at_min"]


@dataclass
class TrainingLog:
    """How a fit went: one record per epoch (epoch, loss, lr, valid, seconds and the trainer's
    diagnostics), the best evaluated epoch, why training stopped ("epochs" or
    "early_stopping") and the epoch a resume started after (None: a fresh start)."""

    history: list[dict[str, Any]]
    best_epoch: int | None
    stop_reason: str
    resumed_from: int | None


def fingerprint(config: Mapping[str, Any], train: sp.csr_matrix,
                validation: Callable[..., float] | None) -> str:
    """Hash of everything a fit's numbers depend on: the model config (without the runtime
    fields), the kind of device when it is not the CPU ("cuda" for every "cuda:<n>"), the
    training matrix and what the validation callback measures (its `fingerprint`: split,
    metric, seed). A fit on a GPU thus never continues a CPU fit's checkpoint, nor the other
    way round (their random generators' states do not transfer)."""
    digest = hashlib.sha256()
    kept = {k: v for k, v in config.items() if k not in _RUNTIME_FIELDS}
    device_kind = str(config.get("device", "cpu")).partition(":")[0]
    if device_kind != "cpu":
        kept["device"] = device_kind
    digest.update(json.dumps(kept, sort_keys=True, default=str).encode())
    for array in (train.indptr, train.indices):
        digest.update(np.ascontiguousarray(array).tobytes())
    digest.update(str(train.shape).encode())
    measured = "none" if validation is None else getattr(validation, "fingerprint", "a callable")
    digest.update(str(measured).encode())
    return digest.hexdigest()


def checkpoint_path(config: ResumableConfig, print_: str) -> Path:
    """`config.checkpoint_dir`/checkpoint.pt, else one directory per fingerprint in the cache."""
    if config.checkpoint_dir:
        return Path(config.checkpoint_dir).expanduser() / CHECKPOINT_FILE
    return cache_home() / "checkpoints" / print_[:16] / CHECKPOINT_FILE


def progress(batches: Iterable[Any], total: int, desc: str) -> Iterable[Any]:
    """`batches` with the process's progress display (linrec.console)."""
    return tracked(batches, desc, total, unit="batches")


class EpochDriver:
    """Trains `trainer` for up to `epochs` epochs (see the module docstring). The validation
    callback scores `model` every `eval_every` epochs and after the last one; without a
    callback there is no schedule, early stopping or best epoch. `reload_best_on_plateau`:
    SimpleX's variant, which continues from the best parameters after a cut. `device`: where
    a checkpoint's tensors are loaded to."""

    def __init__(self, model: Any, trainer: EpochTrainer, *, train: sp.csr_matrix,
                 config: ResumableConfig, epochs: int,
                 validation: Callable[[Any], float] | None, schedule: PlateauSchedule,
                 eval_every: int = 1, reload_best_on_plateau: bool = False,
                 device: str = "cpu") -> None:
        self.model, self.trainer, self.validation = model, trainer, validation
        self.device = device
        self.epochs, self.eval_every = epochs, eval_every
        self.schedule, self.reload_best = schedule, reload_best_on_plateau
        self.resume = config.resume
        self.fingerprint = fingerprint(config.to_dict(), train, validation)
        #: what the validation callback measures, as the epoch lines name it ("valid recall@20")
        self.measured = " ".join(str(getattr(validation, "fingerprint", "valid")).split()[:2])
        self.checkpoint = checkpoint_path(config, self.fingerprint)
        self.history: list[dict[str, Any]] = []
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_epoch: int | None = None
        self.epoch = 0
        self.finished = False
        self.stop_reason = "epochs"

    def run(self) -> TrainingLog:
        """Resume if a checkpoint of this fit exists, train the remaining epochs, restore the
        best evaluated parameters."""
        resumed_from = self._resume()
        with show_progress(self.trainer.name, self.epochs, unit="epochs") as shown:
            shown.advance(self.epoch)
            while not self.finished and self.epoch < self.epochs:
                self.epoch += 1
                self._train_one_epoch()
                shown.update(self._epoch_text(self.history[-1]), advance=1)
        if self.best_state is not None:
            self.trainer.load_parameters(self.best_state)
        return TrainingLog(self.history, self.best_epoch, self.stop_reason, resumed_from)

    def _train_one_epoch(self) -> None:
        epoch, trainer = self.epoch, self.trainer
        started = time.perf_counter()
        try:
            stats = dict(trainer.train_epoch(epoch))
        except NonFiniteLoss as bad:
            self._diverged(bad.value, bad.step)
        loss = stats.pop("loss")
        if not math.isfinite(loss):
            self._diverged(loss, None)
        record = {"epoch": epoch, "loss": loss, "lr": trainer.learning_rate, "valid": None,
                  "seconds": 0.0, **stats}
        if self.validation is not None and (epoch % self.eval_every == 0
                                            or epoch == self.epochs):
            self._evaluate(record)
        record["seconds"] = time.perf_counter() - started
        self.history.append(record)
        log.info("%s epoch %d: %s, %.1f s%s", trainer.name, epoch, self._epoch_text(record),
                 record["seconds"], "".join(f", {k} {v:.4f}" for k, v in stats.items()))
        if epoch == self.epochs and not self.finished:
            self.stop_reason = "epochs"
            self.finished = True
        self._save()

    def _epoch_text(self, record: Mapping[str, Any]) -> str:
        """'loss 0.12345, lr 1.00e-04, valid recall@20 0.22487' (the metric named as the
        validation callback measures it)."""
        valid = "-" if record["valid"] is None else f"{record['valid']:.5f}"
        return f"loss {record['loss']:.5f}, lr {record['lr']:.2e}, {self.measured} {valid}"

    def _evaluate(self, record: dict[str, Any]) -> None:
        trainer = self.trainer
        with torch.no_grad():
            metric = float(self.validation(self.model))
        record["valid"] = metric
        improved, lr, plateau = self.schedule.step(metric, trainer.learning_rate)
        if improved:
            self.best_state, self.best_epoch = trainer.parameters(), record["epoch"]
        elif plateau:
            if self.reload_best and self.best_state is not None:
                trainer.load_parameters(self.best_state)
            trainer.learning_rate = lr
        if self.schedule.stop:
            self.finished = True
            self.stop_reason = "early_stopping"

    def _diverged(self, value: float, step: int | None) -> None:
        where = f"epoch {self.epoch}" + ("" if step is None else f", step {step}")
        raise NumericalError(f"{self.trainer.name}: the loss is {value} at {where}; "
                             f"{self.trainer.divergence_hint}; the last good checkpoint is "
                             f"{self.checkpoint}")

    # -- checkpoints -----------------------------------------------------------------------------

    def _save(self) -> None:
        state = self.trainer.state_dict()
        assert not set(state) & set(_KEYS), "a trainer's state may not use the driver's keys"
        state.update(fingerprint=self.fingerprint, epoch=self.epoch, finished=self.finished,
                     stop_reason=self.stop_reason, params=self.trainer.parameters(),
                     schedule=self.schedule.state_dict(), history=self.history,
                     best_state=self.best_state, best_epoch=self.best_epoch)
        with signals_deferred(), atomic_open(self.checkpoint, "wb", fsync=True) as fh:
            torch.save(state, fh)  # a signal waits: torch's writer would hide it in its error

    def _resume(self) -> int | None:
        """Load the checkpoint of this fit if there is one; the epoch it ends (None: none)."""
        if not self.resume or not self.checkpoint.exists():
            return None
        name = self.trainer.name
        try:
            state = torch.load(self.checkpoint, map_location=self.device, weights_only=False)
        except Exception as exc:  # noqa: BLE001 - a torn or foreign file: say so, start over
            log.warning("%s: ignoring the unreadable checkpoint %s (%s)", name, self.checkpoint,
                        exc)
            return None
        if state.get("fingerprint") != self.fingerprint:
            raise ConfigError(f"{name}: the checkpoint {self.checkpoint} was written by another "
                              "config or training data; delete it, choose another "
                              "model.checkpoint_dir, or set model.resume=false")
        self.trainer.load_parameters(state["params"])
        self.trainer.load_state_dict({k: v for k, v in state.items() if k not in _KEYS})
        self.schedule.load_state_dict(state["schedule"])
        self.history, self.best_state = state["history"], state["best_state"]
        self.best_epoch, self.finished = state["best_epoch"], state["finished"]
        self.stop_reason, self.epoch = state["stop_reason"], state["epoch"]
        log.info("%s: resumed from %s after epoch %d", name, self.checkpoint, self.epoch)
        return self.epoch


def batch_order(n: int, batch_size: int, generator: torch.Generator,
                device: str = "cpu") -> Iterator[torch.Tensor]:
    """A fresh random permutation of range(n) (from `generator`), cut into batches."""
    yield from in_batches(torch.randperm(n, generator=generator, device=device), batch_size)


def in_batches(order: torch.Tensor, batch_size: int) -> Iterator[torch.Tensor]:
    """`order` (1-d) cut into consecutive batches of `batch_size` (the last may be shorter)."""
    for start in range(0, len(order), batch_size):
        yield order[start:start + batch_size]
