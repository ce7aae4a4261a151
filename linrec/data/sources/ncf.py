"""NCF pre-split data (He et al. 2017: ml-1m, pinterest-20): `<name>.train.rating` and
`<name>.test.rating` (tab: user item rating [timestamp]; the test file holds one row per user),
and `<name>.test.negative` (line `(user,item)\\tneg1\\tneg2...`, 99 sampled negatives per test
row). Ids are used as is: n_users / n_items = max id + 1 over the three files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from linrec.data.download import RemoteFile
from linrec.data.interactions import PredefinedSplitData
from linrec.data.sources._common import (
    build_interactions,
    existing_path,
    locate_variant,
    with_identity_vocabulary,
)
from linrec.data.sources._parsing import TextFile, count_fields, line_of_row, read_table
from linrec.errors import DataError

_BASE_URL = (
    "https://raw.githubusercontent.com/hexiangnan/neural_collaborative_filtering/master/Data"
)
VARIANTS = ("ml-1m", "pinterest-20")
SUFFIXES = ("train.rating", "test.rating", "test.negative")
# checksums unknown: fetched unverified, with a warning
URLS: dict[str, dict[str, RemoteFile]] = {
    variant: {
        suffix: RemoteFile(f"{_BASE_URL}/{variant}.{suffix}", None, f"ncf-{variant}.{suffix}")
        for suffix in SUFFIXES
    }
    for variant in VARIANTS
}
_RATING_COLUMNS = {"user": "int64", "item": "int64", "rating": "float32", "timestamp": "int64"}
_PAIR = r"^\((\d+),(\d+)\)$"


def read(path: str | os.PathLike, name: str | None = None) -> PredefinedSplitData:
    """Read the three NCF files. `path` is a directory holding `<name>.train.rating` etc. (`name`
    picks the set when there are several), the common prefix `/dir/<name>`, or one of the files."""
    path = Path(path).expanduser()
    if path.is_dir():
        name = _pick_name(path, name)
        prefix = str(path / name)
    else:
        prefix = str(path)
        for suffix in SUFFIXES:
            prefix = prefix.removesuffix(f".{suffix}")
        name = Path(prefix).name
    files = [
        existing_path(f"{prefix}.{suffix}", "ncf", f"the NCF file {prefix}.{suffix}")
        for suffix in SUFFIXES
    ]
    return _read_files(*files, name=name)


def load(
    path: str | os.PathLike | None = None,
    variant: str | None = None,
    download: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> PredefinedSplitData:
    """NCF data from `path` (directory or prefix; `variant` picks a set there, else the only
    one), else the published `variant` (default ml-1m) from the cache."""
    if path is not None:
        return read(path, name=variant)
    variant = variant or "ml-1m"
    files = locate_variant(
        URLS, variant, source="NCF", download=download, cache_dir=cache_dir,
        override_hint=f"linrec data=ncf data.variant={variant} "
                      f"data.path=/path/to/dir_with_{variant}.train.rating")
    return _read_files(*(files[suffix] for suffix in SUFFIXES), name=variant)


def _pick_name(directory: Path, name: str | None) -> str:
    names = sorted(p.name.removesuffix(".train.rating") for p in directory.glob("*.train.rating"))
    if name in names:
        return name
    if len(names) == 1:
        return names[0]
    raise DataError(
        f"ncf: {directory} holds {len(names)} '*.train.rating' sets {names}"
        + (f", none named {name!r}" if name else "; pick one with data.variant")
    )


def _read_files(
    train_path: Path, test_path: Path, negative_path: Path, name: str
) -> PredefinedSplitData:
    train_cols = _read_ratings(TextFile(train_path))
    test_cols = _read_ratings(TextFile(test_path))
    negative_users, pair_items, negatives = _read_negatives(TextFile(negative_path))
    _check_pairs(test_cols, negative_users, pair_items, test_path, negative_path)
    n_users = 1 + max(int(train_cols[0].max()), int(test_cols[0].max()))
    n_items = 1 + max(
        int(train_cols[1].max()), int(test_cols[1].max()), int(negatives.max(initial=0))
    )
    train, test = (
        with_identity_vocabulary(
            build_interactions(*cols, name=f"{name}-{part}"), n_users, n_items
        )
        for part, cols in (("train", train_cols), ("test", test_cols))
    )
    return PredefinedSplitData(train, test, negatives, negative_users, name=name)


def _read_ratings(file: TextFile) -> tuple[np.ndarray, ...]:
    """(users, items, ratings, timestamps or None) of a `.rating` file (3 or 4 columns)."""
    n_fields = count_fields(file, "\t")
    if n_fields not in (3, 4):
        raise DataError(
            f"{file.label}: expected 3 or 4 tab-separated fields (user, item, rating"
            f"[, timestamp]) on the first line, found {n_fields}"
        )
    columns = dict(list(_RATING_COLUMNS.items())[:n_fields])
    table = read_table(file, sep="\t", columns=columns)
    return table["user"], table["item"], table["rating"], table.get("timestamp")


def _read_negatives(file: TextFile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(users int64 (n,), positive items int64 (n,), negatives int64 (n, n_neg))."""
    n_negatives = count_fields(file, "\t") - 1
    if n_negatives < 1:
        raise DataError(
            f"{file.label}: the first line holds no negatives; expected '(user,item)\\tneg...'"
        )
    columns = {"pair": "str"} | {f"negative_{k + 1}": "int64" for k in range(n_negatives)}
    table = read_table(file, sep="\t", columns=columns)
    pairs = pd.Series(np.asarray(table["pair"])).str.extract(_PAIR)
    unmatched = pairs[0].isna().to_numpy()
    if unmatched.any():
        line_no, text = line_of_row(file, int(np.argmax(unmatched)))
        raise DataError(f"{file.label}: line {line_no}: expected '(user,item)' first: {text!r}")
    negatives = np.column_stack([table[c] for c in list(columns)[1:]]).astype(np.int64)
    if negatives.size and negatives.min() < 0:
        line_no, text = line_of_row(file, int(np.argmax((negatives < 0).any(axis=1))))
        raise DataError(f"{file.label}: line {line_no}: negative item ids must be >= 0: {text!r}")
    return pairs[0].to_numpy(np.int64), pairs[1].to_numpy(np.int64), negatives


def _check_pairs(
    test_cols: tuple[np.ndarray, ...],
    negative_users: np.ndarray,
    pair_items: np.ndarray,
    test_path: Path,
    negative_path: Path,
) -> None:
    """Line k of `.test.negative` must name the (user, item) of line k of `.test.rating`."""
    users, items = np.asarray(test_cols[0]), np.asarray(test_cols[1])
    if len(users) != len(negative_users):
        raise DataError(
            f"{negative_path} has {len(negative_users)} rows but {test_path} has {len(users)}; "
            f"they must list the same (user, item) pairs in the same order"
        )
    differ = (users != negative_users) | (items != pair_items)
    if differ.any():
        row = int(np.argmax(differ))
        raise DataError(
            f"{negative_path}: row {row + 1} names ({negative_users[row]},{pair_items[row]}) but "
            f"row {row + 1} of {test_path} is ({users[row]},{items[row]})"
        )

