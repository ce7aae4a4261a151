"""Typed, validated views of the `eval` config group (the data and model groups are validated by
their own builders). Every bad value raises ConfigError naming the field and the allowed range."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from linrec.errors import ConfigError
from linrec.eval.metrics import EXACT_METRICS

SAMPLED_POOLS = ("all_but_target", "non_interacted", "given")


def _from_dict(cls, values: Mapping[str, Any], where: str):
    """cls(**values) after checking the names and the types of the fields (ConfigError)."""
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(fields)}")
    values = dict(values)
    for name, value in values.items():
        values[name] = typed_value(value, str(fields[name]), f"{where}.{name}")
    return cls(**values)


def typed_value(value: Any, annotation: str, field_name: str) -> Any:
    """`value` checked against a field annotation ('int', 'bool', 'str', 'tuple[int, ...]',
    'tuple[str, ...]'; nested configs pass through); lists become tuples."""
    scalar_types = {"int": int, "bool": bool, "str": str}
    if annotation.startswith("tuple["):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{field_name}={value!r} must be a list, e.g. [{value}]")
        element = annotation[len("tuple["):].split(",")[0]
        return tuple(typed_value(v, element, field_name) for v in value)
    expected = scalar_types.get(annotation)
    if expected is None:
        return value
    # bool is an int in Python: reject it where a number is meant, and ints where a flag is meant
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ConfigError(f"{field_name}={value!r} must be of type {annotation}")
    return value


def _sub_config(cls, values: Any, where: str):
    """A nested config from its mapping (ConfigError for anything else)."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where}={values!r} must be a mapping of {cls.__name__} fields")
    if hasattr(cls, "from_dict"):
        return cls.from_dict(values)
    return _from_dict(cls, values, where)


@dataclass(frozen=True)
class AdaptiveConfig:
    n0: int = 100
    n_max: int = 3200


@dataclass(frozen=True)
class SampledConfig:
    """eval.sampled: item-sampled evaluation and estimators (spec/evaluation.md §0.2, §10.3)."""

    enabled: bool = True
    sample_size: int = 100
    replace: bool = True
    pool: str = "all_but_target"
    repeats: int = 10
    seed: int = 0
    estimators: tuple[str, ...] = ("naive", "bv", "mle", "mn_mle", "adaptive_mle")
    metrics: tuple[str, ...] = ("recall", "ndcg", "ap")
    k_max: int = 50
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)

    def __post_init__(self) -> None:
        if self.sample_size < 2:
            raise ConfigError(f"eval.sampled.sample_size={self.sample_size} must be >= 2")
        if self.repeats < 1:
            raise ConfigError(f"eval.sampled.repeats={self.repeats} must be >= 1")
        if self.k_max < 1:
            raise ConfigError(f"eval.sampled.k_max={self.k_max} must be >= 1")
        if self.pool not in SAMPLED_POOLS:
            raise ConfigError(f"eval.sampled.pool={self.pool!r}; allowed: {list(SAMPLED_POOLS)}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SampledConfig:
        values = dict(values)
        if "adaptive" in values:
            values["adaptive"] = _sub_config(
                AdaptiveConfig, values["adaptive"], "eval.sampled.adaptive"
            )
        return _from_dict(cls, values, "eval.sampled")


@dataclass(frozen=True)
class EvalConfig:
    """eval: exact metrics at every K, selection metric, batch memory budget, sampled block."""

    ks: tuple[int, ...] = (1, 5, 10, 20, 50, 100)
    metrics: tuple[str, ...] = EXACT_METRICS
    selection: str = "ndcg@100"
    memory_budget_mb: int = 512
    splits: tuple[str, ...] = ("valid", "test")
    sampled: SampledConfig = field(default_factory=SampledConfig)

    def __post_init__(self) -> None:
        bad_k = [k for k in self.ks if not isinstance(k, int) or k <= 0]
        if not self.ks or bad_k:
            raise ConfigError(f"eval.ks={list(self.ks)}: every K must be a positive integer")
        unknown = [m for m in self.metrics if m not in EXACT_METRICS]
        if unknown:
            raise ConfigError(f"eval.metrics: unknown {unknown}; allowed: {list(EXACT_METRICS)}")
        bad_split = [s for s in self.splits if s not in ("valid", "test")]
        if bad_split:
            raise ConfigError(f"eval.splits: unknown {bad_split}; allowed: ['valid', 'test']")
        if self.memory_budget_mb <= 0:
            raise ConfigError(f"eval.memory_budget_mb={self.memory_budget_mb} must be positive")
        parse_metric_key(self.selection, field_name="eval.selection")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> EvalConfig:
        if not isinstance(values, Mapping):
            raise ConfigError(f"eval={values!r} must be a mapping of EvalConfig fields")
        values = dict(values)
        if "sampled" in values:
            values["sampled"] = _sub_config(SampledConfig, values["sampled"], "eval.sampled")
        return _from_dict(cls, values, "eval")

    def ks_for(self, n_items: int) -> tuple[int, ...]:
        """The configured K that the catalogue allows (K <= n_items), plus the selection K."""
        ks = {k for k in self.ks if k <= n_items}
        _, selection_k = parse_metric_key(resolve_selection(self.selection, n_items))
        if selection_k is not None:
            ks.add(selection_k)
        if not ks:
            raise ConfigError(f"eval.ks={list(self.ks)}: no K <= n_items={n_items}")
        return tuple(sorted(ks))


def parse_metric_key(key: str, field_name: str = "metric") -> tuple[str, int | None]:
    """'ndcg@100' -> ('ndcg', 100); 'auc' -> ('auc', None). ConfigError for anything else."""
    name, _, k = key.partition("@")
    if name not in EXACT_METRICS or (name != "auc" and not k.isdigit()) or (k and int(k) <= 0):
        raise ConfigError(
            f"{field_name}={key!r}: expected <metric>@<K> with metric in {list(EXACT_METRICS)}"
            " and K a positive integer, or 'auc'"
        )
    return name, (int(k) if k else None)


def resolve_selection(selection: str, n_items: int) -> str:
    """The selection key a run reports: K is lowered to n_items when the catalogue is smaller."""
    name, k = parse_metric_key(selection, field_name="eval.selection")
    return selection if k is None or k <= n_items else f"{name}@{n_items}"
