"""The source registry: names, configs, loaders."""

from __future__ import annotations

import pytest

from linrec.data.configs import SOURCE_CONFIGS
from linrec.data.sources import SOURCES, load_source, source_config
from linrec.errors import ConfigError
from tests.data.sources.conftest import (
    RATINGS,
    decoded,
    expected_pairs,
    u_data,
    write,
)


def test_registry_lists_every_reader():
    assert set(SOURCES) == {"synthetic", "movielens", "netflix", "msd", "lightgcn", "ncf",
                            "tabular"}
    for name in SOURCES:
        assert "path" in SOURCE_CONFIGS[name].names() or name == "synthetic"
        assert source_config(name).name == name


def test_unknown_source_names_the_allowed_ones():
    with pytest.raises(ConfigError, match="known sources: lightgcn, movielens"):
        load_source("movielenz")


def test_unknown_parameter_names_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"\['n_usrs'\].*allowed: \[.*'n_users'"):
        load_source("synthetic", n_usrs=10)


def test_load_source_passes_parameters(tmp_path):
    inter = load_source("synthetic", n_users=40, n_items=30, mean_user_interactions=5, seed=4)
    assert inter.n_users == 40
    data = load_source("movielens", path=write(tmp_path / "u.data", u_data()))
    assert decoded(data) == expected_pairs(RATINGS)
