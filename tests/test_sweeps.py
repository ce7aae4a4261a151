"""Sweeps (linrec/sweeps.py, hydra_plugins/linrec_sweeper): directories named by the command,
resume that skips complete jobs and re-runs the rest, a killed sweep that loses only its
running job, signals, failures listed under every launcher, the thread budget of parallel jobs,
and the Optuna sweeper that maximizes, is seeded and continues its study."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from linrec import sweeps
from tests.conftest import child_processes, run_command

SMALL = ["data.source.n_users=300", "data.source.n_items=100", "eval.sampled.enabled=false",
         "quiet=true"]


def linrec(cwd: Path, *args: str, wait: bool = True, prelude: str = ""):
    return run_command(cwd, *args, wait=wait, prelude=prelude)


def jobs(cwd: Path) -> dict[str, Path]:
    """job name -> job directory of the one sweep below cwd/multirun."""
    (sweep,) = (cwd / "multirun").iterdir()
    return {p.name: p for p in sweep.iterdir() if p.is_dir()}


# -- names and decisions ------------------------------------------------------------------------


def test_sweep_and_job_names():
    a = sweeps.sweep_name(["model.lam=1,10", "seed=0"])
    assert a == sweeps.sweep_name(["seed=0", "model.lam=1,10", "hydra/launcher=joblib",
                                   "hydra.launcher.n_jobs=2", "resume=false"])
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
                 "training_curve.pdf", "recommendations_test.tsv", "recommendations_valid.tsv"):
        (tmp_path / name).write_text("x")
    (tmp_path / "mine.png").write_text("a user's file")
    (tmp_path / "runs").mkdir()
    (tmp_path / ".hydra").mkdir()
    sweeps.clear_outputs(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hydra", "mine.png"]


def test_a_complete_earlier_run_is_set_aside_not_removed(tmp_path):
    """A new run into a directory of a complete run (another config's) moves its outputs to
    superseded/<time>/ intact, so a new run that then fails loses nothing that finished;
    readers of runs (run_files) do not see them; a failed attempt's outputs are removed."""
    from linrec.results import run_files

    def complete(text):
        for name in ("results.json", "ranks.npz", "training_curve.png"):
            (tmp_path / name).write_text(f"{text} {name}")
        (tmp_path / "runs").mkdir()
        (tmp_path / "runs" / "inner.txt").write_text(text)

    complete("first")
    (tmp_path / "mine.png").write_text("a user's file")
    first = sweeps.clear_outputs(tmp_path)
    assert first is not None and first.parent == tmp_path / "superseded"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.png", "superseded"]
    assert (first / "results.json").read_text() == "first results.json"
    assert (first / "ranks.npz").read_text() == "first ranks.npz"
    assert (first / "training_curve.png").read_text() == "first training_curve.png"
    assert (first / "runs" / "inner.txt").read_text() == "first"
    complete("second")  # a second run set aside within the same second
    second = sweeps.clear_outputs(tmp_path)
    assert second not in (None, first) and (second / "results.json").read_text() == \
        "second results.json"
    assert (first / "results.json").read_text() == "first results.json"
    assert run_files(tmp_path, "results.json") == []
    assert run_files(first, "results.json") == [first / "results.json"]  # given itself: read
    (tmp_path / "results.json").write_text("{}")
    assert run_files(tmp_path, "results.json") == [tmp_path / "results.json"]
    (tmp_path / "FAILED").write_text("interrupted")  # a failed attempt: removed, not kept
    assert sweeps.clear_outputs(tmp_path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.png", "superseded"]
    assert len(list((tmp_path / "superseded").iterdir())) == 2


def test_unfinished_jobs_are_the_failed_and_the_killed_of_this_sweep(tmp_path):
    """Listed: a FAILED marker written since the sweep started (its first line), a job started
    since then without results (killed outright); not listed: complete jobs, a study's job
    (study.json), and what an earlier sweep in the same directory left."""
    def job(name, *files, old=False):
        path = tmp_path / name
        (path / ".hydra").mkdir(parents=True)
        (path / ".hydra" / "overrides.yaml").write_text("- x=1\n")
        for file, text in files:
            (path / file).write_text(text)
        if old:
            for f in [path / ".hydra" / "overrides.yaml", *(path / f for f, _ in files)]:
                os.utime(f, (time.time() - 3600, time.time() - 3600))
        return path

    job("complete", ("results.json", "{}"))
    job("study", ("study.json", "{}"))
    failed = job("failed", ("FAILED", "ConfigError: bad\ntraceback\n"))
    killed = job("killed")
    job("earlier_failed", ("FAILED", "old"), old=True)
    job("earlier_killed", old=True)
    since = time.time() - 60
    assert sweeps.unfinished_jobs(tmp_path, since) == [
        (failed, "ConfigError: bad"), (killed, sweeps.NO_RESULTS)]
    assert sweeps.unfinished_jobs(tmp_path / "missing", since) == []


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


@pytest.mark.parametrize("sweeper", [[], ["hydra/sweeper=basic"]])
def test_linrec_sweeps_compose_each_job_once_after_its_precheck(tmp_path, sweeper, monkeypatch):
    """`linrec -m` runs linrec's basic sweeper (no validation pass composing every job) and
    still refuses a bad value before any directory is made (the precheck composed and checked
    every swept value)."""
    done = linrec(tmp_path, "-m", "model.lam=1,10", *SMALL, *sweeper)
    assert done.returncode == 0, done.stderr
    for job in jobs(tmp_path).values():
        hydra_yaml = (job / ".hydra" / "hydra.yaml").read_text()
        assert "hydra_plugins.linrec_sweeper.basic.LinrecBasicSweeper" in hydra_yaml
    elsewhere = tmp_path / "bad"
    elsewhere.mkdir()
    bad = linrec(elsewhere, "-m", "model.lam=1,-1", *SMALL, *sweeper)
    assert bad.returncode == 2 and "lam" in bad.stderr, bad.stderr
    assert not (elsewhere / "multirun").exists()

    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    from hydra_plugins.linrec_sweeper.basic import LinrecBasicSweeper

    calls = []
    monkeypatch.setattr(BasicSweeper, "validate_batch_is_legal",
                        lambda self, batch: calls.append(batch))
    LinrecBasicSweeper(max_batch_size=None, params=None).validate_batch_is_legal([["a=1"]])
    assert calls == []


def test_the_same_sweep_again_skips_complete_jobs_and_resume_false_reruns(tmp_path):
    first = linrec(tmp_path, "-m", "model.lam=1,10", *SMALL)
    assert first.returncode == 0, first.stderr
    found = jobs(tmp_path)
    assert set(found) == {"model.lam=1", "model.lam=10"}
    stamps = {k: (p / "results.json").stat().st_mtime_ns for k, p in found.items()}
    again = linrec(tmp_path, "-m", *reversed(SMALL), "model.lam=1,10")  # order does not matter
    assert again.returncode == 0 and again.stdout.count("complete, skipped") == 2
    assert {k: (p / "results.json").stat().st_mtime_ns for k, p in found.items()} == stamps
    forced = linrec(tmp_path, "-m", "model.lam=1,10", *SMALL, "resume=false")
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


#: a fault for the killed-sweep test: the 30-epoch job stops after its epoch-3 checkpoint,
#: says so in a file, and waits there for its SIGKILL
PAUSE_AFTER_EPOCH_3 = """
import pathlib, time
from linrec.models import training
_save = training.EpochDriver._save
def _paused(self):
    _save(self)
    if self.epochs == 30 and self.epoch == 3:
        pathlib.Path("paused").write_text("epoch 3")
        time.sleep(3600)
training.EpochDriver._save = _paused
"""


@pytest.mark.slow
def test_a_killed_sweep_loses_only_the_running_job(tmp_path):
    """SIGKILL while job 2 of 3 trains: job 1 stays complete and is skipped on the re-run, job 2
    (no results.json) runs again, continuing from its last MF checkpoint, and job 3 runs."""
    args = ["-m", "model=mf", "model.epochs=1,30,2", "model.stop_patience=1000000",
            "model.sampling.n_negatives=10", "model.batch_size=1024", *SMALL]
    proc = linrec(tmp_path, *args, wait=False, prelude=PAUSE_AFTER_EPOCH_3)
    _wait_for(lambda: (tmp_path / "paused").exists(), "the 30-epoch job never reached epoch 3")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    found = jobs(tmp_path)
    assert (found["model.epochs=1"] / "results.json").exists()
    assert not (found["model.epochs=30"] / "results.json").exists()
    assert "model.epochs=2" not in found
    stamp = (found["model.epochs=1"] / "results.json").stat().st_mtime_ns
    again = linrec(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    found = jobs(tmp_path)
    assert all((p / "results.json").exists() for p in found.values()) and len(found) == 3
    assert (found["model.epochs=1"] / "results.json").stat().st_mtime_ns == stamp
    training = json.loads((found["model.epochs=30"] / "results.json").read_text())["training"]
    assert [e["epoch"] for e in training["epochs"]] == list(range(1, 31))
    assert training["resumed_from"] == 3


def _wait_for(condition, what: str, guard: float = 600) -> None:
    """Poll `condition` until it holds; `guard` seconds only keep a hang from lasting."""
    deadline = time.time() + guard
    while not condition():
        assert time.time() < deadline, what
        time.sleep(0.2)


def _wait_for_epoch(log: Path, epoch: int = 1) -> None:
    _wait_for(lambda: log.exists() and f"mf epoch {epoch}:" in log.read_text(),
              "the job never trained")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_marks_a_run_failed(tmp_path, signum):
    proc = linrec(tmp_path, "hydra.run.dir=run", "model=mf", "model.epochs=100000",
                  "model.stop_patience=1000000", *SMALL, wait=False)
    _wait_for_epoch(tmp_path / "run" / "linrec.log")
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err
    assert f"interrupted by {name}" in (tmp_path / "run" / "FAILED").read_text()
    assert not (tmp_path / "run" / "results.json").exists() and "marked FAILED" in err


def test_sigterm_to_a_job_of_a_sweep_marks_it_failed_and_lists_it(tmp_path):
    """SIGTERM while job 2 of 3 trains (how SLURM ends a job at its time limit): job 2 FAILED,
    the command exits 128 + 15 listing it, job 1 complete, job 3 not started."""
    proc = linrec(tmp_path, "-m", "model=mf", "model.epochs=1,100000,2",
                  "model.stop_patience=1000000", *SMALL, wait=False)
    _wait_for(lambda: (tmp_path / "multirun").exists() and
              "model.epochs=100000" in jobs(tmp_path), "the second job never started")
    _wait_for_epoch(jobs(tmp_path)["model.epochs=100000"] / "linrec.log")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    found = jobs(tmp_path)
    assert "interrupted by SIGTERM" in (found["model.epochs=100000"] / "FAILED").read_text()
    assert (found["model.epochs=1"] / "results.json").exists() and "model.epochs=2" not in found
    assert "1 sweep job(s) failed" in err
    assert "model.epochs=100000: interrupted by SIGTERM" in err
    assert "The sweep stopped before its end" in err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_a_joblib_sweep_and_its_workers(tmp_path, signum):
    """A 4-job joblib sweep on 2 workers, signalled while its first two jobs train: the command
    exits 128 + n, marks both in-flight jobs FAILED and names the two that did not run; no
    process of it is left; the same command then completes all four (after SIGTERM, how a
    scheduler ends a job), the two stopped jobs continuing from their checkpoints."""
    import subprocess

    args = ["-m", "model=mf", "model.epochs=12", "model.stop_patience=1000000",
            "model.lr=0.001,0.002,0.003,0.004", "data.source.n_users=2000",
            "data.source.n_items=800", "model.sampling.n_negatives=50",
            "eval.sampled.enabled=false", "quiet=true", "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2", "hydra.sweep.dir=sweep"]
    proc = linrec(tmp_path, *args, wait=False)
    for lr in ("0.001", "0.002"):
        _wait_for_epoch(tmp_path / "sweep" / f"model.lr={lr}" / "linrec.log")
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err

    def alive() -> list[str]:
        found = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True)
        return found.stdout.split()

    _wait_for(lambda: not alive(), f"processes of the sweep left: {alive()}", guard=20)
    stopped = [lr for lr in ("0.001", "0.002")
               if not (tmp_path / "sweep" / f"model.lr={lr}" / "results.json").exists()]
    assert stopped, "both first jobs ended before the signal"
    for lr in stopped:
        failed = tmp_path / "sweep" / f"model.lr={lr}" / "FAILED"
        assert f"interrupted by {name}" in failed.read_text()
        assert f"model.lr={lr}: interrupted by {name}, marked FAILED" in err
    assert "model.lr=0.003: did not run" in err and "model.lr=0.004: did not run" in err
    if signum != signal.SIGTERM:
        return
    again = linrec(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    records = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/results.json")]
    assert len(records) == 4
    assert sum(bool(r["training"]["resumed_from"]) for r in records) >= 1


def test_an_internal_error_in_a_job_fails_that_job_not_the_sweep(tmp_path):
    """Any exception (here a RuntimeError injected into EASE's fit for λ = 13) marks its job
    FAILED with the traceback, in the FAILED file and the job's log; the next job runs; the
    command lists it and exits 2 (it used to abort the sweep with Hydra's traceback, exit 1)."""
    inject = ("from linrec.models import ease\n"
              "real = ease.EASE._fit\n"
              "def _fit(self, train, validation=None):\n"
              "    if self.lam == 13.0:\n"
              "        raise RuntimeError('injected')\n"
              "    return real(self, train, validation)\n"
              "ease.EASE._fit = _fit\n")
    proc = linrec(tmp_path, "-m", "model.lam=13,10", *SMALL, prelude=inject)
    assert proc.returncode == 2, proc.stderr
    found = jobs(tmp_path)
    marker = (found["model.lam=13"] / "FAILED").read_text()
    assert marker.startswith("RuntimeError: injected\n") and "Traceback" in marker
    assert 'File "<string>", line 5, in _fit' in marker  # where it was raised
    assert "Traceback" in (found["model.lam=13"] / "linrec.log").read_text()
    assert (found["model.lam=10"] / "results.json").exists()
    assert "1 sweep job(s) failed" in proc.stderr
    assert "model.lam=13: RuntimeError: injected" in proc.stderr


@pytest.mark.slow
def test_a_worker_killed_outright_is_listed(tmp_path):
    """SIGKILL to the joblib workers (as the kernel's OOM killer would) while a job trains: no
    FAILED marker can be written, but the command lists the job without results and exits 2."""
    proc = linrec(tmp_path, "-m", "model=mf", "model.epochs=100000,100001",
                  "model.stop_patience=1000000", "hydra/launcher=joblib",
                  "hydra.launcher.n_jobs=2", *SMALL, wait=False)
    _wait_for(lambda: (tmp_path / "multirun").exists() and len(jobs(tmp_path)) == 2,
              "the two jobs never started")
    for job in jobs(tmp_path).values():
        _wait_for_epoch(job / "linrec.log")
    workers = [pid for pid in _children(proc.pid)
               if b"loky" in Path(f"/proc/{pid}/cmdline").read_bytes()
               and b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert workers
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert "2 sweep job(s) failed" in err and err.count(sweeps.NO_RESULTS) == 2
    assert not list((tmp_path / "multirun").rglob("results.json"))


def _children(pid: int) -> list[int]:
    """The process ids whose parent is pid."""
    return [child for child, _ in child_processes(pid)]


@pytest.mark.parametrize("launcher", [
    ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    ["hydra/launcher=submitit_local"],
], ids=["joblib", "submitit_local"])
def test_every_launcher_exits_2_and_lists_failed_jobs(tmp_path, launcher):
    # a rank above the catalogue's 100 items fails while the job runs
    proc = linrec(tmp_path, "-m", "model=lrr", "model.rank=10,1000", *SMALL, *launcher)
    assert proc.returncode == 2, proc.stderr
    assert "1 sweep job(s) failed" in proc.stderr and "model.rank=1000: " in proc.stderr
    found = jobs(tmp_path)
    assert (found["model.rank=1000"] / "FAILED").exists()
    record = json.loads((found["model.rank=10"] / "results.json").read_text())
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


def test_optuna_prunes_a_poor_mf_trial_and_records_it_pruned(tmp_path):
    """hydra.sweeper.pruner=median: every validation pass of an MF trial is reported to its
    trial; a trial below the median of the earlier ones at the same pass stops, its directory
    marked PRUNED (never FAILED), the study's trial PRUNED, and the command exits 0."""
    import optuna

    sweep = tmp_path / "search"
    done = linrec(tmp_path, "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=4",
                  "hydra.sweeper.pruner=median",
                  "hydra.sweeper.pruner_options={n_startup_trials: 1, n_warmup_steps: 1}",
                  "model.lr=choice(0.01, 0.00001)", "model=mf", "model.epochs=6",
                  "model.stop_patience=100", *SMALL, f"hydra.sweep.dir={sweep}")
    assert done.returncode == 0, done.stderr
    trials = optuna.load_study(study_name="linrec", storage=f"sqlite:///{sweep / 'optuna.db'}"
                               ).trials
    pruned = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
    assert pruned and all(len(t.intermediate_values) >= 2 for t in pruned)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    # one value per epoch (a trial that repeats a complete job's setting reuses its result)
    assert any(len(t.intermediate_values) == 6 for t in complete)
    markers = list(sweep.glob("*/PRUNED"))
    assert markers and not list(sweep.glob("*/FAILED"))
    assert "pruned by the Optuna sweeper after validation pass" in markers[0].read_text()
    assert "1 pruned" in done.stdout


def test_optuna_where_every_trial_fails_is_one_message(tmp_path):
    proc = linrec(tmp_path, "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
                  "model=lrr", "model.rank=1000", "model.lam=interval(1, 10)", *SMALL)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "2 sweep job(s) failed" in proc.stderr


def test_trials_a_kill_left_running_are_failed_and_not_counted(tmp_path):
    """A RUNNING trial of a stored study, when a command starts, was cut off by a kill: it is
    marked failed with the linrec attribute and does not count as finished (a new trial
    replaces it); finished and failed trials still count."""
    import optuna

    from hydra_plugins.linrec_sweeper.optuna import (
        INTERRUPTED,
        fail_interrupted_trials,
        finished_trials,
    )

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    assert fail_interrupted_trials(storage, "s") == 0 and finished_trials(storage, "s") == 0
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    done, failed, _ = study.ask(), study.ask(), study.ask()  # the third: left RUNNING
    study.tell(done, 0.5)
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    assert finished_trials(storage, "s") == 2
    assert fail_interrupted_trials(storage, "s") == 1
    trials = optuna.load_study(study_name="s", storage=storage).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "FAIL"]
    assert [t.user_attrs.get(INTERRUPTED) for t in trials] == [None, None, True]
    assert finished_trials(storage, "s") == 2
    assert fail_interrupted_trials(storage, "s") == 0


def test_mark_abandoned_marks_only_half_written_jobs_and_keeps_their_time(tmp_path):
    for name, files in (("done", ["results.json"]), ("failed", ["FAILED"]), ("half", [])):
        (tmp_path / name / ".hydra").mkdir(parents=True)
        (tmp_path / name / ".hydra" / "overrides.yaml").write_text("- a=1\n")
        for f in files:
            (tmp_path / name / f).write_text("x")
    started = time.time() - 600
    os.utime(tmp_path / "half" / ".hydra" / "overrides.yaml", (started, started))
    assert sweeps.mark_abandoned(tmp_path, "interrupted") == [tmp_path / "half"]
    assert (tmp_path / "half" / "FAILED").read_text() == "interrupted\n"
    assert (tmp_path / "half" / "FAILED").stat().st_mtime == pytest.approx(started)
    assert (tmp_path / "failed" / "FAILED").read_text() == "x"
    assert sweeps.unfinished_jobs(tmp_path, time.time() - 60) == [
        (tmp_path / "failed", "x")]  # the earlier command's failure is not this sweep's


@pytest.mark.slow
def test_optuna_fails_a_trial_cut_off_by_a_kill_and_the_report_lists_it(tmp_path):
    """A SIGKILL during an Optuna trial leaves it RUNNING and its directory half written; the
    next command on the study marks it failed, runs a new trial in its place and exits 0 (the
    failure was the earlier command's); linrec-report lists the directory as failed."""
    import optuna

    from linrec.report import build_report

    sweep = tmp_path / "search"
    common = ["-m", "hydra/sweeper=optuna", f"hydra.sweep.dir={sweep}", *SMALL]
    first = linrec(tmp_path, *common, "hydra.sweeper.n_trials=2", "model=mf",
                   "model.epochs=100000", "model.stop_patience=1000000",
                   "model.lr=interval(0.0001, 0.001)", wait=False)
    _wait_for(lambda: any("mf epoch 1:" in p.read_text() for p in sweep.rglob("linrec.log")),
              "the trial never trained")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    storage = f"sqlite:///{sweep / 'optuna.db'}"
    assert [t.state.name for t in optuna.load_study(study_name="linrec", storage=storage)
            .trials] == ["RUNNING"]
    (killed,) = [p.parent for p in sweep.rglob("linrec.log")]
    again = linrec(tmp_path, *common, "hydra.sweeper.n_trials=1", "model.lam=interval(1, 10)")
    assert again.returncode == 0, again.stderr
    assert "cut off by a kill" in again.stdout + again.stderr
    trials = optuna.load_study(study_name="linrec", storage=storage).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert "interrupted" in (killed / "FAILED").read_text()
    report = build_report([sweep], out=tmp_path / "report", figures=False)
    assert report.n_runs == 1 and report.n_problems == 1
    assert "interrupted: the command running this Optuna trial was killed" in report.markdown


def test_a_run_into_the_directory_of_an_older_one_does_not_mix_them(tmp_path):
    assert linrec(tmp_path, "hydra.run.dir=run", *SMALL).returncode == 0
    assert (tmp_path / "run" / "ranks_valid.npz").exists()
    again = linrec(tmp_path, "hydra.run.dir=run", "data.split.valid_fraction=0", *SMALL)
    assert again.returncode == 0, again.stderr
    assert not (tmp_path / "run" / "ranks_valid.npz").exists()  # the older run's
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(record["splits"]) == {"test"}
    (kept,) = (tmp_path / "run" / "superseded").iterdir()  # the older run, whole
    older = json.loads((kept / "results.json").read_text())
    assert set(older["splits"]) == {"valid", "test"} and (kept / "ranks_valid.npz").exists()
    from linrec.report import build_report

    report = build_report([tmp_path / "run"], out=tmp_path / "report", figures=False)
    assert report.n_runs == 1 and report.n_problems == 0  # the set-aside run is not read


#: instead of submitting to SLURM, write the job script the launcher would submit and stop
CAPTURE_SBATCH = """
import pathlib, submitit
def _capture(self, fn, *args):
    script = self._executor._make_submission_file_text("python -m the_job", "uid")
    pathlib.Path("job.sbatch").write_text(script)
    raise SystemExit(0)
submitit.AutoExecutor.map_array = _capture
"""


def test_the_slurm_launcher_composes_and_writes_its_job_script(tmp_path):
    """hydra/launcher=submitit_slurm through the real command, without a cluster (a stand-in
    srun on PATH; the submission is captured): the job script asks for what the command line
    set, the time limit in minutes, and its logs go under the sweep directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    proc = run_command(tmp_path, "-m", "hydra/launcher=submitit_slurm",
                       "hydra.launcher.partition=gpu", "hydra.launcher.timeout_min=120",
                       "hydra.launcher.cpus_per_task=4", "hydra.launcher.mem_gb=32",
                       "model.lam=1,2", *SMALL, prelude=CAPTURE_SBATCH,
                       env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "job.sbatch").read_text().splitlines()
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=120", "#SBATCH --cpus-per-task=4",
                 "#SBATCH --mem=32GB", "#SBATCH --job-name=linrec"):
        assert line in script, line
    (sweep,) = (tmp_path / "multirun").iterdir()
    assert any(line.startswith(f"#SBATCH --output={sweep}/.submitit/")
               for line in script)
