"""Recommenders behind one contract (`Recommender`), each built from its typed config
(`linrec.models.configs`); `build_model(config)` for configs, `from linrec.models import EASE`
for Python use (classes are imported lazily)."""

from linrec.models.base import Recommender
from linrec.models.configs import MODEL_CONFIGS, ModelConfig
from linrec.models.registry import MODELS, build_model, model_class, model_config

__all__ = ["MODELS", "MODEL_CONFIGS", "ModelConfig", "Recommender", "build_model",
           "model_class", "model_config"]


def __getattr__(name: str):
    # lazy re-exports (`from linrec.models import EASE`) without importing every back-end
    for key, config in MODEL_CONFIGS.items():
        if config.model_path.endswith(":" + name):
            return model_class(key)
    raise AttributeError(name)
