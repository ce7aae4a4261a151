"""A run as an Optuna trial: what linrec's Optuna sweeper (hydra_plugins/linrec_sweeper/optuna.py)
tells a job through its environment, and how the job reports each validation value to its trial
and stops when the pruner says so.

With `hydra.sweeper.pruner=median|hyperband`, the sweeper sets for every trial's job
`$LINREC_OPTUNA_STORAGE`, `$LINREC_OPTUNA_STUDY`, `$LINREC_OPTUNA_TRIAL` (the trial's id) and
`$LINREC_OPTUNA_PRUNER` (the pruner as JSON). A model trained by epochs reports each validation
pass as one step (`reporting`); a pruned trial raises `Pruned`, which the job records as a PRUNED
marker (never FAILED) and returns `PRUNED` to the sweeper, which tells the study so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from linrec.errors import ConfigError, LinrecError

STORAGE_ENV = "LINREC_OPTUNA_STORAGE"
STUDY_ENV = "LINREC_OPTUNA_STUDY"
TRIAL_ENV = "LINREC_OPTUNA_TRIAL"
PRUNER_ENV = "LINREC_OPTUNA_PRUNER"
#: what a pruned job returns to the sweeper
PRUNED = "pruned"
#: the marker file of a pruned job's directory
PRUNED_FILE = "PRUNED"
#: the pruners `hydra.sweeper.pruner` names
PRUNERS = ("none", "median", "hyperband")


class Pruned(LinrecError):
    """The trial's pruner stopped the run after `step` validation passes (last value `value`)."""

    def __init__(self, step: int, value: float) -> None:
        self.step, self.value = step, value
        super().__init__(f"pruned by the Optuna sweeper after validation pass {step} "
                         f"(value {value:.5f})")


def make_pruner(name: str, options: Mapping[str, Any] | None = None) -> Any:
    """The optuna pruner `name` (none, median, hyperband) with `options` (its keyword
    arguments)."""
    import optuna

    options = dict(options or {})
    if name == "none":
        return optuna.pruners.NopPruner()
    if name == "median":
        return optuna.pruners.MedianPruner(**options)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(**options)
    raise ConfigError(f"hydra.sweeper.pruner={name!r} is not allowed; allowed: "
                      f"{list(PRUNERS)}")


def trial_environment(storage: str, study: str, trial_id: int, pruner: str,
                      options: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The variables the sweeper sets for a trial's job."""
    return {STORAGE_ENV: storage, STUDY_ENV: study, TRIAL_ENV: str(trial_id),
            PRUNER_ENV: json.dumps({"name": pruner, "options": dict(options or {})})}


def current_trial() -> Any:
    """The Optuna trial this process runs for (from the environment), or None."""
    if not os.environ.get(TRIAL_ENV):
        return None
    import optuna

    pruner = json.loads(os.environ.get(PRUNER_ENV, '{"name": "none"}'))
    study = optuna.load_study(study_name=os.environ[STUDY_ENV], storage=os.environ[STORAGE_ENV],
                              pruner=make_pruner(pruner["name"], pruner.get("options")))
    return optuna.trial.Trial(study, int(os.environ[TRIAL_ENV]))


def reporting(validation: Callable[[Any], float] | None) -> Callable[[Any], float] | None:
    """`validation` (a trainer's validation callback) reporting each value to the current
    trial as the next step and raising Pruned when the trial should stop; `validation` itself
    outside an Optuna trial. What the callback measures (`fingerprint`, `describe`) is kept:
    a checkpoint made inside a trial is the same fit's outside it."""
    if validation is None:
        return None
    trial = current_trial()
    if trial is None:
        return validation
    steps = 0

    def report(model: Any) -> float:
        nonlocal steps
        value = float(validation(model))
        steps += 1
        trial.report(value, steps)
        if trial.should_prune():
            raise Pruned(steps, value)
        return value

    for name in ("fingerprint", "describe"):
        if hasattr(validation, name):
            setattr(report, name, getattr(validation, name))
    return report
