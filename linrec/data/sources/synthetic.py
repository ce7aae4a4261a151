"""Seeded synthetic implicit feedback (the default dataset): a low-rank preference structure,
power-law item popularity and log-normal user activity, generated in a few hundred ms.

Model: user u picks k_u distinct items, without replacement, with probabilities proportional to
    w_ui = pop_i * exp(preference_strength * <p_u, q_i>),   pop_i = (1 + r_i)^(-popularity_exponent)
where r_i is item i's popularity rank (a random permutation), p_u ~ N(0, I / rank),
q_i ~ N(0, I), so <p_u, q_i> has unit variance. k_u ~ LogNormal with mean
`mean_user_interactions`, clipped to [min_user_interactions, max_user_interactions].
Sampling without replacement is the Gumbel-top-k trick: the k_u largest log w_ui + Gumbel noise.
"""

from __future__ import annotations

import numpy as np

from linrec.data.interactions import Interactions
from linrec.params import check_int, check_real, check_seed

_BLOCK_USERS = 512
_TIME_START = 1_500_000_000  # Unix seconds (2017-07-14)
_TIME_SPAN = 3 * 365 * 86_400


def load(
    n_users: int = 6000,
    n_items: int = 2000,
    rank: int = 16,
    mean_user_interactions: float = 35.0,
    activity_sigma: float = 0.8,
    popularity_exponent: float = 1.0,
    preference_strength: float = 2.5,
    min_user_interactions: int = 3,
    max_user_interactions: int | None = None,
    seed: int = 0,
) -> Interactions:
    """Generate the dataset (see the module docstring). Timestamps are seeded uniform times over
    three years; values are None (implicit feedback). max_user_interactions defaults to
    n_items // 4. Items never picked drop out of the vocabulary."""
    for field, value in (("n_users", n_users), ("n_items", n_items), ("rank", rank)):
        check_int(value, f"data.source.{field}", ge=2 if field == "n_items" else 1)
    check_seed(seed, "data.source.seed")
    check_real(mean_user_interactions, "data.source.mean_user_interactions", gt=0)
    check_real(activity_sigma, "data.source.activity_sigma", ge=0)
    check_real(popularity_exponent, "data.source.popularity_exponent")
    check_real(preference_strength, "data.source.preference_strength")
    check_int(min_user_interactions, "data.source.min_user_interactions", ge=1, le=n_items)
    if max_user_interactions is None:
        max_user_interactions = max(min_user_interactions, n_items // 4)
    check_int(max_user_interactions, "data.source.max_user_interactions",
              ge=min_user_interactions, le=n_items)
    rng = np.random.default_rng(seed)
    counts = _user_activity(rng, n_users, mean_user_interactions, activity_sigma,
                            min_user_interactions, max_user_interactions)
    popularity_rank = rng.permutation(n_items)
    log_popularity = (-popularity_exponent * np.log1p(popularity_rank)).astype(np.float32)
    user_factors = rng.standard_normal((n_users, rank), dtype=np.float32)
    user_factors /= np.float32(np.sqrt(rank))
    item_factors = rng.standard_normal((n_items, rank), dtype=np.float32)
    users, items = [], []
    for start in range(0, n_users, _BLOCK_USERS):
        block = slice(start, min(start + _BLOCK_USERS, n_users))
        logits = user_factors[block] @ item_factors.T
        logits *= np.float32(preference_strength)
        logits += log_popularity
        picked, owners = _gumbel_top_k(rng, logits, counts[block])
        users.append(owners + start)
        items.append(picked)
    users, items = np.concatenate(users), np.concatenate(items)
    timestamps = _TIME_START + rng.integers(0, _TIME_SPAN, size=len(users))
    return Interactions.from_raw(users, items, timestamps=timestamps, name="synthetic")


def _user_activity(
    rng: np.random.Generator, n_users: int, mean: float, sigma: float, low: int, high: int
) -> np.ndarray:
    """int64 (n_users,) interaction counts: LogNormal(mu, sigma) with E = mean, rounded, clipped."""
    mu = np.log(mean) - sigma**2 / 2
    return np.clip(np.rint(rng.lognormal(mu, sigma, size=n_users)), low, high).astype(np.int64)


def _gumbel_top_k(
    rng: np.random.Generator, logits: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row r, counts[r] distinct columns drawn with probability proportional to
    exp(logits[r]) without replacement -> (columns, rows), both int64 (counts.sum(),)."""
    # -log(Exp(1)) is a standard Gumbel variable (float32 draws are several times faster);
    # work with negated keys so that the k smallest are the k drawn items
    negated_keys = np.log(
        np.maximum(rng.standard_exponential(size=logits.shape, dtype=np.float32),
                   np.finfo(np.float32).tiny)
    )
    negated_keys -= logits
    k_max = int(counts.max())
    top = np.argpartition(negated_keys, k_max - 1, axis=1)[:, :k_max]
    order = np.argsort(np.take_along_axis(negated_keys, top, axis=1), axis=1)
    top = np.take_along_axis(top, order, axis=1)
    keep = np.arange(k_max) < counts[:, None]
    rows = np.broadcast_to(np.arange(len(counts))[:, None], top.shape)
    return top[keep].astype(np.int64), rows[keep].astype(np.int64)


