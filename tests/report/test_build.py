"""linrec.report.build end to end through the real commands: every number of every table the
report writes (Markdown, CSV, LaTeX, HTML) recomputed from the runs' results.json, significance
against scipy, the protocol (best on validation, shown on test), per-split files, failed and
half-written runs listed, datasets never mixed, and every study preset over two seeds."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from linrec.eval.metrics import exact_metrics
from linrec.eval.ranks import RankTable
from linrec.report import build_report
from linrec.report._format import format_number
from tests.report.conftest import SMALL, linrec
from tests.report.expected import check_report, load_records, same_tables
from tests.report.tables import html_tables, latex_tables, markdown_tables


def _csv_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def _records(root: Path) -> list[tuple[Path, dict]]:
    return [(p.parent, json.loads(p.read_text()))
            for p in sorted((root / "multirun").rglob("results.json"))]


def test_every_number_of_every_table_is_the_runs(comparison):
    """The comparison (Markdown, CSV, LaTeX, HTML) and every-run tables (Markdown, HTML), each
    cell recomputed from results.json: the best configuration on validation, mean ± std over
    the two seeds, bold per column; the tidy CSV holds every run's numbers exactly."""
    tables = check_report(comparison / "report", [comparison / "multirun"])
    titles = [t[0] for t in tables["md"]]
    assert titles == ["synthetic: best configuration per model (on valid), test metrics",
                      "synthetic: difference from most_popular, test metrics",
                      "synthetic: every run, test metrics (selection: ndcg@100 on valid)"]
    (_, columns, rows), _, _ = tables["md"]
    assert [r[0].text for r in rows] == ["ease", "lrr", "most_popular"]
    assert columns[3:] == ["selection: ndcg@100 (valid)", "recall@20 (test)", "recall@50 (test)",
                           "ndcg@20 (test)", "ndcg@100 (test)", "recall_trunc@20 (test)",
                           "auc (test)"]
    records = _records(comparison)
    tidy = _csv_rows(comparison / "report" / "report_test.csv")
    assert len(tidy) == len(records) == 12
    by_run = {Path(r["run"]).resolve(): r for r in tidy}
    for run_dir, rec in records:
        row = by_run[run_dir.resolve()]
        assert row["status"] == "complete" and row["model"] == rec["model"]
        assert float(row["selection_value"]) == rec["selection"]["value"]
        for metric, value in rec["splits"]["test"]["exact"].items():
            assert float(row[metric]) == value, metric


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


def test_differences_are_the_per_user_means_with_their_bootstrap_interval(comparison):
    """effects_test.csv and the difference table: per model the mean over users of its
    per-user value (averaged over the chosen seeds, from the ranks) minus most_popular's, and
    the percentile interval of 1 000 resamples of the users (seed 0) written out here."""
    records = _records(comparison)
    rows = {r["model"]: r for r in _csv_rows(comparison / "report" / "comparison_test.csv")}
    effects = _csv_rows(comparison / "report" / "effects_test.csv")
    assert {(r["model"], r["baseline"]) for r in effects} == {("ease", "most_popular"),
                                                               ("lrr", "most_popular")}

    def per_user(model, metric):
        runs = [d for d, r in records if r["model"] == model]
        if model == "lrr":
            setting = dict(kv.split("=") for kv in
                           rows["lrr"]["configuration"].split(" (")[0].split(", "))
            runs = [d for d, r in records if r["model"] == "lrr"
                    and f"{r['config']['model']['lam']:g}" == setting["lam"]
                    and str(r["config"]["model"]["rank"]) == setting["rank"]]
        name, _, k = metric.partition("@")  # auc has no K
        return np.mean([exact_metrics(RankTable.load_npz(run / "ranks.npz"), [int(k or 1)],
                                      [name]).per_user[metric] for run in runs], axis=0)

    table = (comparison / "report" / "comparison_test.md").read_text()
    for row in effects:
        diff = per_user(row["model"], row["metric"]) - per_user("most_popular", row["metric"])
        draws = np.random.default_rng(0).integers(0, diff.size, (1000, diff.size))
        low, high = np.quantile(diff[draws].mean(1), [0.025, 0.975])
        assert float(row["difference"]) == pytest.approx(diff.mean(), rel=1e-12, abs=1e-15)
        assert (float(row["low"]), float(row["high"])) == pytest.approx((low, high), rel=1e-12)
        assert float(row["confidence"]) == 0.95 and int(row["users"]) == diff.size
        shown = f"{diff.mean():+.4f} [{low:+.4f}, {high:+.4f}]"
        assert shown in table, (row["model"], row["metric"], shown)


def test_a_valid_report_writes_its_own_files(comparison, tmp_path):
    """--split valid: its own tables and figures (every name ends in _valid), the test files
    untouched, every number the runs' valid metrics."""
    out = comparison / "report"
    before = {p.name: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    report = build_report([comparison / "multirun"], split="valid", out=out)
    after = {p.name: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert all(after[name] == stamp for name, stamp in before.items())  # nothing overwritten
    new = set(after) - set(before)
    assert {p.name for p in report.files} == new
    assert all(Path(name).stem.endswith("_valid") for name in new)
    assert any(name.endswith("_grid_valid.pdf") for name in new)
    tables = check_report(out, [comparison / "multirun"], split="valid")
    assert tables["md"][0][0].endswith("(on valid), valid metrics")


def test_failed_and_half_written_runs_are_listed_and_datasets_kept_apart(tmp_path):
    ok = linrec(tmp_path, "-m", "model=most_popular,ease", *SMALL)
    assert ok.returncode == 0
    other = linrec(tmp_path, "-m", "model=most_popular,ease", "data.source.n_items=120",
                   *SMALL[:1], *SMALL[2:])
    assert other.returncode == 0
    # a job that fails while it runs (its rank exceeds the catalogue), beside one that completes
    failed = linrec(tmp_path, "-m", "model=lrr", "model.rank=10,1000", *SMALL)
    assert failed.returncode == 2
    half = tmp_path / "multirun" / "killed" / "model.lam=3"
    (half / ".hydra").mkdir(parents=True)
    (half / ".hydra" / "overrides.yaml").write_text("- model.lam=3\n")
    report = build_report([tmp_path / "multirun"], out=tmp_path / "report", figures=False)
    assert report.n_problems == 2
    md = report.markdown
    assert "2 run(s) without results" in md and "model.rank=1000" in md and "model.lam=3" in md
    assert "exceeds n_items=150" in md and "interrupted or still running" in md
    assert "2 different datasets or split protocols" in md
    assert md.count("best configuration per model") == 2
    check_report(tmp_path / "report", [tmp_path / "multirun"])


def test_clear_errors():
    from linrec.errors import ConfigError, DataError

    with pytest.raises(DataError, match="no such directory"):
        build_report(["/nonexistent/runs"])
    with pytest.raises(ConfigError, match="--split='train' is not allowed"):
        build_report(["."], split="train")
    with pytest.raises(ConfigError, match="--alpha=1.5 is out of range"):
        build_report(["."], alpha=1.5)
    with pytest.raises(ConfigError, match="--bootstrap=-1 is out of range"):
        build_report(["."], bootstrap=-1)


def test_report_of_an_empty_directory_is_a_clear_error(tmp_path):
    proc = linrec(tmp_path, str(tmp_path), command="report")
    assert proc.returncode == 2 and "no runs below" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- the studies --------------------------------------------------------------------------------


def _shown(text: str) -> str:
    """A CSV cell as a table shows it: numbers by the one formatter, text as written."""
    for kind in (int, float):
        try:
            return format_number(kind(text))
        except ValueError:
            continue
    return text


def _study_tables(studies: Path) -> dict[Path, list]:
    """study directory -> its tables as it wrote them (Markdown title, CSV cells)."""
    out = {}
    for index_path in sorted((studies / "studies").rglob("study.json")):
        index = json.loads(index_path.read_text())
        tables = []
        for table in index["tables"]:
            md = (index_path.parent / table).read_text()
            rows = list(csv.reader(io.StringIO(
                (index_path.parent / table).with_suffix(".csv").read_text())))
            tables.append((md.splitlines()[0].removeprefix("### "), rows[0],
                           [[_shown(c) for c in row] for row in rows[1:]]))
        out[index_path.parent] = tables
    return out


def test_every_study_preset_through_the_commands_and_its_report(studies):
    """experiment=sampling_study, linear_models and loss_study over two seeds through `linrec
    -m`, then `linrec-report` over all three: every study run's numbers in the comparison and
    every-run tables (all formats) recomputed from its results.json; each study's tables in the
    Markdown, the HTML (as tables) and the LaTeX with the study's own cells."""
    root = studies / "studies"
    out = studies / "report"
    tables = check_report(out, [root])
    runs = load_records(root)
    assert len(runs) == 2 * (2 + 6 + 2)
    tidy = {Path(r["run"]).resolve(): r for r in _csv_rows(out / "report_test.csv")}
    assert set(tidy) == set(runs)
    for run, rec in runs.items():
        row = tidy[run]
        assert row["study"] == rec["study"]["name"] and row["label"] == rec["study"]["label"]
        for key, value in (rec["splits"].get("test") or {}).get("exact", {}).items():
            assert float(row[key]) == value, (run, key)
    # the studies' own tables: Markdown as written, HTML and LaTeX with the same cells
    md = (out / "report_test.md").read_text()
    written = _study_tables(studies)
    assert len(written) == 6
    study_md = [t for t in tables["md"] if not (": best configuration" in t[0]
                                                 or ": every run" in t[0]
                                                 or ": difference from " in t[0])]
    expected = [table for directory in sorted(written) for table in written[directory]]
    assert [(t, c, [[x.text for x in r] for r in rows]) for t, c, rows in study_md] == expected
    same_tables(study_md, [t for t in html_tables((out / "report_test.html").read_text())
                           if t[0] in {s[0] for s in study_md}], "html")
    same_tables(study_md, latex_tables((out / "ablations_test.tex").read_text()), "tex")
    for directory in written:
        assert f"## Study {directory.parent.name} ({directory})" in md
        for table in json.loads((directory / "study.json").read_text())["tables"]:
            assert (directory / table).read_text() in md
    _check_study_numbers(root, {t[0]: t for t in tables["md"]}, study_md)


def _check_study_numbers(root: Path, by_title: dict, study_md: list) -> None:
    """The ablation tables the report shows against the study runs' results.json: the
    sampling study's ARE (mean ± std over repeats), Table 12 (test metrics and selection value
    in %), the linear-model main table (the chosen point's valid and test metrics)."""
    for seed in (0, 1):
        base = root / "sampling_study" / f"seed={seed}"
        title = "Average relative error (%) over K=1..10, test split, n=20, 3 repeats"
        (_, columns, rows), *_ = [t for t in markdown_tables(
            (base / "tables" / "are_n20.md").read_text()) if t[0] == title]
        assert title in by_title
        for row in rows:
            cells = dict(zip(columns, (c.text for c in row), strict=True))
            rec = json.loads((base / "runs" / cells["model"] / "results.json").read_text())
            block = rec["splits"]["test"]["sampled"]["n=20"]["estimators"]
            for name in ("naive", "bv", "mle"):
                are = block[name]["are"][cells["metric"]]
                assert cells[name] == f"{are['mean']:.2f}±{are['std']:.2f}"
        loss = root / "loss_study" / f"seed={seed}"
        (_, columns, rows), = markdown_tables((loss / "tables" / "table12.md").read_text())
        for row in rows[:2]:
            cells = dict(zip(columns, (c.text for c in row), strict=True))
            label = {"biased": "ccl", "debiased": "debiased_ccl"}[cells["Row"]]
            rec = json.loads((loss / "runs" / "small" / label / "results.json").read_text())
            for metric in ("recall@20", "ndcg@20"):
                assert float(cells[f"small {metric}"]) == pytest.approx(
                    100 * rec["splits"]["test"]["exact"][metric], abs=5e-5)
            assert float(cells["small recall@20 (valid)"]) == pytest.approx(
                100 * rec["selection"]["value"], abs=5e-5)
        linear = root / "linear_models" / f"seed={seed}"
        (_, columns, rows), = [t for t in markdown_tables(
            (linear / "tables" / "main.md").read_text())]
        for row in rows:
            cells = dict(zip(columns, (c.text for c in row), strict=True))
            point = cells["params"].replace(", ", ",")
            rec = json.loads((linear / "runs" / cells["model"] / point / "results.json")
                             .read_text())
            assert float(cells["valid ndcg@100"]) == pytest.approx(
                rec["splits"]["valid"]["exact"]["ndcg@100"], abs=5e-5)
            for key in ("recall_trunc@20", "recall_trunc@50", "ndcg@100"):
                assert float(cells[f"test {key}"]) == pytest.approx(
                    rec["splits"]["test"]["exact"][key], abs=5e-5)
    assert study_md


def test_the_baseline_can_be_one_configuration_of_a_sweep(comparison, tmp_path):
    """`--baseline 'lrr rank=5 lam=100'`: that configuration is a row of its own, every other
    model is tested against its runs, and the significance CSV stays one field per column."""
    build_report([comparison / "multirun"], out=tmp_path, baseline="lrr rank=5 lam=100",
                 figures=False)
    rows = list(csv.reader(io.StringIO((tmp_path / "significance_test.csv").read_text())))
    assert rows[0] == ["dataset", "model", "baseline", "metric", "test", "p_holm"]
    assert {len(r) for r in rows} == {6}
    assert {r[2] for r in rows[1:]} == {"lrr [rank=5, lam=100]"}
    assert {r[1] for r in rows[1:]} >= {"ease", "most_popular", "lrr"}
    md = (tmp_path / "comparison_test.md").read_text()
    assert "| lrr [rank=5, lam=100] |" in md and "Against lrr [rank=5, lam=100]" in md
