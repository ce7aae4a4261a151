"""evaluate(model, split, config): the one entry point runs one batch pass per split, its exact
metrics equal the per-split evaluator's, its sampled settings equal the sampled block's, the
selection metric comes from the validation split, and bad settings fail without a model."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.data.splits import Split
from linrec.errors import ConfigError
from linrec.eval import EvalConfig, check_evaluation, evaluate, evaluate_exact, validation_score
from linrec.eval.configs import SampledConfig
from linrec.eval.sampled_block import SampledBlock
from tests.conftest import LinearScores, make_evalset

N_USERS, N_ITEMS = 60, 40


def _split(strong: bool = False, valid: bool = True) -> Split:
    test = make_evalset(N_USERS, N_ITEMS, seed=1, min_targets=1)
    other = make_evalset(N_USERS, N_ITEMS, seed=2, min_targets=1)
    train = sp.csr_matrix((N_USERS * 10, N_ITEMS), dtype=np.float32)
    return Split(train, other if valid else None, test, strong=strong)


def _config(**sampled) -> EvalConfig:
    return EvalConfig(ks=(5, 10), metrics=("recall", "ndcg", "auc"), selection="ndcg@10",
                      sampled=SampledConfig(sample_sizes=(10,), repeats=2, seed=3, k_max=10,
                                            adaptive={"n0": 5, "n_max": 20}, **sampled))


@pytest.mark.parametrize("strong", [False, True])
def test_exact_metrics_are_the_per_split_evaluators(strong):
    split, model = _split(strong), LinearScores(N_ITEMS, decimals=1)
    report = evaluate(model, split, _config(enabled=False), seed=4)
    assert list(report.splits) == ["valid", "test"]
    for name in ("valid", "test"):
        want = evaluate_exact(model, getattr(split, name), ks=(5, 10),
                              metrics=("recall", "ndcg", "auc"), seed=4, users_known=not strong)
        assert report.splits[name].exact == want.metrics
        np.testing.assert_array_equal(report.splits[name].rank_table.ranks, want.rank_table.ranks)
        assert report.splits[name].sampled == {}
    assert report.selection_metric == "ndcg@10" and report.selection_split == "valid"
    assert report.selection_value == report.splits["valid"].exact["ndcg@10"]


def test_sampled_settings_are_the_blocks():
    split, model = _split(), LinearScores(N_ITEMS)
    cfg = _config()
    report = evaluate(model, split, cfg, seed=4)
    block = SampledBlock(cfg.sampled, split.test, N_ITEMS)
    result = evaluate_exact(model, split.test, ks=(5, 10), metrics=("recall",), seed=4,
                            users_known=True, batch_hooks=block.hooks())
    want = {label: s.to_json() for label, s in block.settings(result.rank_table).items()}
    got = {label: s.to_json() for label, s in report.splits["test"].sampled.items()}
    for blocks in (want, got):
        for setting in blocks.values():
            setting.pop("timings")
    assert got == want and list(got) == ["n=10", "adaptive"]
    json = report.to_json()
    assert set(json) == {"splits", "selection"}
    assert set(json["splits"]["test"]) == {"n_users", "n_targets", "exact", "timings", "sampled"}


def test_without_validation_users_selection_reads_the_test_split():
    report = evaluate(LinearScores(N_ITEMS), _split(valid=False), _config(enabled=False))
    assert list(report.splits) == ["test"] and report.selection_split == "test"
    with pytest.raises(ConfigError, match="the data has none of these splits"):
        evaluate(LinearScores(N_ITEMS), _split(valid=False),
                 EvalConfig(splits=("valid",), sampled=SampledConfig(enabled=False)))


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in ("timings",)}
    return value


def test_a_split_scored_first_changes_no_number_and_is_heard_of_first():
    """first_split="test": the test split is scored first and on_split hears of each split
    with the splits done so far; every number (exact, sampled, the ranks) is the one of the
    config's order, and the report lists the splits in the config's order."""
    split, cfg = _split(), _config()
    want = evaluate(LinearScores(N_ITEMS), split, cfg, seed=4)
    heard = []
    got = evaluate(LinearScores(N_ITEMS), split, cfg, seed=4, first_split="test",
                   on_split=heard.append)
    assert [list(done.splits) for done in heard] == [["test"], ["test", "valid"]]
    assert list(got.splits) == ["valid", "test"] and got.selection_split == "valid"
    assert _without_timings(got.to_json()) == _without_timings(want.to_json())
    for name in ("valid", "test"):
        np.testing.assert_array_equal(got.splits[name].rank_table.ranks,
                                      want.splits[name].rank_table.ranks)
    # what was heard of the test split is what the report holds
    assert heard[0].to_json()["splits"]["test"] == got.to_json()["splits"]["test"]
    assert heard[0].selection_metric == "ndcg@10"
    # a first split the data lacks leaves the config's order
    order = []
    evaluate(LinearScores(N_ITEMS), _split(valid=False), cfg, first_split="valid",
             on_split=lambda done: order.append(list(done.splits)))
    assert order == [["test"]]


@pytest.mark.parametrize("cfg, match", [
    (EvalConfig(sampled=SampledConfig(sample_sizes=(40,))), "eval.sampled.sample_sizes=40 is out"),
    (EvalConfig(sampled=SampledConfig(sample_sizes=(10,), adaptive={"n0": 50})),
     "eval.sampled.adaptive.n0=50 is out"),
    (EvalConfig(ks=(100,), selection="auc", sampled=SampledConfig(enabled=False)),
     r"no K <= n_items=40"),
])
def test_check_evaluation_fails_without_a_model(cfg, match):
    with pytest.raises(ConfigError, match=match):
        check_evaluation(_split(), cfg)


def test_validation_score_is_the_selection_metric_on_the_validation_users():
    split, model = _split(), LinearScores(N_ITEMS)
    score = validation_score(split, _config(), seed=4)
    assert score(model) == evaluate(model, split, _config(enabled=False), seed=4).selection_value
    assert validation_score(_split(valid=False)) is None
