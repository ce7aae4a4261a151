"""`experiment=linear_models`: the protocol of Tables 8/9 and the grids of Tables 14–17 of the
dissertation's chapter 3 (Liang et al. 2018; Li 2023, Algorithm 2; Tables 8–18).

Strong generalization. Every model family has a grid; each point is a run scored on the
validation and the test users (<run_dir>/runs/<family>/<point>/results.json), so that no fitted
model outlives its point (an item-item W is n x n); the point with the best validation
`eval.selection` (default nDCG@100) is selected, and the report gives its test Recall@20,
Recall@50 (`recall_trunc`, the min(K, |T|) denominator of Liang et al.) and nDCG@100.
Spectral families (lrr, mf_closed, puresvd, ridge) share one eigendecomposition per training
matrix and one projection `foldin @ V` of the evaluation users (Algorithm 2).
`train_on: train_and_foldin` trains a family on the training users plus the fold-in rows of the
validation and test users (the MF/WMF protocol of A.1.1); the others train on training users
only.
Writes tables/{main,grid_<family>}.{csv,md}, figures/spectral_profile.png and study.json.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.data.splits import Split
from linrec.errors import ConfigError
from linrec.eval import evaluate, validation_score
from linrec.eval.metrics import parse_metric_key
from linrec.models.base import Recommender, Validation
from linrec.studies.common import (
    dataset_record,
    point_dir,
    study_model_config,
    write_study_index,
    write_study_run,
    write_table,
)

log = logging.getLogger("linrec")


def with_foldin_rows(split: Split) -> sp.csr_matrix:
    """Training matrix plus the fold-in rows of the validation and test users, placed in the
    users' own rows (empty under strong generalization): users x items CSR float32, binary."""
    combined = split.train.tocsr().astype(np.float32)
    for evalset in (split.valid, split.test):
        if evalset is not None:
            foldin = evalset.foldin.tocoo()
            combined = combined + sp.csr_matrix(
                (foldin.data, (evalset.users[foldin.row], foldin.col)), shape=combined.shape)
    combined.data[:] = 1.0  # binary, also where a fold-in row repeats a training row
    return combined


def _grid_points(grid: Mapping[str, Any]) -> list[dict[str, Any]]:
    names = list(grid)
    values = [v if isinstance(v, (list, tuple)) else [v] for v in grid.values()]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]


def _scorers(family: Mapping[str, Any], train: sp.csr_matrix, label: str, seed: int,
             validation: Validation | None) -> Iterator[tuple[dict[str, Any], Any, float]]:
    """(grid point, fitted scorer, fit seconds) for every point of a family's grid. Models
    other than the shared-spectrum grids are fitted like a run's (`Recommender.fit` with the
    run's validation callback, which trainers use for early stopping)."""
    from linrec.models.configs import MODEL_CONFIGS, SPECTRAL_FILTER
    from linrec.models.spectral import compute_spectrum, spectral_grid

    name = family["model"]
    grid = dict(family.get("grid", {}))
    fixed = dict(family.get("params", {}))
    spectral = SPECTRAL_FILTER in MODEL_CONFIGS.entry(name).families
    if spectral and "gamma" not in fixed and not fixed.get("dropout"):
        t0 = time.perf_counter()
        spectrum = compute_spectrum(train)
        seconds = time.perf_counter() - t0
        values = {k: (v if isinstance(v, (list, tuple)) else [v]) for k, v in grid.items()}
        for point, scorer in spectral_grid(name, spectrum, values, **fixed):
            yield point, scorer, seconds
            seconds = 0.0  # the decomposition is shared by the whole grid
        return
    from linrec.models import build_model

    for point in _grid_points(grid):
        model = build_model(study_model_config({"name": name, **fixed, **point}, label, seed))
        t0 = time.perf_counter()
        model.fit(train, validation)
        seconds = time.perf_counter() - t0
        log.info("fit %s %s in %.2fs", label, point, seconds)
        yield point, model, seconds


def _validation(split: Split, on_valid: Any, seed: int,
                users_known: bool) -> Validation | None:
    """The validation callback of a family: the run's (`linrec.eval.validation_score`), or, for
    a family that knows the evaluation users it would otherwise fold in (trained with their
    fold-in rows), the same selection metric with the users scored by row, as the study
    evaluates them."""
    if users_known == (not split.strong):
        return validation_score(split, on_valid, seed=seed)
    exact = dataclasses.replace(on_valid, sampled=dataclasses.replace(on_valid.sampled,
                                                                      enabled=False))
    return lambda model: evaluate(model, split, exact, seed=seed,
                                  users_known=users_known).selection_value


def _point_model(family: Mapping[str, Any], point: Mapping[str, Any]) -> dict[str, Any]:
    """The model fields of one grid point: the family's model, fixed params and the point."""
    return {"name": family["model"], **dict(family.get("params", {})), **point}


def _check_report_keys(report: list[str], config: Any, n_items: int) -> None:
    """Every reported metric must be one the eval block computes."""
    ks = set(config.eval.ks_for(n_items))
    for key in report:
        name, k = parse_metric_key(key, where="study.report")
        if name not in config.eval.metrics or (k is not None and k not in ks):
            raise ConfigError(f"study.report: {key} is not computed; add {name} to eval.metrics "
                              f"and {k} to eval.ks")


def run(config: Any, run_dir: Path) -> float | None:
    from linrec.data.pipeline import prepare_data

    study = config.study
    prepared = prepare_data(config.data)
    split = prepared.split
    if split.valid is None:
        raise ConfigError("experiment=linear_models selects on the validation users: the data "
                          "split needs validation users (e.g. data/split=strong)")
    report_keys = list(study.report)
    _check_report_keys(report_keys, config, split.n_items)
    # every point is scored on both splits, so that no fitted model (an n x n W for the item-item
    # families) is kept beyond its point; the selection reads the validation split only
    on_both = dataclasses.replace(config.eval, splits=("valid", "test"))
    tables, figures = run_dir / "tables", run_dir / "figures"
    train_matrices: dict[str, sp.csr_matrix] = {"train": split.train}
    main_rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"families": {}}
    profiles: dict[str, np.ndarray] = {}
    grid_figures: list[Path] = []
    selection = None
    for label, family in study.models.items():
        train_on = family.get("train_on", "train")
        if train_on not in train_matrices:
            train_matrices[train_on] = with_foldin_rows(split)
        users_known = train_on == "train_and_foldin" or not split.strong
        grid_rows, best = [], None
        validation = _validation(split, _on_valid(config), config.seed, users_known)
        for point, scorer, seconds in _scorers(family, train_matrices[train_on], label,
                                               config.seed, validation):
            report = evaluate(scorer, split, on_both, seed=config.seed, users_known=users_known)
            selection = report.selection_metric
            write_study_run(run_dir / "runs" / label / point_dir(point), config, prepared,
                            label=label, model=_point_model(family, point), report=report,
                            timings={"fit": seconds, "evaluate": report.seconds}, point=point)
            value = report.splits["valid"].exact[selection]
            grid_rows.append({**point, selection: value})
            if best is None or value > best[1].splits["valid"].exact[selection]:
                best = (point, report)
                profile = _profile(label, scorer, split.train)
                if profile is not None:
                    profiles[label] = profile
            log.info("%s %s: valid %s = %.5f", label, point, selection, value)
            del scorer  # the next point's fit may need its memory
        if best is None:
            raise ConfigError(f"study.models.{label}.grid is empty")
        point, report = best
        valid = report.splits["valid"].exact
        test = report.splits["test"].exact
        main_rows.append({"model": label, "params": ", ".join(f"{k}={v}" for k, v in point.items()),
                          f"valid {selection}": valid[selection],
                          **{f"test {k}": test[k] for k in report_keys}})
        summary["families"][label] = {"grid": grid_rows, "best": point, "valid": valid,
                                      "test": test, "train_on": train_on}
        heatmap = _write_grid(tables, figures, label, grid_rows, selection)
        if heatmap is not None:
            grid_figures.append(heatmap)
    md = write_table(tables, "main", list(main_rows[0]), main_rows,
                     f"Test metrics at the best validation {selection} ({prepared.name})")
    figure = _write_profiles(profiles, figures, summary)
    write_study_index(run_dir, config, dataset_record(prepared), summary,
                      ([figure] if figure else []) + grid_figures)
    if not config.quiet:
        print(md)
        print(f"tables: {tables}")
    return float(max(r[f"valid {selection}"] for r in main_rows))


def _on_valid(config: Any) -> Any:
    """The eval block a family's trainer validates on: the run's, on the validation split."""
    return dataclasses.replace(config.eval, splits=("valid",))


def _write_grid(tables: Path, figures: Path, label: str, rows: list[dict[str, Any]],
                selection: str) -> Path | None:
    """Rows x columns when the grid has two parameters (Tables 14–17, also drawn as a heat map:
    figures/grid_<label>.png and .pdf, whose PNG path is returned), else one row per point."""
    params = [k for k in rows[0] if k != selection]
    if len(params) != 2:
        write_table(tables, f"grid_{label}", list(rows[0]), rows,
                    f"{label}: validation {selection}")
        return None
    from linrec.plots import plot_heatmap, save_figure_formats

    first, second = params
    cols = list(dict.fromkeys(r[second] for r in rows))
    pivot: dict[Any, dict[str, Any]] = {}
    for r in rows:
        pivot.setdefault(r[first], {f"{first} \\ {second}": r[first]})[str(r[second])] = \
            r[selection]
    write_table(tables, f"grid_{label}", [f"{first} \\ {second}", *map(str, cols)],
                list(pivot.values()), f"{label}: validation {selection}")
    values = np.array([[row.get(str(c), np.nan) for c in cols] for row in pivot.values()],
                      dtype=np.float64)
    fig = plot_heatmap(values, list(pivot), cols, first, second,
                       title=f"{label}: validation {selection}")
    return save_figure_formats(fig, figures / f"grid_{label}")[0]


def _has_weights(model: Any) -> bool:
    """Whether a fitted model has an item-item matrix W: its class implements `weights()`
    (the base `Recommender.weights` raises NotImplementedError). Asked of the class, so that
    no dense W is formed just to find out."""
    return isinstance(model, Recommender) and type(model).weights is not Recommender.weights


#: components of the shrinkage profiles (Figure 11 shows the leading ones)
PROFILE_COMPONENTS = 200


def _profile(label: str, model: Any, train: sp.csr_matrix) -> np.ndarray | None:
    """Figure 11 view of one fitted model: the per-component shrinkage f_i = v_iᵀ W v_i over
    the leading PROFILE_COMPONENTS components of G = XᵀX (a spectral family's filter, or the
    diagonal of VᵀWV of a model with an item-item W); None for a model without W (a factor
    model: users fold in non-linearly)."""
    from linrec.models.profile import spectral_profile
    from linrec.models.spectral import FilteredScorer, compute_spectrum

    if not (isinstance(model, FilteredScorer) or _has_weights(model)):
        log.info("no spectral profile for %s: %s has no item-item matrix W", label,
                 type(model).__name__)
        return None
    components = min(PROFILE_COMPONENTS, train.shape[1])
    spectrum = compute_spectrum(train, rank=components)  # a family's cached one when it has it
    if isinstance(model, FilteredScorer):
        f = np.zeros(spectrum.n_components)
        size = min(model.filter_.size, f.size)
        f[:size] = model.filter_[:size]
        return f[:components]
    try:
        return spectral_profile(model, spectrum)[:components]
    except ConfigError as exc:
        log.info("no spectral profile for %s: %s", label, exc)
        return None


def _write_profiles(profiles: Mapping[str, np.ndarray], figures: Path,
                    summary: dict[str, Any]) -> Path | None:
    """The Figure 11 view of the selected models' profiles (figures/spectral_profile.png and
    .pdf, whose PNG path is returned), or None when no model has one."""
    if not profiles:
        return None
    from linrec.plots import plot_spectral_profile, save_figure_formats

    fig = plot_spectral_profile(dict(profiles),
                                title="per-component shrinkage of the selected models")
    path = save_figure_formats(fig, figures / "spectral_profile")[0]
    summary["profiles"] = {k: v.tolist() for k, v in profiles.items()}
    return path
