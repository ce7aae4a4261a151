"""Real item sampling (Li et al. 2020, §2.1; docs/concepts/evaluation.md, ties): sampled items are
never the target, lie in the catalogue and are uniform over the pool (with and without replacement,
every item or the non-interacted ones); sample sets depend on the seed and the repeat only, block by
block, with the per-block stream the hook relies on; and the argument checks of sampling, rank
simulation and the hook."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.data.splits import EvalSet
from linrec.errors import ConfigError, DataError
from linrec.eval.negatives import NegativeSampler, block_targets, draw_negatives
from linrec.eval.sampled_ranks import SampledRankHook
from linrec.eval.simulate import adaptive_levels, simulate_adaptive_ranks, simulate_sampled_ranks
from tests.eval.conftest import P_MIN, chi2_pvalue


@pytest.mark.parametrize("replace", [True, False])
def test_negatives_never_target_and_in_range(replace: bool) -> None:
    rng = np.random.default_rng(0)
    n_items, n_targets = 60, 9000
    items = rng.integers(0, n_items, n_targets)
    neg = draw_negatives(5, 0, np.arange(n_targets), items, n_items, 31, replace=replace)
    assert neg.shape == (n_targets, 30) and neg.dtype == np.int64
    assert neg.min() >= 0 and neg.max() < n_items
    assert not np.any(neg == items[:, None])
    if not replace:
        srt = np.sort(neg, axis=1)
        assert not np.any(srt[:, 1:] == srt[:, :-1])
    # uniform over the pool: each non-target item appears equally often
    counts = np.zeros(n_items)
    np.add.at(counts, neg.ravel(), 1)
    target_counts = np.bincount(items, minlength=n_items)
    probs = (n_targets - target_counts) / (n_items - 1)
    assert chi2_pvalue(counts, probs) > P_MIN


def test_negatives_with_replacement_repeat_items() -> None:
    neg = draw_negatives(1, 0, np.arange(2000), np.zeros(2000, np.int64), 20, 19, replace=True)
    srt = np.sort(neg, axis=1)
    assert np.any(srt[:, 1:] == srt[:, :-1])  # duplicates occur with replacement


@pytest.mark.parametrize(("pool_size", "n_neg"), [(12, 4), (8, 6)])
def test_without_replacement_subsets_are_uniform(pool_size: int, n_neg: int) -> None:
    """Sparse (redraw duplicates) and dense (n-1 > pool/2) paths both give uniform subsets."""
    n_items, n_targets = pool_size + 1, 40_000
    items = np.full(n_targets, n_items - 1)  # pool = items 0..pool_size-1
    neg = draw_negatives(2, 0, np.arange(n_targets), items, n_items, n_neg + 1, replace=False)
    subsets = list(itertools.combinations(range(pool_size), n_neg))
    index = {s: i for i, s in enumerate(subsets)}
    counts = np.bincount([index[tuple(sorted(row))] for row in neg.tolist()],
                         minlength=len(subsets))
    assert chi2_pvalue(counts, np.ones(len(subsets))) > P_MIN


def test_sample_sets_depend_on_seed_and_repeat_only() -> None:
    rng = np.random.default_rng(1)
    items = rng.integers(0, 500, 10_000)
    users = np.arange(10_000)
    a = draw_negatives(3, 1, users, items, 500, 100)
    np.testing.assert_array_equal(a, draw_negatives(3, 1, users, items, 500, 100))
    assert not np.array_equal(a, draw_negatives(3, 2, users, items, 500, 100))
    assert not np.array_equal(a, draw_negatives(4, 1, users, items, 500, 100))
    # any set of positions gives the same draws as the full list (blocks are fixed)
    sampler = NegativeSampler(3, users, items, 500, 100)
    size = sampler.block_targets
    assert sampler.n_blocks > 3
    positions = np.array([0, 5, size - 1, size, 3 * size + 2, 9999])
    np.testing.assert_array_equal(sampler.negatives(1, positions), a[positions])
    np.testing.assert_array_equal(sampler.negatives(1, positions[::-1]), a[positions[::-1]])


def test_non_interacted_pool() -> None:
    rng = np.random.default_rng(2)
    n_users, n_items = 300, 40
    foldin = sp.random(n_users, n_items, density=0.3, format="csr", random_state=3)
    foldin.data[:] = 1
    free = np.asarray(foldin.toarray() == 0)
    target_items = np.array([rng.choice(np.flatnonzero(row)) for row in free])
    targets = sp.csr_matrix((np.ones(n_users), (np.arange(n_users), target_items)),
                            shape=(n_users, n_items))
    for replace in (True, False):
        neg = draw_negatives(9, 0, np.arange(n_users), target_items, n_items, 8, replace,
                             pool="non_interacted", foldin=foldin, targets=targets)
        excluded = foldin.toarray().astype(bool) | targets.toarray().astype(bool)
        assert not np.any(np.take_along_axis(excluded, neg, axis=1))
    # uniform over each user's pool: many draws for one user
    user = 0
    pool = np.flatnonzero(~(foldin[user].toarray()[0].astype(bool)))
    pool = pool[pool != target_items[user]]
    reps = 20_000
    neg = draw_negatives(9, 0, np.zeros(reps, np.int64), np.full(reps, target_items[user]),
                         n_items, 5, True, "non_interacted", foldin, targets)
    counts = np.bincount(neg.ravel(), minlength=n_items)
    probs = np.zeros(n_items)
    probs[pool] = 1
    assert chi2_pvalue(counts, probs) > P_MIN


def test_sample_stream_definition() -> None:
    """Block b of repeat k is drawn by default_rng(SeedSequence([seed, tag, k, b])).integers over
    the pool positions, shifted past the target (the definition the hook must keep)."""
    from linrec.eval.negatives import _SEED_TAG

    rng = np.random.default_rng(13)
    n_items, sample_size, n_targets, seed = 300, 50, 7001, 21
    items = rng.integers(0, n_items, n_targets)
    sampler = NegativeSampler(seed, np.arange(n_targets), items, n_items, sample_size)
    size = block_targets(sample_size)
    assert sampler.n_blocks >= 3
    for repeat in (0, 4):
        got = draw_negatives(seed, repeat, np.arange(n_targets), items, n_items, sample_size)
        for b in range(sampler.n_blocks):
            lo, hi = b * size, min((b + 1) * size, n_targets)
            block_rng = np.random.default_rng(np.random.SeedSequence([seed, _SEED_TAG, repeat, b]))
            x = block_rng.integers(0, n_items - 1, size=(hi - lo, sample_size - 1))
            np.testing.assert_array_equal(got[lo:hi], x + (x >= items[lo:hi, None]))
            # run(): read-only views of the same block for any sub-range inside it
            view = sampler.run(repeat, lo + 1, hi)
            assert not view.flags.writeable
            np.testing.assert_array_equal(view, got[lo + 1 : hi])
    with pytest.raises(ConfigError, match="not inside one sampling block"):
        sampler.run(0, size - 1, size + 1)


def test_bad_input() -> None:
    items = np.array([1, 2])
    with pytest.raises(ConfigError, match=r"sample_size=50 is out of range; allowed: "
                                          r"an integer >= 2 and <= 49"):
        draw_negatives(0, 0, np.arange(2), items, 50, 50)
    with pytest.raises(ConfigError, match="pool='random'"):
        draw_negatives(0, 0, np.arange(2), items, 50, 10, pool="random")
    with pytest.raises(ConfigError, match="seed=-1"):
        draw_negatives(-1, 0, np.arange(2), items, 50, 10)
    with pytest.raises(ConfigError, match="foldin= and targets="):
        draw_negatives(0, 0, np.arange(2), items, 50, 10, pool="non_interacted")
    with pytest.raises(DataError, match=r"target item ids must lie in \[0, 49\]"):
        draw_negatives(0, 0, np.arange(2), np.array([1, 50]), 50, 10)
    with pytest.raises(ConfigError, match=r"global_ranks\[1\]=51 .*\[1, 50\]"):
        simulate_sampled_ranks(np.array([1, 51]), 50, 10, rng=0)
    with pytest.raises(ConfigError, match="rng is required"):
        simulate_sampled_ranks(np.array([1, 5]), 50, 10)
    with pytest.raises(ConfigError, match=r"global_ranks\[0\]=0"):
        simulate_adaptive_ranks(np.array([0]), 5000, rng=0)
    with pytest.raises(ConfigError, match="rng="):
        simulate_sampled_ranks(np.array([1]), 50, 10, rng="seed")
    # a pool too small for sampling without replacement
    foldin = sp.csr_matrix(np.array([[1] * 45 + [0] * 5], dtype=np.float32))
    targets = sp.csr_matrix(np.array([[0] * 45 + [1] + [0] * 4], dtype=np.float32))
    with pytest.raises(DataError, match="pool of 4 items"):
        draw_negatives(0, 0, np.array([0]), np.array([45]), 50, 10, False, "non_interacted",
                       foldin, targets)
    eval_set = EvalSet(np.arange(1), foldin, targets)
    with pytest.raises(DataError, match="EvalSet.negatives"):
        SampledRankHook(eval_set, 50, None, seed=0, pool="given")
    with pytest.raises(ConfigError, match="repeats=0"):
        SampledRankHook(eval_set, 50, 10, seed=0, repeats=0)
    assert math.isfinite(adaptive_levels(50, n0=10, n_max=40)[-1])
