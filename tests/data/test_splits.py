"""Split protocols: invariants, counts, order, determinism, strong generalization, predefined."""

from __future__ import annotations

import inspect
import logging
import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from linrec.data.interactions import Interactions, PredefinedSplitData
from linrec.data.splits import (
    EvalSet,
    Split,
    holdout,
    leave_one_out,
    predefined,
    strong_generalization,
)
from linrec.errors import ConfigError, DataError


def make_inter(
    seed: int, n_users: int = 120, n_items: int = 60, max_items: int = 20, min_items: int = 1
) -> Interactions:
    """Random events with distinct timestamps per user (raw ids are offset to differ from
    indices)."""
    rng = np.random.default_rng(seed)
    users, items, stamps = [], [], []
    for user in range(n_users):
        count = int(rng.integers(min_items, max_items + 1))
        users += [user + 1000] * count
        items += (rng.choice(n_items, count, replace=False) + 500).tolist()
        stamps += rng.choice(10_000, count, replace=False).tolist()
    return Interactions.from_raw(np.array(users), np.array(items), timestamps=np.array(stamps))


def rows(matrix: sp.csr_matrix) -> list[set[int]]:
    return [
        set(matrix.indices[a:b].tolist())
        for a, b in zip(matrix.indptr, matrix.indptr[1:], strict=False)
    ]


def items_by_user(inter: Interactions) -> list[set[int]]:
    return rows(inter.to_csr())


def eval_rows(eval_set: EvalSet | None, n_users: int) -> tuple[list[set], list[set]]:
    """Per user of the vocabulary: (fold-in set, target set); empty for users not evaluated."""
    foldin, targets = [set() for _ in range(n_users)], [set() for _ in range(n_users)]
    if eval_set is None:
        return foldin, targets
    for k, (f, t) in enumerate(zip(rows(eval_set.foldin), rows(eval_set.targets), strict=False)):
        foldin[eval_set.users[k]], targets[eval_set.users[k]] = f, t
    return foldin, targets


def check_eval_set_shape(eval_set: EvalSet, n_items: int) -> None:
    assert eval_set.users.dtype == np.int64
    assert np.all(np.diff(eval_set.users) > 0)  # sorted, unique
    for matrix in (eval_set.foldin, eval_set.targets):
        assert isinstance(matrix, sp.csr_matrix) and matrix.dtype == np.float32
        assert matrix.shape == (eval_set.n_users, n_items)
        assert np.all(matrix.data == 1.0)
    assert np.all(np.diff(eval_set.targets.indptr) > 0)  # every evaluated user has a target
    assert eval_set.foldin.multiply(eval_set.targets).nnz == 0  # fold-in ∩ targets = ∅


def check_weak_split(split: Split, inter: Interactions, test_foldin_includes_valid: bool) -> None:
    """Every invariant of a weak-generalization split against the user's item sets."""
    assert not split.strong
    assert split.train.shape == (inter.n_users, inter.n_items)
    np.testing.assert_array_equal(split.user_ids, inter.user_ids)
    np.testing.assert_array_equal(split.item_ids, inter.item_ids)
    train = rows(split.train)
    valid_foldin, valid_targets = eval_rows(split.valid, inter.n_users)
    test_foldin, test_targets = eval_rows(split.test, inter.n_users)
    for eval_set in (split.valid, split.test):
        if eval_set is not None:
            check_eval_set_shape(eval_set, inter.n_items)
    for u, items in enumerate(items_by_user(inter)):
        assert train[u] | valid_targets[u] | test_targets[u] == items
        assert not train[u] & test_targets[u]
        assert not train[u] & valid_targets[u]
        assert not valid_targets[u] & test_targets[u]
        if valid_targets[u]:
            assert valid_foldin[u] == train[u]
        if test_targets[u]:
            expected = train[u] | valid_targets[u] if test_foldin_includes_valid else train[u]
            assert test_foldin[u] == expected
            assert train[u]  # weak generalization: an evaluated user keeps a training row


def split_signature(split: Split) -> list[bytes]:
    parts = [split.train.indices.tobytes(), split.test.targets.indices.tobytes()]
    if split.valid is not None:
        parts.append(split.valid.targets.indices.tobytes())
    return parts


# --- leave-one-out ---------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["random", "latest"])
@pytest.mark.parametrize("valid", [True, False])
@pytest.mark.parametrize("flag", [True, False])
def test_leave_one_out_invariants(order, valid, flag):
    inter = make_inter(0)
    split = leave_one_out(inter, seed=3, order=order, valid=valid, test_foldin_includes_valid=flag)
    check_weak_split(split, inter, flag)
    counts = np.bincount(inter.users, minlength=inter.n_users)
    eligible = np.flatnonzero(counts >= (3 if valid else 2))
    np.testing.assert_array_equal(split.test.users, eligible)
    assert split.test.targets.nnz == len(eligible)  # exactly one test item each
    if valid:
        np.testing.assert_array_equal(split.valid.users, eligible)
        assert split.valid.targets.nnz == len(eligible)
    else:
        assert split.valid is None
    assert split.train.nnz == inter.n_interactions - len(eligible) * (2 if valid else 1)


def test_leave_one_out_latest_holds_out_the_newest_events():
    inter = make_inter(1)
    split = leave_one_out(inter, seed=0, order="latest", valid=True)
    stamp = {(u, i): t for u, i, t in zip(inter.users, inter.items, inter.timestamps, strict=False)}
    _, valid_targets = eval_rows(split.valid, inter.n_users)
    _, test_targets = eval_rows(split.test, inter.n_users)
    for u, items in enumerate(items_by_user(inter)):
        if not test_targets[u]:
            continue
        newest_first = sorted(items, key=lambda i: -stamp[(u, i)])
        assert test_targets[u] == {newest_first[0]}
        assert valid_targets[u] == {newest_first[1]}


def test_leave_one_out_latest_breaks_timestamp_ties_at_random_but_seeded():
    n_users = 400
    users = np.repeat(np.arange(n_users), 4)
    items = np.tile(np.arange(4), n_users)
    stamps = np.tile([1, 5, 5, 5], n_users)  # three events tie for latest
    inter = Interactions.from_raw(users, items, timestamps=stamps)
    split = leave_one_out(inter, seed=7, order="latest", valid=False)
    chosen = split.test.targets.indices
    assert set(chosen.tolist()) == {1, 2, 3}
    assert np.bincount(chosen, minlength=4)[1:].min() > n_users / 3 - 50
    again = leave_one_out(inter, seed=7, order="latest", valid=False)
    np.testing.assert_array_equal(again.test.targets.indices, chosen)


def test_leave_one_out_is_seeded():
    inter = make_inter(2)
    a, b = leave_one_out(inter, seed=11), leave_one_out(inter, seed=11)
    c = leave_one_out(inter, seed=12)
    assert split_signature(a) == split_signature(b)
    assert split_signature(a) != split_signature(c)


def test_random_targets_are_uniform_within_a_user():
    n_users = 3000
    users = np.repeat(np.arange(n_users), 5)
    items = np.tile(np.arange(5), n_users)
    split = leave_one_out(Interactions.from_raw(users, items), seed=5, valid=False)
    freq = np.bincount(split.test.targets.indices, minlength=5) / n_users
    # binomial sd = sqrt(0.2 * 0.8 / 3000) = 0.0073; 5 sd tolerance
    np.testing.assert_allclose(freq, 0.2, atol=0.037)


def test_leave_one_out_errors():
    single = Interactions.from_raw(np.array([0, 1]), np.array([0, 0]))
    with pytest.raises(DataError, match="no user of .* has valid targets"):
        leave_one_out(single, seed=0)
    with pytest.raises(ConfigError, match=r"split.order='temporal' is not allowed; "
                                          r"allowed: \['random', 'latest'\]"):
        leave_one_out(make_inter(0), seed=0, order="temporal")
    with pytest.raises(ConfigError, match="split.valid='no' is not a flag; allowed: true or false"):
        leave_one_out(make_inter(0), seed=0, valid="no")
    no_time = Interactions.from_raw(np.array([0, 0, 0]), np.array([0, 1, 2]))
    with pytest.raises(DataError, match="temporal order needs timestamps"):
        leave_one_out(no_time, seed=0, order="latest")


def test_users_without_targets_are_logged(caplog):
    inter = make_inter(0)  # some users have 1 or 2 items
    with caplog.at_level(logging.INFO, logger="linrec.data.splits"):
        split = leave_one_out(inter, seed=0)
    n_short = int((np.bincount(inter.users) < 3).sum())
    assert n_short > 0
    assert f"{n_short} of {inter.n_users} users are not evaluated" in caplog.text
    assert split.test.n_users == inter.n_users - n_short


# --- holdout ---------------------------------------------------------------------------------


def expected_holdout_counts(n: int, test_fraction: float, valid_fraction: float):
    """The documented per-user rule, written out per user."""
    if n < 2:
        return 0, 0
    n_test = min(max(math.floor(test_fraction * n + 0.5), 1), n - 1)
    n_valid = math.floor(valid_fraction * n + 0.5)
    if valid_fraction > 0:
        n_valid = max(n_valid, 1)
    return n_test, min(n_valid, n - 1 - n_test)


@pytest.mark.parametrize("order", ["random", "temporal"])
@pytest.mark.parametrize(("test_fraction", "valid_fraction"), [(0.2, 0.0), (0.3, 0.1), (0.5, 0.2)])
def test_holdout_invariants_and_counts(order, test_fraction, valid_fraction):
    inter = make_inter(4, max_items=25)
    split = holdout(inter, test_fraction, valid_fraction, order=order, seed=1)
    check_weak_split(split, inter, test_foldin_includes_valid=True)
    _, valid_targets = eval_rows(split.valid, inter.n_users)
    _, test_targets = eval_rows(split.test, inter.n_users)
    for u, items in enumerate(items_by_user(inter)):
        n_test, n_valid = expected_holdout_counts(len(items), test_fraction, valid_fraction)
        assert (len(test_targets[u]), len(valid_targets[u])) == (n_test, n_valid)
    assert (split.valid is None) == (valid_fraction == 0)


def test_both_weak_splits_order_by_time_with_the_same_name():
    """order=latest holds out each user's latest items in holdout as in leave-one-out; the
    holdout's earlier name, temporal, reads the same."""
    from linrec.data.configs import HoldoutSplit

    assert HoldoutSplit(order="temporal").order == "latest"
    inter = make_inter(0)
    a, b = holdout(inter, 0.3, 0.2, order="latest", seed=0), \
        holdout(inter, 0.3, 0.2, order="temporal", seed=0)
    assert (a.test.targets != b.test.targets).nnz == 0 and (a.train != b.train).nnz == 0


def test_holdout_temporal_targets_are_the_latest():
    inter = make_inter(5, max_items=25)
    split = holdout(inter, 0.3, 0.2, order="temporal", seed=0)
    stamp = {(u, i): t for u, i, t in zip(inter.users, inter.items, inter.timestamps, strict=False)}
    train = rows(split.train)
    _, valid_targets = eval_rows(split.valid, inter.n_users)
    _, test_targets = eval_rows(split.test, inter.n_users)
    for u in range(inter.n_users):
        times = [
            [stamp[(u, i)] for i in part] for part in (train[u], valid_targets[u], test_targets[u])
        ]
        non_empty = [t for t in times if t]
        for earlier, later in zip(non_empty, non_empty[1:], strict=False):
            assert max(earlier) < min(later)


def test_holdout_is_seeded_and_single_item_users_stay_in_train():
    inter = make_inter(6)
    a, b = holdout(inter, 0.2, 0.1, seed=3), holdout(inter, 0.2, 0.1, seed=3)
    c = holdout(inter, 0.2, 0.1, seed=4)
    assert split_signature(a) == split_signature(b)
    assert split_signature(a) != split_signature(c)
    singles = np.flatnonzero(np.bincount(inter.users) == 1)
    assert len(singles) and not np.isin(singles, a.test.users).any()
    assert np.all(np.diff(a.train.indptr)[singles] == 1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"test_fraction": 0.0},
         r"split.test_fraction=0.0 is out of range; allowed: a number > 0 and < 1"),
        ({"test_fraction": 1.0}, r"split.test_fraction=1.0 is out of range"),
        ({"valid_fraction": -0.1},
         r"split.valid_fraction=-0.1 is out of range; allowed: a number >= 0 and < 1"),
        ({"test_fraction": 0.6, "valid_fraction": 0.4}, "must be < 1"),
        ({"order": "newest"},
         r"split.order='newest' is not allowed; allowed: \['random', 'latest', 'temporal'\]"),
        # mistyped fractions were a TypeError traceback
        ({"test_fraction": "abc"}, r"split.test_fraction='abc' is not a finite number"),
        ({"valid_fraction": True}, r"split.valid_fraction=True is not a finite number"),
    ],
)
def test_holdout_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        holdout(make_inter(0), **kwargs)


# --- strong generalization -------------------------------------------------------------------


def test_strong_generalization_follows_the_vae_cf_protocol(caplog):
    base = make_inter(7, n_users=300, n_items=400, max_items=30, min_items=3)
    # plus one private item per user (raw id 9000 + user): held-out users' ones leave the vocab
    raw_users = np.r_[base.user_ids[base.users], base.user_ids]
    raw_items = np.r_[base.item_ids[base.items], 9000 + np.arange(base.n_users)]
    inter = Interactions.from_raw(raw_users, raw_items)
    n_valid, n_test = 40, 50
    with caplog.at_level(logging.INFO, logger="linrec.data.splits"):
        split = strong_generalization(inter, n_valid_users=n_valid, n_test_users=n_test)
    assert split.strong
    np.testing.assert_array_equal(split.user_ids, inter.user_ids)

    # the protocol written out: shuffle with the seed, the last n_valid + n_test are held out
    permutation = np.random.default_rng(98765).permutation(inter.n_users)
    n_train = inter.n_users - n_valid - n_test
    groups = {
        "train": set(permutation[:n_train].tolist()),
        "valid": set(permutation[n_train : n_train + n_valid].tolist()),
        "test": set(permutation[n_train + n_valid :].tolist()),
    }
    train = rows(split.train)
    assert split.train.shape[0] == inter.n_users
    assert {u for u in range(inter.n_users) if train[u]} == groups["train"]

    raw_items_of = [set(inter.item_ids[list(s)].tolist()) for s in items_by_user(inter)]
    train_raw_items = set().union(*(raw_items_of[u] for u in groups["train"]))
    assert set(split.item_ids.tolist()) == train_raw_items
    assert split.train.shape[1] == len(train_raw_items) == inter.n_items - n_valid - n_test
    for u in groups["train"]:
        assert {split.item_ids[i] for i in train[u]} == raw_items_of[u]

    for label, eval_set in (("valid", split.valid), ("test", split.test)):
        check_eval_set_shape(eval_set, split.n_items)
        kept = {u: raw_items_of[u] & train_raw_items for u in groups[label]}
        evaluable = sorted(u for u in groups[label] if len(kept[u]) >= 5)
        np.testing.assert_array_equal(eval_set.users, evaluable)
        foldin, targets = eval_rows(eval_set, inter.n_users)
        for u in evaluable:
            assert {split.item_ids[i] for i in foldin[u] | targets[u]} == kept[u]
            assert len(targets[u]) == math.floor(0.2 * len(kept[u]))  # notebook: int(0.2 n)
        n_group = len(groups[label])
        if len(evaluable) < n_group:
            assert f"{label} split: {n_group - len(evaluable)} of {n_group} users" in caplog.text
    assert split.valid.n_users < n_valid or split.test.n_users < n_test  # the short case ran


def test_strong_generalization_group_sizes_are_exact():
    inter = make_inter(8, n_users=200, n_items=40, max_items=30, min_items=12)
    split = strong_generalization(inter, n_valid_users=30, n_test_users=45, test_prop=0.25)
    # every held-out user keeps >= 5 items here, so the EvalSets hold every held-out user
    assert split.valid.n_users == 30 and split.test.n_users == 45
    assert (np.diff(split.train.indptr) > 0).sum() == 200 - 75
    ratio = split.test.targets.nnz / (split.test.targets.nnz + split.test.foldin.nnz)
    assert 0.2 < ratio <= 0.25


def test_strong_generalization_defaults_and_seed():
    params = inspect.signature(strong_generalization).parameters
    assert params["seed"].default == 98765 and params["test_prop"].default == 0.2
    assert params["min_heldout_items"].default == 5
    inter = make_inter(9, n_users=150, min_items=5)
    a = strong_generalization(inter, 20, 20)
    b = strong_generalization(inter, 20, 20, seed=98765)
    c = strong_generalization(inter, 20, 20, seed=1)
    assert split_signature(a) == split_signature(b)
    np.testing.assert_array_equal(a.test.users, b.test.users)
    assert not np.array_equal(a.test.users, c.test.users)
    assert strong_generalization(inter, 0, 20).valid is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_valid_users": 100, "n_test_users": 100}, "leaves no training user"),
        ({"n_valid_users": -1, "n_test_users": 10},
         "split.n_valid_users=-1 is out of range; allowed: an integer >= 0"),
        ({"n_valid_users": 1, "n_test_users": 0},
         "split.n_test_users=0 is out of range; allowed: an integer >= 1"),
        ({"n_valid_users": 1, "n_test_users": 1, "test_prop": 1.5}, "split.test_prop"),
        ({"n_valid_users": 1, "n_test_users": 1, "test_prop": "abc"},
         r"split.test_prop='abc' is not a finite number"),
    ],
)
def test_strong_generalization_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        strong_generalization(make_inter(0, n_users=150), **kwargs)


def test_strong_generalization_without_evaluable_users_raises():
    inter = make_inter(0, n_users=50, max_items=4)  # nobody reaches 5 items
    with pytest.raises(DataError, match="no user .* has valid targets"):
        strong_generalization(inter, 5, 5)


# --- predefined ------------------------------------------------------------------------------


def _file(users: list[int], items: list[int], name: str) -> Interactions:
    return Interactions.from_raw(np.array(users), np.array(items), name=name)


def test_predefined_uses_the_files_as_given(caplog):
    train = _file([0, 0, 1, 1, 2, 5], [0, 1, 1, 2, 3, 0], "train.txt")
    test = _file([0, 1, 3, 2, 2], [2, 6, 1, 3, 0], "test.txt")  # user 3: no train
    negative_users = np.array([3, 2, 1, 0])
    negatives = np.array([[30, 31], [20, 21], [10, 11], [0, 1]]) % 7
    data = PredefinedSplitData(train, test, negatives, negative_users, name="toy")
    with caplog.at_level(logging.INFO, logger="linrec.data.splits"):
        split = predefined(data)
    assert split.train.shape == (6, 7)  # max id + 1 over both files
    np.testing.assert_array_equal(split.user_ids, np.arange(6))
    assert rows(split.train) == [{0, 1}, {1, 2}, {3}, set(), set(), {0}]
    check_eval_set_shape(split.test, 7)
    np.testing.assert_array_equal(split.test.users, [0, 1, 2])  # user 3 has no train row
    assert rows(split.test.targets) == [{2}, {6}, {0}]  # (2, 3) is already in train
    assert rows(split.test.foldin) == [{0, 1}, {1, 2}, {3}]
    np.testing.assert_array_equal(split.test.negatives, [[0, 1], [3, 4], [6, 0]])
    assert split.test.negatives.dtype == np.int64
    assert split.valid is None
    assert "1 test pairs are already in train" in caplog.text
    assert "1 of 4 users are not evaluated" in caplog.text


def test_predefined_validation_comes_from_train_rows():
    inter = make_inter(10, n_users=60, n_items=30)
    raw_users = inter.users.astype(np.int64)
    raw_items = inter.items.astype(np.int64)
    is_test = np.random.default_rng(0).random(inter.n_interactions) < 0.2
    train = Interactions.from_raw(raw_users[~is_test], raw_items[~is_test], name="train")
    test = Interactions.from_raw(raw_users[is_test], raw_items[is_test], name="test")
    split = predefined(PredefinedSplitData(train, test), valid_fraction=0.25, seed=2)
    train_file = rows(
        Interactions(
            raw_users[~is_test].astype(np.int32),
            raw_items[~is_test].astype(np.int32),
            np.arange(split.train.shape[0]),
            np.arange(split.n_items),
        ).to_csr()
    )
    fitted = rows(split.train)
    valid_foldin, valid_targets = eval_rows(split.valid, len(fitted))
    test_foldin, test_targets = eval_rows(split.test, len(fitted))
    check_eval_set_shape(split.valid, split.n_items)
    for u in range(len(fitted)):
        assert fitted[u] | valid_targets[u] == train_file[u]
        assert not fitted[u] & valid_targets[u]
        n_valid, _ = expected_holdout_counts(len(train_file[u]), 0.25, 0.0)
        assert len(valid_targets[u]) == n_valid
        if valid_targets[u]:
            assert valid_foldin[u] == fitted[u]
        if test_targets[u]:
            assert test_foldin[u] == train_file[u]  # the validation items are fold-in at test
    a = predefined(PredefinedSplitData(train, test), valid_fraction=0.25, seed=2)
    assert split_signature(a) == split_signature(split)


def test_predefined_errors():
    train = _file([0, 1], [0, 1], "train")
    test = _file([0, 1], [1, 0], "test")
    with pytest.raises(DataError, match="user 1 has no negatives row"):
        predefined(PredefinedSplitData(train, test, np.array([[1]]), np.array([0])))
    with pytest.raises(DataError, match="user 0 has several negatives rows"):
        predefined(PredefinedSplitData(train, test, np.array([[1], [1], [0]]), np.array([0, 0, 1])))
    with pytest.raises(DataError, match=r"negative item ids must be in \[0, 2\)"):
        predefined(PredefinedSplitData(train, test, np.array([[5], [1]]), np.array([0, 1])))
    strings = Interactions.from_raw(np.array(["a"]), np.array([0]))
    with pytest.raises(DataError, match="train user ids must be integers >= 0"):
        predefined(PredefinedSplitData(strings, test))
    overlapping = _file([0, 1], [0, 1], "test")
    with pytest.raises(DataError, match="no user of 'test' has test targets"):
        predefined(PredefinedSplitData(train, overlapping))


def vae_cf_notebook_split(raw: pd.DataFrame, n_heldout_users: int, seed: int = 98765):
    """The VAE-CF notebook's preprocessing after filtering, transcribed (np.random.seed(s)
    followed by np.random.* calls is the stream of RandomState(s))."""

    def split_train_test_proportion(data, test_prop=0.2):
        tr_list, te_list = [], []
        legacy = np.random.RandomState(seed)
        for _, group in data.groupby("userId"):
            n_items_u = len(group)
            if n_items_u >= 5:
                idx = np.zeros(n_items_u, dtype="bool")
                size = int(test_prop * n_items_u)
                idx[legacy.choice(n_items_u, size=size, replace=False).astype("int64")] = True
                tr_list.append(group[np.logical_not(idx)])
                te_list.append(group[idx])
            else:
                tr_list.append(group)
        return pd.concat(tr_list), pd.concat(te_list)

    unique_uid = raw.groupby("userId").size().index
    idx_perm = np.random.RandomState(seed).permutation(unique_uid.size)
    unique_uid = unique_uid[idx_perm]
    n_users = unique_uid.size
    tr_users = unique_uid[: (n_users - n_heldout_users * 2)]
    vd_users = unique_uid[(n_users - n_heldout_users * 2) : (n_users - n_heldout_users)]
    te_users = unique_uid[(n_users - n_heldout_users) :]
    train_plays = raw.loc[raw["userId"].isin(tr_users)]
    unique_sid = pd.unique(train_plays["movieId"])
    parts = {"train": train_plays}
    for label, users in (("valid", vd_users), ("test", te_users)):
        plays = raw.loc[raw["userId"].isin(users)]
        plays = plays.loc[plays["movieId"].isin(unique_sid)]
        parts[f"{label}_foldin"], parts[f"{label}_targets"] = split_train_test_proportion(plays)
    return {k: set(zip(v["userId"], v["movieId"], strict=True)) for k, v in parts.items()}


def test_strong_generalization_replays_the_vae_cf_notebook_exactly():
    base = make_inter(11, n_users=200, n_items=300, max_items=25, min_items=2)
    raw = pd.DataFrame(
        {"userId": base.user_ids[base.users], "movieId": base.item_ids[base.items]}
    ).sort_values(["userId", "movieId"])  # ML-20M ratings.csv order
    expected = vae_cf_notebook_split(raw, n_heldout_users=30)
    split = strong_generalization(
        base, n_valid_users=30, n_test_users=30, rng_stream="vae_cf_notebook"
    )

    def raw_pairs(users, matrix):
        coo = matrix.tocoo()
        return set(
            zip(
                split.user_ids[users[coo.row]].tolist(),
                split.item_ids[coo.col].tolist(),
                strict=True,
            )
        )

    assert raw_pairs(np.arange(split.train.shape[0]), split.train) == expected["train"]
    for label in ("valid", "test"):
        eval_set = getattr(split, label)
        assert raw_pairs(eval_set.users, eval_set.targets) == expected[f"{label}_targets"]
        # the notebook keeps users below 5 items in the fold-in part; linrec drops them
        evaluated = set(split.user_ids[eval_set.users].tolist())
        expected_foldin = {p for p in expected[f"{label}_foldin"] if p[0] in evaluated}
        assert raw_pairs(eval_set.users, eval_set.foldin) == expected_foldin
        assert evaluated == {u for u, _ in expected[f"{label}_targets"]}
