"""Benchmark `linrec-report` over 1 000 run directories (the issue's budget: under 10 s).

Generates a sweep-like tree: 5 models x 100 configurations x 2 seeds, each run a results.json
(copied from one real run with the default evaluation, exact metrics and the sampled block of
n = 100 and adaptive sampling; its λ and metrics varied) with a ranks.npz of 2 000 held-out
items (for the significance tests of the chosen configurations), then times `build_report` with
and without figures, in this process. With figures the report draws, per model, the metric vs
K and the sampled-estimator figures (curves, relative error, rank histogram) of each setting.

    python experiments/benchmarks/bench_report.py [--runs 1000] [--quick] [--keep DIR]
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from linrec.data.pipeline import prepare_data
from linrec.eval import EvalConfig, evaluate
from linrec.models import EASE
from linrec.report import build_report
from linrec.results import run_record, write_run


def generate(root: Path, n_runs: int) -> None:
    prepared = prepare_data({"source": {"name": "synthetic", "n_users": 600, "n_items": 300},
                             "cache": False})
    model = EASE(lam=100.0).fit(prepared.split.train)
    report = evaluate(model, prepared.split, EvalConfig())
    record = run_record(dataset={"name": prepared.name, **prepared.stats}, model="ease",
                        report=report, timings={"fit": 0.1}, seed=0,
                        config={"model": {"name": "ease", "lam": 100.0}, "seed": 0,
                                "data": {"source": {"name": "synthetic"}}})
    base = json.loads(json.dumps(record, default=float))
    rng = np.random.default_rng(0)
    models = ["ease", "lrr", "puresvd", "mf_closed", "most_popular"]
    per_model = n_runs // (len(models) * 2)
    count = 0
    for model in models:
        for config in range(per_model):
            for seed in (0, 1):
                rec = copy.deepcopy(base)
                rec["model"] = model
                rec["config"] = {"model": {"name": model, "lam": float(config)}, "seed": seed,
                                 "data": base["config"]["data"]}
                jitter = 1 + 0.05 * rng.standard_normal()
                for split in rec["splits"].values():
                    split["exact"] = {k: v * jitter for k, v in split["exact"].items()}
                rec["selection"]["value"] *= jitter
                run_dir = root / model / f"lam={config}" / f"seed={seed}"
                write_run(run_dir, rec, report, figures=False)
                count += 1
    print(f"generated {count} runs below {root}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="default 1000 (--quick 200)")
    parser.add_argument("--quick", action="store_true", help="200 runs")
    parser.add_argument("--keep", default=None, help="generate into (and keep) this directory")
    args = parser.parse_args()
    args.runs = args.runs or (200 if args.quick else 1000)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        if not any(root.rglob("results.json")):
            generate(root, args.runs)
        for figures in (False, True):
            t0 = time.perf_counter()
            out = build_report([root], out=root / "report", figures=figures)
            seconds = time.perf_counter() - t0
            n_figures = sum(p.suffix == ".png" for p in out.files)
            verdict = f"budget 10 s: {'ok' if seconds < 10 else 'OVER'}" \
                if out.n_runs >= 1000 else "the budget is for 1 000 runs"
            print(f"linrec-report over {out.n_runs} runs, figures={figures} ({n_figures} PNG, "
                  f"each with its PDF): {seconds:.2f} s ({verdict})")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
