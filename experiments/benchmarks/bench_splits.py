"""Benchmark linrec.data: from_raw, k-core and the split protocols against straightforward
reference implementations (pandas k-core loop, per-user Python loops as in the VAE-CF notebook),
measured in the same process on the same synthetic events.

    python experiments/benchmarks/bench_splits.py --quick
    python experiments/benchmarks/bench_splits.py --rows 20000000   # ML-20M size (~2 GiB RAM)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from linrec.data.filters import kcore
from linrec.data.interactions import Interactions
from linrec.data.splits import (
    _positions_from_end,
    holdout,
    leave_one_out,
    strong_generalization,
)


def synthetic_events(n_rows: int, seed: int = 0):
    """Raw (users, items, timestamps): ML-20M-like sizes, power-law item popularity."""
    rng = np.random.default_rng(seed)
    n_users, n_items = max(n_rows // 145, 10), max(n_rows // 750, 50)
    users = rng.integers(0, n_users, n_rows)
    items = np.floor(n_items * rng.random(n_rows) ** 3).astype(np.int64)
    return users, items, rng.integers(0, 10**9, n_rows)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def reference_kcore(frame: pd.DataFrame, min_user: int, min_item: int) -> pd.DataFrame:
    """Iterative k-core with pandas value_counts until nothing changes."""
    while True:
        item_count = frame["item"].value_counts()
        frame = frame[frame["item"].map(item_count) >= min_item]
        user_count = frame["user"].value_counts()
        kept = frame[frame["user"].map(user_count) >= min_user]
        if len(kept) == len(frame):
            return kept
        frame = kept


def reference_user_loop(inter: Interactions, n_targets: Callable[[int], int], seed: int):
    """Per-user Python loop with rng.choice (the VAE-CF notebook's split_train_test_proportion
    shape), returning the boolean target mask."""
    rng = np.random.default_rng(seed)
    order = np.argsort(inter.users, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(inter.users, minlength=inter.n_users))]
    is_target = np.zeros(inter.n_interactions, dtype=bool)
    for user in range(inter.n_users):
        rows = order[bounds[user]:bounds[user + 1]]
        k = n_targets(len(rows))
        if k:
            is_target[rows[rng.choice(len(rows), size=k, replace=False)]] = True
    return is_target


def reference_temporal(inter: Interactions, fraction: float) -> np.ndarray:
    """Latest fraction per user via pandas sort + groupby cumcount."""
    frame = pd.DataFrame({"user": inter.users, "time": inter.timestamps})
    frame = frame.sort_values(["user", "time"], kind="stable")
    position_from_end = frame.groupby("user").cumcount(ascending=False).to_numpy()
    counts = frame.groupby("user")["time"].transform("size").to_numpy()
    n_test = np.clip(np.floor(fraction * counts + 0.5), 1, counts - 1) * (counts >= 2)
    is_target = np.zeros(len(frame), dtype=bool)
    is_target[frame.index.to_numpy()] = position_from_end < n_test
    return is_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="raw events")
    parser.add_argument("--quick", action="store_true", help="200k events (CI smoke run)")
    args = parser.parse_args()
    n_rows = 200_000 if args.quick else args.rows

    users, items, stamps = synthetic_events(n_rows)
    frame = pd.DataFrame({"user": users, "item": items})
    t_raw, inter = timed(lambda: Interactions.from_raw(users, items, timestamps=stamps))
    t_raw_ref, _ = timed(lambda: frame.drop_duplicates().groupby(["user", "item"]).size())
    rows = [("from_raw (dedupe + vocab)", t_raw, "pandas drop_duplicates+groupby", t_raw_ref)]

    t_core, core = timed(lambda: kcore(inter, 5, 5))
    dedup = pd.DataFrame({"user": inter.users, "item": inter.items})
    t_core_ref, ref_core = timed(lambda: reference_kcore(dedup, 5, 5))
    assert len(ref_core) == core.n_interactions
    rows.append(("kcore(5, 5) iterative", t_core, "pandas value_counts loop", t_core_ref))

    rng = np.random.default_rng(1)
    n_loo = np.where(np.bincount(core.users) >= 3, 2, 0)
    t_pick, _ = timed(lambda: _positions_from_end(core, False, rng)[0] < n_loo[core.users])
    t_pick_ref, _ = timed(lambda: reference_user_loop(core, lambda n: 2 if n >= 3 else 0, 1))
    rows.append(("random targets (2 per user)", t_pick, "per-user rng.choice loop", t_pick_ref))

    counts = np.bincount(core.users)
    n_temporal = np.where(counts >= 2, np.clip(np.floor(0.2 * counts + 0.5), 1, counts - 1), 0)
    t_time, mask = timed(lambda: _positions_from_end(core, True, rng)[0] < n_temporal[core.users])
    t_time_ref, ref_mask = timed(lambda: reference_temporal(core, 0.2))
    assert int(mask.sum()) == int(ref_mask.sum())
    rows.append(("latest 20% per user", t_time, "pandas sort + cumcount", t_time_ref))

    n_heldout = max(core.n_users // 14, 1)
    for name, protocol in (
        ("leave_one_out (full Split)", lambda: leave_one_out(core, seed=1)),
        ("holdout temporal (full Split)", lambda: holdout(core, 0.2, 0.1, "temporal", seed=1)),
        ("strong_generalization (full)", lambda: strong_generalization(core, n_heldout, n_heldout)),
    ):
        rows.append((name, timed(protocol)[0], "-", float("nan")))

    print(f"events: {n_rows:,} raw, {inter.n_interactions:,} unique, "
          f"{core.n_interactions:,} after 5-core ({core.n_users:,} users, {core.n_items:,} items)")
    print(f"| {'step':32s} | {'linrec s':>9s} | {'reference':32s} | {'ref s':>8s} | speed-up |")
    print(f"|{'-' * 34}|{'-' * 11}|{'-' * 34}|{'-' * 10}|----------|")
    for name, fast, ref_name, ref in rows:
        ref_text, speedup = ("-", "-") if np.isnan(ref) else (f"{ref:.3f}", f"{ref / fast:.1f}x")
        print(f"| {name:32s} | {fast:9.3f} | {ref_name:32s} | {ref_text:>8s} | {speedup:>8s} |")


if __name__ == "__main__":
    main()
