"""run(cfg): data -> model -> fit -> exact and sampled evaluation -> results.json; returns the
validation selection metric (for sweepers)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from linrec.config import EvalConfig, resolve_selection
from linrec.errors import ConfigError
from linrec.results import FAILED_FILE, environment_info, format_run_table, write_json_atomic

log = logging.getLogger("linrec")


def _as_dict(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return dict(cfg)


def run(
    cfg: DictConfig | Mapping[str, Any],
    run_dir: str | Path,
    overrides: Sequence[str] = (),
) -> float | None:
    """Execute one configured run, write `results.json` (and `ranks.npz`) into `run_dir`.

    Returns the validation value of `eval.selection` (test if there is no validation split)."""
    from linrec.data.pipeline import prepare_data
    from linrec.eval.evaluator import evaluate_split
    from linrec.eval.sampled import ADAPTIVE_ESTIMATORS, SampledEvaluation
    from linrec.eval.simulate import adaptive_levels
    from linrec.models import build_model

    config = _as_dict(cfg)
    run_dir = Path(run_dir)
    seed = config.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed={seed!r} must be an integer >= 0")
    for flag in ("save_ranks", "save_model", "quiet"):
        if not isinstance(config.get(flag, False), bool):
            raise ConfigError(f"{flag}={config[flag]!r} must be true or false")
    if config.get("study"):
        from linrec.studies import run_study

        return run_study(config, run_dir)
    eval_cfg = EvalConfig.from_dict(config.get("eval", {}))
    model_cfg = config.get("model")
    if not isinstance(model_cfg, Mapping) or not model_cfg.get("name"):
        raise ConfigError("model.name is missing: choose a model group, e.g. model=ease")
    model_cfg = dict(model_cfg)
    model_name = model_cfg.pop("name")
    model = build_model(model_name, **model_cfg)

    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    prepared = prepare_data(config.get("data"))
    split = prepared.split
    timings["data"] = time.perf_counter() - t0
    n_items = split.n_items
    log.info("data %s: %s", prepared.name, prepared.stats)

    # every check that needs only the data runs before the (possibly long) fit
    ks = eval_cfg.ks_for(n_items)
    evalsets = {name: getattr(split, name) for name in eval_cfg.splits
                if getattr(split, name, None) is not None}
    samplers = {}
    if eval_cfg.sampled.enabled:
        samplers = {name: SampledEvaluation(eval_cfg.sampled, evalset=evalset, n_items=n_items)
                    for name, evalset in evalsets.items()}
        if set(eval_cfg.sampled.estimators) & set(ADAPTIVE_ESTIMATORS):
            adaptive = eval_cfg.sampled.adaptive
            adaptive_levels(n_items, adaptive.n0, adaptive.n_max)

    t0 = time.perf_counter()
    model.fit(split.train, valid=split.valid)
    timings["fit"] = time.perf_counter() - t0
    log.info("fit %s in %.2fs", model_name, timings["fit"])

    splits_out: dict[str, Any] = {}
    rank_tables = {}
    t0 = time.perf_counter()
    for split_name, evalset in evalsets.items():
        sampled = samplers.get(split_name)
        result = evaluate_split(
            model,
            evalset,
            ks=ks,
            metrics=eval_cfg.metrics,
            seed=seed,
            users_known=not split.strong,
            batch_hooks=sampled.hooks() if sampled else (),
            memory_budget_mb=eval_cfg.memory_budget_mb,
        )
        block: dict[str, Any] = {
            "n_users": int(evalset.n_users),
            "n_targets": int(result.rank_table.ranks.size),
            "exact": result.metrics,
            "timings": result.timings,
        }
        if sampled is not None:
            block["sampled"] = sampled.report(result.rank_table)
        splits_out[split_name] = block
        rank_tables[split_name] = result.rank_table
    timings["evaluate"] = time.perf_counter() - t0

    selection_split = "valid" if "valid" in splits_out else "test"
    if selection_split == "test":
        log.warning("no validation split: the returned selection metric (%s) is a test metric; "
                    "do not tune hyper-parameters on it", eval_cfg.selection)
    selection_key = resolve_selection(eval_cfg.selection, n_items)
    selection_value = splits_out.get(selection_split, {}).get("exact", {}).get(selection_key)

    record = {
        "dataset": {"name": prepared.name, **prepared.stats},
        "model": model_name,
        "splits": splits_out,
        "selection": {"metric": selection_key, "split": selection_split, "value": selection_value},
        "timings": timings,
        "environment": environment_info(),
        "seed": seed,
        "overrides": list(overrides),
        "config": config,
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    if config.get("save_ranks", True):
        for split_name, table in rank_tables.items():
            name = "ranks.npz" if split_name == "test" else f"ranks_{split_name}.npz"
            table.save_npz(run_dir / name)
    if config.get("save_model", False):
        model.save(run_dir / "model.pkl")
    write_json_atomic(run_dir / "results.json", record)
    (run_dir / FAILED_FILE).unlink(missing_ok=True)  # a marker left by an earlier failed run
    if not config.get("quiet", False):
        print(format_run_table(record))
        print(f"results: {run_dir / 'results.json'}")
    return None if selection_value is None else float(selection_value)
