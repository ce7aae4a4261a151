"""Filters on Interactions: rating threshold (binarize) and k-core, all vectorised.

Duplicate (user, item) events need no filter: `Interactions.from_raw` already merges them
(value = max, timestamp = earliest). Every filter returns compacted Interactions (users and items
without events leave the vocabularies) and raises DataError when nothing is left.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from linrec.data.configs import FiltersConfig
from linrec.data.interactions import Interactions, check_nonempty
from linrec.errors import DataError
from linrec.params import check_int


def binarize(inter: Interactions, min_rating: float) -> Interactions:
    """Keep events with value >= min_rating and drop the values (all ones afterwards).

    ML-20M / Netflix in Liang et al. keep ratings > 3.5, i.e. min_rating=4 on half-star data
    (Liang et al. 2018).
    """
    if inter.values is None:
        raise DataError(
            f"{inter.name}: data.filters.min_rating={min_rating} needs rating values but the "
            "source gave none; set data.filters.min_rating=null"
        )
    kept = inter.subset(inter.values >= min_rating)
    check_nonempty(kept, f"binarize(min_rating={min_rating})")
    return Interactions(
        kept.users, kept.items, kept.user_ids, kept.item_ids, None, kept.timestamps, kept.name
    ).compact()


def kcore(
    inter: Interactions, min_user: int, min_item: int, iterative: bool = True
) -> Interactions:
    """Keep users with >= min_user events and items with >= min_item events.

    iterative=True: repeat both filters until a fixed point (every kept user and item meets its
    minimum: the (min_user, min_item)-core). iterative=False: one pass as in the VAE-CF notebook's
    `filter_triplets`: items first, then users counted on the item-filtered data (items may end
    below min_item afterwards).
    """
    min_user = check_int(min_user, "data.filters.min_user_interactions", ge=0)
    min_item = check_int(min_item, "data.filters.min_item_interactions", ge=0)
    kept_rows = np.arange(inter.n_interactions)
    users, items = inter.users, inter.items
    while True:  # the arrays shrink as rows go, so later rounds are cheap
        n_before = len(kept_rows)
        if min_item > 0:
            keep = np.bincount(items, minlength=inter.n_items)[items] >= min_item
            if not keep.all():
                kept_rows, users, items = kept_rows[keep], users[keep], items[keep]
        if min_user > 0:
            keep = np.bincount(users, minlength=inter.n_users)[users] >= min_user
            if not keep.all():
                kept_rows, users, items = kept_rows[keep], users[keep], items[keep]
        if not iterative or len(kept_rows) == n_before:
            break
    kept = inter.subset(kept_rows)
    check_nonempty(kept, f"kcore(min_user={min_user}, min_item={min_item})")
    return kept.compact()


def apply_filters(inter: Interactions, cfg: FiltersConfig | Mapping[str, Any] | None
                  ) -> Interactions:
    """Apply the `filters` config (`FiltersConfig`, or a mapping of its fields): binarize, then
    k-core. Returns compacted Interactions; ConfigError for an unknown key, DataError when
    empty."""
    params = FiltersConfig.from_mapping(cfg or {})
    if params.min_rating is not None:
        inter = binarize(inter, float(params.min_rating))
    if params.min_user_interactions > 0 or params.min_item_interactions > 0:
        inter = kcore(inter, params.min_user_interactions, params.min_item_interactions,
                      iterative=params.iterative)
    return inter.compact()
