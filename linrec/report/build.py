"""`build_report`: read every run and study below some directories, compare, and write the
report's files (the package docstring lists them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from linrec.errors import ConfigError
from linrec.report._format import fmt_value, format_number, relative_run, short_param
from linrec.report.compare import (
    BOOTSTRAP_RESAMPLES,
    MARKERS,
    add_significance,
    best_configurations,
    best_per_metric,
    configuration_result,
    parse_model_settings,
)
from linrec.report.figures import PublishedPoint, parse_published
from linrec.report.render import Num, Section, Table, csv_text, html_page, latex, markdown
from linrec.report.runs import Runs, metric_columns, read_runs, varying_params
from linrec.report.studies import SPLIT_NOTE, read_studies

DEFAULT_METRICS = ("recall@20", "recall@50", "ndcg@20", "ndcg@100", "recall_trunc@20", "auc")
DEFAULT_BASELINE = "most_popular"
#: the selection column's name starts so (`selection: ndcg@100 (valid)`): it never shares a name
#: with a metric column of the same split
SELECTION_PREFIX = "selection: "


@dataclass
class ReportFiles:
    """What a report wrote, and its Markdown (also printed by the command)."""

    markdown: str
    files: list[Path]
    n_runs: int
    n_problems: int


def runs_table(group: Any, split: str, metrics: list[str], params: list[str],
               dataset: str, dirs: Sequence[Path]) -> Table:
    """Every run of one dataset: its swept settings, seed, selection value (on its split), the
    reported split's metrics, fit seconds and its directory."""
    selection = group["selection_metric"].dropna()
    sel = selection.iloc[0] if len(selection) else "selection"
    sel_split = group["selection_split"].dropna()
    sel_split = sel_split.iloc[0] if len(sel_split) else "valid"
    columns = ["model", *[short_param(p) for p in params], "seed",
               f"{SELECTION_PREFIX}{sel} ({sel_split})",
               *[f"{m} ({split})" for m in metrics], "fit s", "run"]
    rows = []
    for _, r in group.sort_values(["model", *params, "seed"], na_position="last").iterrows():
        rows.append([r["model"], *[fmt_value(r.get(p)) for p in params], fmt_value(r["seed"]),
                     Num(r["selection_value"]), *[Num(r.get(m)) for m in metrics],
                     Num(r.get("fit_s"), digits=2), relative_run(r["run"], dirs)])
    notes = []
    if (group["selection_split"] == "test").any():
        notes.append("Some runs selected on the test split (no validation split): their "
                     "selection value is a test metric, not an honest model choice.")
    return Table(f"{dataset}: every run, {split} metrics (selection: {sel} on {sel_split})",
                 columns, rows, notes)


def comparison_table(results: list, split: str, metrics: list[str], dataset: str,
                     baseline: str, alpha: float, note: str | None) -> Table:
    """Per model its chosen configuration, selection value and the reported split's metrics
    (mean ± std over seeds, best in bold, significance marks)."""
    best = best_per_metric(results, metrics)
    sel_metric = next((r.selection_metric for r in results if r.selection_metric), "selection")
    sel_split = next((r.selection_split for r in results if r.selection_split), "valid")
    columns = ["model", "configuration", "seeds", f"{SELECTION_PREFIX}{sel_metric} ({sel_split})",
               *[f"{m} ({split})" for m in metrics]]
    rows = []
    for r in results:
        config = ", ".join(f"{short_param(k)}={fmt_value(v)}" for k, v in r.params.items()
                           if fmt_value(v) != "")
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
    if any(r.pvalues for r in results):
        legend = ", ".join(f"{mark} {what}" for _, mark, what in MARKERS)
        notes.append(f"Against {baseline}, Holm-corrected over the models, p < {alpha}: "
                     f"{legend}. The tests over users take each user's value averaged over the "
                     "seeds; the test over seeds (where both have two or more) asks whether "
                     "the gap exceeds the run-to-run spread.")
    if note:
        notes.append(note[0].upper() + note[1:] + ".")
    for r in results:
        if r.note:
            notes.append(f"{r.model}: {r.note}.")
    if sel_split == "test":
        notes.append("Selected on the test split (the data has no validation split; the "
                     "published LightGCN/BARS protocol): an optimistic choice.")
    title = f"{dataset}: best configuration per model (on {sel_split}), {split} metrics"
    return Table(title, columns, rows, notes)


def _signed(value: float) -> str:
    return ("+" if value >= 0 else "") + format_number(value)


def effects_table(results: list, split: str, metrics: list[str], dataset: str, baseline: str,
                  alpha: float) -> Table | None:
    """Per model the mean per-user difference from the baseline, with its bootstrap interval
    over the shared users; None when no model has one."""
    tested = [r for r in results if r.effects]
    if not tested:
        return None
    confidence = round(100 * (1 - alpha), 2)
    columns = ["model", "users", *[f"Δ {m} ({split})" for m in metrics]]
    rows = [[r.model, r.n_users, *[
        f"{_signed(e.estimate)} [{_signed(e.low)}, {_signed(e.high)}]"
        if (e := r.effects.get(m)) is not None else "" for m in metrics]] for r in tested]
    notes = [f"Model minus {baseline}, the mean over the users both evaluated, with its "
             f"{confidence:g} % percentile bootstrap interval over those users (the same users "
             "resampled for both models). Unlike the tests, the intervals are not corrected "
             "for the number of models compared."]
    return Table(f"{dataset}: difference from {baseline}, {split} metrics", columns, rows, notes)


def problems_table(runs: Runs) -> Table | None:
    """The failed and half-written runs with the first line of their error; None without."""
    bad = runs.not_complete
    if bad.empty:
        return None
    rows = [[r["status"], r.get("label") or "", (r.get("error") or "").splitlines()[0][:200]
             if r.get("error") else "", r["run"]] for _, r in bad.iterrows()]
    return Table(f"{len(rows)} run(s) without results (listed, not dropped)",
                 ["status", "job", "error", "run"], rows)


def _chosen_metrics(complete: Any, metrics: Sequence[str] | None, split: str) -> list[str]:
    present = metric_columns(complete)
    unknown = [m for m in (metrics or []) if m not in present]
    if unknown:
        raise ConfigError(f"--metrics {unknown} are not in the runs' {split} metrics; present: "
                          f"{', '.join(present) or 'none'}")
    chosen = [m for m in (metrics or DEFAULT_METRICS) if m in present]
    return chosen or present[:6]


def _csv_row(*fields: str) -> str:
    """One CSV line (fields with a comma or a quote quoted)."""
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(fields)
    return buf.getvalue()


@dataclass
class _DatasetPart:
    """The report's part on one dataset and split protocol."""

    comparison: Table
    effects: Table | None
    significance_rows: list[str]
    effect_rows: list[str]
    markdown: str
    section: Section
    published_drawn: list[bool]  # per point of `published`: whether a sweep figure marks it


def _dataset_part(evaluated: Any, dataset: str, dirs: Sequence[Path], split: str,
                  chosen: list[str], baseline: str, alpha: float, bootstrap: int,
                  figures_dir: Path | None,
                  published: Sequence[PublishedPoint] = ()) -> _DatasetPart:
    """The comparison (best configuration per model, significance against the baseline), the
    every-run table and the figures of the runs of one dataset that evaluated `split`."""
    from linrec.report.figures import published_drawn, report_figures

    params = varying_params(evaluated, by_model=True)
    # the metrics these runs computed (another dataset's runs may have computed others)
    shown = [m for m in chosen if evaluated[m].notna().any()] or chosen
    every_run = runs_table(evaluated, split, shown, params, dataset, dirs)
    results = best_configurations(evaluated, shown)
    model, settings = parse_model_settings(baseline)
    if settings:  # one configuration of a model: compared as an entry of its own
        chosen_base = configuration_result(evaluated, model, settings, shown)
        if chosen_base is not None:
            results.append(chosen_base)
            baseline = chosen_base.model
        else:
            baseline = f"{model} [{', '.join(f'{k}={v}' for k, v in settings.items())}]"
    note = add_significance(results, baseline, split, shown, alpha, bootstrap) \
        if len(results) > 1 else "one model only: nothing to compare"
    comparison = comparison_table(results, split, shown, dataset, baseline, alpha, note)
    effects = effects_table(results, split, shown, dataset, baseline, alpha)
    significance = [_csv_row(dataset, r.model, baseline, metric, test, repr(p))
                    for r in results for metric, tests in r.pvalues.items()
                    for test, p in tests.items()]
    effect_rows = [_csv_row(dataset, r.model, baseline, metric, repr(e.estimate), repr(e.low),
                            repr(e.high), repr(e.confidence), str(r.n_users))
                   for r in results for metric, e in r.effects.items()]
    figs = [] if figures_dir is None else \
        report_figures(evaluated, results, split, shown, figures_dir, dataset, published)
    drawn = published_drawn(published, evaluated, shown)
    tables = [comparison] + ([effects] if effects else []) + [every_run]
    md = "\n".join(markdown(t) for t in tables) + "".join(
        f"\n![{p.stem}](figures/{p.name})\n" for p in figs if p.suffix == ".png")
    return _DatasetPart(comparison, effects, significance, effect_rows, md,
                        Section(dataset, tables, figs), drawn)


def _has_setting(runs: Any, model: str, setting: str) -> bool:
    """Whether some run of `model` records `setting` (a tidy-table column param.<setting>)."""
    column = f"param.{setting}"
    return column in runs and runs.loc[runs["model"] == model, column].notna().any()


def build_report(dirs: Sequence[str | Path], split: str = "test", out: str | Path | None = None,
                 metrics: Sequence[str] | None = None, baseline: str = DEFAULT_BASELINE,
                 alpha: float = 0.05, figures: bool = True,
                 bootstrap: int = BOOTSTRAP_RESAMPLES,
                 published: Sequence[str] = ()) -> ReportFiles:
    """Read, compare and write (the package docstring). `metrics`: the metric columns of the
    tables (default DEFAULT_METRICS, those that were computed); the tidy CSV keeps every
    column. `bootstrap`: resamples of the differences' intervals (0: no intervals).
    `published`: values to mark on the sweep figures ('MODEL SETTING=X METRIC@K=Y ...')."""
    from linrec.atomic import write_text_atomic

    if split not in ("test", "valid"):
        raise ConfigError(f"--split={split!r} is not allowed; allowed: test, valid")
    if not 0 < alpha < 1:
        raise ConfigError(f"--alpha={alpha} is out of range; allowed: a number > 0 and < 1")
    if bootstrap < 0:
        raise ConfigError(f"--bootstrap={bootstrap} is out of range; allowed: 0 (no intervals) "
                          "or a positive number of resamples")
    points = [parse_published(text) for text in published]
    runs = read_runs(dirs, split)
    first = Path(dirs[0])
    out = Path(out) if out else (first.parent if first.is_file() else first)
    figures_dir = out / "figures"
    complete = runs.complete
    chosen = _chosen_metrics(complete, metrics, split)
    md_parts = [f"# linrec report: {split} split\n",
                f"{len(complete)} complete run(s), {len(runs.not_complete)} without results, "
                f"below {', '.join(map(str, runs.dirs))}.\n"]
    comparisons: list[Table] = []
    compared: list[Table] = []  # each comparison, then its differences from the baseline
    significance_rows = ["dataset,model,baseline,metric,test,p_holm"]
    effect_rows = ["dataset,model,baseline,metric,difference,low,high,confidence,users"]
    sections: list[Section] = []
    files: list[Path] = []
    drawn = [False] * len(points)
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
        part = _dataset_part(evaluated, dataset, runs.dirs, split, chosen, baseline, alpha,
                             bootstrap, figures_dir if figures else None, points)
        comparisons.append(part.comparison)
        compared += [part.comparison] + ([part.effects] if part.effects else [])
        significance_rows += part.significance_rows
        effect_rows += part.effect_rows
        md_parts.append(part.markdown)
        sections.append(part.section)
        files += part.section.figures
        drawn = [a or b for a, b in zip(drawn, part.published_drawn, strict=True)]
    for text, point, marked in zip(published, points, drawn, strict=True):
        if not _has_setting(complete, point.model, point.setting):
            md_parts.append(f"`--published '{text}'`: no run of {point.model} has the setting "
                            f"{point.setting}; the point is not drawn.\n")
        elif figures and not marked:
            md_parts.append(
                f"`--published '{text}'`: no figure shows {point.model}'s "
                f"{'/'.join(point.values)} against {point.setting}, so the point is not drawn "
                "(a metric-against-setting figure needs every swept model to vary that one "
                "setting alone, and the metric among the shown ones).\n")
    problems = problems_table(runs)
    if problems is not None:
        md_parts.append(markdown(problems))
        sections.append(Section("Runs without results", [problems]))
    studies = read_studies(runs.dirs, figures_dir if figures else None)
    for study in studies:
        md_parts.append(study.markdown)
        sections.append(Section(f"Study {study.name} ({study.directory})", study.tables,
                                study.figures, intro=SPLIT_NOTE))
        files += study.figures
    md = "\n".join(md_parts)
    outputs = {
        f"report_{split}.md": md,
        f"report_{split}.csv": runs.frame.to_csv(index=False),
        f"report_{split}.html": html_page(f"linrec report: {split} split", sections),
        f"comparison_{split}.md": "\n".join(markdown(t) for t in compared),
        f"comparison_{split}.csv": "\n".join(csv_text(t) for t in comparisons),
        f"comparison_{split}.tex": "\n".join(latex(t) for t in compared),
        f"significance_{split}.csv": "\n".join(significance_rows) + "\n",
        f"effects_{split}.csv": "\n".join(effect_rows) + "\n",
    }
    if studies:
        outputs[f"ablations_{split}.tex"] = "\n".join(
            f"% study {s.name} ({s.directory}): {SPLIT_NOTE}\n" +
            "\n".join(latex(t) for t in s.tables) for s in studies)
    files += [write_text_atomic(out / name, text) for name, text in outputs.items()]
    return ReportFiles(markdown=md, files=files, n_runs=len(complete),
                       n_problems=len(runs.not_complete))

