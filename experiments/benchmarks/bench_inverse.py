"""Benchmark: the SPD inverse (`linrec.models.linalg.spd_inverse`, n³ flops) against the GEMM
roofline, the bulk of an EASE fit:

    python experiments/benchmarks/bench_inverse.py            # n = 5k, 10k, 20k
    python experiments/benchmarks/bench_inverse.py --quick    # n = 2k
    python experiments/benchmarks/bench_inverse.py --large    # also 30k, 41k (~1 h)
    python experiments/benchmarks/bench_inverse.py --sizes 3000 --dtypes float64

For each n and dtype, a fresh process builds G + lam·I from a synthetic EASE Gram, times a GEMM
(`?gemm` of size min(n, 4096), the same scipy OpenBLAS the inverse calls), the inverse, and the
GEMM again, and prints the inverse's GFLOP/s (n³ / time), the GEMM rate (mean of the two), the
ratio time / (n³ / GEMM rate) (goal: <= 1.15), the matrix size and the peak RSS during the
inverse (goal: about one n x n matrix), and max |P·G[:, j] - e_j| over 8 columns. Sizes whose
matrix does not fit in the available memory are skipped with a message. On a loaded machine
compare only the ratio: the GEMM beside it sees the same load.

    python experiments/benchmarks/bench_inverse.py --calibrate          # the path rule of linalg

times both paths of `spd_inverse` ("lapack": one threaded potrf + potri; "recursive", with
blocks of 128, 256, 512 and 1024 rows) interleaved with a GEMM, for n from 500 up to the largest n
the "lapack" path may take (LAPACK_SAFE_ROW_BYTES), and prints each as the ratio to the GEMM
roofline: the path rule (LARGE_N_THRESHOLD, DEFAULT_BLOCK) in linalg.py is read off this table.

OpenBLAS's overflow that rules the paths (models/linalg.py): bench_openblas_probe.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    current_rss_bytes,
    gib,
    peak_rss_bytes,
    print_header,
    reset_peak_rss,
    run_script,
    zipf_interactions,
)

LAM = 500.0
#: BLAS thread limit of every measurement (0: BLAS default); set from --threads
THREADS = 0
#: name of the clock (CLOCKS); set from --clock
CLOCK = "wall"


#: sizes of the inverse benchmark: default, --quick, --large (added)
INVERSE_SIZES = [5_000, 10_000, 20_000]
INVERSE_QUICK = [2_000]
INVERSE_LARGE = [30_000, 40_981]
#: the GEMM beside the inverse is min(n, GEMM_SIZE) square (an n³ GEMM at 41k would take minutes)
GEMM_SIZE = 4096


def inverse_gram(n: int, dtype: str, seed: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """Synthetic EASE system G + lam·I (n items, n users, ~25 interactions per user) and X."""
    from linrec.models.linalg import add_to_diagonal, gram

    X = zipf_interactions(n, n, 25 * n, seed)
    return X, add_to_diagonal(gram(X, dtype), LAM)


#: the clock of --inverse / --calibrate: wall time, or (--clock cpu, with --threads 1) this
#: process's CPU time, which a loaded machine disturbs much less
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter


def gemm_rate(size: int, dtype: str, min_seconds: float = 1.0) -> float:
    """GFLOP/s of `?gemm` C = A B on size x size Fortran arrays (scipy's BLAS, the library the
    inverse calls), repeated for at least `min_seconds`."""
    from scipy.linalg import blas

    rng = np.random.default_rng(0)
    a, b = (np.asfortranarray(rng.standard_normal((size, size)), dtype=dtype) for _ in range(2))
    c = np.zeros((size, size), dtype=dtype, order="F")
    gemm = blas.get_blas_funcs("gemm", (a,))
    reps, start = 0, clock()
    while True:
        gemm(1.0, a, b, beta=0.0, c=c, overwrite_c=1)
        reps += 1
        elapsed = clock() - start
        if elapsed >= min_seconds:
            return reps * 2.0 * size**3 / elapsed / 1e9


def inverse_worker(args: argparse.Namespace) -> dict:
    """GEMM, spd_inverse, GEMM on one synthetic EASE system in this (fresh) process."""
    from linrec.models.linalg import (
        DEFAULT_BLOCK,
        LARGE_N_THRESHOLD,
        blas_threads,
        solver_path,
        spd_inverse,
    )

    n, dtype, threads = args.n_items, args.dtype, args.threads or None
    X, G = inverse_gram(n, dtype, args.seed)
    large_n = args.large_n or LARGE_N_THRESHOLD
    block = args.block or DEFAULT_BLOCK
    record = {"n": n, "dtype": dtype, "path": solver_path(n, dtype, large_n), "block": block}
    with blas_threads(threads):
        gemm_before = gemm_rate(min(n, GEMM_SIZE), dtype)
        rss_before = current_rss_bytes()
        record["peak_reset"] = reset_peak_rss()
        start = clock()
        P = spd_inverse(G, large_n=large_n, block=block, n_threads=threads)
        record["seconds"] = clock() - start
        record["peak_rss"], record["rss_before"] = peak_rss_bytes(), rss_before
        gemm_after = gemm_rate(min(n, GEMM_SIZE), dtype)
    record["gemm_gflops"] = [gemm_before, gemm_after]
    # P G[:, j] = e_j on a few columns (G rebuilt from X: the inverse overwrote it)
    cols = np.random.default_rng(1).choice(n, size=min(8, n), replace=False)
    X64 = X.astype(np.float64)
    G_cols = (X64.T[cols] @ X64).toarray()
    G_cols[np.arange(cols.size), cols] += LAM
    residual = np.empty((n, cols.size))  # P G[:, cols] by row blocks: no n x n float64 copy
    for start in range(0, n, 2048):
        residual[start:start + 2048] = P[start:start + 2048].astype(np.float64) @ G_cols.T
    residual[cols, np.arange(cols.size)] -= 1.0
    record["residual"] = float(np.abs(residual).max())
    return record


def run_inverse(sizes: list[int], dtypes: list[str], seed: int, large_n: int, block: int) -> None:
    from linrec.models.linalg import available_memory_bytes

    print("SPD inverse (linrec.models.linalg.spd_inverse) of a synthetic EASE system G + lam·I, "
          "n³ flops;\nGEMM = ?gemm of size min(n, 4096) timed just before and just after "
          "(scipy's OpenBLAS); ratio = time / (n³ / mean GEMM rate), goal <= 1.15;\n"
          "matrix = one n x n array; peak = max RSS during the inverse; extra = peak - RSS "
          "before it; resid = max |P·G[:, j] - e_j| over 8 columns")
    header = (f"{'n':>6} {'dtype':>7} {'path':>9} | {'inverse s':>9} {'GFLOP/s':>8} | "
              f"{'GEMM GFLOP/s':>13} | {'ratio':>5} | {'matrix GiB':>10} {'peak GiB':>8} "
              f"{'extra MiB':>9} | {'resid':>8}")
    print_header(header)
    for n in sizes:
        for dtype in dtypes:
            matrix = n * n * np.dtype(dtype).itemsize
            need = matrix + 3 * GEMM_SIZE**2 * np.dtype(dtype).itemsize + (1 << 30)
            if available_memory_bytes() < need:
                print(f"{n:>6} {dtype:>7} skipped: needs ~{need / 2**30:.1f} GiB, "
                      f"{available_memory_bytes() / 2**30:.1f} GiB available")
                continue
            argv = ["--worker", "inverse", "--n-items", str(n), "--dtype", dtype, "--seed",
                    str(seed), "--threads", str(THREADS), "--large-n", str(large_n), "--block",
                    str(block), "--clock", CLOCK]
            out = run_script(__file__, argv)
            if out.returncode != 0:
                print(f"{n:>6} {dtype:>7} FAILED (exit {out.returncode}): "
                      f"{out.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            gemm = sum(r["gemm_gflops"]) / 2
            rate = n**3 / r["seconds"] / 1e9
            peak = gib(r["peak_rss"]) if r["peak_reset"] else "  n/a"
            extra = (r["peak_rss"] - r["rss_before"]) / 2**20 if r["peak_reset"] else float("nan")
            print(f"{n:>6} {dtype:>7} {r['path']:>9} | {r['seconds']:9.2f} {rate:8.1f} | "
                  f"{r['gemm_gflops'][0]:6.1f} {r['gemm_gflops'][1]:6.1f} | {gemm / rate:5.2f} | "
                  f"{matrix / 2**30:10.2f} {peak:>8} {extra:9.0f} | {r['residual']:8.1e}",
                  flush=True)


#: block sizes of the recursive path compared by --calibrate
CALIBRATE_BLOCKS = [128, 256, 512, 1024]
#: sizes of --calibrate: up to the largest n of the "lapack" path, and one beyond (recursive only)
CALIBRATE_SIZES = {"float32": [500, 1000, 2000, 4096, 8192, 12_000],
                   "float64": [500, 1000, 2000, 3000, 4096, 8192]}


def calibrate_worker(args: argparse.Namespace) -> dict:
    """Rounds of [GEMM, lapack path, recursive path per block, GEMM] on one n; wall seconds."""
    from linrec.models.linalg import blas_threads, solver_path, spd_inverse

    n, dtype, threads = args.n_items, args.dtype, args.threads or None
    _, G = inverse_gram(n, dtype, args.seed)
    flops = float(n) ** 3
    lapack = ["lapack"] if solver_path(n, dtype, large_n=n + 1) == "lapack" else []
    ratios: dict[str, list[float]] = {x: [] for x in lapack + [f"rec{b}" for b in CALIBRATE_BLOCKS]}
    gemms = []
    with blas_threads(threads):
        for _ in range(args.rounds):
            g0 = gemm_rate(min(n, GEMM_SIZE), dtype, 0.3)
            times = {}
            for name in ratios:
                A = G.copy()
                large_n, block = (n + 1, 256) if name == "lapack" else (1, int(name[3:]))
                start = clock()
                spd_inverse(A, large_n=large_n, block=block, n_threads=threads)
                times[name] = clock() - start
            g1 = gemm_rate(min(n, GEMM_SIZE), dtype, 0.3)
            gemm = (g0 + g1) / 2
            gemms.append(gemm)
            for name, seconds in times.items():
                ratios[name].append(seconds / (flops / (gemm * 1e9)))
    return {"n": n, "dtype": dtype, "gemm": gemms, "ratios": ratios}


def run_calibrate(seed: int, rounds: int, dtypes: list[str]) -> None:
    from linrec.models.linalg import LAPACK_SAFE_ROW_BYTES

    print("spd_inverse paths: ratio time / (n³ / GEMM rate), median of "
          f"{rounds} interleaved rounds (GEMM of size min(n, 4096) before and after each round);"
          f"\n'lapack' only up to {LAPACK_SAFE_ROW_BYTES} bytes per row; recN = recursive path, "
          "block N")
    names = ["lapack"] + [f"rec{b}" for b in CALIBRATE_BLOCKS]
    header = f"{'n':>6} {'dtype':>7} | {'GEMM GF':>8} | " + " ".join(f"{x:>7}" for x in names)
    print_header(header)
    for dtype in dtypes:
        for n in CALIBRATE_SIZES[dtype]:
            argv = ["--worker", "calibrate", "--n-items", str(n), "--dtype", dtype, "--seed",
                    str(seed), "--threads", str(THREADS), "--rounds", str(rounds), "--clock",
                    CLOCK]
            out = run_script(__file__, argv)
            if out.returncode != 0:
                print(f"{n:>6} {dtype:>7} FAILED (exit {out.returncode})")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            medians = {x: float(np.median(v)) for x, v in r["ratios"].items()}
            best = min(medians, key=medians.get)
            print(f"{n:>6} {dtype:>7} | {np.median(r['gemm']):8.1f} | "
                  + " ".join(f"{medians[x]:7.2f}" if x in medians else f"{'-':>7}" for x in names)
                  + f"   fastest: {best}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="n = 2 000 only")
    parser.add_argument("--large", action="store_true", help="adds 30 000 and 40 981 (~1 h)")
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--dtypes", nargs="*", default=["float32", "float64"])
    parser.add_argument("--large-n", type=int, default=0,
                        help="spd_inverse's large_n (0: its default)")
    parser.add_argument("--block", type=int, default=0, help="spd_inverse's block (0: its default)")
    parser.add_argument("--calibrate", action="store_true",
                        help="time both spd_inverse paths and block sizes (the rule in linalg)")
    parser.add_argument("--rounds", type=int, default=3, help="--calibrate: interleaved rounds")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="'cpu' (process CPU time) needs --threads 1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="BLAS threads (0: all cores)")
    # internal: one measurement in a subprocess
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--n-items", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float64", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global THREADS, CLOCK, clock
    CLOCK, clock = args.clock, CLOCKS[args.clock]
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu measures one thread: use it with --threads 1")
    if args.worker:
        workers = {"inverse": inverse_worker, "calibrate": calibrate_worker}
        print(json.dumps(workers[args.worker](args)))
        return
    THREADS = args.threads
    print(f"cpu cores: {os.cpu_count()}, threads: {args.threads or 'all'}, load average: "
          f"{os.getloadavg()[0]:.1f}, clock: {CLOCK}")
    if args.calibrate:
        run_calibrate(args.seed, args.rounds, args.dtypes)
        return
    sizes = args.sizes or (INVERSE_QUICK if args.quick else
                           INVERSE_SIZES + (INVERSE_LARGE if args.large else []))
    run_inverse(sizes, args.dtypes, args.seed, args.large_n, args.block)


if __name__ == "__main__":
    main()
