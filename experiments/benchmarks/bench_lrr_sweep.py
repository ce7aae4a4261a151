"""Benchmark: a 20-job LRR sweep through the real command against its floor, one
eigendecomposition plus 20 evaluations measured in this process (the issue's budget: the sweep
at most 1.5x the floor). The floor decomposes as the sweep does: each job's rank, in the
sweep's order, through `compute_spectrum` (linrec/models/spectral.py), which widens the first
rank to a partial decomposition of 0.2 n_items components and serves every later rank up to
that from its cache; the disk store is off (writing it is part of the sweep's cost).

The sweep is `linrec -m model=lrr model.rank=… model.lam=…` (4 ranks x 5 λ) on a synthetic
catalogue, run twice: with the basic launcher (one process, the in-memory spectrum cache) and
with joblib's two workers (separate processes, the spectrum shared on disk under a lock).
Each runs with an empty $LINREC_DATA except for the prepared split, so the decomposition is
computed once inside the sweep.

    python experiments/benchmarks/bench_lrr_sweep.py [--items 3000] [--users 8000] [--quick]
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
QUICK_RANKS = (20, 50, 100, 200)  # at most 0.2 of --quick's 1 000 items: one partial eigh
LAMS = (10.0, 100.0, 1000.0, 3000.0, 10000.0)


def floor_seconds(data: dict, home: Path, ranks: tuple[int, ...]
                  ) -> tuple[float, float, float, str]:
    """(decomposition s, 20 evaluations s, total, what was decomposed) in this process."""
    from linrec.data.pipeline import prepare_data
    from linrec.eval import EvalConfig, evaluate
    from linrec.models.spectral import LRR, clear_spectrum_cache, compute_spectrum

    os.environ["LINREC_DATA"] = str(home)
    os.environ["LINREC_SPECTRUM_CACHE"] = "0"
    split = prepare_data(data).split
    clear_spectrum_cache()
    dtype = LRR(rank=ranks[0], lam=LAMS[0]).dtype
    t0 = time.perf_counter()
    for rank in ranks:  # as LRR._fit asks, job after job: the cache serves what it can
        spectrum = compute_spectrum(split.train, dtype, rank=rank)
    decomposition = time.perf_counter() - t0
    n_items = split.train.shape[1]
    kind = "full" if spectrum.n_components == n_items else "partial"
    what = f"{kind}, {spectrum.n_components} of {n_items} components"
    config = EvalConfig(sampled={"enabled": False})
    t0 = time.perf_counter()
    for rank in ranks:
        for lam in LAMS:
            evaluate(LRR(rank=rank, lam=lam).fit_spectrum(spectrum), split, config)
    evaluations = time.perf_counter() - t0
    del os.environ["LINREC_SPECTRUM_CACHE"]
    clear_spectrum_cache()
    return decomposition, evaluations, decomposition + evaluations, what


def sweep_seconds(overrides: list[str], home: Path, cwd: Path, launcher: list[str],
                  ranks: tuple[int, ...]) -> float:
    env = dict(os.environ, LINREC_DATA=str(home))
    cmd = [sys.executable, "-c", "from linrec.cli import main; main()", "-m", "model=lrr",
           f"model.rank={','.join(map(str, ranks))}", f"model.lam={','.join(map(str, LAMS))}",
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
    parser.add_argument("--items", type=int, default=None, help="default 3000 (--quick 1000)")
    parser.add_argument("--users", type=int, default=None, help="default 8000 (--quick 3000)")
    parser.add_argument("--quick", action="store_true", help="1 000 items, 3 000 users")
    args = parser.parse_args()
    args.items = args.items or (1000 if args.quick else 3000)
    args.users = args.users or (3000 if args.quick else 8000)
    ranks = QUICK_RANKS if args.quick else RANKS
    source = {"name": "synthetic", "n_users": args.users, "n_items": args.items}
    overrides = [f"data.source.n_users={args.users}", f"data.source.n_items={args.items}"]
    work = Path(tempfile.mkdtemp(prefix="bench-lrr-sweep-"))
    try:
        home = work / "home"
        decomposition, evaluations, floor, what = floor_seconds(
            {"source": source, "split": {"kind": "holdout"}}, home, ranks)
        print(f"floor: one eigendecomposition ({what}) {decomposition:.1f} s + 20 evaluations "
              f"{evaluations:.1f} s = {floor:.1f} s ({args.items} items, {args.users} users)")
        for name, launcher in (("basic launcher", []),
                               ("joblib, 2 workers", ["hydra/launcher=joblib",
                                                      "hydra.launcher.n_jobs=2"])):
            shutil.rmtree(home / "spectra", ignore_errors=True)
            cwd = work / name.split()[0].strip(",")
            cwd.mkdir()
            seconds = sweep_seconds(overrides, home, cwd, launcher, ranks)
            print(f"sweep, {name}: {seconds:.1f} s = {seconds / floor:.2f}x the floor "
                  f"(budget 1.5x: {'ok' if seconds <= 1.5 * floor else 'OVER'})")
        if args.quick:
            print("--quick is a smoke test: at this size starting Python and Hydra and each "
                  "job's bookkeeping outweigh the floor; the budget is for the default size")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
