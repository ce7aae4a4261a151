"""evaluate_exact: one batch pass, hooks, exact metrics (linrec/eval/evaluator.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.data.splits import EvalSet
from linrec.errors import ConfigError, DataError
from linrec.eval.exact import evaluate_exact
from linrec.eval.metrics import EXACT_METRICS, exact_metrics
from linrec.eval.ranks import beats, global_ranks, tie_break_keys_at
from tests.conftest import LinearScores, make_evalset
from tests.eval.conftest import brute_force_ranks, rank_dict


class RecordingHook:
    """Checks the hook protocol on every call and ranks each target among *all* its candidates
    with the same rule a sampled-rank hook uses: r = 1 + #{j that beat t}, which must equal R."""

    def __init__(self, evalset: EvalSet, model: LinearScores, seed: int, users_known: bool) -> None:
        self.evalset, self.model, self.seed = evalset, model, seed
        self.users_known = users_known
        self.rows_seen: list[np.ndarray] = []
        self.sampled: dict = {}

    def __call__(self, rows, scores, keys, batch_ranks):
        self.rows_seen.append(rows.copy())
        users = self.evalset.users[rows] if self.users_known else None
        raw = self.model.score(self.evalset.foldin[rows], users)
        foldin = self.evalset.foldin[rows].toarray() > 0
        targets = self.evalset.targets[rows].toarray() > 0
        assert np.all(np.isneginf(scores[foldin]))
        np.testing.assert_array_equal(scores[~foldin], raw[~foldin])
        np.testing.assert_array_equal(
            keys[np.arange(len(rows))[:, None], np.arange(scores.shape[1])[None, :]],
            tie_break_keys_at(self.seed, self.evalset.users[rows][:, None],
                              np.arange(scores.shape[1])[None, :]))
        np.testing.assert_array_equal(batch_ranks.target_scores,
                                      raw[batch_ranks.rows, batch_ranks.items])
        dense_keys = np.asarray(keys)
        for r, t in zip(batch_ranks.rows, batch_ranks.items, strict=True):
            candidates = ~foldin[r] & ~targets[r]
            wins = beats(scores[r], dense_keys[r], scores[r, t], dense_keys[r, t]) & candidates
            self.sampled[(int(rows[r]), int(t))] = 1 + int(wins.sum())


@pytest.mark.parametrize("users_known", [True, False])
def test_evaluate_exact_one_pass(users_known):
    evalset = make_evalset(31, 60, seed=11)
    model = LinearScores(60, seed=1, decimals=1)
    hook = RecordingHook(evalset, model, seed=5, users_known=users_known)
    ks = [1, 10, 100]
    result = evaluate_exact(model, evalset, ks=ks, metrics=EXACT_METRICS, seed=5,
                            users_known=users_known, batch_hooks=[hook], batch_size=8)
    # hooks saw every row once, in order, in batches of 8
    assert [len(r) for r in hook.rows_seen] == [8, 8, 8, 7]
    np.testing.assert_array_equal(np.concatenate(hook.rows_seen), np.arange(31))
    # ranks: brute force, and the hook's "sample everything" rank equals R
    ranks = rank_dict(result.rank_table)
    scores = model.score(evalset.foldin, evalset.users if users_known else None)
    assert ranks == brute_force_ranks(scores, evalset, 5)
    assert hook.sampled == ranks
    # metrics: the same as exact_metrics of an independent global_ranks pass
    reference = exact_metrics(global_ranks(model, evalset, seed=5, users_known=users_known),
                              ks, EXACT_METRICS)
    assert result.metrics == reference.means
    for key, values in reference.per_user.items():
        np.testing.assert_array_equal(result.per_user[key], values)
    np.testing.assert_array_equal(result.per_user_rows, reference.rows)
    assert set(result.timings) == {"score", "rank", "hooks", "metrics", "total"}
    assert all(v >= 0 for v in result.timings.values())


def test_fold_in_items_ranked_among_all_items():
    """exclude_foldin=False (Li et al. 2020's binom/hyper protocol): the fold-in items compete
    with each target, the user's other targets still do not; ranks and metrics against a brute
    force over the raw scores, and every rank at least the masked one."""
    evalset = make_evalset(31, 60, seed=11)
    model = LinearScores(60, seed=1, decimals=1)  # ties: the keys decide
    scores = model.score(evalset.foldin, evalset.users)
    ranked = evaluate_exact(model, evalset, ks=[1, 10], metrics=["recall", "ndcg"], seed=5,
                            users_known=True, batch_size=8, exclude_foldin=False)
    masked = evaluate_exact(model, evalset, ks=[1, 10], metrics=["recall", "ndcg"], seed=5,
                            users_known=True, batch_size=8)
    assert rank_dict(ranked.rank_table) == brute_force_ranks(scores, evalset, 5,
                                                             exclude_foldin=False)
    assert np.all(ranked.rank_table.ranks >= masked.rank_table.ranks)
    assert np.any(ranked.rank_table.ranks > masked.rank_table.ranks)
    per_target = 60 - np.diff(evalset.targets.indptr) + 1  # every item but the other targets
    np.testing.assert_array_equal(ranked.rank_table.n_candidates,
                                  per_target[ranked.rank_table.rows])
    brute = brute_force_ranks(scores, evalset, 5, exclude_foldin=False)
    users = sorted({r for r, _ in brute})
    # a user's list puts its targets among the ranked items: the i-th best target (0-based)
    # sits at position R + i; Recall@10 = hits / |T| (LightGCN's)
    recall = np.mean([np.mean([rank + i <= 10 for i, rank in enumerate(
        sorted(rank for (r, _), rank in brute.items() if r == u))]) for u in users])
    assert ranked.metrics["recall@10"] == pytest.approx(recall, rel=1e-12)
    assert ranked.metrics["recall@10"] < masked.metrics["recall@10"]


def test_results_independent_of_memory_budget():
    evalset = make_evalset(40, 50, seed=12)
    model = LinearScores(50, decimals=0)
    results = [evaluate_exact(model, evalset, ks=[5, 20], metrics=["ndcg", "recall"], seed=1,
                              users_known=False, memory_budget_mb=mb)
               for mb in (50 * 16 * 3 / 2**20, 512)]
    assert results[0].metrics == results[1].metrics
    np.testing.assert_array_equal(results[0].rank_table.ranks, results[1].rank_table.ranks)


def test_users_without_targets_are_left_out():
    evalset = make_evalset(12, 30, seed=13, target_p=0.05)
    has_targets = np.flatnonzero(np.diff(evalset.targets.indptr) > 0)
    assert len(has_targets) < 12
    result = evaluate_exact(LinearScores(30), evalset, ks=[5], metrics=["recall"], seed=0,
                            users_known=False)
    np.testing.assert_array_equal(result.per_user_rows, has_targets)


def test_bad_inputs():
    evalset = make_evalset(6, 20, seed=14, min_targets=1)
    model = LinearScores(20)
    with pytest.raises(ConfigError, match="K=0"):
        evaluate_exact(model, evalset, ks=[0], metrics=["recall"], seed=0, users_known=False)
    with pytest.raises(ConfigError, match="'recal'"):
        evaluate_exact(model, evalset, ks=[5], metrics=["recal"], seed=0, users_known=False)
    empty = EvalSet(users=evalset.users, foldin=evalset.foldin,
                    targets=sp.csr_matrix(evalset.targets.shape, dtype=np.float32))
    with pytest.raises(DataError, match="no held-out items"):
        evaluate_exact(model, empty, ks=[5], metrics=["recall"], seed=0, users_known=False)


def _written_out_metrics(scores, evalset, seed, ks):
    """Every exact metric of every user with targets, from the user's whole ranked list (score
    descending, then the seeded tie-break key) of the items that are not fold-in, with the
    metrics' textbook definitions written out here (docs/concepts/evaluation.md)."""
    foldin, targets = evalset.foldin.toarray() > 0, evalset.targets.toarray() > 0
    per_user: dict[str, list[float]] = {}
    for r in range(scores.shape[0]):
        wanted = np.flatnonzero(targets[r])
        if wanted.size == 0:
            continue
        keys = tie_break_keys_at(seed, np.full(scores.shape[1], evalset.users[r]),
                                 np.arange(scores.shape[1]))
        items = [i for i in range(scores.shape[1]) if not foldin[r, i]]
        ranked = sorted(items, key=lambda i: (-scores[r, i], keys[i]))
        positions = sorted(ranked.index(t) + 1 for t in wanted)  # 1-based, best first
        n_t, others = len(positions), len(ranked) - len(positions)
        values = {}
        for k in ks:
            hits = [p for p in positions if p <= k]
            values[f"recall@{k}"] = len(hits) / n_t
            values[f"recall_trunc@{k}"] = len(hits) / min(k, n_t)
            values[f"precision@{k}"] = len(hits) / k
            values[f"hr@{k}"] = float(bool(hits))
            idcg = sum(1 / np.log2(1 + i) for i in range(1, min(k, n_t) + 1))
            values[f"ndcg@{k}"] = sum(1 / np.log2(1 + p) for p in hits) / idcg
            values[f"ap@{k}"] = sum((j + 1) / p for j, p in enumerate(hits)) / min(k, n_t)
            values[f"mrr@{k}"] = 1 / positions[0] if positions[0] <= k else 0.0
        # AUC: the share of (target, non-target) pairs the target wins
        above = [p - 1 - j for j, p in enumerate(positions)]  # non-targets ranked above each
        values["auc"] = float(np.mean([(others - a) / others for a in above]))
        for key, value in values.items():
            per_user.setdefault(key, []).append(value)
    return {key: float(np.mean(v)) for key, v in per_user.items()}


@pytest.mark.parametrize("decimals", [None, 1])
def test_evaluate_exact_equals_every_metric_written_out_from_each_users_ranked_list(decimals):
    """Against the brute force of `_written_out_metrics` at 1e-12, with continuous scores and
    with scores rounded to one decimal (ties broken by the seeded key)."""
    evalset = make_evalset(40, 70, seed=3, min_targets=1)
    model = LinearScores(70, seed=2, decimals=decimals)
    ks = [1, 3, 10, 70]
    result = evaluate_exact(model, evalset, ks=ks, metrics=EXACT_METRICS, seed=8,
                            users_known=True, batch_size=16)
    expected = _written_out_metrics(model.score(evalset.foldin, evalset.users), evalset, 8, ks)
    assert set(result.metrics) == set(expected)
    for key, value in expected.items():
        assert result.metrics[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
