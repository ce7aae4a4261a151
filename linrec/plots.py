"""Figures as small functions on matplotlib's Agg canvas (no pyplot, no global state).
Each returns the Figure; `path` writes it atomically (`linrec.atomic`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from linrec.atomic import atomic_open
from linrec.errors import ConfigError

_QUANTITIES = ("ratio", "shrunk")


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write `fig` to `path` (format from the suffix) atomically; returns the path."""
    path = Path(path)
    FigureCanvasAgg(fig)
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format=path.suffix.lstrip(".") or "png", bbox_inches="tight")
    return path


def plot_spectral_profile(profiles: Mapping[str, np.ndarray],
                          singular_values: np.ndarray | None = None,
                          quantity: str = "ratio", log_x: bool = True,
                          title: str | None = None, path: str | Path | None = None) -> Figure:
    """Figure 11 view (spec/linear_models.md §4): per-component shrinkage of several models
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
        ax.set_xscale("log")
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
                        path: str | Path | None = None) -> Figure:
    """Training loss and validation metric against the epoch (records of a trained model's
    `training_log()["epochs"]`: epoch, loss, valid, lr)."""
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
        right.set_ylabel("validation metric", color="C1")
    if title:
        ax.set_title(title)
    if path is not None:
        save_figure(fig, path)
    return fig
