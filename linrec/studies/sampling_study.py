"""`experiment=sampling_study`: how well each estimator recovers exact metrics from sampled ranks.

Protocol of Li et al. 2023 (Tables 1–11; Li 2023, ch. 2) and the mapping tables of Li et al. 2020
(Tables 5–7). Every model of `study.models` is one run (<run_dir>/runs/<label>/): trained once and
evaluated once with the sampled block of `eval.sampled`, which the preset sets to simulate `repeats`
sampled-rank sets per sample size (and adaptive sets) from the global ranks, exact in distribution
(docs/concepts/sampled.md), with common random numbers across models. From those runs the study
writes, under <run_dir>/tables/: average relative error over K = 1..k_max (mean ± std per setting,
model, metric, estimator), winner accuracy counts, the SHR@k vs HR@f(k) mapping tables, and item
sampling against user sampling (Li 2023, Tables 6–7).

With `study.runs` the study trains nothing: it reads the test ranks.npz of saved runs (of one
dataset and split; any model, any sweep) and simulates their sampled ranks the same way, so the
tables describe the models a researcher actually trained.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.data.splits import EvalSet, Split
from linrec.errors import ConfigError
from linrec.eval.estimators.accuracy import (
    average_relative_error,
    order_agreement,
    winner_accuracy,
)
from linrec.eval.estimators.mapping import aligned_curves, alignment_errors, mapping_function
from linrec.eval.metrics import exact_metrics
from linrec.eval.negatives import canonical_targets
from linrec.eval.ranks import RankTable
from linrec.eval.report import SplitReport
from linrec.eval.sampled_block import SampledBlock, canonical_global_ranks
from linrec.eval.significance import ranks_curve, sampled_users_targets
from linrec.fitting import fit_and_evaluate
from linrec.results import RANKS_FILE, RESULTS_FILE, read_results, run_files
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
    study = config.study
    _check_user_sampling(config)
    saved = _saved_runs(study.runs) if study.runs else []
    if saved:
        tests, test_set, dataset = _saved_tests(config, saved)
    else:
        tests, test_set, dataset = _trained_tests(config, run_dir)
    tables = run_dir / "tables"
    summary: dict[str, Any] = {"models": list(tests), "settings": list(_first(tests).sampled),
                               "are": _error_tables(tests, tables),
                               "winners": _winner_table(tests, study.winner_ks, tables),
                               "order": _order_table(tests, study.winner_ks, tables),
                               "mapping": _mapping_tables(tests, test_set, study, tables),
                               "user_sampling": _user_sampling_table(
                                   tests, test_set, study, _user_sampling_estimator(config),
                                   config.seed, tables)}
    if saved:
        summary["saved_runs"] = {label: str(path) for label, path in saved}
    write_study_index(run_dir, config, dataset, summary)
    if not config.quiet:
        for path in [*sorted(tables.glob("are_*.md")), tables / "winners.md",
                     *tables.glob("order.md")]:  # no order table for a single model
            print(path.read_text())
        print(f"tables: {tables}")
    return None


def _trained_tests(config: Any, run_dir: Path
                   ) -> tuple[dict[str, SplitReport], Any, dict[str, Any]]:
    """Every model of `study.models` trained and evaluated once (a run each under runs/):
    (label -> its test SplitReport, the split, the dataset record)."""
    from linrec.data.pipeline import prepare_data

    models = {label: study_model_config(values, label, config.seed)  # all checked before a fit
              for label, values in config.study.models.items()}
    prepared = prepare_data(config.data)
    eval_config = _eval_config(config, prepared.split.n_items)
    tests: dict[str, SplitReport] = {}
    for label, model_config in models.items():
        _, report, timings = fit_and_evaluate(config, model_config, prepared,
                                              eval_config=eval_config)
        write_study_run(run_dir / "runs" / label, config, prepared, label=label,
                        model=model_config.to_dict(), report=report, timings=timings)
        tests[label] = report.splits["test"]
        log.info("sampling study: %s done", label)
    return tests, prepared.split, dataset_record(prepared)


def _saved_runs(paths: Sequence[str]) -> list[tuple[str, Path]]:
    """(label, run directory) of every saved run below `paths` with a results.json and a
    ranks.npz. An entry is a path or `label:path`. A path that is a run is labelled by `label`,
    else by its name; the runs below a directory by their path under it (after `label/`)."""
    found: list[tuple[str, Path]] = []
    for entry in paths:
        label, given = _labelled_path(entry)
        if (given / RESULTS_FILE).is_file() and (given / RANKS_FILE).is_file():
            found.append((label or given.name, given))
            continue
        if not given.is_dir():
            raise ConfigError(f"study.runs: {given} is neither a run directory (results.json "
                              "and ranks.npz) nor a directory holding runs")
        below = [p.parent for p in run_files(given, RESULTS_FILE)
                 if (p.parent / RANKS_FILE).is_file()]
        if not below:
            raise ConfigError(f"study.runs: no run with a ranks.npz below {given}")
        prefix = f"{label}/" if label else ""
        found += [(prefix + str(p.relative_to(given)), p) for p in below]
    labels = [label for label, _ in found]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ConfigError(f"study.runs: runs share the labels {repeated}; label them "
                          "(label:path) or give their parent directories, whose paths below "
                          "tell them apart")
    return found


def _labelled_path(entry: str) -> tuple[str | None, Path]:
    """A `study.runs` entry as (label, path): `label:path` with a label of letters, digits and
    `_.+-`, or (None, path) for a plain path; an entry that exists as written is a path."""
    label, colon, path = entry.partition(":")
    if colon and path and re.fullmatch(r"[\w.+-]+", label) and not Path(entry).exists():
        return label, Path(path)
    return None, Path(entry)


def _saved_tests(config: Any, runs: Sequence[tuple[str, Path]]
                 ) -> tuple[dict[str, SplitReport], Any, dict[str, Any]]:
    """The test split of every saved run (`_saved_runs`: label, directory), read from its
    ranks.npz (nothing is trained): the sampled settings simulated from the global ranks, as a
    training study does; (label -> its test SplitReport, the held-out items as an EvalSet, the
    dataset record)."""
    if config.eval.sampled.method != "simulate":
        raise ConfigError("study.runs: saved runs keep their global ranks, not their scores, so "
                          "the sampled ranks are simulated from them: "
                          "eval.sampled.method=simulate (the preset's)")
    tests: dict[str, SplitReport] = {}
    test_set, dataset, first = None, {}, None
    for label, path in runs:
        table = RankTable.load_npz(path / RANKS_FILE)
        if first is None:
            first, test_set = (label, path), _held_out(table)
            dataset = read_results(path / RESULTS_FILE).get("dataset", {})
            eval_config = _eval_config(config, table.n_items)
            block = SampledBlock(eval_config.sampled, test_set, table.n_items)
        elif table.n_items != block.n_items or not _same_targets(table, test_set):
            raise ConfigError(f"study.runs: {path} was evaluated on other held-out items than "
                              f"{first[1]} (another dataset or split); a study compares runs of "
                              "one split")
        exact = exact_metrics(table, eval_config.ks_for(table.n_items), eval_config.metrics)
        tests[label] = SplitReport(name="test", n_users=int(len(np.unique(table.rows))),
                                   exact=exact.means, rank_table=table, per_user=exact.per_user,
                                   per_user_rows=exact.rows, sampled=block.settings(table))
        log.info("sampling study: %s read from %s", label, path)
    return tests, Split(train=sp.csr_matrix((test_set.n_users, table.n_items)), valid=None,
                        test=test_set), dataset


def _held_out(table: RankTable) -> EvalSet:
    """The held-out items of a rank table as an EvalSet (no fold-in rows: simulated sampling
    needs only the targets)."""
    n_rows = int(table.rows.max()) + 1 if len(table) else 0
    users = np.zeros(n_rows, dtype=np.int64)
    users[table.rows] = table.users
    targets = sp.csr_matrix((np.ones(len(table), np.float32), (table.rows, table.items)),
                            shape=(n_rows, table.n_items))
    return EvalSet(users=users, foldin=sp.csr_matrix((n_rows, table.n_items), dtype=np.float32),
                   targets=targets)


def _same_targets(table: RankTable, test_set: EvalSet) -> bool:
    rows, items = canonical_targets(test_set)
    order = np.lexsort((table.items, table.rows))
    return bool(np.array_equal(table.rows[order], rows)
                and np.array_equal(table.items[order], items))


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


def _per_cut_off(tests: dict[str, SplitReport], winner_ks: Sequence[int]
                 ) -> Iterator[tuple[str, str, np.ndarray, dict[str, np.ndarray]]]:
    """(setting, metric@K, the exact values (models,), {estimator: its estimates (repeats,
    models)}) for every setting, metric and K of winner_ks, models in the order of `tests`."""
    metrics, k_max, _ = _protocol(tests)
    labels = list(tests)
    for setting in _first(tests).sampled:
        names = list(_first(tests).sampled[setting].curves)
        for m in metrics:
            for k in [k for k in winner_ks if k <= k_max]:
                true_values = np.array([tests[label].sampled[setting].exact_curves[m][k - 1]
                                        for label in labels])
                estimates = {name: np.stack([tests[label].sampled[setting].curves[name][m][
                    :, k - 1] for label in labels], axis=1) for name in names}
                yield setting, f"{m}@{k}", true_values, estimates


def _estimator_names(tests: dict[str, SplitReport]) -> list[str]:
    """Every estimator of any setting, in the order first met (a table's columns)."""
    names: list[str] = []
    for report in _first(tests).sampled.values():
        names += [n for n in report.curves if n not in names]
    return names


def _winner_table(tests: dict[str, SplitReport], winner_ks: Sequence[int],
                  tables: Path) -> dict[str, Any]:
    """How often the argmax over models of each estimate picks the exact winner, per setting,
    metric and K."""
    labels, repeats = list(tests), _protocol(tests)[2]
    rows, summary = [], {}
    for setting, cut, true_values, estimates in _per_cut_off(tests, winner_ks):
        row = {"setting": setting, "metric": cut, "winner": labels[int(np.argmax(true_values))]}
        for name, est in estimates.items():
            row[name] = winner_accuracy(est, true_values)
            summary[f"{setting}/{cut}/{name}"] = row[name]
        rows.append(row)
    write_table(tables, "winners", ["setting", "metric", "winner", *_estimator_names(tests)],
                rows, f"Winner accuracy on the test split (out of {repeats} repeats; winner: "
                "the best exact metric)")
    return summary


def _order_table(tests: dict[str, SplitReport], winner_ks: Sequence[int],
                 tables: Path) -> dict[str, Any]:
    """Does each estimate order all the models as the exact metric does: Kendall's τ_b between
    the two, mean over the repeats, and the repeats with every pair in the exact order, per
    setting, metric and K (the cut-offs of the winner table); none for a single model."""
    if len(tests) < 2:
        return {}
    repeats = _protocol(tests)[2]
    rows, summary = [], {}
    for setting, cut, true_values, estimates in _per_cut_off(tests, winner_ks):
        row = {"setting": setting, "metric": cut}
        for name, est in estimates.items():
            tau, same = order_agreement(est, true_values)
            row[name] = f"{tau:.3f} ({same})"
            summary[f"{setting}/{cut}/{name}"] = {"tau": tau, "exact_order": same}
        rows.append(row)
    write_table(tables, "order", ["setting", "metric", *_estimator_names(tests)], rows,
                f"Order of the {len(tests)} models, test split: Kendall's τ_b between each "
                f"estimate and the exact metric, mean over {repeats} repeats (in brackets: "
                "repeats that order every pair as the exact metric does)")
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
            stem = f"mapping_{label.replace('/', '__')}_{setting.replace('=', '')}"
            write_table(tables, stem, columns, rows,
                        f"SHR@k vs HR@f(k), {label}, {setting}, test split")
    if error_rows:
        write_table(tables, "mapping_errors", list(error_rows[0]), error_rows,
                    "Alignment errors of the mapping functions (Li et al. 2020, App. A), "
                    "test split")
    return summary


def _user_sampling_estimator(config: Any) -> str | None:
    """The estimator the user-sampling table sets beside user sampling: the one named, else
    mn_mes when the sampled block runs it, else the last it runs (None: it runs none)."""
    named, run = config.study.user_sampling_estimator, config.eval.sampled.estimators
    if named is not None:
        return named
    return "mn_mes" if "mn_mes" in run else (run[-1] if run else None)


def _check_user_sampling(config: Any) -> None:
    """A named user-sampling estimator is one the sampled block runs (checked before any
    fit)."""
    study, sampled = config.study, config.eval.sampled
    if (study.user_samples and sampled.sample_sizes and study.user_sampling_estimator is not None
            and study.user_sampling_estimator not in sampled.estimators):
        raise ConfigError(f"study.user_sampling_estimator={study.user_sampling_estimator!r} is "
                          f"not among eval.sampled.estimators={list(sampled.estimators)}; name "
                          "one of them, or set study.user_samples=[] to skip the table")


#: the tag of the user-sampling draws' seed stream (default_rng([seed, tag, repeat]))
_USER_SAMPLING_SEED_TAG = 0x05E2


def _user_sampling_table(tests: dict[str, SplitReport], split: Any, study: Any,
                         name: str | None, seed: int, tables: Path) -> dict[str, Any]:
    """Item sampling against user sampling (Li 2023, §2.8.6, Tables 6–7): per model and metric,
    the average relative error over K = 1..K max of estimator `name` at each fixed sample size
    (no item columns when name is None), beside the exact metric of m randomly drawn users
    (every target of each, ranked among all items) for each m of `study.user_samples`, mean ±
    std over the repeats. The users drawn in a repeat are the same for every model."""
    if not study.user_samples:
        return {}
    metrics, k_max, repeats = _protocol(tests)
    target_users, _ = canonical_targets(split.test)  # a test row is a user
    n_users = int(np.unique(target_users).size)
    sizes = [m for m in study.user_samples if m < n_users]
    if len(sizes) < len(study.user_samples):
        log.warning("user samples %s are not below the %d test users and are skipped",
                    [m for m in study.user_samples if m >= n_users], n_users)
    item_settings = [s for s in _first(tests).sampled if s != "adaptive"] if name else []
    global_ranks = {label: canonical_global_ranks(test.rank_table, split.test)
                    for label, test in tests.items()}
    exact = {label: next(iter(test.sampled.values())).exact_curves
             for label, test in tests.items()}
    errors = {(label, m, size): [] for label in tests for m in metrics for size in sizes}
    for repeat in range(repeats):
        rng = np.random.default_rng([seed, _USER_SAMPLING_SEED_TAG, repeat])
        for size in sizes:
            chosen = sampled_users_targets(target_users, size, rng)
            for label in tests:
                for m in metrics:
                    estimate = ranks_curve(global_ranks[label][chosen], m, k_max)
                    errors[label, m, size].append(
                        average_relative_error(estimate, exact[label][m], range(1, k_max + 1)))
    rows, summary = [], {}
    for label, test in tests.items():
        for m in metrics:
            row: dict[str, Any] = {"model": label, "metric": m}
            cells = {f"item {s}": test.sampled[s].average_relative_errors(name, m)
                     for s in item_settings}
            cells.update({f"users={size}": np.asarray(errors[label, m, size])
                          for size in sizes})
            for column, values in cells.items():
                mean, std = float(np.mean(values)), float(np.std(values))
                row[column] = f"{mean:.2f}±{std:.2f}"
                summary[f"{label}/{m}/{column}"] = {"mean": mean, "std": std}
            rows.append(row)
    write_table(tables, "user_sampling", list(rows[0]), rows,
                f"Average relative error (%) over K=1..{k_max}, test split: "
                + (f"item sampling ({name}) against " if name else "")
                + f"the exact metric of randomly drawn users, {repeats} repeats (of {n_users} "
                f"test users)")
    return summary
