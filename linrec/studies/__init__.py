"""Studies: multi-model protocols behind `experiment=<name>` presets. A study is a list of runs
(each written like any run, under <run dir>/runs/) plus the tables and figures it derives from
them (<run dir>/tables, figures) and a study.json index; `linrec-report` reads all of it.

`run_study(config, run_dir)` dispatches on `config.study.name`."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from linrec.config import RunConfig

STUDIES = {
    "sampling_study": "linrec.studies.sampling_study:run",
    "linear_models": "linrec.studies.linear_models:run",
    "loss_study": "linrec.studies.loss_study:run",
}


def run_study(config: RunConfig, run_dir: Path) -> float | None:
    """Run the study named by config.study.name into run_dir."""
    module, func = STUDIES[config.study.name].split(":")
    return getattr(importlib.import_module(module), func)(config, run_dir)
