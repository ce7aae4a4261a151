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


def test_mlflow_tracking_uri_in_the_environment_is_where_the_run_goes(tmp_path):
    """MLFLOW_TRACKING_URI=sqlite:///<tmp>/mlflow.db: the run is logged there (not to the local
    store), its test ndcg@20 equal to results.json's."""
    db = tmp_path / "elsewhere" / "mlflow.db"
    db.parent.mkdir()
    done = run_command(tmp_path, "+tracking=mlflow", "hydra.run.dir=run", *SMALL,
                       env={**ENV, "MLFLOW_TRACKING_URI": f"sqlite:///{db}"})
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "mlflow").exists()  # the local store was not used
    from mlflow.tracking import MlflowClient

    (run,) = _runs(MlflowClient(tracking_uri=f"sqlite:///{db}"), "linrec")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert run.data.metrics["test/ndcg_at_20"] == record["splits"]["test"]["exact"]["ndcg@20"]


def test_an_unreachable_server_is_one_line_and_the_run_completes(tmp_path):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = run_command(tmp_path, "+tracking=mlflow", f"tracking.uri=http://127.0.0.1:{port}",
                       "hydra.run.dir=run", *SMALL, env=ENV)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "results.json").exists()
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        f"linrec: warning: MLflow at http://127.0.0.1:{port} could not be reached")
    assert lines[0].endswith("the run goes on and is written locally only")


@pytest.fixture
def mlflow_server(tmp_path):
    """A real `mlflow server` on 127.0.0.1 with its own backend store and artifact root."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = tmp_path / "server"
    root.mkdir()
    mlflow = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen([str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
                             "--artifacts-destination", str(root / "artifacts"),
                             "--workers", "1"], cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**__import__("os").environ, **ENV})
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120  # a guard against a server that never starts
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            assert proc.poll() is None, proc.stderr.read()
            assert time.time() < deadline, "mlflow server did not start"
            time.sleep(0.5)
    yield url, root
    import os
    import signal

    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def test_a_sweep_is_logged_to_a_real_mlflow_server_over_http(tmp_path, mlflow_server):
    """Both jobs of a sweep land in the server's store over HTTP, with their metrics equal to
    results.json's and their artifacts in the server's artifact store."""
    url, root = mlflow_server
    done = run_command(tmp_path, "-m", "+tracking=mlflow", f"tracking.uri={url}",
                       "model.lam=100,300", "hydra.sweep.dir=sweep", *SMALL, env=ENV)
    assert done.returncode == 0, done.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=url)
    jobs = _runs(client, "sweep")
    assert sorted(r.data.params["model.lam"] for r in jobs) == ["100.0", "300.0"]
    for run in jobs:
        assert run.info.status == "FINISHED"
        lam = run.data.params["model.lam"].removesuffix(".0")
        record = json.loads((tmp_path / "sweep" / f"model.lam={lam}" / "results.json")
                            .read_text())
        assert run.data.metrics["test/ndcg_at_20"] == \
            record["splits"]["test"]["exact"]["ndcg@20"]
        assert "results.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert list((root / "artifacts").rglob("results.json"))  # in the server's store
