"""linrec.studies.common: the models of a study, its run directories and its index."""

from __future__ import annotations

import pytest

from linrec.errors import ConfigError
from linrec.studies.common import point_dir, study_model_config


def test_study_models_get_the_run_seed():
    """A stochastic model of the study is seeded by the run seed unless the study sets one."""
    assert study_model_config({"name": "ials"}, "ials", seed=7).seed == 7
    assert study_model_config({"name": "ials", "seed": 3}, "ials", seed=7).seed == 3
    assert study_model_config({"name": "ease"}, "ease", seed=7).lam == 500.0
    with pytest.raises(ConfigError, match="study.models.x=3 must be a mapping with a 'name'"):
        study_model_config(3, "x", seed=0)


def test_point_dir_names_a_grid_point():
    assert point_dir({"rank": 10, "lam": 100.0}) == "rank=10,lam=100.0"
    assert point_dir({}) == "default"
