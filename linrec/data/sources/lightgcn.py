"""LightGCN / NGCF pre-split data (Gowalla, Yelp2018, Amazon-Book): a directory with `train.txt`
and `test.txt`, one line per user `u i1 i2 ...` (a line may hold the user alone). Ids are used as
is: n_users / n_items = max id + 1 over both files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from linrec.data.download import RemoteFile
from linrec.data.interactions import PredefinedSplitData
from linrec.data.sources._common import (
    build_interactions,
    existing_path,
    locate_variant,
    with_identity_vocabulary,
)
from linrec.errors import DataError

_BASE_URL = "https://raw.githubusercontent.com/gusye1234/LightGCN-PyTorch/master/data"
VARIANTS = ("gowalla", "yelp2018", "amazon-book")
#: SHA-256 of the published files where known: Gowalla's, read from the files LightGCN published
#: (29 858 lines each; 810 128 and 217 242 interactions). Yelp2018's and Amazon-Book's are not
#: known here: those are fetched unverified, with a warning.
SHA256: dict[tuple[str, str], str] = {
    ("gowalla", "train"): "7244696fdeb23911319cf7b689f2e15a3c4c92549c873a5677b44e3f13cc3e62",
    ("gowalla", "test"): "099a2a73924e4b754dc6efd730d764f492321b53c38eb93298850c83acf57be3",
}
URLS: dict[str, dict[str, RemoteFile]] = {
    variant: {
        part: RemoteFile(f"{_BASE_URL}/{variant}/{part}.txt", SHA256.get((variant, part)),
                         f"lightgcn-{variant}-{part}.txt")
        for part in ("train", "test")
    }
    for variant in VARIANTS
}


def read(path: str | os.PathLike, name: str = "lightgcn") -> PredefinedSplitData:
    """Read `train.txt` and `test.txt` from directory `path`."""
    root = existing_path(path, "lightgcn", "a directory with train.txt and test.txt")
    if not root.is_dir():
        raise DataError(
            f"lightgcn: {root} is not a directory; expected one with train.txt and test.txt"
        )
    return _read_pair(root / "train.txt", root / "test.txt", name)


def load(
    path: str | os.PathLike | None = None,
    variant: str | None = None,
    download: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> PredefinedSplitData:
    """A LightGCN-format directory `path` (named `variant`, else after the directory), else the
    published `variant` (default gowalla) from the cache, downloading it if asked."""
    if path is not None:
        return read(path, name=variant or Path(path).expanduser().name)
    variant = variant or "gowalla"
    files = locate_variant(
        URLS, variant, source="LightGCN", download=download, cache_dir=cache_dir,
        override_hint=f"linrec data=lightgcn data.variant={variant} "
                      f"data.path=/path/to/dir_with_train.txt_and_test.txt")
    return _read_pair(files["train"], files["test"], variant)


def _read_pair(train_path: Path, test_path: Path, name: str) -> PredefinedSplitData:
    train_users, train_items, train_max_user = read_user_lists(train_path)
    test_users, test_items, test_max_user = read_user_lists(test_path)
    n_users = max(train_max_user, test_max_user) + 1
    n_items = max(_max_or(train_items, -1), _max_or(test_items, -1)) + 1
    train, test = (
        with_identity_vocabulary(
            build_interactions(users, items, name=f"{name}-{part}"), n_users, n_items
        )
        for part, users, items in (("train", train_users, train_items),
                                   ("test", test_users, test_items))
    )
    return PredefinedSplitData(train, test, name=name)


def read_user_lists(path: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """Parse lines `u i1 i2 ...` -> (users int64 (nnz,), items int64 (nnz,), largest user id),
    vectorised: newlines become a ';' token, so token runs between ';' are lines."""
    path = existing_path(path, "lightgcn", "train.txt / test.txt")
    tokens = np.array(path.read_bytes().replace(b"\n", b" ; ").split())
    is_break = tokens == b";"
    line_of_token = np.cumsum(is_break)[~is_break]  # 0-based line index of each number
    try:
        numbers = tokens[~is_break].astype(np.int64)
    except (ValueError, OverflowError):
        _raise_first_bad_line(path)
    if len(numbers) and numbers.min() < 0:
        bad_line = int(line_of_token[np.argmax(numbers < 0)]) + 1
        raise DataError(
            f"{path}: line {bad_line}: ids must be >= 0: {_line_text(path, bad_line)!r}"
        )
    if len(numbers) == 0:
        raise DataError(f"{path}: the file has no data rows")
    starts_line = np.r_[True, line_of_token[1:] != line_of_token[:-1]]
    line_users = numbers[starts_line]
    users = line_users[np.cumsum(starts_line) - 1][~starts_line]
    return users, numbers[~starts_line], _max_or(line_users, -1)


def _max_or(values: np.ndarray, default: int) -> int:
    return int(values.max()) if len(values) else default


def _line_text(path: Path, line_no: int) -> str:
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if number == line_no:
                return raw.decode("utf-8", errors="replace").rstrip("\r\n")
    return ""


def _raise_first_bad_line(path: Path) -> None:
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            for token in line.split():
                try:
                    int(token)
                except ValueError:
                    raise DataError(
                        f"{path}: line {line_no}: {token!r} is not an integer id "
                        f"(expected 'user item item ...'): {line!r}"
                    ) from None
    raise DataError(f"{path}: could not parse the file")
