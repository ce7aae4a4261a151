"""Benchmark the MF trainer (linrec.models.mf) at the published setting: batch 512, 800 negatives,
dimension 64, cosine scores, CCL, on a Gowalla-sized synthetic dataset (29 858 users, 40 981
items, 810 128 training pairs), 2 CPU cores.

Rows, all measured in this process:
- the reference: one training step written as SimpleX's code computes CCL (gather the negative
  item embeddings per example, normalise every gathered row, score, loss, Adam), positives/s;
- linrec per-example negatives (the published protocol): positives/s and the epoch time;
- linrec shared negatives (one set of 800 per batch): the epoch time with Adam (every row of
  both tables updated each step, as the per-example run) and with `optimizer: sparse_adam`
  (lazy Adam: only the rows a step touches; `reg_mode: batch_rows`);
- one exact validation pass over every user (linrec's evaluator, Recall@20 / NDCG@20);
- peak RSS;
- the per-example step's floor on this machine, measured in the same run (`step_floor`): the
  passes over whole tables that the step makes by its design (dense Adam over both tables,
  the gradients written, the clipping norm and scale, the item table's cosine normalisation and
  its backward) at the measured copy rate, three passes over the B·N draws' table rows (the
  scores, the user rows' gradient, the item rows' gradient; each timed as one `embedding_bag`
  over the draws) and the draws themselves; with the step's and the reference's ratio to it;
then each target (>= 25x the reference's positives/s and an epoch <= 30 s per example, an
epoch <= 5 s shared, a validation pass <= 10 s, peak memory <= 3 GiB) with ok/OVER; the
shared target is shown for both optimizers.

    python experiments/benchmarks/bench_mf.py            # steps timed, epochs extrapolated
    python experiments/benchmarks/bench_mf.py --epoch    # and one whole epoch of each mode
    python experiments/benchmarks/bench_mf.py --quick
    python experiments/benchmarks/bench_mf.py --device cuda   # every row on a GPU (the
                                                              # reference too); the targets
                                                              # are the CPU's
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_gib, timed

from linrec.data.splits import EvalSet
from linrec.eval.exact import evaluate_exact
from linrec.models.mf import MF, MFTrainer
from linrec.models.mf_ops import keep_freed_memory


def gowalla_like(n_users: int, n_items: int, n_pairs: int, seed: int = 0) -> sp.csr_matrix:
    """Users x items binary CSR with power-law item popularity and log-normal user activity."""
    rng = np.random.default_rng(seed)
    activity = rng.lognormal(0.0, 1.0, n_users)
    users = rng.choice(n_users, int(n_pairs * 1.15), p=activity / activity.sum())
    popularity = 1.0 / np.arange(1, n_items + 1) ** 0.8
    items = rng.choice(n_items, len(users), p=popularity / popularity.sum())
    matrix = sp.csr_matrix((np.ones(len(users), np.float32), (users, items)),
                           shape=(n_users, n_items))
    matrix.sum_duplicates()
    matrix.data[:] = 1.0
    keep = np.sort(rng.choice(matrix.nnz, min(n_pairs, matrix.nnz), replace=False))
    coo = matrix.tocoo()
    return sp.csr_matrix((np.ones(len(keep), np.float32), (coo.row[keep], coo.col[keep])),
                         shape=matrix.shape)


def reference_step(users_t, items_t, batch, n_negatives, generator, optimizer,
                   margin=0.9, weight=150.0, reg=1e-8):
    """One step as SimpleX's code computes MF-CCL: per-example gather, normalise each row."""
    import torch.nn.functional as F

    users, positives = batch
    negatives = torch.randint(items_t.shape[0], (len(users), n_negatives), generator=generator,
                              device=items_t.device)
    optimizer.zero_grad()
    u = F.normalize(users_t[users], dim=-1)
    pos = F.normalize(items_t[positives], dim=-1)
    neg = F.normalize(items_t[negatives], dim=-1)
    s_pos = (u * pos).sum(-1)
    s_neg = torch.bmm(neg, u[:, :, None])[..., 0]
    loss = (torch.relu(1 - s_pos) + weight * torch.relu(s_neg - margin).mean(-1)).mean()
    loss = loss + reg / 2 * ((users_t ** 2).sum() + (items_t ** 2).sum())
    loss.backward()
    torch.nn.utils.clip_grad_norm_([users_t, items_t], 10.0)
    optimizer.step()


def step_floor(n_users: int, n_items: int, dim: int, batch: int, n_draws: int,
               generator: torch.Generator, device: str) -> dict[str, float]:
    """The per-example step's floor in seconds on this machine, measured now on torch's
    threads, by part: `tables` (the bytes the step moves over whole float32 tables, by its
    design, at the copy rate of a 256 MB tensor: dense Adam reads the parameters, gradients
    and both moments and writes three of them, 7 passes over both tables; the backward writes
    both gradients, 1; clipping reads the gradients and weights for the norm and scales the
    gradients, 4; the cosine normalisation of the item table reads and writes it, 2, and its
    backward reads two and writes one, 3), `rows` (three passes over the draws' table rows:
    the scores, the user rows' gradient, the item rows' gradient, each timed as one
    embedding_bag of the (batch, n_draws) draws), `draws` (torch.randint of the draws);
    `bytes` and `rate` (bytes/s) beside them. The timed steps are early in training, where
    every step is clipped, so the clipping's passes count; it is the floor of this design of
    the step (a step that keeps less state, `sparse_adam` or shared negatives, moves less)."""
    table, item_table = (n_users + n_items) * dim * 4, n_items * dim * 4
    moved = (7 + 1 + 4) * table + (2 + 3) * item_table
    source = torch.ones(1 << 26, device=device)
    target = torch.empty_like(source)

    def synced(fn):
        def run():
            fn()
            if device != "cpu":
                torch.cuda.synchronize(device)
        return run

    copy, _ = timed(synced(lambda: target.copy_(source)), repeats=5)
    rate = 2 * source.numel() * 4 / copy  # a copy reads and writes every byte
    items = torch.randn((n_items, dim), generator=generator, device=device)
    draws = torch.randint(n_items, (batch, n_draws), generator=generator, device=device)
    weights = torch.randn((batch, n_draws), generator=generator, device=device)
    row_pass, _ = timed(synced(lambda: F.embedding_bag(draws, items, mode="sum",
                                                       per_sample_weights=weights)), repeats=5)
    drawing, _ = timed(synced(lambda: torch.randint(n_items, (batch, n_draws),
                                                    generator=generator, device=device)),
                       repeats=5)
    return {"tables": moved / rate, "rows": 3 * row_pass, "draws": drawing,
            "bytes": moved, "rate": rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small dataset (smoke test)")
    parser.add_argument("--steps", type=int, default=60, help="training steps timed per mode")
    parser.add_argument("--epoch", action="store_true", help="also time one whole epoch")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:<n>")
    args = parser.parse_args()
    device = args.device

    def synchronized() -> float:
        """The clock once the device has finished what it was given."""
        if device != "cpu":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    n_users, n_items, n_pairs = (3000, 4000, 80_000) if args.quick else (29_858, 40_981, 810_128)
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the trainer does: the reference runs under the same allocator
    train = gowalla_like(n_users, n_items, n_pairs)
    batch_size, n_neg, dim = 512, 800, 64
    steps_per_epoch = -(-train.nnz // batch_size)
    print(f"data: {n_users} users, {n_items} items, {train.nnz} training pairs; batch "
          f"{batch_size}, {n_neg} negatives, d {dim}, cosine, CCL, {args.threads} threads, "
          f"device {device}; "
          f"{steps_per_epoch} steps per epoch")
    rows = []
    epochs: dict[str, float] = {}

    # -- the reference
    g = torch.Generator(device=device).manual_seed(0)
    users_t = (torch.randn((n_users, dim), generator=g, device=device) * 1e-4).requires_grad_()
    items_t = (torch.randn((n_items, dim), generator=g, device=device) * 1e-4).requires_grad_()
    opt = torch.optim.Adam([users_t, items_t], lr=1e-4)
    pair_users = torch.as_tensor(np.repeat(np.arange(n_users), np.diff(train.indptr)),
                                 device=device)
    pair_items = torch.as_tensor(train.indices.astype(np.int64), device=device)
    order = torch.randperm(len(pair_users), generator=g, device=device)

    def ref_batch(k):
        idx = order[(k * batch_size) % len(order):][:batch_size]
        return pair_users[idx], pair_items[idx]

    reference_step(users_t, items_t, ref_batch(0), n_neg, g, opt)  # warm-up
    t0 = synchronized()
    for k in range(args.steps):
        reference_step(users_t, items_t, ref_batch(k + 1), n_neg, g, opt)
    ref_step = (synchronized() - t0) / args.steps
    rows.append(("reference (SimpleX-style per-example CCL)", ref_step, batch_size / ref_step,
                 ref_step * steps_per_epoch, ""))

    # -- linrec, per-example and shared
    modes = {"per_example negatives": ("per_example", {}),
             "shared negatives": ("shared", {}),
             "shared negatives, sparse_adam": ("shared", {"optimizer": "sparse_adam",
                                                          "reg_mode": "batch_rows"})}
    for mode, (negatives, params) in modes.items():
        model = MF(dim=dim, batch_size=batch_size, epochs=1, num_threads=args.threads,
                   sampling={"n_negatives": n_neg, "negatives": negatives},
                   resume=False, checkpoint_dir="/tmp/linrec-bench-mf", device=device,
                   **params)
        generator = torch.Generator(device=device).manual_seed(model.config.seed)
        model._init_tables(*train.shape, generator)
        trainer = MFTrainer(model, train.astype(np.float64), generator)
        batches = trainer._batches()
        trainer._step(next(batches))  # warm-up
        t0 = synchronized()
        for _, batch in zip(range(args.steps), batches, strict=False):
            trainer._step(batch)
        per_step = (synchronized() - t0) / args.steps
        note = f"{ref_step / per_step:.2f}x the reference" if negatives == "per_example" else ""
        epochs[mode] = per_step * steps_per_epoch
        if args.epoch:
            t0 = synchronized()
            trainer.train_epoch(1)
            epochs[mode] = synchronized() - t0
            note += f"; measured epoch {epochs[mode]:.1f} s"
        if negatives == "per_example":
            speedup, per_example_step = ref_step / per_step, per_step
        rows.append((f"linrec {mode}", per_step, batch_size / per_step,
                     per_step * steps_per_epoch, note))

    # -- one exact validation pass over every user: Gowalla's test split has 217 242 pairs
    # (0.268 per training pair); draw as many from the same distribution, outside training
    targets = gowalla_like(n_users, n_items, int(train.nnz * 0.268 * 1.3), seed=1)
    targets = targets - targets.multiply(train)
    targets.eliminate_zeros()
    evalset = EvalSet(np.arange(n_users), train, targets.astype(np.float32))
    model.n_items_ = n_items
    t0 = time.perf_counter()
    result = evaluate_exact(model, evalset, ks=[20], metrics=["recall", "ndcg"], seed=0,
                            users_known=True)
    pass_s = time.perf_counter() - t0
    rows.append(("validation pass, all users (exact)", pass_s, float("nan"), float("nan"),
                 f"{n_users} users, recall@20 {result.metrics['recall@20']:.4f}"))

    width = max(len(r[0]) for r in rows)
    print(f"{'step':<{width}}  {'s/step':>8}  {'pos/s':>9}  {'epoch s':>8}  note")
    for name, seconds, rate, epoch, note in rows:
        print(f"{name:<{width}}  {seconds:8.4f}  {rate:9.0f}  {epoch:8.1f}  {note}")
    peak = peak_rss_gib()
    print(f"peak RSS {peak:.2f} GiB")
    floor = step_floor(n_users, n_items, dim, batch_size, n_neg + 1, g, device)
    floor_s = floor["tables"] + floor["rows"] + floor["draws"]
    print(f"per-example step floor {floor_s * 1e3:.1f} ms: whole tables "
          f"{floor['bytes'] / 1e6:.0f} MB at {floor['rate'] / 1e9:.1f} GB/s "
          f"{floor['tables'] * 1e3:.1f} ms, three passes over the draws' rows "
          f"{floor['rows'] * 1e3:.1f} ms, the draws {floor['draws'] * 1e3:.1f} ms; linrec's "
          f"step {per_example_step / floor_s:.2f}x the floor; a step at the floor would be "
          f"{ref_step / floor_s:.1f}x the reference")
    how = "measured" if args.epoch else "extrapolated from the timed steps"
    targets = [
        ("per-example positives/s vs the reference", f"{speedup:.2f}x", ">= 25x",
         speedup >= 25),
        (f"per-example epoch ({how})", f"{epochs['per_example negatives']:.1f} s", "<= 30 s",
         epochs["per_example negatives"] <= 30),
        (f"shared epoch, adam ({how})", f"{epochs['shared negatives']:.1f} s", "<= 5 s",
         epochs["shared negatives"] <= 5),
        (f"shared epoch, sparse_adam ({how})", f"{epochs['shared negatives, sparse_adam']:.1f} s",
         "<= 5 s", epochs["shared negatives, sparse_adam"] <= 5),
        ("validation pass over all users", f"{pass_s:.1f} s", "<= 10 s", pass_s <= 10),
        ("peak memory", f"{peak:.2f} GiB", "<= 3 GiB", peak <= 3),
    ]
    if args.quick:
        print("(--quick: a small catalogue, the targets are for the Gowalla size)")
    width = max(len(t[0]) for t in targets)
    for name, value, target, ok in targets:
        print(f"{name:<{width}}  {value:>9}  target {target:<7} {'ok' if ok else 'OVER'}")


if __name__ == "__main__":
    main()
