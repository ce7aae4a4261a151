"""MovieLens ratings (GroupLens): 100K `u.data` (tab: user item rating timestamp), 1M / 10M
`ratings.dat` (`::`), 20M / 25M / 32M / latest-small `ratings.csv` (header
userId,movieId,rating,timestamp). Values are the ratings, timestamps are Unix seconds."""

from __future__ import annotations

import os
import zipfile

from linrec.data.download import RemoteFile
from linrec.data.interactions import Interactions
from linrec.data.sources._common import (
    build_interactions,
    cached_source,
    existing_path,
    find_file,
    zip_member,
)
from linrec.data.sources._parsing import TextFile, read_table
from linrec.errors import ConfigError

_BASE_URL = "https://files.grouplens.org/datasets/movielens"
# SHA-256 as recorded by tensorflow_datasets (url_checksums/movielens.txt); None = unknown, the
# file is then fetched unverified with a warning.
_SHA256 = {
    "ml-100k": "50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
    "ml-1m": "a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
    "ml-10m": None,
    "ml-20m": "96f243c338a8665f6bcc89c53edf6ee39162a846940de6b7c8c48aeada765ff3",
    "ml-25m": "8b21cfb7eb1706b4ec0aac894368d90acf26ebdfb6aced3ebd4ad5bd1eb9c6aa",
    "ml-32m": None,
    "ml-latest-small": "696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436",
}
URLS: dict[str, RemoteFile] = {
    variant: RemoteFile(f"{_BASE_URL}/{variant}.zip", sha256, f"{variant}.zip")
    for variant, sha256 in _SHA256.items()
}
VARIANTS = tuple(URLS)
# ratings file of each variant (inside the zip: <top dir>/<file>; ml-10m's top dir is ml-10M100K)
RATINGS_FILE = {
    "ml-100k": "u.data",
    "ml-1m": "ratings.dat",
    "ml-10m": "ratings.dat",
    "ml-20m": "ratings.csv",
    "ml-25m": "ratings.csv",
    "ml-32m": "ratings.csv",
    "ml-latest-small": "ratings.csv",
}
_KNOWN_FILES = ("ratings.csv", "ratings.dat", "u.data")
_CSV_COLUMNS = {"userId": "int64", "movieId": "int64", "rating": "float32", "timestamp": "int64"}
_PLAIN_COLUMNS = {"user": "int64", "item": "int64", "rating": "float32", "timestamp": "int64"}


def read(path: str | os.PathLike, variant: str | None = None) -> Interactions:
    """Read MovieLens ratings from `path`: the ratings file itself (u.data, ratings.dat or
    ratings.csv, format chosen by the name), a directory holding it, or the GroupLens zip.
    `variant` (e.g. "ml-1m") picks the file name to look for in a directory or zip."""
    path = existing_path(path, "movielens", "u.data, ratings.dat, ratings.csv, or a MovieLens zip")
    names = (RATINGS_FILE[_check_variant(variant)],) if variant else _KNOWN_FILES
    if path.is_dir():
        file = TextFile(find_file(path, names, "movielens"))
    elif zipfile.is_zipfile(path):
        file = TextFile(path, zip_member(path, names, "movielens"))
    else:
        file = TextFile(path)
    return _read_ratings(file, name=variant or "movielens")


def load(
    path: str | os.PathLike | None = None,
    variant: str = "ml-1m",
    download: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> Interactions:
    """MovieLens `variant` from `path` when given, else from the cache (`$LINREC_DATA`),
    downloading it first when `download` is True."""
    variant = _check_variant(variant)
    if path is not None:
        return read(path, variant)
    hint = (
        f"linrec data=movielens data.variant={variant} "
        f"data.path=/path/to/{RATINGS_FILE[variant]}"
    )
    root = cached_source(
        URLS[variant], download=download, dataset=f"movielens {variant}", override_hint=hint,
        cache_dir=cache_dir,
    )
    return read(root, variant)


def _check_variant(variant: str) -> str:
    if variant not in URLS:
        raise ConfigError(
            f"data.variant={variant!r} is not a MovieLens variant; "
            f"allowed: {', '.join(VARIANTS)}"
        )
    return variant


def _read_ratings(file: TextFile, name: str) -> Interactions:
    if file.name.endswith(".csv"):
        table = read_table(file, sep=",", columns=_CSV_COLUMNS, header=True)
        columns = [table[c] for c in _CSV_COLUMNS]
    elif file.name.endswith(".dat"):
        table = read_table(file, sep="::", columns=_PLAIN_COLUMNS)
        columns = [table[c] for c in _PLAIN_COLUMNS]
    else:  # u.data and other tab-separated copies
        table = read_table(file, sep="\t", columns=_PLAIN_COLUMNS)
        columns = [table[c] for c in _PLAIN_COLUMNS]
    users, items, ratings, timestamps = columns
    return build_interactions(users, items, ratings, timestamps, name=name)
