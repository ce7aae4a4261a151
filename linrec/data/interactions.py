"""Interactions: a validated list of (user, item[, value, timestamp]) events with vocabularies
mapping contiguous indices back to raw ids. PredefinedSplitData: a dataset published already split."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from linrec.errors import DataError


@dataclass(frozen=True)
class Interactions:
    """Implicit-feedback events after vocabulary mapping.

    users, items: int32 (nnz,) contiguous indices into `user_ids` / `item_ids`.
    values: float32 (nnz,) or None (ratings or counts; None means all ones).
    timestamps: int64 (nnz,) or None.
    user_ids, item_ids: raw ids, index -> raw id (length n_users / n_items).
    Build through `Interactions.from_raw` (validates and merges duplicates); the constructor only
    re-checks shapes.
    """

    users: np.ndarray
    items: np.ndarray
    user_ids: np.ndarray
    item_ids: np.ndarray
    values: np.ndarray | None = None
    timestamps: np.ndarray | None = None
    name: str = "interactions"

    @property
    def n_users(self) -> int:
        return len(self.user_ids)

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    @property
    def n_interactions(self) -> int:
        return len(self.users)

    def to_csr(self, binary: bool = True) -> sp.csr_matrix:
        """users x items CSR matrix, float32; binary=True gives 1.0 per (user, item)."""
        data = (
            np.ones(self.n_interactions, dtype=np.float32)
            if binary or self.values is None
            else self.values.astype(np.float32)
        )
        m = sp.csr_matrix(
            (data, (self.users, self.items)), shape=(self.n_users, self.n_items), dtype=np.float32
        )
        m.sum_duplicates()
        return m


@dataclass(frozen=True)
class PredefinedSplitData:
    """A dataset published with its own train/test split (LightGCN, NCF files).

    train, test: Interactions over one shared identity vocabulary (ids are the file's integers,
    n_users / n_items = max id + 1 over both files).
    test_negatives: optional int64 (n_test_rows, n_neg) item ids given with the test rows
    (NCF's 99 negatives), aligned with `negative_users` (int64 (n_test_rows,)).
    """

    train: Interactions
    test: Interactions
    test_negatives: np.ndarray | None = None
    negative_users: np.ndarray | None = None
    name: str = field(default="predefined")


def check_nonempty(inter: Interactions, where: str) -> None:
    """Raise DataError when no interaction is left (names the step that emptied it)."""
    if inter.n_interactions == 0:
        raise DataError(f"{inter.name}: no interactions left after {where}; relax the filters")
