"""The run's typed config (`RunConfig`) and the registration of every typed config in Hydra's
ConfigStore, so that `conf/*.yaml` only select and preset them.

Registered nodes: `schema/run` (the primary config's schema), `schema/model/<name>` per model,
`schema/loss/<name>` per loss, `schema/data/split/<kind>` per split protocol (conf/model/*.yaml,
conf/loss/*.yaml and conf/data/split/*.yaml preset them), `data/source/<name>` per source and
`study/<name>` per study (selected by the data and experiment presets). A model, loss or split
protocol registered outside linrec (a plugin) is also stored as the option of its group
(`model/<name>`, `loss/<name>`, `data/split/<kind>`), so that it needs no YAML file; linrec's
own have theirs in conf/ (Hydra would match a YAML file and a ConfigStore option of the same
name, a deprecated behaviour, so a name has one or the other). An override that names a
field a config does not have, or a value of the wrong type, fails at composition (a study's
values are checked when the run starts). Every `seed` field of a model and `eval.sampled.seed`
are registered as `${seed}`: the run seed reaches everything random but the data split, whose
seed is part of the dataset's definition (`data.split.seed`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from linrec.data.configs import SOURCE_CONFIGS, SPLIT_CONFIGS, DataConfig
from linrec.errors import ConfigError
from linrec.eval.configs import EvalConfig
from linrec.models.configs import MODEL_CONFIGS
from linrec.models.losses import LOSS_CONFIGS
from linrec.params import Params, chosen_config, param, registry_choices_unchecked
from linrec.registry import BUILT_IN
from linrec.study_configs import STUDY_CONFIGS
from linrec.tracking import TrackingConfig

RUN_SEED = "${seed}"


@dataclass
class RunConfig(Params):
    """One run: data -> model -> fit -> evaluate -> results.json (or a study, when `study` is
    set). `seed` drives tie-breaking, item sampling and every stochastic model."""

    where = "config"

    data: DataConfig = field(default_factory=DataConfig)
    model: Any = param(None, doc="the model (model=<name>); its fields are under model.*")
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = param(0, ge=0,
                      doc="drives tie-breaking, item sampling and every stochastic model (not "
                          "the data split)")
    save_ranks: bool = param(True, doc="write ranks.npz (global rank of every held-out item)")
    figures: bool = param(True, doc="write the run's figures (PNG and PDF) into its directory")
    save_model: bool = param(False, doc="write model.pkl")
    quiet: bool = param(False, doc="print only where results.json is")
    verbose: bool = param(False, doc="print the full tables (every metric and K of every "
                                     "split, every estimator) instead of the summary")
    resume: bool = param(True, doc="continue what an earlier run of the same command left "
                                   "(complete sweep jobs, epoch checkpoints); false: start over")
    study: Any = param(None, doc="a study instead of one run (set by experiment= presets)")
    loss: Any = param(None, doc="loss=<name> and loss.* on the command line: merged into "
                                "model.loss when the config is built, null afterwards (the loss "
                                "is stored once, in the model)")
    plugins: tuple[str, ...] = param((), doc="plugins to load besides the installed ones (entry "
                                             "points of linrec.plugins) and $LINREC_PLUGINS: "
                                             "module names or .py paths (linrec.plugins)")
    tracking: Any = param(None, doc="log the run to a local MLflow store (+tracking=mlflow; "
                                    "the fields: TrackingConfig in linrec/tracking.py)")

    def check(self) -> None:
        if isinstance(self.model, Mapping):
            from linrec.models.registry import model_config

            values = dict(self.model)
            if not values.get("name"):
                raise ConfigError("model.name is missing: choose a model group, e.g. model=ease")
            if self.loss is not None and "loss" in values:
                # before the model's own check, which reads its loss (model.similarity=dot
                # is refused with the default cosine loss, allowed with loss=bpr)
                values["loss"] = self.loss
                self.loss = None
            self.model = model_config(values.pop("name"), **values)
        if self.study is None and self.model is None:
            raise ConfigError("model is missing: choose a model group, e.g. model=ease")
        if self.loss is not None:
            if self.model is None or "loss" not in self.model.names():
                name = None if self.model is None else self.model.name
                raise ConfigError(f"loss= applies to a model trained with a loss (model=mf); "
                                  f"model {name!r} has none")
            self.model = dataclasses.replace(self.model, loss=self.loss)
            self.loss = None
        if self.study is not None:
            self.study = chosen_config(self.study, STUDY_CONFIGS, "study")
        if isinstance(self.tracking, Mapping):
            self.tracking = TrackingConfig.from_mapping(self.tracking)


def run_config(cfg: Any) -> RunConfig:
    """The checked RunConfig of a Hydra DictConfig (interpolations resolved) or a mapping."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, RunConfig):
        return cfg
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    values = dict(cfg)
    values.pop("hydra", None)
    return RunConfig.from_mapping(values)


def _schema(cls: type, **presets: Any) -> Any:
    """The ConfigStore node of a config class, with `presets` (e.g. seed=${seed}) applied."""
    from omegaconf import OmegaConf

    node = OmegaConf.structured(cls)
    for key, value in presets.items():
        OmegaConf.update(node, key, value, merge=False)
    return node


#: the registries' entries that ConfigStore holds (register_configs skips an unchanged set)
_registered: tuple | None = None


def register_configs() -> None:
    """Register every typed config in Hydra's ConfigStore: once per set of registered classes
    (a second call with the same registries does nothing; an entry added since re-registers)."""
    global _registered
    from hydra.core.config_store import ConfigStore

    registries = (MODEL_CONFIGS, LOSS_CONFIGS, SPLIT_CONFIGS, SOURCE_CONFIGS, STUDY_CONFIGS)
    entries = tuple(tuple(registry.items()) for registry in registries)
    if entries == _registered:
        return
    with registry_choices_unchecked():  # the schemas' defaults are built-in names
        _store_schemas(ConfigStore.instance())
    _registered = entries


def _store_schemas(store: Any) -> None:
    """Every typed config's node in `store` (Hydra's ConfigStore): the run's schema, each
    registry's classes, the groups of plugin classes that have no YAML file."""
    # data.source and data.split are left untyped: the data and split groups choose their class
    store.store(group="schema", name="run",
                node=_schema(RunConfig, **{"eval.sampled.seed": RUN_SEED, "data.source": None,
                                           "data.split": None}))
    for name, cls in MODEL_CONFIGS.items():
        presets = {"seed": RUN_SEED} if "seed" in cls.__dataclass_fields__ else {}
        if "loss" in cls.__dataclass_fields__:
            presets["loss"] = None  # untyped: loss=<name> chooses the class
        node = _schema(cls, **presets)
        store.store(group="schema/model", name=name, node=node)
        if MODEL_CONFIGS.origin(name) != BUILT_IN:  # model=<name> with no YAML file
            store.store(group="model", name=name, node=node)
    for name, cls in LOSS_CONFIGS.items():
        store.store(group="schema/loss", name=name, node=_schema(cls))
        if LOSS_CONFIGS.origin(name) != BUILT_IN:
            store.store(group="loss", name=name, node=_schema(cls))
    for kind, cls in SPLIT_CONFIGS.items():
        store.store(group="schema/data/split", name=kind, node=_schema(cls))
        if SPLIT_CONFIGS.origin(kind) != BUILT_IN:
            store.store(group="data/split", name=kind, node=_schema(cls))
    for name, cls in SOURCE_CONFIGS.items():
        store.store(group="data/source", name=name, node=_schema(cls))
    for name, cls in STUDY_CONFIGS.items():
        # untyped, so that `~study.models +study.models={...}` can replace a study's model set;
        # unknown fields still fail at composition, bad values when the run starts (StudyConfig)
        store.store(group="study", name=name, node=cls.defaults())
