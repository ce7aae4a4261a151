"""RunConfig and the ConfigStore registration: every group composes to its typed config, the
class defaults are the config defaults by construction, the run seed reaches every stochastic
model, and bad fields fail at composition."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hydra.errors import ConfigCompositionException

from linrec.config import RunConfig, run_config
from linrec.data.configs import DataConfig
from linrec.errors import ConfigError
from linrec.models.configs import MODEL_CONFIGS
from tests.conftest import compose_config

CONF = Path(__file__).parents[1] / "conf"


def _names(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("loss", ["bpr", "mse", "infonce"])
def test_loss_group_sets_the_loss_before_the_model_checks_its_scores(loss):
    """model.similarity=dot is refused with MF's default loss (CCL, cosine only) and allowed
    with a loss defined for dot products: the composed config has both."""
    model = run_config(compose_config("model=mf", f"loss={loss}", "model.similarity=dot")).model
    assert (model.loss.name, model.similarity) == (loss, "dot")
    with pytest.raises(ConfigError, match="loss ccl is defined for cosine scores"):
        run_config(compose_config("model=mf", "model.similarity=dot"))


def test_every_model_has_a_config_file_and_every_file_a_model():
    assert _names("model") == sorted(MODEL_CONFIGS)


@pytest.mark.parametrize("name", sorted(MODEL_CONFIGS))
def test_model_group_defaults_are_the_class_defaults(name):
    """conf/model/<name>.yaml only selects the dataclass: the composed model config equals the
    Python default config (the seed follows the run seed)."""
    config = run_config(compose_config(f"model={name}", "seed=5")).model
    default = MODEL_CONFIGS[name]()
    if "seed" in default.names():
        assert config.seed == 5
        default = dataclasses.replace(default, seed=5)
    assert config == default


def test_the_run_seed_reaches_every_seeded_field():
    config = run_config(compose_config("model=ials", "seed=11"))
    assert config.model.seed == 11 and config.eval.sampled.seed == 11
    # the data split keeps its own seed: it is part of the dataset's definition
    assert config.data.split.seed == 12345


def test_two_seeds_give_two_ials_fits_and_one_seed_identical_fits():
    """A sweep over seed=0,1,2 used to train the same iALS three times (seed: 0 was hard-coded
    in its YAML)."""
    from linrec.data.pipeline import prepare_data
    from linrec.models import build_model

    matrix = prepare_data({"source": {"name": "synthetic", "n_users": 200, "n_items": 80},
                           "cache": False}).split.train

    def fit(seed: int):
        config = run_config(compose_config("model=ials", f"seed={seed}", "model.epochs=2"))
        return build_model(config.model).fit(matrix).item_factors_

    first, again, other = fit(0), fit(0), fit(1)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


@pytest.mark.parametrize("name", _names("data"))
def test_every_data_group_composes_to_a_data_config(name):
    config = run_config(compose_config(f"data={name}"))
    assert isinstance(config.data, DataConfig)
    assert config.data.source.name in ("synthetic", "movielens", "netflix", "msd", "lightgcn",
                                       "ncf", "tabular")


@pytest.mark.parametrize("data_name", _names("data"))
def test_every_data_group_passes_the_pipeline_checks(tmp_path, monkeypatch, data_name):
    """Preparing a data preset fails, if at all, only on the missing data file."""
    from linrec.data.pipeline import prepare_data
    from linrec.errors import DownloadError

    monkeypatch.setenv("LINREC_DATA", str(tmp_path / "cache"))
    overrides = [f"data={data_name}"]
    if data_name == "synthetic":
        overrides += ["data.source.n_users=300", "data.source.n_items=100"]
    config = run_config(compose_config(*overrides))
    if data_name == "synthetic":
        assert prepare_data(config.data).split.n_items > 0
        return
    with pytest.raises((ConfigError, DownloadError), match="path|not in the cache"):
        prepare_data(config.data)


@pytest.mark.parametrize("name", _names("experiment"))
def test_every_experiment_composes_to_its_study_or_run_preset(name):
    """conf/experiment holds studies (named as their study config) and run presets (the MF
    presets with published hyper-parameters)."""
    from linrec.study_configs import STUDY_CONFIGS

    config = run_config(compose_config(f"experiment={name}"))
    if name in STUDY_CONFIGS:
        assert config.study.name == name
    else:
        assert config.study is None and config.model.name == "mf"


@pytest.mark.parametrize("override", ["model.lamda=1", "eval.sampled.sample_sizez=[5]",
                                      "data.split.test_fracton=0.1", "model.lam=abc",
                                      "eval.ks=abc"])
def test_unknown_or_mistyped_fields_fail_at_composition(override):
    with pytest.raises(ConfigCompositionException):
        compose_config(override)


def test_run_config_from_a_plain_mapping():
    config = RunConfig.from_mapping({"model": {"name": "lrr", "rank": 10}, "seed": 3})
    assert config.model.rank == 10 and config.data == DataConfig() and config.seed == 3
    with pytest.raises(ConfigError, match="model.name is missing"):
        RunConfig.from_mapping({"model": {"lam": 1.0}})
    with pytest.raises(ConfigError, match=r"config: unknown field\(s\) \['sed'\]"):
        RunConfig.from_mapping({"model": {"name": "ease"}, "sed": 3})


def test_registering_the_configs_again_is_skipped_until_a_registry_changes(monkeypatch):
    """`linrec` and every composition call register_configs: a second call with the same
    registries keeps ConfigStore's nodes; a model added since is registered by the next call."""
    from hydra.core.config_store import ConfigStore

    from linrec.config import register_configs
    from linrec.models.configs import ModelConfig

    register_configs()
    schemas = ConfigStore.instance().repo["schema"]["model"]
    node = schemas["ease.yaml"].node
    register_configs()
    assert schemas["ease.yaml"].node is node

    @dataclasses.dataclass
    class CountsConfig(ModelConfig):
        name: str = "counts_for_the_store_test"

    monkeypatch.setitem(MODEL_CONFIGS, "counts_for_the_store_test", CountsConfig)
    register_configs()
    assert "counts_for_the_store_test.yaml" in schemas
    assert compose_config("model=ease").model.lam > 0
