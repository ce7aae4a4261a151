"""Pieces every study shares: fitting a named model set once and writing tables."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from linrec.errors import ConfigError
from linrec.results import to_csv, to_markdown, write_text_atomic

log = logging.getLogger("linrec")


def build_from_config(model_cfg: Mapping[str, Any], label: str):
    """A model from a config mapping {name: ..., params...} (ConfigError naming the label)."""
    from linrec.models import build_model

    params = dict(model_cfg)
    name = params.pop("name", None)
    if not name:
        raise ConfigError(f"study.models.{label}: 'name' is missing")
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
