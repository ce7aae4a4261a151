"""Model configs (linrec.models.configs) and the registry: checks, defaults that run on any
catalogue (ranks sized by it), names, and building models from configs."""

from __future__ import annotations

import pytest

from linrec.errors import ConfigError
from linrec.models import EASE, build_model, model_config
from linrec.models.configs import EASEConfig, LRRConfig, PureSVDConfig


def test_parameters_are_read_from_the_config():
    model = EASE(lam=300.0)
    assert model.lam == 300.0 and model.config == EASEConfig(lam=300.0)
    assert EASE(EASEConfig(lam=7.0), dtype="float64").config == EASEConfig(lam=7.0,
                                                                           dtype="float64")
    with pytest.raises(AttributeError):
        _ = model.nonexistent


@pytest.mark.parametrize("params, match", [
    ({"lamda": 1}, r"model 'ease' has no parameter\(s\) \['lamda'\]; allowed: \['lam', 'dtype',"
                   r" 'num_threads', 'device'\]"),
    ({"device": "gpu"}, r"ease.device='gpu' is not allowed; allowed: cpu, cuda, cuda:<n>"),
    ({"lam": -1.0}, r"ease.lam=-1.0 is out of range; allowed: a number >= 0"),
    ({"lam": "abc"}, r"ease.lam='abc' is not a finite number"),
    ({"dtype": "float16"}, r"ease.dtype='float16' is not allowed; allowed: \['float32'"),
    ({"num_threads": -1}, r"ease.num_threads=-1 is out of range"),
])
def test_bad_parameters_name_the_model_field_and_allowed_values(params, match):
    with pytest.raises(ConfigError, match=match):
        EASE(**params)


def test_messages_use_the_config_name_for_every_model():
    """Errors used to say LRR.rank for one model and ease.lam for another."""
    with pytest.raises(ConfigError, match=r"^lrr.rank=0 "):
        model_config("lrr", rank=0)
    with pytest.raises(ConfigError, match=r"^ials.factors=0 "):
        model_config("ials", factors=0)


@pytest.mark.parametrize("n_items, lrr, puresvd", [
    (20_108, 2000, 128),   # ML-20M: the published ranks
    (1_682, 168, 16),      # ML-100K
    (1_447, 144, 14),      # ML-100K in LightGCN format
    (30, 8, 8),            # a toy catalogue: at least min(8, n_items)
    (5, 5, 5),
])
def test_auto_ranks_follow_the_catalogue(n_items, lrr, puresvd):
    assert LRRConfig().rank_for(n_items) == lrr
    assert PureSVDConfig().rank_for(n_items) == puresvd
    assert LRRConfig(rank=3).rank_for(n_items) == 3


def test_an_explicit_rank_beyond_the_catalogue_is_refused():
    with pytest.raises(ConfigError, match="lrr.rank=50 exceeds n_items=40"):
        LRRConfig(rank=50).rank_for(40)


def test_build_model_from_a_name_a_mapping_or_a_config():
    assert build_model("ease", lam=3.0).lam == 3.0
    assert build_model({"name": "ease", "lam": 4.0}).lam == 4.0
    assert build_model(EASEConfig(lam=5.0)).lam == 5.0
    with pytest.raises(ConfigError, match=r"model.name='nosuch' is unknown; allowed: \["):
        build_model("nosuch")
    with pytest.raises(ConfigError, match="model.name='lrr' does not match"):
        EASEConfig(name="lrr")
