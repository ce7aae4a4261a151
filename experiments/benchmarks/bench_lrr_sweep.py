"""Benchmark: a 20-job LRR sweep through the real command against its floor, one
eigendecomposition plus 20 evaluations measured in this process (the issue's budget: the sweep
at most 1.5x the floor).

The sweep is `linrec -m model=lrr model.rank=… model.lam=…` (4 ranks x 5 λ) on a synthetic
catalogue, run twice: with the basic launcher (one process, the in-memory spectrum cache) and
with joblib's two workers (separate processes, the spectrum shared on disk under a lock).
Each runs with an empty $LINREC_DATA except for the prepared split, so the decomposition is
computed once inside the sweep.

    python experiments/benchmarks/bench_lrr_sweep.py [--items 3000] [--users 8000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RANKS = (50, 100, 200, 400)
LAMS = (10.0, 100.0, 1000.0, 3000.0, 10000.0)


def floor_seconds(data: dict, home: Path) -> tuple[float, float, float]:
    """(decomposition s, 20 evaluations s, total) in this process."""
    from linrec.data.pipeline import prepare_data
    from linrec.eval import EvalConfig, evaluate
    from linrec.models.spectral import LRR, clear_spectrum_cache, compute_spectrum

    os.environ["LINREC_DATA"] = str(home)
    os.environ["LINREC_SPECTRUM_CACHE"] = "0"
    split = prepare_data(data).split
    clear_spectrum_cache()
    t0 = time.perf_counter()
    spectrum = compute_spectrum(split.train)
    decomposition = time.perf_counter() - t0
    config = EvalConfig(sampled={"enabled": False})
    t0 = time.perf_counter()
    for rank in RANKS:
        for lam in LAMS:
            evaluate(LRR(rank=rank, lam=lam).fit_spectrum(spectrum), split, config)
    evaluations = time.perf_counter() - t0
    del os.environ["LINREC_SPECTRUM_CACHE"]
    return decomposition, evaluations, decomposition + evaluations


def sweep_seconds(overrides: list[str], home: Path, cwd: Path, launcher: list[str]) -> float:
    env = dict(os.environ, LINREC_DATA=str(home))
    cmd = [sys.executable, "-c", "from linrec.cli import main; main()", "-m", "model=lrr",
           f"model.rank={','.join(map(str, RANKS))}", f"model.lam={','.join(map(str, LAMS))}",
           "eval.sampled.enabled=false", "figures=false", "quiet=true", "save_ranks=false",
           *overrides, *launcher]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"the sweep failed:\n{proc.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=3000)
    parser.add_argument("--users", type=int, default=8000)
    args = parser.parse_args()
    source = {"name": "synthetic", "n_users": args.users, "n_items": args.items}
    overrides = [f"data.source.n_users={args.users}", f"data.source.n_items={args.items}"]
    work = Path(tempfile.mkdtemp(prefix="bench-lrr-sweep-"))
    try:
        home = work / "home"
        decomposition, evaluations, floor = floor_seconds(
            {"source": source, "split": {"kind": "holdout"}}, home)
        print(f"floor: one eigendecomposition {decomposition:.1f} s + 20 evaluations "
              f"{evaluations:.1f} s = {floor:.1f} s ({args.items} items, {args.users} users)")
        for name, launcher in (("basic launcher", []),
                               ("joblib, 2 workers", ["hydra/launcher=joblib",
                                                      "hydra.launcher.n_jobs=2"])):
            shutil.rmtree(home / "spectra", ignore_errors=True)
            cwd = work / name.split()[0].strip(",")
            cwd.mkdir()
            seconds = sweep_seconds(overrides, home, cwd, launcher)
            print(f"sweep, {name}: {seconds:.1f} s = {seconds / floor:.2f}x the floor "
                  f"(budget 1.5x: {'ok' if seconds <= 1.5 * floor else 'OVER'})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
