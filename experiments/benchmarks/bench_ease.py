"""Benchmark: linrec's EASE fit (blocked threaded Gram + in-place Cholesky inverse) against Steck's
published reference (`G = X.T @ X; G[diag] += lam; P = np.linalg.inv(G); B = P / -diag(P)`), and
linrec's Gram against scipy's `(X.T @ X).toarray()`, on the same synthetic data.

Every measurement runs in a fresh subprocess so that its peak memory (max RSS, which sees BLAS and
numpy allocations that tracemalloc misses) is its own. Scores of both fits on the same users are
compared in float64.

    python experiments/benchmarks/bench_ease.py            # 2 000, 5 000, 10 000 items
    python experiments/benchmarks/bench_ease.py --quick    # 500, 1 000 items
    python experiments/benchmarks/bench_ease.py --large    # n = 40 981 float32, Gowalla size
    python experiments/benchmarks/bench_ease.py --gram-large 1.0 2.0   # Gram only, at that size

The SPD inverse alone against the GEMM roofline: bench_inverse.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import gib, last_json, max_rss_bytes, print_header, run_script, zipf_interactions

LAM = 500.0
N_EVAL_USERS = 500
#: BLAS thread limit of every measurement (0: BLAS default); set from --threads
THREADS = 0


def data_for(args: argparse.Namespace) -> sp.csr_matrix:
    return zipf_interactions(args.n_users, args.n_items, args.nnz, args.seed, args.activity_sigma)


def reference_ease(X: sp.csr_matrix, lam: float) -> np.ndarray:
    """Steck's published EASE code (float64, numpy.linalg.inv)."""
    G = X.T.dot(X).toarray().astype(np.float64)
    diag = np.diag_indices(G.shape[0])
    G[diag] += lam
    P = np.linalg.inv(G)
    B = P / (-np.diag(P))
    B[diag] = 0
    return B


def worker(args: argparse.Namespace) -> dict:
    """One measurement in this (fresh) process; returns a JSON-able record."""
    from linrec.models.ease import EASE
    from linrec.models.linalg import (
        add_to_diagonal,
        blas_threads,
        gram,
        spd_inverse,
        zero_diagonal_weights,
    )

    X = data_for(args)
    threads = args.threads or None  # the same BLAS thread limit for ours and the reference
    record = {"kind": args.worker, "n_items": args.n_items, "nnz": int(X.nnz),
              "rss_before": max_rss_bytes()}
    start = time.perf_counter()
    with blas_threads(threads):
        if args.worker == "ease":
            W = EASE(lam=LAM, dtype=args.dtype, num_threads=args.threads).fit(X).W_
        elif args.worker == "ease_steps":  # the same fit, timed step by step (for --large)
            t0 = time.perf_counter()
            G = gram(X, args.dtype, n_threads=threads)
            t1 = time.perf_counter()
            P = spd_inverse(add_to_diagonal(G, LAM))
            t2 = time.perf_counter()
            W = zero_diagonal_weights(P)
            record.update(gram_s=t1 - t0, inverse_s=t2 - t1, weights_s=time.perf_counter() - t2)
        elif args.worker == "reference":
            W = reference_ease(X, LAM)
        elif args.worker == "gram":
            W = gram(X, args.dtype, n_threads=threads)
        elif args.worker == "gram_scipy":
            G_sparse = X.T @ X
            record["gram_nnz"] = int(G_sparse.nnz)
            W = G_sparse.toarray().astype(args.dtype, copy=False)
        else:
            raise SystemExit(f"unknown worker {args.worker}")
    record["seconds"] = time.perf_counter() - start
    record["peak_rss"] = max_rss_bytes()
    if args.scores_out:
        foldin = X[: min(N_EVAL_USERS, X.shape[0])]
        np.save(args.scores_out, np.asarray(foldin.astype(np.float64) @ W.astype(np.float64)))
    return record


def measure(kind: str, n_items: int, n_users: int, nnz: int, dtype: str, seed: int,
            scores_out: str = "", activity_sigma: float = 1.0) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--n-items", str(n_items),
           "--n-users", str(n_users), "--nnz", str(nnz), "--dtype", dtype, "--seed", str(seed),
           "--threads", str(THREADS), "--activity-sigma", str(activity_sigma)]
    if scores_out:
        cmd += ["--scores-out", scores_out]
    return last_json(run_script(cmd[1], cmd[2:], check=True))


def run_sizes(sizes: list[int], density: float, seed: int) -> None:
    print(f"EASE fit, lam={LAM}, float64, users = 5 x items, density {density:.2%}; peak = max RSS "
          "of a fresh process (GiB), 'data' = RSS before the fit")
    header = (f"{'items':>6} {'nnz':>9} | {'ref s':>7} {'ref GiB':>7} | {'ours s':>7} "
              f"{'ours GiB':>8} | {'speed-up':>8} {'data GiB':>8} | {'max|Δscore|':>11} | "
              f"{'ours f32 s':>10} {'f32 GiB':>7}")
    print_header(header)
    with tempfile.TemporaryDirectory() as tmp:
        for n_items in sizes:
            n_users, nnz = 5 * n_items, int(density * 5 * n_items * n_items)
            ref_scores, our_scores = Path(tmp, "ref.npy"), Path(tmp, "ours.npy")
            ref = measure("reference", n_items, n_users, nnz, "float64", seed, str(ref_scores))
            ours = measure("ease", n_items, n_users, nnz, "float64", seed, str(our_scores))
            ours32 = measure("ease", n_items, n_users, nnz, "float32", seed)
            diff = np.abs(np.load(ref_scores) - np.load(our_scores)).max()
            print(f"{n_items:>6} {ref['nnz']:>9} | {ref['seconds']:7.2f} {gib(ref['peak_rss']):>7}"
                  f" | {ours['seconds']:7.2f} {gib(ours['peak_rss']):>8} | "
                  f"{ref['seconds'] / ours['seconds']:7.2f}x {gib(ours['rss_before']):>8} | "
                  f"{diff:11.2e} | {ours32['seconds']:10.2f} {gib(ours32['peak_rss']):>7}")
    print()
    print("Gram G = XᵀX (dense float64): linrec.models.linalg.gram vs scipy (X.T @ X).toarray()")
    header = (f"{'items':>6} {'nnz':>9} | {'scipy s':>8} {'GiB':>6} | {'ours s':>7} {'GiB':>6} "
              "| speed-up")
    print_header(header)
    for n_items in sizes:
        n_users, nnz = 5 * n_items, int(density * 5 * n_items * n_items)
        ref = measure("gram_scipy", n_items, n_users, nnz, "float64", seed)
        ours = measure("gram", n_items, n_users, nnz, "float64", seed)
        print(f"{n_items:>6} {ref['nnz']:>9} | {ref['seconds']:8.2f} {gib(ref['peak_rss'])} | "
              f"{ours['seconds']:7.2f} {gib(ours['peak_rss'])} | "
              f"{ref['seconds'] / ours['seconds']:.2f}x")


def run_large(seed: int) -> None:
    from linrec.models.linalg import available_memory_bytes

    n_items, n_users, nnz = 40_981, 29_858, 1_030_000
    need = 16 << 30
    if available_memory_bytes() < need:
        raise SystemExit(f"--large needs >= 16 GiB available; only "
                         f"{available_memory_bytes() / 2**30:.1f} GiB is")
    print(f"Large: {n_items} items, {n_users} users, ~{nnz} interactions, float32, lam={LAM}")
    print(f"one dense n x n float32 matrix = {n_items**2 * 4 / 2**30:.2f} GiB")
    ours = measure("ease_steps", n_items, n_users, nnz, "float32", seed)
    print(f"ours : total {ours['seconds']:.1f} s (Gram {ours['gram_s']:.1f} s, inverse "
          f"{ours['inverse_s']:.1f} s, weights {ours['weights_s']:.1f} s), peak RSS "
          f"{gib(ours['peak_rss'])} GiB (data {gib(ours['rss_before'])} GiB), nnz {ours['nnz']}")
    scipy_gram = measure("gram_scipy", n_items, n_users, nnz, "float32", seed)
    print(f"scipy Gram (X.T @ X).toarray(): {scipy_gram['seconds']:.1f} s, peak RSS "
          f"{gib(scipy_gram['peak_rss'])} GiB")


def run_gram_large(seed: int, sigmas: list[float]) -> None:
    """Gram at the Gowalla size (40 981 items, 29 858 users, ~1.03M interactions, float32) with
    heavier-tailed user activity, so that G has as many non-zeros as real Gowalla's (~52M)."""
    n_items, n_users, nnz = 40_981, 29_858, 1_030_000
    print(f"Gram at {n_items} items, {n_users} users, ~{nnz} interactions, float32")
    print("activity sigma | nnz(G)      | scipy (X.T @ X).toarray() | ours gram()     | speed-up")
    for sigma in sigmas:
        ref = measure("gram_scipy", n_items, n_users, nnz, "float32", seed, activity_sigma=sigma)
        ours = measure("gram", n_items, n_users, nnz, "float32", seed, activity_sigma=sigma)
        print(f"{sigma:14.1f} | {ref['gram_nnz']:11d} | {ref['seconds']:7.1f} s "
              f"{gib(ref['peak_rss'])} GiB        | {ours['seconds']:5.1f} s "
              f"{gib(ours['peak_rss'])} GiB | "
              f"{ref['seconds'] / ours['seconds']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="500 and 1 000 items only")
    parser.add_argument("--large", action="store_true", help="n = 40 981 float32 (~14 GiB)")
    parser.add_argument("--gram-large", type=float, nargs="*", default=None, metavar="SIGMA",
                        help="Gram only at the Gowalla size, for these activity spreads")
    parser.add_argument("--activity-sigma", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--density", type=float, default=0.005)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0,
                        help="BLAS/Gram threads for ours and the reference alike (0: all cores)")
    # internal: one measurement in a subprocess
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--n-items", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--n-users", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--nnz", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float64", help=argparse.SUPPRESS)
    parser.add_argument("--scores-out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global THREADS
    if args.worker:
        print(json.dumps(worker(args)))
        return
    THREADS = args.threads
    print(f"cpu cores: {os.cpu_count()}, threads: {args.threads or 'all'}, load average: "
          f"{os.getloadavg()[0]:.1f}")
    if args.large:
        run_large(args.seed)
        return
    if args.gram_large is not None:
        run_gram_large(args.seed, args.gram_large or [1.0, 1.5, 2.0])
        return
    sizes = args.sizes or ([500, 1000] if args.quick else [2000, 5000, 10000])
    run_sizes(sizes, args.density, args.seed)


if __name__ == "__main__":
    main()
