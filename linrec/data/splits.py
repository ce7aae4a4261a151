"""Split protocols -> Split(train, valid, test) of EvalSet(users, foldin, targets)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class EvalSet:
    """Users to evaluate, what a model may condition on, and what it must find.

    users: int64 (m,) row ids into the split's user vocabulary (rows of `Split.train`).
    foldin: CSR (m x n_items) float32 binary: the input row of each user; masked when ranking.
    targets: CSR (m x n_items) float32 binary: held-out items (disjoint from foldin).
    negatives: optional int64 (m, n_neg) item ids given by the dataset for sampled evaluation (NCF).
    """

    users: np.ndarray
    foldin: sp.csr_matrix
    targets: sp.csr_matrix
    negatives: np.ndarray | None = None

    @property
    def n_users(self) -> int:
        return len(self.users)


@dataclass(frozen=True)
class Split:
    """train: CSR (n_users x n_items) float32 binary, one row per user of the vocabulary
    (held-out users of strong generalization have empty rows). strong: True when the evaluation
    users are not in `train` (models must fold them in from `EvalSet.foldin`)."""

    train: sp.csr_matrix
    valid: EvalSet | None
    test: EvalSet
    strong: bool = False
    user_ids: np.ndarray | None = None
    item_ids: np.ndarray | None = None

    @property
    def n_items(self) -> int:
        return self.train.shape[1]
