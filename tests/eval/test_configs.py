"""The typed eval block (linrec.eval.configs): mistyped values, lists, settings."""

from __future__ import annotations

import pytest

from linrec.errors import ConfigError
from linrec.eval.configs import EvalConfig, SampledConfig


@pytest.mark.parametrize(
    "values, match",
    [
        ({"memory_budget_mb": "abc"}, r"eval.memory_budget_mb='abc' is not an integer"),
        ({"memory_budget_mb": 0}, r"eval.memory_budget_mb=0 is out of range"),
        ({"selection": 5}, r"eval.selection=5 is not a string"),
        ({"selection": "foo@10"}, r"eval.selection='foo@10': expected <metric>@<K>"),
        ({"splits": "test"}, r"eval.splits='test' is not a list"),  # was split into letters
        ({"splits": ["train"]}, r"eval.splits='train' is not allowed"),
        ({"ks": [1.5]}, r"eval.ks=1.5 is not an integer"),
        ({"ks": [0, 10]}, r"eval.ks=0 is out of range"),
        ({"metrics": ["ndcg", "f1"]}, r"eval.metrics='f1' is not allowed"),
        ({"sampled": {"enabled": "no"}}, r"eval.sampled.enabled='no' is not a flag"),
        ({"sampled": {"replace": 1}}, r"eval.sampled.replace=1 is not a flag"),
        ({"sampled": {"sample_sizes": [True]}}, r"eval.sampled.sample_sizes=True is not an int"),
        ({"sampled": {"sample_sizes": []}}, r"eval.sampled.sample_sizes is empty"),
        ({"sampled": {"k_max": "abc"}}, r"eval.sampled.k_max='abc' is not an integer"),
        ({"sampled": {"estimators": ["adaptive_mle"]}},
         r"eval.sampled.estimators='adaptive_mle' is not allowed"),
        ({"sampled": {"method": "simulate", "pool": "non_interacted"}},
         r"method=simulate draws from the law of pool all_but_target"),
        ({"exclude_foldin": False, "sampled": {"pool": "non_interacted"}},
         r"eval.exclude_foldin=false ranks the fold-in items .*pool=non_interacted never "
         r"samples them"),
        ({"sampled": {"adaptive": 3}}, r"eval.sampled.adaptive=3 must be a mapping"),
        ({"sampled": {"adaptive": {"n0": "x"}}}, r"eval.sampled.adaptive.n0='x' is not an int"),
        ({"sampled": None}, r"eval.sampled=None must be a mapping"),
        ({"sampled": {"sample_size": 100}}, r"eval.sampled: unknown field\(s\) \['sample_size'\]"),
    ],
)
def test_eval_config_rejects_mistyped_values(values, match):
    with pytest.raises(ConfigError, match=match):
        EvalConfig.from_mapping(values)


def test_eval_config_lists_become_tuples():
    cfg = EvalConfig.from_mapping({"ks": [5, 1], "splits": ["test"],
                                   "sampled": {"estimators": ["naive"], "adaptive": {"n0": 10}}})
    assert cfg.ks == (5, 1) and cfg.splits == ("test",)
    assert cfg.sampled.estimators == ("naive",) and cfg.sampled.adaptive.n0 == 10


def test_settings_and_ks_for_the_catalogue():
    sampled = SampledConfig(sample_sizes=(100, 500))
    assert sampled.settings() == ["n=100", "n=500", "adaptive"]
    assert SampledConfig(estimators=()).settings() == ["adaptive"]
    assert EvalConfig().ks_for(60) == (1, 5, 10, 20, 50, 60)  # ndcg@100 lowered to K = 60
