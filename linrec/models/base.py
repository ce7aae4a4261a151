"""The Recommender contract every model follows (ARCHITECTURE.md §3), with the input checks made
once for every model.

A model is built from its typed config (`linrec.models.configs`): `EASE(lam=300)` or
`EASE(EASEConfig(lam=300))`; its parameters are the config's fields, readable as attributes
(`model.lam`). `fit` and `score` are templates: they check the matrices once and call the model's
`_fit` / `_score`.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from linrec.atomic import atomic_open
from linrec.errors import ConfigError, DataError
from linrec.models.configs import ModelConfig
from linrec.scoring import gather_scores

#: a validation callback from the run: model -> score on the validation users (higher is better)
Validation = Callable[["Recommender"], float]


#: fitted attributes renamed to the naming rule (a trailing underscore): old name -> new
_RENAMED_ATTRIBUTES = {"W": "W_", "item_counts": "item_counts_"}


def check_train(train: Any, where: str) -> sp.csr_matrix:
    """The users x items training matrix as CSR (no copy when it already is one); DataError when
    it is not a 2-D scipy.sparse matrix with at least one item and one interaction and finite
    values."""
    if not sp.issparse(train) or train.ndim != 2:
        raise DataError(f"{where}: train must be a 2-D users x items scipy.sparse matrix, got "
                        f"{type(train).__name__}")
    matrix = sp.csr_matrix(train)
    if matrix.shape[1] == 0:
        raise DataError(f"{where}: train has 0 items (shape {matrix.shape}); need n_items >= 1")
    if not np.all(np.isfinite(matrix.data)):
        raise DataError(f"{where}: train contains NaN/inf values")
    if matrix.count_nonzero() == 0:
        raise DataError(f"{where}: train {matrix.shape} has no interactions")
    return matrix


def check_foldin(foldin: Any, n_items: int, where: str) -> sp.csr_matrix:
    """Fold-in rows (rows x n_items) as CSR; DataError when the columns do not match the
    catalogue the model was fitted on."""
    if not sp.issparse(foldin) or foldin.ndim != 2:
        raise DataError(f"{where}: foldin must be a 2-D rows x items scipy.sparse matrix, got "
                        f"{type(foldin).__name__}")
    if foldin.shape[1] != n_items:
        raise DataError(f"{where}: foldin has {foldin.shape[1]} items, the model was fitted on "
                        f"{n_items}")
    return sp.csr_matrix(foldin)


def binary_pattern(matrix: Any, where: str, n_items: int | None = None) -> sp.csr_matrix:
    """The interaction pattern of `matrix` as a CSR copy of float64 ones (implicit data: values
    are ignored), checked like a training matrix, or like fold-in rows when n_items is given."""
    csr = check_train(matrix, where) if n_items is None else check_foldin(matrix, n_items, where)
    csr = csr.copy()
    csr.eliminate_zeros()
    csr.sum_duplicates()
    csr.data = np.ones_like(csr.data, dtype=np.float64)
    return csr


def on_cpu(attributes: dict[str, Any]) -> dict[str, Any]:
    """A model's attributes with every torch tensor in them (also inside dicts, lists and tuples)
    copied to the CPU, and a config with a `device` field set to "cpu"; what is not a tensor is
    kept as it is. torch is only looked up if it was imported (without it there are no
    tensors)."""
    torch = sys.modules.get("torch")

    def portable(value: Any) -> Any:
        if torch is not None and isinstance(value, torch.Tensor):
            if value.device.type == "cpu":
                return value
            copy = value.detach().cpu()
            if isinstance(value, torch.nn.Parameter):
                return torch.nn.Parameter(copy, requires_grad=value.requires_grad)
            return copy.requires_grad_(value.requires_grad)
        if isinstance(value, dict):
            return {key: portable(item) for key, item in value.items()}
        if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
            return type(value)(portable(item) for item in value)
        return value

    state = {key: portable(value) for key, value in attributes.items()}
    config = state.get("config")
    if dataclasses.is_dataclass(config) and "device" in config.__dataclass_fields__:
        state["config"] = dataclasses.replace(config, device="cpu")
    return state


class Recommender(ABC):
    """fit(train) learns from a users x items CSR matrix; score(foldin, users) returns dense
    scores (rows x n_items, float32/float64) for a batch of users.

    `users` are row ids of `train` when the users were seen in training (weak generalization);
    `users=None` means: fold the users in from `foldin` alone (strong generalization).
    Item-item models ignore `users`.

    Subclasses set `config_class` and implement `_fit(train, validation)` and
    `_score(foldin, users)`; item-item models also `weights()`.
    """

    config_class: ClassVar[type[ModelConfig]]
    #: whether the model can score users it never saw, from their fold-in rows
    supports_strong_generalization: bool = True
    #: whether fit sees the interaction pattern (implicit feedback) rather than the values
    binary_input: ClassVar[bool] = True

    def __init__(self, config: ModelConfig | None = None, /, **params: Any) -> None:
        if config is None:
            config = self.config_class.from_mapping(
                {"name": self.config_class.__dataclass_fields__["name"].default, **params})
        elif not isinstance(config, self.config_class):
            raise ConfigError(f"{type(self).__name__} needs a {self.config_class.__name__}, got "
                              f"{type(config).__name__}")
        elif params:
            config = dataclasses.replace(config, **params)
        self.config = config

    def __getattr__(self, name: str) -> Any:
        # parameters are read from the config (only reached when normal lookup fails)
        config = self.__dict__.get("config")
        if config is not None and name in config.__dataclass_fields__:
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- fit ----------------------------------------------------------------------------------

    def fit(self, train: sp.spmatrix, validation: Validation | None = None) -> Recommender:
        """Learn from train (users x items), binary in every linrec split. A model whose
        `binary_input` is true sees the interaction pattern (every stored non-zero is a 1);
        the others take the values as given (weights, counts). validation: model -> validation
        score, for models that select epochs (`linrec.eval.validation_score` builds one).
        Returns self."""
        if validation is not None and not callable(validation):
            raise ConfigError(f"{self.name}.fit: validation must be a callable model -> score "
                              "(linrec.eval.validation_score(split)), got "
                              f"{type(validation).__name__}")
        where = f"{self.name}.fit"
        matrix = binary_pattern(train, where) if self.binary_input else check_train(train, where)
        self._fit(matrix, validation)
        self.n_items_ = matrix.shape[1]
        #: what measured the epochs (results.json's training.validation), when anything did
        describe = getattr(validation, "describe", None)
        self.validated_by_ = describe() if describe is not None else None
        return self

    @abstractmethod
    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        """Learn from the checked training matrix."""

    # -- score --------------------------------------------------------------------------------

    @property
    def is_fitted(self) -> bool:
        return "n_items_" in self.__dict__

    def check_fitted(self) -> None:
        if not self.is_fitted:
            raise ConfigError(f"{self.name} is not fitted: call fit(train) first")

    def score(self, foldin: sp.spmatrix, users: np.ndarray | None = None) -> np.ndarray:
        """Scores (foldin.shape[0] x n_items) for the given users."""
        self.check_fitted()
        return self._score(check_foldin(foldin, self.n_items_, f"{self.name}.score"), users)

    @abstractmethod
    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        """Scores of the checked fold-in rows."""

    #: whether `score_tensor` serves scores on an accelerator, where the evaluator then ranks
    #: them (linrec.eval.device_ranks); a model trained there sets it
    scores_on_device: bool = False
    #: the torch device of `score_tensor`'s scores (when `scores_on_device`)
    score_device: Any = None

    def score_tensor(self, foldin: sp.spmatrix, users: np.ndarray | None = None) -> Any:
        """`score`'s rows as a fresh torch tensor on `score_device`, for a model whose
        `scores_on_device` is true (nothing is copied to the host)."""
        self.check_fitted()
        return self._score_tensor(check_foldin(foldin, self.n_items_,
                                               f"{self.name}.score_tensor"), users)

    def _score_tensor(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> Any:
        raise NotImplementedError(f"{self.name} scores on the host (scores_on_device is false)")

    def score_items(self, foldin: sp.spmatrix, users: np.ndarray | None,
                    items: np.ndarray) -> np.ndarray:
        """Scores (B, m) of items[b] (int, (B, m)) for the b-th fold-in row (and user): the
        entries of `score`'s rows at those items, which a model that can score (user, item)
        pairs directly computes without the rest of each row (sampled validation). Rows of one
        user id are that user's one fold-in row (each is scored once)."""
        self.check_fitted()
        foldin = check_foldin(foldin, self.n_items_, f"{self.name}.score_items")
        items = np.asarray(items, dtype=np.int64)
        if items.ndim != 2 or items.shape[0] != foldin.shape[0]:
            raise ConfigError(f"{self.name}.score_items: items {items.shape} must be (B, m) for "
                              f"B = {foldin.shape[0]} fold-in rows")
        if items.size and (items.min() < 0 or items.max() >= self.n_items_):
            raise ConfigError(f"{self.name}.score_items: item ids must lie in "
                              f"[0, {self.n_items_})")
        return self._score_items(foldin, users, items)

    def _score_items(self, foldin: sp.csr_matrix, users: np.ndarray | None,
                     items: np.ndarray) -> np.ndarray:
        return gather_scores(self._score, foldin, users, items)

    # -- top-K lists --------------------------------------------------------------------------

    def recommend(self, foldin: sp.spmatrix, k: int, users: np.ndarray | None = None, *,
                  exclude: bool | sp.spmatrix = True, seed: int = 0,
                  tie_users: np.ndarray | None = None, item_ids: np.ndarray | None = None,
                  memory_budget_mb: float = 512.0) -> tuple[np.ndarray, np.ndarray]:
        """The k best items of each fold-in row, best first: (items (m, k), scores (m, k)).

        foldin: CSR (m x n_items), the users' known items; users: their training-row ids, as
        for `score` (None: fold them in from `foldin`). exclude: True (default) never returns a
        row's fold-in items, False returns any item, a sparse (m x n_items) matrix excludes its
        entries instead. Ties are broken as the evaluator breaks them, by the key of (seed,
        tie_users[row], item) with tie_users defaulting to users, else the row positions:
        `recommend(evalset.foldin, k, evalset.users, seed=run seed)` lists exactly the items the
        evaluator ranks 1..k. item_ids (Split.item_ids): return raw item ids (object array)
        instead of indices. A row with fewer than k candidates ends in item -1 (None with
        item_ids) and score -inf. Scored in batches of memory_budget_mb, like the evaluator."""
        from linrec.item_order import COMPILED_FROM_ROWS, BatchKeys, top_k
        from linrec.models._sparse_dense import product_top_k_for
        from linrec.scoring import row_batches, scored_batch

        self.check_fitted()
        foldin = check_foldin(foldin, self.n_items_, f"{self.name}.recommend")
        n_rows, n_items = foldin.shape
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ConfigError(f"{self.name}.recommend: k={k!r} must be a positive integer")
        if users is not None:
            users = np.asarray(users, dtype=np.int64)
            if users.shape != (n_rows,):
                raise DataError(f"{self.name}.recommend: users has shape {users.shape}; "
                                f"expected ({n_rows},), one per fold-in row")
        key_users = users if tie_users is None else np.asarray(tie_users, dtype=np.int64)
        if key_users is None:
            key_users = np.arange(n_rows, dtype=np.int64)
        elif key_users.shape != (n_rows,):
            raise DataError(f"{self.name}.recommend: tie_users has shape {key_users.shape}; "
                            f"expected ({n_rows},)")
        if isinstance(exclude, (bool, np.bool_)):
            masked = foldin if exclude else None
        else:
            masked = check_foldin(exclude, n_items, f"{self.name}.recommend exclude")
            if masked.shape[0] != n_rows:
                raise DataError(f"{self.name}.recommend: exclude has {masked.shape[0]} rows; "
                                f"expected {n_rows}, one per fold-in row")
        if item_ids is not None and len(item_ids) != n_items:
            raise DataError(f"{self.name}.recommend: item_ids has {len(item_ids)} entries; "
                            f"the model scores {n_items} items")
        kk = min(int(k), n_items)
        items = np.empty((n_rows, kk), np.int64)
        scores = None
        # a model scoring by an item-item product selects as it scores (`product_top_k`)
        by_product = product_top_k_for(self, foldin)
        compiled = n_rows >= COMPILED_FROM_ROWS  # the request's size, whatever its batches
        for rows in row_batches(foldin.shape, memory_budget_mb=memory_budget_mb):
            keys = BatchKeys(seed, key_users[rows], n_items)
            part = None if masked is None else masked[rows]
            if by_product is not None:
                got_items, got_scores = by_product(foldin[rows], part, kk, keys)
            else:
                got_items, got_scores = top_k(
                    scored_batch(self._score, foldin, users, rows, owner=self.name), kk, keys,
                    exclude=part, compiled=compiled)
            if scores is None:
                scores = np.empty((n_rows, kk), got_scores.dtype)
            items[rows], scores[rows] = got_items, got_scores
        if scores is None:
            scores = np.empty((0, kk))
        if item_ids is None:
            return items, scores
        raw = np.empty(items.shape, dtype=object)
        found = items >= 0
        raw[found] = np.asarray(item_ids, dtype=object)[items[found]]
        return raw, scores

    def training_log(self) -> dict[str, Any] | None:
        """What a trained model records about its training (per-epoch loss, validation metric,
        ...) for results.json; None for closed-form models."""
        return None

    def weights(self) -> np.ndarray | sp.spmatrix:
        """The item-item matrix W (n_items x n_items, dense or sparse) of an item-item model,
        scores = foldin @ W. Models without one raise NotImplementedError."""
        raise NotImplementedError(f"{self.name} has no item-item matrix W")

    # -- persistence --------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the fitted model to `path` (pickle of its attributes, atomically). A model
        trained on a GPU is written as if trained on the CPU (`on_cpu`), so that it loads and
        scores on a machine without one."""
        with atomic_open(path, "wb") as fh:
            pickle.dump(on_cpu(self.__dict__), fh, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def load(cls, path: str | Path) -> Recommender:
        """Read a model written by `save`."""
        obj = cls.__new__(cls)
        with open(path, "rb") as fh:
            state = pickle.load(fh)
        for old, new in _RENAMED_ATTRIBUTES.items():  # a model saved by an earlier linrec
            if old in state and new not in state:
                state[new] = state.pop(old)
        obj.__dict__.update(state)
        return obj
