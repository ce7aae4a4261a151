"""The Netflix Prize reader (both layouts) on small files written by the tests."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from linrec.data.sources import (
    netflix,
)
from linrec.errors import DataError, DownloadError
from tests.data.sources.conftest import (
    decoded,
    expected_pairs,
    write,
)

NETFLIX = {  # movie -> [(customer, rating, date)]
    1: [(1488844, 3, "2005-09-06"), (822109, 5, "2005-05-13")],
    2: [(2059652, 4, "2005-09-05"), (1488844, 1, "2004-02-29")],
    17770: [(822109, 2, "1999-12-31")],
}


def _netflix_rows():
    return [
        (customer, movie, float(rating),
         int(dt.datetime.fromisoformat(date).replace(tzinfo=dt.timezone.utc).timestamp()))
        for movie, block in NETFLIX.items()
        for customer, rating, date in block
    ]


def _netflix_block(movie: int) -> str:
    return f"{movie}:\n" + "".join(f"{c},{r},{d}\n" for c, r, d in NETFLIX[movie])


def test_netflix_training_set_directory(tmp_path):
    for movie in NETFLIX:
        write(tmp_path / "training_set" / f"mv_{movie:07d}.txt", _netflix_block(movie))
    inter = netflix.read(tmp_path / "training_set")
    assert decoded(inter) == expected_pairs(_netflix_rows())
    assert inter.timestamps.dtype == np.int64


def test_netflix_combined_files_match_the_directory_layout(tmp_path):
    write(tmp_path / "combined_data_1.txt", _netflix_block(1) + _netflix_block(2))
    write(tmp_path / "combined_data_2.txt", _netflix_block(17770))
    write(tmp_path / "movie_titles.csv", "1,2003,Dinosaur Planet\n")
    assert decoded(netflix.read(tmp_path)) == expected_pairs(_netflix_rows())
    single = netflix.read(tmp_path / "combined_data_1.txt")
    assert decoded(single) == expected_pairs([r for r in _netflix_rows() if r[1] in (1, 2)])


def test_netflix_batches_split_mid_movie(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    blocks = {m: [(int(c), int(r), f"2005-01-0{1 + k % 9}")
                  for k, (c, r) in enumerate(zip(rng.integers(1, 10**6, 40),
                                                 rng.integers(1, 6, 40), strict=True))]
              for m in (3, 4, 5)}
    text = "".join(
        f"{m}:\n" + "".join(f"{c},{r},{d}\n" for c, r, d in b) for m, b in blocks.items()
    )
    path = write(tmp_path / "combined_data_1.txt", text)
    whole = netflix.read(path)
    monkeypatch.setattr(netflix, "_BATCH_BYTES", 97)  # many batches, most without a header
    pieces = netflix.read(path)
    for field in ("users", "items", "user_ids", "item_ids", "values", "timestamps"):
        np.testing.assert_array_equal(getattr(pieces, field), getattr(whole, field))
    rows = [(c, m, float(r), int(dt.datetime.fromisoformat(d).replace(
        tzinfo=dt.timezone.utc).timestamp())) for m, b in blocks.items() for c, r, d in b]
    assert decoded(whole) == expected_pairs(rows)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("1:\n10,3,2005-09-06\n11,3\n", 3, "expected 'customerId,rating,YYYY-MM-DD'"),
        ("1:\n10,3,2005-09-06\n\n11,4,2005-02-30\n", 4, "invalid date"),
        ("1:\n10,3,2005-09-06\n2;\n", 3, "expected 'customerId"),
        ("10,3,2005-09-06\n", 1, "expected a movie header"),
    ],
)
def test_netflix_malformed_line(tmp_path, text, line, fragment):
    path = write(tmp_path / "combined_data_1.txt", text)
    with pytest.raises(DataError) as info:
        netflix.read(path)
    assert str(info.value).startswith(f"{path}: line {line}: ")
    assert fragment in str(info.value)


def test_netflix_malformed_line_names_the_movie_file(tmp_path):
    write(tmp_path / "training_set" / "mv_0000001.txt", _netflix_block(1))
    bad = write(tmp_path / "training_set" / "mv_0000002.txt", "2:\n5,4,2005-01-01\n6,x,2005\n")
    with pytest.raises(DataError, match=f"^{bad}: line 3: "):
        netflix.read(tmp_path / "training_set")


def test_netflix_not_in_cache(tmp_path):
    with pytest.raises(DownloadError) as info:
        netflix.load(cache_dir=tmp_path)
    assert str(tmp_path / "netflix") in str(info.value)
    assert "data.path=" in str(info.value)
    write(tmp_path / "netflix" / "combined_data_1.txt", _netflix_block(1))
    assert netflix.load(cache_dir=tmp_path).n_interactions == 2
