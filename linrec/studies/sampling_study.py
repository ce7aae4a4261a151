"""`experiment=sampling_study`: how well each estimator recovers exact metrics from sampled ranks.

Protocol of [S3] AAAI'23 / [S1] ch. 2 (spec/evaluation.md §10.3) and the mapping tables of [S0]
KDD'20 (§10.2): train each model once, compute the global ranks of the test targets once, then draw
`repeats` sampled-rank sets per sample size (and adaptive sets) from the global ranks, exact in
distribution (spec §2.4), with common random numbers across models. Writes, under
<run_dir>/tables/: average relative error over K = 1..k_max (mean ± std per setting, model,
metric, estimator), winner accuracy counts, and the SHR@k vs HR@f(k) mapping tables.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from linrec.errors import ConfigError
from linrec.eval.estimators.mapping import aligned_curves, alignment_errors, mapping_function
from linrec.eval.estimators.accuracy import average_relative_error, winner_accuracy
from linrec.eval.evaluator import evaluate_split
from linrec.eval.expected import global_rank_distribution
from linrec.eval.metrics import curve
from linrec.eval.sampled import (
    canonical_global_ranks,
    estimate_samples,
    sampling_scheme,
)
from linrec.eval.simulate import simulate_adaptive_ranks, simulate_sampled_ranks
from linrec.results import write_json_atomic
from linrec.studies.common import (
    build_from_config,
    check_study_fields,
    fit_timed,
    write_table,
)

log = logging.getLogger("linrec")
INTS, STRS = "tuple[int, ...]", "tuple[str, ...]"
STUDY_FIELDS = {
    "name": "str", "models": "mapping", "sample_sizes": INTS, "adaptive": "bool",
    "adaptive_n0": "int", "adaptive_n_max": "int", "replace": "bool", "repeats": "int",
    "estimators": STRS, "adaptive_estimators": STRS, "metrics": STRS, "k_max": "int",
    "winner_ks": INTS, "mappings": STRS, "mapping_ks": INTS,
}
MAPPING_KINDS = ("linear", "bound", "beta", "beta_p")


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _mapping(spec: str, n_items: int, sample_size: int, sampled_ranks: np.ndarray) -> np.ndarray:
    """'linear' | 'bound' | 'beta@0.5' | 'beta_p' -> f(1..n)."""
    kind, _, a = spec.partition("@")
    if kind == "beta":
        return mapping_function("beta", n_items, sample_size, a=float(a))
    if kind == "beta_p":
        return mapping_function("beta_p", n_items, sample_size, sampled_ranks=sampled_ranks)
    return mapping_function(kind, n_items, sample_size)


def _settings(study: dict[str, Any], n_items: int) -> list[tuple[str, int | None]]:
    settings = [(f"n={n}", int(n)) for n in study["sample_sizes"] if n < n_items]
    skipped = [n for n in study["sample_sizes"] if n >= n_items]
    if skipped:
        log.warning("sample sizes %s are not below n_items=%d and are skipped", skipped, n_items)
    if study.get("adaptive", True):
        settings.append(("adaptive", None))
    if not settings:
        raise ConfigError(f"study.sample_sizes={study['sample_sizes']}: none is below "
                          f"n_items={n_items}")
    return settings


def run(config: dict[str, Any], run_dir: Path) -> None:
    from linrec.data.pipeline import prepare_data

    study = check_study_fields(config["study"], STUDY_FIELDS, optional=("adaptive", "replace"))
    for name in ("repeats", "k_max", "adaptive_n0", "adaptive_n_max"):
        if study[name] < 1:
            raise ConfigError(f"study.{name}={study[name]} must be >= 1")
    for spec in study["mappings"]:  # fail before fitting anything
        kind, _, a = spec.partition("@")
        if kind not in MAPPING_KINDS or (kind == "beta") != bool(a) or not _is_float(a or "0"):
            raise ConfigError(f"study.mappings: {spec!r} is unknown; allowed: "
                              "linear, bound, beta@<a> (a number), beta_p")
    seed = int(config.get("seed", 0))
    metrics, k_max = list(study["metrics"]), study["k_max"]
    repeats, replace = study["repeats"], study.get("replace", True)
    prepared = prepare_data(config["data"])
    split, evalset = prepared.split, prepared.split.test
    n_items = split.n_items
    k_max = min(k_max, n_items)
    tables = run_dir / "tables"
    settings = _settings(study, n_items)

    # 1. every model once: global ranks of the test targets (canonical target order)
    ranks: dict[str, np.ndarray] = {}
    exact: dict[str, dict[str, np.ndarray]] = {}
    fit_seconds: dict[str, float] = {}
    models = {label: build_from_config(model_cfg, label)  # every model checked before a fit
              for label, model_cfg in study["models"].items()}
    for label in list(models):
        model = models.pop(label)  # a fitted model is dropped once its ranks are computed
        fit_seconds[label] = fit_timed(model, split.train, label)
        result = evaluate_split(model, evalset, ks=[k_max], metrics=["recall"], seed=seed,
                                users_known=not split.strong)
        ranks[label] = canonical_global_ranks(result.rank_table, evalset)
        p_exact = global_rank_distribution(ranks[label], n_items)
        exact[label] = {m: curve(p_exact, m, k_max) for m in metrics}
    labels = list(ranks)

    # 2. sampled repeats per setting, common random numbers across models
    estimates: dict[tuple[str, str, str, str], np.ndarray] = {}  # (setting, est, model, metric)
    first_samples: dict[tuple[str, str], np.ndarray] = {}
    for setting, sample_size in settings:
        names = study["adaptive_estimators"] if sample_size is None else study["estimators"]
        for label in labels:
            samples = []
            for repeat in range(repeats):
                rng = np.random.default_rng([seed, repeat, sample_size or 0])
                if sample_size is None:
                    adaptive = simulate_adaptive_ranks(
                        ranks[label], n_items, rng=rng, n0=study["adaptive_n0"],
                        n_max=study["adaptive_n_max"], replace=replace)
                    samples.append((adaptive.sampled_ranks, adaptive.sample_sizes))
                else:
                    samples.append((simulate_sampled_ranks(ranks[label], n_items, sample_size,
                                                           replace=replace, rng=rng),
                                    sample_size))
            if sample_size is not None:
                first_samples[(setting, label)] = samples[0][0]
            p_hats, _ = estimate_samples(names, samples, n_items=n_items,
                                         scheme=sampling_scheme(replace))
            curves = {(e, m): np.stack([curve(p, m, k_max) for p in p_hats[e]])
                      for e in names for m in metrics}
            for (name, m), values in curves.items():
                estimates[(setting, name, label, m)] = values
        log.info("sampling study: %s done", setting)

    record = {"dataset": {"name": prepared.name, **prepared.stats}, "models": labels,
              "fit_seconds": fit_seconds, "settings": [s for s, _ in settings],
              "are": {}, "winners": {}, "mapping": {}}

    # 3. average relative error tables (spec §10.3)
    ks_all = range(1, k_max + 1)
    for setting, sample_size in settings:
        names = study["adaptive_estimators"] if sample_size is None else study["estimators"]
        rows = []
        for label in labels:
            for m in metrics:
                row: dict[str, Any] = {"model": label, "metric": m}
                for name in names:
                    per_repeat = [average_relative_error(c, exact[label][m], ks=ks_all)
                                  for c in estimates[(setting, name, label, m)]]
                    mean, std = float(np.mean(per_repeat)), float(np.std(per_repeat))
                    row[name] = f"{mean:.2f}±{std:.2f}"
                    record["are"][f"{setting}/{label}/{m}/{name}"] = {"mean": mean, "std": std}
                rows.append(row)
        write_table(tables, f"are_{setting.replace('=', '')}", ["model", "metric", *names], rows,
                    f"Average relative error (%) over K=1..{k_max}, {setting}, {repeats} repeats")

    # 4. winner accuracy: how often argmax over models of the estimate picks the exact winner
    rows = []
    for setting, sample_size in settings:
        names = study["adaptive_estimators"] if sample_size is None else study["estimators"]
        for m in metrics:
            for k in [k for k in study["winner_ks"] if k <= k_max]:
                true_values = [exact[label][m][k - 1] for label in labels]
                row = {"setting": setting, "metric": f"{m}@{k}",
                       "winner": labels[int(np.argmax(true_values))]}
                for name in names:
                    est = np.stack([estimates[(setting, name, label, m)][:, k - 1]
                                    for label in labels], axis=1)  # (repeats, models)
                    row[name] = winner_accuracy(est, true_values)
                    record["winners"][f"{setting}/{m}@{k}/{name}"] = row[name]
                rows.append(row)
    all_names = list(dict.fromkeys([*study["estimators"], *study["adaptive_estimators"]]))
    write_table(tables, "winners", ["setting", "metric", "winner", *all_names], rows,
                f"Winner accuracy (out of {repeats} repeats)")

    # 5. mapping tables of [S0]: SHR@k vs HR@f(k) on one sample run per model and n
    error_rows = []
    for setting, sample_size in settings:
        if sample_size is None:
            continue
        ks = [k for k in study["mapping_ks"] if k <= sample_size]
        for label in labels:
            sampled = first_samples[(setting, label)]
            rows = [{"k": k} for k in ks]
            for spec in study["mappings"]:
                f = _mapping(spec, n_items, sample_size, sampled)
                aligned = aligned_curves(sampled, f, k_max=sample_size,
                                         global_ranks=ranks[label])
                for row, k in zip(rows, ks, strict=True):
                    row["SHR"] = float(aligned.shr[k - 1])
                    row[f"HR@{spec}"] = float(aligned.hr_at_f[k - 1])
                errors = alignment_errors(aligned.shr, aligned.hr_at_f)
                error_rows.append({"setting": setting, "model": label, "mapping": spec, **errors})
                record["mapping"][f"{setting}/{label}/{spec}"] = errors
            columns = ["k", "SHR", *[f"HR@{s}" for s in study["mappings"]]]
            write_table(tables, f"mapping_{label}_{setting.replace('=', '')}", columns, rows,
                        f"SHR@k vs HR@f(k), {label}, {setting}")
    if error_rows:
        write_table(tables, "mapping_errors", list(error_rows[0]), error_rows,
                    "Alignment errors of the mapping functions (spec §4.6)")
    write_json_atomic(run_dir / "study.json", record)
    if not config.get("quiet", False):
        for path in sorted(tables.glob("are_*.md")) + [tables / "winners.md"]:
            print(path.read_text())
        print(f"tables: {tables}")
    return None
