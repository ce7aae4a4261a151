"""Split protocols -> Split(train, valid, test) of EvalSet(users, foldin, targets).

Protocols (all vectorised, all seeded through `numpy.random.default_rng(seed)`):
- `leave_one_out`: one test (and optionally one validation) item per user, weak generalization.
- `holdout`: a per-user fraction of the items as targets, weak generalization.
- `strong_generalization`: Liang et al. 2018 (VAE-CF): held-out users, 80/20 fold-in/targets.
- `predefined`: a dataset's published train/test files (+ optional validation from train).
An evaluated user always has at least one target; users left without targets are left out of the
EvalSet with a log line, and a split without any evaluable user raises DataError.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from linrec.data.interactions import Interactions, PredefinedSplitData
from linrec.errors import ConfigError, DataError
from linrec.params import check_bool, check_choice, check_int, check_real, check_seed

log = logging.getLogger(__name__)

RandomSeed = int | np.random.Generator


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


# ---------------------------------------------------------------------------------------------
# protocols


def leave_one_out(
    inter: Interactions,
    seed: RandomSeed = 12345,
    order: str = "random",
    valid: bool = True,
    test_foldin_includes_valid: bool = True,
) -> Split:
    """One test item per user (plus one validation item when `valid`), the rest train.

    order="random": the held-out items are drawn uniformly (Li et al. 2020, §2.1);
    order="latest": the test item is the user's latest event and the validation item the one
    before it (timestamp ties broken by a seeded random key).
    Users with fewer than 2 items (3 when `valid`) keep all their items in train and are not
    evaluated. Weak generalization: valid.foldin = the user's train row; test.foldin = the train
    row plus the validation item when `test_foldin_includes_valid` (default: the validation item
    is known at test time, so it is input and masked, not a candidate).
    """
    check_choice(order, "split.order", ("random", "latest"))
    check_bool(valid, "split.valid")
    check_bool(test_foldin_includes_valid, "split.test_foldin_includes_valid")
    counts = np.bincount(inter.users, minlength=inter.n_users)
    eligible = counts >= (3 if valid else 2)
    n_test = eligible.astype(np.int64)
    n_valid = n_test if valid else np.zeros_like(n_test)
    rng = np.random.default_rng(seed)
    return _weak_split(inter, n_test, n_valid, order == "latest", rng, valid,
                       test_foldin_includes_valid, "leave_one_out")


def holdout(
    inter: Interactions,
    test_fraction: float = 0.2,
    valid_fraction: float = 0.0,
    order: str = "random",
    seed: RandomSeed = 12345,
    test_foldin_includes_valid: bool = True,
) -> Split:
    """A per-user fraction of each user's items is held out; the rest trains.

    A user with n >= 2 items gets n_test = round(test_fraction * n) test items (half up),
    clipped to [1, n - 1], and n_valid = round(valid_fraction * n) validation items, clipped to
    [1 if valid_fraction > 0 else 0, n - 1 - n_test]; at least one item stays in train. Users with
    a single item stay in train only. order="random" draws the targets uniformly;
    order="latest" holds out the latest n_test items for test and the n_valid before them for
    validation ("temporal", its earlier name, too). Fold-in rules as in `leave_one_out`.
    """
    check_choice(order, "split.order", ("random", "latest", "temporal"))
    check_bool(test_foldin_includes_valid, "split.test_foldin_includes_valid")
    check_real(test_fraction, "split.test_fraction", gt=0, lt=1)
    check_real(valid_fraction, "split.valid_fraction", ge=0, lt=1)
    if test_fraction + valid_fraction >= 1:
        raise ConfigError(
            f"split.test_fraction + split.valid_fraction must be < 1, got "
            f"{test_fraction} + {valid_fraction}"
        )
    counts = np.bincount(inter.users, minlength=inter.n_users)
    n_test, n_valid = _holdout_counts(counts, test_fraction, valid_fraction)
    rng = np.random.default_rng(seed)
    return _weak_split(inter, n_test, n_valid, order != "random", rng, valid_fraction > 0,
                       test_foldin_includes_valid, "holdout")


def strong_generalization(
    inter: Interactions,
    n_valid_users: int,
    n_test_users: int,
    test_prop: float = 0.2,
    seed: RandomSeed = 98765,
    min_heldout_items: int = 5,
    rng_stream: str = "generator",
) -> Split:
    """Strong generalization of Liang et al. 2018 (VAE-CF notebook; Liang et al. 2018).

    Users are shuffled with the seeded generator; the last n_valid_users + n_test_users of the
    permutation are held out (validation, then test, as in the notebook), the rest train.
    The item vocabulary is the items of the training users only; held-out events on other items
    are dropped and items are re-indexed. Each held-out user with n >= min_heldout_items
    remaining items gets floor(test_prop * n) random targets, the rest is fold-in; a held-out
    user with fewer items has no targets (the notebook puts all of them in the fold-in part) and
    is left out of the EvalSet (logged). `train` has one row per user of `inter`; held-out rows
    are empty. EvalSet.users are rows of that user vocabulary.

    rng_stream="generator" (default): one `numpy.random.default_rng(seed)` stream, vectorised.
    rng_stream="vae_cf_notebook": replays the notebook's legacy `np.random.seed(seed)` calls
    (a `RandomState(seed)` permutation of the users; then, for validation and again for test,
    a fresh `RandomState(seed)` and one `choice(n, int(test_prop * n), replace=False)` per user
    in raw-id order over the user's events in raw item-id order). It reproduces the notebook's
    split exactly when the raw file lists each user's events by item id (ML-20M ratings.csv);
    it loops over held-out users in Python (about 1 s per 20k users), the one exception to the
    vectorised rule, kept for exact replication.
    """
    check_int(n_valid_users, "split.n_valid_users", ge=0)
    check_int(n_test_users, "split.n_test_users", ge=1)
    check_int(min_heldout_items, "split.min_heldout_items", ge=1)
    check_real(test_prop, "split.test_prop", gt=0, lt=1)
    check_choice(rng_stream, "split.rng_stream", ("generator", "vae_cf_notebook"))
    notebook = rng_stream == "vae_cf_notebook"
    if notebook:
        check_seed(seed, "split.seed")  # RandomState needs the integer seed itself
    n_train_users = inter.n_users - n_valid_users - n_test_users
    if n_train_users < 1:
        raise ConfigError(
            f"split.n_valid_users + split.n_test_users = {n_valid_users + n_test_users} leaves no "
            f"training user among {inter.n_users} users; lower them"
        )
    rng = np.random.default_rng(seed)
    if notebook:
        permutation = np.random.RandomState(seed).permutation(inter.n_users)
    else:
        permutation = rng.permutation(inter.n_users)
    group = np.zeros(inter.n_users, dtype=np.int8)  # 0 train, 1 valid, 2 test
    group[permutation[n_train_users:n_train_users + n_valid_users]] = 1
    group[permutation[n_train_users + n_valid_users:]] = 2
    train_items = np.bincount(inter.items[group[inter.users] == 0], minlength=inter.n_items) > 0
    inter = inter.restrict_items(train_items)
    event_group = group[inter.users]

    counts = np.bincount(inter.users, minlength=inter.n_users)
    # notebook: int(test_prop * n) targets when n >= 5, none otherwise
    n_targets = np.where(counts >= min_heldout_items, np.floor(test_prop * counts), 0)
    n_targets = np.where(group > 0, n_targets, 0).astype(np.int64)
    if notebook:
        drawn = (group > 0) & (counts >= min_heldout_items)
        is_target = _notebook_targets(inter, group, drawn, n_targets, seed)
    else:
        pos_from_end, _ = _positions_from_end(inter, False, rng)
        is_target = pos_from_end < n_targets[inter.users]
    train = inter.subset(event_group == 0).to_csr()
    foldin_all = inter.subset((event_group > 0) & ~is_target).to_csr()
    eval_sets = []
    for group_id, label, n_group in ((1, "valid", n_valid_users), (2, "test", n_test_users)):
        if n_group == 0:
            eval_sets.append(None)
            continue
        targets = inter.subset(is_target & (event_group == group_id))
        eval_set = _eval_set(foldin_all, targets, label, "strong_generalization")
        _log_dropped(n_group, eval_set.n_users, label,
                     f"have < {min_heldout_items} items (or no target at test_prop={test_prop}) "
                     "after dropping items unseen in training")
        eval_sets.append(eval_set)
    return Split(train, eval_sets[0], eval_sets[1], strong=True,
                 user_ids=inter.user_ids, item_ids=inter.item_ids)


def predefined(
    data: PredefinedSplitData,
    valid_fraction: float = 0.0,
    seed: RandomSeed = 12345,
    test_foldin_includes_valid: bool = True,
) -> Split:
    """The published train file trains and the published test file is the test split.

    Raw ids must be integers >= 0 (identity vocabularies): n_users / n_items = max id + 1 over
    both files. Test users without a train row are left out of the test EvalSet (logged), as are
    test pairs already present in train. Fold-in = the user's train row (weak generalization).
    valid_fraction > 0 holds out a random per-user fraction of the train rows (rules of
    `holdout`) as validation targets; those items leave `Split.train` and, when
    `test_foldin_includes_valid`, stay in the test fold-in. `test_negatives` become
    `test.negatives`, aligned to `test.users` (one negatives row per test user required).
    """
    check_real(valid_fraction, "split.valid_fraction", ge=0, lt=1)
    check_bool(test_foldin_includes_valid, "split.test_foldin_includes_valid")
    train_users, train_items = _raw_int_ids(data.train, "train")
    test_users, test_items = _raw_int_ids(data.test, "test")
    n_users = int(max(train_users.max(), test_users.max())) + 1
    n_items = int(max(train_items.max(), test_items.max())) + 1
    user_ids, item_ids = np.arange(n_users), np.arange(n_items)
    train_inter = Interactions(train_users, train_items, user_ids, item_ids, name=data.train.name)
    test_inter = Interactions(test_users, test_items, user_ids, item_ids, name=data.test.name)

    full_train = train_inter.to_csr()
    valid = None
    train = full_train
    if valid_fraction > 0:
        counts = np.bincount(train_inter.users, minlength=n_users)
        n_valid, _ = _holdout_counts(counts, valid_fraction, 0.0)
        rng = np.random.default_rng(seed)
        pos_from_end, _ = _positions_from_end(train_inter, False, rng)
        is_valid = pos_from_end < n_valid[train_inter.users]
        train = train_inter.subset(~is_valid).to_csr()
        valid = _eval_set(train, train_inter.subset(is_valid), "valid", "predefined")

    has_train_row = np.diff(full_train.indptr)[test_inter.users] > 0
    in_train = np.isin(_pair_keys(test_inter), _pair_keys(train_inter))
    if in_train.any():
        log.warning("predefined %s: %d test pairs are already in train; they are not targets",
                    data.name, int(in_train.sum()))
    test_foldin = full_train if test_foldin_includes_valid else train
    test = _eval_set(test_foldin, test_inter.subset(has_train_row & ~in_train), "test",
                     "predefined")
    _log_dropped(len(np.unique(test_inter.users)), test.n_users, "test",
                 "have no train row, or only test items that are already in train")
    if data.test_negatives is not None:
        test = dataclasses.replace(test, negatives=_align_negatives(data, test.users, n_items))
    return Split(train, valid, test, strong=False, user_ids=user_ids, item_ids=item_ids)


# ---------------------------------------------------------------------------------------------
# shared machinery


def _weak_split(
    inter: Interactions,
    n_test: np.ndarray,
    n_valid: np.ndarray,
    temporal: bool,
    rng: np.random.Generator,
    with_valid: bool,
    test_foldin_includes_valid: bool,
    protocol: str,
) -> Split:
    """Hold out, per user u, the last n_test[u] events (in random or time order) for test and
    the n_valid[u] before them for validation; the rest is train (weak generalization)."""
    pos_from_end, _ = _positions_from_end(inter, temporal, rng)
    test_cut = n_test[inter.users]
    is_test = pos_from_end < test_cut
    is_valid = ~is_test & (pos_from_end < test_cut + n_valid[inter.users])
    train = inter.subset(~is_test & ~is_valid).to_csr()
    valid = None
    if with_valid:
        valid = _eval_set(train, inter.subset(is_valid), "valid", protocol)
    test_foldin = inter.subset(~is_test).to_csr() if test_foldin_includes_valid else train
    test = _eval_set(test_foldin, inter.subset(is_test), "test", protocol)
    n_active = int((np.bincount(inter.users, minlength=inter.n_users) > 0).sum())
    for label, eval_set in (("valid", valid), ("test", test)):
        if eval_set is not None:
            _log_dropped(n_active, eval_set.n_users, label, "have too few items to hold one out")
    return Split(train, valid, test, strong=False, user_ids=inter.user_ids,
                 item_ids=inter.item_ids)


def _positions_from_end(
    inter: Interactions, temporal: bool, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Order each user's events (uniformly at random, or by timestamp with random tie-break)
    and return each event's 0-based position from the end of its user's sequence (0 = last,
    i.e. latest), int64 (nnz,), and the per-user counts, int64 (n_users,)."""
    order = _sort_within_users(inter, temporal, rng)
    counts = np.bincount(inter.users, minlength=inter.n_users)
    user_ends = np.cumsum(counts)
    sorted_users = inter.users[order]
    pos_from_end = np.empty(inter.n_interactions, dtype=np.int64)
    pos_from_end[order] = user_ends[sorted_users] - 1 - np.arange(inter.n_interactions)
    return pos_from_end, counts


def _sort_within_users(
    inter: Interactions, temporal: bool, rng: np.random.Generator
) -> np.ndarray:
    """Permutation (nnz,) grouping events by user; within a user the order is uniformly random,
    or by timestamp with ties in uniformly random order.

    Two stable argsorts of packed int64 keys (np.lexsort is ~7x slower on 20M rows): first by
    (user, timestamp) into tie groups, then by (tie group, 32 random bits). Both inputs are
    nearly sorted (from_raw sorts by user), which the stable sort exploits."""
    if temporal:
        if inter.timestamps is None:
            raise DataError(
                f"{inter.name}: temporal order needs timestamps but the source gave none; "
                "use order=random"
            )
        time_key = inter.timestamps - inter.timestamps.min()
        time_bits = int(time_key.max()).bit_length()
        if inter.n_users.bit_length() + time_bits > 63:  # huge time range: rank the times
            time_key = np.unique(time_key, return_inverse=True)[1].ravel().astype(np.int64)
            time_bits = int(time_key.max()).bit_length()
        by_time = np.argsort((inter.users.astype(np.int64) << time_bits) | time_key,
                             kind="stable")
        group_key = (inter.users[by_time].astype(np.int64) << time_bits) | time_key[by_time]
        new_group = np.empty(len(group_key), dtype=bool)
        new_group[:1] = True
        np.not_equal(group_key[1:], group_key[:-1], out=new_group[1:])
        tie_group = np.cumsum(new_group, dtype=np.int64) - 1
    else:
        by_time, tie_group = None, inter.users.astype(np.int64)
    random_key = rng.integers(0, 1 << 32, size=inter.n_interactions, dtype=np.int64)
    order = np.argsort((tie_group << 32) | random_key, kind="stable")
    return order if by_time is None else by_time[order]


def _notebook_targets(
    inter: Interactions, group: np.ndarray, drawn: np.ndarray, n_targets: np.ndarray, seed: int
) -> np.ndarray:
    """Target mask (nnz,) drawn as the VAE-CF notebook's split_train_test_proportion does:
    per group (valid, test) a fresh RandomState(seed), users in index (= raw id) order, and
    choice(n, n_targets, replace=False) over the user's events in item order."""
    order = np.argsort(_pair_keys(inter), kind="stable")
    starts = np.r_[0, np.cumsum(np.bincount(inter.users, minlength=inter.n_users))]
    is_target = np.zeros(inter.n_interactions, dtype=bool)
    for group_id in (1, 2):
        legacy = np.random.RandomState(seed)
        for user in np.flatnonzero(group == group_id):
            n = starts[user + 1] - starts[user]
            if drawn[user]:  # the notebook draws for every user with >= 5 items, even size 0
                picked = legacy.choice(n, size=n_targets[user], replace=False)
                is_target[order[starts[user] + picked]] = True
    return is_target


def _holdout_counts(
    counts: np.ndarray, test_fraction: float, valid_fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per-user (n_test, n_valid) int64 (n_users,) for the `holdout` rules."""
    splittable = counts >= 2
    n_test = np.where(splittable, np.clip(np.floor(test_fraction * counts + 0.5), 1,
                                          counts - 1), 0).astype(np.int64)
    room = np.maximum(counts - 1 - n_test, 0)
    n_valid = np.floor(valid_fraction * counts + 0.5).astype(np.int64)
    if valid_fraction > 0:
        n_valid = np.maximum(n_valid, 1)
    n_valid = np.where(splittable, np.minimum(n_valid, room), 0)
    return n_test, n_valid


def _eval_set(
    foldin_all: sp.csr_matrix, targets: Interactions, label: str, protocol: str
) -> EvalSet:
    """EvalSet of the users that have targets: their rows of foldin_all (n_users x n_items)
    and of the targets' matrix. DataError when no user has a target or fold-in and targets
    overlap."""
    targets_all = targets.to_csr()
    users = np.flatnonzero(np.diff(targets_all.indptr) > 0).astype(np.int64)
    if len(users) == 0:
        raise DataError(
            f"{protocol}: no user of '{targets.name}' has {label} targets; the data has too few "
            "items per user for this protocol (relax the filters or change split parameters)"
        )
    foldin = foldin_all[users]
    target_rows = targets_all[users]
    if foldin.multiply(target_rows).nnz:
        raise DataError(f"{protocol}: {label} fold-in and targets overlap (internal error)")
    return EvalSet(users, foldin, target_rows)


def _pair_keys(inter: Interactions) -> np.ndarray:
    """One int64 key per (user, item) event."""
    return inter.users.astype(np.int64) * inter.n_items + inter.items


def _log_dropped(n_candidates: int, n_evaluated: int, label: str, reason: str) -> None:
    if n_evaluated < n_candidates:
        log.info("%s split: %d of %d users are not evaluated: they %s", label,
                 n_candidates - n_evaluated, n_candidates, reason)


def _raw_int_ids(inter: Interactions, which: str) -> tuple[np.ndarray, np.ndarray]:
    """Raw (user, item) ids of each event as int32; DataError unless they are integers >= 0."""
    columns = []
    for what, vocabulary, index in (("user", inter.user_ids, inter.users),
                                    ("item", inter.item_ids, inter.items)):
        if vocabulary.dtype.kind not in "iu" or (len(vocabulary) and vocabulary.min() < 0):
            raise DataError(
                f"predefined split: {which} {what} ids must be integers >= 0 (identity "
                f"vocabulary), got dtype {vocabulary.dtype} (e.g. {vocabulary[:1]})"
            )
        columns.append(vocabulary[index].astype(np.int32))
    if len(columns[0]) == 0:
        raise DataError(f"predefined split: the {which} file has no interactions")
    return columns[0], columns[1]


def _align_negatives(data: PredefinedSplitData, users: np.ndarray, n_items: int) -> np.ndarray:
    """Rows of data.test_negatives for `users` (int64 (m, n_neg)); DataError when a user has no
    row or several rows, or an item id is outside [0, n_items)."""
    negatives = np.asarray(data.test_negatives)
    if data.negative_users is None:
        raise DataError(f"{data.name}: test_negatives given without negative_users")
    negative_users = np.asarray(data.negative_users, dtype=np.int64)
    if negative_users.size and negative_users.min() < 0:
        raise DataError(f"{data.name}: negative_users must be >= 0, got {negative_users.min()}")
    if negatives.ndim != 2 or len(negatives) != len(negative_users):
        raise DataError(
            f"{data.name}: test_negatives has shape {negatives.shape}, expected "
            f"({len(negative_users)}, n_neg) to match negative_users"
        )
    if negatives.size and (negatives.min() < 0 or negatives.max() >= n_items):
        raise DataError(
            f"{data.name}: negative item ids must be in [0, {n_items}), got range "
            f"[{negatives.min()}, {negatives.max()}]"
        )
    n_rows_per_user = np.bincount(negative_users, minlength=int(users.max()) + 1)
    if (n_rows_per_user > 1).any():
        raise DataError(
            f"{data.name}: user {int(np.argmax(n_rows_per_user > 1))} has several negatives rows; "
            "expected one row per test user"
        )
    row_of_user = np.full(len(n_rows_per_user), -1, dtype=np.int64)
    row_of_user[negative_users] = np.arange(len(negative_users))
    rows = row_of_user[users]
    if (rows < 0).any():
        raise DataError(f"{data.name}: test user {int(users[rows < 0][0])} has no negatives row")
    return negatives[rows].astype(np.int64)
