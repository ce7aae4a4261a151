"""linrec.report.runs: one tidy row per run directory (complete, failed, half-written,
unreadable), the configuration and data keys, the swept settings and the metric columns."""

from __future__ import annotations

import pandas as pd
import pytest

from linrec.errors import DataError
from linrec.report.runs import data_key, metric_columns, model_label, read_runs, varying_params
from tests.report.records import run_record, write_record


def test_every_run_directory_is_one_row(tmp_path):
    write_record(tmp_path / "a", run_record(1.0, 0, 0.3))
    write_record(tmp_path / "b", run_record(1.0, 1, 0.4, cache="elsewhere"))
    write_record(tmp_path / "c", run_record(10.0, 0, 0.5))
    (tmp_path / "failed" / ".hydra").mkdir(parents=True)
    (tmp_path / "failed" / "FAILED").write_text("ConfigError: bad\nmore\n")
    (tmp_path / "half" / ".hydra").mkdir(parents=True)
    (tmp_path / "half" / ".hydra" / "overrides.yaml").write_text("- model.lam=3\n- seed=2\n")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text("{not json")
    (tmp_path / "sweep" / ".hydra").mkdir(parents=True)  # a sweep's root is not a run
    (tmp_path / "sweep" / "multirun.yaml").write_text("x")
    runs = read_runs([tmp_path], "test")
    frame = runs.frame.set_index(runs.frame["run"].map(lambda r: r.rsplit("/", 1)[1]))
    assert sorted(frame.index) == ["a", "b", "broken", "c", "failed", "half"]
    assert frame.loc["failed", "status"] == "failed"
    assert frame.loc["failed", "error"] == "ConfigError: bad\nmore"
    assert frame.loc["half", "status"] == "incomplete"
    assert frame.loc["half", "label"] == "model.lam=3 seed=2"
    assert "unreadable results.json" in frame.loc["broken", "error"]
    complete = runs.complete.set_index("run")
    assert len(complete) == 3 and len(runs.not_complete) == 3
    a, b, c = (complete.loc[str(tmp_path / name)] for name in "abc")
    # seed and threads are not configuration, nor is where the data is cached
    assert a["config_key"] == b["config_key"] != c["config_key"]
    assert a["data_key"] == b["data_key"] == c["data_key"]
    assert a["ndcg@10"] == 0.3 and a["selection_value"] == 0.15 and a["fit_s"] == 1.5
    assert a["param.lam"] == 1.0 and "param.num_threads" not in complete
    assert a["split"] == "test"
    valid = read_runs([tmp_path], "valid").complete.set_index("run")
    assert valid.loc[str(tmp_path / "a"), "ndcg@10"] == 0.15
    assert metric_columns(runs.frame) == ["ndcg@10", "auc"]


def test_keys_and_labels():
    assert data_key(run_record(1.0, 0, 0.1)) == data_key(run_record(5.0, 3, 0.2, cache="b"))
    assert data_key(run_record(1.0, 0, 0.1)) != data_key(run_record(1.0, 0, 0.1, n_items=99))
    assert data_key(run_record(1.0, 0, 0.1)).startswith("synthetic:")
    assert model_label({"name": "mf", "loss": {"name": "ccl", "margin": 0.9}}, "mf") == "mf/ccl"
    assert model_label({"name": "ease", "lam": 1.0}, None) == "ease"


def test_varying_params_overall_and_per_model():
    frame = pd.DataFrame({
        "model": ["ease", "ease", "lrr", "lrr"],
        "param.lam": [1.0, 10.0, 5.0, 5.0],
        "param.rank": [None, None, 10, 20],
        "param.dtype": ["float64"] * 4,
    })
    assert varying_params(frame) == ["param.lam", "param.rank"]
    assert varying_params(frame, by_model=True) == ["param.lam", "param.rank"]
    assert varying_params(frame[frame["model"] == "lrr"]) == ["param.rank"]


def test_nothing_to_read_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="no such directory"):
        read_runs([tmp_path / "missing"])
    with pytest.raises(DataError, match="no runs below"):
        read_runs([tmp_path])


def test_a_setting_missing_in_some_runs_varies():
    """A field only some runs have (a newer setting, another loss's parameter) is swept: its
    missing value is a value of its own (pandas 3 keeps NaN missing under astype(str))."""
    frame = pd.DataFrame({"param.lam": [1.0, 1.0, 1.0], "param.dim": [None, None, 8.0],
                          "param.k": [None, None, None]})
    assert varying_params(frame) == ["param.dim"]
