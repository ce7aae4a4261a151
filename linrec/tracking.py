"""Experiment tracking with MLflow (`+tracking=mlflow`, the optional extra `linrec[mlflow]`).

A tracked run is also an MLflow run in a local store: a directory holding `mlflow.db` (SQLite:
runs, parameters, metrics) and `artifacts/` (the files MLflow keeps), with no server. When the
linrec run starts, its MLflow run gets the config as parameters (flattened, `model.lam`); when
it ends, the exact metrics of every split (`test/ndcg_at_20`: MLflow names allow no `@`), the
per-epoch records of a model trained by epochs (loss, learning rate, validation value, with the
epoch as the step) and the run directory as artifacts. A run that fails is marked FAILED in
MLflow, one that a signal stops KILLED. The jobs of a sweep share one MLflow experiment, named
after the sweep's directory unless `tracking.experiment` names one; a single run goes to the
experiment `linrec`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from linrec.errors import ConfigError
from linrec.params import Params, param

#: the experiment of a single run without `tracking.experiment`
DEFAULT_EXPERIMENT = "linrec"
#: what MLflow allows in a metric or parameter name
_UNSAFE = re.compile(r"[^0-9A-Za-z_\-. :/]")


@dataclass
class TrackingConfig(Params):
    """tracking (`+tracking=mlflow`): log every run to a local MLflow store."""

    where = "tracking"

    name: str = param("mlflow", choices=("mlflow",), doc="the tracking back-end")
    store: str = param("mlflow", doc="the store's directory (mlflow.db and artifacts/), made if "
                                     "missing; relative paths from where linrec is started")
    experiment: str | None = param(None, doc="the MLflow experiment; null: the sweep's "
                                             "directory for a sweep job, 'linrec' for a run")


def metric_name(key: str) -> str:
    """A linrec metric key as MLflow accepts it: 'ndcg@20' -> 'ndcg_at_20'."""
    return _UNSAFE.sub("_", key.replace("@", "_at_"))


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{'model.lam': '100', ...}: the leaves of a nested mapping as MLflow parameters."""
    out: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flat(value, name + "."))
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            out[_UNSAFE.sub("_", name)] = text[:6000]  # MLflow's longest parameter value
    return out


class MlflowRun:
    """One linrec run as an MLflow run (the module docstring): `finish(run_dir)` logs what the
    run wrote, `end(status)` closes it."""

    def __init__(self, config: TrackingConfig, run_config: Mapping[str, Any], run_dir: Path,
                 sweep_dir: str | None) -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise ConfigError("+tracking=mlflow needs MLflow: pip install 'linrec[mlflow]'"
                              ) from exc
        store = Path(config.store).expanduser().resolve()
        store.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
        name = config.experiment or (str(sweep_dir) if sweep_dir else DEFAULT_EXPERIMENT)
        experiment_id = self._experiment(name, (store / "artifacts").as_uri())
        self.run_id = self.client.create_run(
            experiment_id, run_name=Path(run_dir).name,
            tags={"linrec.run_dir": str(Path(run_dir).resolve())}).info.run_id
        self._log_params(_flat(run_config))

    def _experiment(self, name: str, artifacts: str) -> str:
        """The id of experiment `name`, created if missing (a parallel job of the same sweep may
        create it first)."""
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name, artifact_location=artifacts)
        except MlflowException:
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(key, value) for key, value in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes at most 100 per batch
            self.client.log_batch(self.run_id, params=items[start:start + 100])

    def finish(self, run_dir: Path, record: Mapping[str, Any]) -> None:
        """Log the run's record (results.json: exact metrics, training epochs) and its
        directory."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)  # MLflow's timestamps: milliseconds
        metrics = []
        for split, result in record.get("splits", {}).items():
            metrics += [Metric(metric_name(f"{split}/{key}"), float(value), now, 0)
                        for key, value in result.get("exact", {}).items() if value is not None]
        for epoch in (record.get("training") or {}).get("epochs", []):
            metrics += [Metric(metric_name(f"train/{key}"), float(value), now, int(epoch["epoch"]))
                        for key, value in epoch.items()
                        if key != "epoch" and isinstance(value, int | float)]
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])
        self.client.log_artifacts(self.run_id, str(run_dir))

    def end(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)


@contextmanager
def tracked(values: Mapping[str, Any] | TrackingConfig | None, run_config: Mapping[str, Any],
            run_dir: Path, sweep_dir: str | None = None) -> Iterator[MlflowRun | None]:
    """The MLflow run of a linrec run while it runs (None without tracking): ended FINISHED
    when the block ends, FAILED when it raises, KILLED when a signal or Ctrl-C stops it."""
    if values is None:
        yield None
        return
    config = values if isinstance(values, TrackingConfig) else TrackingConfig.from_mapping(values)
    run = MlflowRun(config, run_config, run_dir, sweep_dir)
    try:
        yield run
    except BaseException as exc:
        from linrec.interrupts import Interrupted

        run.end("KILLED" if isinstance(exc, Interrupted | KeyboardInterrupt) else "FAILED")
        raise
    run.end("FINISHED")
