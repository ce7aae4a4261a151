"""Interactions: a validated list of (user, item[, value, timestamp]) events with vocabularies
mapping contiguous indices back to raw ids. PredefinedSplitData: a dataset published already
split."""

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

    def __post_init__(self) -> None:
        nnz = len(self.users)
        for field_name in ("users", "items", "values", "timestamps"):
            column = getattr(self, field_name)
            if column is not None and (np.ndim(column) != 1 or len(column) != nnz):
                raise DataError(
                    f"{self.name}: column '{field_name}' has shape {np.shape(column)}, "
                    f"expected ({nnz},) like 'users'"
                )
        for field_name, size in (("users", len(self.user_ids)), ("items", len(self.item_ids))):
            column = getattr(self, field_name)
            if nnz and (column.min() < 0 or column.max() >= size):
                raise DataError(
                    f"{self.name}: column '{field_name}' holds indices outside [0, {size}) "
                    f"(min {column.min()}, max {column.max()})"
                )

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

    @classmethod
    def from_raw(
        cls,
        users_raw: np.ndarray,
        items_raw: np.ndarray,
        values: np.ndarray | None = None,
        timestamps: np.ndarray | None = None,
        name: str = "interactions",
    ) -> Interactions:
        """Validate raw columns (length nnz each) and map ids to contiguous int32 indices.

        Vocabularies are the sorted unique raw ids (`np.unique`), so index order = raw-id order.
        Checks: equal lengths, at least one row, no missing id (None/NaN/NaT), integer ids are
        non-negative (float ids must be whole numbers), no NaN/inf in `values`, no missing
        timestamp. Datetime timestamps become int64 seconds since the epoch.
        Duplicate (user, item) pairs are merged into one event: value = max over the duplicates,
        timestamp = the earliest. The result is sorted by (user, item).
        Raises DataError naming the column and an offending value.
        """
        users_raw = _check_ids(users_raw, "user", name)
        items_raw = _check_ids(items_raw, "item", name)
        nnz = len(users_raw)
        if len(items_raw) != nnz:
            raise DataError(f"{name}: {nnz} user ids but {len(items_raw)} item ids")
        if nnz == 0:
            raise DataError(f"{name}: no interactions (the input has zero rows)")
        if values is not None:
            values = _check_values(values, nnz, name)
        if timestamps is not None:
            timestamps = _check_timestamps(timestamps, nnz, name)
        user_ids, users = _vocabulary(users_raw)
        item_ids, items = _vocabulary(items_raw)
        users, items, values, timestamps = _merge_duplicates(
            users, items, len(item_ids), values, timestamps
        )
        return cls(users, items, user_ids, item_ids, values, timestamps, name)

    def subset(self, keep: np.ndarray) -> Interactions:
        """The events selected by `keep` (bool mask (nnz,) or index array); same vocabularies."""
        return Interactions(
            self.users[keep],
            self.items[keep],
            self.user_ids,
            self.item_ids,
            None if self.values is None else self.values[keep],
            None if self.timestamps is None else self.timestamps[keep],
            self.name,
        )

    def compact(self) -> Interactions:
        """Drop users and items without events from the vocabularies and re-index (order kept)."""
        used_items = np.bincount(self.items, minlength=self.n_items) > 0
        return self.restrict_items(used_items)._drop_users()

    def restrict_items(self, keep_items: np.ndarray) -> Interactions:
        """Keep only the items with keep_items[i] True (bool (n_items,)): their events are kept,
        the item vocabulary shrinks to them and items are re-indexed in order. Users unchanged."""
        keep_items = np.asarray(keep_items, dtype=bool)
        if keep_items.all():
            return self
        new_index = np.cumsum(keep_items, dtype=np.int64) - 1
        kept = self.subset(keep_items[self.items])
        return Interactions(
            kept.users, new_index[kept.items].astype(np.int32), kept.user_ids,
            self.item_ids[keep_items], kept.values, kept.timestamps, self.name,
        )

    def _drop_users(self) -> Interactions:
        keep_users = np.bincount(self.users, minlength=self.n_users) > 0
        if keep_users.all():
            return self
        new_index = np.cumsum(keep_users, dtype=np.int64) - 1
        return Interactions(
            new_index[self.users].astype(np.int32), self.items, self.user_ids[keep_users],
            self.item_ids, self.values, self.timestamps, self.name,
        )


def _check_ids(raw: np.ndarray, what: str, name: str) -> np.ndarray:
    """Raw id column -> 1-D array without missing values; integer ids must be >= 0."""
    column = f"{what} ids"
    ids = np.asarray(raw)
    if ids.ndim != 1:
        raise DataError(f"{name}: {column} must be one-dimensional, got shape {ids.shape}")
    if ids.dtype.kind == "f":
        bad = ~np.isfinite(ids)
        if bad.any():
            raise DataError(f"{name}: missing {what} id ({ids[bad][0]}) at row {_first(bad)}")
        fractional = ids != np.floor(ids)
        if fractional.any():
            raise DataError(
                f"{name}: {column} must be whole numbers, got {ids[fractional][0]} "
                f"at row {_first(fractional)}"
            )
        ids = ids.astype(np.int64)
    if ids.dtype.kind == "O":
        missing = np.fromiter((v is None or v != v for v in ids), dtype=bool, count=len(ids))
        if missing.any():
            raise DataError(
                f"{name}: missing {what} id ({ids[missing][0]}) at row {_first(missing)}"
            )
        id_types = {type(v).__name__ for v in ids}
        if len(id_types) > 1:
            raise DataError(f"{name}: {column} mix incompatible types {sorted(id_types)}")
        ids = np.asarray(ids.tolist())
    if ids.dtype.kind == "b" or ids.dtype.kind not in "iuUS":
        raise DataError(
            f"{name}: {column} have unsupported dtype {ids.dtype}; use integers or strings"
        )
    if ids.dtype.kind == "i" and len(ids) and ids.min() < 0:
        negative = ids < 0
        raise DataError(
            f"{name}: {column} must be >= 0, got {ids[negative][0]} at row {_first(negative)}"
        )
    return ids


def _check_values(values: np.ndarray, nnz: int, name: str) -> np.ndarray:
    values = np.asarray(values)
    if values.shape != (nnz,):
        raise DataError(f"{name}: column 'values' has shape {values.shape}, expected ({nnz},)")
    if values.dtype.kind not in "biuf":
        raise DataError(f"{name}: column 'values' must be numeric, got dtype {values.dtype}")
    values = values.astype(np.float32)
    bad = ~np.isfinite(values)
    if bad.any():
        raise DataError(f"{name}: column 'values' holds {values[bad][0]} at row {_first(bad)}")
    return values


def _check_timestamps(timestamps: np.ndarray, nnz: int, name: str) -> np.ndarray:
    timestamps = np.asarray(timestamps)
    if timestamps.shape != (nnz,):
        raise DataError(
            f"{name}: column 'timestamps' has shape {timestamps.shape}, expected ({nnz},)"
        )
    if timestamps.dtype.kind == "M":
        missing = np.isnat(timestamps)
        if missing.any():
            raise DataError(f"{name}: missing timestamp (NaT) at row {_first(missing)}")
        return timestamps.astype("datetime64[s]").astype(np.int64)
    if timestamps.dtype.kind == "f":
        bad = ~np.isfinite(timestamps)
        if bad.any():
            raise DataError(
                f"{name}: column 'timestamps' holds {timestamps[bad][0]} at row {_first(bad)}"
            )
        return timestamps.astype(np.int64)
    if timestamps.dtype.kind not in "iu":
        raise DataError(
            f"{name}: column 'timestamps' must be integer or datetime, got dtype {timestamps.dtype}"
        )
    return timestamps.astype(np.int64)


def _vocabulary(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ids (vocabulary) and each event's int64 index into it (= np.unique with
    return_inverse; a counting pass instead of a sort when integer ids are small)."""
    if ids.dtype.kind in "iu" and int(ids.max()) <= 4 * len(ids) + 1_000_000:
        present = np.bincount(ids.astype(np.intp, copy=False), minlength=1) > 0
        index_of_id = np.cumsum(present, dtype=np.int64) - 1
        return np.flatnonzero(present).astype(ids.dtype), index_of_id[ids]
    vocabulary, index = np.unique(ids, return_inverse=True)
    return vocabulary, index.astype(np.int64).ravel()


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _merge_duplicates(
    users: np.ndarray,
    items: np.ndarray,
    n_items: int,
    values: np.ndarray | None,
    timestamps: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Sort events by (user, item) and merge repeats: value = max, timestamp = min."""
    pair_key = users * n_items + items
    if np.all(pair_key[1:] >= pair_key[:-1]):  # files sorted by (user, item) skip the sort
        order = np.arange(len(pair_key))
    else:
        order = np.argsort(pair_key, kind="stable")
        pair_key = pair_key[order]
    starts = np.flatnonzero(np.r_[True, pair_key[1:] != pair_key[:-1]])
    if values is not None:
        values = np.maximum.reduceat(values[order], starts)
    if timestamps is not None:
        timestamps = np.minimum.reduceat(timestamps[order], starts)
    unique_keys = pair_key[starts]
    return (
        (unique_keys // n_items).astype(np.int32),
        (unique_keys % n_items).astype(np.int32),
        values,
        timestamps,
    )


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
