"""`experiment=linear_models`: the protocol of Tables 8/9 and the grids of Tables 14–17 of the
dissertation's chapter 3 (spec/linear_models.md §1.3, §5, §7).

Strong generalization. Every model family has a grid; each point is scored on the validation users
(selection metric, default nDCG@100), the best point is scored on the test users, and the report
gives test Recall@20, Recall@50 (`recall_trunc`, the min(K, |T|) denominator of Liang et al.) and
nDCG@100. Spectral families (lrr, mf_closed, puresvd, ridge) share one eigendecomposition per
training matrix and one projection `foldin @ V` of the evaluation users (Algorithm 2).
`train_on: train_and_foldin` trains a family on the training users plus the fold-in rows of the
validation and test users (the MF/WMF protocol of A.1.1); the others train on training users only.
Writes <run_dir>/tables/{main,grid_<family>}.{csv,md}, figures/spectral_profile.png, study.json.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.config import parse_metric_key
from linrec.data.splits import EvalSet, Split
from linrec.errors import ConfigError
from linrec.eval.evaluator import evaluate_split
from linrec.results import write_json_atomic
from linrec.studies.common import (
    build_from_config,
    check_study_fields,
    fit_timed,
    write_table,
)

log = logging.getLogger("linrec")
TRAIN_ON = ("train", "train_and_foldin")
STUDY_FIELDS = {"name": "str", "selection": "str", "report": "tuple[str, ...]", "models": "mapping"}
FAMILY_FIELDS = ("model", "grid", "params", "train_on")


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


def _scorers(family: Mapping[str, Any], train: sp.csr_matrix,
             label: str) -> Iterator[tuple[dict[str, Any], Any]]:
    """(grid point, fitted scorer) for every point of a family's grid."""
    from linrec.models.registry import model_class
    from linrec.models.spectral import SpectralFilterModel, compute_spectrum, spectral_grid

    name = family["model"]
    grid = dict(family.get("grid", {}))
    fixed = dict(family.get("params", {}))
    if issubclass(model_class(name), SpectralFilterModel) and "gamma" not in fixed and not \
            fixed.get("dropout"):
        spectrum = compute_spectrum(train)
        values = {k: (v if isinstance(v, (list, tuple)) else [v]) for k, v in grid.items()}
        yield from spectral_grid(name, spectrum, values, **fixed)
        return
    for point in _grid_points(grid):
        model = build_from_config({"name": name, **fixed, **point}, label)
        fit_timed(model, train, f"{label} {point}")
        yield point, model


def _evaluate(scorer, evalset: EvalSet, ks, metrics, seed: int, users_known: bool):
    return evaluate_split(scorer, evalset, ks=ks, metrics=metrics, seed=seed,
                          users_known=users_known).metrics


def run(config: dict[str, Any], run_dir: Path) -> float | None:
    from linrec.data.pipeline import prepare_data

    study = check_study_fields(config["study"], STUDY_FIELDS, optional=("selection", "report"))
    for label, family in study["models"].items():
        if not isinstance(family, Mapping) or not isinstance(family.get("model"), str):
            raise ConfigError(f"study.models.{label}={family!r} must be a mapping with a 'model'"
                              " name (and optional grid, params, train_on)")
        unknown = sorted(set(family) - set(FAMILY_FIELDS))
        if unknown:
            raise ConfigError(f"study.models.{label}: unknown field(s) {unknown}; allowed: "
                              f"{list(FAMILY_FIELDS)}")
    seed = int(config.get("seed", 0))
    selection = study.get("selection", "ndcg@100")
    report = list(study.get("report", ["recall_trunc@20", "recall_trunc@50", "ndcg@100"]))
    keys = [parse_metric_key(k, field_name="study.report") for k in [selection, *report]]
    metrics = sorted({name for name, _ in keys})
    ks = sorted({k for _, k in keys if k is not None}) or [1]
    prepared = prepare_data(config["data"])
    split = prepared.split
    if split.valid is None:
        raise ConfigError("experiment=linear_models selects on the validation users: the data "
                          "split needs validation users (e.g. data/split=strong)")
    tables, figures = run_dir / "tables", run_dir / "figures"
    train_matrices: dict[str, sp.csr_matrix] = {"train": split.train}
    main_rows, record = [], {"dataset": {"name": prepared.name, **prepared.stats},
                             "selection": selection, "families": {}}
    best_models: dict[str, Any] = {}
    for label, family in study["models"].items():
        train_on = family.get("train_on", "train")
        if train_on not in TRAIN_ON:
            raise ConfigError(f"study.models.{label}.train_on={train_on!r}; allowed: {TRAIN_ON}")
        if train_on not in train_matrices:
            train_matrices[train_on] = with_foldin_rows(split)
        users_known = train_on == "train_and_foldin" or not split.strong
        grid_rows, best = [], None
        for point, scorer in _scorers(family, train_matrices[train_on], label):
            valid = _evaluate(scorer, split.valid, ks, metrics, seed, users_known)
            grid_rows.append({**point, selection: valid[selection]})
            if best is None or valid[selection] > best[2][selection]:
                best = (point, scorer, valid)
            log.info("%s %s: valid %s = %.5f", label, point, selection, valid[selection])
        if best is None:
            raise ConfigError(f"study.models.{label}.grid is empty")
        point, scorer, valid = best
        test = _evaluate(scorer, split.test, ks, metrics, seed, users_known)
        best_models[label] = scorer
        main_rows.append({"model": label, "params": ", ".join(f"{k}={v}" for k, v in point.items()),
                          f"valid {selection}": valid[selection],
                          **{f"test {k}": test[k] for k in report}})
        record["families"][label] = {"grid": grid_rows, "best": point, "valid": valid,
                                     "test": test, "train_on": train_on}
        _write_grid(tables, label, grid_rows, selection)
    md = write_table(tables, "main", list(main_rows[0]), main_rows,
                     f"Test metrics at the best validation {selection} ({prepared.name})")
    _write_profiles(best_models, split.train, figures, record)
    write_json_atomic(run_dir / "study.json", record)
    if not config.get("quiet", False):
        print(md)
        print(f"tables: {tables}")
    return float(max(r[f"valid {selection}"] for r in main_rows))


def _write_grid(tables: Path, label: str, rows: list[dict[str, Any]], selection: str) -> None:
    """Rows x columns when the grid has two parameters (Tables 14–17), else one row per point."""
    params = [k for k in rows[0] if k != selection]
    if len(params) == 2:
        first, second = params
        cols = list(dict.fromkeys(r[second] for r in rows))
        pivot: dict[Any, dict[str, Any]] = {}
        for r in rows:
            pivot.setdefault(r[first], {f"{first} \\ {second}": r[first]})[str(r[second])] = \
                r[selection]
        write_table(tables, f"grid_{label}", [f"{first} \\ {second}", *map(str, cols)],
                    list(pivot.values()), f"{label}: validation {selection}")
    else:
        write_table(tables, f"grid_{label}", list(rows[0]), rows,
                    f"{label}: validation {selection}")


def _write_profiles(models: Mapping[str, Any], train: sp.csr_matrix, figures: Path,
                    record: dict[str, Any]) -> None:
    """Figure 11 view: per-component shrinkage f_i = v_iᵀ W v_i of every item-item model."""
    from linrec.models.profile import spectral_profile
    from linrec.models.spectral import FilteredScorer, compute_spectrum
    from linrec.plots import plot_spectral_profile

    spectrum = compute_spectrum(train)
    profiles = {}
    for label, model in models.items():
        if type(model).__module__ == "linrec.models.als":
            continue  # factor models fold users in non-linearly: no item-item W to profile
        try:
            if isinstance(model, FilteredScorer) and model.projections.spectrum is spectrum:
                f = np.zeros(spectrum.n_components)
                f[: model.filter_.size] = model.filter_
            else:
                f = spectral_profile(model, spectrum)
        except ConfigError as exc:
            log.info("no spectral profile for %s: %s", label, exc)
            continue
        profiles[label] = f
    if profiles:
        plot_spectral_profile(profiles, title="per-component shrinkage of the selected models",
                              path=figures / "spectral_profile.png")
        record["profiles"] = {k: v[:200].tolist() for k, v in profiles.items()}
