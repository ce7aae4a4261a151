"""`linrec-evaluate`: score a ranking written by any other library (RecBole, LensKit, implicit, a
paper's code) with linrec's evaluation, without porting the model.

A run file holds, per user, ranked items with scores, by the dataset's own user and item ids:

* TREC run format (`.trec`, `.run`, `.txt`): `user Q0 item rank score tag`, whitespace-separated;
* CSV / TSV (`.csv`, `.tsv`) or Parquet (`.parquet`) with the columns `user`, `item`, `score`.

The data config (the same overrides as `linrec`: `data=lightgcn data.path=...`) gives the split
whose test interactions are scored; the fold-in items are masked as for a linrec model, and ties
of score are broken by linrec's seeded key. Exact metrics come from the lists. Where every
evaluated user's list ranks the whole catalogue (its fold-in items aside), every held-out item's
global rank is known, so AUC, the sampled block and its estimators are computed too; where the
lists are cut at depth N, only the metrics at K <= N are (a deeper one would be a guess), and the
command says so. The run directory holds the same results.json (and ranks.npz) a `linrec` run
writes, so `linrec-report` sets such runs beside linrec's own.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.errors import ConfigError, DataError
from linrec.eval.metrics import parse_metric_key, resolve_selection

log = logging.getLogger("linrec")

#: run-file formats and the file suffixes that select them (format=auto)
FORMATS = {"trec": (".trec", ".run", ".txt"), "csv": (".csv",), "tsv": (".tsv",),
           "parquet": (".parquet",)}


@dataclass(frozen=True)
class RankedLists:
    """Per-user ranked items as a scorer for linrec's evaluator.

    indptr: int64 (n_users + 1,), items: int64 (L,), scores: float64 (L,): user row u lists
    items[indptr[u]:indptr[u + 1]] with their scores (rows of the split's user vocabulary).
    `score(foldin, users)` gives the listed scores and, to every item not listed, a finite score
    below the user's lowest listed one.
    """

    indptr: np.ndarray
    items: np.ndarray
    scores: np.ndarray
    n_items: int

    def score(self, foldin: sp.csr_matrix, users: np.ndarray | None = None) -> np.ndarray:
        """(len(users), n_items) float64; users: row ids of the split's user vocabulary."""
        if users is None:
            raise ConfigError("a run file ranks known users: it cannot fold users in")
        users = np.asarray(users)
        out = np.empty((len(users), self.n_items), dtype=np.float64)
        for row, user in enumerate(users):
            start, end = self.indptr[user], self.indptr[user + 1]
            values = self.scores[start:end]
            low = values.min() if end > start else 0.0
            out[row] = low - max(1.0, abs(low))  # below every listed item, finite
            out[row, self.items[start:end]] = values
        return out

    def depth(self, users: np.ndarray, foldin: sp.csr_matrix) -> np.ndarray:
        """Per user, how many items the list ranks besides the user's fold-in items (int64)."""
        users = np.asarray(users)
        out = np.empty(len(users), dtype=np.int64)
        for row, user in enumerate(users):
            listed = self.items[self.indptr[user]:self.indptr[user + 1]]
            given = foldin.indices[foldin.indptr[row]:foldin.indptr[row + 1]]
            out[row] = listed.size - np.isin(listed, given, assume_unique=True).sum()
        return out


def _format_of(path: Path, fmt: str) -> str:
    if fmt != "auto":
        if fmt not in FORMATS:
            raise ConfigError(f"--format={fmt!r} is not allowed; allowed: auto, "
                              f"{', '.join(FORMATS)}")
        return fmt
    for name, suffixes in FORMATS.items():
        if path.suffix.lower() in suffixes:
            return name
    raise ConfigError(f"{path}: cannot tell the run file's format from its suffix "
                      f"{path.suffix!r}; give --format ({', '.join(FORMATS)})")


def read_run_file(path: str | Path, fmt: str, user_ids: np.ndarray, item_ids: np.ndarray
                  ) -> RankedLists:
    """The lists of a run file, its user and item ids mapped to the split's rows and columns.
    DataError naming the file, the line and the value for an unknown id, a repeated (user,
    item), a score that is not a finite number, or a malformed line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such run file")
    fmt = _format_of(path, fmt)
    users, items, scores, lines = _read_columns(path, fmt)
    if len(users) == 0:
        raise DataError(f"{path}: the run file holds no ranked item")
    user_rows = _index(path, "user", users, user_ids, lines)
    item_cols = _index(path, "item", items, item_ids, lines)
    try:
        values = scores.astype(np.float64)
    except ValueError:
        values = np.array([_number(path, v, line) for v, line in zip(scores, lines, strict=True)])
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise DataError(f"{path}: line {lines[bad[0]]}: score {scores[bad[0]]!r} is not a finite "
                        "number")
    pairs = user_rows.astype(np.int64) * len(item_ids) + item_cols
    order = np.argsort(pairs, kind="stable")
    repeated = np.flatnonzero(np.diff(pairs[order]) == 0)
    if repeated.size:
        at = order[repeated[0] + 1]
        raise DataError(f"{path}: line {lines[at]}: user {users[at]!r} lists item {items[at]!r} "
                        "a second time")
    by_user = np.argsort(user_rows, kind="stable")
    indptr = np.zeros(len(user_ids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(user_rows, minlength=len(user_ids)), out=indptr[1:])
    return RankedLists(indptr, item_cols[by_user], values[by_user], len(item_ids))


def _number(path: Path, value: Any, line: int) -> float:
    try:
        return float(value)
    except ValueError:
        raise DataError(f"{path}: line {line}: score {value!r} is not a number") from None


def _read_columns(path: Path, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(users, items, scores, line numbers), ids as strings."""
    if fmt == "trec":
        users, items, scores, lines = [], [], [], []
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                fields = line.split()
                if not fields:
                    continue
                if len(fields) != 6:
                    raise DataError(f"{path}: line {number}: {line.strip()!r} has "
                                    f"{len(fields)} fields; a TREC run line has 6: user Q0 item "
                                    "rank score tag")
                users.append(fields[0])
                items.append(fields[2])
                scores.append(fields[4])
                lines.append(number)
        return (np.asarray(users, dtype=object), np.asarray(items, dtype=object),
                np.asarray(scores, dtype=object), np.asarray(lines))
    import pandas as pd

    if fmt == "parquet":
        frame = pd.read_parquet(path)
        first_line = 0  # rows, counted from 0
    else:
        frame = pd.read_csv(path, sep="\t" if fmt == "tsv" else ",", dtype=str,
                            keep_default_na=False)
        first_line = 2  # the header is line 1
    missing = [c for c in ("user", "item", "score") if c not in frame.columns]
    if missing:
        raise DataError(f"{path}: no column(s) {missing}; a run file has the columns user, "
                        f"item, score (found {list(frame.columns)})")
    return (frame["user"].astype(str).to_numpy(dtype=object),
            frame["item"].astype(str).to_numpy(dtype=object),
            frame["score"].to_numpy(dtype=object),
            np.arange(first_line, first_line + len(frame)))


def _index(path: Path, what: str, values: np.ndarray, ids: np.ndarray,
           lines: np.ndarray) -> np.ndarray:
    """Rows of `values` (strings) among the split's `ids` (compared as strings)."""
    lookup = {str(v): i for i, v in enumerate(ids)}
    out = np.empty(len(values), dtype=np.int64)
    for position, value in enumerate(values):
        index = lookup.get(value)
        if index is None:
            raise DataError(f"{path}: line {lines[position]}: {what} {value!r} is not in the "
                            f"data's {what}s (e.g. {', '.join(map(str, ids[:3]))})")
        out[position] = index
    return out


def evaluation_config(eval_config: Any, lists: RankedLists, evalsets: Mapping[str, Any],
                      n_items: int) -> tuple[Any, str | None]:
    """The eval config a run file can be scored with, and a note when it was narrowed: lists cut
    at depth N give exact metrics at K <= N only, so deeper K, AUC and the sampled block (which
    need every held-out item's global rank) are left out."""
    depths = [lists.depth(evalset.users, evalset.foldin) for evalset in evalsets.values()]
    missing = [(name, int(np.sum(d == 0))) for name, d in zip(evalsets, depths, strict=True)
               if np.any(d == 0)]
    if missing:
        name, count = missing[0]
        raise DataError(f"the run file has no list for {count} user(s) of the {name} split; "
                        "every evaluated user needs one")
    complete = all(np.all(d + np.asarray(ev.foldin.sum(axis=1)).ravel() >= n_items)
                   for d, ev in zip(depths, evalsets.values(), strict=True))
    if complete:
        return eval_config, None
    depth = int(min(d.min() for d in depths))
    ks = tuple(k for k in eval_config.ks if k <= depth)
    if not ks:
        raise ConfigError(f"the run file lists {depth} item(s) for some user: no cut-off of "
                          f"eval.ks={list(eval_config.ks)} is within it; give eval.ks=[{depth}] "
                          "or smaller")
    metrics = tuple(m for m in eval_config.metrics if m != "auc")
    selection = resolve_selection(eval_config.selection, n_items)
    name, k = parse_metric_key(selection)
    moved = ""
    if name == "auc" or (k is not None and k > depth):
        selection = f"{name if name != 'auc' else 'ndcg'}@{max(ks)}"
        moved = f"; the selection metric is {selection}"
    narrowed = dataclasses.replace(
        eval_config, ks=ks, metrics=metrics, selection=selection,
        sampled=dataclasses.replace(eval_config.sampled, enabled=False))
    note = (f"the lists are cut at {depth} items for some user: metrics at K <= {depth} only "
            f"(K = {', '.join(map(str, ks))}){moved}; no AUC and no sampled block, which need "
            "the whole catalogue ranked")
    return narrowed, note


def evaluate_run_file(path: str | Path, config: Any, run_dir: str | Path, *, fmt: str = "auto",
                      label: str | None = None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Score the run file at `path` on the split of `config` (a RunConfig) and write `run_dir`
    as a linrec run (results.json, ranks.npz); the record is returned."""
    from linrec.data.pipeline import prepare_data
    from linrec.eval import evaluate
    from linrec.results import run_record, write_run

    path = Path(path)
    t0 = time.perf_counter()
    prepared = prepare_data(config.data)
    split = prepared.split
    data_seconds = time.perf_counter() - t0
    if split.user_ids is None or split.item_ids is None:
        raise DataError(f"data {prepared.name!r} has no user and item ids to match a run file "
                        "against")
    t0 = time.perf_counter()
    lists = read_run_file(path, fmt, split.user_ids, split.item_ids)
    read_seconds = time.perf_counter() - t0
    evalsets = {name: getattr(split, name) for name in config.eval.splits
                if getattr(split, name) is not None}
    if not evalsets:
        raise ConfigError(f"eval.splits={list(config.eval.splits)}: the data has none of them")
    eval_config, note = evaluation_config(config.eval, lists, evalsets, split.n_items)
    if note:
        log.warning("%s", note)
    report = evaluate(lists, split, eval_config, seed=config.seed, users_known=True)
    label = label or path.stem
    model = {"name": label, "run_file": str(path.resolve()), "format": _format_of(path, fmt)}
    resolved = {**config.to_dict(), "model": model, "eval": eval_config.to_dict()}
    record = run_record(dataset={"name": prepared.name, **prepared.stats}, model=label,
                        report=report, timings={"data": data_seconds, "fit": read_seconds,
                                                "evaluate": report.seconds},
                        config=resolved, seed=config.seed, overrides=overrides)
    if note:
        record["notes"] = [note]
    write_run(run_dir, record, report, save_ranks=config.save_ranks,
              per_user=config.eval.save_per_user, figures=config.figures,
              user_ids=split.user_ids)
    return record
