"""The Optuna sweeper behind `linrec -m hydra/sweeper=optuna`
(conf/hydra/sweeper/linrec_optuna.yaml), built on Hydra's Sweeper plugin API and current Optuna.

- The search space comes from the command line in Hydra's sweep grammar (`interval(lo, hi)`,
  `int(interval(lo, hi))`, `tag(log, interval(lo, hi))`, `choice(a, b)`, `range(start, stop,
  step)`) and from `hydra.sweeper.params`; other overrides are fixed for every trial.
- It maximizes what linrec's jobs return (the validation selection metric), with the sampler of
  `hydra.sweeper.sampler` (TPE seeded with the run seed).
- The study lives in SQLite under the sweep directory and the same command continues it: only
  the trials still missing from `n_trials` run (finished, failed and pruned trials count), the
  sampler reseeded by the number done so that it proposes new points, the same ones every time.
- A trial a killed command left RUNNING is marked failed when the next command starts (and not
  counted: a new trial replaces it), its directory given a FAILED marker.
- A failed job is a failed trial; when none completes, one line says so and `linrec` lists the
  failed jobs (exit 2).
- `hydra.sweeper.pruner=median|hyperband` prunes models trained by epochs: each validation pass
  is reported to the trial (linrec.trials), and a pruned trial is recorded as PRUNED.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import (
    IntervalSweep,
    Override,
    RangeSweep,
    Transformer,
)
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("linrec")
_SQLITE = "sqlite:///"
#: the user attribute of a trial failed because a killed command left it RUNNING
INTERRUPTED = "linrec_interrupted"
#: the FAILED marker of such a trial's directory
INTERRUPTED_MESSAGE = ("interrupted: the command running this Optuna trial was killed; the trial "
                       "is marked failed in the study and a new trial replaces it")


def _say(message: str) -> None:
    """A status line of the search (shown whatever the log level: it says what runs)."""
    print(f"optuna: {message}", flush=True)


def _absolute_sqlite(storage: Any) -> Any:
    """A relative sqlite:/// URL made absolute, with its directory created."""
    if not isinstance(storage, str) or not storage.startswith(_SQLITE):
        return storage
    path = Path(storage[len(_SQLITE):]).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return _SQLITE + str(path)


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
    """Mark every RUNNING trial of the stored study failed, with the user attribute
    INTERRUPTED: run before the command's own trials start, such a trial belongs to a command
    that was killed. Returns how many."""
    import optuna

    study = _load(storage, study_name)
    if study is None:
        return 0
    stale = [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    for trial in stale:
        study._storage.set_trial_user_attr(trial._trial_id, INTERRUPTED, True)
        study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    return len(stale)


def distribution(override: Override) -> Any:
    """The Optuna distribution of a sweep override in Hydra's grammar, or None for a fixed
    value: choice -> categorical; range -> integers (floats: a stepped float) from start to
    stop with its step; interval -> a float (int(...) an integer), `tag(log, ...)` on a log
    scale."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if not override.is_sweep_override():
        return None
    value = override.value()
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        return CategoricalDistribution(list(override.sweep_iterator(
            transformer=Transformer.encode)))
    if override.is_range_sweep():
        assert isinstance(value, RangeSweep)
        if any(isinstance(v, float) for v in (value.start, value.stop, value.step)):
            return FloatDistribution(value.start, value.stop, step=value.step)
        return IntDistribution(int(value.start), int(value.stop), step=int(value.step))
    if override.is_interval_sweep():
        assert isinstance(value, IntervalSweep)
        log_scale = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log_scale)
        return FloatDistribution(value.start, value.end, log=log_scale)
    raise ValueError(f"{override.input_line}: not a sweep the Optuna sweeper supports")


def search_space(arguments: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(name -> distribution, name -> fixed value) of a command line's overrides."""
    space, fixed = {}, {}
    for override in OverridesParser.create().parse_overrides(list(arguments)):
        name = override.get_key_element()
        found = distribution(override)
        if found is None:
            fixed[name] = override.get_value_element_as_str()
        else:
            space[name] = found
    return space, fixed


class LinrecOptunaSweeper(Sweeper):
    """linrec's Optuna sweeper (module docstring); its fields are
    conf/hydra/sweeper/linrec_optuna.yaml's."""

    def __init__(self, direction: str, storage: Any, study_name: str, n_trials: int,
                 n_jobs: int, max_failure_rate: float, sampler: Any, pruner: str = "none",
                 pruner_options: Mapping[str, Any] | None = None,
                 params: Mapping[str, Any] | None = None) -> None:
        from linrec.trials import PRUNERS

        if direction not in ("maximize", "minimize"):
            raise ValueError(f"hydra.sweeper.direction={direction!r}; allowed: maximize, "
                             "minimize")
        if pruner not in PRUNERS:
            raise ValueError(f"hydra.sweeper.pruner={pruner!r} is not allowed; allowed: "
                             f"{list(PRUNERS)}")
        self.direction, self.storage, self.study_name = direction, storage, study_name
        self.n_trials, self.n_jobs = int(n_trials), max(1, int(n_jobs))
        self.max_failure_rate = float(max_failure_rate)
        self.sampler_config = sampler
        self.pruner, self.pruner_options = pruner, dict(pruner_options or {})
        self.params = dict(params or {})
        self.job_idx = 0

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function)
        self.sweep_dir = Path(str(config.hydra.sweep.dir))

    def _sampler(self, done: int) -> Any:
        """The configured sampler; a study continued after `done` trials gets its seed moved on
        by `done`, so that it proposes new points (the same ones for the same command)."""
        from hydra.utils import instantiate

        config = OmegaConf.to_container(self.sampler_config, resolve=True) \
            if isinstance(self.sampler_config, DictConfig) else dict(self.sampler_config)
        if done and config.get("seed") is not None:
            config["seed"] = (int(config["seed"]) + 7919 * done) % 2**32
        return instantiate(config)

    def sweep(self, arguments: list[str]) -> None:
        import optuna

        from linrec.sweeps import mark_abandoned
        from linrec.trials import PRUNED, make_pruner, trial_environment

        storage = _absolute_sqlite(self.storage)
        stale = fail_interrupted_trials(storage, self.study_name)
        if stale:
            marked = mark_abandoned(self.sweep_dir, INTERRUPTED_MESSAGE)
            _say(f"{stale} trial(s) of the study {self.study_name!r} were cut off by a kill; "
                 f"marked failed (new trials replace them): "
                 f"{', '.join(map(str, marked)) or 'no directory'}")
        done = finished_trials(storage, self.study_name)
        if done >= self.n_trials:
            _say(f"the study {self.study_name!r} already has {done} of {self.n_trials} trials; "
                 "nothing to run (raise hydra.sweeper.n_trials to continue it)")
            return None
        if done:
            _say(f"continuing the study {self.study_name!r}: {done} of {self.n_trials} trials "
                 "done")
        space, fixed = search_space([f"{k}={v}" for k, v in self.params.items()] + arguments)
        for name in fixed:
            space.pop(name, None)
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, self.sweep_dir / "multirun.yaml")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(study_name=self.study_name, storage=storage,
                                    sampler=self._sampler(done), direction=self.direction,
                                    pruner=make_pruner(self.pruner, self.pruner_options),
                                    load_if_exists=True)
        to_go = self.n_trials - done
        while to_go > 0:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, to_go))]
            batch = []
            for trial in trials:
                overrides = [f"{k}={v}" for k, v in {**trial.params, **fixed}.items()]
                if self.pruner != "none":
                    env = trial_environment(storage, self.study_name, trial._trial_id,
                                            self.pruner, self.pruner_options)
                    overrides += [f"++hydra.job.env_set.{k}='{v}'" for k, v in env.items()]
                batch.append(overrides)
            returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
            self.job_idx += len(returns)
            failed = 0
            for trial, ret in zip(trials, returns, strict=True):
                value = ret.return_value
                if value == PRUNED:
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                elif isinstance(value, (int, float)):
                    study.tell(trial, float(value))
                else:  # the job failed (linrec marked it FAILED and returned nothing)
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    failed += 1
            if failed / len(returns) > self.max_failure_rate:
                raise RuntimeError(f"optuna: {failed} of {len(returns)} trials failed, above "
                                   f"hydra.sweeper.max_failure_rate={self.max_failure_rate}")
            to_go -= len(trials)
        self._summary(study)
        return None

    def _summary(self, study: Any) -> None:
        import optuna

        states = [t.state for t in study.trials]
        pruned = states.count(optuna.trial.TrialState.PRUNED)
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        if not complete:
            _say("none of the trials completed (each failed job has a FAILED marker with its "
                 "error)")
            return
        best = study.best_trial
        OmegaConf.save(OmegaConf.create({"name": "optuna", "best_params": best.params,
                                         "best_value": best.value}),
                       self.sweep_dir / "optimization_results.yaml")
        _say(f"best value {best.value:.5f} at {best.params}; {len(complete)} complete, {pruned} "
             f"pruned, {states.count(optuna.trial.TrialState.FAIL)} failed of "
             f"{len(states)} trials")
