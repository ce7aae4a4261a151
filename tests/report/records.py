"""Hand-written run records for the report tests."""

from __future__ import annotations

import json


def run_record(lam: float, seed: int, ndcg: float, *, n_items: int = 100, cache: str = "a") -> dict:
    """A results.json record of an EASE run with the given λ, seed and test nDCG@10."""
    return {"dataset": {"name": "synthetic"}, "model": "ease", "seed": seed,
            "config": {"seed": seed, "model": {"name": "ease", "lam": lam, "num_threads": 4,
                                               "seed": seed},
                       "data": {"source": {"n_items": n_items}, "cache_dir": cache}},
            "selection": {"metric": "ndcg@10", "split": "valid", "value": ndcg / 2},
            "splits": {"test": {"exact": {"ndcg@10": ndcg, "auc": 0.8}},
                       "valid": {"exact": {"ndcg@10": ndcg / 2}}},
            "timings": {"fit": 1.5}}


def write_record(path, record):
    """`record` as the results.json of a new run directory `path`."""
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps(record))
