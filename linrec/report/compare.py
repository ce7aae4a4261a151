"""The baseline comparison of a report: per model, the configuration with the best validation
selection value (mean over seeds), its metrics on the reported split as mean ± std over seeds,
and significance tests against a baseline model, over users and over seeds.

Protocol (that of the source papers' tables): the configuration is chosen on validation only; the
reported split's metrics of that configuration are shown. Runs without a validation split (selected
on test, e.g. the published LightGCN protocol) are flagged. Per-user values come from each run's
ranks file (the exact evaluator's global ranks, through `linrec.eval.metrics.exact_metrics`),
averaged over the configuration's seeds; a model and the baseline are compared on the users they
share by the paired t-test and the Wilcoxon signed-rank test, each Holm-corrected over the models
compared (per metric). Beside the tests, the mean per-user difference from the baseline with
its percentile bootstrap interval over the same users (at confidence 1 − alpha) says how large
the difference is.

The per-user tests hold the trained models fixed: they ask whether these users prefer one model,
not whether training again would give the same order. Where both the model and the baseline ran
at two seeds or more, Welch's t-test over the runs' values of each metric (one value per seed)
asks the second question: whether the gap exceeds the run-to-run spread of the protocol. It is
Holm-corrected over the models like the others. Two configurations whose runs do not vary at all
(a closed form at every seed) are different without a spread to exceed (p = 0) or equal (not
tested).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from linrec.errors import ConfigError
from linrec.eval.metrics import exact_metrics, parse_metric_key
from linrec.eval.ranks import RankTable
from linrec.eval.significance import (
    Interval,
    holm,
    paired_bootstrap_cis,
    paired_t,
    two_sample_t,
    wilcoxon_signed_rank,
)
from linrec.results import RANKS_FILE

#: significance markers: (test, marker, what it tests)
MARKERS = (("paired_t", "*", "paired t over users"),
           ("wilcoxon", "†", "Wilcoxon signed-rank over users"),
           ("welch_t_seeds", "‡", "Welch t over the seeds' values"))
#: bootstrap resamples of the paired difference's interval (the report's default)
BOOTSTRAP_RESAMPLES = 1000


@dataclass
class ModelResult:
    """The chosen configuration of one model and its numbers (module docstring)."""

    model: str
    params: dict[str, Any]
    runs: list[str]
    seeds: list[Any]
    selection_metric: str | None
    selection_split: str | None
    selection: float | None
    #: metric -> its value in each of `runs` that has one (the seeds of the configuration)
    values: dict[str, list[float]]
    n_configurations: int
    pvalues: dict[str, dict[str, float]] = field(default_factory=dict)
    #: metric -> mean per-user difference from the baseline with its bootstrap interval
    effects: dict[str, Interval] = field(default_factory=dict)
    #: users the tests and intervals were computed on (those shared with the baseline)
    n_users: int | None = None
    note: str | None = None

    @property
    def means(self) -> dict[str, float]:
        """metric -> mean over the seeds (NaN without a value)."""
        return {m: float(np.mean(v)) if v else float("nan") for m, v in self.values.items()}

    @property
    def stds(self) -> dict[str, float]:
        """metric -> standard deviation (ddof 1) over the seeds (NaN with fewer than two)."""
        return {m: float(np.std(v, ddof=1)) if len(v) > 1 else float("nan")
                for m, v in self.values.items()}

    def marks(self, metric: str, alpha: float) -> str:
        tests = self.pvalues.get(metric, {})
        return "".join(mark for test, mark, _ in MARKERS
                       if tests.get(test) is not None and tests[test] < alpha)


def _mean(values: Sequence[float]) -> float:
    finite = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return float(np.mean(finite)) if finite else float("nan")


def best_configurations(frame: Any, metrics: Sequence[str]) -> list[ModelResult]:
    """One ModelResult per model of `frame` (complete runs of one dataset): the configuration
    with the highest mean selection value (runs that recorded none: the first), with the mean
    and std over its seeds of every metric column in `metrics`; `params` are the settings that
    vary between the model's runs."""
    from linrec.report.runs import varying_params

    out = []
    for model, group in frame.groupby("model", sort=True):
        params = varying_params(group)
        by_config = list(group.groupby("config_key", sort=False))
        scores = [(_mean(list(g["selection_value"])), i) for i, (_, g) in enumerate(by_config)]
        best = max(scores, key=lambda s: (-math.inf if math.isnan(s[0]) else s[0], -s[1]))
        _, chosen = by_config[best[1]]
        first = chosen.iloc[0]
        values = {metric: [float(v) for v in chosen[metric]
                           if v is not None and not math.isnan(v)] if metric in chosen else []
                  for metric in metrics}
        out.append(ModelResult(
            model=str(model), params={p: first.get(p) for p in params if p in chosen},
            runs=list(chosen["run"]), seeds=list(chosen["seed"]),
            selection_metric=first.get("selection_metric"),
            selection_split=first.get("selection_split"),
            selection=None if math.isnan(best[0]) else best[0],
            values=values, n_configurations=len(by_config)))
    return out


def parse_model_settings(text: str, option: str = "--baseline",
                   example: str = "'ease lam=100'") -> tuple[str, dict[str, str]]:
    """A model and settings as `--baseline` and `--published` write them: (model, settings), a
    model (`ease`, `mf/ccl`) optionally followed by setting=value pairs (`ease lam=100`,
    `mf/ccl sampling.n_negatives=800`); `option` and `example` go into the error message."""
    if not text.split():
        raise ConfigError(f"{option} {text!r}: no model; e.g. {option} {example}")
    model, *settings = text.split()
    pairs = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"{option} {text!r}: {setting!r} is not a setting=value pair; "
                              f"e.g. {option} {example}")
        pairs[key.removeprefix("model.").removeprefix("param.")] = value
    return model, pairs


def _matches(value: Any, written: str) -> bool:
    """Whether a run's setting equals its value as written on the command line."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return math.isclose(float(value), float(written), rel_tol=1e-9, abs_tol=0.0)
        except ValueError:
            return False
    return str(value).lower() == written.lower()


def configuration_result(frame: Any, model: str, settings: Mapping[str, str],
                         metrics: Sequence[str]) -> ModelResult | None:
    """The ModelResult of the runs of `model` whose settings are `settings` (all its seeds),
    labelled `model [k=v, ...]`; None when no run has them."""
    rows = frame[frame["model"] == model]
    for key, value in settings.items():
        column = f"param.{key}"
        if column not in rows:
            return None
        rows = rows[rows[column].map(lambda v, value=value: _matches(v, value))]
    if rows.empty:
        return None
    (result,) = best_configurations(rows.assign(config_key="baseline"), metrics)
    label = ", ".join(f"{k}={v}" for k, v in settings.items())
    return dataclasses.replace(result, model=f"{model} [{label}]", params={},
                               n_configurations=1)


def per_user_values(runs: Sequence[str], split: str, metrics: Sequence[str]
                    ) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """(user ids, metric -> per-user value averaged over the runs) from the runs' ranks files;
    None when a run has no ranks file or the runs evaluated different users."""
    keys = [parse_metric_key(m, where="report metric") for m in metrics]
    names = sorted({name for name, _ in keys})
    ks = sorted({k for _, k in keys if k is not None}) or [1]
    users = None
    sums: dict[str, np.ndarray] = {}
    for run in runs:
        path = Path(run) / (RANKS_FILE if split == "test" else f"ranks_{split}.npz")
        if not path.is_file():
            return None
        result = exact_metrics(RankTable.load_npz(path), ks, names)
        if users is None:
            users = result.users
        elif not np.array_equal(users, result.users):
            return None
        for metric in metrics:
            sums[metric] = sums.get(metric, 0.0) + result.per_user[metric]
    return users, {m: v / len(runs) for m, v in sums.items()}


def add_significance(results: list[ModelResult], baseline: str, split: str,
                     metrics: Sequence[str], alpha: float = 0.05,
                     bootstrap: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> str | None:
    """Fill `pvalues` (Holm-adjusted) and, unless `bootstrap` is 0, `effects` (intervals at
    confidence 1 − alpha from `bootstrap` resamples, seeded) of every model against `baseline`;
    returns a note when some tests could not be run (and why), else None."""
    by_model = {r.model: r for r in results}
    if baseline not in by_model:
        return (f"no significance tests: the baseline {baseline!r} is not among the models "
                f"({', '.join(sorted(by_model))})")
    others = [r for r in results if r.model != baseline]
    raw: dict[tuple[str, str], list[tuple[ModelResult, float]]] = {}
    _seed_tests(by_model[baseline], others, metrics, raw)
    note = _user_tests(by_model[baseline], others, split, metrics, alpha, bootstrap, seed, raw)
    for (metric, test), entries in raw.items():
        adjusted, _ = holm(np.array([p for _, p in entries]))
        for (result, _), p in zip(entries, adjusted, strict=True):
            result.pvalues.setdefault(metric, {})[test] = float(p)
    return note


def _seed_tests(base: ModelResult, others: Sequence[ModelResult], metrics: Sequence[str],
                raw: dict[tuple[str, str], list[tuple[ModelResult, float]]]) -> None:
    """Welch's t over the seeds' values of each metric (module docstring) into `raw`, for every
    model with two runs or more when the baseline has two or more."""
    for result in others:
        for metric in metrics:
            x, y = result.values.get(metric, []), base.values.get(metric, [])
            if len(x) < 2 or len(y) < 2:
                continue
            if np.ptp(x) == 0 and np.ptp(y) == 0:  # no spread: equal, or different for sure
                if x[0] == y[0]:
                    continue
                p = 0.0
            else:
                with warnings.catch_warnings():  # scipy warns on a constant side; its var is 0
                    warnings.simplefilter("ignore", RuntimeWarning)
                    p = two_sample_t(np.array(x), np.array(y)).pvalue
            raw.setdefault((metric, "welch_t_seeds"), []).append((result, p))


def _user_tests(base_result: ModelResult, others: Sequence[ModelResult], split: str,
                metrics: Sequence[str], alpha: float, bootstrap: int, seed: int,
                raw: dict[tuple[str, str], list[tuple[ModelResult, float]]]) -> str | None:
    """The paired tests over users (into `raw`) and the bootstrap intervals (into each result's
    `effects`) from the runs' ranks files; a note when the baseline has none."""
    base = per_user_values(base_result.runs, split, metrics)
    if base is None:
        return f"no per-user tests: the baseline's runs have no ranks file for {split}"
    for result in others:
        values = per_user_values(result.runs, split, metrics)
        if values is None:
            result.note = f"no ranks file for {split}: not tested over users"
            continue
        common, i_base, i_model = np.intersect1d(base[0], values[0], return_indices=True)
        if common.size < 2:
            result.note = "fewer than 2 users in common with the baseline: not tested over users"
            continue
        result.n_users = int(common.size)
        pairs = {m: (values[1][m][i_model], base[1][m][i_base]) for m in metrics}
        if bootstrap:
            result.effects.update(_bootstrap_effects(pairs, 1.0 - alpha, bootstrap, seed))
        for metric in metrics:
            x, y = pairs[metric]
            keep = ~(np.isnan(x) | np.isnan(y))
            for test, fn in (("paired_t", paired_t), ("wilcoxon", wilcoxon_signed_rank)):
                p = fn(x[keep], y[keep]).pvalue if keep.sum() >= 2 else float("nan")
                raw.setdefault((metric, test), []).append((result, 1.0 if math.isnan(p) else p))
    return None


def _bootstrap_effects(pairs: Mapping[str, tuple[np.ndarray, np.ndarray]], confidence: float,
                       n_resamples: int, seed: int) -> dict[str, Interval]:
    """metric -> the paired bootstrap interval of (model − baseline) per user, over the users
    where both values exist (AUC can be missing); metrics with the same such users share one
    draw of resampled users (`paired_bootstrap_cis`), so each interval is the one its metric
    alone would give."""
    groups: dict[bytes, list[str]] = {}
    for metric, (x, y) in pairs.items():
        keep = ~(np.isnan(x) | np.isnan(y))
        if keep.sum() >= 2:
            groups.setdefault(keep.tobytes(), []).append(metric)
    effects: dict[str, Interval] = {}
    for group in groups.values():
        x0, y0 = pairs[group[0]]
        keep = ~(np.isnan(x0) | np.isnan(y0))
        x = np.column_stack([pairs[m][0][keep] for m in group])
        y = np.column_stack([pairs[m][1][keep] for m in group])
        intervals = paired_bootstrap_cis(x, y, confidence, n_resamples, seed)
        effects.update(zip(group, intervals, strict=True))
    return effects


def best_per_metric(results: Sequence[ModelResult], metrics: Sequence[str]) -> dict[str, str]:
    """metric -> the model with the highest mean (ties: the first)."""
    best = {}
    for metric in metrics:
        finite = [(r.means[metric], r.model) for r in results if not math.isnan(r.means[metric])]
        if finite:
            best[metric] = max(finite, key=lambda t: t[0])[1]
    return best
