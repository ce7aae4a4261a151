"""Model names used in configs (`model.name`) -> classes, imported lazily so that
`linrec model=ease` does not import torch."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from linrec.errors import ConfigError
from linrec.models.base import Recommender

MODELS: dict[str, str] = {
    "ease": "linrec.models.ease:EASE",
    "dlae": "linrec.models.ease:DLAE",
    "edlae": "linrec.models.ease:EDLAE",
    "edlae_lowrank": "linrec.models.ease:LowRankEDLAE",
    "debiased_ease": "linrec.models.ease:DebiasedEASE",
    "most_popular": "linrec.models.baselines:MostPopular",
    "itemknn": "linrec.models.baselines:ItemKNN",
    "slim": "linrec.models.baselines:SLIM",
    "lrr": "linrec.models.spectral:LRR",
    "puresvd": "linrec.models.spectral:PureSVD",
    "mf_closed": "linrec.models.spectral:ClosedFormMF",
    "ridge": "linrec.models.spectral:Ridge",
    "ials": "linrec.models.als:IALS",
    "debiased_ials": "linrec.models.als:DebiasedIALS",
    "wmf": "linrec.models.als:WMF",
    "learned_lambda": "linrec.models.nearby:LearnedLambda",
    "nearby_ht": "linrec.models.nearby:NearbyItemItem",
    "nearby_sparse": "linrec.models.nearby:NearbyItemItem",
}


def model_class(name: str) -> type[Recommender]:
    """The class registered under `name` (ConfigError listing the known names otherwise)."""
    if name not in MODELS:
        known = ", ".join(sorted(MODELS))
        raise ConfigError(f"model.name={name!r} is unknown; known models: {known}")
    module_name, cls_name = MODELS[name].split(":")
    try:
        return getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"model.name={name!r} is not available in this build: {exc}") from exc


def build_model(name: str, **params: Any) -> Recommender:
    """Instantiate model `name` with `params`; an unknown parameter is a ConfigError naming it."""
    cls = model_class(name)
    accepted = inspect.signature(cls.__init__).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
        unknown = sorted(set(params) - set(accepted) - {"self"})
        if unknown:
            allowed = sorted(set(accepted) - {"self"})
            raise ConfigError(
                f"model {name!r} has no parameter(s) {unknown}; allowed: {allowed}"
            )
    return cls(**params)
