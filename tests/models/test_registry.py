"""The model registry (linrec.models.registry): names, lazy imports, building from a config, a
mapping or a name, and the errors that list the allowed names."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import linrec.models
from linrec.errors import ConfigError
from linrec.models import MODEL_CONFIGS, MODELS, build_model, model_class, model_config
from linrec.models.base import Recommender
from linrec.models.configs import EASEConfig


def test_names_are_the_configs_and_every_config_builds_its_class():
    assert MODELS == tuple(MODEL_CONFIGS) and len(MODELS) == len(set(MODELS))
    for name, cls in MODEL_CONFIGS.items():
        model_cls = model_class(name)
        # a class may serve several configs (nearby_sparse is nearby_ht's class, sparsified)
        assert issubclass(model_cls, Recommender) and issubclass(cls, model_cls.config_class)
        model = build_model(cls())
        assert type(model) is model_cls and model.config == cls() and model.name == name


def test_unknown_names_list_the_allowed_ones():
    allowed = str(sorted(MODELS)).replace("[", r"\[").replace("]", r"\]")
    with pytest.raises(ConfigError, match=f"^model.name='easy' is unknown; allowed: {allowed}$"):
        model_class("easy")
    with pytest.raises(ConfigError, match=r"model.name='easy' is unknown; allowed: "
                                          r"\['debiased_ease', 'debiased_ials', 'dlae'"):
        model_config("easy")
    with pytest.raises(ConfigError, match="model.name='easy' is unknown"):
        build_model({"name": "easy"})


def test_a_model_is_built_from_a_config_a_mapping_or_a_name():
    by_name = build_model("ease", lam=3.0)
    by_mapping = build_model({"name": "ease", "lam": 3.0})
    by_config = build_model(EASEConfig(lam=3.0))
    assert by_name.config == by_mapping.config == by_config.config == EASEConfig(lam=3.0)
    assert model_config("ease", lam=3.0) == EASEConfig(lam=3.0)
    with pytest.raises(ConfigError, match="model.name is missing"):
        build_model({"lam": 3.0})
    with pytest.raises(ConfigError, match="pass parameters in the config"):
        build_model(EASEConfig(), lam=1.0)
    with pytest.raises(ConfigError, match=r"model 'ease' has no parameter\(s\) \['rank'\]"):
        build_model("ease", rank=3)


def test_a_class_that_cannot_be_imported_is_a_config_error(monkeypatch):
    monkeypatch.setattr(EASEConfig, "model_path", "linrec.models.no_such_module:Nothing")
    with pytest.raises(ConfigError, match="model.name='ease' is not available in this build"):
        model_class("ease")


def test_classes_are_imported_lazily():
    """Building EASE or LRR imports neither torch, implicit nor numba (the iALS, MF and nearby
    back-ends); `from linrec.models import IALS` imports its module on demand."""
    script = textwrap.dedent("""
        import sys
        from linrec.models import LRR, build_model
        build_model("ease", lam=1.0)
        heavy = ("torch", "implicit", "numba", "linrec.models.als", "linrec.models.mf")
        print(sorted(m for m in heavy if m in sys.modules))
        from linrec.models import IALS
        print(IALS.__module__, "linrec.models.als" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120).stdout.splitlines()
    assert out == ["[]", "linrec.models.als True"]


def test_an_unknown_attribute_of_the_package_is_an_attribute_error():
    assert linrec.models.EASE is model_class("ease")
    with pytest.raises(AttributeError, match="NoSuchModel"):
        _ = linrec.models.NoSuchModel
