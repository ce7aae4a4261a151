"""Benchmark: one iALS epoch (user sweep + item sweep) of linrec's IALS against implicit's CPU
ALS (`implicit.cpu.als.AlternatingLeastSquares`) on the same matrix, same factors, same threads,
measured in the same process (spec/linear_models.md §3.9; ARCHITECTURE §6).

implicit: one `fit` of 1 iteration, timed after a warm-up fit (its CG solver, 3 steps, and its
Cholesky solver). linrec: the wall time of one epoch's two sweeps (`epoch_seconds_`, setup and
objective excluded; record_loss=False) after a warm-up epoch, for each back-end x solver; the
"fit 1 epoch" column adds linrec's one-off setup (blocks, init). float32 everywhere; the
numba kernels are compiled (and cached) before anything is timed.
Target (issue 11): linrec at most 1.0x implicit per epoch and per whole fit, same solver, at 64
and 256 factors. The full default run (64 and 256 factors, three back-ends, both solvers) takes
~15 min on 2 cores, mostly the k = 256 Cholesky rows; `--solvers cg` takes ~1 min.

Usage: python experiments/benchmarks/bench_ials.py [--quick] [--factors 64 256] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_lrr_grid import synthetic_interactions  # noqa: E402  (sibling benchmark script)

from linrec.models.als import IALS  # noqa: E402


def time_implicit(train, factors: int, threads: int, use_cg: bool) -> float:
    """Seconds of one implicit ALS iteration (fit with iterations=1) after a warm-up fit."""
    from implicit.cpu.als import AlternatingLeastSquares

    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        model = AlternatingLeastSquares(factors=factors, regularization=0.01, alpha=1.0,
                                        use_cg=use_cg, iterations=1, num_threads=threads,
                                        random_state=np.random.default_rng(0))
        model.fit(train, show_progress=False)  # warm-up
        started = time.perf_counter()
        model.fit(train, show_progress=False)
        return time.perf_counter() - started


def time_linrec(train, factors: int, threads: int, backend: str,
                solver: str) -> tuple[float, float]:
    """(seconds of the second epoch's sweeps, seconds of a whole 1-epoch fit incl. setup)."""
    model = IALS(factors=factors, reg=0.01, alpha0=0.1, nu=1.0, epochs=2, solver=solver,
                 cg_steps=3, backend=backend, num_threads=threads, dtype="float32",
                 record_loss=False)
    model.fit(train)
    epoch = float(model.epoch_seconds_[1])
    model.epochs = 1
    started = time.perf_counter()
    model.fit(train)
    return epoch, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="10 000 x 2 000 matrix with 200k interactions, factors 32")
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--interactions", type=int, default=1_000_000)
    parser.add_argument("--factors", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backends", nargs="+", default=["numpy", "torch", "numba"])
    parser.add_argument("--solvers", nargs="+", default=["cg", "cholesky"])
    args = parser.parse_args()
    if args.quick:
        args.users, args.items, args.interactions, args.factors = 10_000, 2_000, 200_000, [32]

    # draws collide on popular items; ask for ~4% more to land near the requested count
    train = synthetic_interactions(args.users, args.items,
                                   1.04 * args.interactions / args.users, seed=0)
    print(f"matrix {train.shape[0]} x {train.shape[1]}, {train.nnz} interactions, "
          f"{args.threads} threads, float32")
    header = (f"{'factors':>7}  {'implementation':<26} {'epoch s':>9} {'fit 1 epoch s':>14} "
              f"{'vs implicit (same solver)':>26}")
    print(header)
    print("-" * len(header))
    for factors in args.factors:
        reference = {
            "cg": time_implicit(train, factors, args.threads, use_cg=True),
            "cholesky": time_implicit(train, factors, args.threads, use_cg=False),
        }
        for solver, seconds in reference.items():
            print(f"{factors:>7}  {'implicit ' + solver:<26} {seconds:>9.3f} {'':>14} "
                  f"{'1.00x':>26}")
        for backend in args.backends:
            for solver in args.solvers:
                epoch, fit = time_linrec(train, factors, args.threads, backend, solver)
                ratio = epoch / reference[solver]
                print(f"{factors:>7}  {'linrec ' + backend + ' ' + solver:<26} {epoch:>9.3f} "
                      f"{fit:>14.3f} {ratio:>25.2f}x")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
