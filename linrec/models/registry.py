"""Model names used in configs (`model.name`) -> model classes, imported lazily so that
`linrec model=ease` does not import torch. The names and parameters are the typed configs of
`linrec.models.configs`; nothing in `linrec.models` imports this module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from linrec.errors import ConfigError
from linrec.models.configs import MODEL_CONFIGS, ModelConfig
from linrec.params import chosen_config
from linrec.registry import load

if TYPE_CHECKING:
    from linrec.models.base import Recommender

#: every model name
MODELS: tuple[str, ...] = tuple(MODEL_CONFIGS)


def model_config(name: str, **params: Any) -> ModelConfig:
    """The checked config of model `name` (ConfigError listing the known names otherwise)."""
    return chosen_config({**params, "name": name}, MODEL_CONFIGS, "model")


def model_class(name: str) -> type[Recommender]:
    """The class registered under `name` (ConfigError listing the known names otherwise)."""
    config = MODEL_CONFIGS.entry(name)
    try:
        return load(config.model_path)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"model.name={name!r} is not available in this build: {exc}") from exc


def build_model(config: ModelConfig | Mapping[str, Any] | str, **params: Any) -> Recommender:
    """A model from its config, from a mapping {name: ..., params...}, or from a name and its
    parameters (`build_model("ease", lam=300)`); bad names or values raise ConfigError."""
    if isinstance(config, str):
        config = model_config(config, **params)
    elif isinstance(config, Mapping):
        values = dict(config)
        if not values.get("name"):
            raise ConfigError("model.name is missing: choose a model group, e.g. model=ease")
        config = model_config(values.pop("name"), **values, **params)
    elif params:
        raise ConfigError("build_model: pass parameters in the config, not beside it")
    return model_class(config.name)(config)
