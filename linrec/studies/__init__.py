"""Studies: multi-model protocols behind `experiment=<name>` presets that write tables and figures.

`run_study(config, run_dir)` dispatches on `config["study"]["name"]`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from linrec.errors import ConfigError

STUDIES = {
    "sampling_study": "linrec.studies.sampling_study:run",
    "linear_models": "linrec.studies.linear_models:run",
}


def run_study(config: dict[str, Any], run_dir: Path) -> float | None:
    """Run the study named by config['study']['name'] into run_dir."""
    import importlib

    name = config["study"].get("name")
    if name not in STUDIES:
        raise ConfigError(f"study.name={name!r} is unknown; known studies: {sorted(STUDIES)}")
    module, func = STUDIES[name].split(":")
    return getattr(importlib.import_module(module), func)(config, run_dir)
