"""Pieces every study shares: fitting a named model set once and writing tables."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from linrec.config import typed_value
from linrec.errors import ConfigError
from linrec.atomic import write_text_atomic
from linrec.results import to_csv, to_markdown

log = logging.getLogger("linrec")


def check_study_fields(study: Any, fields: Mapping[str, str], optional: tuple[str, ...] = ()
                       ) -> dict[str, Any]:
    """The `study` config as a dict after checking it against `fields` (name -> 'mapping' or an
    annotation of `linrec.config.typed_value`: 'int', 'bool', 'str', 'tuple[int, ...]', ...);
    every field is required unless `optional`. ConfigError naming study.<field> for a missing,
    unknown or mistyped field."""
    if not isinstance(study, Mapping):
        raise ConfigError(f"study={study!r} must be a mapping")
    study = dict(study)
    unknown = sorted(set(study) - set(fields))
    if unknown:
        raise ConfigError(f"study: unknown field(s) {unknown}; allowed: {sorted(fields)}")
    missing = sorted(set(fields) - set(study) - set(optional))
    if missing:
        raise ConfigError(f"study: missing field(s) {missing}")
    for name in set(study) & set(fields):
        if fields[name] != "mapping":
            study[name] = typed_value(study[name], fields[name], f"study.{name}")
        elif not isinstance(study[name], Mapping) or not study[name]:
            raise ConfigError(f"study.{name}={study[name]!r} must be a non-empty mapping")
    return study


def build_from_config(model_cfg: Mapping[str, Any], label: str):
    """A model from a config mapping {name: ..., params...} (ConfigError naming the label)."""
    from linrec.models import build_model

    if not isinstance(model_cfg, Mapping) or not model_cfg.get("name"):
        raise ConfigError(f"study.models.{label}={model_cfg!r} must be a mapping with a 'name'")
    params = dict(model_cfg)
    name = params.pop("name")
    return build_model(name, **params)


def fit_timed(model, train, label: str) -> float:
    t0 = time.perf_counter()
    model.fit(train)
    seconds = time.perf_counter() - t0
    log.info("fit %s in %.2fs", label, seconds)
    return seconds


def write_table(directory: Path, stem: str, columns: list[str], rows: list[dict[str, Any]],
                title: str = "") -> str:
    """Write <stem>.csv and <stem>.md into directory; return the Markdown (with its title)."""
    md = (f"### {title}\n\n" if title else "") + to_markdown(columns, rows)
    write_text_atomic(directory / f"{stem}.csv", to_csv(columns, rows))
    write_text_atomic(directory / f"{stem}.md", md)
    return md
