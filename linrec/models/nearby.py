"""Learned per-component λ_i and the "nearby" models of Jin et al. 2021, §3.4, trained with
BPR and Adam in torch (Li 2023, §3.4.1 and eq. 76; docs/concepts/models.md).

* `LearnedLambda`: LRR with λ_i = λ + c·tanh(α_i), W(α) = V_k diag(e_i/(e_i + λ_i)) V_kᵀ,
  optionally with head/tail scaling (HT) and post-hoc diagonal removal (RMD).
* `NearbyItemItem`: HT and/or sparsification W_S = S ⊙ W ⊙ 1[W > threshold] around a dense
  item–item model (EDLAE full rank by default), optionally with RMD.

Parameterization choices (documented in the report):
* H = 2·sigmoid(h), T = 2·sigmoid(t), S = 2·sigmoid(s): the paper's sigmoid scaled by 2 so that
  at h = t = s = 0 the model *equals* its closed form (H = T = S = 1); a global factor changes
  no ranking.
* Training scores only the sampled items, s_ui = T_i·((x_u ⊙ H) V_k ⊙ f)·V_i at the sampled
  columns, never the full batch x n_items matrix.
* Early stopping (when the run passes a validation callback and patience > 0) keeps the
  parameters of the epoch with the best validation score (the run's selection metric).
* The epochs, early stopping, checkpoints and resume are the epoch driver's
  (`linrec.models.training`); `BPRTrainer` is the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from linrec.models import mf_optim
from linrec.models.base import Recommender, Validation, binary_pattern
from linrec.models.configs import MODEL_CONFIGS, LearnedLambdaConfig, NearbyHTConfig
from linrec.models.spectral import LRR, compute_spectrum
from linrec.models.training import (
    EpochDriver,
    PlateauSchedule,
    TorchTrainerState,
    batch_order,
    progress,
)
from linrec.registry import load

_SCORE_BATCH = 1024


def _doubled_sigmoid(logits: torch.Tensor) -> torch.Tensor:
    """2·sigmoid(x) ∈ (0, 2), = 1 at x = 0 (the paper's sigmoid up to a global factor)."""
    return 2.0 * torch.sigmoid(logits)


# --------------------------------------------------------------------------------------------
# Shared BPR trainer


class _BPRNearby(Recommender):
    """Training loop shared by the nearby models: uniform users in batches, `n_pairs`
    positives per user (uniform from the row) each paired with one uniform negative (pairs
    whose negative is a positive are dropped), loss mean −log σ(t (s_ui − s_uj)) (Li 2023, §3.4.1),
    Adam.

    Subclasses implement `_setup(train)` (closed form + torch parameters), `_pair_scores(...)`
    and `_scores(foldin)`."""

    # -- subclass hooks ----------------------------------------------------------------------

    def _setup(self, train: sp.csr_matrix) -> None:
        raise NotImplementedError

    def _pair_scores(self, inputs: torch.Tensor, items: torch.Tensor,
                     item_inputs: torch.Tensor) -> torch.Tensor:
        """Scores (B, P) of `items` (B, P) for the dense (dropped-out) input rows (B, n);
        item_inputs (B, P) = inputs at `items` (for RMD)."""
        raise NotImplementedError

    def _scores(self, foldin: sp.csr_matrix) -> np.ndarray:
        raise NotImplementedError

    # -- training ------------------------------------------------------------------------------

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        """Closed form, then `epochs` epochs of BPR + Adam; with a validation callback and
        patience > 0, early stopping on its score (the best epoch's parameters are kept)."""
        pattern = train  # binary (Recommender.fit)
        self._setup(pattern)
        self.train_ = pattern
        early_stopping = validation is not None and self.patience > 0
        driver = EpochDriver(self, BPRTrainer(self, pattern), train=pattern,
                             config=self.config, epochs=self.epochs,
                             validation=validation if early_stopping else None,
                             schedule=PlateauSchedule(None, 0, 0.0, self.patience),
                             device=self.device)
        done = driver.run()
        self.history_, self.best_epoch_ = done.history, done.best_epoch
        self.stop_reason_, self.resumed_from_ = done.stop_reason, done.resumed_from
        self.loss_history_ = np.asarray([record["loss"] for record in done.history])

    def training_log(self) -> dict[str, Any]:
        return {"epochs": self.history_, "best_epoch": self.best_epoch_,
                "stop_reason": self.stop_reason_, "resumed_from": self.resumed_from_}

    def _batch_inputs(self, pattern: sp.csr_matrix, users: np.ndarray,
                      generator: torch.Generator, train: bool) -> torch.Tensor:
        """Dense (B, n) input rows; inverted dropout on the entries when training."""
        rows = torch.as_tensor(pattern[users].toarray(), dtype=self._torch_dtype)
        if train and self.dropout > 0:
            keep = torch.rand(rows.shape, generator=generator, dtype=self._torch_dtype)
            rows = rows * (keep >= self.dropout) / (1.0 - self.dropout)
        return rows.to(self.device)

    def _sample_pairs(self, pattern: sp.csr_matrix, users: np.ndarray,
                      generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """positives (B, P) uniform from each row and negatives (B, P) uniform over all items
        (the caller drops the pairs whose negative is a positive)."""
        starts = torch.as_tensor(pattern.indptr[users], dtype=torch.int64)
        lengths = torch.as_tensor(np.diff(pattern.indptr)[users], dtype=torch.int64)
        draws = torch.rand((len(users), self.n_pairs), generator=generator, dtype=torch.float64)
        offsets = torch.minimum((draws * lengths[:, None]).long(), lengths[:, None] - 1)
        indices = torch.as_tensor(pattern.indices, dtype=torch.int64)
        positives = indices[starts[:, None] + offsets]
        negatives = torch.randint(pattern.shape[1], (len(users), self.n_pairs),
                                  generator=generator)
        return positives, negatives

    def _batch_loss(self, pattern: sp.csr_matrix, users: np.ndarray,
                    generator: torch.Generator, train: bool) -> torch.Tensor:
        inputs = self._batch_inputs(pattern, users, generator, train)
        positives, negatives = self._sample_pairs(pattern, users, generator)
        positives, negatives = positives.to(self.device), negatives.to(self.device)
        clean = torch.as_tensor(pattern[users].toarray() > 0, device=self.device)
        valid_pairs = ~torch.gather(clean, 1, negatives)  # the negative must be unobserved
        pos_scores = self._pair_scores(inputs, positives, torch.gather(inputs, 1, positives))
        neg_scores = self._pair_scores(inputs, negatives, torch.gather(inputs, 1, negatives))
        # Li 2023, §3.4.1: −log σ(t (s_ui − s_uj)) = softplus(−t (s_ui − s_uj))
        losses = F.softplus(-self.bpr_scale * (pos_scores - neg_scores))
        weights = valid_pairs.to(losses.dtype)
        return (losses * weights).sum() / weights.sum().clamp_min(1.0)

    def bpr_loss(self, train: sp.csr_matrix, seed: int = 0) -> float:
        """Mean BPR loss of the current parameters on one seeded sample of pairs for every user
        of `train` (no dropout): a fixed yardstick for tests and diagnostics."""
        self.check_fitted()
        pattern = binary_pattern(train, f"{self.name}.bpr_loss", self.n_items_)
        users = np.flatnonzero(np.diff(pattern.indptr) > 0)
        with torch.no_grad():
            return float(self._batch_loss(pattern, users, torch.Generator().manual_seed(seed),
                                          train=False))

    # -- scoring -------------------------------------------------------------------------------

    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        """Scores (rows x n_items) of the learned W for the fold-in rows; `users` is ignored."""
        return self._scores(binary_pattern(foldin, f"{self.name}.score", self.n_items_))

    @property
    def _torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


class BPRTrainer(TorchTrainerState):
    """The nearby models' step, for the epoch driver (`training.EpochTrainer`): every epoch the
    users with interactions in a fresh order, in batches; per batch the model's BPR loss
    (`_BPRNearby._batch_loss`) and one Adam step on its parameters `params_`."""

    divergence_hint = "lower model.lr or model.bpr_scale"

    def __init__(self, model: _BPRNearby, pattern: sp.csr_matrix) -> None:
        self.model, self.pattern, self.name = model, pattern, model.name
        self.generator = torch.Generator().manual_seed(model.seed)
        self.optimizer = mf_optim.adam(list(model.params_.values()), model.lr, 0.0)
        self.active = np.flatnonzero(np.diff(pattern.indptr) > 0)

    def parameters(self) -> dict[str, torch.Tensor]:
        return {key: value.detach().clone() for key, value in self.model.params_.items()}

    def load_parameters(self, params: Mapping[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for key, value in params.items():
                self.model.params_[key].copy_(value)

    def train_epoch(self, epoch: int) -> dict[str, float]:
        """One pass over the active users: the mean BPR loss per user."""
        model = self.model
        batch_size = model.batch_size
        total, count = 0.0, 0
        batches = batch_order(len(self.active), batch_size, self.generator)
        n_batches = -(-len(self.active) // batch_size)
        for batch in progress(batches, n_batches, f"{self.name} epoch {epoch}"):
            users = self.active[batch.numpy()]
            self.optimizer.zero_grad()
            loss = model._batch_loss(self.pattern, users, self.generator, train=True)
            loss.backward()
            self.optimizer.step()
            total += float(loss.detach()) * len(users)
            count += len(users)
        return {"loss": total / count}


# --------------------------------------------------------------------------------------------
# LRR with learned λ_i


def _scaled(weights: np.ndarray, head: np.ndarray | None, tail: np.ndarray | None
            ) -> np.ndarray:
    """diagM(head) W diagM(tail) (W when there is no head/tail)."""
    if head is None:
        return weights
    return head[:, None] * weights * tail[None, :]


class LearnedLambda(_BPRNearby):
    """LRR with per-component λ_i = λ + c·tanh(α_i), i = 1..k (Li 2023, §3.4.1):
    W(α) = V_k diag(e_i/(e_i + λ_i)) V_kᵀ, e_i = σ_i², learned by BPR (Li 2023, §3.4.1) with Adam.

    head_tail: also learn H, T (W_HT = diagM(H) W diagM(T), Li 2023, eq. 76); rmd: remove diag(W) in
    the forward pass (diag(W)_i = Σ_r V_ir² f_r, subtracted as x_ui·H_i·W_ii·T_i).
    At α = 0 (and h = t = 0) the model equals LRR(rank, lam) exactly (epochs=0 gives it).

    Parameters: rank k, lam λ > 0, c in [0, λ) (search range; λ_i ∈ (λ − c, λ + c)),
    head_tail, rmd, dropout (input dropout while training; 0.5 in Jin et al. 2021 for models 2–4),
    bpr_scale t (logit scale; not reported in the dissertation), lr, epochs, batch_size (2048
    in the paper), n_pairs (positive/negative pairs per user and batch), patience (early
    stopping on the run's validation score; 0 = off), seed, dtype, device.
    After fit: alpha_ (k,), lambdas_ (k,), filter_ (k,), head_ / tail_ (n,) or None,
    loss_history_ (mean training BPR per epoch).
    """

    config_class = LearnedLambdaConfig

    def _setup(self, train: sp.csr_matrix) -> None:
        n_items = train.shape[1]
        rank = self.rank_ = self.config.rank_for(n_items)
        spectrum = compute_spectrum(train, np.float64, rank=None if rank == n_items else rank)
        options = dict(dtype=self._torch_dtype, device=self.device)
        self.n_items_ = n_items
        self._eigenvalues = torch.tensor(spectrum.eigenvalues[:rank], **options)
        self._vectors = torch.tensor(spectrum.vectors[:, :rank], **options)
        self.params_ = {"alpha": torch.nn.Parameter(torch.zeros(rank, **options))}
        if self.head_tail:
            self.params_["head"] = torch.nn.Parameter(torch.zeros(n_items, **options))
            self.params_["tail"] = torch.nn.Parameter(torch.zeros(n_items, **options))

    # -- the learned quantities ----------------------------------------------------------------

    def _lambdas(self) -> torch.Tensor:
        return self.lam + self.c * torch.tanh(self.params_["alpha"])  # Li 2023, §3.4.1

    def _filter(self) -> torch.Tensor:
        e = self._eigenvalues
        return e / (e + self._lambdas())  # eq. 69 with λ_i: σ_i²/(σ_i² + λ_i)

    def _head_tail(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if not self.head_tail:
            return None, None
        return _doubled_sigmoid(self.params_["head"]), _doubled_sigmoid(self.params_["tail"])

    @property
    def alpha_(self) -> np.ndarray:
        return self.params_["alpha"].detach().cpu().numpy().copy()

    @property
    def lambdas_(self) -> np.ndarray:
        return self._lambdas().detach().cpu().numpy()

    @property
    def filter_(self) -> np.ndarray:
        return self._filter().detach().cpu().numpy()

    @property
    def head_(self) -> np.ndarray | None:
        head, _ = self._head_tail()
        return None if head is None else head.detach().cpu().numpy()

    @property
    def tail_(self) -> np.ndarray | None:
        _, tail = self._head_tail()
        return None if tail is None else tail.detach().cpu().numpy()

    # -- forward passes ------------------------------------------------------------------------

    def _pair_scores(self, inputs: torch.Tensor, items: torch.Tensor,
                     item_inputs: torch.Tensor) -> torch.Tensor:
        """s_ui = T_i ((x_u ⊙ H) V_k ⊙ f) · V_i − rmd · x_ui H_i W_ii T_i (Li 2023, §3.4.1 and
        eq. 76)."""
        f = self._filter()
        head, tail = self._head_tail()
        vectors = self._vectors if head is None else self._vectors * head[:, None]
        # (x ⊙ H) V_k = x (diagM(H) V_k): a sparse product, O(nnz·k) instead of O(B·n·k)
        weighted = torch.sparse.mm(inputs.to_sparse(), vectors) * f  # (B, k)
        item_vectors = self._vectors[items]  # (B, P, k)
        scores = (item_vectors @ weighted[..., None])[..., 0]
        if self.rmd:
            diagonal = (item_vectors * item_vectors) @ f  # W_ii = Σ_r V_ir² f_r
            scale = item_inputs if head is None else item_inputs * head[items]
            scores = scores - scale * diagonal
        if tail is not None:
            scores = scores * tail[items]
        return scores

    def _scores(self, foldin: sp.csr_matrix) -> np.ndarray:
        """((foldin ⊙ H) V_k ⊙ f) V_kᵀ ⊙ T − RMD term, in numpy (rows x n_items)."""
        f = self.filter_
        vectors = self._vectors.detach().cpu().numpy()
        head, tail = self.head_, self.tail_
        inputs = foldin if head is None else foldin @ sp.diags(head)
        scores = (np.asarray(inputs @ vectors) * f) @ vectors.T
        if self.rmd:
            diagonal = (vectors * vectors) @ f
            scores -= inputs.multiply(diagonal[None, :]).toarray()
        if tail is not None:
            scores *= tail[None, :]
        return scores

    def weights(self) -> np.ndarray:
        """W = diagM(H) (V_k diag(f) V_kᵀ, diagonal removed when rmd) diagM(T) (n x n, float64):
        scores = foldin @ W."""
        self.check_fitted()
        vectors = self._vectors.detach().cpu().numpy()
        weights = (vectors * self.filter_) @ vectors.T
        if self.rmd:
            np.fill_diagonal(weights, 0.0)
        return _scaled(weights, self.head_, self.tail_)

    def closed_form(self) -> LRR:
        """The LRR(rank, lam) model this one starts from (fitted on the same spectrum)."""
        self.check_fitted()
        return LRR(rank=self.rank_, lam=self.lam).fit(self.train_)


# --------------------------------------------------------------------------------------------
# Nearby models around a dense item–item W


class NearbyItemItem(_BPRNearby):
    """Nearby models of a dense item–item model W (Li 2023, eq. 76, eq. 76):
    head_tail: W_HT = diagM(H) W diagM(T); sparsify: W_S = S ⊙ W ⊙ 1[W > sparsify_threshold]
    with S learned on the kept entries only; rmd: W ← W − diagM(diag(W)) (post hoc).

    base: registry name of the item–item model giving W (default "edlae", full rank; e.g.
    "edlae_lowrank" for rank 1000); base_params: its constructor parameters.
    At h = t = s = 0 (epochs=0) the model equals W ⊙ 1[W > threshold] (−inf: W itself), with the
    diagonal removed when rmd. Other parameters as in `LearnedLambda`.
    """

    config_class = NearbyHTConfig

    def _setup(self, train: sp.csr_matrix) -> None:
        base = load(MODEL_CONFIGS.entry(self.base).model_path)
        weights = base(**self.base_params).fit(train).weights()
        n_items = weights.shape[0]
        options = dict(dtype=self._torch_dtype, device=self.device)
        self.n_items_ = n_items
        weights = np.array(weights, dtype=np.float64)
        if self.rmd:
            np.fill_diagonal(weights, 0.0)  # eq. 76 RMD, post hoc
        self.params_ = {}
        if self.sparsify:
            rows, cols = np.nonzero(weights > self.sparsify_threshold)
            self._support = torch.as_tensor(np.vstack([cols, rows]), device=self.device)  # Wᵀ
            self._support_values = torch.as_tensor(weights[rows, cols], **options)
            self.params_["scale"] = torch.nn.Parameter(torch.zeros(len(rows), **options))
        else:
            self._weights = torch.as_tensor(weights, **options)
        if self.head_tail:
            self.params_["head"] = torch.nn.Parameter(torch.zeros(n_items, **options))
            self.params_["tail"] = torch.nn.Parameter(torch.zeros(n_items, **options))

    def _full_scores(self, inputs: torch.Tensor) -> torch.Tensor:
        """(x ⊙ H) W_S ⊙ T for dense inputs (B, n) -> (B, n)."""
        head = _doubled_sigmoid(self.params_["head"]) if self.head_tail else None
        if self.sparsify:
            if head is not None:
                inputs = inputs * head
            values = self._support_values * _doubled_sigmoid(self.params_["scale"])
            transposed = torch.sparse_coo_tensor(self._support, values,
                                                 (self.n_items_, self.n_items_),
                                                 check_invariants=False)
            scores = torch.sparse.mm(transposed, inputs.T).T  # (W_Sᵀ xᵀ)ᵀ
        else:
            weights = self._weights if head is None else self._weights * head[:, None]
            # (x ⊙ H) W = x (diagM(H) W): a sparse product, O(nnz·n) instead of O(B·n²)
            scores = torch.sparse.mm(inputs.to_sparse(), weights)
        if self.head_tail:
            scores = scores * _doubled_sigmoid(self.params_["tail"])
        return scores

    def _pair_scores(self, inputs: torch.Tensor, items: torch.Tensor,
                     item_inputs: torch.Tensor) -> torch.Tensor:
        return torch.gather(self._full_scores(inputs), 1, items)

    def weights(self) -> np.ndarray | sp.csr_matrix:
        """W = diagM(H) W_S diagM(T) (n x n; sparse CSR when sparsify): scores = foldin @ W."""
        self.check_fitted()
        head = tail = None
        if self.head_tail:
            head = _doubled_sigmoid(self.params_["head"]).detach().cpu().numpy()
            tail = _doubled_sigmoid(self.params_["tail"]).detach().cpu().numpy()
        if not self.sparsify:
            return _scaled(self._weights.detach().cpu().numpy(), head, tail)
        cols, rows = self._support.cpu().numpy()
        values = (self._support_values * _doubled_sigmoid(self.params_["scale"]))
        matrix = sp.csr_matrix((values.detach().cpu().numpy(), (rows, cols)),
                               shape=(self.n_items_, self.n_items_))
        if head is not None:
            matrix = sp.diags(head) @ matrix @ sp.diags(tail)
        return sp.csr_matrix(matrix)

    def _scores(self, foldin: sp.csr_matrix) -> np.ndarray:
        out = np.empty(foldin.shape, dtype=np.float64)
        with torch.no_grad():
            for start in range(0, foldin.shape[0], _SCORE_BATCH):
                rows = foldin[start:start + _SCORE_BATCH].toarray()
                inputs = torch.as_tensor(rows, dtype=self._torch_dtype, device=self.device)
                out[start:start + len(rows)] = self._full_scores(inputs).cpu().numpy()
        return out
