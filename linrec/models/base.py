"""The Recommender contract every model follows (ARCHITECTURE §3)."""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from linrec.atomic import atomic_open

if TYPE_CHECKING:
    from linrec.data.splits import EvalSet


class Recommender(ABC):
    """fit(train) learns from a users x items CSR matrix; score(foldin, users) returns dense
    scores (rows x n_items, float32/float64) for a batch of users.

    `users` are row ids of `train` when the users were seen in training (weak generalization);
    `users=None` means: fold the users in from `foldin` alone (strong generalization).
    Item-item models ignore `users`.
    """

    #: whether the model can score users it never saw, from their fold-in rows
    supports_strong_generalization: bool = True

    @abstractmethod
    def fit(self, train: sp.csr_matrix, valid: EvalSet | None = None) -> Recommender:
        """Learn from train (users x items, float32 binary). Returns self."""

    @abstractmethod
    def score(self, foldin: sp.csr_matrix, users: np.ndarray | None = None) -> np.ndarray:
        """Scores (foldin.shape[0] x n_items) for the given users."""

    def save(self, path: str | Path) -> None:
        """Write the fitted model to `path` (pickle of its attributes)."""
        with atomic_open(path, "wb") as fh:
            pickle.dump(self.__dict__, fh, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def load(cls, path: str | Path) -> Recommender:
        """Read a model written by `save`."""
        obj = cls.__new__(cls)
        with open(path, "rb") as fh:
            obj.__dict__.update(pickle.load(fh))
        return obj
