"""End-to-end: the `linrec` and `linrec-report` commands as a user runs them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_command

SMALL = [
    "data.source.n_users=400",
    "data.source.n_items=150",
    "eval.sampled.repeats=2",
    "eval.sampled.sample_sizes=[20]",
]


def run_linrec(tmp_path: Path, *overrides: str, multirun: bool = False):
    """`linrec` into tmp_path/run (a sweep: tmp_path/sweep)."""
    where = ["-m", f"hydra.sweep.dir={tmp_path / 'sweep'}"] if multirun else \
        [f"hydra.run.dir={tmp_path / 'run'}"]
    return run_command(tmp_path, *where, *overrides)


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
        assert set(sampled) == {"n=20", "adaptive"}
        assert set(sampled["n=20"]["estimators"]) == {"naive", "bv", "mle", "mn_mle"}
        assert set(sampled["adaptive"]["estimators"]) == {"adaptive_mle"}
    assert rec["selection"] == {
        "metric": "ndcg@100",
        "split": "valid",
        "value": rec["splits"]["valid"]["exact"]["ndcg@100"],
    }
    assert rec["timings"]["fit"] > 0 and rec["timings"]["evaluate"] > 0
    env = rec["environment"]
    assert env["libraries"]["numpy"] == np.__version__ and "torch" in env["libraries"]
    assert env["linrec"]["version"] and env["created"].endswith("+00:00")
    assert rec["config"]["model"]["lam"] == 500.0
    ranks = np.load(run_dir / "ranks.npz")
    assert len(ranks["rank"]) == rec["splits"]["test"]["n_targets"]
    assert ranks["rank"].min() >= 1
    assert "ndcg" in proc.stdout and "K=100" in proc.stdout
    assert not (run_dir / "FAILED").exists()


def test_per_user_metrics_are_written_as_parquet_on_request(tmp_path):
    """eval.save_per_user=true: per_user_<split>.parquet, a row per user and metric; HR@K and
    MRR@K of each user recomputed from ranks.npz (the best-ranked target's rank alone decides
    both); each metric's mean is the one in results.json."""
    import pyarrow.parquet as pq

    proc = run_linrec(tmp_path, *SMALL, "eval.save_per_user=true", "eval.ks=[5,20]",
                      "eval.metrics=[hr,mrr,ndcg,auc]", "eval.selection=ndcg@20")
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "run"
    record = json.loads((run_dir / "results.json").read_text())
    for split, ranks_file in (("test", "ranks.npz"), ("valid", "ranks_valid.npz")):
        table = pq.read_table(run_dir / f"per_user_{split}.parquet")
        assert table.schema.names == ["user", "user_id", "metric", "value"]
        assert str(table.schema.field("user").type) == "int64"
        # the synthetic data's own ids are the row numbers
        assert table.column("user_id").to_pylist() == table.column("user").to_pylist()
        rows = table.to_pylist()
        values = {(r["user"], r["metric"]): r["value"] for r in rows}
        assert len(values) == len(rows)  # one row per user and metric
        ranks = np.load(run_dir / ranks_file)
        best = {}
        for user, rank in zip(ranks["user"].tolist(), ranks["rank"].tolist(), strict=True):
            best[user] = min(rank, best.get(user, rank))
        metrics = sorted(record["splits"][split]["exact"])
        assert sorted({m for _, m in values}) == metrics
        assert sorted({u for u, _ in values}) == sorted(best)
        for user, rank in best.items():
            for k in (5, 20):
                assert values[(user, f"hr@{k}")] == float(rank <= k)
                assert values[(user, f"mrr@{k}")] == pytest.approx(1 / rank if rank <= k else 0)
        for metric in metrics:
            mean = np.nanmean([v for (_, m), v in values.items() if m == metric])
            assert mean == pytest.approx(record["splits"][split]["exact"][metric], rel=1e-12)
    again = run_linrec(tmp_path, *SMALL)  # the same directory, without the option
    assert again.returncode == 0, again.stderr
    assert not list(run_dir.glob("*.parquet"))


def test_per_user_metrics_without_pyarrow_name_the_extra(monkeypatch):
    import sys as sys_

    from linrec.errors import ConfigError
    from linrec.eval import EvalConfig

    monkeypatch.setitem(sys_.modules, "pyarrow.parquet", None)
    with pytest.raises(ConfigError, match=r"eval.save_per_user=true .*linrec\[parquet\]"):
        EvalConfig(save_per_user=True)


def test_the_default_run_equals_an_independent_computation(tmp_path, monkeypatch):
    """EASE (the default model) in float64 on the run's own split: Steck's closed form with
    numpy's inverse and the metrics written out per user give every exact metric the run wrote,
    to 1e-9 (float64 scores have no ties here, so the tie-break plays no part)."""
    proc = run_linrec(tmp_path, *SMALL, "model.dtype=float64", "eval.sampled.enabled=false")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    monkeypatch.setenv("LINREC_DATA", str(tmp_path / "cache"))
    from linrec.data.pipeline import prepare_data

    split = prepare_data(record["config"]["data"]).split
    X = split.train.toarray().astype(np.float64)
    P = np.linalg.inv(X.T @ X + record["config"]["model"]["lam"] * np.eye(X.shape[1]))
    W = -P / np.diag(P)
    np.fill_diagonal(W, 0.0)
    for name, evalset in (("valid", split.valid), ("test", split.test)):
        foldin, targets = evalset.foldin.toarray(), evalset.targets.toarray() > 0
        scores = np.where(foldin > 0, -np.inf, foldin @ W)
        order = np.argsort(-scores, axis=1, kind="stable")
        hits = np.take_along_axis(targets, order, axis=1)
        n_targets = targets.sum(1)
        users = n_targets > 0
        got = record["splits"][name]["exact"]
        for k in (20, 100):
            recall = hits[:, :k].sum(1) / np.maximum(n_targets, 1)
            gains = 1 / np.log2(np.arange(2, k + 2))
            ideal = np.array([gains[:min(k, t)].sum() for t in n_targets])
            ndcg = (hits[:, :k] * gains).sum(1) / np.maximum(ideal, 1e-300)
            assert got[f"recall@{k}"] == pytest.approx(recall[users].mean(), abs=1e-9)
            assert got[f"ndcg@{k}"] == pytest.approx(ndcg[users].mean(), abs=1e-9)


def test_same_seed_same_numbers(tmp_path):
    a = run_linrec(tmp_path / "a", *SMALL)
    b = run_linrec(tmp_path / "b", *SMALL)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    ra = json.loads((tmp_path / "a" / "run" / "results.json").read_text())["splits"]
    rb = json.loads((tmp_path / "b" / "run" / "results.json").read_text())["splits"]
    assert ra["test"]["exact"] == rb["test"]["exact"]
    for setting in ("n=20", "adaptive"):
        assert (ra["test"]["sampled"][setting]["estimators"]
                == rb["test"]["sampled"][setting]["estimators"])


def test_sweep_and_report(tmp_path):
    proc = run_linrec(tmp_path, *SMALL, "eval.sampled.enabled=false", "model.lam=10,1000",
                      multirun=True)
    assert proc.returncode == 0, proc.stderr
    results = sorted((tmp_path / "sweep").rglob("results.json"))
    assert len(results) == 2
    from linrec.cli import report_main

    assert report_main([str(tmp_path / "sweep")]) == 0
    md = (tmp_path / "sweep" / "report_test.md").read_text()
    assert "| lam |" in md and "| ease | 10 |" in md
    csv = (tmp_path / "sweep" / "report_test.csv").read_text().splitlines()
    assert len(csv) == 3 and "ndcg@100" in csv[0]


def test_a_failing_sweep_job_does_not_stop_the_sweep(tmp_path):
    """A LinrecError in job 0 used to sys.exit the whole sweep: job 1 never ran. (An error the
    data reveals: the rank exceeds the catalogue, known only once the data is loaded.)"""
    proc = run_linrec(tmp_path, *SMALL, "eval.sampled.enabled=false", "model=lrr",
                      "model.rank=1000,10", multirun=True)
    assert proc.returncode == 2
    assert "lrr.rank=1000 exceeds n_items=150" in proc.stderr
    assert "1 sweep job(s) failed" in proc.stderr
    assert "Traceback" not in proc.stderr
    failed = sorted((tmp_path / "sweep").rglob("FAILED"))
    results = sorted((tmp_path / "sweep").rglob("results.json"))
    assert [p.parent.name for p in failed] == ["model.rank=1000"]
    assert [p.parent.name for p in results] == ["model.rank=10"]
    assert "model.rank=1000: ConfigError: lrr.rank=1000" in proc.stderr  # listed


@pytest.mark.parametrize("overrides, expected", [
    (["model=ials", "model.backend=cuda"],
     "ials.backend='cuda' is not allowed; allowed: ['torch', 'numpy', 'numba']"),
    (["model.lam=-1"], "ease.lam=-1.0 is out of range; allowed: a number >= 0"),
    (["experiment=sampling_study", "study.models=abc"],
     "study.models='abc' is not a mapping"),
    (["resume=maybe"], "resume: Value 'maybe' is not a valid bool"),
    (["-m", "model.lam=10,-1"], "ease.lam=-1.0 is out of range"),
    (["-m", "model=ials", "model.backend=numpy,cuda"], "ials.backend='cuda' is not allowed"),
], ids=["choice", "range", "study", "resume", "sweep-range", "sweep-choice"])
def test_range_and_choice_errors_fail_before_any_directory_is_made(tmp_path, overrides,
                                                                   expected):
    """The typed config of every job is built before Hydra runs: a value out of range or an
    unknown choice is one line, exit 2, and no run or sweep directory (it used to leave a
    directory with a FAILED marker and linrec.log)."""
    env = dict(os.environ, LINREC_DATA=str(tmp_path / "cache"), HYDRA_FULL_ERROR="0")
    proc = subprocess.run([sys.executable, "-c", "from linrec.cli import main; main()",
                           *overrides, *SMALL], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.startswith("linrec: error:") and len(proc.stderr.splitlines()) == 1
    assert expected in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no outputs/, multirun/, cache


@pytest.mark.parametrize(
    "override, expected",
    [
        ("model.lam=-1", "lam"),
        ("eval.ks=[0,10]", "eval.ks"),
        ("eval.selection=foo@10", "eval.selection"),
        ("model=nosuchmodel", "nosuchmodel"),
        # mistyped values were a TypeError/ValueError traceback with exit code 1, unknown fields
        # Hydra's seven-line "not in struct" message
        ("eval.memory_budget_mb=abc", "eval.memory_budget_mb: Value 'abc'"),
        ("seed=abc", "seed: Value 'abc'"),
        ("model.lam=abc", "model.lam: Value 'abc' of type 'str' could not be converted to Float"),
        ("model.lamda=1", "model 'ease' has no field 'lamda' (model.lamda); allowed: lam, dtype, "
                          "num_threads"),
        ("eval.kss=[1]", "eval has no field 'kss' (eval.kss); allowed: ks, metrics"),
        ("model=lrr model.rank=0", "lrr.rank=0 is out of range; allowed: an integer >= 1"),
    ],
)
def test_bad_input_is_a_clear_error_and_leaves_no_results(tmp_path, override, expected):
    proc = run_linrec(tmp_path, *SMALL, *override.split())
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert proc.stderr.startswith("linrec: error:") and len(proc.stderr.splitlines()) <= 2
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "results.json").exists()


@pytest.mark.parametrize("bad, reason", [
    ("hydra.run.dir=runs/seed=0", "mismatched input '=' expecting <EOF>"),
    ("model.lam=[1,", "no viable alternative at input '[1,'"),
])
def test_an_override_the_grammar_cannot_read_is_named(tmp_path, bad, reason):
    """An override Hydra's grammar cannot read is one line naming it, the grammar's reason and
    the quoting (Hydra's own message names neither the override nor the fix), exit 2, nothing
    written; quoted, the same value reads."""
    proc = run_linrec(tmp_path, *SMALL, "model.lam=10", bad)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"linrec: error: cannot read the override {bad!r}: {reason}; a value with '=', spaces, "
        "brackets or commas of its own goes in quotes, key='value' (in a shell: "
        "\"key='value'\"); the grammar: "
        "https://hydra.cc/docs/1.2/advanced/override_grammar/basic"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == []
    from linrec.cli import override_syntax_error

    assert override_syntax_error(["model.lam=10", "hydra.run.dir='runs/seed=0'"]) is None


def test_a_catalogue_too_small_for_the_sampled_defaults_names_the_fields(tmp_path):
    """The default sample size and adaptive n0 (100) on a 100-item catalogue: one error naming
    eval.sampled.sample_sizes and eval.sampled.adaptive.n0 with what to do (it used to say
    `sample_size=100 must be ...`, then on a second run `n0=100 must be ...`)."""
    proc = run_linrec(tmp_path, "data.source.n_users=300", "data.source.n_items=100")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [
        "linrec: error: eval.sampled.sample_sizes=100 is out of range; allowed: an integer >= 2 "
        "and <= 99; lower eval.sampled.sample_sizes below the catalogue's 100 items (e.g. "
        "eval.sampled.sample_sizes=[50]), or turn the sampled evaluation off "
        "(eval.sampled.enabled=false)",
        "eval.sampled.adaptive.n0=100 is out of range; allowed: an integer >= 2 and <= 99; lower "
        "eval.sampled.adaptive.n0 below the catalogue's 100 items, or turn adaptive sampling off "
        "(eval.sampled.adaptive.estimators=[])",
    ]
    assert not (tmp_path / "run" / "results.json").exists()
    fixed = run_linrec(tmp_path, "data.source.n_users=300", "data.source.n_items=100",
                       "eval.sampled.sample_sizes=[50]", "eval.sampled.adaptive.n0=50",
                       "eval.sampled.repeats=2")
    assert fixed.returncode == 0, fixed.stderr
    assert (tmp_path / "run" / "results.json").exists()


def test_a_sweep_is_checked_job_by_job_before_it_runs(tmp_path):
    """model=ease,puresvd model.lam=1: the puresvd job has no lam; the sweep stops before any
    job runs, with the linrec message."""
    proc = run_linrec(tmp_path, *SMALL, "model=ease,puresvd", "model.lam=1", multirun=True)
    assert proc.returncode == 2
    assert "model 'puresvd' has no field 'lam'" in proc.stderr
    assert not (tmp_path / "sweep").exists()


def test_help_and_log_name_linrec(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "from linrec.cli import main; main()", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert proc.stdout.startswith("linrec: linear recommenders")
    assert "powered by Hydra" not in proc.stdout and "model: " in proc.stdout
    run = run_linrec(tmp_path, *SMALL, "eval.sampled.enabled=false")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "run" / "linrec.log").exists()
    # the data summary is logged once
    assert (tmp_path / "run" / "linrec.log").read_text().count("data synthetic") == 1


def test_an_os_error_while_writing_the_run_is_one_line_and_marks_it_failed(tmp_path):
    """A disk that takes no more (here a file-size limit: writes past 16 KiB fail with EFBIG,
    as ENOSPC would on a full disk) ends the run with one line naming the file and the cause;
    the run is marked FAILED, with the traceback there, and no file is left half written."""
    import resource

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))

    env = dict(os.environ, LINREC_DATA=str(tmp_path / "cache"), HYDRA_FULL_ERROR="0")
    warm = run_linrec(tmp_path, *SMALL)  # the data cache first: its split is larger than 16 KiB
    assert warm.returncode == 0, warm.stderr
    run_dir = tmp_path / "full"
    proc = subprocess.run([sys.executable, "-c", "from linrec.cli import main; main()", *SMALL,
                           f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, env=env, timeout=300,
                          preexec_fn=limit_file_size)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("linrec: error:")]
    assert errors == [f"linrec: error: {run_dir / 'ranks_valid.npz'}: File too large"]
    assert "Traceback" not in proc.stderr
    assert "OSError: [Errno 27] File too large" in (run_dir / "FAILED").read_text()
    assert sorted(p.name for p in run_dir.iterdir()) == [".hydra", "FAILED", "linrec.log"]


def test_malformed_data_file_names_file_and_line(tmp_path):
    bad = tmp_path / "events.csv"
    bad.write_text("user,item\n1,2\n3,4\n5\n")
    proc = run_linrec(tmp_path, "data=tabular", f"data.path={bad}", "data.source.user_col=user",
                      "data.source.item_col=item")
    assert proc.returncode == 2
    assert "events.csv" in proc.stderr and "line 4" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_report_survives_a_closed_pipe(tmp_path):
    """`linrec-report DIR | head` used to end in a BrokenPipeError traceback."""
    proc = run_linrec(tmp_path, *SMALL, "eval.sampled.enabled=false", "model.lam=10,20,30",
                      multirun=True)
    assert proc.returncode == 0, proc.stderr
    report = subprocess.run(
        f"{sys.executable} -c 'from linrec.cli import report_main; import sys; "
        f"sys.exit(report_main())' {tmp_path / 'sweep'} | head -1",
        shell=True, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and report.stdout.startswith("# linrec report")
    assert "Traceback" not in report.stderr and "BrokenPipe" not in report.stderr


def test_a_plugin_of_the_sweep_extra_that_is_not_installed_names_the_extra(monkeypatch):
    import importlib.util

    from linrec import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None
                        if name == "optuna" else real(name))
    message = cli.missing_extra(["-m", "hydra/sweeper=optuna", "model.lam=interval(1,2)"])
    assert message == ("hydra/sweeper=optuna needs linrec's `sweep` extra: pip install "
                       "'linrec[sweep]' (or -e '.[sweep]' in a checkout)")
    assert cli.missing_extra(["-m", "hydra/launcher=joblib", "model.lam=1,2"]) is None
    assert cli.missing_extra(["model.lam=1"]) is None


def test_one_resume_switch_for_sweeps_and_checkpoints(tmp_path):
    """`resume=false` (or its earlier spelling `+resume=false`) starts a model trained by
    epochs over, though its checkpoint is there; by default the same command continues from
    it (here: a finished fit, read back)."""
    mf = [*SMALL, "model=mf", "model.epochs=2", "model.sampling.n_negatives=10",
          "eval.sampled.enabled=false"]

    def resumed_from(*extra: str):
        proc = run_linrec(tmp_path, *mf, *extra)
        assert proc.returncode == 0, proc.stderr
        record = json.loads((tmp_path / "run" / "results.json").read_text())
        assert record["config"]["model"]["resume"] is (extra == ())
        return record["training"]["resumed_from"]

    assert resumed_from() is None
    assert resumed_from() == 2
    assert resumed_from("resume=false") is None
    assert resumed_from("+resume=false") is None


#: counts Hydra's compositions of the config and prints the count to stderr as the child exits
_COUNT_COMPOSITIONS = """\
import atexit, sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
_load, _modes = ConfigLoaderImpl.load_configuration, []
def _counted(self, *args, **kwargs):
    _modes.append(str(kwargs.get("run_mode")))
    return _load(self, *args, **kwargs)
ConfigLoaderImpl.load_configuration = _counted
atexit.register(lambda: print("compositions:", *_modes, file=sys.stderr))
"""


def test_a_run_composes_its_config_once_and_a_config_may_still_set_the_mode(tmp_path):
    """The precheck's composition only: Hydra's own, to read `hydra.mode` and to run, are
    answered from the precheck's. A `hydra.mode=MULTIRUN` set without -m still makes a sweep,
    as Hydra does."""
    done = run_command(tmp_path, *SMALL, "eval.sampled.enabled=false", "hydra.run.dir=run",
                       prelude=_COUNT_COMPOSITIONS)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "compositions: RunMode.RUN"
    swept = run_command(tmp_path, *SMALL, "eval.sampled.enabled=false", "hydra.mode=MULTIRUN",
                        "model.lam=1,10", "hydra.sweep.dir=sweep")
    assert swept.returncode == 0, swept.stderr
    assert len(list((tmp_path / "sweep").glob("*/results.json"))) == 2


#: counts the copies of the config repository Hydra makes and prints the count as it exits
_COUNT_REPOSITORY_COPIES = """\
import atexit, sys
from hydra._internal.config_repository import CachingConfigRepository
_init, _copies = CachingConfigRepository.__init__, []
def _counted(self, *args, **kwargs):
    _copies.append(1)
    _init(self, *args, **kwargs)
CachingConfigRepository.__init__ = _counted
atexit.register(lambda: print("repository copies:", len(_copies), file=sys.stderr))
"""
#: the `linrec` command with Hydra listing the config groups by itself
_HYDRA_LISTS = """\
import contextlib, linrec.hydra_compat
linrec.hydra_compat.one_repository_per_listing = contextlib.nullcontext
"""


@pytest.mark.parametrize("flag", ["--help", "--hydra-help"])
def test_the_help_lists_every_group_from_one_copy_of_the_config_repository(tmp_path, flag):
    """The same text as Hydra listing each group from a fresh copy of the repository (one per
    group: its deep copies were three quarters of `linrec --help`), from a few copies."""
    ours = run_command(tmp_path, flag, prelude=_COUNT_REPOSITORY_COPIES)
    hydra = run_command(tmp_path, flag, prelude=_COUNT_REPOSITORY_COPIES + _HYDRA_LISTS)
    assert ours.returncode == hydra.returncode == 0, ours.stderr + hydra.stderr
    assert ours.stdout == hydra.stdout and "== Configuration groups ==" in ours.stdout
    copies = {name: int(done.stderr.split("repository copies:")[-1])
              for name, done in (("ours", ours), ("hydra", hydra))}
    assert copies["ours"] <= 3 < 100 < copies["hydra"], copies


#: the `linrec` command with Hydra composing the run's config itself, as it does alone
_HYDRA_COMPOSES = """\
import contextlib, linrec.hydra_compat
linrec.hydra_compat.precomposed = lambda *args: contextlib.nullcontext()
"""


@pytest.mark.parametrize("overrides", [[], ["hydra.mode=RUN", "hydra.job.chdir=true"]],
                         ids=["mode unset", "mode set"])
def test_the_run_of_the_precheck_composition_is_the_run_hydra_composes(tmp_path, overrides):
    """Hydra's record of the run (.hydra/*.yaml), its log and its results are those of the
    run whose config Hydra composed itself: the override Hydra adds when no mode is set
    included."""
    args = [*SMALL, "eval.sampled.enabled=false", "seed=3", *overrides, "hydra.run.dir=run"]
    runs = {}
    for name, prelude in (("reused", ""), ("hydra", _HYDRA_COMPOSES)):
        done = run_command(tmp_path / name, *args, prelude=prelude)
        assert done.returncode == 0, done.stderr
        run = tmp_path / name / "run"
        record = json.loads((run / "results.json").read_text())
        runs[name] = {
            **{f: (run / ".hydra" / f).read_text().replace(str(tmp_path / name), "ROOT")
               for f in ("config.yaml", "hydra.yaml", "overrides.yaml")},
            "log": [re.sub(r"[\d.]+ ?s\b", "(time)", line.split("]", 1)[1])
                    .replace(str(tmp_path / name), "ROOT")
                    for line in (run / "linrec.log").read_text().splitlines()],
            "exact": {k: v["exact"] for k, v in record["splits"].items()},
            "config": record["config"]}
    assert runs["reused"] == runs["hydra"]
    assert "- hydra.mode=RUN" in runs["reused"]["hydra.yaml"]


def test_the_default_run_prints_a_short_summary(tmp_path):
    """At most 30 lines: what ran, the test metrics, the sampled estimates beside the exact
    target-level value, the selection and where results.json is, with the values results.json
    holds."""
    done = run_command(tmp_path, "hydra.run.dir=run")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) <= 30, done.stdout
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert f"results: {tmp_path / 'run' / 'results.json'}" in lines or \
        "results: run/results.json" in lines
    recall = next(line for line in lines if line.startswith("recall "))
    assert f"{record['splits']['test']['exact']['recall@20']:.4f}" in recall.split()
    assert not done.stderr.strip(), done.stderr  # no log line on the terminal


def test_a_sweep_ends_with_a_table_of_its_jobs(tmp_path):
    done = run_command(tmp_path, "-m", *SMALL, "eval.sampled.enabled=false",
                       "model.lam=30,100,300,1000", "hydra.sweep.dir=sweep")
    assert done.returncode == 0, done.stderr
    table = done.stdout[done.stdout.index("sweep "):].splitlines()
    assert table[0].endswith("4 of 4 job(s) complete")
    assert [row.split()[0] for row in table[2:]] == ["30", "100", "300", "1000"]
    values = {row.split()[0]: float(row.split()[1]) for row in table[2:]}
    best = next(row.split()[0] for row in table[2:] if "◀ best" in row)
    assert values[best] == max(values.values())


def test_diverged_estimates_are_marked_not_reported(tmp_path):
    """With all nine fixed-size estimators, `ls` diverges on this data: no estimate outside
    [0, 1] is a number in results.json, and no printed line runs two numbers together."""
    import re

    nine = "eval.sampled.estimators=[naive,unbiased_rank,ls,cls,bv,mle,mes,mn_mle,mn_mes]"
    done = run_command(tmp_path, *SMALL, nine, "verbose=true", "hydra.run.dir=run")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    sampled = record["splits"]["test"]["sampled"]["n=20"]
    diverged = 0
    for entry in sampled["estimators"].values():
        for estimate in entry["metrics"].values():
            if estimate.get("status") == "diverged":
                diverged += 1
                assert estimate["mean"] is None
            else:
                assert 0.0 <= estimate["mean"] <= 1.0
    assert diverged, "ls was expected to diverge here"
    for curve in sampled["curves"].values():
        assert all(v is None or 0.0 <= v <= 1.0 for values in curve.values() for v in values)
    assert "diverged" in done.stdout
    assert not re.search(r"\d\.\d{4}[-\d]", done.stdout), done.stdout



def _report_imports(packages: set[str]) -> str:
    """A prelude that prints, as the command exits, which of `packages` it imported."""
    return (f"import atexit, sys\n"
            f"atexit.register(lambda: print('heavy:', sorted({{m.partition('.')[0] for m in "
            f"sys.modules}} & set({sorted(packages)!r})), file=sys.stderr))\n")


#: the compiled-kernel and training libraries
_REPORT_HEAVY_IMPORTS = _report_imports({"numba", "llvmlite", "torch", "implicit"})


def test_the_default_run_needs_no_compiled_kernel_and_no_torch(tmp_path):
    """The default run (EASE on the embedded data, figures included) is small enough for NumPy
    and scipy throughout: in a fresh interpreter it imports neither numba, whose kernels a fresh
    install would first compile (seconds), nor torch."""
    process = run_command(tmp_path, "hydra.run.dir=run", prelude=_REPORT_HEAVY_IMPORTS,
                          wait=False)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    assert stderr.splitlines()[-1] == "heavy: []"
    assert (tmp_path / "run" / "results.json").is_file()


def test_the_help_imports_no_scipy_matplotlib_or_torch(tmp_path):
    """`linrec --help` composes the typed configs, which import none of what a run computes
    with (`linrec.lazy_exports`; its time: experiments/LOG.md)."""
    process = run_command(tmp_path, "--help", wait=False, prelude=_report_imports(
        {"scipy", "matplotlib", "numba", "torch", "implicit", "pandas"}))
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    assert stderr.splitlines()[-1] == "heavy: []"
    assert "== Configuration groups ==" in stdout and "\nmodel: " in stdout
