"""`linrec-report`: every run and study below some directories, as tables a researcher can hand
in (linrec/report/runs.py reads, compare.py chooses and tests, render.py writes).

Per dataset (runs on different datasets or split protocols are never mixed in one table):
- every run: its swept settings, seed, validation selection value and the reported split's
  metrics;
- the comparison: per model the configuration best on validation, the reported split's metrics
  as mean ± std over seeds, the best value per column in bold, and paired tests against the
  baseline (paired t `*`, Wilcoxon `†`, Holm-corrected);
- figures: the metric against K of each model's chosen configuration, heat maps of two-setting
  grids (the validation metric), training curves of trained models;
- failed and half-written runs, listed with their errors.
Written to <out>/report_<split>.{md,csv,html}, comparison_<split>.{md,csv,tex} and
significance_<split>.csv (every Holm-adjusted p-value), figures in <out>/figures/ (PNG and PDF);
the tables of every study found are appended. The tidy CSV has one row per run directory.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from linrec.errors import ConfigError
from linrec.report.compare import MARKERS, add_significance, best_configurations, best_per_metric
from linrec.report.render import Num, Table, csv_text, html_page, latex, markdown
from linrec.report.runs import Runs, metric_columns, read_runs, varying_params

DEFAULT_METRICS = ("recall@20", "recall@50", "ndcg@20", "ndcg@100", "recall_trunc@20", "auc")
DEFAULT_BASELINE = "most_popular"


@dataclass
class ReportFiles:
    """What a report wrote, and its Markdown (also printed by the command)."""

    markdown: str
    files: list[Path]
    n_runs: int
    n_problems: int


def _short(param: str) -> str:
    return param.removeprefix("param.")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "data"


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _relative(run: str, dirs: Sequence[Path]) -> str:
    """A run directory relative to the searched directory that holds it."""
    for d in dirs:
        try:
            return str(Path(run).relative_to(d)) or "."
        except ValueError:
            continue
    return run


def _runs_table(group: Any, split: str, metrics: list[str], params: list[str],
                dataset: str, dirs: Sequence[Path]) -> Table:
    selection = group["selection_metric"].dropna()
    sel = selection.iloc[0] if len(selection) else "selection"
    sel_split = group["selection_split"].dropna()
    sel_split = sel_split.iloc[0] if len(sel_split) else "valid"
    columns = ["model", *[_short(p) for p in params], "seed", f"{sel} ({sel_split})",
               *[f"{m} ({split})" for m in metrics], "fit s", "run"]
    rows = []
    for _, r in group.sort_values(["model", *params, "seed"], na_position="last").iterrows():
        rows.append([r["model"], *[_fmt(r.get(p)) for p in params], _fmt(r["seed"]),
                     Num(r["selection_value"]), *[Num(r.get(m)) for m in metrics],
                     Num(r.get("fit_s"), digits=2), _relative(r["run"], dirs)])
    notes = []
    if (group["selection_split"] == "test").any():
        notes.append("Some runs selected on the test split (no validation split): their "
                     "selection value is a test metric, not an honest model choice.")
    return Table(f"{dataset}: every run, {split} metrics (selection: {sel} on {sel_split})",
                 columns, rows, notes)


def _comparison_table(results: list, split: str, metrics: list[str], dataset: str,
                      baseline: str, alpha: float, note: str | None) -> Table:
    best = best_per_metric(results, metrics)
    sel_metric = next((r.selection_metric for r in results if r.selection_metric), "selection")
    sel_split = next((r.selection_split for r in results if r.selection_split), "valid")
    columns = ["model", "configuration", "seeds", f"{sel_metric} ({sel_split})",
               *[f"{m} ({split})" for m in metrics]]
    rows = []
    for r in results:
        config = ", ".join(f"{_short(k)}={_fmt(v)}" for k, v in r.params.items()
                           if _fmt(v) != "")
        if r.n_configurations > 1:
            config = f"{config} (best of {r.n_configurations})" if config else \
                f"best of {r.n_configurations}"
        rows.append([r.model, config, len(r.runs), Num(r.selection),
                     *[Num(r.means[m], r.stds[m], bold=best.get(m) == r.model,
                           marks=r.marks(m, alpha)) for m in metrics]])
    n_seeds = sorted({len(r.runs) for r in results})
    notes = [f"Per model the configuration with the best mean {sel_metric} on {sel_split}; "
             f"{split} metrics as mean ± std over {'/'.join(map(str, n_seeds))} seed(s); "
             "bold: best per column."]
    if note:
        notes.append(note.capitalize() + ".")
    else:
        legend = ", ".join(f"{mark} {test.replace('_', ' ')}" for test, mark in MARKERS)
        notes.append(f"Against {baseline}, per-user paired tests, Holm-corrected over the "
                     f"models, p < {alpha}: {legend}.")
    for r in results:
        if r.note:
            notes.append(f"{r.model}: {r.note}.")
    if sel_split == "test":
        notes.append("Selected on the test split (the data has no validation split; the "
                     "published LightGCN/BARS protocol): an optimistic choice.")
    title = f"{dataset}: best configuration per model (on {sel_split}), {split} metrics"
    return Table(title, columns, rows, notes)


def _figures(group: Any, results: list, split: str, metrics: list[str], out: Path,
             dataset: str) -> list[Path]:
    """Metric against K per model, grid heat maps, training curves (PNG and PDF)."""
    import json

    import numpy as np

    from linrec.plots import plot_heatmap, plot_training_curve, save_figure_formats

    written: list[Path] = []
    figures = out / "figures"
    stem = _slug(dataset)
    # the metric family of the selection (or the first metric) against every K reported
    family = None
    for r in results:
        if r.selection_metric:
            family = r.selection_metric.split("@")[0]
            break
    family = family or (metrics[0].split("@")[0] if metrics else None)
    columns = [c for c in metric_columns(group) if c.startswith(f"{family}@")]
    if family and columns:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        ks = sorted(int(c.split("@")[1]) for c in columns)
        fig = Figure(figsize=(6.4, 4.0))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for r in results:
            rows = group[group["run"].isin(r.runs)]
            ax.plot(ks, [float(np.nanmean(rows[f"{family}@{k}"])) for k in ks], marker=".",
                    label=r.model)
        ax.set_xscale("log")
        ax.set_xlabel("K")
        ax.set_ylabel(f"{family}@K ({split})")
        ax.set_title(f"{dataset}: {family}@K of each model's chosen configuration")
        ax.legend(frameon=False, fontsize="small")
        ax.grid(alpha=0.3, which="both")
        written += save_figure_formats(fig, figures / f"{stem}_{family}_vs_k_{split}")
    # two-setting grids of one model: the validation selection value as a heat map
    for model, rows in group.groupby("model"):
        params = [p for p in varying_params(rows)
                  if rows[p].dropna().map(lambda v: isinstance(v, (int, float))).all()]
        if len(params) != 2:
            continue
        grid = rows.groupby(params)["selection_value"].mean()
        first = sorted(rows[params[0]].dropna().unique())
        second = sorted(rows[params[1]].dropna().unique())
        values = np.full((len(first), len(second)), np.nan)
        for (a, b), v in grid.items():
            values[first.index(a), second.index(b)] = v
        fig = plot_heatmap(values, first, second, _short(params[0]), _short(params[1]),
                           title=f"{model}: validation selection metric")
        written += save_figure_formats(fig, figures / f"{stem}_{_slug(str(model))}_grid")
    # training curves of the chosen configurations of trained models (their first seed)
    for r in results:
        path = Path(r.runs[0]) / "results.json"
        epochs = (json.loads(path.read_text()).get("training") or {}).get("epochs")
        if epochs:
            fig = plot_training_curve(epochs, title=f"{r.model} ({dataset})")
            written += save_figure_formats(
                fig, figures / f"{stem}_{_slug(r.model)}_training")
    return written


def _problems_table(runs: Runs) -> Table | None:
    bad = runs.not_complete
    if bad.empty:
        return None
    rows = [[r["status"], r.get("label") or "", (r.get("error") or "").splitlines()[0][:200],
             r["run"]] for _, r in bad.iterrows()]
    return Table(f"{len(rows)} run(s) without results (listed, not dropped)",
                 ["status", "job", "error", "run"], rows)


def build_report(dirs: Sequence[str | Path], split: str = "test", out: str | Path | None = None,
                 metrics: Sequence[str] | None = None, baseline: str = DEFAULT_BASELINE,
                 alpha: float = 0.05, figures: bool = True) -> ReportFiles:
    """Read, compare and write (module docstring). `metrics`: the metric columns of the tables
    (default DEFAULT_METRICS, those that were computed); the tidy CSV keeps every column."""
    from linrec.atomic import write_text_atomic
    from linrec.results import find_studies, read_results

    if split not in ("test", "valid"):
        raise ConfigError(f"--split={split!r} is not allowed; allowed: test, valid")
    if not 0 < alpha < 1:
        raise ConfigError(f"--alpha={alpha} is out of range; allowed: a number > 0 and < 1")
    runs = read_runs(dirs, split)
    first = Path(dirs[0])
    out = Path(out) if out else (first.parent if first.is_file() else first)
    complete = runs.complete
    wanted = list(metrics) if metrics else list(DEFAULT_METRICS)
    present = metric_columns(complete)
    chosen = [m for m in wanted if m in present]
    unknown = [m for m in (metrics or []) if m not in present]
    if unknown:
        raise ConfigError(f"--metrics {unknown} are not in the runs' {split} metrics; present: "
                          f"{', '.join(present) or 'none'}")
    if not chosen:
        chosen = present[:6]
    md_parts = [f"# linrec report: {split} split\n",
                f"{len(complete)} complete run(s), {len(runs.not_complete)} without results, "
                f"below {', '.join(map(str, runs.dirs))}.\n"]
    comparison_parts: dict[str, list[Table]] = {"all": []}
    significance_rows = ["dataset,model,baseline,metric,test,p_holm"]
    sections = []
    files: list[Path] = []
    groups = list(complete.groupby("data_key", sort=True)) if not complete.empty else []
    if len(groups) > 1:
        md_parts.append(f"The runs are on {len(groups)} different datasets or split protocols: "
                        "one set of tables each (never compared across).\n")
    for _, group in groups:
        dataset = str(group["dataset"].iloc[0])
        if sum(str(g["dataset"].iloc[0]) == dataset for _, g in groups) > 1:
            dataset = f"{dataset} [{group['data_key'].iloc[0].split(':')[1]}]"
        evaluated = group[group["split"].notna()]
        if evaluated.empty:
            md_parts.append(f"**{dataset}**: no run evaluated the {split} split.\n")
            continue
        params = varying_params(evaluated, by_model=True)
        runs_table = _runs_table(evaluated, split, chosen, params, dataset, runs.dirs)
        results = best_configurations(evaluated, chosen)
        note = add_significance(results, baseline, split, chosen) if len(results) > 1 else \
            "one model only: nothing to compare"
        comparison = _comparison_table(results, split, chosen, dataset, baseline, alpha, note)
        significance_rows += [f"{dataset},{r.model},{baseline},{metric},{test},{p!r}"
                              for r in results for metric, tests in r.pvalues.items()
                              for test, p in tests.items()]
        figs = _figures(evaluated, results, split, chosen, out, dataset) if figures else []
        comparison_parts["all"].append(comparison)
        md_parts += [markdown(comparison), markdown(runs_table)]
        md_parts += [f"![{p.stem}](figures/{p.name})\n" for p in figs if p.suffix == ".png"]
        sections.append((dataset, [comparison, runs_table],
                         [p for p in figs if p.suffix == ".png"]))
        files += figs
    problems = _problems_table(runs)
    if problems is not None:
        md_parts.append(markdown(problems))
        sections.append(("Runs without results", [problems], []))
    study_md = []
    for study_file in find_studies(runs.dirs):
        index = read_results(study_file)
        text = f"## Study {index['study']['name']} ({study_file.parent})\n"
        for table in index.get("tables", []):
            text += "\n" + (study_file.parent / table).read_text()
        study_md.append(text)
    md = "\n".join(md_parts + study_md)
    tidy = runs.frame.to_csv(index=False)
    outputs = {
        out / f"report_{split}.md": md,
        out / f"report_{split}.csv": tidy,
        out / f"report_{split}.html": html_page(f"linrec report: {split} split", sections,
                                                study_md),
        out / f"comparison_{split}.md": "\n".join(markdown(t) for t in comparison_parts["all"]),
        out / f"comparison_{split}.csv": "\n".join(csv_text(t) for t in comparison_parts["all"]),
        out / f"comparison_{split}.tex": "\n".join(latex(t) for t in comparison_parts["all"]),
        out / f"significance_{split}.csv": "\n".join(significance_rows) + "\n",
    }
    for path, text in outputs.items():
        write_text_atomic(path, text)
        files.append(path)
    return ReportFiles(markdown=md, files=files, n_runs=len(complete),
                       n_problems=len(runs.not_complete))


def main(argv: list[str] | None = None) -> int:
    """`linrec-report DIR... [--split test|valid] [--out DIR] [--metrics m@K,...]
    [--baseline MODEL] [--alpha 0.05] [--no-figures]`."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="linrec-report",
        description="Every run (results.json) and study (study.json) below DIRs: per dataset, "
                    "the best configuration per model on validation with significance tests "
                    "against a baseline, every run, figures, and the runs without results.")
    parser.add_argument("dirs", nargs="+", help="run, sweep or study directories")
    parser.add_argument("--split", default="test", help="split whose metrics are shown "
                        "(test or valid); each split writes its own files")
    parser.add_argument("--out", default=None, help="output directory (default: the first DIR)")
    parser.add_argument("--metrics", default=None,
                        help=f"comma-separated metric@K columns (default: those of "
                             f"{','.join(DEFAULT_METRICS)} that were computed)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE,
                        help=f"model the others are tested against (default {DEFAULT_BASELINE};"
                             " with a loss: mf/ccl)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level")
    parser.add_argument("--no-figures", action="store_true", help="tables only")
    args = parser.parse_args(argv)
    metrics = [m.strip() for m in args.metrics.split(",")] if args.metrics else None
    report = build_report(args.dirs, split=args.split, out=args.out, metrics=metrics,
                          baseline=args.baseline, alpha=args.alpha, figures=not args.no_figures)
    print(report.markdown, end="")
    print(f"wrote {len(report.files)} files to {report.files[-1].parent} ({report.n_runs} runs"
          + (f", {report.n_problems} without results" if report.n_problems else "") + ")")
    return 0
