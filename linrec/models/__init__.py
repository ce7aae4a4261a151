"""Recommenders behind one contract (`Recommender`), each built from its typed config
(`linrec.models.configs`); `build_model(config)` for configs, `from linrec.models import EASE`
for Python use (classes and `Recommender` are imported lazily: `linrec.lazy_exports`)."""

from linrec.lazy_exports import lazy_exports
from linrec.models.configs import MODEL_CONFIGS, ModelConfig
from linrec.models.registry import MODELS, build_model, model_class, model_config

__all__ = ["MODELS", "MODEL_CONFIGS", "ModelConfig", "build_model", "model_class",
           "model_config", *lazy_exports(__name__, {"linrec.models.base": ("Recommender",)})]


def __getattr__(name: str):
    # lazy re-exports (`from linrec.models import EASE`) without importing every back-end
    for key, config in MODEL_CONFIGS.items():
        if config.model_path.endswith(":" + name):
            return model_class(key)
    raise AttributeError(name)  # then `Recommender` (linrec.lazy_exports)
