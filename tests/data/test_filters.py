"""binarize, k-core (vs a brute-force loop and the VAE-CF one pass), apply_filters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from linrec.data.filters import apply_filters, binarize, kcore
from linrec.data.interactions import Interactions
from linrec.errors import ConfigError, DataError


def _pairs(inter: Interactions) -> set[tuple[int, int]]:
    return set(
        zip(
            inter.user_ids[inter.users].tolist(), inter.item_ids[inter.items].tolist(), strict=False
        )
    )


def _random_inter(seed: int, n_rows: int = 400, n_users: int = 60, n_items: int = 40):
    rng = np.random.default_rng(seed)
    users = rng.integers(0, n_users, n_rows) * 3 + 1  # sparse raw ids
    items = np.minimum(rng.geometric(0.08, n_rows), n_items) * 2
    ratings = rng.integers(1, 11, n_rows) / 2
    return Interactions.from_raw(users, items, ratings, name="random")


def _brute_force_core(pairs: set, min_user: int, min_item: int) -> set:
    """Remove one violating user or item at a time until none is left (the k-core is unique)."""
    pairs = set(pairs)
    while True:
        user_counts: dict[int, int] = {}
        item_counts: dict[int, int] = {}
        for u, i in pairs:
            user_counts[u] = user_counts.get(u, 0) + 1
            item_counts[i] = item_counts.get(i, 0) + 1
        bad_users = [u for u, c in user_counts.items() if c < min_user]
        bad_items = [i for i, c in item_counts.items() if c < min_item]
        if bad_users:
            pairs = {p for p in pairs if p[0] != bad_users[0]}
        elif bad_items:
            pairs = {p for p in pairs if p[1] != bad_items[0]}
        else:
            return pairs


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("min_user", "min_item"), [(3, 0), (0, 4), (5, 5), (7, 3), (8, 3)])
def test_iterative_kcore_equals_brute_force_fixed_point(seed, min_user, min_item):
    inter = _random_inter(seed)
    expected = _brute_force_core(_pairs(inter), min_user, min_item)
    if not expected:
        with pytest.raises(DataError, match="no interactions left after kcore"):
            kcore(inter, min_user, min_item)
        return
    core = kcore(inter, min_user, min_item)
    assert _pairs(core) == expected
    if (min_user, min_item) == (7, 3):  # a case where one pass is not enough
        assert _pairs(kcore(inter, min_user, min_item, iterative=False)) != expected
    assert np.bincount(core.users).min() >= min_user
    assert np.bincount(core.items).min() >= min_item
    # compacted vocabularies: exactly the ids that still have events
    assert set(core.user_ids.tolist()) == {u for u, _ in expected}
    assert set(core.item_ids.tolist()) == {i for _, i in expected}


@pytest.mark.parametrize("seed", range(4))
def test_one_pass_kcore_matches_vae_cf_filter_triplets(seed):
    inter = _random_inter(seed)
    frame = pd.DataFrame(
        {"userId": inter.user_ids[inter.users], "movieId": inter.item_ids[inter.items]}
    )
    # filter_triplets of the VAE-CF notebook: items first, then users on what is left
    min_uc, min_sc = 6, 5
    item_count = frame.groupby("movieId").size()
    frame = frame[frame["movieId"].isin(item_count.index[item_count >= min_sc])]
    user_count = frame.groupby("userId").size()
    frame = frame[frame["userId"].isin(user_count.index[user_count >= min_uc])]
    one_pass = kcore(inter, min_uc, min_sc, iterative=False)
    assert _pairs(one_pass) == set(
        zip(frame["userId"].tolist(), frame["movieId"].tolist(), strict=False)
    )


def test_binarize_keeps_ratings_at_or_above_threshold_and_drops_values():
    inter = Interactions.from_raw(
        np.array([0, 0, 1, 1, 2]),
        np.array([0, 1, 0, 2, 2]),
        values=np.array([3.5, 4.0, 5.0, 1.0, 3.0]),
    )
    kept = binarize(inter, 4.0)  # ML-20M: ratings > 3.5 on half stars
    assert _pairs(kept) == {(0, 1), (1, 0)}
    assert kept.values is None
    np.testing.assert_array_equal(kept.user_ids, [0, 1])
    np.testing.assert_array_equal(kept.item_ids, [0, 1])


def test_binarize_errors():
    no_values = Interactions.from_raw(np.array([0]), np.array([0]))
    with pytest.raises(DataError, match="min_rating=4.0 needs rating values"):
        binarize(no_values, 4.0)
    low = Interactions.from_raw(np.array([0]), np.array([0]), values=np.array([1.0]))
    with pytest.raises(DataError, match=r"no interactions left after binarize\(min_rating=4.0\)"):
        binarize(low, 4.0)


def test_apply_filters_runs_binarize_then_kcore():
    inter = _random_inter(3, n_rows=800)
    filtered = apply_filters(
        inter, {"min_rating": 3.0, "min_user_interactions": 5, "min_item_interactions": 3}
    )
    kept = {
        (u, i)
        for (u, i), v in zip(
            zip(
                inter.user_ids[inter.users].tolist(),
                inter.item_ids[inter.items].tolist(),
                strict=False,
            ),
            inter.values.tolist(),
            strict=False,
        )
        if v >= 3.0
    }
    assert _pairs(filtered) == _brute_force_core(kept, 5, 3)


def test_apply_filters_defaults_change_nothing():
    inter = _random_inter(1)
    assert _pairs(apply_filters(inter, None)) == _pairs(inter)
    assert _pairs(apply_filters(inter, {"min_user_interactions": 0})) == _pairs(inter)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"min_users": 5}, r"filters: unknown field\(s\) \['min_users'\]; allowed"),
        ({"min_user_interactions": -1},
         "min_user_interactions=-1 is out of range; allowed: an integer >= 0"),
        ({"min_item_interactions": 2.5},
         "min_item_interactions=2.5 is not an integer; allowed: an integer >= 0"),
        ({"min_rating": "high"}, "min_rating='high' is not a finite number"),
        ({"min_rating": True}, "min_rating=True is not a finite number"),  # bool: not a rating
        ({"iterative": "no"}, "filters.iterative='no' is not a flag; allowed: true or false"),
    ],
)
def test_apply_filters_config_errors(cfg, match):
    with pytest.raises(ConfigError, match=match):
        apply_filters(_random_inter(0), cfg)


@pytest.mark.parametrize("min_user, min_item, match", [
    (-1, 0, r"^data.filters.min_user_interactions=-1 is out of range; allowed: an integer >= 0$"),
    (0, 1.5, r"^data.filters.min_item_interactions=1.5 is not an integer; allowed: an integer "
             r">= 0$"),
])
def test_kcore_checks_its_minimums_in_the_one_format(min_user, min_item, match):
    with pytest.raises(ConfigError, match=match):
        kcore(_random_inter(0), min_user, min_item)
