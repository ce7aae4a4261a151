"""Benchmark: linrec's IALS against implicit's CPU ALS (`implicit.cpu.als`), same solver, same
matrix, same factors, same threads, float32 on both sides, measured in the same process with
the two libraries interleaved (Rendle et al., "Revisiting the performance of iALS on item
recommendation benchmarks", RecSys'22): is linrec's iALS at least at parity?

Same problem. linrec's iALS step for a row solves (Y_SᵀY_S + α₀YᵀY + Λ_r I) x = Y_Sᵀ1.
implicit's (confidence alpha on observed entries, 1 elsewhere) solves
(YᵀY + (alpha − 1) Y_SᵀY_S + λI) x = alpha Y_Sᵀ1, the same system up to the factor α₀ when
alpha = 1 + 1/α₀ (the default here: α₀ = 0.1, alpha = 11; only λ differs, which costs nothing).
With alpha = 1 (`--implicit-alpha 1`, the setting of the issue's first reference numbers)
implicit's per-interaction updates are multiplied by alpha − 1 = 0, which OpenBLAS's axpy
skips: every row then shares the system YᵀY + λI and implicit does less work than either
library needs for a real iALS step (Cholesky: no system to form; CG: half the interaction
work). Both settings can be run; the ratio against alpha = 1 + 1/α₀ is the like-for-like one.

Per configuration (factors x solver) and round, interleaved:
  * implicit: a fresh model fitted for 1 iteration and for `--epochs` iterations (wall time of
    construction + fit: its setup, i.e. the alpha scaling, transpose, random init and the
    iterations); its per-epoch time is the median of the per-iteration times its fit callback
    reports for the longer fit.
  * linrec: the same two fits of IALS(backend=numba, record_loss=False; the fit includes the
    pattern check and conversion, the transpose, the chunking, the random init and the Gram
    matrices); per-epoch time = median of `epoch_seconds_` of the longer fit.
Each line prints the medians over rounds, and the ratio linrec / implicit of the medians of
the per-round ratios. The column "fresh" is one 1-epoch fit in a new Python process (after the
data are built: the library's import, linrec's numba import and cached-kernel load, the fit);
it shows the one-off cost per process, which the other columns exclude (warm-up). Most of that
cost is numba's own start (its import and the set-up of its compiler's registries: 0.3-0.4 s
on this machine type), which a `linrec` run pays anyway for its evaluation (the rank kernel is
compiled with numba): the column "fresh+" is the same fresh fit in a process where another
linrec kernel has already started numba (both libraries, so both processes are in the same
state), i.e. the marginal cost of an iALS fit in a linrec run (iALS's own kernels load in
about 0.02 s once numba runs).
Wall time is what counts on a quiet machine; the CPU-time columns (all
threads of the process) are printed too because on a shared machine they are far less
sensitive to the other processes than wall time.

Usage: python experiments/benchmarks/bench_ials.py [--quick] [--factors 64 256]
       [--solvers cg cholesky] [--epochs 10] [--rounds 3] [--threads 2]
       [--implicit-alpha 11 1]
The default run (50 000 x 10 000, 1 M interactions, 64 and 256 factors, both solvers,
10 epochs, 3 rounds) takes ~15 min on 2 quiet cores (mostly the 256-factor Cholesky fits);
--quick (10 000 x 2 000, 200 k interactions, 32 factors, 3 epochs, 2 rounds) ~20 s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lognormal_interactions

from linrec.hardware import blas_threads  # noqa: E402
from linrec.models.als import IALS  # noqa: E402

ALPHA0, REG, NU = 0.1, 0.01, 1.0


class Timing:
    """Wall and CPU seconds of one call, and the per-epoch seconds it reported."""

    def __init__(self, call: Callable[[], list[float]]) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.epochs = call()
        self.wall = time.perf_counter() - wall
        self.cpu = time.process_time() - cpu


def fit_implicit(train: sp.csr_matrix, factors: int, solver: str, epochs: int, threads: int,
                 alpha: float) -> list[float]:
    """Fit a fresh implicit model; returns its per-iteration seconds (fit callback)."""
    from implicit.cpu.als import AlternatingLeastSquares

    seconds: list[float] = []
    with blas_threads(1), warnings.catch_warnings():  # implicit asks for one BLAS thread
        warnings.simplefilter("ignore", RuntimeWarning)
        model = AlternatingLeastSquares(factors=factors, regularization=REG, alpha=alpha,
                                        use_cg=solver == "cg", iterations=epochs,
                                        num_threads=threads, dtype=np.float32,
                                        random_state=np.random.default_rng(0))
        model.fit(train, show_progress=False,
                  callback=lambda _it, elapsed, _loss: seconds.append(elapsed))
    return seconds


def fit_linrec(train: sp.csr_matrix, factors: int, solver: str, epochs: int,
               threads: int) -> list[float]:
    """Fit a fresh linrec IALS (numba back-end); returns its per-epoch seconds."""
    model = IALS(factors=factors, reg=REG, alpha0=ALPHA0, nu=NU, epochs=epochs, solver=solver,
                 cg_steps=3, backend="numba", num_threads=threads, dtype="float32",
                 record_loss=False)
    return list(model.fit(train).epoch_seconds_)


def fresh_fit(library: str, factors: int, solver: str, alpha: float,
              args: argparse.Namespace, numba_started: bool = False) -> float:
    """Seconds of one 1-epoch fit in a new process, from before the library's import;
    `numba_started`: after another linrec kernel has started numba (untimed)."""
    command = [sys.executable, __file__, "--child", library, str(factors), solver, str(alpha),
               "numba" if numba_started else "cold",
               "--users", str(args.users), "--items", str(args.items),
               "--interactions", str(args.interactions), "--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def child(args: argparse.Namespace) -> None:
    """The process of `fresh_fit`: build the data (and start numba, if asked), then time
    import + fit; prints seconds."""
    library, factors, solver, alpha, start = args.child
    train = lognormal_interactions(args.users, args.items,
                                   1.04 * args.interactions / args.users, seed=0)
    if start == "numba":  # as the evaluation of a linrec run does: any compiled kernel will do
        from linrec.models._sparse_dense import sparse_dense_product

        sparse_dense_product(train[:8], np.ones((train.shape[1], 2), np.float32), 1)
    started = time.perf_counter()
    if library == "linrec":
        fit_linrec(train, int(factors), solver, 1, args.threads)
    else:
        fit_implicit(train, int(factors), solver, 1, args.threads, float(alpha))
    print(time.perf_counter() - started)


def measure(train: sp.csr_matrix, factors: int, solver: str, args: argparse.Namespace
            ) -> dict[str, dict[str, list[Timing]]]:
    """Interleaved rounds of the 1-epoch and the `epochs`-epoch fits of every library."""
    runners = {f"implicit alpha={alpha:g}": (lambda e, a=alpha: fit_implicit(
        train, factors, solver, e, args.threads, a)) for alpha in args.implicit_alpha}
    runners["linrec numba"] = lambda e: fit_linrec(train, factors, solver, e, args.threads)
    for run in runners.values():  # warm-up: numba kernels loaded, caches and pools filled
        run(1)
    results: dict[str, dict[str, list[Timing]]] = {
        name: {"1": [], "n": []} for name in runners}
    for _ in range(args.rounds):
        for length, epochs in (("1", 1), ("n", args.epochs)):
            for name, run in runners.items():
                results[name][length].append(Timing(lambda r=run, e=epochs: r(e)))
    for started, field in ((False, "fresh"), (True, "fresh+")):
        for alpha in args.implicit_alpha:
            results[f"implicit alpha={alpha:g}"][field] = [
                fresh_fit("implicit", factors, solver, alpha, args, started)]
        results["linrec numba"][field] = [
            fresh_fit("linrec", factors, solver, 0, args, started)]
    return results


def report(factors: int, solver: str, results: dict[str, dict[str, list[Timing]]],
           args: argparse.Namespace) -> None:
    mine = results["linrec numba"]

    def median(values: list[float]) -> float:
        return float(np.median(values))

    def ratio(name: str, length: str, field: str) -> str:
        if name == "linrec numba":
            return ""
        pairs = zip(mine[length], results[name][length], strict=True)
        if field.startswith("fresh"):
            return f"{mine[field][0] / results[name][field][0]:.2f}x"
        if field == "epoch":
            values = [median(a.epochs) / median(b.epochs) for a, b in pairs]
        else:
            values = [getattr(a, field) / getattr(b, field) for a, b in pairs]
        return f"{median(values):.2f}x"

    for name, timings in results.items():
        epoch = median([median(t.epochs) for t in timings["n"]])
        print(f"{factors:>4} {solver:<9} {name:<19}"
              f" {epoch:8.3f} {ratio(name, 'n', 'epoch'):>7}"
              f" {median([t.wall for t in timings['1']]):8.3f} {ratio(name, '1', 'wall'):>7}"
              f" {median([t.wall for t in timings['n']]):8.3f} {ratio(name, 'n', 'wall'):>7}"
              f" {median([t.cpu for t in timings['1']]):8.3f} {ratio(name, '1', 'cpu'):>7}"
              f" {median([t.cpu for t in timings['n']]):8.3f} {ratio(name, 'n', 'cpu'):>7}"
              f" {timings['fresh'][0]:8.3f} {ratio(name, 'n', 'fresh'):>7}"
              f" {timings['fresh+'][0]:8.3f} {ratio(name, 'n', 'fresh+'):>7}")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="10 000 x 2 000, 200 k interactions, 32 factors, 3 epochs, 2 rounds")
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--interactions", type=int, default=1_000_000)
    parser.add_argument("--factors", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--solvers", nargs="+", default=["cg", "cholesky"],
                        choices=["cg", "cholesky"])
    parser.add_argument("--epochs", type=int, default=10, help="epochs of the long fit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--implicit-alpha", type=float, nargs="+", default=[1 + 1 / ALPHA0],
                        help="implicit's alpha; 1 + 1/alpha0 = the same problem (default)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)  # see fresh_fit
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.users, args.items, args.interactions = 10_000, 2_000, 200_000
        args.factors, args.epochs, args.rounds = [32], 3, 2

    # draws collide on popular items; ask for ~4% more to land near the requested count
    train = lognormal_interactions(args.users, args.items,
                                   1.04 * args.interactions / args.users, seed=0)
    print(f"matrix {train.shape[0]} x {train.shape[1]}, {train.nnz} interactions, "
          f"{args.threads} threads, float32, linrec alpha0={ALPHA0} nu={NU}, "
          f"{args.rounds} rounds; ratio = linrec / implicit (median of per-round ratios)")
    n = args.epochs
    print(f"{'k':>4} {'solver':<9} {'library':<19} {'epoch s':>8} {'ratio':>7}"
          f" {'fit1 s':>8} {'ratio':>7} {f'fit{n} s':>8} {'ratio':>7}"
          f" {'cpu1 s':>8} {'ratio':>7} {f'cpu{n} s':>8} {'ratio':>7}"
          f" {'fresh s':>8} {'ratio':>7} {'fresh+ s':>8} {'ratio':>7}")
    for factors in args.factors:
        for solver in args.solvers:
            report(factors, solver, measure(train, factors, solver, args), args)


if __name__ == "__main__":
    main()
