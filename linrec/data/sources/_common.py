"""Helpers shared by the readers: raw columns -> Interactions, identity vocabularies for
pre-split datasets, and finding a dataset's file (given path, cache, or download)."""

from __future__ import annotations

import dataclasses
import os
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd

from linrec.data import download as dl
from linrec.data.interactions import Interactions
from linrec.errors import ConfigError, DataError

IdColumn = np.ndarray | pd.Categorical | pd.Series


def build_interactions(
    users: IdColumn,
    items: IdColumn,
    values: np.ndarray | None = None,
    timestamps: np.ndarray | None = None,
    name: str = "interactions",
) -> Interactions:
    """`Interactions.from_raw` for columns as the parsers return them. String id columns
    (categoricals, object/str arrays) go through as integer codes in lexical order and the
    vocabularies are relabelled with the strings, which avoids building millions of Python
    strings (MSD has 48M rows of hex ids)."""
    user_codes, user_labels = _codes(users)
    item_codes, item_labels = _codes(items)
    inter = Interactions.from_raw(user_codes, item_codes, values, timestamps, name=name)
    if user_labels is None and item_labels is None:
        return inter
    return dataclasses.replace(
        inter,
        user_ids=inter.user_ids if user_labels is None else user_labels[inter.user_ids],
        item_ids=inter.item_ids if item_labels is None else item_labels[inter.item_ids],
    )


def _codes(column: IdColumn) -> tuple[np.ndarray, np.ndarray | None]:
    """Integer ids pass through; string ids -> (int64 codes in sorted label order, labels)."""
    if isinstance(column, pd.Series):
        column = column.array
    if isinstance(column, pd.Categorical):
        categories = np.asarray(column.categories, dtype=str)
        order = np.argsort(categories, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        codes = column.codes.astype(np.int64)
        # a missing id keeps code -1, which from_raw rejects as a negative id
        return np.where(codes >= 0, rank[np.maximum(codes, 0)], -1), categories[order]
    array = np.asarray(column)
    if array.dtype.kind in "OUS":
        codes, labels = pd.factorize(array, sort=True)
        return codes.astype(np.int64), np.asarray(labels, dtype=str)
    return array, None


def with_identity_vocabulary(inter: Interactions, n_users: int, n_items: int) -> Interactions:
    """Re-index `inter` (integer raw ids) onto ids 0..n_users-1 / 0..n_items-1 used as is,
    so that a pre-split dataset's train and test share one vocabulary (ids = the file's ints)."""
    return Interactions(
        inter.user_ids[inter.users].astype(np.int32),
        inter.item_ids[inter.items].astype(np.int32),
        np.arange(n_users, dtype=np.int64),
        np.arange(n_items, dtype=np.int64),
        inter.values,
        inter.timestamps,
        inter.name,
    )


def existing_path(path: str | os.PathLike, dataset: str, expected: str) -> Path:
    """`path` as a Path; DataError naming it when it does not exist (a local file the user
    pointed at: nothing to download)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(
            f"{dataset}: {path} does not exist; data.path must point at {expected}"
        )
    return path


def find_file(root: Path, names: tuple[str, ...], dataset: str) -> Path:
    """The first file named like one of `names` (glob patterns) under directory `root`, searched
    recursively, shallowest first; DataError listing what was looked for otherwise."""
    candidates = sorted(
        {p for name in names for p in root.rglob(name) if p.is_file()},
        key=lambda p: (len(p.relative_to(root).parts), str(p)),
    )
    if not candidates:
        raise DataError(f"{dataset}: no file named {' or '.join(names)} under {root}")
    return candidates[0]


def zip_member(archive: Path, names: tuple[str, ...], dataset: str) -> str:
    """The shallowest member of zip `archive` whose file name is one of `names`."""
    with zipfile.ZipFile(archive) as zf:
        members = [m for m in zf.namelist() if PurePosixPath(m).name in names]
    if not members:
        raise DataError(f"{dataset}: {archive} holds no {' or '.join(names)}")
    return min(members, key=lambda m: (m.count("/"), m))


def cached_source(
    remote: dl.RemoteFile,
    *,
    download: bool,
    dataset: str,
    override_hint: str,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """The local copy of `remote`: for an archive the directory it was extracted to (extracting
    it from `downloads/` when needed), else the downloaded file itself. Fetches when `download`
    is True; otherwise a missing file is a DownloadError saying where to put it."""
    if remote.filename.lower().endswith((".zip", ".tar.gz", ".tgz")):
        extracted = dl.extracted_path(remote.filename, cache_dir)
        if extracted.is_dir():
            return extracted
        archive = dl.locate(
            remote, download=download, dataset=dataset, override_hint=override_hint,
            cache_dir=cache_dir,
        )
        return dl.extract(archive, cache_dir)
    return dl.locate(
        remote, download=download, dataset=dataset, override_hint=override_hint,
        cache_dir=cache_dir,
    )


def locate_variant(
    urls: dict[str, dict[str, dl.RemoteFile]],
    variant: str,
    *,
    source: str,
    download: bool,
    override_hint: str,
    cache_dir: str | os.PathLike | None = None,
) -> dict[str, Path]:
    """Every file of a published split `variant` (part -> cached path), fetched when `download`;
    an unknown variant is a ConfigError naming the allowed ones."""
    check_variant(urls, variant, source)
    return {
        part: dl.locate(remote, download=download, dataset=f"{source} {variant}",
                        override_hint=override_hint, cache_dir=cache_dir)
        for part, remote in urls[variant].items()
    }


def check_variant(urls: dict[str, dict[str, dl.RemoteFile]], variant: str, source: str) -> None:
    """ConfigError unless `variant` is one of the published variants of `source`."""
    if variant not in urls:
        raise ConfigError(f"data.variant={variant!r} is not a {source} dataset; "
                          f"allowed: {', '.join(urls)}")
