"""Any CSV / TSV / Parquet file of events with a header, mapped by column names:
`user_col`, `item_col` (integers or strings), optional `rating_col` (numbers) and
`timestamp_col` (integers, or dates that pandas can parse -> int64 Unix seconds)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from linrec.data.interactions import Interactions
from linrec.data.sources._common import build_interactions, existing_path
from linrec.data.sources._parsing import TextFile, line_of_row, read_table
from linrec.errors import ConfigError, DataError

SEPARATORS = {".csv": ",", ".tsv": "\t", ".tab": "\t"}
_SEPARATOR_NAMES = {"\\t": "\t", "tab": "\t", "comma": ",", "space": " "}  # config-friendly
PARQUET_SUFFIXES = (".parquet", ".pq")


def read(
    path: str | os.PathLike,
    user_col: str,
    item_col: str,
    rating_col: str | None = None,
    timestamp_col: str | None = None,
    sep: str | None = None,
) -> Interactions:
    """Read the mapped columns of a CSV/TSV (sep from the extension unless given) or Parquet
    file; an unknown column is a DataError listing the file's columns."""
    path = existing_path(path, "tabular", "a .csv, .tsv or .parquet file")
    wanted = {user_col: "auto", item_col: "auto"}
    if rating_col is not None:
        wanted[rating_col] = "float32"
    if timestamp_col is not None:
        wanted[timestamp_col] = "auto"
    if path.suffix.lower() in PARQUET_SUFFIXES:
        table, where = _read_parquet(path, wanted), _parquet_row_label(path)
    else:
        file = TextFile(path)
        table = read_table(file, sep=_separator(path, sep), columns=wanted, header=True)
        where = _text_row_label(file)
    timestamps = None
    if timestamp_col is not None:
        timestamps = _timestamps(np.asarray(table[timestamp_col]), timestamp_col, where)
    return build_interactions(
        np.asarray(table[user_col]),
        np.asarray(table[item_col]),
        None if rating_col is None else np.asarray(table[rating_col]),
        timestamps,
        name=path.stem,
    )


def load(
    path: str | os.PathLike | None = None,
    user_col: str = "user",
    item_col: str = "item",
    rating_col: str | None = None,
    timestamp_col: str | None = None,
    sep: str | None = None,
) -> Interactions:
    """`read` with a ConfigError when no path is given (there is nothing to download)."""
    if path is None:
        raise ConfigError(
            "data.path is required for the tabular source, e.g. linrec data=tabular "
            "data.path=/path/to/events.csv data.source.user_col=user "
            "data.source.item_col=item"
        )
    return read(path, user_col, item_col, rating_col, timestamp_col, sep)


def _separator(path: Path, sep: str | None) -> str:
    if sep:
        sep = _SEPARATOR_NAMES.get(sep, sep)
        if len(sep) != 1:
            raise ConfigError(
                f"data.source.sep={sep!r}: the tabular source takes a one-character separator "
                f"(or one of {sorted(_SEPARATOR_NAMES)})"
            )
        return sep
    try:
        return SEPARATORS[path.suffix.lower()]
    except KeyError:
        raise ConfigError(
            f"tabular: cannot tell the separator of {path.name} from its extension "
            f"(known: {', '.join(SEPARATORS)}, {', '.join(PARQUET_SUFFIXES)}); "
            f"set data.source.sep"
        ) from None


def _read_parquet(path: Path, wanted: dict[str, str]) -> dict[str, np.ndarray]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            f"tabular: reading {path} needs pyarrow, which is not installed; install it "
            f"(pip install 'linrec[parquet]' or pip install pyarrow) or convert the file to CSV"
        ) from None
    try:
        names = pq.read_schema(path).names
        unknown = [c for c in wanted if c not in names]
        if unknown:
            raise DataError(f"{path}: no column(s) {unknown}; the file's columns are {names}")
        frame = pd.read_parquet(path, columns=list(wanted))
    except (OSError, ValueError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"{path}: not a readable Parquet file ({exc})") from exc
    for column, kind in wanted.items():
        values = frame[column]
        bad = values.isna().to_numpy()
        if kind == "float32":
            bad = bad | ~np.isfinite(values.to_numpy(dtype=np.float64, na_value=np.nan))
        if bad.any():
            raise DataError(
                f"{path}: row {int(np.argmax(bad))} (0-based): column {column!r} holds "
                f"{values.iloc[int(np.argmax(bad))]!r}"
            )
    return {column: frame[column].to_numpy() for column in wanted}


RowLabel = Callable[[int], str]


def _text_row_label(file: TextFile) -> RowLabel:
    def label(row: int) -> str:
        line_no, text = line_of_row(file, row, header=True)
        return f"{file.label}: line {line_no} ({text!r})"

    return label


def _parquet_row_label(path: Path) -> RowLabel:
    return lambda row: f"{path}: row {row} (0-based)"


def _timestamps(column: np.ndarray, name: str, where: RowLabel) -> np.ndarray:
    """Integer timestamps pass through; a column of text is read as numbers (Unix seconds)
    when most of its values are numbers, else as dates -> Unix seconds. A value that cannot be
    read the column's way is named at its own row (the first such), and no library warning
    reaches the user."""
    if column.dtype.kind in "iuM":
        return column
    if column.dtype.kind == "f":
        return _whole(column, name, where)
    series = pd.Series(column)
    numbers = pd.to_numeric(series, errors="coerce")
    if numbers.notna().sum() * 2 > len(series):  # a column of numbers with some text in it
        bad = numbers.isna().to_numpy()
        if bad.any():
            row = int(np.argmax(bad))
            raise DataError(f"{where(row)}: column {name!r} = {column[row]!r} is not a number "
                            "(the column's other values are numbers: Unix timestamps)")
        return _whole(numbers.to_numpy(dtype=np.float64), name, where)
    with warnings.catch_warnings():  # pandas' notes on how it infers a format
        warnings.simplefilter("ignore")
        for date_format in (None, "mixed"):  # one inferred format (fast), else per element
            try:
                dates = pd.to_datetime(series, utc=True, format=date_format)
                return dates.dt.tz_localize(None).to_numpy().astype("datetime64[s]")
            except (ValueError, TypeError):
                continue
        for row, value in enumerate(column):  # only to name the first bad row
            try:
                pd.to_datetime(value, utc=True)
            except (ValueError, TypeError) as exc:
                raise DataError(
                    f"{where(row)}: column {name!r} = {value!r} is not a date ({exc})"
                ) from None
    raise DataError(f"column {name!r}: could not parse the dates")


def _whole(column: np.ndarray, name: str, where: RowLabel) -> np.ndarray:
    """Float timestamps that are whole numbers as int64 (DataError at the first that is not)."""
    whole = np.isfinite(column) & (column == np.floor(column))
    if not whole.all():
        row = int(np.argmax(~whole))
        raise DataError(f"{where(row)}: column {name!r} = {float(column[row])!r} is not a "
                        "whole number of seconds")
    return column.astype(np.int64)
