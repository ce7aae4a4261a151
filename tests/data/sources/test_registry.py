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
    with pytest.raises(ConfigError, match=r"data.source.name='movielenz' is unknown; allowed: "
                                          r"\[.*'lightgcn', 'movielens'"):
        load_source("movielenz")


def test_the_package_re_exports_the_registry():
    import linrec.data.sources as package
    from linrec.data.sources import registry

    for name in package.__all__:
        assert getattr(package, name) is getattr(registry, name), name


def test_source_loader_is_the_readers_load_function():
    from linrec.data.sources import source_loader, synthetic

    assert source_loader(source_config("synthetic")) is synthetic.load


def test_config_and_parameters_together_are_refused():
    with pytest.raises(ConfigError, match="pass parameters in the config"):
        load_source(source_config("synthetic"), n_users=3)


def test_unknown_parameter_names_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"\['n_usrs'\].*allowed: \[.*'n_users'"):
        load_source("synthetic", n_usrs=10)


def test_load_source_passes_parameters(tmp_path):
    inter = load_source("synthetic", n_users=40, n_items=30, mean_user_interactions=5, seed=4)
    assert inter.n_users == 40
    data = load_source("movielens", path=write(tmp_path / "u.data", u_data()))
    assert decoded(data) == expected_pairs(RATINGS)


@pytest.mark.parametrize("name, files, path", [
    ("movielens", {"u.data": ""}, "u.data"),
    ("lightgcn", {"train.txt": "", "test.txt": ""}, "."),
    ("msd", {"train_triplets.txt": ""}, "train_triplets.txt"),
    ("tabular", {"events.csv": "user,item\n"}, "events.csv"),
    ("ncf", {"x.train.rating": "", "x.test.rating": "", "x.test.negative": ""}, "."),
])
def test_an_empty_file_is_named_in_the_error(tmp_path, name, files, path):
    """An empty input used to say "ml-100k: no interactions" (or crash with an IndexError for
    LightGCN) without naming the file."""
    from linrec.errors import DataError

    for file, text in files.items():
        write(tmp_path / file, text)
    params = {"variant": "ml-100k"} if name == "movielens" else {}
    with pytest.raises(DataError, match=str(tmp_path)):
        load_source(name, path=str(tmp_path / path), **params)


def test_a_missing_local_file_is_a_data_error_not_a_download_error(tmp_path):
    from linrec.errors import DataError, DownloadError

    with pytest.raises(DataError, match="does not exist; data.path must point at") as info:
        load_source("movielens", path=str(tmp_path / "nope" / "ratings.dat"))
    assert not isinstance(info.value, DownloadError)
