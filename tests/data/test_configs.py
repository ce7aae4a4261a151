"""The typed data configs (linrec.data.configs): sources and split protocols chosen by name,
the data.path / data.variant / data.download shortcuts, and the dataset names."""

from __future__ import annotations

import pytest

from linrec.data.configs import (
    SOURCE_CONFIGS,
    SPLIT_CONFIGS,
    DataConfig,
    HoldoutSplit,
    LightGCNSource,
    StrongSplit,
    SyntheticSource,
)
from linrec.errors import ConfigError


def test_sources_and_splits_are_chosen_by_name():
    config = DataConfig.from_mapping({"source": {"name": "synthetic", "n_users": 10},
                                      "split": {"kind": "strong", "n_test_users": 2}})
    assert config.source == SyntheticSource(n_users=10)
    assert config.split == StrongSplit(n_test_users=2)
    assert DataConfig().split == HoldoutSplit()
    assert set(SOURCE_CONFIGS) == {"synthetic", "movielens", "netflix", "msd", "lightgcn", "ncf",
                                   "tabular"}
    assert set(SPLIT_CONFIGS) == {"holdout", "loo", "strong", "predefined"}
    # the protocol functions take exactly the split fields (defaults may differ: the config's
    # are the CLI's)
    import inspect

    from linrec.registry import load

    for kind, cls in SPLIT_CONFIGS.items():
        accepted = list(inspect.signature(load(cls.protocol)).parameters)[1:]
        assert sorted(accepted) == sorted(n for n in cls.names() if n != "kind"), kind


def test_source_configs_match_their_loaders():
    import inspect

    from linrec.data.sources import source_loader

    for cls in SOURCE_CONFIGS.values():
        accepted = list(inspect.signature(source_loader(cls())).parameters)
        assert sorted(accepted) == sorted(n for n in cls.names() if n != "name"), cls.__name__


def test_shortcuts_and_dataset_names(tmp_path):
    """data.path / data.variant replace the source's fields; without data.name the data is named
    after its source, a LightGCN-format directory after itself."""
    own = DataConfig.from_mapping({"source": {"name": "lightgcn"},
                                   "split": {"kind": "predefined"},
                                   "path": str(tmp_path / "my-shop")})
    assert own.resolved_source().path == str(tmp_path / "my-shop")
    assert own.dataset_name() == "lightgcn-my-shop"
    published = DataConfig.from_mapping({"source": {"name": "lightgcn"},
                                         "split": {"kind": "predefined"}, "variant": "yelp2018"})
    assert published.dataset_name() == "lightgcn-yelp2018"
    movielens = DataConfig.from_mapping({"source": {"name": "movielens"}, "variant": "ml-100k"})
    assert movielens.resolved_source().variant == "ml-100k"
    assert movielens.dataset_name() == "movielens-ml-100k"
    assert DataConfig().dataset_name() == "synthetic"
    with pytest.raises(ConfigError, match="data.variant='x': source 'synthetic' has no variant"):
        DataConfig.from_mapping({"variant": "x"})


def test_a_source_name_must_match_its_config():
    with pytest.raises(ConfigError, match="data.source.name='x' does not match"):
        LightGCNSource(name="x")
