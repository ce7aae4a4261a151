"""A PyTorch MF trained with any loss of `linrec.models.losses` (Li 2023, §4.4.1).

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

The epochs, the schedule, early stopping, checkpoints and resume are the epoch driver's
(`linrec.models.training`); this module holds the model and its step (`MFTrainer`), the
optimizers and clipping are in `mf_optim`, the step's custom autograd operations in `mf_ops`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from linrec.errors import ConfigError
from linrec.hardware import torch_threads
from linrec.models import mf_optim
from linrec.models.base import Recommender, Validation
from linrec.models.configs import MFConfig
from linrec.models.device import torch_device
from linrec.models.linalg import thread_count
from linrec.models.mf_ops import keep_freed_memory, normalize_rows, pair_scores, sampled_dot
from linrec.models.samplers import TrainingSampler
from linrec.models.training import (
    EpochDriver,
    NonFiniteLoss,
    PlateauSchedule,
    TorchTrainerState,
    in_batches,
    progress,
)

log = logging.getLogger(__name__)
#: steps between the checks of the step losses for NaN/inf (a check syncs with the device)
_CHECK_EVERY = 50


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

    def _known_users(self, users: np.ndarray | None) -> np.ndarray:
        if users is None:
            raise ConfigError("mf scores the users it was trained on (weak generalization); "
                              "strong generalization needs a fold-in, which mf does not "
                              "implement: use a split that keeps the evaluation users in "
                              "training (holdout, loo, predefined)")
        users = np.asarray(users)
        if users.size and (users.min() < 0 or users.max() >= self._users.shape[0]):
            raise ConfigError(f"mf.score: users must be row ids in [0, {self._users.shape[0]})")
        return users

    @property
    def scores_on_device(self) -> bool:
        """True when the tables lie on a GPU: the evaluator ranks there."""
        return "_items" in self.__dict__ and self._items.device.type != "cpu"

    @property
    def score_device(self):
        return self._items.device

    def _score_tensor(self, foldin: sp.csr_matrix, users: np.ndarray | None):
        users = self._known_users(users)
        with torch.no_grad():
            items = self._item_table()
            rows = self._user_rows(torch.as_tensor(users, device=items.device))
            return (rows / self.temperature) @ items.T

    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        users = self._known_users(users)
        with torch.no_grad():
            items = self._item_table()
            if items.device.type != "cpu":
                return self._score_tensor(foldin, users).cpu().numpy()
            rows = self._user_rows(torch.as_tensor(users, device=items.device))
            rows = rows / self.temperature
            # written into a numpy array: numpy asks the kernel for huge pages, and the page
            # faults of a fresh torch tensor of this size cost as much as the product itself
            out = np.empty((len(users), items.shape[0]), dtype=np.float32)
            torch.mm(rows, items.T, out=torch.from_numpy(out))
            return out

    def _score_items(self, foldin: sp.csr_matrix, users: np.ndarray | None,
                     items: np.ndarray) -> np.ndarray:
        """Only the asked (user, item) pairs: B·m dot products instead of B·n_items."""
        users = self._known_users(users)
        with torch.no_grad():
            table = self._item_table()
            rows = self._user_rows(torch.as_tensor(users, device=table.device))
            rows = rows / self.temperature
            index = torch.as_tensor(items, dtype=torch.int64, device=table.device)
            return pair_scores(rows, table, index).cpu().numpy()  # no (B, m, d) gather

    def _user_rows(self, users):
        return self._scored(self._rows(self._users, users))

    def _item_table(self):
        return self._scored(self._items)

    def _scored(self, rows):
        """Embedding rows (n, d) as the scores use them: normalised for cosine, else as they are."""
        return normalize_rows(rows) if self.similarity == "cosine" else rows

    def _rows(self, table, ids):
        """table[ids], whose gradient is a sparse tensor of the touched rows under
        `optimizer: sparse_adam` (a dense table otherwise). An embedding lookup rather than
        `table[ids]`: on a CPU with several threads the backward of `table[ids]` sums repeated
        ids in a varying order (torch's index_put_ with accumulate), so two fits of one config
        differed in the last bits; the embedding's backward sums them in a fixed order (on one
        thread both give the same bits)."""
        return torch.nn.functional.embedding(ids, table, sparse=self.optimizer == "sparse_adam")

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
            log.warning("loss %s with dot-product scores is unbounded below (Li 2023, eqs. 84–86): "
                        "expect diverging embeddings unless reg is large; cosine is safer",
                        loss.name)
        if loss.full_catalogue and self.sampling.negatives == "shared":
            log.info("loss %s scores every item: the negative sampler is not used", loss.name)

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        self._check_config()
        pattern = train  # binary (Recommender.fit)
        cfg = self.config
        with torch_threads(thread_count(self.num_threads)):
            keep_freed_memory()
            torch_device(cfg.device, "mf.device")  # a clear error where the device is absent
            generator = torch.Generator(device=cfg.device).manual_seed(cfg.seed)
            self._init_tables(*pattern.shape, generator)
            schedule = PlateauSchedule(cfg.lr_factor, cfg.lr_patience, cfg.min_lr,
                                       cfg.stop_patience, cfg.min_delta)
            driver = EpochDriver(self, MFTrainer(self, pattern, generator), train=pattern,
                                 config=cfg, epochs=cfg.epochs, validation=validation,
                                 schedule=schedule, eval_every=cfg.eval_every,
                                 reload_best_on_plateau=cfg.reload_best_on_plateau,
                                 device=cfg.device)
            done = driver.run()
        self.history_, self.best_epoch_ = done.history, done.best_epoch
        self.stop_reason_, self.resumed_from_ = done.stop_reason, done.resumed_from
        self._users.requires_grad_(False)
        self._items.requires_grad_(False)

    def _init_tables(self, n_users: int, n_items: int, generator: torch.Generator) -> None:
        """The embedding tables N(0, init_std²), users first, from `generator`; scorable from
        here on (the validation callback scores the model during training)."""
        cfg = self.config
        self._users = (torch.randn((n_users, cfg.dim), generator=generator,
                                   device=cfg.device) * cfg.init_std).requires_grad_(True)
        self._items = (torch.randn((n_items, cfg.dim), generator=generator,
                                   device=cfg.device) * cfg.init_std).requires_grad_(True)
        self.n_items_ = n_items


class MFTrainer(TorchTrainerState):
    """One step after another of an MF fit, for the epoch driver (`training.EpochTrainer`):
    batches of the sampler's (user, positive) examples (`model.sampling.examples`), its draws,
    the loss, clipping and the optimizer step. The model's tables are its parameters."""

    name = "mf"

    def __init__(self, model: MF, train: sp.csr_matrix, generator: torch.Generator) -> None:
        cfg = model.config
        self.model, self.cfg, self.generator, self.device = model, cfg, generator, cfg.device
        tables = [model._users, model._items]
        #: (reg/2)‖W‖² over the whole tables: its gradient reg·W is added by Adam
        self.table_reg = cfg.reg if cfg.reg_mode == "full_table" else 0.0
        self.optimizer = mf_optim.adam(tables, cfg.lr, self.table_reg) \
            if cfg.optimizer == "adam" else mf_optim.sparse_adam(tables, cfg.lr)
        #: skips the exact clipping norm when a cheap bound shows the step is not clipped
        self.no_clip_bound = mf_optim.NoClipBound()
        self.sampler = TrainingSampler(cfg.sampling, train, self.device, generator)
        #: the training pairs (CSR order) the sampler's example ids index: int64 (n_pairs,)
        self.pair_users, self.pair_items = self.sampler.pair_users, self.sampler.pair_items
        self.score_floor = -1.0 / cfg.temperature if cfg.similarity == "cosine" else -math.inf
        #: the loss's diagnostics summed per example over the epoch (`train_epoch` resets them)
        self._stat_sums = {name: torch.zeros((), device=self.device)
                           for name in model.loss.stats}

    # -- what the driver reads and sets ------------------------------------------------------

    @property
    def divergence_hint(self) -> str:
        return (f"lower model.lr (now {self.learning_rate:g}), raise model.temperature or "
                "model.reg, or use model.similarity=cosine")

    def parameters(self) -> dict[str, torch.Tensor]:
        return {"users": self.model._users.detach().clone(),
                "items": self.model._items.detach().clone()}

    def load_parameters(self, params: Mapping[str, torch.Tensor]) -> None:
        with torch.no_grad():
            self.model._users.copy_(params["users"])
            self.model._items.copy_(params["items"])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        if self.cfg.optimizer == "adam":  # the config's, not the file's
            self.optimizer.param_groups[0]["weight_decay"] = self.table_reg

    # -- an epoch ----------------------------------------------------------------------------

    def _batches(self) -> Iterator[torch.Tensor]:
        yield from in_batches(self.sampler.epoch_examples(), self.cfg.batch_size)

    def train_epoch(self, epoch: int) -> dict[str, float]:
        """One epoch of the sampler's examples (as many as training pairs): the epoch's mean
        loss (with the `full_table` L2 penalty's value added at the epoch's end) and the loss's
        diagnostics. The step losses stay on the device; they are checked for NaN/inf every
        `_CHECK_EVERY` steps."""
        n_batches = math.ceil(len(self.pair_users) / self.cfg.batch_size)
        losses = torch.zeros(n_batches, device=self.device)
        sizes = torch.zeros(n_batches, device=self.device)
        self._stat_sums = {name: torch.zeros((), device=self.device)
                           for name in self.model.loss.stats}
        if self.cfg.optimizer == "adam" and self.cfg.grad_clip > 0:  # dense gradients
            adam = self.optimizer.state.get(self.model._users, {})
            self.no_clip_bound.reset((self.model._users, self.model._items),
                                     int(adam.get("step", 0)))
        checked = 0
        for step, batch in enumerate(progress(self._batches(), n_batches, f"mf epoch {epoch}")):
            losses[step] = self._step(batch)
            sizes[step] = len(batch)
            if step + 1 - checked >= _CHECK_EVERY or step + 1 == n_batches:
                self._check_finite(losses[checked:step + 1], checked)
                checked = step + 1
        total = sizes.sum()
        loss = float((losses * sizes).sum() / total)
        if self.cfg.reg > 0 and self.cfg.reg_mode == "full_table":  # at the epoch's end
            with torch.no_grad():
                loss += self.cfg.reg / 2 * sum(float(torch.linalg.vector_norm(w)) ** 2
                                               for w in (self.model._users, self.model._items))
        #: the loss's diagnostics (LossConfig.stats), means over the epoch's examples
        return {"loss": loss,
                **{name: float(value / total) for name, value in self._stat_sums.items()}}

    @staticmethod
    def _check_finite(losses: torch.Tensor, first_step: int) -> None:
        bad = torch.nonzero(~torch.isfinite(losses))
        if len(bad):
            raise NonFiniteLoss(first_step + int(bad[0, 0]) + 1, float(losses[bad[0, 0]]))

    def _step(self, batch: torch.Tensor) -> torch.Tensor:
        """One optimizer step on a batch of training-pair ids; the batch's mean loss without
        the `full_table` penalty (a 0-d tensor on the device, detached)."""
        cfg, tables = self.cfg, (self.model._users, self.model._items)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._batch_loss(batch)
        loss.backward()
        if cfg.optimizer == "sparse_adam":  # the touched rows, each once
            for table in tables:
                table.grad = table.grad.coalesce()
        # the `full_table` L2 gradient reg·W is added by Adam (`train_epoch` records its value)
        coefficient = 1.0
        if cfg.grad_clip > 0 and not self.no_clip_bound.unclipped(
                tables, self.pair_users[batch], cfg.grad_clip, self.table_reg):
            coefficient = mf_optim.clip_coefficient(tables, cfg.grad_clip, self.table_reg)
        scale_l2 = coefficient < 1.0 and self.table_reg > 0
        if coefficient < 1.0:  # clip g + reg·W: scale g here and the L2 term in Adam
            for table in tables:
                table.grad.mul_(coefficient)
        if scale_l2:
            self.optimizer.param_groups[0]["weight_decay"] = coefficient * self.table_reg
        self.optimizer.step()
        if scale_l2:
            self.optimizer.param_groups[0]["weight_decay"] = self.table_reg
        self.no_clip_bound.advance(tables, self.optimizer.param_groups[0])  # if it was reset
        return loss.detach()

    def _batch_loss(self, batch):
        """The batch's mean loss (with the L2 penalty of `batch_rows`; `_step` adds the
        `full_table` one)."""
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
        """s_pos (B,), s_neg (B, N) and s_ppos (B, M) or None, divided by the temperature (the B
        user rows are divided, not the B·N scores; at t = 1 the scores are left as they are), and
        the positives' embedding rows (B, d) where this gathered them (shared negatives; else None).
        Every item score of the step comes from one product, so its backward pass writes the table's
        gradient once: the full product (full-catalogue losses), one gather of the batch's rows
        (shared negatives: only the B + N (+ B·M) gathered rows are normalised), or one
        `sampled_dot` (per-example negatives: its B·N rows would be ten times the table, so the
        table is normalised once per step)."""
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
