"""`experiment=sampling_study`: how well each estimator recovers exact metrics from sampled ranks.

Protocol of [S3] AAAI'23 / [S1] ch. 2 (spec/evaluation.md §10.3) and the mapping tables of [S0]
KDD'20 (§10.2). Every model of `study.models` is one run (<run_dir>/runs/<label>/): trained once
and evaluated once with the sampled block of `eval.sampled`, which the preset sets to simulate
`repeats` sampled-rank sets per sample size (and adaptive sets) from the global ranks, exact in
distribution (spec §2.4), with common random numbers across models. From those runs the study
writes, under <run_dir>/tables/: average relative error over K = 1..k_max (mean ± std per
setting, model, metric, estimator), winner accuracy counts, and the SHR@k vs HR@f(k) mapping
tables.
"""

from __future__ import annotations

import dataclasses
import logging
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
    split = prepared.split
    n_items = split.n_items
    eval_config = _eval_config(config, n_items)

    # 1. every model once: one run each, its test split kept for the tables
    tests: dict[str, SplitReport] = {}
    for label, model_config in models.items():
        _, report, timings = fit_and_evaluate(config, model_config, prepared,
                                              eval_config=eval_config)
        write_study_run(run_dir / "runs" / label, config, prepared, label=label,
                        model=model_config.to_dict(), report=report, timings=timings)
        tests[label] = report.splits["test"]
        log.info("sampling study: %s done", label)
    labels = list(tests)
    settings = list(tests[labels[0]].sampled)
    first = tests[labels[0]].sampled[settings[0]]
    metrics, k_max, repeats = first.protocol["metrics"], first.k_max, first.protocol["repeats"]
    tables = run_dir / "tables"
    summary: dict[str, Any] = {"models": labels, "settings": settings, "are": {},
                               "winners": {}, "mapping": {}}

    # 2. average relative error tables (spec §10.3)
    for setting in settings:
        names = list(tests[labels[0]].sampled[setting].curves)
        rows = []
        for label in labels:
            sampled = tests[label].sampled[setting]
            for m in metrics:
                row: dict[str, Any] = {"model": label, "metric": m}
                for name in names:
                    per_repeat = sampled.average_relative_errors(name, m)
                    mean, std = float(np.mean(per_repeat)), float(np.std(per_repeat))
                    row[name] = f"{mean:.2f}±{std:.2f}"
                    summary["are"][f"{setting}/{label}/{m}/{name}"] = {"mean": mean, "std": std}
                rows.append(row)
        write_table(tables, f"are_{setting.replace('=', '')}", ["model", "metric", *names], rows,
                    f"Average relative error (%) over K=1..{k_max}, test split, {setting}, "
                    f"{repeats} repeats")

    # 3. winner accuracy: how often argmax over models of the estimate picks the exact winner
    rows = []
    all_names: list[str] = []
    for setting in settings:
        names = list(tests[labels[0]].sampled[setting].curves)
        all_names += [n for n in names if n not in all_names]
        for m in metrics:
            for k in [k for k in study.winner_ks if k <= k_max]:
                true_values = [tests[label].sampled[setting].exact_curves[m][k - 1]
                               for label in labels]
                row = {"setting": setting, "metric": f"{m}@{k}",
                       "winner": labels[int(np.argmax(true_values))]}
                for name in names:
                    est = np.stack([tests[label].sampled[setting].curves[name][m][:, k - 1]
                                    for label in labels], axis=1)  # (repeats, models)
                    row[name] = winner_accuracy(est, true_values)
                    summary["winners"][f"{setting}/{m}@{k}/{name}"] = row[name]
                rows.append(row)
    write_table(tables, "winners", ["setting", "metric", "winner", *all_names], rows,
                f"Winner accuracy on the test split (out of {repeats} repeats; winner: the best "
                "exact metric)")

    # 4. mapping tables of [S0]: SHR@k vs HR@f(k) on the first sample of each model and n
    error_rows = []
    for setting in (s for s in settings if s != "adaptive"):
        for label in labels:
            sampled_ranks, sample_size = tests[label].sampled[setting].first_sample
            global_ranks = canonical_global_ranks(tests[label].rank_table, split.test)
            ks = [k for k in study.mapping_ks if k <= sample_size]
            rows = [{"k": k} for k in ks]
            for spec in study.mappings:
                f = _mapping(spec, n_items, sample_size, sampled_ranks)
                aligned = aligned_curves(sampled_ranks, f, k_max=sample_size,
                                         global_ranks=global_ranks)
                for row, k in zip(rows, ks, strict=True):
                    row["SHR"] = float(aligned.shr[k - 1])
                    row[f"HR@{spec}"] = float(aligned.hr_at_f[k - 1])
                errors = alignment_errors(aligned.shr, aligned.hr_at_f)
                error_rows.append({"setting": setting, "model": label, "mapping": spec, **errors})
                summary["mapping"][f"{setting}/{label}/{spec}"] = errors
            columns = ["k", "SHR", *[f"HR@{s}" for s in study.mappings]]
            write_table(tables, f"mapping_{label}_{setting.replace('=', '')}", columns, rows,
                        f"SHR@k vs HR@f(k), {label}, {setting}, test split")
    if error_rows:
        write_table(tables, "mapping_errors", list(error_rows[0]), error_rows,
                    "Alignment errors of the mapping functions (spec §4.6), test split")
    write_study_index(run_dir, config, dataset_record(prepared), summary)
    if not config.quiet:
        for path in sorted(tables.glob("are_*.md")) + [tables / "winners.md"]:
            print(path.read_text())
        print(f"tables: {tables}")
    return None
