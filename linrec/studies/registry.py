"""Study names (`study.name`) -> the function that runs the study, imported lazily so that a
plain run imports no study module.

`run_study(config, run_dir)` dispatches on `config.study.name`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from linrec.registry import Registry, load

if TYPE_CHECKING:
    from linrec.config import RunConfig

#: study name -> "module:function" of its runner
STUDIES: Registry[str] = Registry("study.name", {
    "sampling_study": "linrec.studies.sampling_study:run",
    "linear_models": "linrec.studies.linear_models:run",
    "loss_study": "linrec.studies.loss_study:run",
})


def run_study(config: RunConfig, run_dir: Path) -> float | None:
    """Run the study named by config.study.name into run_dir; returns its selection value."""
    return load(STUDIES.entry(config.study.name))(config, run_dir)
