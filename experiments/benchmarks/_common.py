"""Helpers shared by the benchmark scripts: timing, memory readings, fresh child processes, the
synthetic interaction data, and table printing. Each script imports them with
`sys.path.insert(0, <this folder>)`; nothing in linrec imports this module."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.data.splits import EvalSet


def timed(fn: Callable[[], Any], repeats: int = 1) -> tuple[float, Any]:
    """(best wall time in s over `repeats` calls, the last call's result)."""
    best, out = np.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def max_rss_bytes() -> int:
    """The process's peak RSS since it started (Linux: getrusage reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss_gib() -> float:
    return max_rss_bytes() / 2**30


def reset_peak_rss() -> bool:
    """Reset the process's peak RSS (VmHWM) so that the next reading is the peak from now on."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _status_bytes(field: str) -> int | None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return None


def peak_rss_bytes() -> int:
    """VmHWM: the peak RSS since `reset_peak_rss` (or since the start)."""
    peak = _status_bytes("VmHWM")
    return max_rss_bytes() if peak is None else peak


def current_rss_bytes() -> int:
    return _status_bytes("VmRSS") or 0


def run_script(script: str | Path, argv: list[str], timeout: float | None = None,
               check: bool = False) -> subprocess.CompletedProcess:
    """`python script argv...` in a fresh process (its own peak memory and imports)."""
    return subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True,
                          timeout=timeout, check=check)


def last_json(completed: subprocess.CompletedProcess) -> dict:
    """The JSON record a worker process printed last."""
    return json.loads(completed.stdout.strip().splitlines()[-1])


def print_header(header: str) -> None:
    """A table's header line and the rule under it."""
    print(header)
    print("-" * len(header))


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:6.2f}"


def zipf_interactions(n_users: int, n_items: int, nnz: int, seed: int,
                      activity_sigma: float = 1.0) -> sp.csr_matrix:
    """Binary users x items CSR with Zipf-like item popularity (exponent 0.8, items in a random
    order) and log-normal user activity of spread `activity_sigma` (about `nnz` interactions
    before duplicates merge)."""
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


def lognormal_interactions(n_users: int, n_items: int, mean_items: float, seed: int,
                           popularity_exponent: float = 0.8) -> sp.csr_matrix:
    """Binary CSR (n_users x n_items) with log-normal user activity (mean `mean_items`) and
    Zipf-like item popularity, like MovieLens/Netflix (density = mean_items / n_items)."""
    rng = np.random.default_rng(seed)
    activity = rng.lognormal(mean=0.0, sigma=0.8, size=n_users)
    counts = np.maximum(1, np.round(activity / activity.mean() * mean_items)).astype(np.int64)
    popularity = (np.arange(n_items) + 10.0) ** -popularity_exponent
    items = rng.choice(n_items, size=int(counts.sum()), p=popularity / popularity.sum())
    users = np.repeat(np.arange(n_users), counts)
    matrix = sp.csr_matrix((np.ones(items.size, np.float32), (users, items)),
                           shape=(n_users, n_items))
    matrix.data[:] = 1.0  # duplicates summed by the constructor -> binary
    return matrix


def make_evalset(n_users: int, n_items: int, seed: int) -> EvalSet:
    """ML-20M-like users: activity ~ lognormal (median 40), popularity ~ Zipf(0.8); 80/20 split."""
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, n_items + 1) ** 0.8
    popularity /= popularity.sum()
    activity = np.clip(rng.lognormal(np.log(40), 1.0, n_users).astype(int), 5, n_items // 4)
    foldin_rows, targets_rows = [], []
    for u, size in enumerate(activity):  # data generation, not timed
        items = rng.choice(n_items, size=size, replace=False, p=popularity)
        n_targets = max(1, int(round(0.2 * size)))
        targets_rows.append((np.full(n_targets, u), items[:n_targets]))
        foldin_rows.append((np.full(size - n_targets, u), items[n_targets:]))

    def csr(parts):
        rows = np.concatenate([p[0] for p in parts])
        cols = np.concatenate([p[1] for p in parts])
        return sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)),
                             shape=(n_users, n_items))

    return EvalSet(users=np.arange(n_users, dtype=np.int64), foldin=csr(foldin_rows),
                   targets=csr(targets_rows))
