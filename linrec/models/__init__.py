"""Recommenders behind one contract (`Recommender`); `build_model(name, **params)` for configs."""

from linrec.models.base import Recommender
from linrec.models.registry import MODELS, build_model, model_class

__all__ = ["MODELS", "Recommender", "build_model", "model_class", "EASE"]


def __getattr__(name: str):
    # lazy re-exports (`from linrec.models import EASE`) without importing every back-end
    for key, target in MODELS.items():
        if target.endswith(":" + name):
            return model_class(key)
    raise AttributeError(name)
