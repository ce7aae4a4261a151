"""Netflix Prize training ratings, in either published layout:
- the original `training_set/mv_XXXXXXX.txt` files (line 1 `movieId:`, then
  `customerId,rating,date` lines);
- Kaggle's `combined_data_{1..4}.txt`: the same blocks concatenated.
Dates (YYYY-MM-DD) become int64 Unix seconds (midnight UTC); values are the 1-5 ratings.
There is no public download URL: the files must be placed by hand (see `load`)."""

from __future__ import annotations

import datetime as dt
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from linrec.data.download import data_home
from linrec.data.interactions import Interactions
from linrec.data.sources._common import build_interactions, existing_path
from linrec.errors import DataError, DownloadError

URLS: dict = {}  # no public host; Kaggle's "netflix-prize-data" needs a login
_BATCH_BYTES = 64 << 20
_MARKER = re.compile(r"^\s*(\d+):\s*$")
_RATING = re.compile(r"^\s*(\d+),(\d+),(\d{4})-(\d{2})-(\d{2})\s*$")
_NAMES = ["id", "rating", "year", "month", "day"]


@dataclass(frozen=True)
class _Segment:
    """A run of whole lines from one file; `first_line` is the 1-based number of its first."""

    path: Path
    first_line: int
    data: bytes


def read(path: str | os.PathLike) -> Interactions:
    """Read Netflix Prize ratings from a `training_set` directory of mv_*.txt files, a directory
    of combined_data_*.txt files, or one such file."""
    files = _rating_files(existing_path(path, "netflix", "training_set/ or combined_data_*.txt"))
    parts = []
    movie: int | None = None  # the movie whose block a split file continues
    for batch, continues in _batches(files):
        part, movie = _parse_batch(batch, movie if continues else None)
        parts.append(part)
    customers, movies, ratings, timestamps = (np.concatenate(c) for c in zip(*parts, strict=True))
    return build_interactions(customers, movies, ratings, timestamps, name="netflix")


def load(
    path: str | os.PathLike | None = None,
    download: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> Interactions:
    """Netflix Prize ratings from `path`, else from `<$LINREC_DATA>/netflix/` (placed by hand)."""
    if path is not None:
        return read(path)
    home = data_home(cache_dir) / "netflix"
    if home.is_dir() and (any(home.rglob("mv_*.txt")) or any(home.rglob("combined_data_*.txt"))):
        return read(home)
    why = "linrec cannot download it (no public URL). " if download else ""
    raise DownloadError(
        f"netflix: the Netflix Prize data is not in the cache. {why}Put the training set "
        f"(training_set/mv_*.txt from the original archive, or Kaggle's "
        f"combined_data_1..4.txt) under {home}, or point at it: "
        f"linrec data=netflix data.path=/path/to/training_set"
    )


def _rating_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    for pattern in ("mv_*.txt", "combined_data_*.txt"):
        files = sorted(path.rglob(pattern))
        if files:
            return files
    raise DataError(
        f"netflix: {path} holds no mv_*.txt nor combined_data_*.txt files"
        + (" (extract training_set.tar first)" if any(path.rglob("training_set.tar")) else "")
    )


def _segments(path: Path) -> Iterator[_Segment]:
    """Whole-line pieces of at most ~_BATCH_BYTES of one file; the first must start a movie."""
    line_no = 1
    with open(path, "rb") as fh:
        first = fh.readline()
        while first and not first.strip():
            line_no += 1
            first = fh.readline()
        if not _MARKER.match(first.decode("utf-8", errors="replace")):
            raise DataError(
                f"{path}: line {line_no}: expected a movie header 'movieId:', got "
                f"{first.decode('utf-8', errors='replace').rstrip()!r}"
            )
        rest = b""
        while True:
            block = fh.read(_BATCH_BYTES)
            data = first + rest + block
            first = b""
            if not block:
                if data.strip():
                    yield _Segment(path, line_no, data if data.endswith(b"\n") else data + b"\n")
                return
            cut = data.rfind(b"\n") + 1
            data, rest = data[:cut], data[cut:]
            if data:
                yield _Segment(path, line_no, data)
                line_no += data.count(b"\n")


def _batches(files: list[Path]) -> Iterator[tuple[list[_Segment], bool]]:
    """Groups of segments of about _BATCH_BYTES; the flag says whether the batch continues the
    previous batch's movie (a big file split mid-movie)."""
    batch: list[_Segment] = []
    size = 0
    continues = False
    for path in files:
        for segment in _segments(path):
            if batch and size + len(segment.data) > _BATCH_BYTES:
                yield batch, continues
                continues = segment.first_line > 1
                batch, size = [], 0
            batch.append(segment)
            size += len(segment.data)
    if batch:
        yield batch, continues


def _parse_batch(
    batch: list[_Segment], carried: int | None
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], int | None]:
    """((customers int32, movies int32, ratings float32, timestamps int64), last movie id) of a
    batch; `carried` is the movie of the ratings before the batch's first header."""
    raw = b"".join(s.data for s in batch)
    # one C-parser pass: "2005-09-06" -> "2005,09,06"; a header "123:" -> "123,-1,0,0,0"
    text = raw.replace(b"-", b",").replace(b":", b",-1,0,0,0")
    try:
        frame = pd.read_csv(
            io.BytesIO(text), header=None, names=_NAMES, dtype="int64", engine="c",
            index_col=False, skip_blank_lines=True,
        )
    except (ValueError, pd.errors.ParserError) as exc:
        _raise_first_bad_line(batch, str(exc))
    ids, rating, year, month, day = (frame[c].to_numpy() for c in _NAMES)
    is_header = rating == -1
    header_rows = np.flatnonzero(is_header)
    movie_of_row = np.cumsum(is_header) - 1
    if len(movie_of_row) and movie_of_row[0] < 0 and carried is None:
        _raise_first_bad_line(batch, "ratings before the first movie header")
    movies = np.full(len(ids), -1 if carried is None else carried, dtype=np.int64)
    if len(header_rows):
        in_block = movie_of_row >= 0
        movies[in_block] = ids[header_rows][movie_of_row[in_block]]
    keep = ~is_header
    timestamps = _dates_to_seconds(year[keep], month[keep], day[keep])
    if timestamps is None:
        _raise_first_bad_line(batch, "an invalid date")
    last_movie = int(ids[header_rows[-1]]) if len(header_rows) else carried
    columns = (
        ids[keep].astype(np.int32),
        movies[keep].astype(np.int32),
        rating[keep].astype(np.float32),
        timestamps,
    )
    return columns, last_movie


def _dates_to_seconds(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray | None:
    """int64 Unix seconds of each (year, month, day) at 00:00 UTC; None if a date is invalid."""
    if len(year) and (month.min() < 1 or month.max() > 12 or day.min() < 1 or day.max() > 31):
        return None
    months = (year - 1970).astype("datetime64[Y]").astype("datetime64[M]") + (month - 1)
    days = months.astype("datetime64[D]") + (day - 1)
    if (days.astype("datetime64[M]") != months).any():  # e.g. 2005-02-30
        return None
    return days.astype("datetime64[s]").astype(np.int64)


def _raise_first_bad_line(batch: list[_Segment], reason: str) -> None:
    for segment in batch:
        for offset, raw in enumerate(segment.data.split(b"\n")[:-1]):
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            if not line.strip() or _MARKER.match(line):
                continue
            match = _RATING.match(line)
            problem = None
            if match is None:
                problem = "expected 'customerId,rating,YYYY-MM-DD' or 'movieId:'"
            else:
                try:
                    dt.date(*(int(g) for g in match.groups()[2:]))
                except ValueError as exc:
                    problem = f"invalid date ({exc})"
            if problem:
                raise DataError(
                    f"{segment.path}: line {segment.first_line + offset}: {problem}: {line!r}"
                )
    raise DataError(f"netflix: could not parse {batch[0].path} ({reason})")
