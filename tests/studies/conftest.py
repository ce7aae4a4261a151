"""Helpers of the study tests: small synthetic data, an isolated data home, and the shared
`compose_config` (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import compose_config

__all__ = ["SMALL_DATA", "compose_config"]

SMALL_DATA = ["data.source.n_users=400", "data.source.n_items=150"]


@pytest.fixture(autouse=True)
def _data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("LINREC_DATA", str(tmp_path / "cache"))
