"""linrec-report (linrec/report): every number of its tables checked against the runs'
results.json and ranks, significance against scipy, the protocol (best on validation, shown on
test), failed and half-written runs listed, datasets never mixed, per-split files, the formats,
and the figures."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from linrec.eval.metrics import exact_metrics
from linrec.eval.ranks import RankTable
from linrec.report import build_report
from linrec.report.render import Num, Table, latex, markdown

SMALL = ["data.source.n_users=400", "data.source.n_items=150", "eval.sampled.repeats=2",
         "eval.sampled.sample_sizes=[20]", "quiet=true"]


def linrec(cwd: Path, *args: str, command: str = "main"):
    env = dict(os.environ, LINREC_DATA=str(cwd / "cache"), HYDRA_FULL_ERROR="0")
    entry = {"main": "from linrec.cli import main; main()",
             "report": "import sys; from linrec.cli import report_main; "
                       "sys.exit(report_main())"}[command]
    return subprocess.run([sys.executable, "-c", entry, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """most_popular, EASE and an LRR grid, two seeds, through the real commands."""
    root = tmp_path_factory.mktemp("comparison")
    first = linrec(root, "-m", "model=most_popular,ease", "seed=0,1", *SMALL)
    assert first.returncode == 0, first.stderr
    grid = linrec(root, "-m", "model=lrr", "model.rank=5,10", "model.lam=1,100", "seed=0,1",
                  *SMALL)
    assert grid.returncode == 0, grid.stderr
    report = linrec(root, "multirun", "--out", "report", command="report")
    assert report.returncode == 0, report.stderr
    return root


def _records(root: Path) -> list[tuple[Path, dict]]:
    return [(p.parent, json.loads(p.read_text()))
            for p in sorted((root / "multirun").rglob("results.json"))]


def _csv_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def test_the_comparison_is_the_best_configuration_on_validation_shown_on_test(comparison):
    records = _records(comparison)
    by_model: dict[str, dict[str, list]] = {}
    for run_dir, rec in records:
        config = {k: v for k, v in rec["config"]["model"].items() if k != "seed"}
        key = json.dumps(config, sort_keys=True)
        by_model.setdefault(rec["model"], {}).setdefault(key, []).append((run_dir, rec))
    rows = {r["model"]: r for r in _csv_rows(comparison / "report" / "comparison_test.csv")}
    assert set(rows) == {"most_popular", "ease", "lrr"}
    for model, configs in by_model.items():
        best = max(configs.values(), key=lambda runs: np.mean(
            [r["selection"]["value"] for _, r in runs]))
        assert best[0][1]["selection"]["split"] == "valid"
        row = rows[model]
        assert int(row["seeds"]) == len(best) == 2
        assert float(row["ndcg@100 (valid)"]) == pytest.approx(
            np.mean([r["selection"]["value"] for _, r in best]), abs=5e-5)
        for metric in ("recall@20", "ndcg@20", "ndcg@100", "auc"):
            values = [r["splits"]["test"]["exact"][metric] for _, r in best]
            assert float(row[f"{metric} (test)"]) == pytest.approx(np.mean(values), abs=5e-5)
            assert float(row[f"{metric} (test) std"]) == pytest.approx(
                np.std(values, ddof=1), abs=5e-5)
        if model == "lrr":
            chosen = best[0][1]["config"]["model"]
            assert f"lam={chosen['lam']:g}" in row["configuration"]
            assert "best of 4" in row["configuration"]


def test_significance_equals_scipy_with_holm(comparison):
    """Per-user values from the ranks, averaged over the two seeds, tested with scipy; Holm by
    hand over the two models compared with most_popular."""
    records = _records(comparison)
    rows = {r["model"]: r for r in _csv_rows(comparison / "report" / "comparison_test.csv")}

    def chosen_runs(model):
        runs = [(d, r) for d, r in records if r["model"] == model]
        if model == "lrr":  # "lam=100, rank=10 (best of 4)"
            setting = dict(kv.split("=") for kv in
                           rows["lrr"]["configuration"].split(" (")[0].split(", "))
            runs = [r for r in runs if f"{r[1]['config']['model']['lam']:g}" == setting["lam"]
                    and str(r[1]["config"]["model"]["rank"]) == setting["rank"]]
        return [d for d, _ in runs]

    def per_user(model, metric):
        values = []
        for run in chosen_runs(model):
            name, k = metric.split("@")
            result = exact_metrics(RankTable.load_npz(run / "ranks.npz"), [int(k)], [name])
            values.append(result.per_user[metric])
        return np.mean(values, axis=0)

    table = _csv_rows(comparison / "report" / "significance_test.csv")
    for metric in ("recall@20", "ndcg@100"):
        base = per_user("most_popular", metric)
        raw = {}
        for model in ("ease", "lrr"):
            x = per_user(model, metric)
            raw[model] = (stats.ttest_rel(x, base).pvalue,
                          stats.wilcoxon(x, base, zero_method="wilcox").pvalue)
        for i, test in enumerate(("paired_t", "wilcoxon")):
            ps = sorted((raw[m][i], m) for m in raw)
            adjusted, running = {}, 0.0
            for j, (p, m) in enumerate(ps):
                running = max(running, min(1.0, p * (len(ps) - j)))
                adjusted[m] = running
            for model in raw:
                (got,) = [float(r["p_holm"]) for r in table if r["model"] == model
                          and r["metric"] == metric and r["test"] == test]
                assert got == pytest.approx(adjusted[model], rel=1e-9, abs=1e-300)


def test_every_run_is_in_the_tidy_table_and_the_markdown_names_its_split(comparison):
    records = _records(comparison)
    tidy = _csv_rows(comparison / "report" / "report_test.csv")
    assert len(tidy) == len(records) == 12
    by_run = {Path(r["run"]).resolve(): r for r in tidy}
    for run_dir, rec in records:
        row = by_run[run_dir.resolve()]
        assert row["status"] == "complete"
        assert float(row["selection_value"]) == pytest.approx(rec["selection"]["value"])
        assert float(row["ndcg@20"]) == pytest.approx(rec["splits"]["test"]["exact"]["ndcg@20"])
    md = (comparison / "report" / "report_test.md").read_text()
    assert "test metrics (selection: ndcg@100 on valid)" in md
    assert "recall@20 (test)" in md and "ndcg@100 (valid)" in md


def test_a_valid_report_writes_its_own_files(comparison, tmp_path):
    before = (comparison / "report" / "report_test.md").read_text()
    report = build_report([comparison / "multirun"], split="valid",
                          out=comparison / "report", figures=False)
    assert (comparison / "report" / "report_valid.md").exists()
    assert (comparison / "report" / "report_test.md").read_text() == before
    assert "valid metrics" in report.markdown


def test_figures_are_rendered_and_not_blank(comparison):
    from PIL import Image

    figures = sorted((comparison / "report" / "figures").glob("*.png"))
    names = {p.name for p in figures}
    assert any("_vs_k_" in n for n in names) and any(n.endswith("_lrr_grid.png") for n in names)
    run_figures = sorted((comparison / "multirun").rglob("sampled_*_test.png"))
    assert run_figures and sorted((comparison / "multirun").rglob("estimator_error_*.png"))
    for path in [*figures, *run_figures[:2]]:
        assert path.stat().st_size > 5000 and path.with_suffix(".pdf").stat().st_size > 1000
        pixels = np.asarray(Image.open(path).convert("L"), dtype=np.float64)
        assert pixels.std() > 10 and (pixels < 128).mean() > 0.005  # drawn, not blank
    page = (comparison / "report" / "report_test.html").read_text()
    assert page.count("data:image/png;base64,") == len(figures)


def test_failed_and_half_written_runs_are_listed_and_datasets_kept_apart(tmp_path):
    ok = linrec(tmp_path, "-m", "model=most_popular,ease", *SMALL)
    assert ok.returncode == 0
    other = linrec(tmp_path, "-m", "model=most_popular,ease", "data.source.n_items=120",
                   *SMALL[:1], *SMALL[2:])
    assert other.returncode == 0
    failed = linrec(tmp_path, "-m", "model.lam=-1", *SMALL)
    assert failed.returncode == 2
    half = tmp_path / "multirun" / "killed" / "model.lam=3"
    (half / ".hydra").mkdir(parents=True)
    (half / ".hydra" / "overrides.yaml").write_text("- model.lam=3\n")
    report = build_report([tmp_path / "multirun"], out=tmp_path / "report", figures=False)
    assert report.n_problems == 2
    md = report.markdown
    assert "2 run(s) without results" in md and "model.lam=-1" in md and "model.lam=3" in md
    assert "is out of range" in md and "interrupted or still running" in md
    assert "2 different datasets or split protocols" in md
    assert md.count("best configuration per model") == 2


def test_clear_errors():
    from linrec.errors import ConfigError, DataError

    with pytest.raises(DataError, match="no such directory"):
        build_report(["/nonexistent/runs"])
    with pytest.raises(ConfigError, match="--split='train' is not allowed"):
        build_report(["."], split="train")


def test_report_of_an_empty_directory_is_a_clear_error(tmp_path):
    proc = linrec(tmp_path, str(tmp_path), command="report")
    assert proc.returncode == 2 and "no runs below" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_formats_render_bold_std_and_marks():
    table = Table("A & B", ["model", "ndcg@10"],
                  [["x_1", Num(0.5, 0.01, bold=True, marks="*†")], ["y", Num(float("nan"))]],
                  ["p < 0.05"])
    md = markdown(table)
    assert "| x_1 | **0.5000** ± 0.0100\\*† |" in md and "| y |  |" in md
    tex = latex(table)
    assert r"\toprule" in tex and r"\textbf{0.5000} $\pm$ 0.0100$^{*\dagger}$" in tex
    assert r"A \& B" in tex and r"x\_1" in tex and r"p $<$ 0.05" in tex


@pytest.mark.slow
def test_every_study_preset_through_the_commands_and_its_report(tmp_path):
    """experiment=sampling_study, linear_models and loss_study (small settings) through
    `linrec`, then `linrec-report` over all three: every study run is a row of the tidy table
    with its results.json numbers, and each study's tables are in the report."""
    small = ["data.source.n_users=400", "data.source.n_items=150", "quiet=true"]
    studies = {
        "sampling_study": ["experiment=sampling_study", *small, "~study.models",
                           "+study.models={pop: {name: most_popular}, "
                           "ease: {name: ease, lam: 50.0}}",
                           "eval.sampled.sample_sizes=[20]", "eval.sampled.adaptive.n0=10",
                           "eval.sampled.adaptive.n_max=40", "eval.sampled.repeats=3",
                           "eval.sampled.k_max=10", "eval.sampled.estimators=[naive,bv,mle]",
                           "study.winner_ks=[5,10]", "study.mappings=[linear,bound]",
                           "study.mapping_ks=[1,5,10]"],
        "linear_models": ["experiment=linear_models", "data=synthetic", *small,
                          "data.split.n_valid_users=60", "data.split.n_test_users=60",
                          "~study.models", "+study.models={ease: {model: ease, grid: "
                          "{lam: [5.0, 50.0]}}, lrr: {model: lrr, grid: {rank: [10, 20], "
                          "lam: [10.0, 100.0]}}}"],
        "loss_study": ["experiment=loss_study", "quiet=true", "model.epochs=2",
                       "model.sampling.n_negatives=20", "model.sampling.n_positives=4",
                       "~study.datasets", "+study.datasets={small: {source: {name: synthetic, "
                       "n_users: 200, n_items: 80, mean_user_interactions: 12.0}, split: "
                       "{kind: holdout, valid_fraction: 0.15}}}"],
    }
    for name, args in studies.items():
        proc = linrec(tmp_path, f"hydra.run.dir=studies/{name}", *args)
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
    report = linrec(tmp_path, "studies", "--out", "report", "--no-figures", command="report")
    assert report.returncode == 0, report.stderr
    tidy = {str(Path(r["run"]).resolve()): r
            for r in _csv_rows(tmp_path / "report" / "report_test.csv")}
    runs = sorted((tmp_path / "studies").rglob("results.json"))
    assert len(runs) == len(tidy) and len(runs) == 2 + 6 + 8
    for path in runs:
        rec = json.loads(path.read_text())
        row = tidy[str(path.parent.resolve())]
        assert row["study"] == rec["study"]["name"] and row["label"] == rec["study"]["label"]
        for key, value in (rec["splits"].get("test") or {}).get("exact", {}).items():
            assert float(row[key]) == pytest.approx(value, rel=1e-12), (path, key)
    md = (tmp_path / "report" / "report_test.md").read_text()
    for name in studies:
        index = json.loads((tmp_path / "studies" / name / "study.json").read_text())
        assert f"## Study {name}" in md
        for table in index["tables"]:
            assert (tmp_path / "studies" / name / table).read_text() in md
