"""Helpers of the study tests: compose a config as `linrec` does, with an isolated data home."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from linrec.cli import config_dir
from linrec.config import register_configs

SMALL_DATA = ["data.source.n_users=400", "data.source.n_items=150"]


def compose_config(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture(autouse=True)
def _data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("LINREC_DATA", str(tmp_path / "cache"))
