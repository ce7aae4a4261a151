"""Benchmark: linrec's EASE against the EASE of LensKit and of Cornac on the same data, the same
λ and the same threads, each library in its own fresh process: the fit, its peak memory, and
top-k lists that exclude each user's known items: is linrec ahead of its peers on the same
work?

Data: the ML-20M-like users of bench_eval (log-normal activity, Zipf popularity, every
interaction of a user is training data), n_users x n_items. Per library and size a child process
builds the data, converts it to the library's own format (not timed), then times
  fit   the library's EASE training from its data object (Gram, inverse, weights), and the
        process's peak RSS (VmHWM, reset just before the fit) minus its RSS before it;
  top-k its own top-k call for the first `--rec-users` users, seen items excluded, twice: the
        first call (with its one-off imports and warm-up: linrec imports torch and starts
        numba there) and the second, whose time gives the ratio:
        linrec `EASE.recommend(rows, k)` (batched under its memory budget), LensKit
        `lenskit.batch.recommend(topn_pipeline(EASEScorer), users, n=k)` (its default
        parallelism), Cornac `EASE.recommend(user, k, remove_seen=True)` per user (it has no
        batch call).
linrec runs in float32 and float64: LensKit computes in float32 (torch's Cholesky, or SciPy's
`inv`), Cornac in float64 (`numpy.linalg.inv`), so each peer's ratio is against linrec in its
precision. Cornac's `posB` (negative weights set to 0) is off: the same model as Steck's and
linrec's. The lists are compared with linrec's of the same precision: the share of users whose
k items come in the same order, and the mean overlap of the sets (near-ties may swap places).

A peer that is not installed is skipped, with the command to install it; the peers are not
dependencies of linrec. In a separate environment:
    python -m venv /tmp/peers && /tmp/peers/bin/pip install torch==2.13.0 &&
    /tmp/peers/bin/pip install lenskit==2025.8.1 cornac==3.0.1 && /tmp/peers/bin/pip install -e .
    /tmp/peers/bin/python experiments/benchmarks/bench_peers.py [--quick] [--large]
Default sizes: 10 000 users x 5 000 and x 10 000 items; --large adds 10 000 x 20 000 (the size of
bench_recommend.py; Cornac's float64 inverse at that size takes minutes); --quick 2 000 x 1 000.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    current_rss_bytes,
    make_evalset,
    peak_rss_bytes,
    reset_peak_rss,
)

LAM = 500.0
RUNS = [("linrec", "float32"), ("linrec", "float64"), ("lenskit", "float32"),
        ("cornac", "float64")]
INSTALL = {"lenskit": "lenskit==2025.8.1", "cornac": "cornac==3.0.1"}


def training_matrix(n_users: int, n_items: int, seed: int) -> sp.csr_matrix:
    evalset = make_evalset(n_users, n_items, seed=seed)
    return (evalset.foldin + evalset.targets).tocsr()


def run_linrec(X: sp.csr_matrix, dtype: str, users: int, k: int):
    from linrec.models import EASE

    model = EASE(lam=LAM, dtype=dtype)
    yield lambda: model.fit(X)
    yield lambda: model.recommend(X[:users], k)[0]


def run_lenskit(X: sp.csr_matrix, dtype: str, users: int, k: int):
    import pandas as pd
    from lenskit.batch import recommend
    from lenskit.data import from_interactions_df
    from lenskit.knn.ease import EASEConfig, EASEScorer
    from lenskit.pipeline import topn_pipeline

    coo = X.tocoo()
    data = from_interactions_df(pd.DataFrame({"user_id": coo.row, "item_id": coo.col}),
                                users=np.arange(X.shape[0]), items=np.arange(X.shape[1]))
    pipeline = topn_pipeline(EASEScorer(EASEConfig(regularization=LAM)), n=k)
    yield lambda: pipeline.train(data)

    def lists() -> np.ndarray:
        found = recommend(pipeline, list(range(users)), n=k)
        out = np.full((users, k), -1, dtype=np.int64)
        for key, items in found:
            ids = np.asarray(items.ids(), dtype=np.int64)
            out[int(key.user_id), : len(ids)] = ids
        return out

    yield lists


def run_cornac(X: sp.csr_matrix, dtype: str, users: int, k: int):
    from cornac.data import Dataset
    from cornac.models import EASE

    coo = X.tocoo()
    data = Dataset.from_uir(list(zip(coo.row.tolist(), coo.col.tolist(),
                                     np.ones(X.nnz).tolist(), strict=True)), seed=0)
    model = EASE(lamb=LAM, posB=False, verbose=False)
    yield lambda: model.fit(data)
    yield lambda: np.array([[int(i) for i in model.recommend(u, k=k, remove_seen=True,
                                                             train_set=data)]
                            for u in range(users)], dtype=np.int64)


def child(args: argparse.Namespace) -> None:
    """One library in this process: prints a JSON line of timings, saves its lists."""
    library, dtype, out = args.child
    X = training_matrix(args.users, args.items, args.seed)
    steps = {"linrec": run_linrec, "lenskit": run_lenskit, "cornac": run_cornac}[library](
        X, dtype, args.rec_users, args.k)
    fit = next(steps)
    before, reset = current_rss_bytes(), reset_peak_rss()
    t0 = time.perf_counter()
    fit()
    fit_seconds = time.perf_counter() - t0
    extra = peak_rss_bytes() - before if reset else float("nan")
    recommend, rec_seconds = next(steps), []
    for _ in range(2):  # the first call pays one-off imports (torch, numba) and warm-up
        t0 = time.perf_counter()
        lists = recommend()
        rec_seconds.append(time.perf_counter() - t0)
    np.save(out, lists)
    print(json.dumps({"fit": fit_seconds, "extra": extra,
                      "first": rec_seconds[0], "rec": rec_seconds[1]}))


def installed(library: str) -> bool:
    if library == "linrec":
        return True
    found = subprocess.run([sys.executable, "-c", f"import {library}"], capture_output=True)
    return found.returncode == 0


def agreement(lists: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """(share of rows equal in order, mean |set overlap| / k)."""
    same = float(np.mean(np.all(lists == reference, axis=1)))
    overlap = np.mean([len(np.intersect1d(a, b)) for a, b in zip(lists, reference,
                                                                  strict=True)])
    return same, float(overlap / reference.shape[1])


def run_size(n_users: int, n_items: int, args: argparse.Namespace, work: Path) -> None:
    X = training_matrix(n_users, n_items, args.seed)
    users = min(args.rec_users, n_users)
    print(f"\n{n_users} users x {n_items} items, {X.nnz} interactions, lam {LAM:g}; "
          f"top-{args.k} for the first {users} users")
    print(f"{'library':<8} {'dtype':<8} | {'fit s':>7} {'extra GiB':>9} {'vs linrec':>9} | "
          f"{'1st s':>6} {'top-k s':>8} {'users/s':>9} {'vs linrec':>9} | {'same lists':>10} "
          f"{'overlap':>8}")
    results: dict[tuple[str, str], dict] = {}
    for library, dtype in RUNS:
        if not installed(library):
            print(f"{library:<8} {dtype:<8} | not installed (pip install {INSTALL[library]})")
            continue
        lists_path = work / f"{library}_{dtype}_{n_items}.npy"
        command = [sys.executable, __file__, "--child", library, dtype, str(lists_path),
                   "--users", str(n_users), "--items", str(n_items), "--rec-users", str(users),
                   "-k", str(args.k), "--seed", str(args.seed)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            print(f"{library:<8} {dtype:<8} | failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["lists"] = np.load(lists_path)
        results[library, dtype] = result
        mine = results.get(("linrec", dtype))
        fit_ratio = rec_ratio = same = overlap = ""
        if library != "linrec" and mine is not None:
            fit_ratio = f"{result['fit'] / mine['fit']:.2f}x"
            rec_ratio = f"{result['rec'] / mine['rec']:.1f}x"
            same_share, overlap_share = agreement(result["lists"], mine["lists"])
            same, overlap = f"{100 * same_share:.1f} %", f"{100 * overlap_share:.2f} %"
        print(f"{library:<8} {dtype:<8} | {result['fit']:7.2f} {result['extra'] / 2**30:9.2f}"
              f" {fit_ratio:>9} | {result['first']:6.2f} {result['rec']:8.2f}"
              f" {users / result['rec']:9.0f}"
              f" {rec_ratio:>9} | {same:>10} {overlap:>8}")
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 000 users x 1 000 items")
    parser.add_argument("--large", action="store_true", help="also 10 000 x 20 000 items")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--items", type=int, nargs="+", default=None)
    parser.add_argument("--rec-users", type=int, default=10_000,
                        help="users whose top-k lists are timed (the first ones)")
    parser.add_argument("-k", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.items = args.items[0]
        child(args)
        return
    if args.quick:
        args.users, args.items = 2_000, [1_000]
    items = args.items or ([5_000, 10_000, 20_000] if args.large else [5_000, 10_000])
    print(f"python {sys.executable}; ratios: peer / linrec in the same precision (> 1: linrec "
          "faster); extra = peak RSS during the fit minus RSS before it")
    with tempfile.TemporaryDirectory() as work:
        for n_items in items:
            run_size(args.users, n_items, args, Path(work))


if __name__ == "__main__":
    main()
