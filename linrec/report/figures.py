"""The figures of a report (PNG and PDF, in <out>/figures/), per dataset and reported split:

- `<dataset>_<metric>_vs_k_<split>`: the metric family of the selection against every K the runs
  report, one line per model (its chosen configuration, mean over seeds);
- `<dataset>_<metric>_vs_<setting>_<split>`: when the models were swept over one and the same
  numeric setting (the number of negatives, a temperature, a loss weight), each shown metric of
  the split against it, one line per model (`mf/ccl`, `mf/mse`: one per loss), mean ± std over
  seeds, the seeds counted in the legend, the runs' common epoch budget in the title, and a
  star at each published value given for that model and setting (`--published`);
- `<dataset>_<model>_grid_<split>`: a model swept over two numeric settings, its validation
  selection value (mean over seeds) as a heat map;
- `<dataset>_<model>_training_<split>`: a trained model's loss and validation metric per epoch
  (its chosen configuration, first seed);
- of each model's chosen configuration (first seed) and every sampled setting of the split:
  `<dataset>_<model>_sampled_<metric>_<setting>_<split>` (the exact metric against K with every
  estimator's curve and the naive sampled one), `…_estimator_error_<metric>_<setting>_<split>`
  (their relative error against K) and `…_sampled_ranks_<setting>_<split>` (the histogram of
  the sampled ranks).

Every name carries the split, so `--split valid` writes its own figures. The studies' own
figures (heat maps, spectral profiles) are copied by linrec.report.studies.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from linrec.errors import ConfigError
from linrec.report._format import short_param, slug
from linrec.report.runs import metric_columns, varying_params

#: the estimator curves are drawn for this metric when the selection's family has none
PREFERRED_CURVE_METRIC = "ndcg"
#: how `--published` is written
PUBLISHED_EXAMPLE = "'mf/mine_plus temperature=0.4 recall@20=0.1813'"


@dataclass(frozen=True)
class PublishedPoint:
    """A published value to mark on the metric-against-setting figures: `model` at
    `setting` = `at`, with `values` (metric@K -> value)."""

    model: str
    setting: str
    at: float
    values: Mapping[str, float]


def parse_published(text: str) -> PublishedPoint:
    """`--published 'MODEL SETTING=X METRIC@K=Y ...'` as a PublishedPoint: one numeric setting
    (`temperature`, `sampling.n_negatives`, `loss.negative_weight`) and at least one metric."""
    from linrec.report.compare import parse_model_settings

    model, pairs = parse_model_settings(text, "--published", PUBLISHED_EXAMPLE)
    numbers = {}
    for key, value in pairs.items():
        try:
            numbers[key] = float(value)
        except ValueError:
            numbers[key] = math.nan
        if not math.isfinite(numbers[key]):
            raise ConfigError(f"--published {text!r}: {key}={value} is not a finite number")
    settings = [k for k in numbers if "@" not in k]
    values = {k: v for k, v in numbers.items() if "@" in k}
    if len(settings) != 1 or not values:
        raise ConfigError(f"--published {text!r}: give one setting and at least one metric@K "
                          f"value; e.g. --published {PUBLISHED_EXAMPLE}")
    return PublishedPoint(model, settings[0], numbers[settings[0]], values)


def report_figures(group: Any, results: Sequence[Any], split: str, metrics: Sequence[str],
                   figures_dir: Path, dataset: str,
                   published: Sequence[PublishedPoint] = ()) -> list[Path]:
    """Every figure of one dataset (module docstring). group: the complete runs of the dataset
    that evaluated `split` (tidy rows); results: its ModelResults (linrec.report.compare);
    published: values to mark on the sweep figures. Returns the written paths."""
    from linrec.plots import save_figure_formats

    stem = slug(dataset)
    family = _family(results, metrics)
    written: list[Path] = []
    columns = [c for c in metric_columns(group)
               if family and c.startswith(f"{family}@") and group[c].notna().any()]
    if columns:
        fig = _metric_vs_k(group, results, family, columns, split, dataset)
        written += save_figure_formats(fig, figures_dir / f"{stem}_{family}_vs_k_{split}")
    for metric, setting, fig in _sweep_lines(group, metrics, split, dataset, published):
        written += save_figure_formats(
            fig, figures_dir / f"{stem}_{slug(metric)}_vs_{slug(short_param(setting))}_{split}")
    for model, rows in group.groupby("model"):
        fig = _grid(rows, str(model))
        if fig is not None:
            written += save_figure_formats(
                fig, figures_dir / f"{stem}_{slug(str(model))}_grid_{split}")
    for result in results:
        record = json.loads((Path(result.runs[0]) / "results.json").read_text())
        written += _run_figures(record, split, family, figures_dir,
                                f"{stem}_{slug(result.model)}", f"{result.model} ({dataset})")
    return written


def _family(results: Sequence[Any], metrics: Sequence[str]) -> str | None:
    """The metric family of the selection (`ndcg` of ndcg@100), else of the first metric."""
    for r in results:
        if r.selection_metric:
            return str(r.selection_metric).split("@")[0]
    return metrics[0].split("@")[0] if metrics else None


def _metric_vs_k(group: Any, results: Sequence[Any], family: str, columns: Sequence[str],
                 split: str, dataset: str) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    ks = sorted(int(c.split("@")[1]) for c in columns)
    fig = Figure(figsize=(6.4, 4.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for r in results:
        rows = group[group["run"].isin(r.runs)]
        ax.plot(ks, [float(rows[f"{family}@{k}"].astype(float).mean()) for k in ks],
                marker=".", label=r.model)  # the mean over seeds (pandas skips NaN)
    ax.set_xscale("log")
    ax.set_xlabel("K")
    ax.set_ylabel(f"{family}@K ({split})")
    ax.set_title(f"{dataset}: {family}@K of each model's chosen configuration")
    ax.legend(frameon=False, fontsize="small")
    ax.grid(alpha=0.3, which="both")
    return fig


def _numeric(column: Any) -> bool:
    values = column.dropna()
    return len(values) > 0 and values.map(
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)).all()


def _swept_setting(group: Any) -> tuple[str, list[str]] | None:
    """(the column param.<setting>, the swept models) when every model that was swept varies
    the same one numeric setting and nothing else; None otherwise."""
    swept = {str(model): varying_params(rows) for model, rows in group.groupby("model")}
    settings = {tuple(v) for v in swept.values() if v}
    if len(settings) != 1 or len(next(iter(settings))) != 1:
        return None
    (setting,) = next(iter(settings))
    models = [m for m, v in swept.items() if v]
    return (setting, models) if _numeric(group[group["model"].isin(models)][setting]) else None


def _shown(group: Any, metrics: Sequence[str]) -> list[str]:
    """The metrics of `metrics` that some run of `group` computed."""
    return [m for m in metrics if m in group and group[m].notna().any()]


def _marks(point: PublishedPoint, model: str, setting: str, metric: str) -> bool:
    """Whether `point` is a star on `model`'s line of `metric` against `setting` (param.*)."""
    return point.model == model and point.setting == short_param(setting) and \
        metric in point.values


def published_drawn(points: Sequence[PublishedPoint], group: Any,
                    metrics: Sequence[str]) -> list[bool]:
    """Per point: whether the metric-against-setting figures of `group` (tidy rows of one
    dataset) with `metrics` shown draw it."""
    swept = _swept_setting(group)
    if swept is None:
        return [False] * len(points)
    setting, models = swept
    shown = _shown(group, metrics)
    return [any(_marks(p, model, setting, metric) for model in models for metric in shown)
            for p in points]


def _sweep_lines(group: Any, metrics: Sequence[str], split: str, dataset: str,
                 published: Sequence[PublishedPoint] = ()) -> list[tuple[str, str, Any]]:
    """(metric, setting, figure) per shown metric, when every model that was swept varies the
    same one numeric setting (and nothing else); none otherwise. A published point of a swept
    model at that setting is a star in its line's colour."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    swept = _swept_setting(group)
    if swept is None:
        return []
    setting, models = swept
    out = []
    for metric in _shown(group, metrics):
        fig = Figure(figsize=(6.4, 4.0))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        xs_all: list[float] = []
        for model in models:
            rows = group[group["model"] == model]
            by_value = rows.groupby(setting)[metric]
            xs = sorted(by_value.groups)
            xs_all += [float(x) for x in xs]
            values = [by_value.get_group(x).astype(float) for x in xs]
            means = [float(v.mean()) for v in values]
            # the comparison table's spread (ddof 1); a point of one seed has no bar
            stds = [float(v.std(ddof=1)) if len(v) > 1 else 0.0 for v in values]
            seeds = rows.groupby(setting)["seed"].nunique()
            low, high = int(seeds.min()), int(seeds.max())
            counted = f"{low}" if low == high else f"{low}–{high}"
            line = ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3,
                               label=f"{model} ({counted} seed{'s' if high != 1 else ''})")
            for point in published:
                if _marks(point, model, setting, metric):
                    ax.plot([point.at], [point.values[metric]], marker="*", markersize=13,
                            linestyle="none", color=line.lines[0].get_color(),
                            label=f"{model}: published")
                    xs_all.append(point.at)
        if min(xs_all) > 0 and max(xs_all) / min(xs_all) >= 10:
            ax.set_xscale("log")
        ax.set_xlabel(short_param(setting))
        ax.set_ylabel(f"{metric} ({split})")
        ax.set_title(f"{dataset}: {metric} against {short_param(setting)}"
                     + _budget(group[group["model"].isin(models)]))
        ax.legend(frameon=False, fontsize="small")
        ax.grid(alpha=0.3, which="both")
        out.append((metric, setting, fig))
    return out


def _budget(rows: Any) -> str:
    """`, ≤ 20 epochs each` when every trained run of a sweep had the same epoch budget (an
    ablation compares its points at equal training, and the figure says how much); else ''."""
    budgets = rows.get("param.epochs")
    if budgets is None or budgets.isna().any() or budgets.nunique() != 1:
        return ""
    return f", ≤ {int(budgets.iloc[0])} epochs each"


def _grid(rows: Any, model: str) -> Any | None:
    """The heat map of a model swept over exactly two numeric settings, else None."""
    from linrec.plots import plot_heatmap

    params = [p for p in varying_params(rows)
              if rows[p].dropna().map(lambda v: isinstance(v, (int, float))).all()]
    if len(params) != 2:
        return None
    grid = rows.groupby(params)["selection_value"].mean()
    first = sorted(rows[params[0]].dropna().unique())
    second = sorted(rows[params[1]].dropna().unique())
    values = np.full((len(first), len(second)), np.nan)
    for (a, b), v in grid.items():
        values[first.index(a), second.index(b)] = v
    sel = rows["selection_metric"].dropna()
    sel_split = rows["selection_split"].dropna()
    what = f"{sel.iloc[0]} on {sel_split.iloc[0]}" if len(sel) and len(sel_split) else \
        "selection metric"
    return plot_heatmap(values, first, second, short_param(params[0]), short_param(params[1]),
                        title=f"{model}: {what} (mean over seeds)")


def _run_figures(record: Mapping[str, Any], split: str, family: str | None, figures_dir: Path,
                 stem: str, title: str) -> list[Path]:
    """The training curve and the figures of every sampled setting of one run's record."""
    from linrec.plots import (
        curve_metric,
        plot_training_curve,
        save_figure_formats,
        setting_figures,
        training_metric_label,
    )

    written: list[Path] = []
    epochs = (record.get("training") or {}).get("epochs")
    if epochs:
        written += save_figure_formats(plot_training_curve(epochs, title=title,
                                                           metric=training_metric_label(record)),
                                       figures_dir / f"{stem}_training_{split}")
    sampled = ((record.get("splits") or {}).get(split) or {}).get("sampled") or {}
    for label, setting in sampled.items():
        metric = curve_metric(setting, (family, PREFERRED_CURVE_METRIC))
        if metric is None:
            continue
        repeats = (setting.get("protocol") or {}).get("repeats")
        written += setting_figures(setting, metric, figures_dir, prefix=f"{stem}_",
                                   suffix=f"_{slug(label)}_{split}",
                                   title=f"{title}: {label}, {repeats} repeats, {split}")
    return written
