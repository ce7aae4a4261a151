"""Dataset readers, one module per public format, behind one registry.

`load_source(name, **params)` calls `<module>.load(**params)` of the source `name` (the
`data.source.*` config fields are its keyword arguments). Modules are imported lazily so that
the default synthetic data does not import pandas.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from linrec.data.interactions import Interactions, PredefinedSplitData
from linrec.errors import ConfigError

#: data.source.name -> "module:function" returning Interactions or PredefinedSplitData
SOURCES: dict[str, str] = {
    "synthetic": "linrec.data.sources.synthetic:load",
    "movielens": "linrec.data.sources.movielens:load",
    "netflix": "linrec.data.sources.netflix:load",
    "msd": "linrec.data.sources.msd:load",
    "lightgcn": "linrec.data.sources.lightgcn:load",
    "ncf": "linrec.data.sources.ncf:load",
    "tabular": "linrec.data.sources.tabular:load",
}


def source_loader(name: str) -> Callable[..., Interactions | PredefinedSplitData]:
    """The `load` function of source `name` (ConfigError listing the known sources otherwise)."""
    if name not in SOURCES:
        raise ConfigError(
            f"data.source.name={name!r} is unknown; known sources: {', '.join(sorted(SOURCES))}"
        )
    module_name, function_name = SOURCES[name].split(":")
    return getattr(importlib.import_module(module_name), function_name)


def source_params(name: str) -> dict[str, Any]:
    """Parameter name -> default of source `name` (the allowed `data.source.*` fields)."""
    signature = inspect.signature(source_loader(name))
    return {p.name: p.default for p in signature.parameters.values()}


def load_source(name: str, **params: Any) -> Interactions | PredefinedSplitData:
    """Load source `name` with `params`; an unknown parameter is a ConfigError naming it and
    the allowed ones."""
    allowed = source_params(name)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ConfigError(
            f"data source {name!r} has no parameter(s) {unknown}; allowed: {sorted(allowed)}"
        )
    return source_loader(name)(**params)


__all__ = ["SOURCES", "load_source", "source_loader", "source_params"]
