"""Exact metrics of a RankTable (Rendle 2019, eqs. 2–8–1.2, Liang et al. 2018) against
a per-user brute force, a transcription of Liang et al.'s VAE-CF evaluation code, the Rendle 2019,
eqs. 9–15 single-item forms and the Rendle running example (Rendle 2019, the running example)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from linrec.errors import ConfigError, DataError
from linrec.eval.metrics import (
    EXACT_METRICS,
    curve,
    exact_metrics,
    parse_metric_key,
    rank_gain,
    resolve_selection,
    target_positions,
)
from linrec.eval.ranks import RankTable, global_ranks, tie_break_keys
from tests.conftest import LinearScores, make_evalset

TOP_K = [m for m in EXACT_METRICS if m != "auc"]


def brute_force_metrics(scores, evalset, seed, ks):
    """Per user: full ranking of the non-fold-in items by (score desc, key asc), then the
    literal formulas of Rendle 2019, eqs. 2–8 on the 1-based positions of the held-out items."""
    n_users, n_items = scores.shape
    foldin, targets = evalset.foldin.toarray() > 0, evalset.targets.toarray() > 0
    keys = tie_break_keys(seed, evalset.users, n_items)
    out = {}
    for u in range(n_users):
        if not targets[u].any():
            continue
        listed = np.flatnonzero(~foldin[u])
        order = listed[np.lexsort((keys[u, listed], -scores[u, listed]))]
        relevant = set(np.flatnonzero(np.isin(order, np.flatnonzero(targets[u]))) + 1)
        n_pool, m = len(order), len(relevant)
        values = {}
        for k in ks:
            kk = min(k, n_items)
            hits = sum(1 for p in relevant if p <= kk)
            values[f"recall@{k}"] = hits / m
            values[f"recall_trunc@{k}"] = hits / min(kk, m)
            values[f"precision@{k}"] = hits / kk
            values[f"hr@{k}"] = float(hits > 0)
            dcg = sum(1 / np.log2(i + 1) for i in range(1, kk + 1) if i in relevant)
            idcg = sum(1 / np.log2(i + 1) for i in range(1, min(m, kk) + 1))
            values[f"ndcg@{k}"] = dcg / idcg
            prec = [sum(1 for p in relevant if p <= i) / i for i in range(1, kk + 1)]
            values[f"ap@{k}"] = sum(prec[i - 1] for i in range(1, kk + 1) if i in relevant) / min(
                m, kk)
            values[f"mrr@{k}"] = (1 / min(relevant)) if min(relevant) <= kk else 0.0
        others = [r for r in range(1, n_pool + 1) if r not in relevant]
        pairs = sum(1 for r in relevant for r2 in others if r < r2)
        values["auc"] = pairs / (m * (n_pool - m)) if others else np.nan
        out[u] = values
    return out


def check_against(result, expected):
    assert list(result.rows) == sorted(expected)
    for key, per_user in result.per_user.items():
        want = np.array([expected[u][key] for u in result.rows])
        np.testing.assert_allclose(per_user, want, rtol=1e-12, atol=1e-15, err_msg=key)
        np.testing.assert_allclose(result.means[key], np.nanmean(want), rtol=1e-12, err_msg=key)


@pytest.mark.parametrize("case", range(6))
def test_metrics_match_brute_force(case):
    rng = np.random.default_rng(100 + case)
    n_items = int(rng.integers(20, 130))
    evalset = make_evalset(int(rng.integers(5, 25)), n_items, seed=case,
                           foldin_p=rng.uniform(0.05, 0.5), target_p=rng.uniform(0.02, 0.3))
    model = LinearScores(n_items, seed=case, decimals=(0 if case % 2 else None))
    ks = [1, 5, 20, 100, n_items + 7]
    table = global_ranks(model, evalset, seed=case, users_known=False, batch_size=7)
    result = exact_metrics(table, ks, EXACT_METRICS)
    scores = model.score(evalset.foldin)
    check_against(result, brute_force_metrics(scores, evalset, case, ks))
    np.testing.assert_array_equal(result.users, evalset.users[result.rows])


# --- transcription of Liang et al. (VAE-CF notebook), bottleneck.argpartition -> np.argpartition
def NDCG_binary_at_k_batch(X_pred, heldout_batch, k=100):  # noqa: N802
    batch_users = X_pred.shape[0]
    idx_topk_part = np.argpartition(-X_pred, k, axis=1)
    topk_part = X_pred[np.arange(batch_users)[:, np.newaxis], idx_topk_part[:, :k]]
    idx_part = np.argsort(-topk_part, axis=1)
    idx_topk = idx_topk_part[np.arange(batch_users)[:, np.newaxis], idx_part]
    tp = 1.0 / np.log2(np.arange(2, k + 2))
    DCG = (heldout_batch[np.arange(batch_users)[:, np.newaxis], idx_topk].toarray() * tp).sum(
        axis=1)
    IDCG = np.array([(tp[: min(n, k)]).sum() for n in heldout_batch.getnnz(axis=1)])
    return DCG / IDCG


def Recall_at_k_batch(X_pred, heldout_batch, k=100):  # noqa: N802
    batch_users = X_pred.shape[0]
    idx = np.argpartition(-X_pred, k, axis=1)
    X_pred_binary = np.zeros_like(X_pred, dtype=bool)
    X_pred_binary[np.arange(batch_users)[:, np.newaxis], idx[:, :k]] = True
    X_true_binary = (heldout_batch > 0).toarray()
    tmp = (np.logical_and(X_true_binary, X_pred_binary).sum(axis=1)).astype(np.float32)
    recall = tmp / np.minimum(k, X_true_binary.sum(axis=1))
    return recall


@pytest.mark.parametrize("k", [1, 5, 20, 100])
def test_equals_liang_et_al(k):
    n_items = 300
    evalset = make_evalset(40, n_items, seed=k, foldin_p=0.2, target_p=0.05, min_targets=1)
    model = LinearScores(n_items, seed=k)  # continuous scores: no ties
    x_pred = model.score(evalset.foldin)
    x_pred[evalset.foldin.nonzero()] = -np.inf  # as in the notebook
    table = global_ranks(model, evalset, seed=0, users_known=False, batch_size=16)
    result = exact_metrics(table, [k], ["ndcg", "recall_trunc"])
    np.testing.assert_allclose(result.per_user[f"ndcg@{k}"],
                               NDCG_binary_at_k_batch(x_pred, evalset.targets, k), rtol=1e-12)
    np.testing.assert_allclose(result.per_user[f"recall_trunc@{k}"],
                               Recall_at_k_batch(x_pred, evalset.targets, k), rtol=1e-12)


def test_leave_one_out_single_item_forms():
    """One target per user: Rendle 2019, eqs. 9–15 forms of R (and AUC (n_pool - R)/(n_pool -
    1))."""
    rng = np.random.default_rng(8)
    n_users, n_items = 500, 1000
    ranks = rng.integers(1, 900, size=n_users)
    n_foldin = rng.integers(0, 100, size=n_users)
    n_cand = n_items - n_foldin
    table = RankTable(rows=np.arange(n_users), users=np.arange(n_users),
                      items=np.zeros(n_users, np.int32), ranks=ranks, n_candidates=n_cand,
                      n_items=n_items)
    ks = [1, 5, 20, 100, 5000]
    result = exact_metrics(table, ks, EXACT_METRICS)
    for k in ks:
        hit = (ranks <= k).astype(float)
        for name in ("recall", "recall_trunc", "hr"):
            np.testing.assert_array_equal(result.per_user[f"{name}@{k}"], hit)
        np.testing.assert_allclose(result.per_user[f"precision@{k}"], hit / min(k, n_items))
        np.testing.assert_allclose(result.per_user[f"ndcg@{k}"], hit / np.log2(ranks + 1))
        np.testing.assert_allclose(result.per_user[f"ap@{k}"], hit / ranks)
        np.testing.assert_allclose(result.per_user[f"mrr@{k}"], hit / ranks)
        np.testing.assert_allclose(result.means[f"ndcg@{k}"], np.mean(hit / np.log2(ranks + 1)))
    np.testing.assert_allclose(result.per_user["auc"], (n_cand - ranks) / (n_cand - 1))


def test_rendle_running_example():
    """Rendle 2019, the running example: N = 10,000, no fold-in; AP and NDCG unbounded (K = N),
    Recall@10."""
    expected = {  # AUC, AP, NDCG, Recall@10 (Rendle 2019, the running example, to 4 decimals)
        "A": ([100, 100, 100, 100, 100], 0.9901, 0.0100, 0.1502, 0.0),
        "B": ([40, 40, 8437, 9266, 4482], 0.5548, 0.0101, 0.1217, 0.0),
        "C": ([212, 2, 743, 5342, 1548], 0.8431, 0.1014, 0.2080, 0.2),
    }
    n = 10_000
    for ranks, auc, ap, ndcg, recall in expected.values():
        table = RankTable(rows=np.arange(5), users=np.arange(5), items=np.zeros(5, np.int32),
                          ranks=np.array(ranks), n_candidates=np.full(5, n), n_items=n)
        means = exact_metrics(table, [10, n], ["auc", "ap", "ndcg", "recall"]).means
        assert means["auc"] == pytest.approx(auc, abs=5e-5)
        assert means[f"ap@{n}"] == pytest.approx(ap, abs=5e-5)
        assert means[f"ndcg@{n}"] == pytest.approx(ndcg, abs=5e-5)
        assert means["recall@10"] == pytest.approx(recall, abs=1e-12)


def test_positions_add_back_other_targets():
    """Hand example: ranks among candidates (2, 2, 5) -> list positions (2, 3, 7)."""
    table = RankTable(rows=np.array([3, 3, 3]), users=np.array([9, 9, 9]),
                      items=np.array([4, 1, 2], np.int32), ranks=np.array([5, 2, 2]),
                      n_candidates=np.full(3, 8), n_items=12)
    pos = target_positions(table)
    np.testing.assert_array_equal(pos.positions, [2, 3, 7])
    np.testing.assert_array_equal(pos.n_pool, [10])
    result = exact_metrics(table, [3], ["recall", "ap", "ndcg", "mrr", "auc"])
    assert result.per_user["recall@3"][0] == pytest.approx(2 / 3)
    assert result.per_user["ap@3"][0] == pytest.approx((1 / 2 + 2 / 3) / 3)
    assert result.per_user["ndcg@3"][0] == pytest.approx(
        (1 / np.log2(3) + 1 / np.log2(4)) / (1 + 1 / np.log2(3) + 1 / np.log2(4)))
    assert result.per_user["mrr@3"][0] == pytest.approx(1 / 2)
    # relevant {2, 3, 7} in 10: pairs (r < r') = 6 + 6 + 3 of 3 * 7
    assert result.per_user["auc"][0] == pytest.approx(15 / 21)


@pytest.mark.parametrize("k", [0, -3, 2.5, True, "10"])
def test_bad_k(k):
    table = RankTable(np.arange(2), np.arange(2), np.zeros(2, np.int32), np.ones(2, np.int64),
                      np.full(2, 5), 5)
    with pytest.raises(ConfigError, match=repr(k).replace(".", r"\.")):
        exact_metrics(table, [5, k], ["recall"])


def test_bad_metric_and_table():
    table = RankTable(np.arange(2), np.arange(2), np.zeros(2, np.int32), np.ones(2, np.int64),
                      np.full(2, 5), 5)
    with pytest.raises(ConfigError, match="'hitrate'"):
        exact_metrics(table, [5], ["recall", "hitrate"])
    with pytest.raises(ConfigError, match="ks is empty"):
        exact_metrics(table, [], ["recall"])
    bad = RankTable(np.arange(2), np.arange(2), np.zeros(2, np.int32), np.array([1, 6]),
                    np.full(2, 5), 5)
    with pytest.raises(DataError, match="rank=6"):
        exact_metrics(bad, [5], ["recall"])
    empty = RankTable.concat([], 5)
    with pytest.raises(DataError, match="empty"):
        exact_metrics(empty, [5], ["recall"])


def test_auc_undefined_without_candidates():
    """A user whose non-fold-in items are all targets has no AUC; it is left out of the mean."""
    table = RankTable(rows=np.array([0, 0, 1]), users=np.array([0, 0, 1]),
                      items=np.array([0, 1, 2], np.int32), ranks=np.array([1, 1, 2]),
                      n_candidates=np.array([1, 1, 4]), n_items=6)
    result = exact_metrics(table, [1], ["auc"])
    assert np.isnan(result.per_user["auc"][0])
    assert result.means["auc"] == pytest.approx((4 - 2) / 3)


@pytest.mark.parametrize("key, parsed", [
    ("ndcg@100", ("ndcg", 100)), ("recall@1", ("recall", 1)), ("auc", ("auc", None)),
    ("recall_trunc@20", ("recall_trunc", 20)), ("mrr@007", ("mrr", 7)),
])
def test_a_metric_key_is_a_name_and_a_positive_k(key, parsed):
    assert parse_metric_key(key) == parsed


@pytest.mark.parametrize("key", ["ndcg", "ndcg@", "ndcg@0", "ndcg@-1", "ndcg@2.5", "hits@10",
                                 "auc@10", "auc@", "auc@10x", "@10", "NDCG@10"])
def test_a_malformed_metric_key_is_refused_naming_the_setting(key):
    with pytest.raises(ConfigError) as error:
        parse_metric_key(key, where="eval.selection")
    assert str(error.value) == (
        f"eval.selection={key!r}: expected <metric>@<K> with metric in {list(EXACT_METRICS)} "
        "and K a positive integer, or 'auc'")
    with pytest.raises(ConfigError, match=rf"^metric={re.escape(repr(key))}: expected"):
        parse_metric_key(key)


def test_the_selection_k_is_lowered_to_a_smaller_catalogue():
    assert resolve_selection("ndcg@100", 100) == "ndcg@100"
    assert resolve_selection("ndcg@100", 99) == "ndcg@99"
    assert resolve_selection("recall@20", 5000) == "recall@20"
    assert resolve_selection("auc", 3) == "auc"
    with pytest.raises(ConfigError, match=r"^eval\.selection='ndcg@0'"):
        resolve_selection("ndcg@0", 10)


def test_auc_of_no_user_is_nan_and_the_result_counts_each_users_targets():
    """Every user's non-fold-in items are all targets: no AUC anywhere, so its mean is NaN (not
    an error, not 0); the result keeps each user's number of held-out items."""
    table = RankTable(rows=np.array([0, 0, 1]), users=np.array([4, 4, 7]),
                      items=np.array([0, 1, 2], np.int32), ranks=np.array([1, 1, 1]),
                      n_candidates=np.array([1, 1, 1]), n_items=6)
    result = exact_metrics(table, [1], ["auc", "recall"])
    assert np.isnan(result.means["auc"]) and np.all(np.isnan(result.per_user["auc"]))
    assert result.means["recall@1"] == pytest.approx((1 / 2 + 1) / 2)
    np.testing.assert_array_equal(result.n_targets, [2, 1])
    np.testing.assert_array_equal(result.users, [4, 7])


@pytest.mark.parametrize("metric", ["recall", "hr", "ndcg", "ap", "precision"])
def test_a_curve_past_the_catalogue_keeps_its_last_value(metric):
    """T@K for K up to twice the catalogue, written out from T@K = sum over R <= min(K, N) of
    P(R) w(R) (precision: divided by K): past N nothing is added. An empty distribution gives
    zeros; k_max = 0 is refused."""
    p = np.array([0.5, -0.1, 0.4, 0.2])  # N = 4; linear estimators may give negative entries
    gain = {"recall": lambda r: 1.0, "hr": lambda r: 1.0, "precision": lambda r: 1.0,
            "ndcg": lambda r: 1.0 / np.log2(r + 1.0), "ap": lambda r: 1.0 / r}[metric]
    expected = []
    for k in range(1, 9):
        value = sum(p[r - 1] * gain(r) for r in range(1, min(k, 4) + 1))
        expected.append(value / k if metric == "precision" else value)
    np.testing.assert_allclose(curve(p, metric, 8), expected, rtol=1e-12)
    # computed in float64 whatever the input's precision
    narrow = p.astype(np.float32)
    wide = [sum(float(narrow[r - 1]) * gain(r) for r in range(1, min(k, 4) + 1))
            / (k if metric == "precision" else 1) for k in range(1, 9)]
    np.testing.assert_allclose(curve(narrow, metric, 8), wide, rtol=1e-14)
    np.testing.assert_array_equal(curve(np.zeros(0), metric, 3), np.zeros(3))
    with pytest.raises(ConfigError, match="k_max=0"):
        curve(p, metric, 0)


@pytest.mark.parametrize("metric", ["recall", "ndcg", "ap", "precision"])
def test_rank_gains_are_float64_whatever_the_ranks_dtype(metric):
    """w(R) of float32 or int32 ranks is the float64 gain of the same ranks: 1, 1/log2(R+1),
    1/R written out here in float64."""
    ranks = np.array([1, 2, 3, 7, 1000], dtype=np.float64)
    expected = {"recall": np.ones(5), "precision": np.ones(5),
                "ndcg": 1.0 / np.log2(ranks + 1.0), "ap": 1.0 / ranks}[metric]
    for dtype in (np.float32, np.int32):
        got = rank_gain(metric, ranks.astype(dtype))
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, expected)
