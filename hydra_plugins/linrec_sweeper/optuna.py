"""The Optuna sweeper behind `linrec -m hydra/sweeper=optuna`
(conf/hydra/sweeper/linrec_optuna.yaml).

Hydra's Optuna sweeper with these changes, so that a search does what its user means:
- the study lives in SQLite under the sweep directory (its parent directory is created), and a
  command that is run again continues it: only the trials still missing from `n_trials` run
  (finished and failed trials count; a trial cut off by a kill is run again), with the
  sampler's streams moved on so that it proposes new points;
- a failed job (linrec returns no value) is a failed trial, not an abort; when no trial
  completes the sweeper says so in one line instead of raising, and `linrec` lists the failed
  jobs and exits 2;
- a trial whose command was killed stays RUNNING in the study forever and its directory half
  written: when the command is run again, such trials are marked failed (and not counted, so a
  new trial replaces each) and their directories get a FAILED marker, so that `linrec-report`
  lists them as failed. A study is run by one command at a time (a trial of another command
  running at the same time would be taken for a killed one);
- the config (linrec's) maximizes the selection metric and seeds the sampler with the run seed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

try:
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # no linrec[sweep]: the class below is no Hydra plugin, and Hydra's scan of
    OptunaSweeper = object  # this namespace passes over it instead of warning on every run

log = logging.getLogger("linrec")
_SQLITE = "sqlite:///"


def _absolute_sqlite(storage: Any) -> Any:
    """A relative sqlite:/// URL made absolute, with its directory created."""
    if not isinstance(storage, str) or not storage.startswith(_SQLITE):
        return storage
    path = Path(storage[len(_SQLITE):]).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return _SQLITE + str(path)


#: the user attribute of a trial failed because a killed command left it RUNNING
INTERRUPTED = "linrec_interrupted"
#: the FAILED marker of such a trial's directory
INTERRUPTED_MESSAGE = ("interrupted: the command running this Optuna trial was killed; the trial "
                       "is marked failed in the study and a new trial replaces it")


def _load(storage: Any, study_name: str | None) -> Any:
    """The stored study, or None when there is none yet."""
    import optuna

    if storage is None or study_name is None:
        return None
    try:
        return optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # no such study yet
        return None


def finished_trials(storage: Any, study_name: str | None) -> int:
    """Trials of the stored study that ended (complete, failed or pruned), not counting those
    failed because their command was killed (`fail_interrupted_trials`); 0 without a study."""
    import optuna

    study = _load(storage, study_name)
    if study is None:
        return 0
    ended = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
             optuna.trial.TrialState.PRUNED)
    return sum(t.state in ended and not t.user_attrs.get(INTERRUPTED) for t in study.trials)


def fail_interrupted_trials(storage: Any, study_name: str | None) -> int:
    """Mark every RUNNING trial of the stored study failed, with the user attribute INTERRUPTED
    (optuna 2.x storage API): run before the command's own trials start, such a trial belongs
    to a command that was killed. Returns how many."""
    import optuna

    study = _load(storage, study_name)
    if study is None:
        return 0
    stale = [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    for trial in stale:
        study._storage.set_trial_user_attr(trial._trial_id, INTERRUPTED, True)
        study._storage.set_trial_state(trial._trial_id, optuna.trial.TrialState.FAIL)
    return len(stale)


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
        from linrec.sweeps import mark_abandoned

        impl = self.sweeper
        impl.storage = _absolute_sqlite(impl.storage)
        stale = fail_interrupted_trials(impl.storage, impl.study_name)
        if stale:
            marked = mark_abandoned(Path(str(impl.config.hydra.sweep.dir)), INTERRUPTED_MESSAGE)
            log.warning("optuna: %d trial(s) of the study %r were cut off by a kill; marked "
                        "failed (new trials replace them): %s", stale, impl.study_name,
                        ", ".join(map(str, marked)) or "no directory")
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
