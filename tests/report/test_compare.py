"""linrec.report.compare on hand-made runs: the configuration chosen on the selection value (mean
over seeds), mean ± std over seeds, per-user values from the ranks files (recall and nDCG by
hand), paired t and Wilcoxon against scipy with Holm by hand, the best per column, the marks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from linrec.eval.ranks import RankTable
from linrec.report.compare import (
    ModelResult,
    add_significance,
    best_configurations,
    best_per_metric,
    per_user_values,
)


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def test_the_best_configuration_on_the_mean_selection_value():
    """lam=10 wins on the mean over seeds (0.30, 0.20 -> 0.25 > 0.24) although lam=100 has the
    best single run; its metrics are the mean and the ddof-1 std over its two seeds."""
    rows = []
    for lam, sels, ndcgs in ((10.0, (0.30, 0.20), (0.5, 0.7)), (100.0, (0.26, 0.22), (0.9, 0.9))):
        for seed, (sel, ndcg) in enumerate(zip(sels, ndcgs, strict=True)):
            rows.append({"model": "ease", "param.lam": lam, "config_key": f"k{lam}",
                         "seed": seed, "run": f"ease/{lam}/{seed}", "selection_value": sel,
                         "selection_metric": "ndcg@100", "selection_split": "valid",
                         "ndcg@20": ndcg})
    rows.append({"model": "pop", "param.lam": None, "config_key": "p", "seed": 0,
                 "run": "pop/0", "selection_value": float("nan"), "selection_metric": None,
                 "selection_split": None, "ndcg@20": 0.1})
    (ease, pop) = best_configurations(_frame(rows), ["ndcg@20"])
    assert ease.model == "ease" and ease.params == {"param.lam": 10.0}
    assert ease.runs == ["ease/10.0/0", "ease/10.0/1"] and ease.n_configurations == 2
    assert ease.selection == pytest.approx(0.25)
    assert ease.means["ndcg@20"] == pytest.approx(0.6)
    assert ease.stds["ndcg@20"] == pytest.approx(np.std([0.5, 0.7], ddof=1))
    assert pop.selection is None and pop.means["ndcg@20"] == 0.1 and math.isnan(pop.stds["ndcg@20"])
    assert pop.params == {}  # nothing varies between its runs


def _ranks(path, users, ranks_per_user, n_items=50) -> None:
    rows, user_ids, ranks = [], [], []
    for row, (user, user_ranks) in enumerate(zip(users, ranks_per_user, strict=True)):
        for r in sorted(user_ranks):
            rows.append(row)
            user_ids.append(user)
            ranks.append(r)
    n = len(ranks)
    RankTable(rows=np.array(rows), users=np.array(user_ids), items=np.arange(n, dtype=np.int32),
              ranks=np.array(ranks), n_candidates=np.full(n, n_items),
              n_items=n_items).save_npz(path)


def _by_hand(ranks_per_user, k):
    """recall@k and nDCG@k per user; a target's global rank R counts the non-target items
    above it, so its place in the list is R plus the user's targets ranked above it."""
    places = [[r + i for i, r in enumerate(sorted(ranks))] for ranks in ranks_per_user]
    recall = [np.mean([p <= k for p in user]) for user in places]
    ndcg = [sum(1 / np.log2(p + 1) for p in user if p <= k) /
            sum(1 / np.log2(i + 2) for i in range(min(k, len(user)))) for user in places]
    return np.array(recall), np.array(ndcg)


def test_per_user_values_are_recall_and_ndcg_of_the_ranks_averaged_over_runs(tmp_path):
    users = [3, 7, 9]
    # user 9's second target (R = 8, then 9) sits one place lower in its list (9, then 10)
    seeds = [[[1, 12], [4], [30, 2, 8]], [[2, 15], [1], [40, 3, 9]]]
    for i, ranks in enumerate(seeds):
        (tmp_path / f"s{i}").mkdir()
        _ranks(tmp_path / f"s{i}" / "ranks.npz", users, ranks)
    got_users, values = per_user_values([str(tmp_path / "s0"), str(tmp_path / "s1")], "test",
                                        ["recall@10", "ndcg@10"])
    assert got_users.tolist() == users
    by_seed = [_by_hand(ranks, 10) for ranks in seeds]
    np.testing.assert_allclose(values["recall@10"], (by_seed[0][0] + by_seed[1][0]) / 2)
    np.testing.assert_allclose(values["ndcg@10"], (by_seed[0][1] + by_seed[1][1]) / 2,
                               rtol=1e-12)
    # a run without a ranks file, or runs over different users: no values (not tested)
    (tmp_path / "none").mkdir()
    assert per_user_values([str(tmp_path / "none")], "test", ["recall@10"]) is None
    (tmp_path / "other").mkdir()
    _ranks(tmp_path / "other" / "ranks.npz", [3, 7, 10], seeds[0])
    assert per_user_values([str(tmp_path / "s0"), str(tmp_path / "other")], "test",
                           ["recall@10"]) is None
    assert per_user_values([str(tmp_path / "s0")], "valid", ["recall@10"]) is None


def _result(model, runs):
    return ModelResult(model=model, params={}, runs=runs, seeds=[0], selection_metric="ndcg@10",
                       selection_split="valid", selection=0.0, values={"recall@10": [0.0]},
                       n_configurations=1)


def test_significance_is_scipy_with_holm_over_the_models(tmp_path):
    rng = np.random.default_rng(4)
    users = list(range(40))
    ranks = {"base": [[int(r)] for r in rng.integers(1, 30, 40)],
             "good": [[int(r)] for r in rng.integers(1, 8, 40)],
             "same": [[int(r)] for r in rng.integers(1, 30, 40)]}
    for name, per_user in ranks.items():
        (tmp_path / name).mkdir()
        _ranks(tmp_path / name / "ranks.npz", users, per_user)
    results = [_result(name, [str(tmp_path / name)]) for name in ranks]
    assert add_significance(results, "base", "test", ["recall@10"]) is None
    base = _by_hand(ranks["base"], 10)[0]
    raw = {}
    for name in ("good", "same"):
        x = _by_hand(ranks[name], 10)[0]
        raw[name] = {"paired_t": stats.ttest_rel(x, base).pvalue,
                     "wilcoxon": stats.wilcoxon(x, base, zero_method="wilcox").pvalue}
    for test in ("paired_t", "wilcoxon"):
        low, high = sorted(raw, key=lambda m: raw[m][test])
        holm = {low: min(1.0, 2 * raw[low][test])}
        holm[high] = max(holm[low], min(1.0, raw[high][test]))
        for result in results[1:]:
            assert result.pvalues["recall@10"][test] == pytest.approx(holm[result.model],
                                                                      rel=1e-9)
    good = results[1]
    assert good.marks("recall@10", 0.05) == "*†"
    assert good.marks("recall@10", 1e-300) == ""
    assert results[0].pvalues == {}  # the baseline is not tested against itself


def test_each_model_gets_its_difference_from_the_baseline_with_a_bootstrap_interval(tmp_path):
    rng = np.random.default_rng(8)
    users = list(range(60))
    ranks = {"base": [[int(r)] for r in rng.integers(1, 30, 60)],
             "good": [[int(r)] for r in rng.integers(1, 8, 60)]}
    for name, per_user in ranks.items():
        (tmp_path / name).mkdir()
        _ranks(tmp_path / name / "ranks.npz", users, per_user)
    results = [_result(name, [str(tmp_path / name)]) for name in ranks]
    assert add_significance(results, "base", "test", ["recall@10"], alpha=0.1,
                            bootstrap=500, seed=3) is None
    effect = results[1].effects["recall@10"]
    diff = _by_hand(ranks["good"], 10)[0] - _by_hand(ranks["base"], 10)[0]
    # the same resampling written out: 500 draws of 60 users with replacement, seed 3
    means = diff[np.random.default_rng(3).integers(0, 60, (500, 60))].mean(1)
    assert (effect.estimate, effect.low, effect.high) == pytest.approx(
        (diff.mean(), np.quantile(means, 0.05), np.quantile(means, 0.95)), rel=1e-12)
    assert effect.confidence == pytest.approx(0.9) and results[1].n_users == 60
    assert results[0].effects == {}
    results = [_result(name, [str(tmp_path / name)]) for name in ranks]
    add_significance(results, "base", "test", ["recall@10"], bootstrap=0)
    assert results[1].effects == {} and results[1].pvalues  # the tests without intervals


def test_the_test_over_seeds_is_welch_on_the_runs_values_with_holm(tmp_path):
    """Welch's t over each side's per-seed values (scipy, Holm by hand over the models tested),
    also where no run has a ranks file; a single seed is not tested, two configurations that
    never vary are different for sure (p 0) or not tested (equal)."""
    def result(model, values):
        return ModelResult(model=model, params={}, runs=[str(tmp_path)] * len(values),
                           seeds=list(range(len(values))), selection_metric="ndcg@10",
                           selection_split="valid", selection=0.0,
                           values={"recall@20": values}, n_configurations=1)

    base = result("base", [0.180, 0.182, 0.1835])
    gap = result("gap", [0.190, 0.1915, 0.1925])
    noise = result("noise", [0.181, 0.1845, 0.179])
    single = result("single", [0.3])
    results = [base, gap, noise, single]
    note = add_significance(results, "base", "test", ["recall@20"])
    assert note == "no per-user tests: the baseline's runs have no ranks file for test"
    raw = {r.model: stats.ttest_ind(r.values["recall@20"], base.values["recall@20"],
                                    equal_var=False).pvalue for r in (gap, noise)}
    assert raw["gap"] < 0.01 < 0.5 < raw["noise"]
    holm = {"gap": min(1.0, 2 * raw["gap"])}
    holm["noise"] = max(holm["gap"], raw["noise"])
    for r in (gap, noise):
        assert r.pvalues["recall@20"] == {"welch_t_seeds": pytest.approx(holm[r.model],
                                                                         rel=1e-9)}
    assert gap.marks("recall@20", 0.05) == "‡" and noise.marks("recall@20", 0.05) == ""
    assert single.pvalues == {}  # one seed: no spread to compare with

    fixed = result("base", [0.17, 0.17])
    other, same = result("other", [0.16, 0.16]), result("same", [0.17, 0.17])
    add_significance([fixed, other, same], "base", "test", ["recall@20"])
    assert other.pvalues == {"recall@20": {"welch_t_seeds": 0.0}} and same.pvalues == {}


def test_significance_explains_why_it_was_not_run(tmp_path):
    results = [_result("a", [str(tmp_path)]), _result("b", [str(tmp_path)])]
    assert "baseline 'pop' is not among the models (a, b)" in add_significance(
        results, "pop", "test", ["recall@10"])
    assert "no ranks file" in add_significance(results, "a", "test", ["recall@10"])


def test_best_per_metric_ties_and_nan():
    a, b, c = (_result(m, []) for m in "abc")
    a.values, b.values, c.values = ({"x": [0.5], "y": []}, {"x": [0.7], "y": []},
                                    {"x": [0.7], "y": []})
    assert best_per_metric([a, b, c], ["x", "y"]) == {"x": "b"}  # ties: the first


def test_a_baseline_can_be_one_configuration_of_a_model():
    """`--baseline 'ease lam=100'`: the runs of that configuration (every seed), whatever the
    best configuration of the model is; settings compare as numbers (100 = 100.0)."""
    import pandas as pd

    from linrec.errors import ConfigError
    from linrec.report.compare import configuration_result, parse_model_settings

    assert parse_model_settings("ease") == ("ease", {})
    assert parse_model_settings("mf/ccl model.sampling.n_negatives=800 dim=64") == (
        "mf/ccl", {"sampling.n_negatives": "800", "dim": "64"})
    with pytest.raises(ConfigError, match="'lam' is not a setting=value pair"):
        parse_model_settings("ease lam")
    frame = pd.DataFrame({
        "model": ["ease"] * 4 + ["lrr"], "run": ["a", "b", "c", "d", "e"], "seed": [0, 1, 0, 1, 0],
        "config_key": ["x", "x", "y", "y", "z"], "param.lam": [10.0, 10.0, 100.0, 100.0, 100.0],
        "selection_metric": "ndcg@10", "selection_split": "valid",
        "selection_value": [0.9, 0.9, 0.1, 0.1, 0.5], "recall@10": [0.5, 0.7, 0.2, 0.4, 0.3]})
    chosen = configuration_result(frame, "ease", {"lam": "100"}, ["recall@10"])
    assert chosen.model == "ease [lam=100]" and chosen.runs == ["c", "d"]
    assert chosen.means["recall@10"] == pytest.approx(0.3)
    assert configuration_result(frame, "ease", {"lam": "30"}, ["recall@10"]) is None
    assert configuration_result(frame, "ease", {"rank": "3"}, ["recall@10"]) is None
