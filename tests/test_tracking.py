"""+tracking=mlflow through the real command against a real local MLflow store: the config as
parameters, every exact metric of results.json, the per-epoch records with their epochs as
steps, the run directory as artifacts, one experiment per sweep, and FAILED for a failed run."""

from __future__ import annotations

import json

import pytest

from linrec.tracking import metric_name
from tests.conftest import run_command

SMALL = ["data.source.n_users=300", "data.source.n_items=120", "eval.sampled.enabled=false",
         "quiet=true"]
#: MLflow's usage telemetry has nowhere to go from a test
ENV = {"MLFLOW_DISABLE_TELEMETRY": "true"}


def _client(store):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")


def _runs(client, experiment: str):
    found = client.get_experiment_by_name(experiment)
    assert found is not None, [e.name for e in client.search_experiments()]
    return client.search_runs([found.experiment_id])


def test_a_tracked_run_and_sweep_land_in_a_local_store(tmp_path):
    store = tmp_path / "store"
    done = run_command(tmp_path, "+tracking=mlflow", f"tracking.store={store}", "model=mf",
                       "model.epochs=2", "hydra.run.dir=one", *SMALL, env=ENV)
    assert done.returncode == 0, done.stderr
    client = _client(store)
    (run,) = _runs(client, "linrec")
    assert run.info.status == "FINISHED" and run.info.run_name == "one"
    record = json.loads((tmp_path / "one" / "results.json").read_text())
    assert run.data.params["model.name"] == "mf" and run.data.params["model.epochs"] == "2"
    assert run.data.params["data.source.n_users"] == "300"
    for split in ("valid", "test"):
        for key, value in record["splits"][split]["exact"].items():
            assert run.data.metrics[metric_name(f"{split}/{key}")] == pytest.approx(value)
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert sorted((h.step, h.value) for h in history) == [
        (epoch["epoch"], pytest.approx(epoch["loss"])) for epoch in record["training"]["epochs"]]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"results.json", "ranks.npz"} <= artifacts

    swept = run_command(tmp_path, "-m", "+tracking=mlflow", f"tracking.store={store}",
                        "model.lam=100,300", "hydra.sweep.dir=sweep", *SMALL, env=ENV)
    assert swept.returncode == 0, swept.stderr
    jobs = _runs(client, "sweep")  # the sweep's directory names its experiment
    assert sorted(r.data.params["model.lam"] for r in jobs) == ["100.0", "300.0"]
    assert {r.info.status for r in jobs} == {"FINISHED"}

    failed = run_command(tmp_path, "+tracking=mlflow", f"tracking.store={store}",
                         "tracking.experiment=bad", "data=lightgcn",
                         f"data.path={tmp_path / 'nowhere'}", "hydra.run.dir=bad", env=ENV)
    assert failed.returncode == 2 and "nowhere" in failed.stderr
    (bad,) = _runs(client, "bad")
    assert bad.info.status == "FAILED"
