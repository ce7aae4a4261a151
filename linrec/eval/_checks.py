"""Argument checks shared by item sampling, rank simulation, expected metrics and the mapping
functions (Li et al. 2020, §2.1): sample sizes, rank arrays, pools, random generators; built
on `linrec.params`, in its message format."""

from __future__ import annotations

from typing import Any

import numpy as np

from linrec.errors import ConfigError
from linrec.params import check_choice, check_int, check_seed

#: item pools a target's sampled items are drawn from (Li et al. 2020, §2.1; "given" =
#: EvalSet.negatives, NCF)
POOLS = ("all_but_target", "non_interacted", "given")


def check_sample_size(n_items: int, sample_size: int, where: str = "sample_size",
                      hint: str = "") -> int:
    """sample_size as int, after checking n_items >= 3 and 2 <= sample_size <= n_items - 1
    (integers). sample_size is the sample set size n: the target plus n-1 sampled items.
    ConfigError `<where>=<value> is out of range; allowed: ...` (then `hint`, what to do;
    by default what a sample set is)."""
    n_items = check_int(n_items, "n_items", ge=3)
    return check_int(sample_size, where, ge=2, le=n_items - 1, hint=hint or (
        f"a sample set is the target plus {where} - 1 of the other n_items - 1 = "
        f"{n_items - 1} items"))


def check_ranks(ranks: Any, upper: Any, what: str) -> np.ndarray:
    """ranks as int64, after checking that every entry is an integer in [1, upper] (upper: scalar
    or array broadcastable to ranks). Raises ConfigError naming `what`, the first bad entry and
    the range."""
    values = np.asarray(ranks)
    if not np.issubdtype(values.dtype, np.integer):
        as_float = values.astype(np.float64).ravel()
        bad = ~np.isfinite(as_float) | (as_float != np.round(as_float))
        if np.any(bad):
            idx = np.flatnonzero(bad)[0]
            raise ConfigError(f"{what}[{idx}]={as_float[idx]!r} is not an integer; allowed: "
                              "integers >= 1 (1-based ranks)")
    out = values.astype(np.int64)
    upper_arr = np.broadcast_to(np.asarray(upper), out.shape)
    bad = (out < 1) | (out > upper_arr)
    if np.any(bad):
        idx = np.flatnonzero(bad.ravel())[0]
        raise ConfigError(f"{what}[{idx}]={out.ravel()[idx]} is out of range; allowed: an "
                          f"integer in [1, {upper_arr.ravel()[idx]}] (1-based ranks)")
    return out


def check_pool(pool: str) -> str:
    """pool, after checking it is one of POOLS."""
    return check_choice(pool, "pool", POOLS)


def check_foldin_pool(exclude_foldin: bool, pool: str) -> None:
    """Ranked fold-in items (exclude_foldin=False) go with a pool that can draw them: with
    pool='non_interacted' the estimators' law of the sampled rank would not hold."""
    if not exclude_foldin and pool == "non_interacted":
        raise ConfigError(
            "eval.exclude_foldin=false ranks the fold-in items among all items, while "
            "eval.sampled.pool=non_interacted never samples them: the estimators' law of the "
            "sampled rank would not hold; use pool=all_but_target (Li et al. 2020's binom/hyper "
            "protocol), or keep exclude_foldin=true with non_interacted (their 'actual' "
            "protocol)")


def as_rng(rng: np.random.Generator | int | None, where: str = "rng") -> np.random.Generator:
    """A Generator as it is, or one seeded by an integer seed >= 0 (`linrec.params.check_seed`);
    None or anything else is a ConfigError naming `where`."""
    if rng is None:
        raise ConfigError(f"{where} is required: pass a numpy.random.Generator (or an integer "
                          "seed) derived from the run seed")
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, (bool, np.bool_)):
        return np.random.default_rng(check_seed(rng, where))
    raise ConfigError(f"{where}={rng!r} is not allowed; allowed: a numpy.random.Generator or "
                      "an integer seed >= 0")
