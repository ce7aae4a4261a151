"""linrec on a real one-node SLURM cluster with job accounting (tests/slurm/cluster.sh starts
Debian's slurm-wlm, slurmdbd, munge and MariaDB on localhost; root only): a sweep through
submitit's SLURM launcher completes; in an MF sweep, a job SLURM preempts (USR2, submitit's
signal) is requeued and comes back by itself, continuing from its checkpoint, and a job
cancelled with scancel is marked FAILED, listed, and finished by the same command, continuing
from its checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests import on_all_cores
from tests.conftest import run_command

CLUSTER = Path(__file__).resolve().parent / "slurm" / "cluster.sh"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("apt-get") is None,
                                reason="a SLURM cluster is started as root with Debian's "
                                       "packages (CI runs as root)")


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    # the daemons and their jobs get the machine's cores, not the pytest worker's share
    started = subprocess.run(["bash", str(CLUSTER), "start", str(root)], capture_output=True,
                             text=True, timeout=900, preexec_fn=on_all_cores)
    assert started.returncode == 0, started.stdout + started.stderr
    yield started.stdout.strip().splitlines()[-1]
    subprocess.run(["bash", str(CLUSTER), "stop", str(root)], capture_output=True, timeout=120)
    alive = subprocess.run(["ps", "-eo", "stat=,comm="], capture_output=True, text=True).stdout
    left = [line for line in alive.splitlines()
            if line.split()[1:2] in (["slurmstepd"], ["srun"], ["slurm_script"])
            and not line.startswith("Z")]
    assert not left, f"processes outlived the cluster: {left}"


def _wait_for(condition, what: str, guard: float = 600) -> None:
    """Poll `condition` until it holds; `guard` seconds only keep a hang from lasting."""
    deadline = time.time() + guard
    while not condition():
        assert time.time() < deadline, what
        time.sleep(0.5)


def _epochs_logged(log: Path) -> int:
    return log.read_text().count(" - mf epoch ") if log.exists() else 0


def test_a_sweep_runs_on_the_cluster(tmp_path, partition):
    done = run_command(tmp_path, "-m", "model.lam=100,300", "data.source.n_users=400",
                       "data.source.n_items=150", "eval.sampled.enabled=false",
                       "hydra/launcher=submitit_slurm", f"hydra.launcher.partition={partition}",
                       "hydra.sweep.dir=sweep")
    assert done.returncode == 0, done.stderr
    records = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/results.json")]
    assert sorted(r["config"]["model"]["lam"] for r in records) == [100.0, 300.0]

    def accounted() -> list[str]:
        return subprocess.run(["sacct", "-n", "-X", "-o", "JobName%30,State", "-S", "now-1hour"],
                              capture_output=True, text=True, check=True).stdout.split()

    # slurmdbd records a job's end a moment after the job has written its results
    _wait_for(lambda: accounted().count("COMPLETED") >= 2,
              "the accounting never recorded the two jobs as COMPLETED", guard=120)


def test_preempted_and_cancelled_mf_jobs_continue_from_their_checkpoints(tmp_path, partition):
    args = ["-m", "model=mf", "model.epochs=12", "model.stop_patience=1000",
            "model.lr=0.001,0.002", "data.source.n_users=2000", "data.source.n_items=800",
            "model.sampling.n_negatives=50", "eval.sampled.enabled=false", "quiet=true",
            "hydra/launcher=submitit_slurm", f"hydra.launcher.partition={partition}",
            "hydra.sweep.dir=sweep"]
    sweep = tmp_path / "sweep"
    proc = run_command(tmp_path, *args, wait=False)
    logs = {lr: sweep / f"model.lr={lr}" / "linrec.log" for lr in ("0.001", "0.002")}
    _wait_for(lambda: all(_epochs_logged(log) >= 2 for log in logs.values()),
              "the MF jobs never trained two epochs")
    jobs = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True,
                          check=True).stdout.split("\n")
    ids = sorted(line.split()[0] for line in jobs if line.strip())
    assert len(ids) == 2, jobs
    # the first job as a preemption (submitit's USR2): requeued, it comes back by itself; the
    # second as scancel: marked FAILED, listed, and left to the next command
    subprocess.run(["scancel", "-s", "USR2", ids[0]], check=True)
    subprocess.run(["scancel", ids[1]], check=True)

    def state() -> list[str]:
        return subprocess.run(["squeue", "-h", "-j", ids[0], "-o", "%T %r"],
                              capture_output=True, text=True).stdout.split()

    def node_idle_or_running() -> bool:  # the old steps all ended (the node not "comp")
        idle = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True,
                              text=True).stdout.split() == ["idle"]
        return idle or state()[:1] == ["RUNNING"]

    # SLURM holds a requeued job for a while (its BeginTime); the test does not wait for it. It
    # releases the job once the node is idle: an instance started while its predecessor's step
    # is still being killed is itself killed ("job credential revoked") and recorded FAILED
    _wait_for(lambda: state()[:2] == ["PENDING", "BeginTime"],
              "the preempted job was not requeued", guard=120)
    _wait_for(node_idle_or_running, "the cancelled jobs' steps never ended", guard=120)
    if state()[:1] == ["PENDING"]:  # (a job that started meanwhile refuses the update)
        subprocess.run(["scontrol", "update", f"JobId={ids[0]}", "StartTime=now"])
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 2, err
    result = sweep / "model.lr=0.001" / "results.json"
    assert result.exists(), f"the requeued job left no results; the command said:\n{err}"
    requeued = json.loads(result.read_text())
    assert requeued["training"]["resumed_from"] >= 2
    assert len(requeued["training"]["epochs"]) == 12
    failed = sweep / "model.lr=0.002" / "FAILED"
    assert "interrupted by SIGTERM" in failed.read_text()
    assert "model.lr=0.002: interrupted by SIGTERM" in err
    again = run_command(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    finished = json.loads((sweep / "model.lr=0.002" / "results.json").read_text())
    assert finished["training"]["resumed_from"] >= 1
    assert len(finished["training"]["epochs"]) == 12
