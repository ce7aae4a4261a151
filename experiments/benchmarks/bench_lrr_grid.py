"""Benchmark: a (rank x λ) LRR grid that reuses one eigendecomposition and Z = foldin V
(docs/concepts/models.md; Li 2023, Algorithm 2) against the naive grid that recomputes eigh and W
per point.

Prints one table:
  * large size (default 10 000 items): one eigendecomposition, one evaluation pass, and the
    3 x 7 grid with reuse; the target is grid <= 2 x (eigendecomposition + one pass);
  * small size (default 2 000 items): the same grid with reuse vs naive, same process.

Usage: python experiments/benchmarks/bench_lrr_grid.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_info, threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lognormal_interactions, peak_rss_gib, timed

from linrec.models.spectral import (
    LRR,
    ProjectionCache,
    clear_spectrum_cache,
    compute_spectrum,
    spectral_grid,
)

TOP_K = 100


def split_foldin(matrix: sp.csr_matrix, seed: int,
                 test_prop: float = 0.2) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """80/20 fold-in/target split of every row (Liang et al. 2018), vectorised over entries."""
    rng = np.random.default_rng(seed)
    coo = matrix.tocoo()
    held_out = rng.random(coo.nnz) < test_prop
    def part(mask: np.ndarray) -> sp.csr_matrix:
        return sp.csr_matrix((coo.data[mask], (coo.row[mask], coo.col[mask])),
                             shape=matrix.shape)
    return part(~held_out), part(held_out)


def evaluation_pass(score: Callable[[sp.csr_matrix], np.ndarray], foldin: sp.csr_matrix,
                    targets: sp.csr_matrix, batch_size: int) -> float:
    """Score users in batches, mask fold-in items, take the top 100 and return the mean
    Recall@100 with the min(K, |I_u|) denominator (Liang et al. 2018)."""
    hits = np.zeros(foldin.shape[0])
    for start in range(0, foldin.shape[0], batch_size):
        rows = slice(start, min(start + batch_size, foldin.shape[0]))
        scores = score(foldin[rows])
        batch_foldin = foldin[rows].tocoo()
        scores[batch_foldin.row, batch_foldin.col] = -np.inf
        top = np.argpartition(-scores, TOP_K, axis=1)[:, :TOP_K]
        found = targets[rows][np.arange(top.shape[0])[:, None], top]
        hits[rows] = np.asarray(found.sum(axis=1))[:, 0]
    n_targets = np.diff(targets.indptr)
    valid = n_targets > 0
    return float(np.mean(hits[valid] / np.minimum(TOP_K, n_targets[valid])))


def make_data(n_items: int, n_train: int, n_eval: int, mean_items: float, seed: int):
    everything = lognormal_interactions(n_train + n_eval, n_items, mean_items, seed)
    train = everything[:n_train]
    foldin, targets = split_foldin(everything[n_train:], seed + 1)
    return train, foldin, targets


def reuse_grid(train, foldin, targets, ranks, lams, batch_size) -> tuple[float, dict, float]:
    """Algorithm 2: one (partial) eigh, Z cached, every grid point is one filtered pass.
    Returns (total seconds, {(rank, λ): Recall@100}, seconds of the eigendecomposition)."""
    start = time.perf_counter()
    t_eigh, spectrum = timed(lambda: compute_spectrum(train, rank=max(ranks), cache=False))
    projections = ProjectionCache(spectrum, k_max=max(ranks))
    results = {(p["rank"], p["lam"]): evaluation_pass(scorer.score, foldin, targets, batch_size)
               for p, scorer in spectral_grid("lrr", spectrum, {"rank": ranks, "lam": lams},
                                              projections=projections)}
    return time.perf_counter() - start, results, t_eigh


def naive_grid(train, foldin, targets, ranks, lams, batch_size) -> tuple[float, dict]:
    """Reference: per grid point a fresh numpy eigh of G, the dense W, and scores foldin @ W."""
    def run() -> dict:
        results = {}
        for rank in ranks:
            for lam in lams:
                gram_matrix = (train.T @ train).toarray().astype(np.float64)
                e, v = np.linalg.eigh(gram_matrix)
                e, v = np.maximum(e[::-1], 0.0), v[:, ::-1][:, :rank]
                weights = (v * (e[:rank] / (e[:rank] + lam))) @ v.T
                results[(rank, lam)] = evaluation_pass(
                    lambda batch, w=weights: np.asarray(batch @ w), foldin, targets, batch_size)
        return results
    return timed(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about 30 s)")
    parser.add_argument("--n-items", type=int, default=10_000)
    parser.add_argument("--n-train-users", type=int, default=30_000)
    parser.add_argument("--n-eval-users", type=int, default=3_000)
    parser.add_argument("--mean-items", type=float, default=60.0,
                        help="mean interactions per user (density = mean / n_items)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--lams", type=float, nargs="+",
                        default=[100, 200, 500, 1000, 2000, 5000, 10000])
    parser.add_argument("--small-items", type=int, default=2_000)
    parser.add_argument("--small-eval-users", type=int, default=1_000)
    parser.add_argument("--batch-size", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS threads (default: the library's choice)")
    args = parser.parse_args()
    if args.threads is not None:
        threadpool_limits(args.threads)
    if args.quick:
        args.n_items, args.n_train_users, args.n_eval_users = 3_000, 10_000, 1_000
        args.ranks = [150, 300, 600]
        args.small_items, args.small_eval_users = 800, 500
    clear_spectrum_cache()

    def emit(name: str, n_items: int, seconds: float, note: str) -> None:
        print(f"{name:<34} {n_items:>8} {seconds:>9.2f}  {note}", flush=True)

    # ---- large size: eigh, one pass, grid with reuse
    train, foldin, targets = make_data(args.n_items, args.n_train_users, args.n_eval_users,
                                       args.mean_items, args.seed)
    density = train.nnz / (train.shape[0] * train.shape[1])
    print(f"LRR grid benchmark: train {args.n_train_users} users x {args.n_items} items, "
          f"density {density:.4f}, {args.n_eval_users} eval users, float64, "
          f"BLAS threads {threadpool_info()[0]['num_threads']}")
    print(f"{'step':<34} {'n_items':>8} {'seconds':>9}  notes")
    print("-" * 100, flush=True)
    k_max = max(args.ranks)
    t_eigh, spectrum = timed(lambda: compute_spectrum(train, rank=k_max, cache=False))
    emit(f"eigendecomposition (rank {k_max})", args.n_items, t_eigh,
         f"{spectrum.n_components} components")
    single = LRR(rank=k_max, lam=float(np.median(args.lams))).fit_spectrum(spectrum)
    t_pass, recall = timed(partial(evaluation_pass, single.score, foldin, targets,
                                   args.batch_size))
    emit(f"one evaluation pass (rank {k_max})", args.n_items, t_pass,
         f"{args.n_eval_users} users, Recall@100={recall:.4f}")
    del spectrum, single  # free the large-size arrays before the grid
    n_points = len(args.ranks) * len(args.lams)
    t_grid, grid, t_grid_eigh = reuse_grid(train, foldin, targets, args.ranks, args.lams,
                                           args.batch_size)
    best = max(grid, key=grid.get)
    budget = 2 * (t_eigh + t_pass)
    emit(f"{len(args.ranks)}x{len(args.lams)} grid, reuse", args.n_items, t_grid,
         f"{t_grid / (t_eigh + t_pass):.2f}x (eigh+pass); target <= 2x: "
         f"{'OK' if t_grid <= budget else 'MISSED'}; its eigh {t_grid_eigh:.1f} s + "
         f"{n_points} passes {t_grid - t_grid_eigh:.1f} s; best {best}")

    # ---- small size: reuse vs naive in the same process
    ranks_small = [max(1, r * args.small_items // args.n_items) for r in args.ranks]
    small = make_data(args.small_items, args.n_train_users // 3, args.small_eval_users,
                      args.mean_items * args.small_items / args.n_items * 2, args.seed + 7)
    t_reuse, grid_reuse, _ = reuse_grid(*small, ranks_small, args.lams, args.batch_size)
    t_naive, grid_naive = naive_grid(*small, ranks_small, args.lams, args.batch_size)
    diff = max(abs(grid_reuse[key] - grid_naive[key]) for key in grid_reuse)
    emit(f"{n_points}-point grid, reuse", args.small_items, t_reuse,
         f"ranks {ranks_small}")
    emit(f"{n_points}-point grid, naive", args.small_items, t_naive,
         f"speed-up {t_naive / t_reuse:.1f}x; max |ΔRecall@100| = {diff:.1e}")

    print(f"peak RSS {peak_rss_gib():.2f} GiB")


if __name__ == "__main__":
    main()
