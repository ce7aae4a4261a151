"""`linrec-recommend RUN_DIR`: top-K lists for a finished run's users, from its saved model.

The run must have been made with `save_model=true` (model.pkl). Its data are prepared again from
the config in results.json (a cache hit when the split is cached), so the users and items are the
run's. Lists come from `Recommender.recommend` with the run's seed, hence in the evaluator's order:
for `--split test` the held-out items listed at position p have global rank <= p.

Output: a TSV `user  rank  item  score` (raw ids where the data has a vocabulary), written
atomically; rows with fewer than k candidates list fewer items.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from linrec.atomic import atomic_open
from linrec.errors import ConfigError, DataError
from linrec.results import RESULTS_FILE, read_results

MODEL_FILE = "model.pkl"
#: which users get lists: an evaluation split's users (its fold-in rows), or every training user
SPLITS = ("test", "valid", "train")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="linrec-recommend",
        description="Write top-K lists for a run's users (needs a run made with save_model=true).")
    parser.add_argument("run_dir", type=Path, help="a run directory (results.json + model.pkl)")
    parser.add_argument("-k", type=int, default=20, help="items per user (default 20)")
    parser.add_argument("--split", choices=SPLITS, default="test",
                        help="users of this evaluation split with their fold-in rows, or every "
                             "training user with its training row (default test)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output TSV (default RUN_DIR/recommendations_<split>.tsv)")
    parser.add_argument("--memory-budget-mb", type=float, default=512.0,
                        help="memory for one batch of scores (default 512)")
    return parser.parse_args(argv)


def recommend_run(run_dir: Path, k: int, split_name: str = "test", out: Path | None = None,
                  memory_budget_mb: float = 512.0) -> Path:
    """Write the top-k lists of the run's `split_name` users; returns the TSV path."""
    from linrec.config import run_config
    from linrec.data.pipeline import prepare_data
    from linrec.models import model_class

    results, model_path = run_dir / RESULTS_FILE, run_dir / MODEL_FILE
    if not results.is_file():
        raise DataError(f"{run_dir}: no {RESULTS_FILE}; not a finished linrec run")
    if not model_path.is_file():
        raise DataError(f"{run_dir}: no {MODEL_FILE}; run it again with save_model=true")
    record = read_results(results)
    if "config" not in record:
        raise DataError(f"{results}: field 'config' missing; written by another tool?")
    config = run_config(record["config"])
    if config.study is not None:
        raise ConfigError(f"{run_dir} is a study; point linrec-recommend at one of its runs")
    split = prepare_data(config.data).split
    model = model_class(config.model.name).load(model_path)
    if split_name == "train":
        users = np.arange(split.train.shape[0], dtype=np.int64)
        foldin, users_known = split.train, True
    else:
        evalset = getattr(split, split_name)
        if evalset is None:
            raise ConfigError(f"--split {split_name}: the run's data has no {split_name} split")
        users, foldin, users_known = evalset.users, evalset.foldin, not split.strong
    items, scores = model.recommend(foldin, k, users if users_known else None, seed=config.seed,
                                    tie_users=users, memory_budget_mb=memory_budget_mb)
    user_names = users if split.user_ids is None else np.asarray(split.user_ids)[users]
    item_names = None if split.item_ids is None else np.asarray(split.item_ids)
    out = run_dir / f"recommendations_{split_name}.tsv" if out is None else out
    with atomic_open(out, "w") as fh:
        fh.write("user\trank\titem\tscore\n")
        for row, user in enumerate(user_names):
            for rank, (item, score) in enumerate(zip(items[row], scores[row], strict=True), 1):
                if item < 0:
                    break
                name = item if item_names is None else item_names[item]
                fh.write(f"{user}\t{rank}\t{name}\t{float(score):.9g}\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    path = recommend_run(args.run_dir, args.k, args.split, args.out, args.memory_budget_mb)
    print(f"top-{args.k} lists: {path} ({time.perf_counter() - t0:.1f} s)")
    return 0
