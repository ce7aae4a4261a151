"""Check the tables a report wrote against the runs' results.json, recomputing every number here
(the protocol of the source papers' tables: per model the configuration with the best mean selection
value, its metrics as mean ± std over seeds), in every format the report writes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from tests.report.tables import (
    Cell,
    Tables,
    csv_tables,
    html_tables,
    latex_tables,
    markdown_tables,
)

#: model fields that do not define a configuration (as linrec.report.runs)
NOT_CONFIGURATION = ("seed", "num_threads", "checkpoint_dir", "resume", "device")
NOT_DATA = ("cache", "cache_dir", "download")


def load_records(*roots: Path) -> dict[Path, dict]:
    """run directory (resolved) -> its results.json record, for every run below roots."""
    return {p.parent.resolve(): json.loads(p.read_text())
            for root in roots for p in sorted(root.rglob("results.json"))}


def model_label(record: dict) -> str:
    loss = record["config"]["model"].get("loss")
    return f"{record['model']}/{loss['name']}" if isinstance(loss, dict) else record["model"]


def configuration(record: dict) -> str:
    model = {k: v for k, v in record["config"]["model"].items() if k not in NOT_CONFIGURATION}
    return json.dumps(model, sort_keys=True)


def data_identity(record: dict) -> str:
    data = {k: v for k, v in record["config"]["data"].items() if k not in NOT_DATA}
    return json.dumps([record["dataset"]["name"], data], sort_keys=True)


def assert_number(cell_text: str, expected: float | None, digits: int = 4, where: str = ""):
    if expected is None or (isinstance(expected, float) and math.isnan(expected)):
        assert cell_text == "", (where, cell_text, expected)
        return
    assert cell_text != "", (where, expected)
    assert abs(float(cell_text) - expected) <= 0.5 * 10 ** -digits + 1e-12, \
        (where, cell_text, expected)


def _metric_of(column: str) -> tuple[str, str]:
    """'ndcg@20 (test)' -> ('ndcg@20', 'test')."""
    name, _, split = column.rpartition(" (")
    return name, split.rstrip(")")


def check_runs_table(title: str, columns: list[str], rows: list[list[Cell]],
                     records: dict[Path, dict], dirs: list[Path], split: str) -> list[Path]:
    """Every cell of a report's every-run table against the run's record; returns the runs."""
    assert columns[0] == "model" and columns[-2:] == ["fit s", "run"], columns
    seed_at = columns.index("seed")
    params = columns[1:seed_at]
    selection, sel_split = _metric_of(columns[seed_at + 1].removeprefix("selection: "))
    assert f"selection: {selection} on {sel_split}" in title and f"{split} metrics" in title
    runs = []
    for row in rows:
        cells = dict(zip(columns, row, strict=True))
        (run,) = [d.resolve() / cells["run"].text for d in dirs
                  if (d.resolve() / cells["run"].text).resolve() in records]
        rec = records[run.resolve()]
        runs.append(run.resolve())
        assert cells["model"].text == model_label(rec)
        assert cells["seed"].text == str(rec["config"]["seed"])
        for param in params:
            value = rec["config"]["model"]
            for key in param.split("."):
                value = value.get(key) if isinstance(value, dict) else None
            shown = "" if value is None else (f"{value:.6g}" if isinstance(value, float)
                                             else str(value))
            assert cells[param].text == shown, (param, cells[param], value)
        assert rec["selection"]["metric"] == selection and rec["selection"]["split"] == sel_split
        assert_number(cells[columns[seed_at + 1]].text, rec["selection"]["value"],
                      where=(run, "selection"))
        for column in columns[seed_at + 2:-2]:
            metric, in_split = _metric_of(column)
            assert in_split == split
            assert_number(cells[column].text, rec["splits"][split]["exact"].get(metric),
                          where=(run, column))
            assert cells[column].std == ""
        assert_number(cells["fit s"].text, rec["timings"]["fit"], digits=2, where=(run, "fit"))
    return runs


def check_comparison_table(title: str, columns: list[str], rows: list[list[Cell]],
                           group: dict[Path, dict], split: str) -> None:
    """Every cell of a comparison table: per model the configuration with the best mean
    selection value among `group` (the dataset's runs), mean ± std (ddof 1) over its seeds,
    bold where the mean is the column's best."""
    assert columns[:3] == ["model", "configuration", "seeds"], columns
    selection, sel_split = _metric_of(columns[3].removeprefix("selection: "))
    assert f"(on {sel_split}), {split} metrics" in title
    by_model: dict[str, dict[str, list[dict]]] = {}
    for rec in group.values():
        by_model.setdefault(model_label(rec), {}).setdefault(configuration(rec), []).append(rec)
    assert sorted(by_model) == [r[0].text for r in rows]  # every model, sorted by name
    chosen = {}
    for model, configs in by_model.items():
        scores = [(np.mean([r["selection"]["value"] for r in recs]), -i)
                  for i, recs in enumerate(configs.values())]
        chosen[model] = list(configs.values())[-max(scores)[1]]
    means = {m: {} for m in chosen}
    for row in rows:
        model = row[0].text
        recs = chosen[model]
        assert row[2].text == str(len(recs))
        configs = by_model[model]
        if len(configs) > 1:
            assert f"(best of {len(configs)})" in row[1].text
            varying = {k for c in configs for k, v in json.loads(c).items()
                       if any(json.loads(o).get(k) != v for o in configs)}
            for key in varying:
                value = recs[0]["config"]["model"][key]
                shown = f"{value:.6g}" if isinstance(value, float) else str(value)
                assert f"{key}={shown}" in row[1].text, (row[1], key, value)
        assert_number(row[3].text, float(np.mean([r["selection"]["value"] for r in recs])),
                      where=(model, "selection"))
        assert {r["selection"]["metric"] for r in recs} == {selection}
        for column, cell in zip(columns[4:], row[4:], strict=True):
            metric, in_split = _metric_of(column)
            assert in_split == split
            values = [r["splits"][split]["exact"][metric] for r in recs]
            means[model][column] = float(np.mean(values))
            assert_number(cell.text, means[model][column], where=(model, column))
            std = float(np.std(values, ddof=1)) if len(values) > 1 else None
            assert_number(cell.std, std, where=(model, column, "std"))
    models = [row[0].text for row in rows]
    for i, column in enumerate(columns[4:], start=4):
        finite = [m for m in models if not math.isnan(means[m][column])]
        best = max(finite, key=lambda m: means[m][column]) if finite else None  # ties: first
        for row in rows:
            assert row[i].bold == (row[0].text == best), (column, row[0].text)


def same_tables(expected: Tables, other: Tables, what: str) -> None:
    """`other` (one format) holds exactly the tables and cells of `expected`, in order."""
    assert [t[0] for t in other] == [t[0] for t in expected], what
    for (title, columns, rows), (_, other_columns, other_rows) in zip(expected, other,
                                                                      strict=True):
        assert other_columns == columns, (what, title, other_columns, columns)
        assert len(other_rows) == len(rows), (what, title)
        for a, b in zip(rows, other_rows, strict=True):
            assert [(c.text, c.std) for c in a] == [(c.text, c.std) for c in b], (what, title)
            if what != "csv":  # CSV has no bold
                assert [c.bold for c in a] == [c.bold for c in b], (what, title)


def check_report(out: Path, dirs: list[Path], split: str = "test") -> dict[str, Tables]:
    """Every table of the report in <out> against the runs below dirs, in every format:
    report_<split>.md and .html (comparison, every-run, problem and study tables, the same
    cells), comparison_<split>.md, .csv and .tex; the comparison and every-run tables
    recomputed from the runs' results.json. Returns the parsed tables by format."""
    records = load_records(*dirs)
    md = markdown_tables((out / f"report_{split}.md").read_text())
    page = html_tables((out / f"report_{split}.html").read_text())
    same_tables(md, page, "html")
    comparisons = [t for t in md if ": best configuration per model" in t[0]]
    assert comparisons, "no comparison table"
    # the Markdown and LaTeX files hold each comparison and, after it, its differences from the
    # baseline (effects_<split>.csv holds those as numbers)
    compared = [t for t in md if ": best configuration per model" in t[0]
                or ": difference from " in t[0]]
    same_tables(compared, markdown_tables((out / f"comparison_{split}.md").read_text()), "md")
    same_tables(compared, latex_tables((out / f"comparison_{split}.tex").read_text()), "tex")
    same_tables(comparisons, csv_tables((out / f"comparison_{split}.csv").read_text(),
                                        [t[0] for t in comparisons]), "csv")
    # every run with the split is in exactly one every-run table; one dataset per table
    listed: list[Path] = []
    by_title = {t[0]: t for t in md}
    for title, columns, rows in comparisons:
        dataset = title.split(": best configuration per model")[0]
        (runs_title,) = [t for t in by_title if t.startswith(f"{dataset}: every run")]
        runs = check_runs_table(*by_title[runs_title], records, dirs, split)
        group = {r: records[r] for r in runs}
        assert len({data_identity(rec) for rec in group.values()}) == 1
        check_comparison_table(title, columns, rows, group, split)
        listed += runs
    assert sorted(listed) == sorted(r for r, rec in records.items() if split in rec["splits"])
    return {"md": md, "html": page}
