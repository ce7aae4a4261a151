"""Sweeps (linrec/sweeps.py, hydra_plugins/linrec_sweeper): directories named by the command,
resume that skips complete jobs and re-runs the rest, a killed sweep that loses only its
running job, signals, failures listed under every launcher, the thread budget of parallel jobs,
and the Optuna sweeper that maximizes, is seeded and continues its study."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linrec import sweeps

SMALL = ["data.source.n_users=300", "data.source.n_items=100", "eval.sampled.enabled=false",
         "quiet=true"]


def linrec(cwd: Path, *args: str, wait: bool = True):
    env = dict(os.environ, LINREC_DATA=str(cwd / "cache"), HYDRA_FULL_ERROR="0")
    cmd = [sys.executable, "-c", "from linrec.cli import main; main()", *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def jobs(cwd: Path) -> dict[str, Path]:
    """job name -> job directory of the one sweep below cwd/multirun."""
    (sweep,) = (cwd / "multirun").iterdir()
    return {p.name: p for p in sweep.iterdir() if p.is_dir()}


# -- names and decisions ------------------------------------------------------------------------


def test_sweep_and_job_names():
    a = sweeps.sweep_name(["model.lam=1,10", "seed=0"])
    assert a == sweeps.sweep_name(["seed=0", "model.lam=1,10", "hydra/launcher=joblib",
                                   "hydra.launcher.n_jobs=2", "+resume=false"])
    assert a == "model.lam=1,10__seed=0"
    assert sweeps.sweep_name([]) == "default"
    long = sweeps.sweep_name([f"model.x{i}=value{i}" for i in range(30)])
    assert len(long) <= 96 and long != sweeps.sweep_name([f"model.x{i}=v{i}" for i in range(30)])
    assert "/" not in sweeps.sweep_name(["data.path=/data/ml-1m"])
    assert sweeps.job_name("") == "default" and sweeps.job_name("model.lam=1") == "model.lam=1"
    added = sweeps.sweep_overrides(["model.lam=1,10", "seed=3", "model=ease"])
    assert added[0] == "hydra.sweep.dir='multirun/model.lam=1,10__model=ease__seed=3'"
    assert added[1] == "hydra.job.config.override_dirname.exclude_keys=[resume,model,seed]"
    assert sweeps.sweep_overrides(["hydra.sweep.dir=x", "hydra.job.config.override_dirname."
                                   "exclude_keys=[]"]) == []


def test_a_complete_result_of_the_same_config_is_reused(tmp_path):
    config = {"model": {"name": "ease", "lam": 1.0}, "ks": (1, 2)}
    assert sweeps.complete_result(tmp_path, config) is None
    (tmp_path / "results.json").write_text(json.dumps(
        {"config": {"model": {"name": "ease", "lam": 1.0}, "ks": [1, 2]},
         "selection": {"value": 0.25}}))
    record = sweeps.complete_result(tmp_path, config)
    assert sweeps.recorded_selection(record) == 0.25
    assert sweeps.complete_result(tmp_path, {**config, "ks": (1, 3)}) is None  # changed
    (tmp_path / "FAILED").write_text("x")
    assert sweeps.complete_result(tmp_path, config) is None
    (tmp_path / "FAILED").unlink()
    (tmp_path / "results.json").write_text("{not json")
    assert sweeps.complete_result(tmp_path, config) is None
    for name in ("ranks.npz", "model.pkl", "FAILED", "sampled_ndcg_test.png",
                 "training_curve.pdf"):
        (tmp_path / name).write_text("x")
    (tmp_path / "mine.png").write_text("a user's file")
    (tmp_path / "runs").mkdir()
    (tmp_path / ".hydra").mkdir()
    sweeps.clear_outputs(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hydra", "mine.png"]


def test_signals_raise_interrupted_within_and_are_restored_after():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(sweeps.Interrupted) as info, sweeps.signals_raise():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert info.value.signum == signal.SIGTERM and "SIGTERM" in str(info.value)
    assert signal.getsignal(signal.SIGTERM) is before


def test_thread_budget_divides_the_cores(monkeypatch):
    from threadpoolctl import threadpool_info

    from linrec.hardware import THREADS_ENV, thread_limit

    monkeypatch.setattr("linrec.hardware.cpu_cores", lambda: 8)
    monkeypatch.delenv(THREADS_ENV, raising=False)
    with sweeps.thread_budget(1) as budget:
        assert budget is None and thread_limit() == 8
    with sweeps.thread_budget(3) as budget:
        assert budget == 2 and thread_limit() == 2
        assert all(p["num_threads"] <= 2 for p in threadpool_info())
    assert THREADS_ENV not in os.environ and thread_limit() == 8


# -- through the command --------------------------------------------------------------------------


def test_the_same_sweep_again_skips_complete_jobs_and_resume_false_reruns(tmp_path):
    first = linrec(tmp_path, "-m", "model.lam=1,10", *SMALL)
    assert first.returncode == 0, first.stderr
    found = jobs(tmp_path)
    assert set(found) == {"model.lam=1", "model.lam=10"}
    stamps = {k: (p / "results.json").stat().st_mtime_ns for k, p in found.items()}
    again = linrec(tmp_path, "-m", *reversed(SMALL), "model.lam=1,10")  # order does not matter
    assert again.returncode == 0 and again.stdout.count("complete, skipped") == 2
    assert {k: (p / "results.json").stat().st_mtime_ns for k, p in found.items()} == stamps
    forced = linrec(tmp_path, "-m", "model.lam=1,10", *SMALL, "+resume=false")
    assert forced.returncode == 0 and "skipped" not in forced.stdout
    assert all((p / "results.json").stat().st_mtime_ns != stamps[k] for k, p in found.items())


def test_a_stale_result_of_another_config_is_replaced(tmp_path):
    assert linrec(tmp_path, "-m", "model.lam=1", *SMALL).returncode == 0
    (job,) = jobs(tmp_path).values()
    record = json.loads((job / "results.json").read_text())
    record["config"]["eval"]["ks"] = [1]  # as if written before a default changed
    (job / "results.json").write_text(json.dumps(record))
    again = linrec(tmp_path, "-m", "model.lam=1", *SMALL)
    assert again.returncode == 0 and "skipped" not in again.stdout
    assert json.loads((job / "results.json").read_text())["config"] != record["config"]


@pytest.mark.slow
def test_a_killed_sweep_loses_only_the_running_job(tmp_path):
    """SIGKILL while job 2 of 3 trains: job 1 stays complete and is skipped on the re-run, job 2
    (no results.json) runs again, continuing from its last MF checkpoint, and job 3 runs."""
    args = ["-m", "model=mf", "model.epochs=1,400,2", "model.sampling.n_negatives=10",
            "model.batch_size=1024", *SMALL]
    proc = linrec(tmp_path, *args, wait=False)
    deadline = time.time() + 240
    while time.time() < deadline:
        found = jobs(tmp_path) if (tmp_path / "multirun").exists() else {}
        running = found.get("model.epochs=400")
        if running is not None and (running / "linrec.log").exists() and \
                "mf epoch 3:" in (running / "linrec.log").read_text():
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    found = jobs(tmp_path)
    assert (found["model.epochs=1"] / "results.json").exists()
    assert not (found["model.epochs=400"] / "results.json").exists()
    assert "model.epochs=2" not in found
    stamp = (found["model.epochs=1"] / "results.json").stat().st_mtime_ns
    again = linrec(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    found = jobs(tmp_path)
    assert all((p / "results.json").exists() for p in found.values()) and len(found) == 3
    assert (found["model.epochs=1"] / "results.json").stat().st_mtime_ns == stamp
    training = json.loads((found["model.epochs=400"] / "results.json").read_text())["training"]
    # killed once epoch 3 was logged (a busy machine may have finished a few more first)
    assert 2 <= training["resumed_from"] < len(training["epochs"])
    assert [e["epoch"] for e in training["epochs"]] == list(range(1, len(training["epochs"]) + 1))


def test_sigterm_marks_a_run_failed(tmp_path):
    proc = linrec(tmp_path, "hydra.run.dir=run", "model=mf", "model.epochs=100000",
                  *SMALL, wait=False)
    log = tmp_path / "run" / "linrec.log"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.exists() and "mf epoch 1:" in log.read_text()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM" in (tmp_path / "run" / "FAILED").read_text()
    assert not (tmp_path / "run" / "results.json").exists() and "marked FAILED" in err


@pytest.mark.parametrize("launcher", [
    ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    ["hydra/launcher=submitit_local"],
], ids=["joblib", "submitit_local"])
def test_every_launcher_exits_2_and_lists_failed_jobs(tmp_path, launcher):
    proc = linrec(tmp_path, "-m", "data.source.n_users=300,-5", *SMALL[1:], *launcher)
    assert proc.returncode == 2, proc.stderr
    assert "1 sweep job(s) failed" in proc.stderr and "data.source.n_users=-5" in proc.stderr
    found = jobs(tmp_path)
    assert (found["data.source.n_users=-5"] / "FAILED").exists()
    record = json.loads((found["data.source.n_users=300"] / "results.json").read_text())
    if "joblib" in launcher[0]:  # two jobs share the cores
        from linrec.hardware import cpu_cores

        assert record["environment"]["linrec_threads"] == max(1, cpu_cores() // 2)


def test_optuna_maximizes_is_seeded_and_continues_its_study(tmp_path):
    search = ["hydra/sweeper=optuna", "model.lam=tag(log, interval(1, 1000))", *SMALL]
    first = linrec(tmp_path, "-m", "hydra.sweeper.n_trials=3", *search)
    assert first.returncode == 0, first.stderr
    (sweep,) = (tmp_path / "multirun").iterdir()
    assert (sweep / "optuna.db").exists()
    values = {p.name: json.loads((p / "results.json").read_text())["selection"]["value"]
              for p in jobs(tmp_path).values()}
    assert len(values) == 3
    text = (sweep / "optimization_results.yaml").read_text()
    assert f"best_value: {max(values.values())}" in text  # maximized
    again = linrec(tmp_path, "-m", "hydra.sweeper.n_trials=3", *search)
    assert again.returncode == 0 and "nothing to run" in again.stderr + again.stdout
    more = linrec(tmp_path, "-m", "hydra.sweeper.n_trials=5", *search)
    assert more.returncode == 0, more.stderr
    assert len(jobs(tmp_path)) == 5 and "skipped" not in more.stdout  # new points
    other = tmp_path / "other"
    other.mkdir()
    assert linrec(other, "-m", "hydra.sweeper.n_trials=3", *search).returncode == 0
    assert set(jobs(other)) == set(values)  # the run seed fixes the trials


def test_optuna_where_every_trial_fails_is_one_message(tmp_path):
    proc = linrec(tmp_path, "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
                  "model.lam=interval(1, 10)", "data.source.n_users=-5", *SMALL[1:])
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "2 sweep job(s) failed" in proc.stderr


def test_a_run_into_the_directory_of_an_older_one_does_not_mix_them(tmp_path):
    assert linrec(tmp_path, "hydra.run.dir=run", *SMALL).returncode == 0
    assert (tmp_path / "run" / "ranks_valid.npz").exists()
    again = linrec(tmp_path, "hydra.run.dir=run", "data.split.valid_fraction=0", *SMALL)
    assert again.returncode == 0, again.stderr
    assert not (tmp_path / "run" / "ranks_valid.npz").exists()  # the older run's
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(record["splits"]) == {"test"}
