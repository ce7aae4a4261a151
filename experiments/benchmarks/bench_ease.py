"""Benchmark: linrec's EASE fit (blocked threaded Gram + in-place Cholesky inverse) against Steck's
published reference (`G = X.T @ X; G[diag] += lam; P = np.linalg.inv(G); B = P / -diag(P)`), and
linrec's Gram against scipy's `(X.T @ X).toarray()`, on the same synthetic data; and the SPD
inverse alone against the GEMM roofline.

Every measurement runs in a fresh subprocess so that its peak memory (max RSS, which sees BLAS and
numpy allocations that tracemalloc misses) is its own. Scores of both fits on the same users are
compared in float64.

    python experiments/benchmarks/bench_ease.py            # 2 000, 5 000, 10 000 items
    python experiments/benchmarks/bench_ease.py --quick    # 500, 1 000 items
    python experiments/benchmarks/bench_ease.py --large    # n = 40 981 float32, Gowalla size

SPD inverse (`linrec.models.linalg.spd_inverse`, n³ flops) at the roofline:

    python experiments/benchmarks/bench_ease.py --inverse            # n = 5k, 10k, 20k
    python experiments/benchmarks/bench_ease.py --inverse --quick    # n = 2k
    python experiments/benchmarks/bench_ease.py --inverse --large    # also 30k, 41k (~1 h)
    python experiments/benchmarks/bench_ease.py --inverse --sizes 3000 --dtypes float64

For each n and dtype, a fresh process builds G + lam·I from a synthetic EASE Gram, times a GEMM
(`?gemm` of size min(n, 4096), the same scipy OpenBLAS the inverse calls), the inverse, and the
GEMM again, and prints the inverse's GFLOP/s (n³ / time), the GEMM rate (mean of the two), the
ratio time / (n³ / GEMM rate) (goal: <= 1.15), the matrix size and the peak RSS during the
inverse (goal: about one n x n matrix), and max |P·G[:, j] - e_j| over 8 columns. Sizes whose
matrix does not fit in the available memory are skipped with a message. On a loaded machine
compare only the ratio: the GEMM beside it sees the same load.

    python experiments/benchmarks/bench_ease.py --calibrate          # the path rule of linalg

times both paths of `spd_inverse` ("lapack": one threaded potrf + potri; "recursive", with
blocks of 128, 256 and 512 rows) interleaved with a GEMM, for n from 500 up to the largest n
the "lapack" path may take (LAPACK_SAFE_ROW_BYTES), and prints each as the ratio to the GEMM
roofline: the path rule (LARGE_N_THRESHOLD, DEFAULT_BLOCK) in linalg.py is read off this table.

    python experiments/benchmarks/bench_ease.py --probe-openblas

calls OpenBLAS's threaded ?syrk (what its threaded potrf / potri call on the trailing matrix) at
growing n in child processes and prints which sizes crash (the reason for the recursive path).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

LAM = 500.0
N_EVAL_USERS = 500


def synthetic_interactions(n_users: int, n_items: int, nnz: int, seed: int,
                           activity_sigma: float = 1.0) -> sp.csr_matrix:
    """Binary users x items CSR with Zipf-like item popularity (exponent 0.8) and log-normal user
    activity of spread `activity_sigma` (about `nnz` interactions before duplicates merge)."""
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, n_items + 1) ** 0.8
    popularity /= popularity.sum()
    mu = np.log(nnz / n_users) - activity_sigma**2 / 2
    lengths = rng.lognormal(mu, activity_sigma, n_users).astype(np.int64)
    lengths = np.clip(lengths, 1, n_items // 2)
    users = np.repeat(np.arange(n_users), lengths)
    items = rng.permutation(n_items)[rng.choice(n_items, size=users.size, p=popularity)]
    X = sp.csr_matrix((np.ones(users.size, np.float32), (users, items)), shape=(n_users, n_items))
    X.data[:] = 1.0
    return X


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def data_for(args: argparse.Namespace) -> sp.csr_matrix:
    return synthetic_interactions(args.n_users, args.n_items, args.nnz, args.seed,
                                  args.activity_sigma)


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
            W = EASE(lam=LAM, dtype=args.dtype, num_threads=args.threads).fit(X).W
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


#: BLAS thread limit of every measurement (0: BLAS default); set from --threads
THREADS = 0
#: name of the clock (CLOCKS) of --inverse / --calibrate; set from --clock
CLOCK = "wall"


def measure(kind: str, n_items: int, n_users: int, nnz: int, dtype: str, seed: int,
            scores_out: str = "", activity_sigma: float = 1.0) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--n-items", str(n_items),
           "--n-users", str(n_users), "--nnz", str(nnz), "--dtype", dtype, "--seed", str(seed),
           "--threads", str(THREADS), "--activity-sigma", str(activity_sigma)]
    if scores_out:
        cmd += ["--scores-out", scores_out]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def print_header(header: str) -> None:
    """A table's header line and the rule under it."""
    print(header)
    print("-" * len(header))


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:6.2f}"


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


#: sizes of the inverse benchmark: default, --quick, --large (added)
INVERSE_SIZES = [5_000, 10_000, 20_000]
INVERSE_QUICK = [2_000]
INVERSE_LARGE = [30_000, 40_981]
#: the GEMM beside the inverse is min(n, GEMM_SIZE) square (an n³ GEMM at 41k would take minutes)
GEMM_SIZE = 4096


def inverse_gram(n: int, dtype: str, seed: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """Synthetic EASE system G + lam·I (n items, n users, ~25 interactions per user) and X."""
    from linrec.models.linalg import add_to_diagonal, gram

    X = synthetic_interactions(n, n, 25 * n, seed)
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


def _reset_peak_rss() -> bool:
    """Reset the process's peak RSS (VmHWM) so that the next reading is the peak from now on."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return max_rss_bytes()


def _current_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


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
        rss_before = _current_rss_bytes()
        record["peak_reset"] = _reset_peak_rss()
        start = clock()
        P = spd_inverse(G, large_n=large_n, block=block, n_threads=threads)
        record["seconds"] = clock() - start
        record["peak_rss"], record["rss_before"] = _peak_rss_bytes(), rss_before
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


def child(argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True,
                          timeout=timeout)


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
            out = child(argv)
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
            out = child(argv)
            if out.returncode != 0:
                print(f"{n:>6} {dtype:>7} FAILED (exit {out.returncode})")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            medians = {x: float(np.median(v)) for x, v in r["ratios"].items()}
            best = min(medians, key=medians.get)
            print(f"{n:>6} {dtype:>7} | {np.median(r['gemm']):8.1f} | "
                  + " ".join(f"{medians[x]:7.2f}" if x in medians else f"{'-':>7}" for x in names)
                  + f"   fastest: {best}", flush=True)


#: sizes of --probe-openblas (the overflow is expected from ~124 KB per row: module linalg)
PROBE_SIZES = {"float64": [8_000, 14_000, 16_000, 18_000, 20_000],
               "float32": [16_000, 24_000, 30_000, 34_000, 41_000]}


def probe_worker(args: argparse.Namespace) -> dict:
    """One threaded ?syrk C (n x n, lower) = A Aᵀ, A n x 512: what OpenBLAS's threaded potrf
    does to the trailing matrix. Crashes (SIGSEGV) when OpenBLAS's packing buffer overflows."""
    from scipy.linalg import blas

    from linrec.models.linalg import blas_threads

    n, dtype = args.n_items, args.dtype
    a = np.ones((n, 512), dtype=dtype, order="F")
    c = np.zeros((n, n), dtype=dtype, order="F")
    syrk = blas.get_blas_funcs("syrk", (a,))
    start = time.perf_counter()
    with blas_threads(args.threads or None):
        syrk(1.0, a, beta=0.0, c=c, lower=1, overwrite_c=1)
    return {"seconds": time.perf_counter() - start, "ok": bool(c[n - 1, 0] == 512.0)}


def run_probe(sizes: list[int] | None, dtypes: list[str]) -> None:
    from linrec.models.linalg import LAPACK_SAFE_ROW_BYTES, available_memory_bytes

    print("OpenBLAS threaded ?syrk (n x n output, k = 512), one child process each; "
          f"spd_inverse gives threaded potrf/potri at most {LAPACK_SAFE_ROW_BYTES} bytes per row")
    for dtype in dtypes:
        for n in sizes or PROBE_SIZES[dtype]:
            row = n * np.dtype(dtype).itemsize
            if available_memory_bytes() < n * n * np.dtype(dtype).itemsize + (1 << 30):
                print(f"{dtype:>7} n={n:>6} ({row / 1024:5.0f} KiB/row): skipped (memory)")
                continue
            argv = ["--worker", "probe_syrk", "--n-items", str(n), "--dtype", dtype,
                    "--threads", str(THREADS)]
            try:
                out = child(argv, timeout=900)
                status = ("ok" if out.returncode == 0 else
                          f"CRASHED (exit {out.returncode}, signal {-out.returncode})"
                          if out.returncode < 0 else f"FAILED (exit {out.returncode})")
            except subprocess.TimeoutExpired:
                status = "timed out"
            print(f"{dtype:>7} n={n:>6} ({row / 1024:5.0f} KiB/row): {status}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="500 and 1 000 items only (with --inverse: n = 2 000)")
    parser.add_argument("--large", action="store_true",
                        help="n = 40 981 float32 (~14 GiB); with --inverse: adds 30 000, 40 981")
    parser.add_argument("--inverse", action="store_true",
                        help="SPD inverse against the GEMM roofline (see the docstring)")
    parser.add_argument("--dtypes", nargs="*", default=["float32", "float64"],
                        help="dtypes of --inverse, --calibrate and --probe-openblas")
    parser.add_argument("--large-n", type=int, default=0,
                        help="--inverse: spd_inverse's large_n (0: its default)")
    parser.add_argument("--block", type=int, default=0,
                        help="--inverse: spd_inverse's block (0: its default)")
    parser.add_argument("--calibrate", action="store_true",
                        help="time both spd_inverse paths and block sizes (the rule in linalg)")
    parser.add_argument("--rounds", type=int, default=3, help="--calibrate: interleaved rounds")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="--inverse/--calibrate: 'cpu' (process CPU time) needs --threads 1")
    parser.add_argument("--probe-openblas", action="store_true",
                        help="which n crash OpenBLAS's threaded ?syrk (child processes)")
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
    global THREADS, CLOCK, clock
    CLOCK, clock = args.clock, CLOCKS[args.clock]
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu measures one thread: use it with --threads 1")
    if args.worker:
        workers = {"inverse": inverse_worker, "calibrate": calibrate_worker,
                   "probe_syrk": probe_worker}
        print(json.dumps(workers.get(args.worker, worker)(args)))
        return
    THREADS = args.threads
    print(f"cpu cores: {os.cpu_count()}, threads: {args.threads or 'all'}, load average: "
          f"{os.getloadavg()[0]:.1f}, clock (--inverse/--calibrate): {CLOCK}")
    if args.inverse:
        sizes = args.sizes or (INVERSE_QUICK if args.quick else
                               INVERSE_SIZES + (INVERSE_LARGE if args.large else []))
        run_inverse(sizes, args.dtypes, args.seed, args.large_n, args.block)
        return
    if args.calibrate:
        run_calibrate(args.seed, args.rounds, args.dtypes)
        return
    if args.probe_openblas:
        run_probe(args.sizes, args.dtypes)
        return
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
