"""Sampled ranks simulated from global ranks, exact in distribution (docs/concepts/sampled.md), and
adaptive sampling (Li et al. 2023, Algorithm 1) with its efficiency curve (Li et al. 2023, §4.3):
research and validation tools that need no scores."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linrec.errors import ConfigError
from linrec.eval._checks import as_rng, check_ranks, check_sample_size

#: domain tag of the adaptive simulation's streams (set apart from the fixed-size ones)
_ADAPTIVE_SEED_TAG = 0xADA9


def repeat_rng(seed: int, repeat: int, sample_size: int | None = None) -> np.random.Generator:
    """The generator of one repeat of a simulated sample: default_rng([seed, repeat, n]) for a
    fixed sample size n, default_rng([seed, 0xADA9, repeat]) for an adaptive sample. Every
    simulation of linrec (the run's sampled block, the studies) draws from these streams."""
    if sample_size is None:
        return np.random.default_rng([seed, _ADAPTIVE_SEED_TAG, repeat])
    return np.random.default_rng([seed, repeat, sample_size])


def simulate_sampled_ranks(
    global_ranks: np.ndarray,
    n_items: int | np.ndarray,
    sample_size: int,
    replace: bool = True,
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Sampled ranks drawn from their exact law given the global ranks (docs/concepts/sampled.md):
    int64, shape of global_ranks. With replacement r = 1 + Binomial(n-1, θ_R), θ_R = (R-1)/(N-1);
    without r = 1 + Hypergeometric(N-1 items, R-1 above the target, n-1 draws). n_items may be an
    array (per-target pool sizes N_u for pool="non_interacted"). rng: a Generator (or an integer
    seed) derived from the run seed; required."""
    n_arr = np.asarray(n_items, dtype=np.int64)
    check_sample_size(int(n_arr.min()) if n_arr.size else 3, sample_size)
    ranks = check_ranks(global_ranks, n_arr, "global_ranks")
    rng = as_rng(rng)
    n_neg = sample_size - 1
    if replace:
        theta = (ranks - 1) / (n_arr - 1)
        return 1 + rng.binomial(n_neg, theta)
    n_arr = np.broadcast_to(n_arr, ranks.shape)
    return 1 + rng.hypergeometric(ranks - 1, n_arr - ranks, n_neg)


def adaptive_levels(
    n_items: int, n0: int = 100, n_max: int = 3200, n_max_frac: float | None = None
) -> np.ndarray:
    """Set sizes n_j = n0·2^j, j = 0..t, of adaptive sampling (Li et al. 2023, Algorithm 1; Li et
    al. 2023, §4.3): n_max must be n0·2^t; the terminal size is clipped to the largest n0·2^t <= N -
    1 (or <= frac·N with n_max_frac, the 10–15 % rule of Li et al. 2023). int64 (t + 1,)."""
    if int(n0) != n0 or not 2 <= n0 <= n_items - 1:
        raise ConfigError(f"n0={n0} must be an integer in [2, n_items - 1] = [2, {n_items - 1}]")
    if int(n_max) != n_max or n_max < n0 or (n_max // n0) * n0 != n_max or (
            (n_max // n0) & (n_max // n0 - 1)):
        raise ConfigError(f"n_max={n_max} must be n0·2^t for an integer t >= 0 (n0={n0})")
    cap = min(int(n_max), n_items - 1)
    if n_max_frac is not None:
        if not 0.0 < n_max_frac <= 1.0:
            raise ConfigError(f"n_max_frac={n_max_frac} must be in (0, 1] (e.g. 0.10–0.15)")
        cap = min(n_items - 1, int(np.floor(n_max_frac * n_items)))
        if cap < n0:
            raise ConfigError(f"n_max_frac={n_max_frac}·n_items={n_items} is below n0={n0}")
    sizes = [int(n0)]
    while sizes[-1] * 2 <= cap:
        sizes.append(sizes[-1] * 2)
    return np.asarray(sizes, dtype=np.int64)


@dataclass(frozen=True)
class AdaptiveSample:
    """Outcome of adaptive sampling: sampled_ranks r_u and sample_sizes n_u (set sizes,
    target included), int64 (M,); levels: the set sizes n0·2^j, j = 0..t."""

    sampled_ranks: np.ndarray
    sample_sizes: np.ndarray
    levels: np.ndarray

    @property
    def mean_sample_size(self) -> float:
        return float(self.sample_sizes.mean()) if self.sample_sizes.size else 0.0


def simulate_adaptive_ranks(
    global_ranks: np.ndarray,
    n_items: int,
    rng: np.random.Generator | int | None = None,
    n0: int = 100,
    n_max: int = 3200,
    n_max_frac: float | None = None,
    replace: bool = True,
) -> AdaptiveSample:
    """Algorithm 1 of Li et al. 2023, Algorithm 1 simulated from global ranks, exact in
    distribution: start with n0 - 1 sampled items; while r_u = 1 and n_u < n_max, add n_u items
    (nested sets) and double n_u. With replacement the added items beat the target with probability
    θ_R each; without replacement they come from the pool minus the n_u - 1 items already drawn (all
    below t). rng: a Generator (or an integer seed) derived from the run seed; required."""
    levels = adaptive_levels(n_items, n0, n_max, n_max_frac)
    ranks = check_ranks(global_ranks, n_items, "global_ranks")
    rng = as_rng(rng)
    flat = ranks.ravel()
    above = flat - 1  # items that beat the target
    below = n_items - flat  # items the target beats
    sampled = np.empty(flat.shape, dtype=np.int64)
    sizes = np.empty(flat.shape, dtype=np.int64)
    active = np.arange(flat.size)
    drawn_before = 0  # sampled items in the set before this level's draw
    for j, size in enumerate(levels):
        n_draw = int(size) - 1 - drawn_before
        if replace:
            n_above = rng.binomial(n_draw, above[active] / (n_items - 1))
        else:
            # Li et al. 2023, Algorithm 1: given r = 1 so far, every earlier draw came from the
            # items below t
            n_above = rng.hypergeometric(above[active], below[active] - drawn_before, n_draw)
        sampled[active] = 1 + n_above
        sizes[active] = size
        drawn_before = int(size) - 1
        if j + 1 < len(levels):
            active = active[n_above == 0]
    return AdaptiveSample(sampled.reshape(ranks.shape), sizes.reshape(ranks.shape), levels)


@dataclass(frozen=True)
class EfficiencyCurve:
    """Sampling efficiency of an adaptive run (Li et al. 2023, §4.3).

    levels: set sizes n_j (t + 1,); finished: m_j, users whose final size is n_j (t + 1,);
    cost: C_j for the non-terminal levels j = 0..t-1 (items drawn at level j per user resolved
    there; inf when none resolved); terminal_cost: C_t computed with the users resolved (r > 1) at
    n_max only; terminal_unresolved: users still at r = 1 at n_max.
    """

    levels: np.ndarray
    finished: np.ndarray
    cost: np.ndarray
    terminal_cost: float
    terminal_unresolved: int


def efficiency_curve(sample: AdaptiveSample) -> EfficiencyCurve:
    """C_0 = M n0 / m_0 and C_j = (M - Σ_{p<j} m_p)(n_j - n_{j-1}) / m_j (Li et al. 2023, §4.3 eq
    13)."""
    levels = sample.levels
    sizes = sample.sample_sizes.ravel()
    ranks = sample.sampled_ranks.ravel()
    n_users = sizes.size
    finished = np.array([(sizes == s).sum() for s in levels], dtype=np.int64)
    reached = n_users - np.concatenate([[0], np.cumsum(finished)[:-1]])
    drawn = np.concatenate([[levels[0]], np.diff(levels)]).astype(np.float64)
    terminal_resolved = int(((sizes == levels[-1]) & (ranks > 1)).sum())
    resolved = np.concatenate([finished[:-1], [terminal_resolved]]).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        all_cost = np.where(resolved > 0, reached * drawn / resolved, np.inf)
    return EfficiencyCurve(
        levels=levels,
        finished=finished,
        cost=all_cost[:-1],
        terminal_cost=float(all_cost[-1]),
        terminal_unresolved=int(finished[-1] - terminal_resolved),
    )
