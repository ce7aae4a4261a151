"""The GPU paths against the CPU, each timed in the same run on the same machine: what a lent GPU
machine measures in one go (the figures go to ../LOG.md and the benchmarks README).

  ease        an EASE fit (float32) of --items items: model.device=cuda against the CPU fit on
              every host thread; the largest |ΔW| between the two.
  spectrum    PureSVD's eigendecomposition (rank 1 % of the items, from the smaller Gram
              matrix) of the same data on the device against the CPU.
  ials        iALS epochs (float32, 64 factors, exact Cholesky) on Gowalla-like data of --items
              items: the torch back-end on the device against the numba back-end on every host
              thread; the largest relative gap of the objectives after the epochs.
  validation  one exact pass of a 64-dimensional MF over --catalogue items, --users users with 3
              held-out items each: tables on the device ranked there (only ranks come back),
              against the same tables ranked on the host (a hook that needs the scores forces
              it), and against the tables on the CPU; the three rank tables must be equal.

    python experiments/benchmarks/bench_gpu.py                   # CUDA, Gowalla-like sizes
    python experiments/benchmarks/bench_gpu.py --items 40981 --catalogue 1000000
    python experiments/benchmarks/bench_gpu.py --quick --device cpu   # the same code on CPU
                                                                      # tensors (a smoke test)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_header, zipf_interactions  # noqa: E402
from bench_validation import factor_model, synthetic_split  # noqa: E402

from linrec.eval.exact import evaluate_exact  # noqa: E402
from linrec.models import als as als_module  # noqa: E402
from linrec.models import ease as ease_module  # noqa: E402
from linrec.models import spectral as spectral_module  # noqa: E402
from linrec.models.als import IALS  # noqa: E402
from linrec.models.ease import EASE  # noqa: E402
from linrec.models.spectral import PureSVD, clear_spectrum_cache  # noqa: E402


def synchronize(device: str) -> None:
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, device: str) -> tuple[float, object]:
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return time.perf_counter() - start, result


def on_cpu_tensors() -> str:
    """Resolve "cuda" to CPU tensors, as the tests do: the device path runs without a GPU."""
    def resolve(name: str, owner: str) -> torch.device:
        return torch.device("cpu")

    ease_module.torch_device = spectral_module.torch_device = resolve
    als_module.torch_device = resolve
    return "cuda"


class RankedOnDevice:
    """An MF whose device scores are served whatever its device (for --device cpu)."""

    scores_on_device = True

    def __init__(self, model) -> None:
        self.model, self.score_device = model, model._items.device

    def score(self, foldin, users=None):
        return self.model.score(foldin, users)

    def score_tensor(self, foldin, users=None):
        return self.model._score_tensor(foldin, users)


def ease(n_items: int, device: str) -> None:
    X = zipf_interactions(4 * n_items, n_items, 60 * n_items, seed=0)
    print_header(f"EASE float32, {n_items} items, {X.nnz} interactions")
    gpu_s, gpu = timed(lambda: EASE(lam=100.0, device=device).fit(X), device)
    cpu_s, cpu = timed(lambda: EASE(lam=100.0).fit(X), "cpu")
    diff = float(np.abs(gpu.W_ - cpu.W_).max())
    print(f"  CPU fit {cpu_s:8.2f} s   device fit {gpu_s:8.2f} s   CPU / device "
          f"{cpu_s / gpu_s:6.1f}x   max |ΔW| {diff:.2e} (|W| max {np.abs(cpu.W_).max():.2f})")


def spectrum(n_items: int, device: str) -> None:
    X = zipf_interactions(4 * n_items, n_items, 60 * n_items, seed=1)
    rank = max(8, n_items // 100)
    print_header(f"PureSVD rank {rank}, {n_items} items, {X.shape[0]} users")
    clear_spectrum_cache()
    gpu_s, gpu = timed(lambda: PureSVD(rank=rank, device=device).fit(X), device)
    clear_spectrum_cache()
    cpu_s, cpu = timed(lambda: PureSVD(rank=rank).fit(X), "cpu")
    gap = float(np.abs(gpu.spectrum_.eigenvalues[:rank] / cpu.spectrum_.eigenvalues[:rank]
                       - 1).max())
    print(f"  CPU {cpu_s:8.2f} s   device {gpu_s:8.2f} s   CPU / device {cpu_s / gpu_s:6.1f}x"
          f"   largest relative eigenvalue gap {gap:.1e}")


def ials(n_items: int, device: str, epochs: int = 4) -> None:
    X = zipf_interactions(n_items * 3 // 4, n_items, 20 * n_items, seed=2)
    print_header(f"iALS float32, 64 factors, {epochs} epochs, {X.shape[0]} users x {n_items} "
                 f"items, {X.nnz} interactions")
    params = dict(factors=64, reg=0.01, alpha0=0.01, epochs=epochs)
    for backend, on in (("torch", device), ("numba", "cpu")):  # kernels compiled, caches warm
        IALS(**{**params, "epochs": 1}, backend=backend, device=on).fit(X[:200])
    gpu_s, gpu = timed(lambda: IALS(**params, backend="torch", device=device).fit(X), device)
    cpu_s, cpu = timed(lambda: IALS(**params).fit(X), "cpu")
    gap = float(np.abs(gpu.loss_history_ / cpu.loss_history_ - 1).max())
    print(f"  CPU (numba) {cpu_s / epochs:7.2f} s/epoch   device (torch) {gpu_s / epochs:7.2f} "
          f"s/epoch   CPU / device {cpu_s / gpu_s:6.1f}x   objective gap {gap:.1e}")


def validation(n_items: int, n_users: int, device: str, real_device: str) -> None:
    split = synthetic_split(n_items, n_users, 3, seed=0)
    print_header(f"exact pass, {n_items} items, {n_users} users, {split.valid.targets.nnz} "
                 f"held-out items, MF d=64 (CPU: {os.cpu_count()} threads)")
    on_device = factor_model(split, 64, seed=0, device=real_device)
    model = on_device if real_device != "cpu" else RankedOnDevice(on_device)
    on_cpu = factor_model(split, 64, seed=0)

    def run(scorer, hooks=()):
        return evaluate_exact(scorer, split.valid, ks=[20], metrics=["recall", "ndcg"], seed=0,
                              users_known=True, batch_hooks=hooks)

    run(model)  # kernels and caches warm
    device_s, ranked_there = timed(lambda: run(model), device)
    host_s, ranked_host = timed(lambda: run(model, [lambda *batch: None]), device)
    cpu_s, ranked_cpu = timed(lambda: run(on_cpu), "cpu")
    same = all(np.array_equal(getattr(ranked_there.rank_table, f),
                              getattr(ranked_host.rank_table, f)) for f in ("items", "ranks"))
    print(f"  tables on the CPU {cpu_s:8.2f} s (reference)")
    print(f"  on the device, ranked on the host {host_s:8.2f} s   {cpu_s / host_s:6.1f}x")
    print(f"  on the device, ranked there       {device_s:8.2f} s   {cpu_s / device_s:6.1f}x"
          f"   same ranks as ranked on the host: {same}")
    if not same:
        raise SystemExit("the device ranks differ from the host's for the same scores")
    print(f"  recall@20: {ranked_there.metrics['recall@20']:.5f} (device tables), "
          f"{ranked_cpu.metrics['recall@20']:.5f} (CPU tables)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda | cuda:<n> | cpu (CPU tensors)")
    parser.add_argument("--items", type=int, default=20_000, help="EASE and PureSVD items")
    parser.add_argument("--catalogue", type=int, default=1_000_000,
                        help="items of the validation pass")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.items, args.catalogue, args.users = 600, 5_000, 500
    real_device = args.device
    if args.device == "cpu":
        args.device = on_cpu_tensors()
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --device cpu for the code path alone")
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines()
                  if line.startswith("Model name")), "unknown CPU")
    gpu = torch.cuda.get_device_name() if real_device != "cpu" else "none (CPU tensors)"
    print(f"CPU: {model}; device: {gpu}; torch {torch.__version__}")
    ease(args.items, args.device)
    spectrum(args.items, args.device)
    ials(args.items, args.device)
    validation(args.catalogue, args.users, args.device, real_device)


if __name__ == "__main__":
    main()
