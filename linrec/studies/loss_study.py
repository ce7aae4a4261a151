"""`experiment=loss_study`: the losses × datasets grid of Table 12 (Li 2023, Table 12) on one MF
backbone.

Every (dataset, loss) of `study.datasets` × `study.models` is one run
(<run_dir>/runs/<dataset>/<loss>/results.json): the run's model block (`model=mf`) with the
loss's fields, trained on the dataset and scored on its test users. The table
(tables/table12.{md,csv}) has the published layout: per dataset Recall@20 and NDCG@20 in %, for
each group of `study.rows` the biased and debiased rows with the relative improvement (RI%) of
the debiased loss, or a loss with its RI% over another (MINE, MINE+ over InfoNCE), and the
average RI% over the cells.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from linrec.data.configs import DataConfig
from linrec.errors import ConfigError
from linrec.fitting import fit_and_evaluate, training_record
from linrec.studies.common import (
    dataset_record,
    write_study_index,
    write_study_run,
    write_table,
)

log = logging.getLogger("linrec")
#: the key of a run's selection value among its results (beside its (dataset, metric) values)
SELECTION = "selection"


def _merged(fields: dict[str, Any], entry: dict[str, Any], *, replace_loss: bool
            ) -> dict[str, Any]:
    """`fields` with `entry` over them, nested mappings merged (`loss` replaced whole when
    `replace_loss`: an entry that names its loss brings all of its fields)."""
    merged = dict(fields)
    for key, value in entry.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) \
                and not (replace_loss and key == "loss"):
            merged[key] = _merged(merged[key], value, replace_loss=False)
        else:
            merged[key] = value
    return merged


def _model_configs(config: Any, dataset: str) -> dict[str, Any]:
    """label -> the run's model config with the label's fields and, for `dataset`, its
    `study.per_dataset` fields (nested mappings merged)."""
    from linrec.models.registry import model_config

    base = config.model
    if base is None or "loss" not in base.names():
        raise ConfigError("experiment=loss_study trains a model with a loss: choose model=mf")
    fields = base.to_dict()
    fields.pop("name")
    specific = config.study.per_dataset.get(dataset, {})
    out = {}
    for label, entry in config.study.models.items():
        for where, values in ((f"study.models.{label}", entry),
                              (f"study.per_dataset.{dataset}.{label}", specific.get(label, {}))):
            if not isinstance(values, dict):
                raise ConfigError(f"{where}={values!r} must be a mapping of {base.name} fields")
        merged = _merged(_merged(fields, entry, replace_loss=True), specific.get(label, {}),
                         replace_loss=False)
        if "seed" in merged and "seed" not in entry:
            merged["seed"] = config.seed
        out[label] = model_config(base.name, **merged)
    return out


def _percent_row(values: dict[str, float], datasets: list[str], metrics: list[str]
                 ) -> dict[str, Any]:
    return {f"{ds} {m}": 100 * values[(ds, m)] for ds in datasets for m in metrics}


def _selection_cells(values: dict[tuple[str, str], float], columns: dict[str, str]
                     ) -> dict[str, Any]:
    """Each dataset's selection value in % (the number the run's epochs were chosen on), in
    its column `<dataset> <metric> (<split>)`."""
    return {column: 100 * values[(ds, SELECTION)] for ds, column in columns.items()}


def _ri(new: dict, old: dict, datasets: list[str], metrics: list[str]) -> dict[str, Any]:
    cells = {f"{ds} {m}": 100 * (new[(ds, m)] - old[(ds, m)]) / old[(ds, m)]
             if old[(ds, m)] else float("nan") for ds in datasets for m in metrics}
    return {**{k: f"{v:.2f}%" for k, v in cells.items()},
            "Average RI%": f"{np.nanmean(list(cells.values())):.2f}%"}


def run(config: Any, run_dir: Path) -> None:
    from linrec.data.pipeline import prepare_data

    study = config.study
    datasets = {label: DataConfig.from_mapping(values, where=f"study.datasets.{label}")
                for label, values in study.datasets.items()}
    # every model of every dataset checked before any data is loaded
    per_dataset = {label: _model_configs(config, label) for label in datasets}
    models = per_dataset[next(iter(datasets))]
    metrics = list(study.metrics)
    results: dict[str, dict[tuple[str, str], float]] = {label: {} for label in models}
    selection_columns: dict[str, str] = {}  # dataset -> its selection column
    prepared: dict[str, Any] = {}
    for ds_label, data_config in datasets.items():
        prepared[ds_label] = prepare_data(data_config)
        for label, model_config in per_dataset[ds_label].items():
            model, report, timings = fit_and_evaluate(config, model_config, prepared[ds_label])
            write_study_run(run_dir / "runs" / ds_label / label, config, prepared[ds_label],
                            label=label, model=model_config.to_dict(), report=report,
                            timings=timings, data=data_config,
                            point={"dataset": ds_label, "loss": model_config.loss.name},
                            training=training_record(model))
            test = report.splits["test"].exact
            missing = [m for m in metrics if m not in test]
            if missing:
                raise ConfigError(f"study.metrics {missing} are not computed; add them to "
                                  "eval.metrics / eval.ks")
            for m in metrics:
                results[label][(ds_label, m)] = test[m]
            results[label][(ds_label, SELECTION)] = report.selection_value
            selection_columns[ds_label] = \
                f"{ds_label} {report.selection_metric} ({report.selection_split})"
            log.info("loss study: %s / %s: %s", ds_label, label,
                     ", ".join(f"{m} {test[m]:.4f}" for m in metrics))
    names = list(datasets)
    rows = []
    for group in study.rows:
        if "biased" in group:
            biased, debiased = results[group["biased"]], results[group["debiased"]]
            rows.append({"Loss": group["name"], "Row": "biased",
                         **_percent_row(biased, names, metrics),
                         **_selection_cells(biased, selection_columns)})
            rows.append({"Loss": group["name"], "Row": "debiased",
                         **_percent_row(debiased, names, metrics),
                         **_selection_cells(debiased, selection_columns)})
            rows.append({"Loss": group["name"], "Row": "RI%",
                         **_ri(debiased, biased, names, metrics)})
        else:
            rows.append({"Loss": group["name"], "Row": "—",
                         **_percent_row(results[group["loss"]], names, metrics),
                         **_selection_cells(results[group["loss"]], selection_columns)})
            rows.append({"Loss": group["name"], "Row": f"RI% (w.r.t. {group['against']})",
                         **_ri(results[group["loss"]], results[group["against"]], names,
                               metrics)})
    columns = ["Loss", "Row", *[f"{ds} {m}" for ds in names for m in metrics],
               *selection_columns.values(), "Average RI%"]
    md = write_table(run_dir / "tables", "table12", columns, rows,
                     "Losses on MF: test split metrics in % (Table 12 layout), and the selection "
                     "value in % each run was chosen on (its split in the column name)")
    summary = {"results": {label: {f"{ds}/{m}": v for (ds, m), v in values.items()
                                   if m != SELECTION} for label, values in results.items()},
               "selection": {label: {ds: v for (ds, m), v in values.items() if m == SELECTION}
                             for label, values in results.items()}}
    write_study_index(run_dir, config, {label: dataset_record(p) for label, p in prepared.items()},
                      summary)
    if not config.quiet:
        print(md)
        print(f"tables: {run_dir / 'tables'}")
