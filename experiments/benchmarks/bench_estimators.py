"""Benchmark of the sampled-metric estimators (linrec.eval.estimators) against straightforward
reference implementations of the same computations, measured in the same process.

Default workload (the targets of the estimator issue): n_items = 20,000, M = 100,000 held-out items,
n = 100, P(R) ∝ R^-0.9; adaptive sampling n0 = 100, n_max = 3200. Targets: mle (100 EM iterations)
< 0.5 s, bv < 0.5 s, mn < 0.5 s, adaptive_mle < 5 s, mes < 30 s.

    /work/venv/bin/python experiments/benchmarks/bench_estimators.py [--quick] [--skip-cvxpy]

"fast cold" includes building P(r|R) (conditional_operator's cache cleared), "fast warm" reuses it
(the 100-repeat use case; with the uniform prior this includes the cached AᵀA, "bv(prior)" and
"mn(prior)" use the MLE as prior and cannot reuse it); both are the best of --repeats runs.
References:
  - mle / adaptive_mle: P(r|R) from scipy.stats.binom.pmf and the textbook two-pass EM;
  - bv / mn: the authors' code's style, scipy.stats matrix, explicit inverse of the n x n system,
  the n x N
    weight matrix W = H⁻¹AᵀD and P̂ = P~ᵀW (the authors' code averages W[r_u] over users);
  - mes: cvxpy + CLARABEL (the authors' solver), against the dual Newton solver.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import timed

from linrec.eval import conditional
from linrec.eval.estimators import estimate
from linrec.eval.simulate import simulate_adaptive_ranks, simulate_sampled_ranks


def scipy_matrix(n_items: int, sample_size: int, ranks: np.ndarray | None = None) -> np.ndarray:
    theta = np.arange(n_items)[:, None] / (n_items - 1)
    cols = np.arange(sample_size) if ranks is None else np.asarray(ranks) - 1
    return stats.binom.pmf(cols[None, :], sample_size - 1, theta)


def reference_em(cond: np.ndarray, weights: np.ndarray, n_iter: int) -> np.ndarray:
    pi = np.full(cond.shape[0], 1.0 / cond.shape[0])
    for _ in range(n_iter):
        pi = pi * (cond @ (weights / np.maximum(pi @ cond, 1e-300)))
    return pi / pi.sum()


def reference_mle(ranks, n_items, sample_size, n_iter=100):
    hist = np.bincount(ranks - 1, minlength=sample_size) / len(ranks)
    return reference_em(scipy_matrix(n_items, sample_size), hist, n_iter)


def reference_linear(ranks, n_items, sample_size, kind, gamma=0.01, prior=None):
    cond = scipy_matrix(n_items, sample_size)
    prior = np.full(n_items, 1.0 / n_items) if prior is None else prior
    gram = cond.T @ (prior[:, None] * cond)
    if kind == "bv":
        system = (1 - gamma) * gram + gamma * np.diag(prior @ cond)
    else:
        m = len(ranks)
        system = gram - cond.T @ cond / m + np.diag(cond.sum(axis=0)) / m
    weights = np.linalg.inv(system) @ cond.T * prior[None, :]  # n x N, the authors' code's W
    hist = np.bincount(ranks - 1, minlength=sample_size) / len(ranks)
    return hist @ weights


def reference_adaptive(ranks, sizes, n_items, n_iter=50):
    cells, counts = np.unique(np.stack([sizes, ranks]), axis=1, return_counts=True)
    cols = np.column_stack([
        scipy_matrix(n_items, int(size), [rank])[:, 0] for size, rank in cells.T
    ])
    return reference_em(cols, counts / counts.sum(), n_iter)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-items", type=int, default=20_000)
    parser.add_argument("--n-targets", type=int, default=100_000)
    parser.add_argument("--sample-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="fast-path runs (best is kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="n_items=5000, M=20000")
    parser.add_argument("--skip-cvxpy", action="store_true", help="skip the cvxpy MES reference")
    args = parser.parse_args()
    if args.quick:
        args.n_items, args.n_targets = 5_000, 20_000
    n_items, sample_size = args.n_items, args.sample_size

    rng = np.random.default_rng(args.seed)
    p_true = np.arange(1, n_items + 1, dtype=np.float64) ** -0.9
    global_ranks = rng.choice(n_items, size=args.n_targets, p=p_true / p_true.sum()) + 1
    ranks = simulate_sampled_ranks(global_ranks, n_items, sample_size, rng=rng)
    adaptive = simulate_adaptive_ranks(global_ranks, n_items, rng=rng, n0=100, n_max=3200)
    fixed = {"n_items": n_items, "sample_size": sample_size}
    # a data-driven prior (the BV_MLE / MN_MLE case): no cached Gram matrix applies
    prior = estimate("mle", ranks, **fixed).p_hat

    cases = {
        "mle": (lambda: estimate("mle", ranks, n_iter=100, **fixed).p_hat,
                lambda: reference_mle(ranks, n_items, sample_size), 0.5),
        "bv": (lambda: estimate("bv", ranks, **fixed).p_hat,
               lambda: reference_linear(ranks, n_items, sample_size, "bv"), 0.5),
        "mn": (lambda: estimate("mn", ranks, **fixed).p_hat,
               lambda: reference_linear(ranks, n_items, sample_size, "mn"), 0.5),
        "bv(prior)": (lambda: estimate("bv", ranks, prior=prior, **fixed).p_hat,
                      lambda: reference_linear(ranks, n_items, sample_size, "bv", prior=prior),
                      0.5),
        "mn(prior)": (lambda: estimate("mn", ranks, prior=prior, **fixed).p_hat,
                      lambda: reference_linear(ranks, n_items, sample_size, "mn", prior=prior),
                      0.5),
        "adaptive_mle": (
            lambda: estimate("adaptive_mle", adaptive.sampled_ranks, n_items=n_items,
                             sample_size=adaptive.sample_sizes, n_iter=50).p_hat,
            lambda: reference_adaptive(adaptive.sampled_ranks, adaptive.sample_sizes, n_items),
            5.0),
        "mes": (lambda: estimate("mes", ranks, solver="dual", **fixed).p_hat,
                None if args.skip_cvxpy else
                (lambda: estimate("mes", ranks, solver="clarabel", **fixed).p_hat), 30.0),
    }
    print(f"n_items={n_items} M={args.n_targets} n={sample_size} "
          f"adaptive mean size={adaptive.mean_sample_size:.1f}")
    header = (f"{'estimator':<13} {'fast cold s':>11} {'fast warm s':>11} {'reference s':>11} "
              f"{'speedup':>8} {'max|Δp̂|':>10} {'target s':>8}  ok")
    print(header)
    print("-" * len(header))
    for name, (fast, reference, target) in cases.items():
        conditional._cached_operator.cache_clear()
        cold, _ = timed(fast)
        warm, p_fast = timed(fast, args.repeats)
        if reference is None:
            ref_time, diff = float("nan"), float("nan")
        else:
            ref_time, p_ref = timed(reference)
            diff = float(np.abs(p_fast - p_ref).max())
        print(f"{name:<13} {cold:>11.3f} {warm:>11.3f} {ref_time:>11.3f} "
              f"{ref_time / warm:>8.1f} {diff:>10.2e} {target:>8.1f}  "
              f"{'yes' if warm < target else 'NO'}")


if __name__ == "__main__":
    main()
