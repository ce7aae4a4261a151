"""Typed configs of the studies (`experiment=<name>` presets set `study.*`). What a study
evaluates and how comes from the run's `eval` block; these hold what is particular to a study."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from linrec.errors import ConfigError
from linrec.params import Params, param
from linrec.registry import Registry

#: kinds of the mapping functions a sampling study tabulates ("beta@<a>" takes a number)
MAPPING_KINDS = ("linear", "bound", "beta", "beta_p")
#: what a linear-models family trains on
TRAIN_ON = ("train", "train_and_foldin")


@dataclass
class StudyConfig(Params):
    """Base of the study configs: `name` selects the study."""

    where = "study"
    name: str = ""
    models: dict[str, Any] = param({})

    def check(self) -> None:
        expected = type(self).__dataclass_fields__["name"].default
        if self.name != expected:
            raise ConfigError(f"study.name={self.name!r} does not match its config "
                              f"{type(self).__name__} ({expected!r})")
        if not self.models:
            raise ConfigError("study.models is empty; give at least one model")


def _check_mapping(spec: str) -> None:
    kind, _, a = spec.partition("@")
    try:
        ok = kind in MAPPING_KINDS and (kind == "beta") == bool(a) and float(a or "0") >= 0
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"study.mappings: {spec!r} is unknown; allowed: linear, bound, "
                          "beta@<a> (a number), beta_p")


@dataclass
class SamplingStudyConfig(StudyConfig):
    """How well each estimator recovers exact metrics from sampled ranks (Li et al. 2023,
    Tables 1–11; the mapping tables of Li et al. 2020, Tables 5–7). Every
    model of `models` is one run evaluated with the sampled block of `eval.sampled` (the preset
    simulates 100 repeats at n = 100, 500, 1000 and adaptive sampling); the study adds the
    winner-accuracy and mapping tables across the models."""

    name: str = "sampling_study"
    models: dict[str, Any] = param({
        "itemknn": {"name": "itemknn", "k": 100}, "puresvd": {"name": "puresvd", "rank": 64},
        "ials": {"name": "ials", "factors": 64}, "ease": {"name": "ease", "lam": 500.0},
        "most_popular": {"name": "most_popular"}}, doc="label -> model config")
    winner_ks: tuple[int, ...] = param((5, 10, 20), ge=1,
                                       doc="cut-offs of the winner-accuracy table")
    mappings: tuple[str, ...] = param(("linear", "bound", "beta@1", "beta@0.5", "beta@0.2",
                                       "beta_p"),
                                      doc="mapping functions of the mapping table: linear, "
                                          "bound, beta@<a>, beta_p")
    mapping_ks: tuple[int, ...] = param((1, 2, 5, 10, 20, 50), ge=1,
                                        doc="sampled cut-offs k the mapping table maps")
    runs: tuple[str, ...] = param((), doc="saved runs to study instead of training `models`: "
                                         "run directories, or directories below which every "
                                         "run with a ranks.npz is taken (one dataset); "
                                         "`label:path` names a run (or prefixes the runs "
                                         "below) in the tables")
    user_samples: tuple[int, ...] = param((1000, 5000, 10000), ge=1,
                                          doc="user-sampling table: numbers of users drawn "
                                              "(each with every target it has) and ranked "
                                              "exactly; () skips the table")
    user_sampling_estimator: str | None = param(
        None, doc="the item-sampling estimator the user-sampling table sets beside it (one of "
                  "eval.sampled.estimators); null: mn_mes when it is among them, else the last "
                  "of them")

    def check(self) -> None:
        if not self.runs:
            super().check()
        for spec in self.mappings:
            _check_mapping(spec)


@dataclass
class LinearModelsStudyConfig(StudyConfig):
    """Tables 8/9 protocol and the grids of Tables 14–17 (Liang et al. 2018; Li 2023, Algorithm 2;
    Li 2023, Tables 8–18): each family's grid selected on the validation users (`eval.selection`),
    the best point scored on the test users. A family: {model: <name>, grid: {param: [values]},
    params: {...}, train_on: train | train_and_foldin}."""

    name: str = "linear_models"
    report: tuple[str, ...] = param(("recall_trunc@20", "recall_trunc@50", "ndcg@100"),
                                    doc="metrics of the study's tables")
    models: dict[str, Any] = param({"ease": {"model": "ease", "grid": {"lam": [400]}}},
                                   doc="label -> family")

    def check(self) -> None:
        super().check()
        allowed = ("model", "grid", "params", "train_on")
        for label, family in self.models.items():
            if not isinstance(family, dict) or not isinstance(family.get("model"), str):
                raise ConfigError(f"study.models.{label}={family!r} must be a mapping with a "
                                  "'model' name (and optional grid, params, train_on)")
            unknown = sorted(set(family) - set(allowed))
            if unknown:
                raise ConfigError(f"study.models.{label}: unknown field(s) {unknown}; allowed: "
                                  f"{list(allowed)}")
            if family.get("train_on", "train") not in TRAIN_ON:
                raise ConfigError(f"study.models.{label}.train_on={family['train_on']!r}; "
                                  f"allowed: {list(TRAIN_ON)}")


@dataclass
class LossStudyConfig(StudyConfig):
    """The losses × datasets grid of Table 12 (Li 2023, Table 12) on one MF backbone: every
    (dataset, loss) is one run of the model block (`model=mf`, its fields overridden by the
    loss's entry in `models`) on that dataset. `datasets`: label -> data config (a mapping of
    DataConfig fields; the LightGCN splits in the preset). `rows`: the table's groups, each
    {name, biased, debiased} (RI% of the debiased loss over the biased one) or {name, loss,
    against} (RI% of `loss` over `against`, e.g. MINE over InfoNCE). `per_dataset`: dataset
    label -> loss label -> MF fields merged over that loss's entry for that dataset only (the
    settings Tables 19 and 20 publish per dataset)."""

    name: str = "loss_study"
    datasets: dict[str, Any] = param({}, doc="label -> data config; none by default, so that "
                                         "a preset's datasets are the study's (a default "
                                         "merged into them)")
    models: dict[str, Any] = param({"ccl": {"loss": {"name": "ccl"}},
                                    "debiased_ccl": {"loss": {"name": "debiased_ccl"}}},
                                   doc="label -> MF fields (loss included)")
    rows: list[dict[str, Any]] = param([{"name": "CCL", "biased": "ccl",
                                         "debiased": "debiased_ccl"}],
                                       doc="the table's groups: {name, biased, debiased} or "
                                           "{name, loss, against}")
    per_dataset: dict[str, Any] = param({}, doc="dataset -> loss -> MF fields for that pair")
    metrics: tuple[str, ...] = param(("recall@20", "ndcg@20"), doc="metrics of the table")

    def check(self) -> None:
        super().check()
        if not self.datasets:
            raise ConfigError("study.datasets is empty; give at least one dataset")
        for dataset, entries in self.per_dataset.items():
            if not isinstance(entries, dict):
                raise ConfigError(f"study.per_dataset.{dataset}={entries!r} must be a mapping "
                                  "loss label -> MF fields")
            # a dataset or loss that is not in the study (e.g. removed on the command line)
            # keeps its settings unused; a label that is in neither is a typo
            unknown = sorted(set(entries) - set(self.models))
            if unknown:
                raise ConfigError(f"study.per_dataset.{dataset}: {unknown} are not in "
                                  f"study.models {sorted(self.models)}")
        for row in self.rows:
            keys = set(row) - {"name"}
            if keys not in ({"biased", "debiased"}, {"loss", "against"}) or "name" not in row:
                raise ConfigError(f"study.rows: {row!r} must be {{name, biased, debiased}} or "
                                  "{name, loss, against}")
            unknown = [row[k] for k in keys if row[k] not in self.models]
            if unknown:
                raise ConfigError(f"study.rows: {unknown} are not in study.models "
                                  f"{sorted(self.models)}")


STUDY_CONFIGS: Registry[type[StudyConfig]] = Registry.of_configs(
    "study.name", (SamplingStudyConfig, LinearModelsStudyConfig, LossStudyConfig))
