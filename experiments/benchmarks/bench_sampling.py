"""Benchmark item sampling and expected sampled metrics (linrec.eval.negatives, sampled_ranks,
simulate, expected, estimators.mapping) against straightforward per-target Python loops,
measured in the same process.

Rows: drawing sampled items (with and without replacement), ranking targets among them from
scores, simulating sampled ranks from global ranks (fixed n and adaptive), expected sampled NDCG
from global ranks, and the Beta mapping. The reference loops run on a subset of the targets and
are extrapolated linearly to the full size (column "ref (s, extrap.)"); "agree" checks that the
fast path gives the reference's numbers on that subset (exactly, or in distribution for the
random rows: mean within 4 standard errors).

    python experiments/benchmarks/bench_sampling.py --quick
    python experiments/benchmarks/bench_sampling.py --targets 100000 --items 20000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from scipy import stats
from scipy.special import betaln, comb

from linrec.eval.estimators.mapping import beta_mapping
from linrec.eval.expected import expected_sampled_metric
from linrec.eval.negatives import draw_negatives
from linrec.eval.sampled_ranks import sampled_ranks_from_scores
from linrec.eval.simulate import simulate_adaptive_ranks, simulate_sampled_ranks


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _same_mean(fast: np.ndarray, ref: np.ndarray) -> bool:
    """Equal in distribution by a 4-standard-error test of the means."""
    fast, ref = np.asarray(fast, float).ravel(), np.asarray(ref, float).ravel()
    se = np.sqrt(fast.var() / fast.size + ref.var() / ref.size) + 1e-12
    return bool(abs(fast.mean() - ref.mean()) <= 4 * se)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=100_000, help="M, number of targets")
    parser.add_argument("--items", type=int, default=20_000, help="N, catalogue size")
    parser.add_argument("--sample-size", type=int, default=100, help="n, target + n-1 sampled")
    parser.add_argument("--ref-targets", type=int, default=2_000,
                        help="targets the reference loops run on (extrapolated to --targets)")
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.targets, args.items, args.ref_targets = 10_000, 5_000, 300
    n_targets, n_items, n, n_ref = args.targets, args.items, args.sample_size, args.ref_targets
    scale = n_targets / n_ref
    rng = np.random.default_rng(0)
    target_items = rng.integers(0, n_items, n_targets)
    users = np.arange(n_targets)
    global_ranks = 1 + np.floor(rng.beta(0.4, 1.0, n_targets) * (n_items - 1)).astype(np.int64)
    rows = []

    for replace in (True, False):
        fast_t, neg = _timed(lambda r=replace: draw_negatives(0, 0, users, target_items, n_items,
                                                              n, replace=r))

        def reference(r: bool = replace) -> np.ndarray:
            ref_rng = np.random.default_rng(1)
            out = np.empty((n_ref, n - 1), dtype=np.int64)
            for i in range(n_ref):
                draw = ref_rng.choice(n_items - 1, size=n - 1, replace=r)
                out[i] = draw + (draw >= target_items[i])
            return out

        ref_t, ref = _timed(reference)
        rows.append((f"draw_negatives replace={replace}", fast_t, ref_t * scale,
                     _same_mean(neg[:n_ref], ref)))

    # ranking targets among their sampled items: one score row per target group of 100
    n_rows = 256
    scores = rng.normal(size=(n_rows, n_items)).astype(np.float32)
    keys = rng.random((n_rows, n_items))
    target_rows = rng.integers(0, n_rows, n_targets)
    fast_t, ranks = _timed(lambda: sampled_ranks_from_scores(scores, keys, target_rows,
                                                             target_items, neg))

    def reference_ranks() -> np.ndarray:
        out = np.empty(n_ref, dtype=np.int64)
        for i in range(n_ref):
            r, t = target_rows[i], target_items[i]
            out[i] = 1 + sum(1 for j in neg[i] if scores[r, j] > scores[r, t]
                             or (scores[r, j] == scores[r, t] and keys[r, j] < keys[r, t]))
        return out

    ref_t, ref = _timed(reference_ranks)
    rows.append(("sampled_ranks_from_scores", fast_t, ref_t * scale,
                 bool(np.array_equal(ranks[:n_ref], ref))))

    for replace in (True, False):
        fast_t, sim = _timed(lambda r=replace: simulate_sampled_ranks(global_ranks, n_items, n,
                                                                      r, rng))

        def reference_sim(r: bool = replace) -> np.ndarray:
            ref_rng = np.random.default_rng(2)
            out = np.empty(n_ref, dtype=np.int64)
            for i in range(n_ref):
                big_r = global_ranks[i]
                out[i] = 1 + (ref_rng.binomial(n - 1, (big_r - 1) / (n_items - 1)) if r
                              else ref_rng.hypergeometric(big_r - 1, n_items - big_r, n - 1))
            return out

        ref_t, ref = _timed(reference_sim)
        rows.append((f"simulate_sampled_ranks replace={replace}", fast_t, ref_t * scale,
                     _same_mean(sim[:n_ref], ref)))

    n_max = 3200 if n_items > 3200 else 100 * 2 ** int(np.log2((n_items - 1) / 100))
    fast_t, adaptive = _timed(lambda: simulate_adaptive_ranks(global_ranks, n_items, rng,
                                                              n_max=n_max))

    def reference_adaptive() -> np.ndarray:
        """Algorithm 1 with real item draws per user (with replacement)."""
        ref_rng = np.random.default_rng(3)
        sizes = np.empty(n_ref, dtype=np.int64)
        for i in range(n_ref):
            size, sampled = 100, ref_rng.integers(1, n_items, size=99)  # ranks of the others
            while (sampled < global_ranks[i]).sum() == 0 and size < n_max:
                sampled = np.concatenate([sampled, ref_rng.integers(1, n_items, size=size)])
                size *= 2
            sizes[i] = size
        return sizes

    ref_t, ref = _timed(reference_adaptive)
    rows.append(("simulate_adaptive_ranks (sizes)", fast_t, ref_t * scale,
                 _same_mean(adaptive.sample_sizes[:n_ref], ref)))

    fast_t, expected = _timed(lambda: expected_sampled_metric(global_ranks, n_items, n, "ndcg",
                                                              10))

    def reference_expected() -> np.ndarray:
        x = np.arange(n)
        gains = (x + 1 <= 10) / np.log2(x + 2)
        return np.array([stats.binom.pmf(x, n - 1, (r - 1) / (n_items - 1)) @ gains
                         for r in global_ranks[:n_ref]])

    ref_t, ref = _timed(reference_expected)
    rows.append(("expected_sampled_metric ndcg@10", fast_t, ref_t * scale,
                 bool(np.allclose(expected[:n_ref], ref, rtol=1e-10, atol=1e-14))))

    fast_t, f = _timed(lambda: beta_mapping(n_items, n, 0.5))

    def reference_beta() -> np.ndarray:
        out = np.empty(n)
        out[0] = (n_items - 1) * (0.5 * np.exp(betaln(0.5, n))) ** 2 + 1
        for k in range(1, n):
            inc = 0.5 * np.sqrt(n_items - 1) * comb(n - 1, k) * np.exp(betaln(0.5 + k, n - k))
            out[k] = (inc + np.sqrt(out[k - 1] - 1)) ** 2 + 1
        return out

    ref_t, ref = _timed(reference_beta)
    rows.append(("beta_mapping a=0.5 (all k)", fast_t, ref_t, bool(np.allclose(f, ref,
                                                                               rtol=1e-9))))

    print(f"M = {n_targets} targets, N = {n_items} items, n = {n}; reference loops on {n_ref} "
          "targets, extrapolated")
    print(f"{'operation':40s} {'fast (s)':>10s} {'ref (s, extrap.)':>17s} {'speed-up':>9s} "
          f"{'agree':>6s}")
    for name, fast_s, ref_s, ok in rows:
        print(f"{name:40s} {fast_s:10.4f} {ref_s:17.3f} {ref_s / max(fast_s, 1e-9):9.1f} "
              f"{str(ok):>6s}")


if __name__ == "__main__":
    main()
