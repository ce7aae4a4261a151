"""Sampled ranks simulated from global ranks and adaptive sampling (docs/concepts/sampled.md, Li et
al. 2023, Algorithm 1–Li et al. 2023, §4.3): the simulation follows the law of real sampled items
ranked by scores, with per-target catalogue sizes; Algorithm 1 against the nested likelihood
and the EM posterior under both likelihoods; the adaptive levels and bookkeeping, the efficiency
curve, and speed."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from linrec.errors import ConfigError
from linrec.eval.negatives import draw_negatives
from linrec.eval.sampled_ranks import sampled_ranks_from_scores
from linrec.eval.simulate import (
    AdaptiveSample,
    adaptive_levels,
    efficiency_curve,
    simulate_adaptive_ranks,
    simulate_sampled_ranks,
)
from tests.eval.conftest import P_MIN, chi2_pvalue


@pytest.mark.parametrize("replace", [True, False])
def test_real_sampling_matches_simulation_in_distribution(replace: bool) -> None:
    """Real sampled items ranked by scores follow the law of simulate_sampled_ranks
    (docs/concepts/sampled.md)."""
    n_items, sample_size, reps = 400, 30, 20_000
    scores = -np.arange(n_items, dtype=np.float64)[None, :]  # item j has global rank j + 1
    keys = np.zeros_like(scores)
    for global_rank in (1, 2, 37, 250, 400):
        items = np.full(reps, global_rank - 1)
        negatives = draw_negatives(11, global_rank, np.zeros(reps, np.int64), items, n_items,
                                   sample_size, replace)
        real = sampled_ranks_from_scores(scores, keys, np.zeros(reps, np.int64), items, negatives)
        simulated = simulate_sampled_ranks(np.full(reps, global_rank), n_items, sample_size,
                                           replace, np.random.default_rng(global_rank))
        x = np.arange(sample_size)
        pmf = (stats.binom.pmf(x, sample_size - 1, (global_rank - 1) / (n_items - 1)) if replace
               else stats.hypergeom.pmf(x, n_items - 1, global_rank - 1, sample_size - 1))
        for draws in (real, simulated):
            counts = np.bincount(draws - 1, minlength=sample_size)
            assert chi2_pvalue(counts, pmf) > P_MIN
        if global_rank > 1:
            assert stats.ks_2samp(real, simulated).pvalue > P_MIN


def test_simulate_per_target_catalogue_sizes() -> None:
    """n_items may be per target (pool='non_interacted': N_u); R = N_u gives r = n exactly."""
    sizes = np.array([50, 80, 120])
    got = simulate_sampled_ranks(sizes, sizes, 10, True, np.random.default_rng(0))
    np.testing.assert_array_equal(got, [10, 10, 10])
    got = simulate_sampled_ranks(np.ones(3, np.int64), sizes, 10, False, 0)
    np.testing.assert_array_equal(got, [1, 1, 1])


def _nested_pmf(global_rank: int, n_items: int, levels: np.ndarray, replace: bool) -> dict:
    """P(n_u = n_j, r_u = r) of Algorithm 1 from the nested likelihood (Li et al. 2023, eq. 12)."""
    theta = (global_rank - 1) / (n_items - 1)
    out = {}
    prev = 0  # sampled items before level j
    p_reach = 1.0  # Pr(r = 1 after prev items)
    for j, size in enumerate(levels):
        n_draw = int(size) - 1 - prev
        x = np.arange(n_draw + 1)
        if replace:
            law = stats.binom.pmf(x, n_draw, theta)
        else:
            law = stats.hypergeom.pmf(x, n_items - 1 - prev, global_rank - 1, n_draw)
        for beats in range(1, n_draw + 1):
            out[int(size), beats + 1] = p_reach * law[beats]
        if j + 1 == len(levels):
            out[int(size), 1] = p_reach * law[0]
        p_reach *= law[0]
        prev = int(size) - 1
    return out


@pytest.mark.parametrize("replace", [True, False])
def test_adaptive_matches_nested_likelihood(replace: bool) -> None:
    n_items, global_rank, runs = 2000, 40, 200_000
    sample = simulate_adaptive_ranks(np.full(runs, global_rank), n_items,
                                     np.random.default_rng(15), n0=10, n_max=160, replace=replace)
    pmf = _nested_pmf(global_rank, n_items, sample.levels, replace)
    assert sum(pmf.values()) == pytest.approx(1.0, abs=1e-12)
    cells = sorted(pmf)
    index = {c: i for i, c in enumerate(cells)}
    observed = np.bincount([index[c] for c in zip(sample.sample_sizes.tolist(),
                                                  sample.sampled_ranks.tolist(), strict=True)],
                           minlength=len(cells))
    assert chi2_pvalue(observed, np.array([pmf[c] for c in cells])) > 0.01
    if replace:
        # Li et al. 2023, eq. 12 example: (n_u, r_u) = (20, 2) has probability 0.1369
        assert pmf[20, 2] == pytest.approx(0.1369, abs=5e-4)
        assert np.mean((sample.sample_sizes == 20) & (sample.sampled_ranks == 2)) == \
            pytest.approx(0.1369, abs=4e-3)


def test_em_posterior_same_under_both_likelihoods() -> None:
    """The paper likelihood Bin(r-1; n_u-1, θ) and the nested one differ by a factor free of R,
    so EM posteriors over R agree (Li et al. 2023, eq. 12)."""
    n_items, levels = 500, np.array([10, 20, 40, 80])
    rng = np.random.default_rng(3)
    prior = rng.random(n_items)
    prior /= prior.sum()
    theta = np.arange(n_items) / (n_items - 1)
    for size, rank in [(10, 3), (20, 2), (40, 7), (80, 1), (80, 30)]:
        paper = stats.binom.pmf(rank - 1, size - 1, theta)
        j = int(np.flatnonzero(levels == size)[0])
        if j == 0 or (size == levels[-1] and rank == 1):
            nested = (1 - theta) ** (size - 1) if rank == 1 else paper
        else:
            half = size // 2
            nested = (1 - theta) ** (half - 1) * stats.binom.pmf(rank - 1, half, theta)
        post_paper = prior * paper / (prior @ paper)
        post_nested = prior * nested / (prior @ nested)
        np.testing.assert_allclose(post_paper, post_nested, rtol=0, atol=1e-12)


def test_adaptive_levels() -> None:
    np.testing.assert_array_equal(adaptive_levels(10_000), [100, 200, 400, 800, 1600, 3200])
    np.testing.assert_array_equal(adaptive_levels(3706), [100, 200, 400, 800, 1600, 3200])
    np.testing.assert_array_equal(adaptive_levels(3000), [100, 200, 400, 800, 1600])
    np.testing.assert_array_equal(adaptive_levels(25815, n_max_frac=0.125), [100, 200, 400, 800,
                                                                              1600, 3200])
    np.testing.assert_array_equal(adaptive_levels(10_000, n_max_frac=0.10), [100, 200, 400, 800])
    with pytest.raises(ConfigError, match="n_max=3000"):
        adaptive_levels(10_000, n_max=3000)
    with pytest.raises(ConfigError, match="n0=1"):
        adaptive_levels(10_000, n0=1)


def test_adaptive_bookkeeping() -> None:
    rng = np.random.default_rng(7)
    ranks = rng.integers(1, 5001, 20_000)
    sample = simulate_adaptive_ranks(ranks, 5000, rng)
    assert set(np.unique(sample.sample_sizes)) <= set(sample.levels.tolist())
    assert np.all(sample.sampled_ranks >= 1) and np.all(sample.sampled_ranks <= sample.sample_sizes)
    # users stopping before n_max were resolved (r > 1); r = 1 only at n_max
    assert np.all(sample.sampled_ranks[sample.sample_sizes < sample.levels[-1]] > 1)
    assert sample.mean_sample_size == pytest.approx(sample.sample_sizes.mean())
    # a target ranked first globally never leaves r = 1 and always reaches n_max
    top = simulate_adaptive_ranks(np.ones(5, np.int64), 5000, rng)
    np.testing.assert_array_equal(top.sampled_ranks, 1)
    np.testing.assert_array_equal(top.sample_sizes, 3200)


def test_efficiency_curve_brute_force() -> None:
    levels = np.array([10, 20, 40, 80])
    sizes = np.array([10] * 50 + [20] * 20 + [40] * 5 + [80] * 25)
    ranks = np.array([3] * 50 + [2] * 20 + [5] * 5 + [1] * 10 + [4] * 15)
    curve = efficiency_curve(AdaptiveSample(ranks, sizes, levels))
    np.testing.assert_array_equal(curve.finished, [50, 20, 5, 25])
    n_users = 100
    want = [n_users * 10 / 50, (n_users - 50) * 10 / 20, (n_users - 70) * 20 / 5]
    np.testing.assert_allclose(curve.cost, want)
    assert curve.terminal_cost == pytest.approx((n_users - 75) * 40 / 15)
    assert curve.terminal_unresolved == 10


def test_simulation_at_100k_targets_keeps_its_laws() -> None:
    """At the size of a real run (its speed is bench_sampling.py's): E[r] = 1 + (n − 1)·E[θ_R]
    for the fixed-size ranks (within 5 standard errors), and every adaptive target stops at a
    size n0·2^j ≤ n_max with its rank inside its set, at rank 1 only at n_max."""
    rng = np.random.default_rng(0)
    n_items, n = 20_000, 100
    ranks = rng.integers(1, n_items + 1, 100_000)
    r = simulate_sampled_ranks(ranks, n_items, n, True, rng)
    theta = (ranks - 1) / (n_items - 1)
    expected = 1 + (n - 1) * theta
    error = np.sqrt(((n - 1) * theta * (1 - theta)).sum()) / len(ranks)
    assert abs(r.mean() - expected.mean()) < 5 * error
    a = simulate_adaptive_ranks(ranks, n_items, rng)
    sizes, sampled = a.sample_sizes, a.sampled_ranks
    assert set(np.unique(sizes)) <= {100 * 2**j for j in range(6)}
    assert np.all((sampled >= 1) & (sampled <= sizes))
    assert np.all((sampled > 1) | (sizes == 3200))
