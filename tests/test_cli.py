"""End-to-end: the `linrec` and `linrec-report` commands as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SMALL = [
    "data.source.n_users=400",
    "data.source.n_items=150",
    "eval.sampled.repeats=2",
    "eval.sampled.sample_size=20",
]


def run_linrec(tmp_path: Path, *overrides: str, multirun: bool = False):
    env = dict(os.environ, LINREC_DATA=str(tmp_path / "cache"), HYDRA_FULL_ERROR="0")
    cmd = [sys.executable, "-c", "from linrec.cli import main; main()"]
    if multirun:
        cmd += ["-m", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    else:
        cmd += [f"hydra.run.dir={tmp_path / 'run'}"]
    cmd += list(overrides)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_default_run_writes_results_and_ranks(tmp_path):
    proc = run_linrec(tmp_path, *SMALL)
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "run"
    rec = json.loads((run_dir / "results.json").read_text())
    assert rec["model"] == "ease"
    assert set(rec["dataset"]) >= {"n_users", "n_items", "n_interactions"}
    for split in ("valid", "test"):
        exact = rec["splits"][split]["exact"]
        assert 0.0 <= exact["ndcg@100"] <= 1.0 and 0.0 <= exact["recall@20"] <= 1.0
        assert "auc" in exact
        sampled = rec["splits"][split]["sampled"]
        assert set(sampled["estimators"]) == {"naive", "bv", "mle", "mn_mle", "adaptive_mle"}
    assert rec["selection"] == {
        "metric": "ndcg@100",
        "split": "valid",
        "value": rec["splits"]["valid"]["exact"]["ndcg@100"],
    }
    assert rec["timings"]["fit"] > 0 and rec["timings"]["evaluate"] > 0
    assert rec["environment"]["numpy"] == np.__version__
    assert rec["config"]["model"]["lam"] == 500.0
    ranks = np.load(run_dir / "ranks.npz")
    assert len(ranks["rank"]) == rec["splits"]["test"]["n_targets"]
    assert ranks["rank"].min() >= 1
    assert "ndcg" in proc.stdout and "K=100" in proc.stdout
    assert not (run_dir / "FAILED").exists()


def test_same_seed_same_numbers(tmp_path):
    a = run_linrec(tmp_path / "a", *SMALL)
    b = run_linrec(tmp_path / "b", *SMALL)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    ra = json.loads((tmp_path / "a" / "run" / "results.json").read_text())["splits"]
    rb = json.loads((tmp_path / "b" / "run" / "results.json").read_text())["splits"]
    assert ra["test"]["exact"] == rb["test"]["exact"]
    assert ra["test"]["sampled"]["estimators"] == rb["test"]["sampled"]["estimators"]


def test_sweep_and_report(tmp_path):
    proc = run_linrec(tmp_path, *SMALL, "eval.sampled.enabled=false", "model.lam=10,1000",
                      multirun=True)
    assert proc.returncode == 0, proc.stderr
    results = sorted((tmp_path / "sweep").rglob("results.json"))
    assert len(results) == 2
    from linrec.cli import report_main

    assert report_main([str(tmp_path / "sweep")]) == 0
    md = (tmp_path / "sweep" / "report.md").read_text()
    assert "model.lam" in md and "| 10 |" in md.replace("| 10.0 |", "| 10 |")
    csv = (tmp_path / "sweep" / "report.csv").read_text().splitlines()
    assert len(csv) == 3 and "ndcg@100" in csv[0]


@pytest.mark.parametrize(
    "override, expected",
    [
        ("model.lam=-1", "lam"),
        ("eval.ks=[0,10]", "eval.ks"),
        ("eval.selection=foo@10", "eval.selection"),
        ("model=nosuchmodel", "nosuchmodel"),
    ],
)
def test_bad_input_is_a_clear_error_and_leaves_no_results(tmp_path, override, expected):
    proc = run_linrec(tmp_path, *SMALL, override)
    assert proc.returncode != 0
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_malformed_data_file_names_file_and_line(tmp_path):
    bad = tmp_path / "events.csv"
    bad.write_text("user,item\n1,2\n3,4\n5\n")
    proc = run_linrec(tmp_path, "data=tabular", f"data.path={bad}", "data.user_col=user",
                      "data.item_col=item")
    assert proc.returncode == 2
    assert "events.csv" in proc.stderr and "line 4" in proc.stderr
    assert "Traceback" not in proc.stderr
