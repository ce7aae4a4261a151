"""Benchmark the report's paired bootstrap intervals: every metric of one comparison from one
draw of resampled users (`paired_bootstrap_cis`) against one draw per metric
(`paired_bootstrap_ci` in a loop, the reference), at Gowalla's 29 858 test users and the
report's 1 000 resamples. Both give the same intervals (checked here too).

    python experiments/benchmarks/bench_bootstrap.py [--users 29858] [--metrics 6]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from linrec.eval.significance import paired_bootstrap_ci, paired_bootstrap_cis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=29858)
    parser.add_argument("--metrics", type=int, default=6)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((args.users, args.metrics))
    y = x - rng.normal(0.01, 0.1, x.shape)

    def per_metric():
        return [paired_bootstrap_ci(x[:, j], y[:, j], n_resamples=args.resamples)
                for j in range(args.metrics)]

    def one_draw():
        return paired_bootstrap_cis(x, y, n_resamples=args.resamples)

    reference, expected = timed(per_metric, repeats=3)
    shared, got = timed(one_draw, repeats=3)
    assert got == expected, "the shared draw must give the per-metric intervals"
    print(f"{args.users} users, {args.metrics} metrics, {args.resamples} resamples")
    print(f"  one draw per metric (reference): {reference:6.2f} s")
    print(f"  one draw for all metrics:        {shared:6.2f} s   ({reference / shared:.2f}x)")


if __name__ == "__main__":
    main()
