"""Experiment tracking with MLflow (`+tracking=mlflow`, the optional extra `linrec[mlflow]`).

A tracked run is also an MLflow run, wherever the user points MLflow: `tracking.uri`, else
`$MLFLOW_TRACKING_URI` (any MLflow URI: a tracking server `http(s)://host:port`, `sqlite:///...`,
`file:...`), else a local store: a directory holding `mlflow.db` (SQLite: runs, parameters,
metrics) and `artifacts/` (the files MLflow keeps), with no server. With a server, the
artifacts go to the server's artifact store. A server that cannot be reached is one warning
line: the run itself goes on and is written locally as always. When the
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
    uri: str | None = param(None, doc="the MLflow tracking URI (http(s)://host:port, "
                                      "sqlite:///..., file:...); null: $MLFLOW_TRACKING_URI, "
                                      "else the local store")
    store: str = param("mlflow", doc="the local store's directory (mlflow.db and artifacts/), "
                                     "made if missing, when neither uri nor "
                                     "$MLFLOW_TRACKING_URI is set; relative paths from where "
                                     "linrec is started")
    experiment: str | None = param(None, doc="the MLflow experiment; null: the sweep's "
                                             "directory for a sweep job, 'linrec' for a run")


def tracking_uri(config: TrackingConfig) -> tuple[str, str | None]:
    """(the MLflow tracking URI, the artifact location of new experiments): `config.uri`, else
    $MLFLOW_TRACKING_URI (artifacts where that store or server keeps them: None), else the local
    store in `config.store` (made if missing) with its artifacts/ beside mlflow.db."""
    import os

    uri = config.uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri, None
    store = Path(config.store).expanduser().resolve()
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store / 'mlflow.db'}", (store / "artifacts").as_uri()


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
        uri, artifacts = tracking_uri(config)
        self.config, self.uri = config, uri
        self.client = MlflowClient(tracking_uri=uri)
        name = config.experiment or (str(sweep_dir) if sweep_dir else DEFAULT_EXPERIMENT)
        experiment_id = self._experiment(name, artifacts)
        self.run_id = self.client.create_run(
            experiment_id, run_name=Path(run_dir).name,
            tags={"linrec.run_dir": str(Path(run_dir).resolve())}).info.run_id
        self._log_params(_flat(run_config))

    def _experiment(self, name: str, artifacts: str | None) -> str:
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
        directory; a server lost on the way is one warning line (the run is written
        locally)."""
        try:
            self._finish(run_dir, record)
        except Exception as exc:  # noqa: BLE001 - the run itself is complete
            _unreachable(self.config, exc)

    def _finish(self, run_dir: Path, record: Mapping[str, Any]) -> None:
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
        try:
            self.client.set_terminated(self.run_id, status=status)
        except Exception as exc:  # noqa: BLE001 - the run itself is complete
            _unreachable(self.config, exc)


#: how long an MLflow request may take before the server counts as unreachable, and how many
#: times it is retried (MLflow's own defaults: 120 s and 7 retries, minutes per call); the
#: user's own settings of these variables win
_HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}


def _unreachable(config: TrackingConfig, exc: BaseException) -> None:
    import logging
    import sys

    uri = config.uri or "$MLFLOW_TRACKING_URI"
    reason = " ".join(str(exc).split())[:300]
    print(f"linrec: warning: MLflow at {uri} could not be reached ({type(exc).__name__}: "
          f"{reason}); the run goes on and is written locally only", file=sys.stderr)
    logging.getLogger("linrec").info("MLflow unreachable: %r", exc)  # the log file keeps it


@contextmanager
def tracked(values: Mapping[str, Any] | TrackingConfig | None, run_config: Mapping[str, Any],
            run_dir: Path, sweep_dir: str | None = None) -> Iterator[MlflowRun | None]:
    """The MLflow run of a linrec run while it runs (None without tracking, or when MLflow
    cannot be reached: one warning line, the run goes on): ended FINISHED when the block ends,
    FAILED when it raises, KILLED when a signal or Ctrl-C stops it."""
    import os

    if values is None:
        yield None
        return
    config = values if isinstance(values, TrackingConfig) else TrackingConfig.from_mapping(values)
    for key, value in _HTTP_SETTINGS.items():
        os.environ.setdefault(key, value)
    try:
        run = MlflowRun(config, run_config, run_dir, sweep_dir)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - a server down, a bad URI: the run goes on
        _unreachable(config, exc)
        yield None
        return
    try:
        yield run
    except BaseException as exc:
        from linrec.interrupts import Interrupted

        run.end("KILLED" if isinstance(exc, Interrupted | KeyboardInterrupt) else "FAILED")
        raise
    run.end("FINISHED")
