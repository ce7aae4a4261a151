"""Million Song Dataset, Echo Nest Taste Profile subset: `train_triplets.txt`
(tab: user song play_count), 48M rows of hex user ids and song ids. Values are play counts."""

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

FILE_NAME = "train_triplets.txt"
URLS: dict[str, RemoteFile] = {
    # checksum unknown: fetched unverified, with a warning
    "taste-profile": RemoteFile(
        "http://millionsongdataset.com/sites/default/files/challenge/train_triplets.txt.zip",
        None,
        "train_triplets.txt.zip",
    ),
}
_COLUMNS = {"user": "str", "song": "str", "play_count": "float32"}


def read(path: str | os.PathLike) -> Interactions:
    """Read `train_triplets.txt` (the file, a directory holding it, or its zip)."""
    path = existing_path(path, "msd", f"{FILE_NAME} (or its zip)")
    if path.is_dir():
        file = TextFile(find_file(path, (FILE_NAME,), "msd"))
    elif zipfile.is_zipfile(path):
        file = TextFile(path, zip_member(path, (FILE_NAME,), "msd"))
    else:
        file = TextFile(path)
    table = read_table(file, sep="\t", columns=_COLUMNS)
    return build_interactions(table["user"], table["song"], table["play_count"], name="msd")


def load(
    path: str | os.PathLike | None = None,
    download: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> Interactions:
    """Taste Profile triplets from `path`, else from the cache (downloading if `download`)."""
    if path is not None:
        return read(path)
    root = cached_source(
        URLS["taste-profile"], download=download, dataset="msd",
        override_hint=f"linrec data=msd data.path=/path/to/{FILE_NAME}",
        cache_dir=cache_dir,
    )
    return read(root)
