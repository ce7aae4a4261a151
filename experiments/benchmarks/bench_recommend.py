"""Benchmark of top-K lists (`Recommender.recommend`): score + mask + select, against the
hand-written masking + argpartition + sort a user would otherwise write, in the same run.

Data: the ML-20M-like users of bench_eval (log-normal activity, Zipf popularity), n_users users
whose whole rows are the fold-in, or with --data a LightGCN-format split's training rows (all
its users); model: EASE (lambda 500) fitted on them (float32; the fit is not timed).
Rows, each the best of --repeats:
  score, W row by row    foldin @ W with each entry's whole W row (the memory-bound reference);
  score, column blocks   W in column blocks of ~8 MB, each read from memory once per batch,
                         then from the cache;
  score, the model's     the model's scores as it computes them: the faster of the two
                         above, each timed on half of the first batch (the same bits); a batch
                         of fewer than KERNEL_MIN_MULTIPLY_ADDS is scipy's product;
  top-k, screened        W's int8 copy (made once per W, its time printed apart) screens each
                         row at a quarter of W's bytes; a bound on its error rules out every
                         item that k others beat for certain; the few left are scored exactly
                         from W and selected (rows it cannot settle take the fused path);
  top-k, fused           each row scored into a buffer of its thread's, masked and its k best
                         taken while it is in the cache (row by row over W; never written out);
  top-k, blocked + heap  the column-blocked product, then mask and a compiled heap per row;
  recommend              model.recommend(foldin, k): the fastest of the three top-k paths
                         above, each timed on a third of the first batch (exact top-k in the
                         evaluator's tie order, the same lists and scores on every path);
                         its first call, with those trials, is printed beside it;
  reference numpy        what a user writes with scipy and numpy: scores = foldin @ W (scipy),
                         mask, np.argpartition(-scores, k) then argsort of the k, checked to
                         list the same scores position by position (items may differ only
                         among tied scores, which argpartition orders arbitrarily).
Beside them, the limits on this machine measured in the same run: the multiply-adds
(nnz(foldin) x n_items) at the sgemm rate, and the bytes a row-by-row pass reads from W (or
the screen from W's int8 copy) at the memory bandwidth of a large copy. first call: a fresh
process's first recommend on 100 users (the kernels' load from numba's cache included).
bench_peers.py measures LensKit's and Cornac's own top-k calls beside linrec's, each in a fresh
process with the peer installed.
Goal: top-20 for 10 000 users at 20 000 items in <= 1.0 s on 2 cores; a first call <= 0.5 s.

Run: python experiments/benchmarks/bench_recommend.py [--quick | --data /path/to/gowalla]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_evalset

from linrec.hardware import batch_size_for  # noqa: E402
from linrec.item_order import BatchKeys  # noqa: E402
from linrec.models import EASE, _sparse_dense  # noqa: E402
from linrec.models.linalg import thread_count  # noqa: E402


def best_of(repeats: int, fn):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def machine_limits(dtype) -> tuple[float, float]:
    """(the sgemm rate in FLOP/s, the memory bandwidth of a 1 GB copy in bytes/s), each the
    best of three, measured now on the threads linrec uses."""
    n = 2048
    a = np.random.default_rng(0).random((n, n)).astype(dtype)
    gemm, _ = best_of(3, lambda: a @ a)
    big = np.ones(1 << 27, dtype=np.float64)  # 1 GB
    out = np.empty_like(big)
    copy, _ = best_of(3, lambda: np.copyto(out, big))
    return 2 * n ** 3 / gemm, 2 * big.nbytes / copy  # a copy reads and writes every byte


def first_call(n_items: int) -> float:
    """Seconds of a fresh process's first recommend on 100 users (EASE fitted before the clock
    starts), the compiled kernels loaded from numba's cache."""
    import subprocess

    code = f"""
import time
import numpy as np
import scipy.sparse as sp
from linrec.models import EASE
rng = np.random.default_rng(0)
X = sp.random(500, {min(n_items, 2000)}, density=0.02, format="csr", random_state=1,
              dtype=np.float32)
X.data[:] = 1
model = EASE(lam=100.0).fit(X)
t0 = time.perf_counter()
model.recommend(X[:100], 20)
print(time.perf_counter() - t0)
"""
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # warm cache
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--n-items", type=int, default=None)
    parser.add_argument("--n-users", type=int, default=None)
    parser.add_argument("-k", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-budget-mb", type=float, default=512)
    parser.add_argument("--data", help="a LightGCN-format directory (train.txt): its training "
                        "rows are the users and the fold-in, instead of synthetic ones")
    args = parser.parse_args()
    k, budget = args.k, args.memory_budget_mb

    if args.data:
        from linrec.data import prepare_data

        foldin = prepare_data({"source": {"name": "lightgcn"}, "path": args.data,
                               "split": {"kind": "predefined"}}).split.train.tocsr()
        n_users, n_items = foldin.shape
    else:
        n_items = args.n_items or (2_000 if args.quick else 20_000)
        n_users = args.n_users or (1_000 if args.quick else 10_000)
        evalset = make_evalset(n_users, n_items, seed=0)
        foldin = (evalset.foldin + evalset.targets).tocsr()
    t0 = time.perf_counter()
    model = EASE(lam=500.0, dtype="float32").fit(foldin)
    print(f"EASE fit on {n_users} x {n_items} ({foldin.nnz} interactions): "
          f"{time.perf_counter() - t0:.1f} s (not part of the comparison)")
    step = batch_size_for(n_items, budget)
    batches = [slice(s, min(n_users, s + step)) for s in range(0, n_users, step)]

    def score_only():
        for rows in batches:
            model.score(foldin[rows])

    def score_by(blocked: bool):  # the compiled path, whatever a batch's size
        for rows in batches:
            _sparse_dense._product(sp.csr_matrix(foldin[rows], dtype=model.W_.dtype), model.W_,
                                   thread_count(0), blocked)

    def top_k_by(path: str):
        for rows in batches:
            part = foldin[rows]
            keys = BatchKeys(0, np.arange(rows.start, rows.stop), n_items)
            _sparse_dense.product_top_k(part, model.W_, part, k, keys, thread_count(0),
                                        path=path, compiled=True)

    def reference():
        out = []
        for rows in batches:
            part = foldin[rows]
            scores = np.asarray(sp.csr_matrix(part, dtype=model.W_.dtype) @ model.W_)
            scores[np.repeat(np.arange(part.shape[0]), np.diff(part.indptr)),
                   part.indices] = -np.inf
            top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
            listed = np.take_along_axis(top, order, axis=1)
            out.append((listed, np.take_along_axis(scores, listed, axis=1)))
        return np.vstack([i for i, _ in out]), np.vstack([s for _, s in out])

    t_rows, _ = best_of(args.repeats, lambda: score_by(blocked=False))
    t_blocks, _ = best_of(args.repeats, lambda: score_by(blocked=True))
    t_score, _ = best_of(args.repeats, score_only)
    t_build, screen = best_of(1, lambda: _sparse_dense._screen_of(model.W_, thread_count(0)))
    t_screened, _ = best_of(args.repeats, lambda: top_k_by("screened")) if screen else (None, 0)
    share = _sparse_dense.SCREEN_ROWS["screened"] / max(1, _sparse_dense.SCREEN_ROWS["rows"])
    t_fused, _ = best_of(args.repeats, lambda: top_k_by("fused"))
    t_unfused, _ = best_of(args.repeats, lambda: top_k_by("blocked"))
    t_rec_first, _ = best_of(1, lambda: model.recommend(foldin, k, memory_budget_mb=budget))
    t_rec, (items, scores) = best_of(args.repeats, lambda: model.recommend(
        foldin, k, memory_budget_mb=budget))
    t_ref, (ref_items, ref_scores) = best_of(args.repeats, reference)
    # argpartition orders tied scores arbitrarily, recommend by the seeded keys: the lists
    # agree when their scores agree position for position (items may differ only among ties)
    differ = (items != ref_items).any(axis=1)
    same = np.array_equal(scores, ref_scores)
    print(f"top-{k} for {n_users} users at {n_items} items, batches of {step} rows, "
          f"best of {args.repeats}:")
    gemm_rate, bandwidth = machine_limits(model.W_.dtype)
    macs = foldin.nnz * n_items
    print(f"  score, W row by row {t_rows:7.2f} s   reads {macs * model.W_.itemsize / 1e9:.1f} GB "
          f"of W: {macs * model.W_.itemsize / bandwidth:.2f} s at the measured "
          f"{bandwidth / 1e9:.1f} GB/s")
    print(f"  score, column blocks{t_blocks:7.2f} s   {t_rows / t_blocks:.2f}x row by row; "
          f"{macs / 1e9:.1f} G multiply-adds: {2 * macs / gemm_rate:.2f} s at the sgemm rate "
          f"({gemm_rate / 1e9:.0f} GFLOP/s)")
    key = (model.W_.shape, model.W_.dtype.str, thread_count(0))
    times = _sparse_dense._PATH_TIMES
    chosen = {path: f"{seconds * 1e9:.3f} ns" for path, seconds in times.get(key, {}).items()}
    top_k_chosen = {path: f"{seconds * 1e9:.3f} ns"
                    for path, seconds in times.get((*key, "top-k"), {}).items()}
    print(f"  score, the model's  {t_score:7.2f} s   the faster path, timed on the halves of "
          f"the first batch (per multiply-add, blocked: {chosen.get(True)}, row by row: "
          f"{chosen.get(False)})")
    if screen:
        print(f"  top-k, screened     {t_screened:7.2f} s   {t_screened / t_rows:.2f}x the "
              f"row-by-row product alone; reads {macs / 1e9:.1f} GB of W's int8 copy: "
              f"{macs / bandwidth:.2f} s at {bandwidth / 1e9:.1f} GB/s; {100 * share:.1f} % of "
              f"rows settled by the screen; the copy made in {t_build:.2f} s")
    else:
        print("  top-k, screened           -   W cannot be screened here")
    print(f"  top-k, fused        {t_fused:7.2f} s   {t_fused / t_rows:.2f}x the row-by-row "
          f"product alone")
    print(f"  top-k, blocked+heap {t_unfused:7.2f} s   {t_unfused / t_blocks:.2f}x the "
          f"column-blocked product alone")
    print(f"  recommend           {t_rec:7.2f} s   the fastest top-k path, each timed on a third "
          f"of the first batch (per multiply-add: {top_k_chosen}); the first call, with those "
          f"trials: {t_rec_first:.2f} s")
    print(f"  reference numpy     {t_ref:7.2f} s   recommend is {t_ref / t_rec:.2f}x faster; "
          f"same lists: {same} ({int(differ.sum())} rows ordered otherwise among tied scores)")
    print(f"  first call in a fresh process, 100 users: {first_call(n_items):.2f} s")
    print("  goal: <= 1.0 s at 10 000 users x 20 000 items on 2 cores, a first call <= 0.5 s "
          "(the peers' own top-k calls: bench_peers.py)")
    if not same:
        raise SystemExit("recommend and the reference disagree")


if __name__ == "__main__":
    main()
