"""The study registry (linrec.studies.registry): one runner per study config, lazy dispatch."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

import linrec.studies
from linrec.errors import ConfigError
from linrec.registry import Registry
from linrec.studies import registry
from linrec.study_configs import STUDY_CONFIGS


def test_every_study_config_has_a_runner_and_the_package_re_exports_it():
    assert set(registry.STUDIES) == set(STUDY_CONFIGS)
    for name, path in registry.STUDIES.items():
        module, func = path.split(":")
        assert callable(getattr(importlib.import_module(module), func)), name
    assert linrec.studies.run_study is registry.run_study
    assert linrec.studies.STUDIES is registry.STUDIES


def test_run_study_calls_the_named_runner_with_config_and_directory(monkeypatch, tmp_path):
    calls = []
    fake = types.ModuleType("fake_study")
    fake.run = lambda config, run_dir: calls.append((config, run_dir)) or 0.25
    monkeypatch.setitem(sys.modules, "fake_study", fake)
    monkeypatch.setattr(registry, "STUDIES", Registry("study.name", {"fake": "fake_study:run"}))
    config = types.SimpleNamespace(study=types.SimpleNamespace(name="fake"))
    assert registry.run_study(config, Path(tmp_path)) == 0.25
    assert calls == [(config, Path(tmp_path))]


def test_an_unknown_study_names_the_allowed_ones():
    config = types.SimpleNamespace(study=types.SimpleNamespace(name="nope"))
    with pytest.raises(ConfigError, match=r"study.name='nope' is unknown; allowed: "
                                          r"\['linear_models', 'loss_study', 'sampling_study'\]"):
        registry.run_study(config, Path("."))
