"""Benchmark one validation pass of a trainer: exact (every item ranked; the reference) against
sampled (eval.validation.method=sampled: n − 1 sampled items per held-out item, only those pairs
scored, then an estimator; adaptive_mle ranks a target ranked first again among 2n, ... up to
ADAPTIVE_N_MAX items), in the same run.

Two parts:
  real   --data DIR: a LightGCN-format split (Gowalla's train.txt / test.txt), 10 % of the
         training rows held out for validation, MF (cosine, 64 dimensions) after one epoch, or
         with --checkpoint FILE the best tables of a fit on that split (an MF checkpoint.pt:
         adaptive sampling costs more on a trained model, whose targets often rank first);
         each validation's seconds and value. Then the scoring of one target's n = 1000
         (user, item) pairs for every validation target alone: MF's pass (`pair_scores`)
         against the forward of the training op `sampled_dot` (the reference), same pairs.
  sizes  synthetic catalogues of --sizes items (up to 1 M), --users validation users with
         --targets held-out items each, a factor model with 64-dimensional random embeddings
         scored by `linrec.models.MF`'s own code (a fitted MF whose tables are replaced), exact
         vs sampled seconds per pass; --figure PATH writes them as a PNG and a PDF;
         --device cuda keeps the tables on a GPU (an exact pass is ranked there and brings
         back only the ranks; a sampled pass brings back only its pairs).

    python experiments/benchmarks/bench_validation.py --data /path/to/gowalla
    python experiments/benchmarks/bench_validation.py --data /path/to/gowalla \
        --checkpoint ~/.cache/linrec/checkpoints/<fit>/checkpoint.pt
    python experiments/benchmarks/bench_validation.py --sizes 1000,10000,100000,1000000 \
        --figure experiments/figures/validation_cost
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_header  # noqa: E402

from linrec.data.pipeline import prepare_data  # noqa: E402
from linrec.data.splits import EvalSet, Split  # noqa: E402
from linrec.eval import EvalConfig, validation_score  # noqa: E402
from linrec.models import MF  # noqa: E402
from linrec.models.mf_ops import pair_scores, sampled_dot  # noqa: E402

SAMPLED = (("mn_mle", 100), ("mn_mle", 1000), ("mle", 100), ("naive", 100), ("adaptive_mle", 100))
ADAPTIVE_N_MAX = 3200


def timed_pass(score, model, repeats: int = 2) -> tuple[float, float]:
    """(best seconds of a pass, its value); the first pass (setup caches) is not counted
    when repeats > 1."""
    value, best = score(model), np.inf
    for _ in range(max(repeats - 1, 1)):
        start = time.perf_counter()
        value = score(model)
        best = min(best, time.perf_counter() - start)
    return best, value


def compare(split: Split, model, selection: str, repeats: int) -> list[tuple[str, float, float]]:
    rows = []
    exact = validation_score(split, EvalConfig(selection=selection), seed=0)
    rows.append(("exact", *timed_pass(exact, model, repeats)))
    for estimator, n in SAMPLED:
        validation = {"method": "sampled", "estimator": estimator, "sample_size": n}
        if estimator == "adaptive_mle":
            validation["n_max"] = ADAPTIVE_N_MAX  # the levels stop below the catalogue's size
        config = EvalConfig(selection=selection, validation=validation)
        start = time.perf_counter()
        sampled = validation_score(split, config, seed=0)
        setup = time.perf_counter() - start
        seconds, value = timed_pass(sampled, model, repeats)
        rows.append((f"sampled {estimator} n={n} (setup {setup:.2f} s)", seconds, value))
    return rows


def print_rows(rows) -> None:
    reference = rows[0][1]
    for name, seconds, value in rows:
        print(f"  {name:42s} {seconds:8.3f} s  {reference / seconds:7.1f}x  value {value:.5f}")


def real(path: str, repeats: int, checkpoint: str | None) -> None:
    prepared = prepare_data({"source": {"name": "lightgcn"}, "path": path,
                             "split": {"kind": "predefined", "valid_fraction": 0.1}})
    split = prepared.split
    if checkpoint:
        state = torch.load(Path(checkpoint).expanduser(), map_location="cpu",
                           weights_only=False)
        tables = state["best_state"] or state["params"]
        model = factor_model(split, tables["items"].shape[1], seed=0)
        model._users, model._items = tables["users"], tables["items"]
        trained = f"the best tables of {checkpoint} (epoch {state['best_epoch']})"
    else:
        model = MF(epochs=1, select_on="test").fit(split.train)
        trained = "MF after one epoch"
    print_header(f"{prepared.name}: {split.valid.n_users} validation users, "
                 f"{split.valid.targets.nnz} held-out items, {split.n_items} items; {trained}")
    print_rows(compare(split, model, "recall@20", repeats))
    pair_scoring(split, model, 1000, repeats)


def pair_scoring(split: Split, model, n: int, repeats: int) -> None:
    """Seconds to score n (user, item) pairs per validation target, in blocks of 512 MB of
    gathered rows as sampled validation scores them: `pair_scores` against `sampled_dot`."""
    rng = np.random.default_rng(0)
    users = np.repeat(split.valid.users, np.diff(split.valid.targets.indptr))
    index = torch.as_tensor(rng.integers(0, split.n_items, (users.size, n)))
    with torch.no_grad():  # the rows and table MF's own scoring uses
        rows = model._user_rows(torch.as_tensor(users)) / model.temperature
        table = model._item_table()
    block = (512 << 20) // (n * 64 * 4)

    def run(op):
        return lambda _: [op(rows[lo:lo + block], table, index[lo:lo + block])
                          for lo in range(0, users.size, block)]

    def forward(r, t, i):
        with torch.no_grad():
            return sampled_dot(r, t, i)

    reference, _ = timed_pass(run(forward), None, repeats)
    ours, _ = timed_pass(run(pair_scores), None, repeats)
    print(f"  scoring {users.size} x {n} pairs: sampled_dot's forward {reference:.3f} s, "
          f"pair_scores {ours:.3f} s ({reference / ours:.2f}x)")


def synthetic_split(n_items: int, n_users: int, targets: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, n_items, (n_users, 2 * targets))
    rows = np.repeat(np.arange(n_users), 2 * targets)
    both = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols.ravel())),
                         shape=(n_users, n_items))
    both.data[:] = 1.0  # repeated draws summed: binary again
    order = np.argsort(rng.random(both.nnz))
    mask = np.zeros(both.nnz, bool)
    mask[order[: both.nnz // 2]] = True
    coo = both.tocoo()
    foldin = sp.csr_matrix((coo.data[~mask], (coo.row[~mask], coo.col[~mask])), both.shape)
    held = sp.csr_matrix((coo.data[mask], (coo.row[mask], coo.col[mask])), both.shape)
    users = np.arange(n_users)
    evalset = EvalSet(users=users, foldin=foldin, targets=held)
    return Split(train=foldin, valid=evalset, test=evalset)


def factor_model(split: Split, dim: int, seed: int, device: str = "cpu") -> MF:
    """MF fitted for no epoch on a tiny matrix, then given random tables of the split's size
    (drawn on the CPU, so every device scores the same tables) on `device`."""
    model = MF(epochs=1, dim=dim, sampling={"n_negatives": 2}, select_on="test")
    model.fit(sp.csr_matrix(np.eye(4, dtype=np.float32)))
    generator = torch.Generator().manual_seed(seed)
    model._users = torch.randn(split.train.shape[0], dim, generator=generator).to(device)
    model._items = torch.randn(split.n_items, dim, generator=generator).to(device)
    model.n_items_ = split.n_items
    return model


def sizes(values: list[int], n_users: int, targets: int, repeats: int,
          figure: str | None, device: str = "cpu") -> None:
    results = []
    for n_items in values:
        split = synthetic_split(n_items, n_users, targets, seed=0)
        print_header(f"{n_items} items, {n_users} validation users, "
                     f"{split.valid.targets.nnz} held-out items, tables on {device}")
        rows = compare(split, factor_model(split, 64, seed=0, device=device), "recall@20",
                       repeats)
        print_rows(rows)
        results.append((n_items, rows[0][1], rows[1][1]))
    if figure:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        from linrec.plots import save_figure_formats

        fig = Figure(figsize=(6.4, 4.0))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        x = [r[0] for r in results]
        ax.loglog(x, [r[1] for r in results], "o-", label="exact (every item ranked)")
        ax.loglog(x, [r[2] for r in results], "s-", label=f"sampled ({SAMPLED[0][0]}, "
                  f"n = {SAMPLED[0][1]})")
        ax.set_xlabel("items in the catalogue")
        ax.set_ylabel("seconds per validation pass")
        ax.set_title(f"{n_users} validation users, {targets} held-out items each")
        ax.legend()
        for path in save_figure_formats(fig, figure):
            print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="a LightGCN-format directory (train.txt, test.txt)")
    parser.add_argument("--checkpoint", help="with --data: an MF checkpoint.pt of a fit on it")
    parser.add_argument("--sizes", default="", help="comma-separated catalogue sizes")
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--targets", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--figure", help="path stem of the cost figure (PNG and PDF)")
    parser.add_argument("--device", default="cpu", help="with --sizes: where the tables are")
    args = parser.parse_args()
    if args.data:
        real(args.data, args.repeats, args.checkpoint)
    if args.sizes:
        sizes([int(v) for v in args.sizes.split(",")], args.users, args.targets, args.repeats,
              args.figure, args.device)
    if not (args.data or args.sizes):
        parser.error("give --data DIR and/or --sizes N,N,...")


if __name__ == "__main__":
    main()
