"""The CSV / TSV / Parquet reader on small files written by the tests."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from linrec.data.sources import (
    tabular,
)
from linrec.errors import ConfigError, DataError
from tests.data.sources.conftest import (
    decoded,
    write,
)


def test_tabular_csv_with_string_ids_and_dates(tmp_path):
    path = write(tmp_path / "events.csv",
                  "who,what,score,when,extra\nann,x1,4.5,2020-01-01,q\nbob,x2,3,2020-01-02,q\n"
                  "ann,x2,1,2021-03-04T05:06:07,z\n")
    inter = tabular.read(path, user_col="who", item_col="what", rating_col="score",
                         timestamp_col="when")
    stamp = lambda s: int(dt.datetime.fromisoformat(s).replace(  # noqa: E731
        tzinfo=dt.timezone.utc).timestamp())
    assert decoded(inter) == {("ann", "x1"): (4.5, stamp("2020-01-01")),
                               ("bob", "x2"): (3.0, stamp("2020-01-02")),
                               ("ann", "x2"): (1.0, stamp("2021-03-04T05:06:07"))}
    assert list(inter.user_ids) == ["ann", "bob"]


def test_tabular_tsv_integers_without_rating(tmp_path):
    path = write(tmp_path / "events.tsv", "u\ti\tt\n3\t10\t100\n1\t10\t50\n3\t11\t70\n")
    inter = tabular.read(path, user_col="u", item_col="i", timestamp_col="t")
    assert inter.values is None
    assert decoded(inter) == {(3, 10): (1.0, 100), (1, 10): (1.0, 50), (3, 11): (1.0, 70)}
    assert inter.user_ids.dtype.kind == "i"


def test_tabular_parquet(tmp_path):
    path = tmp_path / "events.parquet"
    pd.DataFrame({"u": ["a", "b", "a"], "i": [5, 6, 6], "r": [1.0, 2.0, 3.0],
                  "t": pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-03"])}).to_parquet(path)
    inter = tabular.read(path, "u", "i", rating_col="r", timestamp_col="t")
    day = 86_400
    assert decoded(inter) == {("a", 5): (1.0, 18262 * day), ("b", 6): (2.0, 18263 * day),
                               ("a", 6): (3.0, 18264 * day)}
    with pytest.raises(DataError, match=r"no column\(s\) \['item'\]; the file's columns are "
                                        r"\['u', 'i', 'r', 't'\]"):
        tabular.read(path, "u", "item")


def test_tabular_parquet_without_pyarrow(tmp_path, monkeypatch):
    path = tmp_path / "events.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(__import__("sys").modules, "pyarrow.parquet", None)
    with pytest.raises(DataError, match="needs pyarrow, which is not installed"):
        tabular.read(path, "u", "i")


def test_tabular_errors(tmp_path):
    path = write(tmp_path / "events.csv", "u,i,r\n1,2,3\n")
    with pytest.raises(DataError, match=r"no column\(s\) \['item'\]; the file's columns are "
                                        r"\['u', 'i', 'r'\]"):
        tabular.read(path, "u", "item")
    bad = write(tmp_path / "bad.csv", "u,i,r\n1,2,3\n4,,5\n")
    with pytest.raises(DataError, match=f"^{bad}: line 3: field 'i' is empty"):
        tabular.read(bad, "u", "i", rating_col="r")
    dates = write(tmp_path / "dates.csv", "u,i,t\n1,2,2020-01-01\n1,3,soon\n")
    with pytest.raises(DataError, match=r"line 3 \('1,3,soon'\): column 't' = 'soon' is not"):
        tabular.read(dates, "u", "i", timestamp_col="t")
    with pytest.raises(ConfigError, match="set data.source.sep"):
        tabular.read(write(tmp_path / "events.txt", "u i\n1 2\n"), "u", "i")
    assert tabular.read(tmp_path / "events.txt", "u", "i", sep=" ").n_interactions == 1
    tab_path = write(tmp_path / "events.dat", "u\ti\n1\t2\n3\t2\n")
    assert tabular.read(tab_path, "u", "i", sep="\\t").n_interactions == 2  # "\t" from a config
    with pytest.raises(ConfigError, match="one-character separator"):
        tabular.read(tab_path, "u", "i", sep="::")
    with pytest.raises(ConfigError, match="data.path is required"):
        tabular.load()


@pytest.mark.parametrize("column, line, value, what", [
    ("100\nabc\n200", 3, "abc", "is not a number"),   # epoch seconds with one text value
    ("abc\n100\n200", 2, "abc", "is not a number"),   # whatever the order
    ("100\n200\n1.5", 4, "1.5", "is not a whole number of seconds"),
    ("2020-01-01\nnotadate\n2020-02-03", 3, "notadate", "is not a date"),
])
def test_a_bad_timestamp_is_named_at_its_own_line_without_warnings(tmp_path, column, line,
                                                                   value, what):
    import warnings

    rows = "".join(f"u{k},i{k},{v}\n" for k, v in enumerate(column.split("\n")))
    path = write(tmp_path / "ts.csv", "u,i,t\n" + rows)
    shown = rows.splitlines()[line - 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no library warning reaches the user
        with pytest.raises(DataError, match=rf"line {line} \('{shown}'\): column 't' = "
                                            rf"'?{value}'? {what}"):
            tabular.read(path, "u", "i", timestamp_col="t")
