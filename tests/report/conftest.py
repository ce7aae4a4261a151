"""The commands as a user runs them, and two report trees built once per session: a model
comparison over two seeds, and every study preset over two seeds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_command

SMALL = ["data.source.n_users=400", "data.source.n_items=150", "eval.sampled.repeats=2",
         "eval.sampled.sample_sizes=[20]", "quiet=true"]
#: each study preset with settings small enough for a test (see tests/studies/)
STUDIES = {
    "sampling_study": [
        "experiment=sampling_study", "data.source.n_users=400", "data.source.n_items=150",
        "~study.models", "+study.models={pop: {name: most_popular}, ease: {name: ease, "
        "lam: 50.0}}", "eval.sampled.sample_sizes=[20]", "eval.sampled.adaptive.n0=10",
        "eval.sampled.adaptive.n_max=40", "eval.sampled.repeats=3", "eval.sampled.k_max=10",
        "eval.sampled.estimators=[naive,bv,mle]", "study.winner_ks=[5,10]",
        "study.mappings=[linear,bound]", "study.mapping_ks=[1,5,10]"],
    "linear_models": [
        "experiment=linear_models", "data=synthetic", "data.source.n_users=400",
        "data.source.n_items=150", "data.split.n_valid_users=60", "data.split.n_test_users=60",
        "~study.models", "+study.models={ease: {model: ease, grid: {lam: [5.0, 50.0]}}, "
        "lrr: {model: lrr, grid: {rank: [10, 20], lam: [10.0, 100.0]}}}"],
    "loss_study": [
        "experiment=loss_study", "model.epochs=2", "model.sampling.n_negatives=20",
        "model.sampling.n_positives=4", "~study.datasets", "+study.datasets={small: {source: "
        "{name: synthetic, n_users: 200, n_items: 80, mean_user_interactions: 12.0}, split: "
        "{kind: holdout, valid_fraction: 0.15}}}", "~study.models", "+study.models={ccl: "
        "{loss: {name: ccl}}, debiased_ccl: {loss: {name: debiased_ccl}}}", "~study.per_dataset",
        "study.rows=[{name: CCL, biased: ccl, debiased: debiased_ccl}]"],
}


def linrec(cwd: Path, *args: str, command: str = "main") -> subprocess.CompletedProcess:
    """`linrec ARGS` (command main) or `linrec-report ARGS` (report) in cwd."""
    return run_command(cwd, *args, command={"main": "linrec", "report": "linrec-report"}[command])


@pytest.fixture(scope="session")
def comparison(tmp_path_factory) -> Path:
    """most_popular, EASE and an LRR grid, two seeds, through the real commands; the report in
    <root>/report (figures included)."""
    root = tmp_path_factory.mktemp("comparison")
    first = linrec(root, "-m", "model=most_popular,ease", "seed=0,1", *SMALL)
    assert first.returncode == 0, first.stderr
    grid = linrec(root, "-m", "model=lrr", "model.rank=5,10", "model.lam=1,100", "seed=0,1",
                  *SMALL)
    assert grid.returncode == 0, grid.stderr
    report = linrec(root, "multirun", "--out", "report", command="report")
    assert report.returncode == 0, report.stderr
    return root


@pytest.fixture(scope="session")
def studies(tmp_path_factory) -> Path:
    """Every study preset through `linrec -m … seed=0,1` (into <root>/studies/<name>), then
    `linrec-report studies` into <root>/report (figures included)."""
    root = tmp_path_factory.mktemp("studies")
    for name, args in STUDIES.items():
        proc = linrec(root, "-m", f"hydra.sweep.dir=studies/{name}", *args, "seed=0,1",
                      "quiet=true")
        assert proc.returncode == 0, (name, proc.stderr[-3000:])
    report = linrec(root, "studies", "--out", "report", command="report")
    assert report.returncode == 0, report.stderr
    return root
