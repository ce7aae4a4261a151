"""Interactions.from_raw validation, vocabularies, duplicate merging, subset / re-indexing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linrec.data.interactions import Interactions
from linrec.errors import DataError


def _events(inter: Interactions) -> dict[tuple, tuple]:
    """(raw user, raw item) -> (value, timestamp) of every event."""
    raw_users = inter.user_ids[inter.users].tolist()
    raw_items = inter.item_ids[inter.items].tolist()
    values = [None] * len(raw_users) if inter.values is None else inter.values.tolist()
    stamps = [None] * len(raw_users) if inter.timestamps is None else inter.timestamps.tolist()
    return {
        (u, i): (v, t) for u, i, v, t in zip(raw_users, raw_items, values, stamps, strict=False)
    }


def test_vocabularies_are_sorted_unique_ids_and_indices_map_back():
    users = np.array([30, 10, 20, 10, 30])
    items = np.array(["b", "a", "c", "c", "a"])
    inter = Interactions.from_raw(users, items, name="toy")
    np.testing.assert_array_equal(inter.user_ids, [10, 20, 30])
    np.testing.assert_array_equal(inter.item_ids, ["a", "b", "c"])
    assert inter.users.dtype == np.int32 and inter.items.dtype == np.int32
    assert set(_events(inter)) == set(zip(users.tolist(), items.tolist(), strict=False))
    assert (inter.n_users, inter.n_items, inter.n_interactions) == (3, 3, 5)
    assert inter.name == "toy"


def test_large_sparse_integer_ids_use_the_sort_path():
    users = np.array([10**12, 5, 10**12])
    inter = Interactions.from_raw(users, np.array([1, 2, 3]))
    np.testing.assert_array_equal(inter.user_ids, [5, 10**12])
    assert set(_events(inter)) == {(10**12, 1), (5, 2), (10**12, 3)}


def test_duplicates_merge_to_max_value_and_earliest_timestamp():
    users = np.array([1, 1, 1, 2, 1])
    items = np.array([7, 7, 8, 7, 7])
    values = np.array([3.0, 5.0, 1.0, 2.0, 4.0])
    stamps = np.array([50, 40, 10, 5, 60])
    inter = Interactions.from_raw(users, items, values, stamps)
    assert inter.n_interactions == 3
    assert _events(inter) == {(1, 7): (5.0, 40), (1, 8): (1.0, 10), (2, 7): (2.0, 5)}
    assert inter.values.dtype == np.float32 and inter.timestamps.dtype == np.int64


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 9), st.integers(0, 10), st.integers(0, 99)),
        min_size=1,
        max_size=60,
    )
)
def test_merge_rule_against_brute_force(rows):
    users, items, values, stamps = (np.array(col) for col in zip(*rows, strict=False))
    inter = Interactions.from_raw(users, items, values.astype(float), stamps)
    expected: dict[tuple, tuple] = {}
    for u, i, v, t in rows:
        old_v, old_t = expected.get((u, i), (-np.inf, np.inf))
        expected[(u, i)] = (max(old_v, float(v)), min(old_t, t))
    assert _events(inter) == expected
    keys = inter.users.astype(np.int64) * inter.n_items + inter.items
    assert np.all(np.diff(keys) > 0)  # sorted by (user, item), no duplicate left


def test_datetime_timestamps_become_epoch_seconds():
    stamps = np.array(["1970-01-01T00:01:40", "2000-01-01T00:00:00"], dtype="datetime64[s]")
    inter = Interactions.from_raw(np.array([0, 1]), np.array([0, 0]), timestamps=stamps)
    np.testing.assert_array_equal(inter.timestamps, [100, 946684800])


def test_whole_float_ids_are_accepted_as_integers():
    inter = Interactions.from_raw(np.array([2.0, 1.0]), np.array([0.0, 3.0]))
    np.testing.assert_array_equal(inter.user_ids, [1, 2])
    assert inter.user_ids.dtype.kind == "i"


@pytest.mark.parametrize(
    ("users", "items", "kwargs", "match"),
    [
        ([0, 1], [0], {}, "2 user ids but 1 item ids"),
        ([], [], {}, "zero rows"),
        ([0, -3], [0, 1], {}, r"user ids must be >= 0, got -3 at row 1"),
        ([0, 1], [4, -1], {}, r"item ids must be >= 0, got -1 at row 1"),
        ([0.0, np.nan], [0, 1], {}, r"missing user id \(nan\) at row 1"),
        ([0.5, 1.0], [0, 1], {}, r"user ids must be whole numbers, got 0.5"),
        (np.array(["a", None], dtype=object), [0, 1], {}, r"missing user id \(None\) at row 1"),
        (np.array([1, "a"], dtype=object), [0, 1], {}, "incompatible types"),
        ([True, False], [0, 1], {}, "unsupported dtype bool"),
        ([0, 1], [0, 1], {"values": [1.0, np.nan]}, r"'values' holds nan at row 1"),
        ([0, 1], [0, 1], {"values": [1.0, np.inf]}, r"'values' holds inf at row 1"),
        ([0, 1], [0, 1], {"values": [1.0]}, r"'values' has shape \(1,\)"),
        ([0, 1], [0, 1], {"timestamps": [1.0, np.nan]}, r"'timestamps' holds nan at row 1"),
        (
            [0, 1],
            [0, 1],
            {"timestamps": np.array(["2000-01-01", "NaT"], dtype="datetime64[s]")},
            r"missing timestamp \(NaT\) at row 1",
        ),
        ([0, 1], [0, 1], {"timestamps": ["a", "b"]}, "'timestamps' must be integer or datetime"),
    ],
)
def test_from_raw_rejects_bad_input_naming_field_and_value(users, items, kwargs, match):
    with pytest.raises(DataError, match=match) as err:
        Interactions.from_raw(np.asarray(users), np.asarray(items), name="bad.csv", **kwargs)
    assert "bad.csv" in str(err.value)


def test_constructor_rechecks_shapes_and_index_ranges():
    ids = np.arange(3)
    with pytest.raises(DataError, match="'items' has shape"):
        Interactions(np.array([0, 1], np.int32), np.array([0], np.int32), ids, ids)
    with pytest.raises(DataError, match=r"'users' holds indices outside \[0, 3\)"):
        Interactions(np.array([0, 3], np.int32), np.array([0, 1], np.int32), ids, ids)


def _toy() -> Interactions:
    users = np.array([5, 5, 6, 7, 7, 7])
    items = np.array([10, 11, 12, 10, 12, 13])
    return Interactions.from_raw(users, items, values=np.arange(6.0), timestamps=np.arange(6))


def test_subset_keeps_vocabularies_and_columns():
    inter = _toy()
    sub = inter.subset(inter.values >= 3)
    assert sub.n_users == inter.n_users and sub.n_items == inter.n_items
    assert _events(sub) == {k: v for k, v in _events(inter).items() if v[0] >= 3}


def test_compact_drops_unused_ids_and_reindexes_in_order():
    inter = _toy()
    sub = inter.subset(np.isin(inter.item_ids[inter.items], [10, 13])).compact()
    np.testing.assert_array_equal(sub.user_ids, [5, 7])
    np.testing.assert_array_equal(sub.item_ids, [10, 13])
    assert _events(sub) == {k: v for k, v in _events(inter).items() if k[1] in (10, 13)}


def test_restrict_items_keeps_users_and_selected_items():
    inter = _toy()
    keep = np.isin(inter.item_ids, [11, 12])
    sub = inter.restrict_items(keep)
    np.testing.assert_array_equal(sub.user_ids, inter.user_ids)
    np.testing.assert_array_equal(sub.item_ids, [11, 12])
    assert _events(sub) == {k: v for k, v in _events(inter).items() if k[1] in (11, 12)}


def test_to_csr_binary_and_values():
    inter = _toy()
    binary = inter.to_csr().toarray()
    weighted = inter.to_csr(binary=False).toarray()
    for (u, i), (v, _) in _events(inter).items():
        row, col = np.searchsorted(inter.user_ids, u), np.searchsorted(inter.item_ids, i)
        assert binary[row, col] == 1.0 and weighted[row, col] == v
    assert binary.sum() == inter.n_interactions
