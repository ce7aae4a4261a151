"""Argument checks shared by item sampling, rank simulation, expected metrics and the mapping
functions (spec/evaluation.md §0.2): sample sizes, rank arrays, pools, random generators."""

from __future__ import annotations

from typing import Any

import numpy as np

from linrec.errors import ConfigError

#: item pools a target's sampled items are drawn from (spec §0.2; "given" = EvalSet.negatives, NCF)
POOLS = ("all_but_target", "non_interacted", "given")


def check_sample_size(n_items: int, sample_size: int) -> None:
    """Raise ConfigError unless n_items >= 3 and 2 <= sample_size <= n_items - 1 (integers).
    sample_size is the sample set size n: the target plus n-1 sampled items."""
    if int(n_items) != n_items or n_items < 3:
        raise ConfigError(f"n_items={n_items} must be an integer >= 3")
    if int(sample_size) != sample_size or not 2 <= sample_size <= n_items - 1:
        raise ConfigError(
            f"sample_size={sample_size} must be an integer in [2, n_items - 1] = "
            f"[2, {n_items - 1}] (the target plus sample_size - 1 sampled items)"
        )



def check_ranks(ranks: Any, upper: Any, what: str) -> np.ndarray:
    """ranks as int64, after checking that every entry is an integer in [1, upper] (upper: scalar
    or array broadcastable to ranks). Raises ConfigError naming `what`, the value and the range."""
    values = np.asarray(ranks)
    if not np.issubdtype(values.dtype, np.integer):
        as_float = values.astype(np.float64).ravel()
        bad = ~np.isfinite(as_float) | (as_float != np.round(as_float))
        if np.any(bad):
            raise ConfigError(f"{what} must be integers; got {as_float[np.flatnonzero(bad)[0]]!r}")
    out = values.astype(np.int64)
    upper_arr = np.broadcast_to(np.asarray(upper), out.shape)
    bad = (out < 1) | (out > upper_arr)
    if np.any(bad):
        idx = np.flatnonzero(bad.ravel())[0]
        raise ConfigError(
            f"{what}[{idx}]={out.ravel()[idx]} is outside the allowed range "
            f"[1, {upper_arr.ravel()[idx]}] (1-based ranks)"
        )
    return out


def check_pool(pool: str) -> None:
    """Raise ConfigError unless pool is one of POOLS."""
    if pool not in POOLS:
        raise ConfigError(f"pool={pool!r} is not supported; choose one of {POOLS}")


def as_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    if rng is None:
        raise ConfigError("rng is required: pass a numpy.random.Generator (or an integer seed) "
                          "derived from the run seed")
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise ConfigError(f"rng={rng!r} must be a numpy.random.Generator or an integer seed")

