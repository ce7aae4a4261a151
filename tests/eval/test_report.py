"""EvalReport's JSON (linrec.eval.report): the `splits` and `selection` blocks of results.json,
the sampled summaries computed from the per-repeat curves."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.eval.ranks import RankTable
from linrec.eval.report import EvalReport, SampledSetting, SplitReport


def _setting() -> SampledSetting:
    exact = {"recall": np.array([0.1, 0.2, 0.4])}
    curves = {"naive": {"recall": np.array([[0.2, 0.2, 0.5], [0.0, 0.2, 0.3]])}}
    return SampledSetting(label="n=10", protocol={"k_max": 3, "repeats": 2}, exact_curves=exact,
                          curves=curves, first_sample=None, timings={"naive": 0.5})


def test_sampled_summary_from_the_curves():
    block = _setting().to_json()
    assert block["exact"] == {"recall@1": 0.1}  # K in (1, 5, 10, 20, 50) up to k_max = 3
    entry = block["estimators"]["naive"]["metrics"]["recall@1"]
    assert entry == {"mean": pytest.approx(0.1), "std": pytest.approx(0.1),
                     "rel_error": pytest.approx(0.0, abs=1e-12)}
    # ARE per repeat: mean over K = 1..3 of |T̂ - T| / T, in %
    are = [100 * np.mean([1.0, 0.0, 0.25]), 100 * np.mean([1.0, 0.0, 0.25])]
    assert block["estimators"]["naive"]["are"]["recall"] == {
        "mean": pytest.approx(np.mean(are)), "std": pytest.approx(np.std(are), abs=1e-12)}
    assert block["timings"] == {"naive": 0.5}


def test_report_json_and_selection():
    table = RankTable(users=np.array([0]), items=np.array([1]), ranks=np.array([1]),
                      rows=np.array([0]), n_candidates=np.array([2]), n_items=3)
    split = SplitReport(name="valid", n_users=1, exact={"ndcg@10": 0.5}, rank_table=table,
                        per_user={}, per_user_rows=np.zeros(0), sampled={"n=10": _setting()})
    report = EvalReport(splits={"valid": split}, selection_metric="ndcg@10",
                        selection_split="valid")
    json = report.to_json()
    assert json["selection"] == {"metric": "ndcg@10", "split": "valid", "value": 0.5}
    assert json["splits"]["valid"]["n_targets"] == 1
    assert list(json["splits"]["valid"]["sampled"]) == ["n=10"]
    missing = EvalReport(splits={"valid": split}, selection_metric="auc", selection_split="valid")
    assert missing.selection_value is None
