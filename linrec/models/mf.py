"""A PyTorch MF trained with any loss of `linrec.models.losses` (spec/losses.md §5).

Model: user and item embedding tables (n × d); score = ⟨u, v⟩ (dot) or cos(u, v) (cosine),
divided by the temperature t. Training: batches of (user, positive) pairs of the training
matrix, shuffled every epoch; per batch the sampler's negatives (and the debiased losses'
positives and τ⁺), the loss's mean, plus L2 (reg/2)(‖U‖² + ‖V‖²) over the full tables
(`full_table`, SimpleX) or over the batch's rows (`batch_rows`); user-embedding dropout after
normalisation [EXT SimpleX]; Adam; gradient-norm clipping. Every `eval_every` epochs the run's
validation callback scores the model (linrec's exact evaluator, the run's selection metric); on
a plateau the learning rate is multiplied by `lr_factor` (optionally reloading the best
parameters, SimpleX's variant), training stops after `stop_patience` evaluations without
improvement (or, with stop_patience 0, at a plateau once the rate is at `min_lr`, the
dissertation's rule), and the best evaluated parameters are restored at the end.

Resume: the trainer writes a checkpoint after every epoch (parameters, optimizer, schedule,
the generator's state, history) and a run started again with the same config and data continues
from it, ending with the numbers of an uninterrupted run. A checkpoint written by another
config is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.atomic import atomic_open
from linrec.cache import cache_home
from linrec.errors import ConfigError, NumericalError
from linrec.hardware import torch_threads
from linrec.models.base import Recommender, Validation, binary_pattern
from linrec.models.configs import MFConfig
from linrec.models.linalg import thread_count
from linrec.models.mf_ops import (
    keep_freed_memory,
    normalize_rows,
    sampled_dot,
    square_sum,
    squared_norm_with_l2,
)
from linrec.models.samplers import TrainingSampler

log = logging.getLogger(__name__)
#: rows scored together by `score` (memory: rows x n_items floats)
_SCORE_ROWS = 4096
CHECKPOINT_FILE = "checkpoint.pt"
#: steps between the checks of the step losses for NaN/inf (a check syncs with the device)
_CHECK_EVERY = 50


def _torch():
    import torch

    return torch


class _Plateau:
    """The learning-rate schedule on the validation metric (higher is better), as torch's
    ReduceLROnPlateau: after more than `patience` non-improving evaluations since the last
    improvement or cut, the rate is multiplied by `factor` (not below `min_lr`) and the count
    starts again. `bad` counts the non-improving evaluations in a row, for early stopping;
    `stop` says when training ends (see the module docstring)."""

    def __init__(self, factor: float, patience: int, min_lr: float, stop_patience: int,
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
        if self.since_cut <= self.patience:
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

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.bad = state["best"], state["bad"]
        self.since_cut = state["since_cut"]
        self.plateau_at_min = state["plateau_at_min"]


class MF(Recommender):
    """Matrix factorization trained with a contrastive / pointwise / pairwise loss (see the module
    docstring). Scores training users by id (weak generalization); strong generalization would
    need a fold-in, which this model does not implement (refused with a clear error).

    After fit: `user_embeddings_` (n_users x d), `item_embeddings_` (n_items x d) as float32
    numpy arrays, `history_` (one record per epoch: loss, lr, validation metric, seconds),
    `best_epoch_`, `stop_reason_`, `resumed_from_`."""

    config_class = MFConfig
    supports_strong_generalization = False

    # -- scoring ---------------------------------------------------------------------------------

    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        if users is None:
            raise ConfigError("mf scores the users it was trained on (weak generalization); "
                              "strong generalization needs a fold-in, which mf does not "
                              "implement: use a split that keeps the evaluation users in "
                              "training (holdout, loo, predefined)")
        torch = _torch()
        users = np.asarray(users)
        if users.size and (users.min() < 0 or users.max() >= self._users.shape[0]):
            raise ConfigError(f"mf.score: users must be row ids in [0, {self._users.shape[0]})")
        with torch.no_grad():
            items = self._item_table()
            rows = self._user_rows(torch.as_tensor(users, device=items.device))
            rows = rows / self.temperature
            if items.device.type != "cpu":
                return (rows @ items.T).cpu().numpy()
            # written into a numpy array: numpy asks the kernel for huge pages, and the page
            # faults of a fresh torch tensor of this size cost as much as the product itself
            out = np.empty((len(users), items.shape[0]), dtype=np.float32)
            torch.mm(rows, items.T, out=torch.from_numpy(out))
            return out

    def _user_rows(self, users):
        return self._scored(self._rows(self._users, users))

    def _item_table(self):
        return self._scored(self._items)

    def _scored(self, rows):
        """Embedding rows (n, d) as the scores use them: normalised for cosine, else as they are."""
        return normalize_rows(rows) if self.similarity == "cosine" else rows

    def _rows(self, table, ids):
        """table[ids], whose gradient is a sparse tensor of the touched rows under
        `optimizer: sparse_adam` (a dense table otherwise)."""
        if self.optimizer == "sparse_adam":
            return _torch().nn.functional.embedding(ids, table, sparse=True)
        return table[ids]

    @property
    def user_embeddings_(self) -> np.ndarray:
        return self._users.detach().cpu().numpy()

    @property
    def item_embeddings_(self) -> np.ndarray:
        return self._items.detach().cpu().numpy()

    def training_log(self) -> dict[str, Any]:
        return {"epochs": self.history_, "best_epoch": self.best_epoch_,
                "stop_reason": self.stop_reason_, "resumed_from": self.resumed_from_}

    # -- fit -------------------------------------------------------------------------------------

    def _check_config(self) -> None:
        loss = self.loss
        if loss.name in ("mine", "infonce_plus") and self.similarity == "dot":
            log.warning("loss %s with dot-product scores is unbounded below (spec §1.5): "
                        "expect diverging embeddings unless reg is large; cosine is safer",
                        loss.name)
        if loss.full_catalogue and self.sampling.negatives == "shared":
            log.info("loss %s scores every item: the negative sampler is not used", loss.name)

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        self._check_config()
        pattern = binary_pattern(train, "mf.fit")
        if pattern.nnz == 0:
            raise ConfigError(f"mf.fit: train {pattern.shape} has no interactions")
        with torch_threads(thread_count(self.num_threads)):
            _Trainer(self, pattern, validation).run()


def _clip_coefficient(tables, max_norm: float, reg: float) -> float:
    """torch.nn.utils.clip_grad_norm_'s coefficient, max/(norm + 1e-6) capped at 1, of the
    gradient with the `full_table` L2 term: norm = ‖(g_U + reg·U, g_I + reg·I)‖ (the L2 term
    is added by Adam's weight_decay, so it is not written here: one read of each table). A
    Python float: on a GPU, one synchronisation per step."""
    total = sum(squared_norm_with_l2(t.grad, t, reg) for t in tables)
    return min(1.0, max_norm / (math.sqrt(total) + 1e-6))


class _NoClipBound:
    """Tells, from a cheap upper bound, that a step is not clipped, so that the exact norm (with
    dense gradients a float64 read of both tables and their gradients, 1.5 ms of a 19 ms
    per-example step) is needed only when it might be. On the Gowalla split the step is
    clipped in a third of epoch 1's steps and in none afterwards. When the bound is below
    `max_norm` the exact coefficient is 1.0 as well: the numbers do not change.

    ‖(g_U + reg·U, g_I + reg·I)‖² ≤ Σ_t (‖g_t‖ + reg·B_t)², with
    - ‖g_U‖ over the batch's users, the only rows the user table's gradient has (the table is
      read only through `MF._rows` of the batch's users), and ‖g_I‖ over the item table, both
      summed in float32 and padded by `_PAD` for its rounding;
    - B_t ≥ ‖W_t‖: the exact norm at `reset` (the epoch's start: no parameters are loaded
      within an epoch) plus, per Adam step, √numel · max |Δw|, where |Δw| = lr·|m̂|/(√v̂ + ε)
      ≤ lr·C_t, C_t = √(1 − β2ᵗ)/(1 − β1ᵗ) · (1 − β1)/√((1 − β2)(1 − β1²/β2)) (Cauchy–Schwarz
      on the sums that make m and v; β1² < β2, else there is no bound and every step takes the
      exact norm). Clipping and weight decay change g, not this bound.

    Sparse gradients (`sparse_adam`: coalesced, no L2 term in the norm) need no weight bound:
    their squares are summed in float64 in one read (`square_sum`), within (k·d)·2⁻⁵² of the
    exact sum, and that relative error, padded, stands in for `_PAD`. On the shared-negative
    benchmark this check costs 20 µs where torch's float64 norms of the values cost 77 µs
    (an interleaved A/B of whole steps: 2 % of the step)."""

    _PAD = 1e-3

    def __init__(self) -> None:
        self.weight_norms: list[float] | None = None
        self.steps = 0  # Adam's t

    def reset(self, tables, steps: int) -> None:
        """The exact norms of the tables, after `steps` Adam updates."""
        torch = _torch()
        with torch.no_grad():
            self.weight_norms = [float(torch.linalg.vector_norm(t, dtype=torch.float64))
                                 for t in tables]
        self.steps = steps

    def advance(self, tables, group: dict[str, Any]) -> None:
        """After one more Adam update with the settings of `group`."""
        if self.weight_norms is None:
            return
        self.steps += 1
        beta1, beta2 = group["betas"]
        if beta1 * beta1 >= beta2:
            self.weight_norms = None
            return
        ratio = (math.sqrt(1 - beta2 ** self.steps) / (1 - beta1 ** self.steps) * (1 - beta1)
                 / math.sqrt((1 - beta2) * (1 - beta1 * beta1 / beta2)))
        self.weight_norms = [
            (norm + math.sqrt(t.numel()) * group["lr"] * ratio * (1 + self._PAD))
            * (1 + self._PAD) for norm, t in zip(self.weight_norms, tables, strict=True)]

    def unclipped(self, tables, users, max_norm: float, reg: float) -> bool:
        """True when the step's gradient norm (with the L2 term reg·W) is surely below
        `max_norm`; False when it may not be (then compute it exactly)."""
        user_grad, item_grad = (t.grad for t in tables)
        if user_grad.is_sparse and item_grad.is_sparse and reg == 0:
            return self._sparse_unclipped((user_grad, item_grad), max_norm)
        if self.weight_norms is None:
            return False
        torch = _torch()
        grad_norms = torch.stack((torch.linalg.vector_norm(user_grad[torch.unique(users)]),
                                  torch.linalg.vector_norm(item_grad))).tolist()  # one sync
        bound = math.hypot(*(g * (1 + self._PAD) + reg * w
                             for g, w in zip(grad_norms, self.weight_norms, strict=True)))
        return bound * (1 + self._PAD) + 1e-6 < max_norm  # NaN or inf: False

    @staticmethod
    def _sparse_unclipped(grads, max_norm: float) -> bool:
        """True when the coalesced sparse gradients' norm is surely below `max_norm`. The sum
        here and torch's (the exact path: float64 norms, squared, added, rooted) are each
        within γ = (k·d + 1)·2⁻⁵³ of the true sum, and torch adds four roundings: the norm is
        below √total·(1 + 2γ + 8·2⁻⁵³), which the pad covers with room."""
        values = [grad.coalesce().values() for grad in grads]
        count = sum(v.numel() for v in values)
        total = sum(square_sum(v) for v in values)
        pad = 1.0 + 4.0 * (count + 16) * 2.0 ** -52
        return math.sqrt(total) * pad + 1e-6 < max_norm * (1 - 2.0 ** -48)  # NaN: False


def _adam(parameters, lr: float, weight_decay: float):
    """Adam, fused into one kernel where this torch has it for the device (same update).
    `weight_decay` adds weight_decay·W to the gradient inside that kernel: the `full_table`
    L2 term, bitwise the same as adding it to the gradient first."""
    torch = _torch()
    try:
        return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay)


def _sparse_adam(parameters, lr: float):
    """torch's SparseAdam (lazy Adam: only the rows in a step's sparse gradient have their
    moments and values updated; its bias corrections count every step), bitwise the same
    update, with the rows updated in place (compiled row passes on a CPU, indexed torch ops
    elsewhere) instead of torch's sparse-tensor arithmetic (several sparse ops and coalesces
    per table and step)."""
    global _RowAdam
    if _RowAdam is None:
        _RowAdam = _build_row_adam()
    return _RowAdam(parameters, lr=lr)


_RowAdam = None


def _build_row_adam():
    torch = _torch()

    class RowAdam(torch.optim.SparseAdam):
        @torch.no_grad()
        def step(self, closure=None):
            if closure is not None:
                raise ValueError("mf's sparse Adam takes no closure")
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    if not param.grad.is_sparse:
                        raise RuntimeError("sparse_adam got a dense gradient")
                    state = self.state[param]
                    if not state:
                        state["step"] = 0
                        state["exp_avg"] = torch.zeros_like(param)
                        state["exp_avg_sq"] = torch.zeros_like(param)
                    state["step"] += 1
                    grad = param.grad.coalesce()  # the update is not linear: unique rows
                    rows, values = grad.indices()[0], grad.values()
                    if values.numel() == 0:
                        continue
                    step = state["step"]
                    step_size = group["lr"] * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
                    if param.device.type == "cpu":  # two passes over the rows, same ops
                        from linrec.models import _mf_kernels

                        grads = values.contiguous().numpy()
                        # the scalars in the table's precision, as torch casts them
                        keep1, keep2, scale, eps = (grads.dtype.type(c) for c in (
                            1 - beta1, 1 - beta2, -step_size, group["eps"]))
                        mean, square = torch.empty_like(values), torch.empty_like(values)
                        _mf_kernels.row_adam_moments(
                            rows.numpy(), grads,
                            state["exp_avg"].numpy(), state["exp_avg_sq"].numpy(), keep1,
                            keep2, mean.numpy(), square.numpy())
                        _mf_kernels.row_adam_update(rows.numpy(), mean.numpy(),
                                                    square.sqrt_().numpy(),
                                                    param.detach().numpy(), scale, eps)
                        continue
                    # torch's order of operations: m += (g - m)(1 - β1), v += (g² - v)(1 - β2)
                    old = state["exp_avg"].index_select(0, rows)
                    mean = values.sub(old).mul_(1 - beta1).add_(old)
                    old = state["exp_avg_sq"].index_select(0, rows)
                    square = values.pow(2).sub_(old).mul_(1 - beta2).add_(old)
                    state["exp_avg"].index_copy_(0, rows, mean)
                    state["exp_avg_sq"].index_copy_(0, rows, square)
                    param.index_add_(0, rows, -step_size * mean.div_(square.sqrt_().add_(
                        group["eps"])))
            return None

    return RowAdam


class _Trainer:
    """One fit of an MF model: setup (or resume), the epoch loop, evaluation, checkpoints."""

    def __init__(self, model: MF, train: sp.csr_matrix, validation: Validation | None) -> None:
        torch = _torch()
        keep_freed_memory()
        self.model, self.train, self.validation = model, train, validation
        cfg = model.config
        self.cfg = cfg
        self.device = cfg.device
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"mf.device={cfg.device!r}: CUDA is not available here")
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        n_users, n_items = train.shape
        std = cfg.init_std
        model._users = (torch.randn((n_users, cfg.dim), generator=self.generator,
                                    device=self.device) * std).requires_grad_(True)
        model._items = (torch.randn((n_items, cfg.dim), generator=self.generator,
                                    device=self.device) * std).requires_grad_(True)
        model.n_items_ = n_items  # scorable during training (the validation callback)
        #: (reg/2)‖W‖² over the whole tables: its gradient reg·W is added by Adam
        self.table_reg = cfg.reg if cfg.reg_mode == "full_table" else 0.0
        self.optimizer = _adam([model._users, model._items], cfg.lr, self.table_reg) \
            if cfg.optimizer == "adam" else \
            _sparse_adam([model._users, model._items], cfg.lr)
        #: skips the exact clipping norm when a cheap bound shows the step is not clipped
        self.no_clip_bound = _NoClipBound()
        self.schedule = _Plateau(cfg.lr_factor, cfg.lr_patience, cfg.min_lr, cfg.stop_patience,
                                 cfg.min_delta)
        self.sampler = TrainingSampler(cfg.sampling, train, self.device, self.generator)
        rows = np.repeat(np.arange(n_users, dtype=np.int64), np.diff(train.indptr))
        self.pair_users = torch.as_tensor(rows, device=self.device)
        self.pair_items = torch.as_tensor(train.indices.astype(np.int64), device=self.device)
        self.score_floor = -1.0 / cfg.temperature if cfg.similarity == "cosine" else -math.inf
        self.history: list[dict[str, Any]] = []
        self.epoch_stats: dict[str, float] = {}
        self.best_state: dict[str, Any] | None = None
        self.best_epoch: int | None = None
        self.start_epoch = 0
        self.finished = False
        self.stop_reason = "epochs"
        self.checkpoint = self._checkpoint_path()
        self.resumed_from = self._resume()

    # -- checkpoints -----------------------------------------------------------------------------

    def _fingerprint(self) -> str:
        """Hash of everything the numbers depend on: the config, the training matrix and what
        the validation callback measures (its `fingerprint`: split, metric, seed)."""
        digest = hashlib.sha256()
        config = {k: v for k, v in self.cfg.to_dict().items()
                  if k not in ("checkpoint_dir", "resume", "device", "num_threads")}
        digest.update(json.dumps(config, sort_keys=True, default=str).encode())
        for array in (self.train.indptr, self.train.indices):
            digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(str(self.train.shape).encode())
        validation = "none" if self.validation is None else \
            getattr(self.validation, "fingerprint", "a callable")
        digest.update(str(validation).encode())
        return digest.hexdigest()

    def _checkpoint_path(self) -> Path:
        if self.cfg.checkpoint_dir:
            return Path(self.cfg.checkpoint_dir).expanduser() / CHECKPOINT_FILE
        return cache_home() / "checkpoints" / self._fingerprint()[:16] / CHECKPOINT_FILE

    def _state(self) -> dict[str, Any]:
        return {"users": self.model._users.detach().clone(),
                "items": self.model._items.detach().clone()}

    def _save(self, epoch: int) -> None:
        torch = _torch()
        state = {"fingerprint": self._fingerprint(), "epoch": epoch, "finished": self.finished,
                 "stop_reason": self.stop_reason, "params": self._state(),
                 "optimizer": self.optimizer.state_dict(),
                 "schedule": self.schedule.state_dict(),
                 "generator": self.generator.get_state(), "history": self.history,
                 "best_state": self.best_state, "best_epoch": self.best_epoch}
        with atomic_open(self.checkpoint, "wb", fsync=True) as fh:
            torch.save(state, fh)

    def _resume(self) -> int | None:
        """Load the checkpoint of this config and data if there is one; the epoch it ends."""
        torch = _torch()
        if not self.cfg.resume or not self.checkpoint.exists():
            return None
        try:
            state = torch.load(self.checkpoint, map_location=self.device, weights_only=False)
        except Exception as exc:  # noqa: BLE001 - a torn or foreign file: say so, start over
            log.warning("mf: ignoring the unreadable checkpoint %s (%s)", self.checkpoint, exc)
            return None
        if state.get("fingerprint") != self._fingerprint():
            raise ConfigError(f"mf: the checkpoint {self.checkpoint} was written by another "
                              "config or training data; delete it, choose another "
                              "model.checkpoint_dir, or set model.resume=false")
        with torch.no_grad():
            self.model._users.copy_(state["params"]["users"])
            self.model._items.copy_(state["params"]["items"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.cfg.optimizer == "adam":  # the config's, not the file's
            self.optimizer.param_groups[0]["weight_decay"] = self.table_reg
        self.schedule.load_state_dict(state["schedule"])
        # a generator's state is a CPU byte tensor whatever its device; map_location moved it
        self.generator.set_state(state["generator"].cpu())
        self.history, self.best_state = state["history"], state["best_state"]
        self.best_epoch, self.finished = state["best_epoch"], state["finished"]
        self.stop_reason = state["stop_reason"]
        self.start_epoch = state["epoch"]
        log.info("mf: resumed from %s after epoch %d", self.checkpoint, state["epoch"])
        return state["epoch"]

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        torch = _torch()
        cfg = self.cfg
        epoch = self.start_epoch
        while not self.finished and epoch < cfg.epochs:
            epoch += 1
            started = time.perf_counter()
            loss = self._epoch(epoch)
            record = {"epoch": epoch, "loss": loss,
                      "lr": self.optimizer.param_groups[0]["lr"], "valid": None,
                      "seconds": 0.0, **self.epoch_stats}
            if self.validation is not None and (epoch % cfg.eval_every == 0
                                                or epoch == cfg.epochs):
                self._evaluate(record)
            record["seconds"] = time.perf_counter() - started
            self.history.append(record)
            log.info("mf epoch %d: loss %.5f, lr %.2e, valid %s, %.1f s%s", epoch, loss,
                     record["lr"], "-" if record["valid"] is None else f"{record['valid']:.5f}",
                     record["seconds"],
                     "".join(f", {k} {v:.4f}" for k, v in self.epoch_stats.items()))
            if epoch == cfg.epochs and not self.finished:
                self.stop_reason = "epochs"
                self.finished = True
            self._save(epoch)
        if self.best_state is not None:  # the best evaluated parameters
            with torch.no_grad():
                self.model._users.copy_(self.best_state["users"])
                self.model._items.copy_(self.best_state["items"])
        model = self.model
        model.history_, model.best_epoch_ = self.history, self.best_epoch
        model.stop_reason_, model.resumed_from_ = self.stop_reason, self.resumed_from
        model._users.requires_grad_(False)
        model._items.requires_grad_(False)

    def _evaluate(self, record: dict[str, Any]) -> None:
        torch = _torch()
        with torch.no_grad():
            metric = float(self.validation(self.model))
        record["valid"] = metric
        improved, lr, plateau = self.schedule.step(metric, self.optimizer.param_groups[0]["lr"])
        if improved:
            self.best_state, self.best_epoch = self._state(), record["epoch"]
        elif plateau:
            if self.cfg.reload_best_on_plateau and self.best_state is not None:
                with torch.no_grad():
                    self.model._users.copy_(self.best_state["users"])
                    self.model._items.copy_(self.best_state["items"])
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        if self.schedule.stop:
            self.finished = True
            self.stop_reason = "early_stopping"

    def _batches(self) -> Iterator[Any]:
        torch = _torch()
        order = torch.randperm(len(self.pair_users), generator=self.generator,
                               device=self.device)
        for start in range(0, len(order), self.cfg.batch_size):
            yield order[start:start + self.cfg.batch_size]

    def _epoch(self, epoch: int) -> float:
        """One pass over the shuffled training pairs; the epoch's mean loss (with the
        `full_table` L2 penalty at the epoch's end). The step losses stay on the device; they
        are checked for NaN/inf every `_CHECK_EVERY` steps."""
        torch = _torch()
        n_batches = math.ceil(len(self.pair_users) / self.cfg.batch_size)
        losses = torch.zeros(n_batches, device=self.device)
        sizes = torch.zeros(n_batches, device=self.device)
        self._stat_sums = {name: torch.zeros((), device=self.device)
                           for name in self.model.loss.stats}
        if self.cfg.optimizer == "adam" and self.cfg.grad_clip > 0:  # dense gradients
            adam = self.optimizer.state.get(self.model._users, {})
            self.no_clip_bound.reset((self.model._users, self.model._items),
                                     int(adam.get("step", 0)))
        batches = self._batches()
        if sys.stderr.isatty():
            from tqdm import tqdm

            batches = tqdm(batches, total=n_batches, desc=f"mf epoch {epoch}", unit="batch",
                           leave=False)
        checked = 0
        for step, batch in enumerate(batches):
            losses[step] = self._step(batch)
            sizes[step] = len(batch)
            if step + 1 - checked >= _CHECK_EVERY or step + 1 == n_batches:
                self._check_finite(losses[checked:step + 1], epoch, checked)
                checked = step + 1
        total = sizes.sum()
        loss = float((losses * sizes).sum() / total)
        #: the loss's diagnostics (LossConfig.stats), means over the epoch's examples
        self.epoch_stats = {name: float(value / total) for name, value in self._stat_sums.items()}
        if self.cfg.reg > 0 and self.cfg.reg_mode == "full_table":  # at the epoch's end
            with torch.no_grad():
                loss += self.cfg.reg / 2 * sum(float(torch.linalg.vector_norm(w)) ** 2
                                               for w in (self.model._users, self.model._items))
        return loss

    def _check_finite(self, losses, epoch: int, first_step: int) -> None:
        torch = _torch()
        bad = torch.nonzero(~torch.isfinite(losses))
        if len(bad):
            step = first_step + int(bad[0, 0]) + 1
            raise NumericalError(
                f"mf: the loss is {float(losses[bad[0, 0]])} at epoch {epoch}, step {step}; "
                f"lower model.lr (now {self.optimizer.param_groups[0]['lr']:g}), raise "
                "model.temperature or model.reg, or use model.similarity=cosine; the "
                f"last good checkpoint is {self.checkpoint}")

    def _step(self, batch):
        """One optimizer step on a batch of training-pair ids; the batch's mean loss without
        the `full_table` penalty (a 0-d tensor on the device, detached)."""
        cfg, tables = self.cfg, (self.model._users, self.model._items)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._batch_loss(batch)
        loss.backward()
        if cfg.optimizer == "sparse_adam":  # the touched rows, each once
            for table in tables:
                table.grad = table.grad.coalesce()
        # the `full_table` L2 gradient reg·W is added by Adam (`_epoch` records its value)
        coefficient = 1.0
        if cfg.grad_clip > 0 and not self.no_clip_bound.unclipped(
                tables, self.pair_users[batch], cfg.grad_clip, self.table_reg):
            coefficient = _clip_coefficient(tables, cfg.grad_clip, self.table_reg)
        scale_l2 = coefficient < 1.0 and self.table_reg > 0
        if coefficient < 1.0:  # clip g + reg·W: scale g here and the L2 term in Adam
            for table in tables:
                table.grad.mul_(coefficient)
        if scale_l2:
            self.optimizer.param_groups[0]["weight_decay"] = coefficient * self.table_reg
        self.optimizer.step()
        if scale_l2:
            self.optimizer.param_groups[0]["weight_decay"] = self.table_reg
        self.no_clip_bound.advance(tables, self.optimizer.param_groups[0])  # if `_epoch` reset it
        return loss.detach()

    def _batch_loss(self, batch):
        """The batch's mean loss (with the L2 penalty of `batch_rows`; `_step` adds the
        `full_table` one)."""
        torch = _torch()
        cfg, model, loss_fn = self.cfg, self.model, self.model.loss
        users, positives = self.pair_users[batch], self.pair_items[batch]
        user_weights = model._rows(model._users, users)
        user_rows = model._scored(user_weights)
        if cfg.dropout > 0:
            # the mask as 1.0 / 0.0 in place of the draws: the same products as with a bool
            # mask, without its conversion (which costs four times the multiplication)
            keep = torch.rand(user_rows.shape, generator=self.generator,
                              device=self.device).ge_(cfg.dropout)
            user_rows = user_rows * keep / (1.0 - cfg.dropout)
        negatives = neg_logq = extra = None
        if not loss_fn.full_catalogue:
            negatives, neg_logq = self.sampler.negatives(users)
        if loss_fn.positives:
            extra = self.sampler.positives(users)
        s_pos, s_neg, s_ppos, positive_weights = self._scores(user_rows, positives, negatives,
                                                             extra)
        if neg_logq is not None and neg_logq.ndim == 1:
            neg_logq = neg_logq.expand(len(users), -1)
        tau = self.sampler.tau_plus(users) if loss_fn.positives else 0.0
        if loss_fn.stats:
            stats: dict = {}
            value = loss_fn(s_pos, s_neg, s_ppos, tau, neg_logq, self.score_floor,
                            stats=stats).mean()
            for name in loss_fn.stats:  # summed per example, on the device
                self._stat_sums[name] += stats[name] * len(users)
        else:
            value = loss_fn(s_pos, s_neg, s_ppos, tau, neg_logq, self.score_floor).mean()
        if cfg.reg > 0 and cfg.reg_mode == "batch_rows":  # on the rows gathered for the scores
            if positive_weights is None:
                positive_weights = model._rows(model._items, positives)
            rows = torch.cat([user_weights, positive_weights])
            value = value + cfg.reg / 2 * (rows ** 2).sum()
        return value

    def _scores(self, user_rows, positives, negatives, extra):
        """s_pos (B,), s_neg (B, N) and s_ppos (B, M) or None, divided by the temperature (the
        B user rows are divided, not the B·N scores; at t = 1 the scores are left as they are),
        and the positives' embedding rows (B, d) where this gathered them (shared negatives;
        else None).
        Every item score of the step comes from one product, so its backward pass writes the
        table's gradient once: the full product (full-catalogue losses), one gather of the
        batch's rows (shared negatives: only the B + N (+ B·M) gathered rows are normalised),
        or one `sampled_dot` (per-example negatives: its B·N rows would be ten times the table,
        so the table is normalised once per step)."""
        torch = _torch()
        t, batch = self.cfg.temperature, len(positives)
        if t != 1.0:
            user_rows = user_rows / t
        if negatives is not None and negatives.ndim == 1:  # shared by the batch
            parts = [positives, negatives] + ([] if extra is None else [extra.reshape(-1)])
            weights = self.model._rows(self.model._items, torch.cat(parts))
            rows = self.model._scored(weights)
            s_pos = (user_rows * rows[:batch]).sum(-1)
            s_neg = user_rows @ rows[batch:batch + len(negatives)].T
            s_ppos = None if extra is None else (
                rows[batch + len(negatives):].view(batch, -1, rows.shape[1])
                * user_rows[:, None, :]).sum(-1)
            return s_pos, s_neg, s_ppos, weights[:batch]
        items = self.model._item_table()
        if negatives is None:  # full catalogue
            scores = user_rows @ items.T
            s_pos = scores.gather(1, positives[:, None])[:, 0]
            return s_pos, scores, None if extra is None else scores.gather(1, extra), None
        parts = [positives[:, None], negatives] + ([] if extra is None else [extra])
        scores = sampled_dot(user_rows, items, torch.cat(parts, 1))
        n = negatives.shape[1]
        return (scores[:, 0], scores[:, 1:1 + n],
                None if extra is None else scores[:, 1 + n:], None)
