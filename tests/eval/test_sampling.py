"""Item sampling, sampled ranks, rank simulation and adaptive sampling (spec/evaluation.md §0.2,
§0.3, §2.4, §8.2–§8.5): properties, brute force, distributional agreement, V15."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from linrec.data.splits import EvalSet
from linrec.errors import ConfigError, DataError
from linrec.eval.negatives import NegativeSampler, block_targets, canonical_targets, draw_negatives
from linrec.eval.ranks import BatchKeys, tie_break_keys
from linrec.eval.sampled_ranks import SampledRankHook, sampled_ranks_from_scores
from linrec.eval.simulate import (
    AdaptiveSample,
    adaptive_levels,
    efficiency_curve,
    simulate_adaptive_ranks,
    simulate_sampled_ranks,
)

P_MIN = 1e-3  # generous threshold of the goodness-of-fit tests (fixed seeds)


def _chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square goodness of fit, cells with expected count < 5 merged into one."""
    counts = np.asarray(counts, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    assert counts.shape == probs.shape
    assert np.all(counts[probs == 0] == 0), "observed an impossible outcome"
    expected = probs / probs.sum() * counts.sum()
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    if keep.sum() < 2:  # a point mass: the impossible-outcome check above is the whole test
        return 1.0
    return float(stats.chisquare(obs[keep], exp[keep]).pvalue)


# ------------------------------------------------------------------------------------------
# draw_negatives
# ------------------------------------------------------------------------------------------


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
    assert _chi2_pvalue(counts, probs) > P_MIN


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
    assert _chi2_pvalue(counts, np.ones(len(subsets))) > P_MIN


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
    assert _chi2_pvalue(counts, probs) > P_MIN


# ------------------------------------------------------------------------------------------
# sampled ranks from scores
# ------------------------------------------------------------------------------------------


def _brute_force_sampled_rank(scores: np.ndarray, keys: np.ndarray, t: int,
                              sampled: np.ndarray, excluded: set[int]) -> int:
    """Position of t in the full order (score desc, key asc) vs its sampled items, by sorting."""
    order = np.lexsort((keys, -scores))
    position = np.empty(len(scores), dtype=np.int64)
    position[order] = np.arange(len(scores))
    return 1 + sum(1 for j in sampled if j not in excluded and position[j] < position[t])


def test_sampled_ranks_brute_force_with_ties_and_exclusions() -> None:
    rng = np.random.default_rng(4)
    batch, n_items, n_targets, n_neg = 12, 50, 200, 25
    scores = rng.integers(0, 4, size=(batch, n_items)).astype(np.float64)  # many ties
    keys = rng.random((batch, n_items))
    rows = rng.integers(0, batch, n_targets)
    items = rng.integers(0, n_items, n_targets)
    negatives = rng.integers(0, n_items, (n_targets, n_neg))
    excluded = rng.random((batch, n_items)) < 0.2
    excluded[rows, items] = False
    got_dense = sampled_ranks_from_scores(scores, keys, rows, items, negatives, excluded)
    got_sparse = sampled_ranks_from_scores(scores, keys, rows, items, negatives,
                                           sp.csr_matrix(excluded))
    masked = np.where(excluded, -np.inf, scores)
    got_masked = sampled_ranks_from_scores(masked, keys, rows, items, negatives)
    want = [_brute_force_sampled_rank(scores[r], keys[r], t, negatives[i],
                                      set(np.flatnonzero(excluded[r])))
            for i, (r, t) in enumerate(zip(rows, items, strict=True))]
    np.testing.assert_array_equal(got_dense, want)
    np.testing.assert_array_equal(got_sparse, want)
    np.testing.assert_array_equal(got_masked, want)


def test_identity_with_global_rank() -> None:
    """r = 1 + #{sampled j : pos(j) < R} with pos from the exact ranking (spec §0.3)."""
    rng = np.random.default_rng(5)
    n_items = 300
    scores = rng.integers(0, 30, size=(1, n_items)).astype(np.float64)
    keys = rng.random((1, n_items))
    order = np.lexsort((keys[0], -scores[0]))
    global_rank = np.empty(n_items, dtype=np.int64)
    global_rank[order] = np.arange(1, n_items + 1)
    items = rng.integers(0, n_items, 500)
    negatives = draw_negatives(0, 0, np.zeros(500, np.int64), items, n_items, 40)
    got = sampled_ranks_from_scores(scores, keys, np.zeros(500, np.int64), items, negatives)
    want = 1 + (global_rank[negatives] < global_rank[items][:, None]).sum(axis=1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("replace", [True, False])
def test_real_sampling_matches_simulation_in_distribution(replace: bool) -> None:
    """Real sampled items ranked by scores follow the law of simulate_sampled_ranks (§2.4)."""
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
            assert _chi2_pvalue(counts, pmf) > P_MIN
        if global_rank > 1:
            assert stats.ks_2samp(real, simulated).pvalue > P_MIN


def test_simulate_per_target_catalogue_sizes() -> None:
    """n_items may be per target (pool='non_interacted': N_u); R = N_u gives r = n exactly."""
    sizes = np.array([50, 80, 120])
    got = simulate_sampled_ranks(sizes, sizes, 10, True, np.random.default_rng(0))
    np.testing.assert_array_equal(got, [10, 10, 10])
    got = simulate_sampled_ranks(np.ones(3, np.int64), sizes, 10, False, 0)
    np.testing.assert_array_equal(got, [1, 1, 1])


# ------------------------------------------------------------------------------------------
# evaluator hook
# ------------------------------------------------------------------------------------------


def _toy_eval_set(n_users: int, n_items: int, seed: int) -> EvalSet:
    rng = np.random.default_rng(seed)
    dense = rng.random((n_users, n_items))
    foldin = sp.csr_matrix((dense < 0.1).astype(np.float32))
    targets = sp.csr_matrix(((dense >= 0.1) & (dense < 0.125)).astype(np.float32))
    return EvalSet(users=np.arange(n_users), foldin=foldin, targets=targets)


def _run_hook(hook: SampledRankHook, scores: np.ndarray, keys: np.ndarray, batch: int) -> None:
    for lo in range(0, scores.shape[0], batch):
        rows = np.arange(lo, min(lo + batch, scores.shape[0]))
        hook(rows, scores[rows], keys[rows])


@pytest.mark.parametrize("pool", ["all_but_target", "non_interacted"])
def test_hook_batch_size_and_model_invariance(pool: str) -> None:
    n_users, n_items, sample_size = 1500, 120, 100
    eval_set = _toy_eval_set(n_users, n_items, 0)
    rows, items = canonical_targets(eval_set)
    assert len(items) > 3 * block_targets(sample_size)  # the pass crosses block boundaries
    rng = np.random.default_rng(1)
    keys = rng.random((n_users, n_items))
    models = [rng.normal(size=(n_users, n_items)), rng.normal(size=(n_users, n_items))]
    foldin = eval_set.foldin.toarray().astype(bool)
    target_mask = eval_set.targets.toarray().astype(bool)
    results = {}
    for m, scores in enumerate(models):
        masked = np.where(foldin, -np.inf, scores)  # the evaluator masks fold-in items only
        for batch in (7, 256, n_users):
            hook = SampledRankHook(eval_set, n_items, sample_size, seed=3, repeats=2, pool=pool)
            _run_hook(hook, masked, keys, batch)
            results[m, batch] = hook.result()
        # brute force on the canonical negatives (same for both models)
        excluded = sp.csr_matrix(foldin | target_mask) if pool == "non_interacted" else None
        for repeat in range(2):
            neg = draw_negatives(3, repeat, rows, items, n_items, sample_size, pool=pool,
                                 foldin=eval_set.foldin if excluded is not None else None,
                                 targets=eval_set.targets if excluded is not None else None)
            # fold-in items and the user's other targets never beat t
            want = sampled_ranks_from_scores(scores, keys, rows, items, neg,
                                             excluded_mask=foldin | target_mask)
            np.testing.assert_array_equal(results[m, 7][repeat], want)
    for m in range(2):
        for batch in (256, n_users):
            np.testing.assert_array_equal(results[m, batch], results[m, 7])
    assert not np.array_equal(results[0, 7], results[1, 7])


class _FixedScores:
    """A stand-in model whose scores are a fixed matrix (rows = eval rows; ties on purpose)."""

    def __init__(self, scores: np.ndarray) -> None:
        self.scores = scores

    def score(self, foldin: sp.csr_matrix, users: np.ndarray | None = None) -> np.ndarray:
        return self.scores[users]


def test_hook_inside_the_evaluator_pass() -> None:
    """Real batch pass (linrec.eval.exact): the hook's ranks equal 1 + #{sampled j ranked
    above t in the exact order}, for every batch size, and agree with the RankTable."""
    from linrec.eval.exact import evaluate_exact
    from linrec.eval.ranks import tie_break_keys

    n_users, n_items, seed = 60, 80, 5
    eval_set = _toy_eval_set(n_users, n_items, 3)
    rng = np.random.default_rng(8)
    model = _FixedScores(rng.integers(0, 5, size=(n_users, n_items)).astype(np.float32))
    runs = {}
    for batch in (1, 7, n_users):
        hook = SampledRankHook(eval_set, n_items, 15, seed=2, repeats=3)
        result = evaluate_exact(model, eval_set, ks=[10], metrics=["recall"], seed=seed,
                                users_known=True, batch_hooks=[hook], batch_size=batch)
        runs[batch] = hook.result()
    for batch in (7, n_users):
        np.testing.assert_array_equal(runs[batch], runs[1])
    rows, items = canonical_targets(eval_set)
    keys = tie_break_keys(seed, eval_set.users, n_items)
    excluded = eval_set.foldin.toarray().astype(bool) | eval_set.targets.toarray().astype(bool)
    table = result.rank_table
    global_rank = {(r, t): g for r, t, g in zip(table.rows, table.items, table.ranks, strict=True)}
    for repeat in range(3):
        negatives = draw_negatives(2, repeat, rows, items, n_items, 15)
        for i, (r, t) in enumerate(zip(rows, items, strict=True)):
            order = np.lexsort((keys[r], -model.scores[r].astype(np.float64)))
            order = order[~excluded[r][order] | (order == t)]  # candidates only
            position = {int(j): p for p, j in enumerate(order)}
            assert global_rank[r, t] == position[t] + 1
            want = 1 + sum(1 for j in negatives[i] if int(j) in position
                           and position[int(j)] < position[t])
            assert runs[1][repeat, i] == want


def test_hook_given_negatives() -> None:
    n_users, n_items = 40, 60
    rng = np.random.default_rng(6)
    target_items = rng.integers(0, n_items, n_users)
    negatives = np.stack([rng.choice(np.setdiff1d(np.arange(n_items), [t]), 9, replace=False)
                          for t in target_items])
    targets = sp.csr_matrix((np.ones(n_users), (np.arange(n_users), target_items)),
                            shape=(n_users, n_items))
    eval_set = EvalSet(np.arange(n_users), sp.csr_matrix((n_users, n_items)), targets, negatives)
    scores, keys = rng.normal(size=(n_users, n_items)), rng.random((n_users, n_items))
    hook = SampledRankHook(eval_set, n_items, None, seed=0, pool="given")
    assert hook.sample_size == 10
    _run_hook(hook, scores, keys, 16)
    rows = np.arange(n_users)
    want = 1 + (scores[rows[:, None], negatives] > scores[rows, target_items][:, None]).sum(1)
    np.testing.assert_array_equal(hook.result()[0], want)


def test_hook_reports_unscored_targets() -> None:
    eval_set = _toy_eval_set(30, 50, 2)
    hook = SampledRankHook(eval_set, 50, 10, seed=0)
    hook(np.arange(10), np.zeros((10, 50)), np.zeros((10, 50)))
    with pytest.raises(DataError, match="never scored"):
        hook.result()


def _brute_force_hook_ranks(eval_set: EvalSet, scores: np.ndarray, keys: np.ndarray,
                            rows: np.ndarray, items: np.ndarray,
                            negatives: np.ndarray) -> np.ndarray:
    """Per target, in plain Python: 1 + #{sampled j that are neither fold-in nor targets of the
    user and beat t: s_j > s_t, or s_j == s_t and key_j < key_t} (spec §0.3)."""
    foldin, targets = eval_set.foldin.tolil().rows, eval_set.targets.tolil().rows
    out = []
    for i, (r, t) in enumerate(zip(rows.tolist(), items.tolist(), strict=True)):
        excluded = set(foldin[r]) | set(targets[r])
        s_t, k_t = scores[r, t], keys[r, t]
        out.append(1 + sum(1 for j in negatives[i].tolist() if j not in excluded and (
            scores[r, j] > s_t or (scores[r, j] == s_t and keys[r, j] < k_t))))
    return np.array(out, dtype=np.int64)


def _multi_target_eval_set(n_users: int, n_items: int, seed: int,
                           n_given: int | None = None) -> EvalSet:
    """Users with 1..6 targets and 0..10 fold-in items (some users without fold-in)."""
    rng = np.random.default_rng(seed)
    foldin, targets = np.zeros((2, n_users, n_items), dtype=np.float32)
    for u in range(n_users):
        picked = rng.choice(n_items, size=int(rng.integers(1, 7)) + int(rng.integers(0, 11)),
                            replace=False)
        n_targets = min(len(picked), int(rng.integers(1, 7)))
        targets[u, picked[:n_targets]] = 1
        foldin[u, picked[n_targets:]] = 1
    negatives = None
    if n_given is not None:  # given negatives may hit fold-in items and the user's other targets
        negatives = rng.integers(0, n_items, size=(n_users, n_given))
        for u in range(n_users):
            first = np.flatnonzero(targets[u])[0]
            negatives[u][negatives[u] == first] = (first + 1) % n_items
    return EvalSet(np.arange(n_users), sp.csr_matrix(foldin), sp.csr_matrix(targets), negatives)


@pytest.mark.parametrize("pool", ["all_but_target", "non_interacted", "given"])
@pytest.mark.parametrize("masked", [True, False])
def test_hook_fast_path_equals_brute_force(pool: str, masked: bool) -> None:
    """The hook (in-place -inf masking, block-aligned pieces, chunked kernel) against a per-target
    brute force: heavy score ties, multi-target users, fold-in masked by the evaluator or not,
    contiguous batches and a shuffled batch (the generic path), read-only scores, and targets
    with a non-finite score (the explicit-mask fallback)."""
    n_users, n_items, sample_size, repeats = 160, 40, 12, 3
    eval_set = _multi_target_eval_set(n_users, n_items, 7, sample_size - 1 if pool == "given"
                                      else None)
    rows, items = canonical_targets(eval_set)
    rng = np.random.default_rng(8)
    scores = rng.integers(0, 4, size=(n_users, n_items)).astype(np.float32)  # many ties
    scores[rng.random(scores.shape) < 0.03] = -np.inf  # some candidates at -inf
    scores[rows[:3], items[:3]] = -np.inf  # non-finite target scores: fallback path
    keys = tie_break_keys(11, eval_set.users, n_items)
    if masked:
        scores[eval_set.foldin.toarray() > 0] = -np.inf
    hook_repeats = 1 if pool == "given" else repeats
    if pool == "given":
        negatives = [eval_set.negatives[rows]]
    else:
        negatives = [draw_negatives(5, r, rows, items, n_items, sample_size, pool=pool,
                                    foldin=eval_set.foldin, targets=eval_set.targets)
                     for r in range(repeats)]
    want = np.stack([_brute_force_hook_ranks(eval_set, scores, keys, rows, items, neg)
                     for neg in negatives])
    assert np.unique(want).size > 3
    for batch in (1, 13, n_users):
        hook = SampledRankHook(eval_set, n_items, None if pool == "given" else sample_size,
                               seed=5, repeats=hook_repeats, pool=pool)
        for lo in range(0, n_users, batch):
            batch_rows = np.arange(lo, min(lo + batch, n_users))
            batch_scores = scores[batch_rows]
            before = batch_scores.copy()
            hook(batch_rows, batch_scores, BatchKeys(11, eval_set.users[batch_rows], n_items))
            np.testing.assert_array_equal(batch_scores, before)  # restored after the call
        np.testing.assert_array_equal(hook.result(), want)
    # a shuffled batch of read-only, non-contiguous scores (Fortran order)
    hook = SampledRankHook(eval_set, n_items, None if pool == "given" else sample_size,
                           seed=5, repeats=hook_repeats, pool=pool)
    order = np.random.default_rng(9).permutation(n_users)
    frozen = np.asfortranarray(scores[order])
    frozen.flags.writeable = False
    hook(order, frozen, keys[order])
    np.testing.assert_array_equal(hook.result(), want)
    # integer scores (no -inf possible): converted, never written to
    int_scores = np.where(np.isfinite(scores), scores, -1).astype(np.int64)
    want_int = np.stack([_brute_force_hook_ranks(eval_set, int_scores, keys, rows, items, neg)
                         for neg in negatives])
    hook = SampledRankHook(eval_set, n_items, None if pool == "given" else sample_size,
                           seed=5, repeats=hook_repeats, pool=pool)
    before = int_scores.copy()
    hook(np.arange(n_users), int_scores, keys)
    np.testing.assert_array_equal(int_scores, before)
    np.testing.assert_array_equal(hook.result(), want_int)


def test_kernel_chunks_and_unsorted_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """sampled_ranks_from_scores in many small chunks (cache read-ahead on, and off for unsorted
    rows) equals the sort-based brute force."""
    import linrec.eval.sampled_ranks as sampling

    monkeypatch.setattr(sampling, "_KERNEL_ENTRIES", 64)
    monkeypatch.setattr(sampling, "_TOUCH_FLOATS", 150)
    rng = np.random.default_rng(12)
    batch, n_items, n_targets, n_neg = 9, 50, 300, 7
    scores = rng.integers(0, 5, size=(batch, n_items)).astype(np.float64)
    keys = rng.random((batch, n_items))
    for rows in (np.sort(rng.integers(0, batch, n_targets)), rng.integers(0, batch, n_targets)):
        items = rng.integers(0, n_items, n_targets)
        negatives = rng.integers(0, n_items, (n_targets, n_neg))
        got = sampled_ranks_from_scores(scores, keys, rows, items, negatives)
        want = [_brute_force_sampled_rank(scores[r], keys[r], t, negatives[i], set())
                for i, (r, t) in enumerate(zip(rows, items, strict=True))]
        np.testing.assert_array_equal(got, want)


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


# ------------------------------------------------------------------------------------------
# adaptive sampling (V15) and efficiency
# ------------------------------------------------------------------------------------------


def _nested_pmf(global_rank: int, n_items: int, levels: np.ndarray, replace: bool) -> dict:
    """P(n_u = n_j, r_u = r) of Algorithm 1 from the nested likelihood (spec §8.3)."""
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
def test_v15_adaptive_matches_nested_likelihood(replace: bool) -> None:
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
    assert _chi2_pvalue(observed, np.array([pmf[c] for c in cells])) > 0.01
    if replace:
        # spec §8.3 example: (n_u, r_u) = (20, 2) has probability 0.1369
        assert pmf[20, 2] == pytest.approx(0.1369, abs=5e-4)
        assert np.mean((sample.sample_sizes == 20) & (sample.sampled_ranks == 2)) == \
            pytest.approx(0.1369, abs=4e-3)


def test_v15_em_posterior_same_under_both_likelihoods() -> None:
    """The paper likelihood Bin(r-1; n_u-1, θ) and the nested one differ by a factor free of R,
    so EM posteriors over R agree (spec §8.3)."""
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


def test_simulation_is_fast_for_100k_targets() -> None:
    rng = np.random.default_rng(0)
    ranks = rng.integers(1, 20_001, 100_000)
    r = simulate_sampled_ranks(ranks, 20_000, 100, True, rng)
    a = simulate_adaptive_ranks(ranks, 20_000, rng)
    assert r.shape == a.sampled_ranks.shape == (100_000,)


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------


def test_bad_input() -> None:
    items = np.array([1, 2])
    with pytest.raises(ConfigError, match=r"sample_size=50 .*\[2, 49\]"):
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
