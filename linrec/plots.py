"""Figures as small functions on matplotlib's Agg canvas (no pyplot, no global state).
Each returns the Figure; `path` writes it atomically (`linrec.atomic`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatterSciNotation

from linrec.atomic import atomic_open
from linrec.errors import ConfigError
from linrec.figure_record import figure_inputs

_QUANTITIES = ("ratio", "shrunk")
_SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


class PlainLogFormatter(LogFormatterSciNotation):
    """matplotlib's log-axis tick labels (the same ticks labelled, the same numbers) set as
    plain text with Unicode superscripts, 10⁻² and 3×10⁻², instead of mathtext: parsing
    mathtext is a third of drawing a figure, and its first use builds the parser."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        label = super().__call__(x, pos)
        math = re.fullmatch(r"\$\\mathdefault\{(.*)\}\$", label)
        if math is None:
            return label
        body = re.sub(r"\^\{(-?\d+)\}", lambda power: power.group(1).translate(_SUPERSCRIPTS),
                      math.group(1).replace("\\times", "×"))
        return body.replace("-", "\N{MINUS SIGN}")


def log_scale(ax: Any, which: str) -> None:
    """Put the axes' `which` ("x" or "y") axis on a base-10 log scale labelled by
    PlainLogFormatter."""
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_major_formatter(PlainLogFormatter(10))
    axis.set_minor_formatter(PlainLogFormatter(10, labelOnlyBase=False))


def save_figure(fig: Figure, path: str | Path, bbox: Any = "tight") -> Path:
    """Write `fig` to `path` (format from the suffix) atomically, cropped to `bbox` (inches;
    "tight": the drawn content and a margin); returns the path."""
    path = Path(path)
    FigureCanvasAgg(fig)
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format=path.suffix.lstrip(".") or "png", bbox_inches=bbox)
    return path


def tight_box(fig: Figure, pad_inches: float = 0.1) -> Any:
    """The box `bbox_inches="tight"` crops `fig` to (its content on the Agg canvas, padded as
    savefig pads it), computed once for every format it is written in: finding it takes
    about a third of a format's drawing."""
    canvas = FigureCanvasAgg(fig)
    return fig.get_tightbbox(canvas.get_renderer()).padded(pad_inches)


def plot_spectral_profile(profiles: Mapping[str, np.ndarray],
                          singular_values: np.ndarray | None = None,
                          quantity: str = "ratio", log_x: bool = True,
                          title: str | None = None, path: str | Path | None = None) -> Figure:
    """Figure 11 view (Jin et al. 2021, §3.3): per-component shrinkage of several models
    against the component index i = 1..r.

    profiles: model label -> f (r_model,) from `spectral_profile`. quantity: "ratio" plots f_i;
    "shrunk" plots σ_i f_i (needs `singular_values` σ (r,)) together with the unshrunk σ_i.
    """
    if quantity not in _QUANTITIES:
        raise ConfigError(f"plot_spectral_profile: quantity={quantity!r}; allowed {_QUANTITIES}")
    if quantity == "shrunk" and singular_values is None:
        raise ConfigError("plot_spectral_profile: quantity='shrunk' needs singular_values")
    if not profiles:
        raise ConfigError("plot_spectral_profile: profiles is empty; pass {label: f}")
    fig = Figure(figsize=(6.4, 4.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if quantity == "shrunk":
        sigma = np.asarray(singular_values, dtype=np.float64)
        ax.plot(np.arange(1, sigma.size + 1), sigma, color="0.6", ls="--", lw=1, label="σ_i")
    for label, f in profiles.items():
        f = np.asarray(f, dtype=np.float64)
        y = f if quantity == "ratio" else f * sigma[: f.size]
        ax.plot(np.arange(1, f.size + 1), y, lw=1.2, label=label)
    if log_x:
        log_scale(ax, "x")
    ax.set_xlabel("component index i")
    ax.set_ylabel("f_i = v_iᵀ W v_i" if quantity == "ratio" else "σ_i f_i")
    if title:
        ax.set_title(title)
    ax.legend(frameon=False, fontsize="small")
    ax.grid(alpha=0.3)
    if path is not None:
        save_figure(fig, path)
    return fig


def plot_training_curve(epochs: Sequence[Mapping[str, Any]], title: str | None = None,
                        path: str | Path | None = None, metric: str = "validation metric"
                        ) -> Figure:
    """Training loss and the selection metric against the epoch (records of a trained model's
    `training_log()["epochs"]`: epoch, loss, valid, lr); `metric` labels the second axis
    (`training_metric_label` of a run record)."""
    if not epochs:
        raise ConfigError("plot_training_curve: no epochs to plot")
    fig = Figure(figsize=(6.4, 3.6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x = [e["epoch"] for e in epochs]
    ax.plot(x, [e["loss"] for e in epochs], color="C0", lw=1.2, label="training loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss", color="C0")
    valid = [(e["epoch"], e["valid"]) for e in epochs if e.get("valid") is not None]
    if valid:
        right = ax.twinx()
        right.plot(*zip(*valid, strict=True), color="C1", lw=1.2, marker=".",
                   label="validation")
        right.set_ylabel(metric, color="C1")
    if title:
        ax.set_title(title)
    if path is not None:
        save_figure(fig, path)
    return fig


def training_metric_label(record: Mapping[str, Any]) -> str:
    """'recall@20 on test' for a run that selected its epochs on the test users: what the
    training curve's second axis shows."""
    metric = (record.get("selection") or {}).get("metric", "selection metric")
    return f"{metric} on {(record.get('training') or {}).get('selected_on', 'valid')}"


def save_figure_formats(fig: Figure, stem: str | Path, formats: Sequence[str] = ("png", "pdf")
                        ) -> list[Path]:
    """Write `fig` as <stem>.png and <stem>.pdf (or `formats`), each cropped to the same tight
    box (`tight_box`); returns the paths."""
    stem = Path(stem)
    bbox = tight_box(fig)
    return [save_figure(fig, stem.with_name(f"{stem.name}.{fmt}"), bbox) for fmt in formats]


def _setting_title(setting: Mapping[str, Any]) -> str:
    protocol = setting.get("protocol", {})
    size = protocol.get("sample_size")
    return ("adaptive sampling" if size == "adaptive" else f"{size} sampled items") + \
        f", {protocol.get('repeats')} repeats"


def plot_sampled_curves(setting: Mapping[str, Any], metric: str, title: str | None = None,
                        path: str | Path | None = None) -> Figure:
    """The exact target-level metric@K against K = 1..k_max with the naive sampled metric and
    every estimator's curve (mean over repeats). setting: a sampled block of results.json
    (`splits.<split>.sampled.<label>`, with its `curves`)."""
    curves = setting.get("curves") or {}
    if "exact" not in curves or metric not in curves["exact"]:
        raise ConfigError(f"plot_sampled_curves: no {metric!r} curves in this sampled setting")
    fig = Figure(figsize=(6.4, 4.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    exact = np.asarray(curves["exact"][metric])
    ks = np.arange(1, exact.size + 1)
    ax.plot(ks, exact, color="black", lw=2.0, label="exact")
    for i, (name, by_metric) in enumerate((n, c) for n, c in curves.items() if n != "exact"):
        style = {"ls": "--", "color": "0.5"} if name == "naive" else {"color": f"C{i}"}
        ax.plot(ks, np.asarray(by_metric[metric], dtype=np.float64), lw=1.2, label=name,
                **style)
    ax.set_xlabel("K")
    ax.set_ylabel(f"{metric}@K")
    ax.set_title(title or _setting_title(setting))
    ax.legend(frameon=False, fontsize="small")
    ax.grid(alpha=0.3)
    if path is not None:
        save_figure(fig, path)
    return fig


def plot_relative_errors(setting: Mapping[str, Any], metric: str, title: str | None = None,
                         path: str | Path | None = None) -> Figure:
    """|estimate / exact − 1| in % against K for every estimator (and the naive metric) of a
    sampled block of results.json; K where the exact metric is 0 are left out."""
    curves = setting.get("curves") or {}
    if "exact" not in curves or metric not in curves["exact"]:
        raise ConfigError(f"plot_relative_errors: no {metric!r} curves in this sampled setting")
    exact = np.asarray(curves["exact"][metric])
    ks = np.arange(1, exact.size + 1)
    defined = exact > 0
    fig = Figure(figsize=(6.4, 4.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for i, (name, by_metric) in enumerate((n, c) for n, c in curves.items() if n != "exact"):
        estimate = np.asarray(by_metric[metric], dtype=np.float64)  # None (diverged): NaN
        err = 100 * np.abs(estimate[defined] / exact[defined] - 1)
        style = {"ls": "--", "color": "0.5"} if name == "naive" else {"color": f"C{i}"}
        ax.plot(ks[defined], err, lw=1.2, label=name, **style)
    log_scale(ax, "y")
    ax.set_xlabel("K")
    ax.set_ylabel(f"relative error of {metric}@K (%)")
    ax.set_title(title or _setting_title(setting))
    ax.legend(frameon=False, fontsize="small")
    ax.grid(alpha=0.3, which="both")
    if path is not None:
        save_figure(fig, path)
    return fig


def plot_rank_histogram(setting: Mapping[str, Any], title: str | None = None,
                        path: str | Path | None = None) -> Figure:
    """Histogram of the sampled ranks (repeat 0) of a sampled block of results.json."""
    hist = setting.get("rank_histogram")
    if not hist or not hist.get("rank"):
        raise ConfigError("plot_rank_histogram: this sampled setting has no rank histogram")
    fig = Figure(figsize=(6.4, 3.6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    # one filled outline over every rank from the least to the largest (a rank without items
    # drops to the axis) instead of a bar per rank: the same picture, a third less drawing
    ranks = np.asarray(hist["rank"], dtype=np.int64)
    counts = np.zeros(ranks.max() - ranks.min() + 1)
    counts[ranks - ranks.min()] = hist["count"]
    edges = np.arange(ranks.min(), ranks.max() + 2) - 0.5
    ax.hist(edges[:-1] + 0.5, bins=edges, weights=counts, histtype="stepfilled", color="C0",
            log=True)
    log_scale(ax, "y")
    ax.set_xlabel("sampled rank r")
    ax.set_ylabel("held-out items")
    ax.set_title(title or _setting_title(setting))
    if path is not None:
        save_figure(fig, path)
    return fig


def plot_heatmap(values: np.ndarray, rows: Sequence[Any], columns: Sequence[Any],
                 row_label: str, column_label: str, title: str | None = None,
                 path: str | Path | None = None) -> Figure:
    """A grid of values (e.g. the validation metric over rank × λ) as a heat map with the
    values written in the cells; NaN cells (not run) stay blank. values: (len(rows),
    len(columns))."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (len(rows), len(columns)) or values.size == 0:
        raise ConfigError(f"plot_heatmap: values {values.shape} do not match "
                          f"{len(rows)} rows x {len(columns)} columns")
    fig = Figure(figsize=(1.0 + 0.9 * len(columns), 1.0 + 0.5 * len(rows)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", aspect="auto")
    fig.colorbar(image, ax=ax, fraction=0.05)
    ax.set_xticks(range(len(columns)), [str(c) for c in columns])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xlabel(column_label)
    ax.set_ylabel(row_label)
    finite = values[np.isfinite(values)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.4f}", ha="center", va="center", fontsize="x-small",
                    color="white" if v < middle else "black")
    if title:
        ax.set_title(title)
    if path is not None:
        save_figure(fig, path)
    return fig


def curve_metric(setting: Mapping[str, Any], preferred: Sequence[str | None] = ("ndcg",)
                 ) -> str | None:
    """The metric whose estimator curves a sampled setting's figures show: the first of
    `preferred` it has curves of, else its first; None when it has no curves."""
    exact = (setting.get("curves") or {}).get("exact") or {}
    if not exact:
        return None
    return next((m for m in preferred if m in exact), next(iter(exact)))


def setting_figure_jobs(setting: Mapping[str, Any], metric: str, directory: str | Path,
                        prefix: str = "", suffix: str = "", title: str | None = None
                        ) -> list[Callable[[], list[Path]]]:
    """The figures of one sampled setting of a results.json record, each as a job that draws
    it (PNG and PDF) into `directory` and returns the paths: <prefix>sampled_<metric><suffix>
    (exact metric vs K with every estimator's curve and the naive one),
    <prefix>estimator_error_<metric><suffix> (their relative error vs K) and, when recorded,
    <prefix>sampled_ranks<suffix> (the sampled-rank histogram)."""
    directory = Path(directory)
    jobs = [lambda: save_figure_formats(plot_sampled_curves(setting, metric, title=title),
                                        directory / f"{prefix}sampled_{metric}{suffix}"),
            lambda: save_figure_formats(plot_relative_errors(setting, metric, title=title),
                                        directory / f"{prefix}estimator_error_{metric}{suffix}")]
    if (setting.get("rank_histogram") or {}).get("rank"):
        jobs.append(lambda: save_figure_formats(plot_rank_histogram(setting, title=title),
                                                directory / f"{prefix}sampled_ranks{suffix}"))
    return jobs


def setting_figures(setting: Mapping[str, Any], metric: str, directory: str | Path,
                    prefix: str = "", suffix: str = "", title: str | None = None) -> list[Path]:
    """Draw the figures of `setting_figure_jobs`; returns the written paths."""
    return [path for job in setting_figure_jobs(setting, metric, directory, prefix, suffix, title)
            for path in job()]


def run_figure_jobs(record: Mapping[str, Any], run_dir: str | Path, metric: str = "ndcg"
                    ) -> list[Callable[[], list[Path]]]:
    """The figures of one run, from its results.json record, each as a job that draws it (PNG
    and PDF) into the run's directory and returns the paths: for the test split (else the
    first split) and its first sampled setting with curves, the metric and relative-error
    curves against K and the sampled-rank histogram (`setting_figure_jobs`); a trained
    model's training curve. They read only `figure_record.figure_inputs(record)`."""
    record = figure_inputs(record)
    run_dir = Path(run_dir)
    jobs: list[Callable[[], list[Path]]] = []
    splits = record["splits"]
    name = next(iter(splits), None)
    sampled = (splits.get(name) or {}).get("sampled") or {}
    setting = next((s for s in sampled.values() if curve_metric(s)), None)
    if setting is not None:
        jobs += setting_figure_jobs(setting, curve_metric(setting, (metric,)), run_dir,
                                    suffix=f"_{name}")
    epochs = (record.get("training") or {}).get("epochs")
    if epochs:
        jobs.append(lambda: save_figure_formats(
            plot_training_curve(epochs, metric=training_metric_label(record)),
            run_dir / "training_curve"))
    return jobs


def run_figures(record: Mapping[str, Any], run_dir: str | Path,
                metric: str = "ndcg") -> list[Path]:
    """Draw the figures of one run (`run_figure_jobs`) in turn; returns the written paths."""
    return [path for job in run_figure_jobs(record, run_dir, metric) for path in job()]
