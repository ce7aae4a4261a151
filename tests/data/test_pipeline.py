"""prepare_data: config validation, filters + split, stats, the split cache (round trip,
corruption, atomic writes)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pytest
from omegaconf import OmegaConf

import linrec.data.pipeline as pipeline
from linrec.data import sources
from linrec.data.configs import SOURCE_CONFIGS, SourceConfig
from linrec.data.filters import kcore
from linrec.data.interactions import Interactions, PredefinedSplitData
from linrec.data.pipeline import cache_path, prepare_data
from linrec.data.splits import holdout
from linrec.errors import ConfigError


def toy_interactions(seed: int = 0, n_users: int = 80, n_items: int = 50) -> Interactions:
    rng = np.random.default_rng(seed)
    n_rows = 1500
    users = rng.integers(0, n_users, n_rows)
    items = np.minimum(rng.geometric(0.05, n_rows), n_items)
    return Interactions.from_raw(
        users, items, values=rng.integers(1, 6, n_rows).astype(float), name="toy"
    )


@dataclass
class FakeSourceConfig(SourceConfig):
    """The config of the stand-in source "fake" (one parameter)."""

    name: str = "fake"
    size: int = 0


class FakeSource:
    """Stands in for linrec.data.sources.load_source and counts its calls."""

    def __init__(self, data):
        self.data = data
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, config):
        self.calls.append((config.name, config.loader_params()))
        return self.data


@pytest.fixture(autouse=True)
def fake_source_config(monkeypatch):
    monkeypatch.setitem(SOURCE_CONFIGS, "fake", FakeSourceConfig)


@pytest.fixture
def fake_source(monkeypatch):
    source = FakeSource(toy_interactions())
    monkeypatch.setattr(sources, "load_source", source, raising=False)
    return source


def base_cfg(**split) -> dict:
    return {
        "name": "toy",
        "source": {"name": "fake", "size": 3},
        "filters": {"min_rating": 2, "min_user_interactions": 3, "min_item_interactions": 2},
        "split": {"kind": "holdout", "seed": 7, **split},
        "cache": True,
    }


def assert_same_split(a, b) -> None:
    for x, y in (
        (a.train, b.train),
        (a.test.foldin, b.test.foldin),
        (a.test.targets, b.test.targets),
    ):
        assert (x != y).nnz == 0 and x.shape == y.shape and x.dtype == y.dtype
    np.testing.assert_array_equal(a.test.users, b.test.users)
    assert (a.valid is None) == (b.valid is None)
    if a.valid is not None:
        assert (a.valid.targets != b.valid.targets).nnz == 0
    np.testing.assert_array_equal(a.user_ids, b.user_ids)
    np.testing.assert_array_equal(a.item_ids, b.item_ids)
    assert a.strong == b.strong


def test_pipeline_equals_filters_then_protocol(linrec_data_home, fake_source):
    prepared = prepare_data(base_cfg(test_fraction=0.25, valid_fraction=0.1))
    assert fake_source.calls == [("fake", {"size": 3})]
    binarized = fake_source.data.subset(fake_source.data.values >= 2)
    filtered = kcore(binarized, 3, 2)
    expected = holdout(filtered, test_fraction=0.25, valid_fraction=0.1, seed=7)
    assert_same_split(prepared.split, expected)
    assert prepared.name == "toy"
    stats = prepared.stats
    assert (stats["n_users"], stats["n_items"], stats["n_interactions"]) == (
        filtered.n_users,
        filtered.n_items,
        filtered.n_interactions,
    )
    assert stats["test_users"] == expected.test.n_users
    assert stats["test_targets"] == expected.test.targets.nnz
    assert stats["valid_targets"] == expected.valid.targets.nnz
    assert stats["n_train_interactions"] == expected.train.nnz
    assert stats["n_train_interactions"] + stats["valid_targets"] + stats["test_targets"] == (
        filtered.n_interactions
    )


def test_cache_round_trip(linrec_data_home, fake_source):
    cfg = base_cfg(valid_fraction=0.1)
    first = prepare_data(cfg)
    path = cache_path(cfg)
    split = {"kind": "holdout", "test_fraction": 0.2, "valid_fraction": 0.1, "order": "random",
             "seed": 7, "test_foldin_includes_valid": True}
    filters = {"min_rating": 2.0, "min_user_interactions": 3, "min_item_interactions": 2,
               "iterative": True}
    canonical = json.dumps(
        {
            "cache_version": pipeline.CACHE_VERSION,
            "data": {"source": {"name": "fake", "size": 3}, "filters": filters, "split": split},
            "files": [],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    assert (
        path
        == linrec_data_home
        / "splits"
        / f"{hashlib.sha256(canonical.encode()).hexdigest()[:16]}.npz"
    )
    assert path.exists() and list(path.parent.iterdir()) == [path]
    second = prepare_data(cfg)
    assert len(fake_source.calls) == 1  # read from the cache
    assert_same_split(first.split, second.split)
    assert second.stats == first.stats and second.name == first.name
    # a Hydra DictConfig is the same config
    assert cache_path(OmegaConf.create(cfg)) == path
    prepare_data(OmegaConf.create(cfg))
    assert len(fake_source.calls) == 1


def test_cache_keeps_string_ids_strong_flag_and_negatives(linrec_data_home, monkeypatch):
    users = np.array([f"u{k % 40}" for k in range(600)])
    items = np.array([f"i{k * 7 % 31}" for k in range(600)])
    monkeypatch.setattr(
        sources, "load_source", FakeSource(Interactions.from_raw(users, items)), raising=False
    )
    cfg = {
        "source": {"name": "fake"},
        "split": {"kind": "strong", "n_valid_users": 5, "n_test_users": 5},
    }
    first, second = prepare_data(cfg), prepare_data(cfg)
    assert second.split.strong and second.name == "fake"
    assert second.split.user_ids.dtype.kind == "U"
    assert_same_split(first.split, second.split)

    train = Interactions.from_raw(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 2]))
    test = Interactions.from_raw(np.array([0, 1]), np.array([2, 0]))
    data = PredefinedSplitData(train, test, np.array([[1, 2], [0, 1]]), np.array([1, 0]))
    monkeypatch.setattr(sources, "load_source", FakeSource(data), raising=False)
    cfg = {"source": {"name": "ncf"}, "split": {"kind": "predefined"}}
    first, second = prepare_data(cfg), prepare_data(cfg)
    np.testing.assert_array_equal(second.split.test.negatives, [[0, 1], [1, 2]])
    assert_same_split(first.split, second.split)
    assert second.stats["n_interactions"] == 6


def test_corrupt_cache_is_rebuilt(linrec_data_home, fake_source, caplog):
    cfg = base_cfg()
    first = prepare_data(cfg)
    path = cache_path(cfg)
    path.write_bytes(path.read_bytes()[:200])
    second = prepare_data(cfg)
    assert len(fake_source.calls) == 2 and "unreadable" in caplog.text
    assert_same_split(first.split, second.split)
    prepare_data(cfg)  # the rebuilt file is valid again
    assert len(fake_source.calls) == 2


def test_tampered_cache_fails_its_checksum(linrec_data_home, fake_source):
    cfg = base_cfg()
    prepare_data(cfg)
    path = cache_path(cfg)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["test_users"] = arrays["test_users"][::-1].copy()
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    prepare_data(cfg)
    assert len(fake_source.calls) == 2


def test_failed_write_leaves_no_file(linrec_data_home, fake_source, monkeypatch):
    def broken_savez(fh, **arrays):
        fh.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(pipeline.np, "savez", broken_savez)
    with pytest.raises(OSError, match="disk full"):
        prepare_data(base_cfg())
    assert list((linrec_data_home / "splits").iterdir()) == []


def test_cache_false_writes_nothing(linrec_data_home, fake_source):
    cfg = {**base_cfg(), "cache": False}
    prepare_data(cfg)
    prepare_data(cfg)
    assert len(fake_source.calls) == 2
    assert not (linrec_data_home / "splits").exists()


def test_protocol_defaults_apply(linrec_data_home, fake_source):
    cfg = {"source": {"name": "fake"}, "split": {"kind": "loo"}, "cache": False}
    prepared = prepare_data(cfg)
    assert (
        prepared.split.valid is not None
        and prepared.stats["test_targets"] == (prepared.stats["test_users"])
    )


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            {"split": {"kind": "kfold"}},
            r"data.split.kind='kfold' is unknown; allowed: "
            r"\['holdout', 'loo', 'predefined', 'strong'\]",
        ),
        (
            {"split": {"kind": "loo", "test_fraction": 0.2}},
            r"data.split: unknown field\(s\) \['test_fraction'\]; allowed: "
            r"\['kind', 'order', 'valid', 'seed', 'test_foldin_includes_valid'\]",
        ),
        ({"split": {"seed": 3}}, "data.split must be a mapping with a 'kind'"),
        ({"split": {"kind": "holdout", "seed": -1}},
         "data.split.seed=-1 is out of range; allowed: an integer >= 0"),
        (
            {"split": {"kind": "holdout", "test_fraction": 1.5}},
            r"data.split.test_fraction=1.5 is out of range; allowed: a number > 0 and < 1",
        ),
        (
            {"split": {"kind": "strong", "n_valid_users": -2, "n_test_users": 1}},
            "data.split.n_valid_users=-2 is out of range; allowed: an integer >= 0",
        ),
        ({"splitting": {}}, r"data: unknown field\(s\) \['splitting'\]"),
        ({"filters": {"min_user": 2}}, r"data.filters: unknown field\(s\) \['min_user'\]"),
        ({"source": {"path": "x"}}, "data.source must be a mapping with a 'name'"),
        ({"cache": "yes"}, "data.cache='yes' is not a flag; allowed: true or false"),
        ({"path": "x"}, "data.path='x': source 'fake' has no path"),
        ({"split": {"kind": "predefined"}}, "predefined needs a source with published train/test"),
    ],
)
def test_config_errors(linrec_data_home, fake_source, change, match):
    with pytest.raises(ConfigError, match=match):
        prepare_data({**base_cfg(), **change})


@pytest.mark.parametrize("data_cfg", [None, "synthetic", [1, 2]])
def test_data_config_must_be_a_mapping(linrec_data_home, data_cfg):
    with pytest.raises(ConfigError, match="data=.* must be a mapping"):
        prepare_data(data_cfg)


def test_predefined_source_needs_predefined_kind(linrec_data_home, monkeypatch):
    train = Interactions.from_raw(np.array([0, 1]), np.array([0, 1]))
    data = PredefinedSplitData(train, train, name="lightgcn")
    monkeypatch.setattr(sources, "load_source", FakeSource(data), raising=False)
    with pytest.raises(ConfigError, match="'lightgcn' gives a published train/test split"):
        prepare_data({"source": {"name": "lightgcn"}, "split": {"kind": "holdout"}})
    with pytest.raises(ConfigError, match="filters are not applied to a predefined split"):
        prepare_data(
            {
                "source": {"name": "lightgcn"},
                "split": {"kind": "predefined"},
                "filters": {"min_user_interactions": 5},
            }
        )


def test_synthetic_source_end_to_end(linrec_data_home):
    cfg = {
        "name": "synthetic-small",
        "source": {"name": "synthetic", "n_users": 400, "n_items": 150, "seed": 3},
        "filters": {"min_user_interactions": 5, "min_item_interactions": 1},
        "split": {"kind": "strong", "n_valid_users": 40, "n_test_users": 40},
    }
    prepared = prepare_data(cfg)
    assert prepared.split.strong and prepared.name == "synthetic-small"
    assert prepared.stats["n_train_users"] == prepared.stats["n_users"] - 80
    assert prepared.stats["test_users"] <= 40
    assert prepared.stats["test_targets"] > 0
    cached = prepare_data(cfg)
    assert_same_split(prepared.split, cached.split)


def test_cache_key_changes_when_the_source_file_changes(linrec_data_home, tmp_path):
    data_file = tmp_path / "events.csv"
    data_file.write_text("user,item\n1,2\n")
    cfg = {"name": "t", "source": {"name": "tabular", "path": str(data_file)},
           "split": {"kind": "holdout"}}
    before = cache_path(cfg)
    data_file.write_text("user,item\n1,2\n3,4\n")
    assert cache_path(cfg) != before
    # the shortcut data.path is the source's path: the same key
    shortcut = {"name": "t", "source": {"name": "tabular"}, "split": {"kind": "holdout"},
                "path": str(data_file)}
    assert cache_path(shortcut) == cache_path(cfg)
    # the label of the data is not part of the key
    assert cache_path({**cfg, "name": "other"}) == cache_path(cfg)
