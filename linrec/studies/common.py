"""Pieces every study shares: its models' configs, writing its runs, tables and index."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from linrec.atomic import write_text_atomic
from linrec.errors import ConfigError
from linrec.models.configs import ModelConfig
from linrec.results import (
    STUDY_FILE,
    environment_info,
    run_record,
    write_json_atomic,
    write_run,
)

log = logging.getLogger("linrec")


def study_model_config(values: Mapping[str, Any], label: str, seed: int) -> ModelConfig:
    """The checked config of a study's model {name: ..., params...}; a model with a seed gets
    the run seed unless the study sets one."""
    from linrec.models.registry import model_config

    if not isinstance(values, Mapping) or not values.get("name"):
        raise ConfigError(f"study.models.{label}={values!r} must be a mapping with a 'name'")
    params = dict(values)
    name = params.pop("name")
    config = model_config(name, **params)
    if "seed" in config.names() and "seed" not in params:
        config = model_config(name, **params, seed=seed)
    return config


def point_dir(point: Mapping[str, Any]) -> str:
    """The directory name of a grid point: 'rank=100,lam=1000' ('default' when empty)."""
    return ",".join(f"{k}={v}" for k, v in point.items()) or "default"


def write_study_run(run_dir: Path, config: Any, prepared: Any, *, label: str,
                    model: Mapping[str, Any], report: Any, timings: Mapping[str, float],
                    point: Mapping[str, Any] | None = None, data: Any = None,
                    training: Mapping[str, Any] | None = None) -> Path:
    """Write one run of a study (results.json and ranks) under `run_dir`, recorded as part of
    the study with its label and grid point (and a trained model's log). `model`: the fields of
    the model this run trained (with its name); `data`: the run's data config where the study
    has several datasets. The recorded config is the study's with these in place of its model
    and data blocks, so that each results.json describes its own run."""
    run_config = config.to_dict()
    run_config["model"] = dict(model)
    if data is not None:
        run_config["data"] = data.to_dict() if hasattr(data, "to_dict") else dict(data)
    record = run_record(dataset=dataset_record(prepared), model=model["name"],
                        report=report, timings=timings, config=run_config,
                        seed=config.seed, study={"name": config.study.name, "label": label,
                                                 "point": dict(point or {})},
                        training=training)
    return write_run(run_dir, record, report, save_ranks=config.save_ranks,
                     per_user=config.eval.save_per_user, figures=config.figures,
                     user_ids=getattr(prepared.split, "user_ids", None))


def write_table(directory: Path, stem: str, columns: list[str], rows: list[dict[str, Any]],
                title: str = "") -> str:
    """Write the table (`report.render.Table`) of `rows` into directory: <stem>.json, the table
    as data that `linrec-report` reads back; <stem>.md and <stem>.csv (every number in full
    precision), for people and other tools. Returns the Markdown."""
    from linrec.report.render import Table, csv_text, markdown

    table = Table(title or stem, list(columns), [[row.get(c) for c in columns] for row in rows])
    md = markdown(table)
    write_json_atomic(directory / f"{stem}.json", table.to_json())
    write_text_atomic(directory / f"{stem}.csv", csv_text(table))
    write_text_atomic(directory / f"{stem}.md", md)
    return md


def dataset_record(prepared: Any) -> dict[str, Any]:
    """The `dataset` block of a record: the prepared data's name and sizes."""
    return {"name": prepared.name, **prepared.stats}


def write_study_index(run_dir: Path, config: Any, dataset: Mapping[str, Any],
                      summary: Mapping[str, Any], figures: Sequence[Path] = ()) -> Path:
    """study.json: the study, its dataset(s), its runs and tables (paths relative to run_dir),
    the summary numbers and the provenance."""
    tables = sorted(str(p.relative_to(run_dir)) for p in (run_dir / "tables").glob("*.md"))
    runs = sorted(str(p.parent.relative_to(run_dir))
                  for p in (run_dir / "runs").rglob("results.json"))
    index = {"study": config.study.to_dict(), "dataset": dict(dataset),
             "runs": runs, "tables": tables,
             "figures": [str(Path(f).relative_to(run_dir)) for f in figures],
             "summary": dict(summary), "environment": environment_info(),
             "config": config.to_dict()}
    return write_json_atomic(run_dir / STUDY_FILE, index)
