"""Helpers of the source tests: rows shared by the formats, writers of small files, and the
decoded view of an Interactions."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from linrec.data.interactions import Interactions

# (user, item, rating, timestamp) rows shared by the MovieLens formats; (1, 10) appears twice
RATINGS = [(1, 10, 4.0, 978300760), (1, 12, 3.5, 978302109), (2, 10, 5.0, 978301968),
           (7, 31, 1.0, 978300275), (1, 10, 2.0, 978300000)]


def decoded(inter: Interactions) -> dict[tuple, tuple]:
    """{(raw user, raw item): (value, timestamp)} of an Interactions, via its vocabularies."""
    values = inter.values if inter.values is not None else np.ones(inter.n_interactions)
    stamps = inter.timestamps if inter.timestamps is not None else [None] * inter.n_interactions
    return {
        (inter.user_ids[u].item(), inter.item_ids[i].item()): (float(v), t if t is None else int(t))
        for u, i, v, t in zip(inter.users, inter.items, values, stamps, strict=True)
    }


def expected_pairs(rows) -> dict[tuple, tuple]:
    """The same mapping computed from raw rows; duplicates merged (max value, earliest time)."""
    out: dict[tuple, tuple] = {}
    for user, item, value, stamp in rows:
        if (user, item) in out:
            old_value, old_stamp = out[(user, item)]
            value = max(value, old_value)
            stamp = stamp if old_stamp is None else min(stamp, old_stamp)
        out[(user, item)] = (float(value), stamp)
    return out


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_zip(path: Path, members: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


def u_data(rows=RATINGS) -> str:
    return "".join(f"{u}\t{i}\t{r:g}\t{t}\n" for u, i, r, t in rows)


def ratings_dat(rows=RATINGS) -> str:
    return "".join(f"{u}::{i}::{r:g}::{t}\n" for u, i, r, t in rows)


def ratings_csv(rows=RATINGS) -> str:
    return "userId,movieId,rating,timestamp\n" + "".join(
        f"{u},{i},{r:g},{t}\n" for u, i, r, t in rows
    )
