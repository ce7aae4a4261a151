"""The study configs (linrec.study_configs): fields, mapping specs, families."""

from __future__ import annotations

import pytest

from linrec.errors import ConfigError
from linrec.study_configs import STUDY_CONFIGS, LinearModelsStudyConfig, SamplingStudyConfig


def test_defaults_and_registry():
    assert set(STUDY_CONFIGS) == {"sampling_study", "linear_models", "loss_study"}
    assert list(SamplingStudyConfig().models) == ["itemknn", "puresvd", "ials", "ease",
                                                  "most_popular"]
    assert LinearModelsStudyConfig().report == ("recall_trunc@20", "recall_trunc@50", "ndcg@100")


@pytest.mark.parametrize("cls, values, match", [
    (SamplingStudyConfig, {"mappings": ["beta@-1"]}, "'beta@-1' is unknown"),
    (SamplingStudyConfig, {"winner_ks": [0]}, "study.winner_ks=0 is out of range"),
    (SamplingStudyConfig, {"models": {}}, "study.models is empty"),
    (SamplingStudyConfig, {"repeats": 3}, r"study: unknown field\(s\) \['repeats'\]"),
    (LinearModelsStudyConfig, {"models": {"a": {"model": "ease", "train_on": "all"}}},
     r"study.models.a.train_on='all'"),
    (LinearModelsStudyConfig, {"models": {"a": {"model": "ease", "grids": {}}}},
     r"study.models.a: unknown field\(s\) \['grids'\]"),
    (LinearModelsStudyConfig, {"name": "other"}, "study.name='other' does not match"),
])
def test_bad_study_fields(cls, values, match):
    with pytest.raises(ConfigError, match=match):
        cls.from_mapping(values)
