"""The source registry: `data.source.name` -> the source's typed config and its reader.

`load_source(config)` calls the source's loader (`<module>.load`) with the fields of its typed
config (`linrec.data.configs`); `load_source(name, **params)` builds that config first. Reader
modules are imported lazily so that the default synthetic data does not import pandas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from linrec.data.configs import SOURCE_CONFIGS, SourceConfig
from linrec.data.interactions import Interactions, PredefinedSplitData
from linrec.errors import ConfigError
from linrec.registry import load

#: every source name (`data.source.name`)
SOURCES: tuple[str, ...] = tuple(SOURCE_CONFIGS)


def source_config(name: str, **params: Any) -> SourceConfig:
    """The checked config of source `name` (ConfigError naming an unknown source or field)."""
    return SOURCE_CONFIGS.entry(name).from_mapping({**params, "name": name})


def source_loader(config: SourceConfig) -> Callable[..., Interactions | PredefinedSplitData]:
    """The `load` function of a source config."""
    return load(config.loader)


def load_source(config: SourceConfig | str, **params: Any) -> Interactions | PredefinedSplitData:
    """Load a source from its config, or from its name and parameters."""
    if isinstance(config, str):
        config = source_config(config, **params)
    elif params:
        raise ConfigError("load_source: pass parameters in the config, not beside it")
    return source_loader(config)(**config.loader_params())
