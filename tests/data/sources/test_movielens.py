"""The MovieLens reader on small files written by the tests."""

from __future__ import annotations

import hashlib
import io
import zipfile

import numpy as np
import pytest

from linrec.data import download as dl
from linrec.data.sources import (
    movielens,
)
from linrec.errors import ConfigError, DataError, DownloadError
from tests.data.sources.conftest import (
    RATINGS,
    decoded,
    expected_pairs,
    ratings_csv,
    ratings_dat,
    u_data,
    write,
    write_zip,
)


@pytest.mark.parametrize(
    ("file_name", "render"),
    [("u.data", u_data), ("ratings.dat", ratings_dat), ("ratings.csv", ratings_csv)],
)
def test_movielens_formats(tmp_path, file_name, render):
    inter = movielens.read(write(tmp_path / file_name, render()))
    assert decoded(inter) == expected_pairs(RATINGS)
    assert inter.values.dtype == np.float32 and inter.timestamps.dtype == np.int64
    assert list(inter.user_ids) == [1, 2, 7] and list(inter.item_ids) == [10, 12, 31]


def test_movielens_directory_and_zip(tmp_path):
    write(tmp_path / "ml-1m" / "ratings.dat", ratings_dat())
    write(tmp_path / "ml-1m" / "movies.dat", "1::Toy Story (1995)::Animation\n")
    assert decoded(movielens.read(tmp_path / "ml-1m")) == expected_pairs(RATINGS)
    archive = write_zip(tmp_path / "ml-1m.zip", {"ml-1m/movies.dat": "1::Toy::A\n",
                                            "ml-1m/ratings.dat": ratings_dat()})
    assert decoded(movielens.read(archive)) == expected_pairs(RATINGS)
    # ml-100k's zip also holds u1.base etc.; u.data is the full set
    archive = write_zip(tmp_path / "ml-100k.zip", {"ml-100k/u1.base": u_data(RATINGS[:1]),
                                              "ml-100k/u.data": u_data()})
    assert decoded(movielens.read(archive, variant="ml-100k")) == expected_pairs(RATINGS)


def test_movielens_load_from_cache_extracts_once(tmp_path):
    archive = write_zip(tmp_path / "cache" / "downloads" / "ml-10m.zip",
                   {"ml-10M100K/ratings.dat": ratings_dat()})
    inter = movielens.load(variant="ml-10m", cache_dir=tmp_path / "cache")
    assert decoded(inter) == expected_pairs(RATINGS)
    assert (tmp_path / "cache" / "extracted" / "ml-10m" / "ml-10M100K" / "ratings.dat").exists()
    archive.unlink()  # the extracted copy is enough from now on
    loaded = movielens.load(variant="ml-10m", cache_dir=tmp_path / "cache")
    assert decoded(loaded) == expected_pairs(RATINGS)


def test_movielens_download_via_local_server(file_server, tmp_path, monkeypatch):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("ml-latest-small/ratings.csv", ratings_csv())
    file_server.files["ml-latest-small.zip"] = buffer.getvalue()
    sha = hashlib.sha256(buffer.getvalue()).hexdigest()
    monkeypatch.setitem(
        movielens.URLS, "ml-latest-small",
        dl.RemoteFile(file_server.url("ml-latest-small.zip"), sha, "ml-latest-small.zip"),
    )
    inter = movielens.load(variant="ml-latest-small", download=True, cache_dir=tmp_path)
    assert decoded(inter) == expected_pairs(RATINGS)
    assert len(file_server.requests) == 1


def test_movielens_download_failure_names_url_path_and_override(tmp_path, monkeypatch):
    dead_url = "http://127.0.0.1:9/ml-1m.zip"  # port 9 (discard): nothing listens
    monkeypatch.setitem(movielens.URLS, "ml-1m", dl.RemoteFile(dead_url, None, "ml-1m.zip"))
    with pytest.raises(DownloadError) as info:
        movielens.load(variant="ml-1m", download=True, cache_dir=tmp_path)
    message = str(info.value)
    assert dead_url in message and str(tmp_path / "downloads" / "ml-1m.zip") in message
    assert "linrec data=movielens data.variant=ml-1m data.path=" in message


def test_movielens_missing_in_cache_says_where_to_put_it(tmp_path):
    with pytest.raises(DownloadError) as info:
        movielens.load(variant="ml-1m", cache_dir=tmp_path)
    message = str(info.value)
    assert str(tmp_path / "downloads" / "ml-1m.zip") in message
    assert "https://files.grouplens.org/datasets/movielens/ml-1m.zip" in message
    assert "linrec data=movielens data.variant=ml-1m data.path=" in message


def test_movielens_missing_path_and_unknown_variant(tmp_path):
    with pytest.raises(DataError, match=str(tmp_path / "nope.dat")):
        movielens.load(path=tmp_path / "nope.dat")
    with pytest.raises(ConfigError, match="allowed: ml-100k, ml-1m"):
        movielens.load(variant="ml-2m")


def test_movielens_urls_and_checksums():
    for variant, remote in movielens.URLS.items():
        assert remote.url == f"https://files.grouplens.org/datasets/movielens/{variant}.zip"
        assert remote.sha256 is None or len(remote.sha256) == 64


@pytest.mark.parametrize(
    ("file_name", "text", "line", "fragment"),
    [
        ("ratings.dat", "1::10::4::100\n2::11::3\n", 2, "expected 4 fields"),
        ("ratings.dat", "1::10::4::100\n2:11::3::5\n", 2, "expected 4 fields"),
        ("ratings.dat", "1::10::4::100\n\n2::x::3::5\n", 3, "'item' = 'x' is not an integer"),
        ("u.data", "1\t10\t4\t100\n1\t11\t3\t101\t9\n", 2, "expected 4 fields"),
        ("u.data", "1\t10\t4\t100\n1\t11\tnan\t101\n", 2, "'rating' = 'nan' is not a finite"),
        ("ratings.csv", "userId,movieId,rating,timestamp\n1,10,4.5,100\n3,12,,103\n", 3,
         "'rating' is empty"),
        ("ratings.csv", "userId,movieId,rating,timestamp\n1,10,4.5,100\n3,1.5,2,103\n", 3,
         "'movieId' = '1.5' is not an integer"),
    ],
)
def test_movielens_malformed_line(tmp_path, file_name, text, line, fragment):
    path = write(tmp_path / file_name, text)
    with pytest.raises(DataError) as info:
        movielens.read(path)
    message = str(info.value)
    assert message.startswith(f"{path}: line {line}: ")
    assert fragment in message
    bad_line = [ln for ln in text.split("\n")][line - 1]
    assert repr(bad_line) in message


def test_movielens_malformed_line_inside_zip(tmp_path):
    archive = write_zip(tmp_path / "ml-1m.zip", {"ml-1m/ratings.dat": "1::10::4::100\n1::2\n"})
    with pytest.raises(DataError, match=r"ml-1m.zip:ml-1m/ratings.dat: line 2: "):
        movielens.read(archive)


def test_movielens_unknown_csv_column(tmp_path):
    path = write(tmp_path / "ratings.csv", "user,movieId,rating,timestamp\n1,2,3,4\n")
    with pytest.raises(DataError, match=r"no column\(s\) \['userId'\]; the file's columns are "
                                        r"\['user', 'movieId', 'rating', 'timestamp'\]"):
        movielens.read(path)
