"""The Optuna sweeper behind `linrec -m hydra/sweeper=optuna` (conf/hydra/sweeper/optuna.yaml).

Hydra's Optuna sweeper with three changes, so that a search does what its user means:
- the study lives in SQLite under the sweep directory (its parent directory is created), and a
  command that is run again continues it: only the trials still missing from `n_trials` run
  (finished and failed trials count; a trial cut off by a kill is run again), with the
  sampler's streams moved on so that it proposes new points;
- a failed job (linrec returns no value) is a failed trial, not an abort; when no trial
  completes the sweeper says so in one line instead of raising, and `linrec` lists the failed
  jobs and exits 2;
- the config (linrec's) maximizes the selection metric and seeds the sampler with the run seed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper

log = logging.getLogger("linrec")
_SQLITE = "sqlite:///"


def _absolute_sqlite(storage: Any) -> Any:
    """A relative sqlite:/// URL made absolute, with its directory created."""
    if not isinstance(storage, str) or not storage.startswith(_SQLITE):
        return storage
    path = Path(storage[len(_SQLITE):]).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return _SQLITE + str(path)


def finished_trials(storage: Any, study_name: str | None) -> int:
    """Trials of the stored study that ended (complete, failed or pruned); 0 without one."""
    import optuna

    if storage is None or study_name is None:
        return 0
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # no such study yet
        return 0
    ended = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
             optuna.trial.TrialState.PRUNED)
    return sum(t.state in ended for t in study.trials)


def _continue_streams(sampler: Any, done: int) -> None:
    """Move a seeded sampler's random streams to where a study with `done` trials continues:
    a fresh sampler with the run seed would otherwise propose the first trials again. Each
    stream (TPE's and its random sampler's `_rng`, optuna 2.x) is replaced by one seeded from
    its seeded state and `done`, so the same command gives the same trials."""
    import numpy as np

    for owner in (sampler, getattr(sampler, "_random_sampler", None)):
        rng = getattr(owner, "_rng", None)
        if isinstance(rng, np.random.RandomState):
            base = int(rng.randint(0, 2**31 - 1))
            owner._rng = np.random.RandomState((base + 7919 * done) % 2**32)


def _any_complete(storage: Any, study_name: str | None) -> bool:
    import optuna

    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except (KeyError, ValueError):
        return False
    return any(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


class LinrecOptunaSweeper(OptunaSweeper):
    """OptunaSweeper that resumes its stored study and reports a search where every trial
    failed in one line (module docstring)."""

    def sweep(self, arguments: list[str]) -> None:
        impl = self.sweeper
        impl.storage = _absolute_sqlite(impl.storage)
        done = finished_trials(impl.storage, impl.study_name)
        wanted = impl.n_trials
        if done >= wanted:
            log.info("optuna: the study %r already has %d of %d trials; nothing to run "
                     "(raise hydra.sweeper.n_trials to continue it)", impl.study_name, done,
                     wanted)
            return None
        if done:
            log.info("optuna: continuing the study %r: %d of %d trials done", impl.study_name,
                     done, wanted)
            _continue_streams(impl.sampler, done)
        impl.n_trials = wanted - done
        try:
            return super().sweep(arguments)
        except ValueError:
            if _any_complete(impl.storage, impl.study_name):
                raise
            log.error("optuna: none of the trials completed (each failed job has a FAILED "
                      "marker with its error)")
            return None
