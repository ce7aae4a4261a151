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


def test_a_failing_sweep_job_does_not_stop_the_sweep(tmp_path):
    """A LinrecError in job 0 used to sys.exit the whole sweep: job 1 never ran."""
    proc = run_linrec(tmp_path, *SMALL, "eval.sampled.enabled=false", "model.lam=-1,10",
                      multirun=True)
    assert proc.returncode == 2
    assert "lam" in proc.stderr and "1 sweep job(s) failed" in proc.stderr
    assert "Traceback" not in proc.stderr
    failed = sorted((tmp_path / "sweep").rglob("FAILED"))
    results = sorted((tmp_path / "sweep").rglob("results.json"))
    assert [p.parent.name[:2] for p in failed] == ["0_"]
    assert [p.parent.name[:2] for p in results] == ["1_"]


@pytest.mark.parametrize(
    "override, expected",
    [
        ("model.lam=-1", "lam"),
        ("eval.ks=[0,10]", "eval.ks"),
        ("eval.selection=foo@10", "eval.selection"),
        ("model=nosuchmodel", "nosuchmodel"),
        # mistyped values were a TypeError/ValueError traceback with exit code 1
        ("eval.memory_budget_mb=abc", "eval.memory_budget_mb='abc' must be of type int"),
        ("seed=abc", "seed='abc' must be an integer >= 0"),
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


# --- config validation (in-process) ------------------------------------------------------------


@pytest.mark.parametrize(
    "values, match",
    [
        ({"memory_budget_mb": "abc"}, r"eval.memory_budget_mb='abc' must be of type int"),
        ({"selection": 5}, r"eval.selection=5 must be of type str"),
        ({"splits": "test"}, r"eval.splits='test' must be a list"),  # was split into letters
        ({"ks": [1.5]}, r"eval.ks=1.5 must be of type int"),
        ({"sampled": {"enabled": "no"}}, r"eval.sampled.enabled='no' must be of type bool"),
        ({"sampled": {"replace": 1}}, r"eval.sampled.replace=1 must be of type bool"),
        ({"sampled": {"sample_size": True}}, r"eval.sampled.sample_size=True must be of type int"),
        ({"sampled": {"k_max": "abc"}}, r"eval.sampled.k_max='abc' must be of type int"),
        ({"sampled": {"adaptive": 3}}, r"eval.sampled.adaptive=3 must be a mapping"),
        ({"sampled": {"adaptive": {"n0": "x"}}}, r"eval.sampled.adaptive.n0='x' must be of type"),
        ({"sampled": None}, r"eval.sampled=None must be a mapping"),
    ],
)
def test_eval_config_rejects_mistyped_values(values, match):
    from linrec.config import EvalConfig
    from linrec.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        EvalConfig.from_dict(values)


def test_eval_config_lists_become_tuples():
    from linrec.config import EvalConfig

    cfg = EvalConfig.from_dict({"ks": [5, 1], "splits": ["test"],
                                "sampled": {"estimators": ["naive"], "adaptive": {"n0": 10}}})
    assert cfg.ks == (5, 1) and cfg.splits == ("test",)
    assert cfg.sampled.estimators == ("naive",) and cfg.sampled.adaptive.n0 == 10


def _small_run_config(tmp_path, monkeypatch, *overrides: str):
    from hydra import compose, initialize_config_dir

    from linrec.cli import config_dir

    monkeypatch.setenv("LINREC_DATA", str(tmp_path / "cache"))
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name="config", overrides=[*SMALL, "quiet=true", *overrides])


@pytest.mark.parametrize(
    "override, match",
    [
        ("eval.sampled.sample_size=1000", "sample_size=1000"),
        ("eval.sampled.adaptive.n0=1000", "n0=1000"),
    ],
)
def test_sampled_settings_beyond_the_catalogue_fail_before_the_fit(
    tmp_path, monkeypatch, override, match
):
    from linrec.errors import ConfigError
    from linrec.experiment import run
    from linrec.models import EASE

    def no_fit(self, *args, **kwargs):
        raise AssertionError("the model was fitted before the config error")

    monkeypatch.setattr(EASE, "fit", no_fit)
    cfg = _small_run_config(tmp_path, monkeypatch, override)
    with pytest.raises(ConfigError, match=match):
        run(cfg, run_dir=tmp_path / "run")


def test_failed_and_successful_runs_replace_each_others_records(tmp_path, monkeypatch):
    from linrec.experiment import run
    from linrec.results import mark_failed

    run_dir = tmp_path / "run"
    cfg = _small_run_config(tmp_path, monkeypatch, "eval.sampled.enabled=false")
    run(cfg, run_dir=run_dir)
    assert (run_dir / "results.json").exists()
    # a failed rerun into the same directory must not leave the old results behind
    mark_failed(run_dir, "ConfigError: bad")
    assert not (run_dir / "results.json").exists()
    assert (run_dir / "FAILED").read_text() == "ConfigError: bad\n"
    run(cfg, run_dir=run_dir)  # and a successful rerun clears the marker
    assert (run_dir / "results.json").exists() and not (run_dir / "FAILED").exists()


def test_report_on_a_results_file_writes_beside_it(tmp_path):
    """`linrec-report run/results.json` used to write into run/results.json/ (a traceback)."""
    from linrec.cli import report_main
    from linrec.results import write_json_atomic

    record = {"model": "ease", "dataset": {"name": "toy"}, "config": {"model": {"name": "ease"}},
              "splits": {"test": {"exact": {"ndcg@10": 0.25}}}, "timings": {"fit": 1.0}}
    results = write_json_atomic(tmp_path / "run" / "results.json", record)
    assert report_main([str(results)]) == 0
    csv = (tmp_path / "run" / "report.csv").read_text().splitlines()
    assert csv[0].split(",")[-3:] == ["model", "ndcg@10", "fit_s"] and csv[1].endswith(",0.25,1.0")


def _config_names(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / group).glob("*.yaml"))


@pytest.mark.parametrize("model_name", _config_names("model"))
def test_every_model_group_builds_its_model(tmp_path, monkeypatch, model_name):
    """Each conf/model/<name>.yaml names a registered model and only parameters it accepts."""
    from linrec.models import build_model

    cfg = _small_run_config(tmp_path, monkeypatch, f"model={model_name}")
    params = dict(cfg.model)
    model = build_model(params.pop("name"), **params)
    assert hasattr(model, "fit") and hasattr(model, "score")


@pytest.mark.parametrize("data_name", _config_names("data"))
def test_every_data_group_passes_the_pipeline_checks(tmp_path, monkeypatch, data_name):
    """Each conf/data/<name>.yaml has only keys the pipeline, its split protocol and its source
    accept: preparing it fails, if at all, only on the missing data file."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from linrec.cli import config_dir
    from linrec.data.pipeline import prepare_data
    from linrec.errors import ConfigError, DownloadError

    monkeypatch.setenv("LINREC_DATA", str(tmp_path / "cache"))
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"data={data_name}"])
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    if data_name == "synthetic":
        data_cfg["source"].update(n_users=300, n_items=100)
        assert prepare_data(data_cfg).split.n_items > 0
        return
    with pytest.raises((ConfigError, DownloadError), match="path|not in the cache"):
        prepare_data(data_cfg)


def test_model_parameters_are_checked_before_the_data_is_loaded(tmp_path, monkeypatch):
    """A bad model parameter used to surface only after the (possibly slow) data preparation."""
    import linrec.data.pipeline as pipeline
    from linrec.errors import ConfigError
    from linrec.experiment import run

    def no_data(cfg):
        raise AssertionError("the data was prepared before the model config was checked")

    monkeypatch.setattr(pipeline, "prepare_data", no_data)
    cfg = _small_run_config(tmp_path, monkeypatch, "model.lam=-1")
    with pytest.raises(ConfigError, match="lam"):
        run(cfg, run_dir=tmp_path / "run")
