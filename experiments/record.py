"""Write the records of runs (experiments/records.py says what a record holds).

    python experiments/record.py RUN_DIR --as ch3/ease/lam=100     one run
    python experiments/record.py SWEEP_DIR --as ch3/ease           every run below SWEEP_DIR,
                                                                   named ch3/ease/<its subdir>
    python experiments/record.py compare RUN_A RUN_B --as ch3/compare/ease_vs_edlae \
        [--split test] [--metric recall@20 ...]                    a paired comparison
    python experiments/record.py optuna SWEEP_DIR --as pruning/median
                                                                   an Optuna search as a whole

A comparison reads both runs' per-user metrics (`eval.save_per_user=true`), pairs the users both
evaluated and records, per metric, the mean difference with its 95 % percentile-bootstrap
interval over users and the paired t and Wilcoxon signed-rank p-values.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from records import FORMAT, RECORDS, record_of_run, write_record  # noqa: E402


def _runs_below(path: Path) -> list[Path]:
    if (path / "results.json").is_file():
        return [path]
    return sorted(p.parent for p in path.rglob("results.json")
                  if "superseded" not in p.relative_to(path).parts)


def record_runs(path: Path, name: str, root: Path, cpu: str | None) -> list[Path]:
    runs = _runs_below(path)
    if not runs:
        raise SystemExit(f"record: no results.json in or below {path}")
    written = []
    for run in runs:
        suffix = run.relative_to(path).as_posix()
        full = name if suffix == "." else f"{name}/{suffix}"
        written.append(write_record(record_of_run(run, full, cpu=cpu), root))
    return written


def comparison(run_a: Path, run_b: Path, name: str, split: str, metrics: list[str],
               seed: int = 0, n_boot: int = 2000) -> dict:
    """The paired comparison record of two runs (a minus b) over the users both evaluated, with
    each run's model settings (the build uses it only for the settings it compares)."""
    import json

    import numpy as np
    import pandas as pd
    from scipy import stats

    frames, models = [], []
    for run in (run_a, run_b):
        models.append(json.loads((run / "results.json").read_text())["config"]["model"])
        path = run / f"per_user_{split}.parquet"
        if not path.is_file():
            raise SystemExit(f"record compare: {path} is missing; run it with "
                             "eval.save_per_user=true")
        frames.append(pd.read_parquet(path).pivot(index="user", columns="metric",
                                                  values="value"))
    common = frames[0].index.intersection(frames[1].index)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(common), size=(n_boot, len(common)))
    out = {}
    for metric in metrics:
        diff = (frames[0].loc[common, metric] - frames[1].loc[common, metric]).to_numpy()
        boot = diff[draws].mean(axis=1)
        out[metric] = {
            "mean_a": float(frames[0].loc[common, metric].mean()),
            "mean_b": float(frames[1].loc[common, metric].mean()),
            "difference": float(diff.mean()),
            "interval95": [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))],
            "paired_t_p": float(stats.ttest_rel(frames[0].loc[common, metric],
                                                frames[1].loc[common, metric]).pvalue),
            "wilcoxon_p": float(stats.wilcoxon(diff).pvalue) if np.any(diff) else 1.0,
        }
    return {"format": FORMAT, "name": name, "kind": "comparison", "split": split,
            "a": str(run_a.name), "b": str(run_b.name),
            "models": {"a": models[0], "b": models[1]}, "users": int(len(common)),
            "bootstrap": {"draws": n_boot, "seed": seed}, "metrics": out}


def epochs_trained(sweep_dir: Path) -> int:
    """Epochs the search's jobs trained: a complete job's training log (its results.json), a
    pruned job's validation passes (its PRUNED marker) times its `model.eval_every`. Read
    from the jobs, not the study: a search without a pruner reports no passes to it."""
    import json
    import re

    import yaml

    total = 0
    for job in sorted(d for d in sweep_dir.iterdir() if d.is_dir() and d.name != "superseded"):
        if (job / "results.json").exists():
            training = json.loads((job / "results.json").read_text()).get("training") or {}
            total += len(training.get("epochs") or [])
        elif (job / "PRUNED").exists():
            passes = int(re.search(r"after validation pass (\d+)",
                                   (job / "PRUNED").read_text()).group(1))
            config = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
            total += passes * int(config["model"].get("eval_every", 1))
    return total


def search(sweep_dir: Path, name: str) -> dict:
    """The record of an Optuna search (its study in SWEEP_DIR/optuna.db): trials complete,
    pruned and failed, epochs trained (`epochs_trained`), wall time from the first trial's
    start to the last one's end, the best value and parameters, the command, and the machine
    of its jobs."""
    import json

    import optuna
    import yaml
    from records import command_of

    study = optuna.load_study(study_name="linrec", storage=f"sqlite:///{sweep_dir / 'optuna.db'}")
    trials = study.trials
    states = [t.state.name for t in trials]
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    hydra = yaml.safe_load((sweep_dir / "multirun.yaml").read_text())["hydra"]
    job = next(sweep_dir.glob("*/results.json"))
    environment = json.loads(job.read_text())["environment"]
    sweeper = [o.replace("=linrec_optuna", "=optuna") for o in hydra["overrides"]["hydra"]
               if o.startswith(("hydra/sweeper=", "hydra.sweeper."))]
    overrides = [*sweeper, *hydra["overrides"]["task"]]
    return {"format": FORMAT, "name": name, "kind": "search",
            "command": command_of(["-m", *overrides]),
            "trials": len(trials), "complete": states.count("COMPLETE"),
            "pruned": states.count("PRUNED"), "failed": states.count("FAIL"),
            "epochs": epochs_trained(sweep_dir),
            "seconds": (max(ends) - min(starts)).total_seconds() if ends else None,
            "best_value": study.best_value, "best_params": study.best_params,
            "values": [{"params": t.params, "state": t.state.name, "value": t.value,
                        "passes_reported": len(t.intermediate_values)} for t in trials],
            "environment": {"cpu": environment.get("cpu", "unknown"),
                            "threads": environment.get("linrec_threads"),
                            "linrec": environment.get("linrec")}}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["optuna"]:
        parser = argparse.ArgumentParser(prog="record.py optuna")
        parser.add_argument("sweep_dir", type=Path)
        parser.add_argument("--as", dest="name", required=True)
        parser.add_argument("--root", type=Path, default=RECORDS)
        args = parser.parse_args(argv[1:])
        print(write_record(search(args.sweep_dir, args.name), args.root))
        return 0
    if argv[:1] == ["compare"]:
        parser = argparse.ArgumentParser(prog="record.py compare")
        parser.add_argument("run_a", type=Path)
        parser.add_argument("run_b", type=Path)
        parser.add_argument("--as", dest="name", required=True)
        parser.add_argument("--split", default="test")
        parser.add_argument("--metric", action="append", dest="metrics")
        parser.add_argument("--root", type=Path, default=RECORDS)
        args = parser.parse_args(argv[1:])
        record = comparison(args.run_a, args.run_b, args.name, args.split,
                            args.metrics or ["recall@20", "ndcg@20"])
        print(write_record(record, args.root))
        return 0
    parser = argparse.ArgumentParser(prog="record.py")
    parser.add_argument("run", type=Path, help="a run directory, or a directory of runs")
    parser.add_argument("--as", dest="name", required=True, help="the record's name")
    parser.add_argument("--cpu", default=None,
                        help="the processor, for a results.json that does not name it")
    parser.add_argument("--root", type=Path, default=RECORDS)
    args = parser.parse_args(argv)
    for path in record_runs(args.run, args.name, args.root, args.cpu):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
