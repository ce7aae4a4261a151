"""`experiment=sampling_study`: how well each estimator recovers exact metrics from sampled ranks.

Protocol of Li et al. 2023 (Tables 1–11; Li 2023, ch. 2) and the mapping tables of Li et al. 2020
(Tables 5–7). Every model of `study.models` is one run (<run_dir>/runs/<label>/): trained once and
evaluated once with the sampled block of `eval.sampled`, which the preset sets to simulate `repeats`
sampled-rank sets per sample size (and adaptive sets) from the global ranks, exact in distribution
(docs/concepts/sampled.md), with common random numbers across models. From those runs the study
writes, under <run_dir>/tables/: average relative error over K = 1..k_max (mean ± std per setting,
model, metric, estimator), winner accuracy counts, and the SHR@k vs HR@f(k) mapping tables.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from linrec.errors import ConfigError
from linrec.eval.estimators.accuracy import winner_accuracy
from linrec.eval.estimators.mapping import aligned_curves, alignment_errors, mapping_function
from linrec.eval.report import SplitReport
from linrec.eval.sampled_block import canonical_global_ranks
from linrec.fitting import fit_and_evaluate
from linrec.studies.common import (
    dataset_record,
    study_model_config,
    write_study_index,
    write_study_run,
    write_table,
)

log = logging.getLogger("linrec")


def _mapping(spec: str, n_items: int, sample_size: int, sampled_ranks: np.ndarray) -> np.ndarray:
    """'linear' | 'bound' | 'beta@0.5' | 'beta_p' -> f(1..n)."""
    kind, _, a = spec.partition("@")
    if kind == "beta":
        return mapping_function("beta", n_items, sample_size, a=float(a))
    if kind == "beta_p":
        return mapping_function("beta_p", n_items, sample_size, sampled_ranks=sampled_ranks)
    return mapping_function(kind, n_items, sample_size)


def _eval_config(config: Any, n_items: int) -> Any:
    """The run's eval block on the test split, sample sizes not below n_items dropped."""
    sampled = config.eval.sampled
    if not sampled.enabled:
        raise ConfigError("experiment=sampling_study needs eval.sampled.enabled=true")
    sizes = tuple(n for n in sampled.sample_sizes if n < n_items)
    skipped = [n for n in sampled.sample_sizes if n >= n_items]
    if skipped:
        log.warning("sample sizes %s are not below n_items=%d and are skipped", skipped, n_items)
    if not sizes and not sampled.adaptive.estimators:
        raise ConfigError(f"eval.sampled.sample_sizes={list(sampled.sample_sizes)}: none is "
                          f"below n_items={n_items}")
    sampled = dataclasses.replace(sampled, sample_sizes=sizes or sampled.sample_sizes,
                                  estimators=sampled.estimators if sizes else ())
    return dataclasses.replace(config.eval, splits=("test",), sampled=sampled)


def run(config: Any, run_dir: Path) -> None:
    from linrec.data.pipeline import prepare_data

    study = config.study
    models = {label: study_model_config(values, label, config.seed)  # all checked before a fit
              for label, values in study.models.items()}
    prepared = prepare_data(config.data)
    eval_config = _eval_config(config, prepared.split.n_items)
    tests: dict[str, SplitReport] = {}  # every model once, its test split kept for the tables
    for label, model_config in models.items():
        _, report, timings = fit_and_evaluate(config, model_config, prepared,
                                              eval_config=eval_config)
        write_study_run(run_dir / "runs" / label, config, prepared, label=label,
                        model=model_config.to_dict(), report=report, timings=timings)
        tests[label] = report.splits["test"]
        log.info("sampling study: %s done", label)
    tables = run_dir / "tables"
    summary: dict[str, Any] = {"models": list(tests), "settings": list(_first(tests).sampled),
                               "are": _error_tables(tests, tables),
                               "winners": _winner_table(tests, study.winner_ks, tables),
                               "mapping": _mapping_tables(tests, prepared.split, study, tables)}
    write_study_index(run_dir, config, dataset_record(prepared), summary)
    if not config.quiet:
        for path in sorted(tables.glob("are_*.md")) + [tables / "winners.md"]:
            print(path.read_text())
        print(f"tables: {tables}")
    return None


def _first(tests: dict[str, SplitReport]) -> SplitReport:
    return next(iter(tests.values()))


def _protocol(tests: dict[str, SplitReport]) -> tuple[list[str], int, int]:
    """(metrics, K max, repeats) of the sampled settings (the same for every model)."""
    first = next(iter(_first(tests).sampled.values()))
    return first.protocol["metrics"], first.k_max, first.protocol["repeats"]


def _error_tables(tests: dict[str, SplitReport], tables: Path) -> dict[str, Any]:
    """One table per sampled setting: the average relative error over K = 1..K max of every
    estimator, mean ± std over the repeats, per model and metric (Li et al. 2023, Tables 1–11)."""
    metrics, k_max, repeats = _protocol(tests)
    summary = {}
    for setting in _first(tests).sampled:
        names = list(_first(tests).sampled[setting].curves)
        rows = []
        for label, test in tests.items():
            sampled = test.sampled[setting]
            for m in metrics:
                row: dict[str, Any] = {"model": label, "metric": m}
                for name in names:
                    per_repeat = sampled.average_relative_errors(name, m)
                    mean, std = float(np.mean(per_repeat)), float(np.std(per_repeat))
                    row[name] = f"{mean:.2f}±{std:.2f}"
                    summary[f"{setting}/{label}/{m}/{name}"] = {"mean": mean, "std": std}
                rows.append(row)
        write_table(tables, f"are_{setting.replace('=', '')}", ["model", "metric", *names], rows,
                    f"Average relative error (%) over K=1..{k_max}, test split, {setting}, "
                    f"{repeats} repeats")
    return summary


def _winner_table(tests: dict[str, SplitReport], winner_ks: Sequence[int],
                  tables: Path) -> dict[str, Any]:
    """How often the argmax over models of each estimate picks the exact winner, per setting,
    metric and K."""
    metrics, k_max, repeats = _protocol(tests)
    labels = list(tests)
    rows, all_names, summary = [], [], {}
    for setting in _first(tests).sampled:
        names = list(_first(tests).sampled[setting].curves)
        all_names += [n for n in names if n not in all_names]
        for m in metrics:
            for k in [k for k in winner_ks if k <= k_max]:
                true_values = [tests[label].sampled[setting].exact_curves[m][k - 1]
                               for label in labels]
                row = {"setting": setting, "metric": f"{m}@{k}",
                       "winner": labels[int(np.argmax(true_values))]}
                for name in names:
                    est = np.stack([tests[label].sampled[setting].curves[name][m][:, k - 1]
                                    for label in labels], axis=1)  # (repeats, models)
                    row[name] = winner_accuracy(est, true_values)
                    summary[f"{setting}/{m}@{k}/{name}"] = row[name]
                rows.append(row)
    write_table(tables, "winners", ["setting", "metric", "winner", *all_names], rows,
                f"Winner accuracy on the test split (out of {repeats} repeats; winner: the best "
                "exact metric)")
    return summary


def _mapping_tables(tests: dict[str, SplitReport], split: Any, study: Any,
                    tables: Path) -> dict[str, Any]:
    """The mapping tables of Li et al. 2020: SHR@k vs HR@f(k) on the first sample of each model and
    n, per mapping function, and their alignment errors."""
    error_rows, summary = [], {}
    for setting in (s for s in _first(tests).sampled if s != "adaptive"):
        for label, test in tests.items():
            sampled_ranks, sample_size = test.sampled[setting].first_sample
            global_ranks = canonical_global_ranks(test.rank_table, split.test)
            ks = [k for k in study.mapping_ks if k <= sample_size]
            rows = [{"k": k} for k in ks]
            for spec in study.mappings:
                f = _mapping(spec, split.n_items, sample_size, sampled_ranks)
                aligned = aligned_curves(sampled_ranks, f, k_max=sample_size,
                                         global_ranks=global_ranks)
                for row, k in zip(rows, ks, strict=True):
                    row["SHR"] = float(aligned.shr[k - 1])
                    row[f"HR@{spec}"] = float(aligned.hr_at_f[k - 1])
                errors = alignment_errors(aligned.shr, aligned.hr_at_f)
                error_rows.append({"setting": setting, "model": label, "mapping": spec, **errors})
                summary[f"{setting}/{label}/{spec}"] = errors
            columns = ["k", "SHR", *[f"HR@{s}" for s in study.mappings]]
            write_table(tables, f"mapping_{label}_{setting.replace('=', '')}", columns, rows,
                        f"SHR@k vs HR@f(k), {label}, {setting}, test split")
    if error_rows:
        write_table(tables, "mapping_errors", list(error_rows[0]), error_rows,
                    "Alignment errors of the mapping functions (Li et al. 2020, App. A), "
                    "test split")
    return summary
