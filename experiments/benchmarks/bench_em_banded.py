"""Benchmark of the MLE's EM on a banded P(r|R) (the sampling study's n = 500 and 1000 at
Gowalla's catalogue size), linrec's dense row blocks against the same EM written with scipy's CSR
products, measured in the same process.

The sampling study fits the MLE of every repeat at once (B samples, one EM with B columns), so the
table runs B = 1, 10 and 100 histograms of sampled ranks drawn from a popularity-like P(R), 100
iterations each, on one BLAS thread as the EM runs.

    python experiments/benchmarks/bench_em_banded.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import timed

from linrec.eval.conditional import conditional_operator
from linrec.eval.estimators.em import MIX_FLOOR, mle
from linrec.eval.simulate import simulate_sampled_ranks
from linrec.hardware import blas_threads


def reference_em(cond: sp.csr_array, hists: np.ndarray, n_iter: int) -> np.ndarray:
    """The EM π ← π ⊙ A (w / Aᵀπ) with two scipy CSR products per iteration."""
    pi = np.full((cond.shape[0], hists.shape[1]), 1.0 / cond.shape[0])
    mix = np.maximum(cond.T @ pi, MIX_FLOOR)
    for _ in range(n_iter):
        pi *= cond @ (hists / mix)
        mix = np.maximum(cond.T @ pi, MIX_FLOOR)
    return pi / pi.sum(axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-items", type=int, default=40_981)
    parser.add_argument("--n-targets", type=int, default=20_000, help="sampled ranks per sample")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side (best is kept)")
    parser.add_argument("--quick", action="store_true", help="n_items 10 000, 20 iterations")
    args = parser.parse_args()
    if args.quick:
        args.n_items, args.iterations = 10_000, 20
    rng = np.random.default_rng(0)
    p_true = np.arange(1, args.n_items + 1, dtype=np.float64) ** -0.9
    print(f"N={args.n_items} M={args.n_targets} per sample, {args.iterations} EM iterations, "
          "1 BLAS thread; seconds are the best of the repeats")
    header = f"{'n':>5} {'B':>4} {'csr s':>8} {'blocks s':>9} {'speedup':>8} {'max|Δp̂|':>10}"
    print(header)
    print("-" * len(header))
    for sample_size in (500, 1000):
        cond = conditional_operator(args.n_items, sample_size, banded=True)
        for n_samples in (1, 10, 100):
            hists = np.empty((sample_size, n_samples))
            for b in range(n_samples):
                global_ranks = rng.choice(args.n_items, size=args.n_targets,
                                          p=p_true / p_true.sum()) + 1
                ranks = simulate_sampled_ranks(global_ranks, args.n_items, sample_size, rng=rng)
                hists[:, b] = np.bincount(ranks - 1, minlength=sample_size) / len(ranks)
            with blas_threads(1):
                csr_time, p_ref = timed(
                    lambda c=cond, h=hists: reference_em(c, h, args.iterations), args.repeats)
                fast_time, (p_fast, _, _) = timed(
                    lambda c=cond, h=hists: mle(c, h, args.iterations), args.repeats)
            diff = float(np.abs(p_fast - p_ref).max())
            print(f"{sample_size:>5} {n_samples:>4} {csr_time:>8.3f} {fast_time:>9.3f} "
                  f"{csr_time / fast_time:>8.2f} {diff:>10.2e}")


if __name__ == "__main__":
    main()
