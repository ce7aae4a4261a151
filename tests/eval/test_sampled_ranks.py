"""Sampled ranks of a trained model (docs/concepts/evaluation.md, ties): the kernel
`sampled_ranks_from_scores` against a sort-based brute force (score ties, exclusions, small chunks,
unsorted rows) and its identity with the global rank; `SampledRankHook` invariant to the batch
size and the model, with given negatives, reporting unscored targets, its fast path against a
per-target brute force, and inside the evaluator's batch pass."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.data.splits import EvalSet
from linrec.errors import DataError
from linrec.eval.negatives import block_targets, canonical_targets, draw_negatives
from linrec.eval.ranks import BatchKeys, tie_break_keys
from linrec.eval.sampled_ranks import SampledRankHook, sampled_ranks_from_scores
from tests.conftest import FixedScores


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
    """r = 1 + #{sampled j : pos(j) < R} with pos from the exact ranking
    (docs/concepts/evaluation.md, ties)."""
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


def test_hook_inside_the_evaluator_pass() -> None:
    """Real batch pass (linrec.eval.exact): the hook's ranks equal 1 + #{sampled j ranked
    above t in the exact order}, for every batch size, and agree with the RankTable."""
    from linrec.eval.exact import evaluate_exact
    from linrec.eval.ranks import tie_break_keys

    n_users, n_items, seed = 60, 80, 5
    eval_set = _toy_eval_set(n_users, n_items, 3)
    rng = np.random.default_rng(8)
    model = FixedScores(rng.integers(0, 5, size=(n_users, n_items)).astype(np.float32))
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
                            negatives: np.ndarray, exclude_foldin: bool = True) -> np.ndarray:
    """Per target, in plain Python: 1 + #{sampled j that are neither targets of the user nor
    (unless exclude_foldin is false) its fold-in items and beat t: s_j > s_t, or s_j == s_t and
    key_j < key_t} (docs/concepts/evaluation.md, ties)."""
    foldin, targets = eval_set.foldin.tolil().rows, eval_set.targets.tolil().rows
    out = []
    for i, (r, t) in enumerate(zip(rows.tolist(), items.tolist(), strict=True)):
        excluded = (set(foldin[r]) if exclude_foldin else set()) | set(targets[r])
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


@pytest.mark.parametrize("pool, exclude_foldin", [
    ("all_but_target", True), ("non_interacted", True), ("given", True),
    ("all_but_target", False), ("given", False)])
@pytest.mark.parametrize("masked", [True, False])
def test_hook_fast_path_equals_brute_force(pool: str, exclude_foldin: bool,
                                           masked: bool) -> None:
    """The hook (in-place -inf masking, block-aligned pieces, chunked kernel) against a per-target
    brute force: heavy score ties, multi-target users, fold-in masked by the evaluator or not,
    fold-in excluded from the sampled ranks or ranked (exclude_foldin=False), contiguous batches
    and a shuffled batch (the generic path), read-only scores, and targets with a non-finite
    score (the explicit-mask fallback)."""
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
    want = np.stack([_brute_force_hook_ranks(eval_set, scores, keys, rows, items, neg,
                                             exclude_foldin)
                     for neg in negatives])
    assert np.unique(want).size > 3
    for batch in (1, 13, n_users):
        hook = SampledRankHook(eval_set, n_items, None if pool == "given" else sample_size,
                               seed=5, repeats=hook_repeats, pool=pool,
                               exclude_foldin=exclude_foldin)
        for lo in range(0, n_users, batch):
            batch_rows = np.arange(lo, min(lo + batch, n_users))
            batch_scores = scores[batch_rows]
            before = batch_scores.copy()
            hook(batch_rows, batch_scores, BatchKeys(11, eval_set.users[batch_rows], n_items))
            np.testing.assert_array_equal(batch_scores, before)  # restored after the call
        np.testing.assert_array_equal(hook.result(), want)
    # a shuffled batch of read-only, non-contiguous scores (Fortran order)
    hook = SampledRankHook(eval_set, n_items, None if pool == "given" else sample_size,
                           seed=5, repeats=hook_repeats, pool=pool,
                               exclude_foldin=exclude_foldin)
    order = np.random.default_rng(9).permutation(n_users)
    frozen = np.asfortranarray(scores[order])
    frozen.flags.writeable = False
    hook(order, frozen, keys[order])
    np.testing.assert_array_equal(hook.result(), want)
    # integer scores (no -inf possible): converted, never written to
    int_scores = np.where(np.isfinite(scores), scores, -1).astype(np.int64)
    want_int = np.stack([_brute_force_hook_ranks(eval_set, int_scores, keys, rows, items, neg,
                                                 exclude_foldin)
                         for neg in negatives])
    hook = SampledRankHook(eval_set, n_items, None if pool == "given" else sample_size,
                           seed=5, repeats=hook_repeats, pool=pool,
                               exclude_foldin=exclude_foldin)
    before = int_scores.copy()
    hook(np.arange(n_users), int_scores, keys)
    np.testing.assert_array_equal(int_scores, before)
    np.testing.assert_array_equal(hook.result(), want_int)
