"""Fast delimited-text parsing (pandas' C parser; pyarrow's CSV reader for string ids when it is
installed) whose failures name the file, the 1-based line number and the line's text: when the
fast parser fails or yields a missing value, a slow line-by-line scan finds the first offending
line."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn

import numpy as np
import pandas as pd

from linrec.errors import DataError

# kinds of a column: numpy dtypes, "str" (a pandas Categorical: codes + sorted labels), or
# "auto" (pandas infers the type; only emptiness is checked)
_INT_KINDS = ("int32", "int64")
_FLOAT_KINDS = ("float32", "float64")


@dataclass(frozen=True)
class TextFile:
    """A text file on disk or a member of a zip archive. `label` names it in error messages."""

    path: Path
    member: str | None = None

    @property
    def label(self) -> str:
        return str(self.path) if self.member is None else f"{self.path}:{self.member}"

    @property
    def name(self) -> str:
        return Path(self.member).name if self.member is not None else self.path.name

    @contextlib.contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        """The file's bytes as a binary stream."""
        if self.member is None:
            with open(self.path, "rb") as fh:
                yield fh
            return
        with zipfile.ZipFile(self.path) as zf, zf.open(self.member) as fh:
            yield fh


def read_table(
    file: TextFile,
    *,
    sep: str,
    columns: Mapping[str, str],
    header: bool = False,
) -> dict[str, np.ndarray | pd.Categorical]:
    """Parse a delimited file into {column name: array}.

    header=False: every line has exactly the fields `columns` (in order); sep may be "::".
    header=True: the first line names the columns; `columns` selects some of them by name (an
    unknown one is a DataError listing the file's columns), other columns are ignored.
    columns: name -> kind, a numpy dtype ("int32", "int64", "float32", "float64"), "str"
    (returned as a pandas Categorical) or "auto" (type inferred by pandas). Blank lines are
    skipped. Integer fields must parse as integers, float fields must be finite, str and auto
    fields must be non-empty; the first line that breaks a rule raises DataError with the file,
    the line number and the line.
    """
    names = list(columns)
    fields = _file_columns(file, sep) if header else names
    if header:
        unknown = [name for name in names if name not in fields]
        if unknown:
            raise DataError(
                f"{file.label}: no column(s) {unknown}; the file's columns are {fields}"
            )
    try:
        table = _fast_read(file, sep, columns, header)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError, OverflowError) as exc:
        _raise_first_bad_line(file, sep, fields, columns, header, reason=str(exc))
    if any(_has_missing(table[name], kind) for name, kind in columns.items()):
        _raise_first_bad_line(file, sep, fields, columns, header, reason="a missing value")
    if len(table[names[0]]) == 0:
        raise DataError(f"{file.label}: the file has no data rows")
    return table


def line_of_row(file: TextFile, row: int, header: bool = False) -> tuple[int, str]:
    """(1-based line number, text) of data row `row` (0-based, blank lines not counted), for
    errors found after parsing."""
    with file.open() as fh:
        seen = -1
        for line_no, raw in enumerate(fh, start=1):
            if (header and line_no == 1) or not raw.strip():
                continue
            seen += 1
            if seen == row:
                return line_no, raw.decode("utf-8", errors="replace").rstrip("\r\n")
    raise IndexError(f"{file.label} has no data row {row}")


def count_fields(file: TextFile, sep: str) -> int:
    """Number of `sep`-separated fields on the first non-blank line."""
    with file.open() as fh:
        for raw in fh:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if line.strip():
                return len(line.split(sep))
    raise DataError(f"{file.label}: the file is empty")


def _file_columns(file: TextFile, sep: str) -> list[str]:
    with file.open() as fh:
        first = fh.readline().decode("utf-8", errors="replace").rstrip("\r\n")
    if not first.strip():
        raise DataError(f"{file.label}: line 1 is empty; expected a header naming the columns")
    return _split(first, sep)


def _split(line: str, sep: str) -> list[str]:
    """Fields of one line: csv rules (quotes) for a one-character separator, else plain split."""
    return next(csv.reader([line], delimiter=sep)) if len(sep) == 1 else line.split(sep)


def _fast_read(
    file: TextFile, sep: str, columns: Mapping[str, str], header: bool
) -> dict[str, np.ndarray | pd.Categorical]:
    if "str" in columns.values() and not header and len(sep) == 1 and _has_pyarrow():
        return _arrow_read(file, sep, columns)
    dtypes = {name: kind for name, kind in columns.items() if kind != "auto"}
    options = dict(
        engine="c", dtype=dtypes, keep_default_na=False, na_values=[""], skip_blank_lines=True
    )
    if header:
        options.update(header=0, usecols=list(columns))
        pandas_sep = sep
    elif sep == "::":
        # the C parser takes one-character separators: "a::b" is "a", "", "b" split on ":"
        names = []
        for index, name in enumerate(columns):
            if index:
                names.append(f"_gap{index}")
                dtypes[f"_gap{index}"] = "float32"  # always empty: all NaN
            names.append(name)
        options.update(header=None, names=names, index_col=False)
        pandas_sep = ":"
    else:
        options.update(header=None, names=list(columns), index_col=False)
        pandas_sep = sep
    with file.open() as fh:
        try:
            frame = pd.read_csv(fh, sep=pandas_sep, **options)
        except pd.errors.EmptyDataError as exc:
            raise DataError(f"{file.label}: the file is empty") from exc
    gaps = [name for name in frame.columns if name.startswith("_gap")]
    if any(frame[name].notna().any() for name in gaps):
        raise ValueError("a single ':' where '::' separates fields")
    return {
        name: _categorical(frame[name]) if kind == "str" else frame[name].to_numpy()
        for name, kind in columns.items()
    }


def _categorical(column: pd.Series) -> pd.Categorical:
    codes, labels = pd.factorize(column)
    return _sorted_categorical(codes.astype(np.int64), np.asarray(labels, dtype=str))


def _sorted_categorical(codes: np.ndarray, labels: np.ndarray) -> pd.Categorical:
    """Categorical with lexically sorted categories (= np.unique order); code -1 = missing."""
    order = np.argsort(labels, kind="stable")
    rank = np.empty(len(order) + 1, dtype=np.int64)
    rank[order] = np.arange(len(order))
    rank[-1] = -1  # code -1 indexes the last slot
    return pd.Categorical.from_codes(rank[codes], categories=labels[order], validate=False)


def _has_pyarrow() -> bool:
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


def _arrow_read(
    file: TextFile, sep: str, columns: Mapping[str, str]
) -> dict[str, np.ndarray | pd.Categorical]:
    """pyarrow's multithreaded CSV reader: string ids are dictionary-encoded without one Python
    object per row (about 3x faster than pandas' string columns on MSD-like files)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    types = {name: pa.string() if kind == "str" else pa.from_numpy_dtype(np.dtype(kind))
             for name, kind in columns.items()}
    with file.open() as fh:
        table = pacsv.read_csv(
            fh,
            read_options=pacsv.ReadOptions(column_names=list(columns)),
            parse_options=pacsv.ParseOptions(delimiter=sep),
            convert_options=pacsv.ConvertOptions(
                column_types=types, null_values=[""], strings_can_be_null=True
            ),
        )
    out: dict[str, np.ndarray | pd.Categorical] = {}
    for name, kind in columns.items():
        column = table.column(name)
        if kind != "str":
            out[name] = column.to_numpy()
            continue
        encoded = column.combine_chunks().dictionary_encode()  # null stays null
        labels = encoded.dictionary.to_numpy(zero_copy_only=False).astype(str)
        codes = pc.fill_null(encoded.indices, -1).to_numpy().astype(np.int64)
        del encoded
        out[name] = _sorted_categorical(codes, labels)
    return out


def _has_missing(column: np.ndarray | pd.Categorical, kind: str) -> bool:
    if kind == "str":
        return bool((column.codes < 0).any())
    if kind in _FLOAT_KINDS:
        return not bool(np.isfinite(column).all())
    if kind == "auto":
        return bool(pd.isna(column).any())
    return False


def _raise_first_bad_line(
    file: TextFile,
    sep: str,
    fields: list[str],
    columns: Mapping[str, str],
    header: bool,
    reason: str,
) -> NoReturn:
    """Scan the file line by line and raise DataError at the first line that breaks a rule."""
    kinds = [columns.get(name) for name in fields]
    with file.open() as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
        line_no = 0
        while True:
            line_no += 1
            try:
                raw = text.readline()
            except UnicodeDecodeError as exc:
                raise DataError(f"{file.label}: line {line_no}: not valid UTF-8 ({exc})") from exc
            if not raw:
                break
            line = raw.rstrip("\r\n")
            if (header and line_no == 1) or not line.strip():
                continue
            problem = _line_problem(line, sep, fields, kinds)
            if problem:
                raise DataError(f"{file.label}: line {line_no}: {problem}: {line!r}")
    raise DataError(f"{file.label}: could not parse the file ({reason})")


def _line_problem(line: str, sep: str, fields: list[str], kinds: list[str | None]) -> str | None:
    parts = _split(line, sep)
    if len(parts) != len(fields):
        return (
            f"expected {len(fields)} fields separated by {sep!r} ({', '.join(fields)}), "
            f"found {len(parts)}"
        )
    for name, kind, value in zip(fields, kinds, parts, strict=True):
        if kind is None:
            continue
        if value.strip() == "":
            return f"field {name!r} is empty"
        if kind in _INT_KINDS and not _is_int(value, kind):
            return f"field {name!r} = {value!r} is not an integer of type {kind}"
        if kind in _FLOAT_KINDS and not _is_finite(value):
            return f"field {name!r} = {value!r} is not a finite number"
    return None


def _is_int(value: str, kind: str) -> bool:
    try:
        number = int(value)
    except ValueError:
        return False
    info = np.iinfo(kind)
    return info.min <= number <= info.max


def _is_finite(value: str) -> bool:
    try:
        return math.isfinite(float(value))
    except ValueError:
        return False
