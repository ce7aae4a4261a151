"""Dataset readers on small files written by the tests, the source registry, and the synthetic
generator. Expected values are computed from the rows each test writes."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from linrec.data import download as dl
from linrec.data.interactions import Interactions, PredefinedSplitData
from linrec.data.sources import (
    SOURCES,
    _parsing,
    lightgcn,
    load_source,
    movielens,
    msd,
    ncf,
    netflix,
    source_params,
    synthetic,
    tabular,
)
from linrec.errors import ConfigError, DataError, DownloadError

# (user, item, rating, timestamp) rows shared by the MovieLens formats; (1, 10) appears twice
RATINGS = [(1, 10, 4.0, 978300760), (1, 12, 3.5, 978302109), (2, 10, 5.0, 978301968),
           (7, 31, 1.0, 978300275), (1, 10, 2.0, 978300000)]


def _decoded(inter: Interactions) -> dict[tuple, tuple]:
    """{(raw user, raw item): (value, timestamp)} of an Interactions, via its vocabularies."""
    values = inter.values if inter.values is not None else np.ones(inter.n_interactions)
    stamps = inter.timestamps if inter.timestamps is not None else [None] * inter.n_interactions
    return {
        (inter.user_ids[u].item(), inter.item_ids[i].item()): (float(v), t if t is None else int(t))
        for u, i, v, t in zip(inter.users, inter.items, values, stamps, strict=True)
    }


def _expected(rows) -> dict[tuple, tuple]:
    """The same mapping computed from raw rows; duplicates merged (max value, earliest time)."""
    out: dict[tuple, tuple] = {}
    for user, item, value, stamp in rows:
        if (user, item) in out:
            old_value, old_stamp = out[(user, item)]
            value = max(value, old_value)
            stamp = stamp if old_stamp is None else min(stamp, old_stamp)
        out[(user, item)] = (float(value), stamp)
    return out


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _zip(path: Path, members: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


def _u_data(rows=RATINGS) -> str:
    return "".join(f"{u}\t{i}\t{r:g}\t{t}\n" for u, i, r, t in rows)


def _ratings_dat(rows=RATINGS) -> str:
    return "".join(f"{u}::{i}::{r:g}::{t}\n" for u, i, r, t in rows)


def _ratings_csv(rows=RATINGS) -> str:
    return "userId,movieId,rating,timestamp\n" + "".join(
        f"{u},{i},{r:g},{t}\n" for u, i, r, t in rows
    )


# ------------------------------------------------------------------------------ registry


def test_registry_lists_every_reader():
    assert set(SOURCES) == {"synthetic", "movielens", "netflix", "msd", "lightgcn", "ncf",
                            "tabular"}
    for name in SOURCES:
        assert "path" in source_params(name) or name == "synthetic"


def test_unknown_source_names_the_allowed_ones():
    with pytest.raises(ConfigError, match="known sources: lightgcn, movielens"):
        load_source("movielenz")


def test_unknown_parameter_names_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"\['n_usrs'\].*allowed: \[.*'n_users'"):
        load_source("synthetic", n_usrs=10)


def test_load_source_passes_parameters(tmp_path):
    inter = load_source("synthetic", n_users=40, n_items=30, mean_user_interactions=5, seed=4)
    assert inter.n_users == 40
    data = load_source("movielens", path=_write(tmp_path / "u.data", _u_data()))
    assert _decoded(data) == _expected(RATINGS)


# ------------------------------------------------------------------------------ movielens


@pytest.mark.parametrize(
    ("file_name", "render"),
    [("u.data", _u_data), ("ratings.dat", _ratings_dat), ("ratings.csv", _ratings_csv)],
)
def test_movielens_formats(tmp_path, file_name, render):
    inter = movielens.read(_write(tmp_path / file_name, render()))
    assert _decoded(inter) == _expected(RATINGS)
    assert inter.values.dtype == np.float32 and inter.timestamps.dtype == np.int64
    assert list(inter.user_ids) == [1, 2, 7] and list(inter.item_ids) == [10, 12, 31]


def test_movielens_directory_and_zip(tmp_path):
    _write(tmp_path / "ml-1m" / "ratings.dat", _ratings_dat())
    _write(tmp_path / "ml-1m" / "movies.dat", "1::Toy Story (1995)::Animation\n")
    assert _decoded(movielens.read(tmp_path / "ml-1m")) == _expected(RATINGS)
    archive = _zip(tmp_path / "ml-1m.zip", {"ml-1m/movies.dat": "1::Toy::A\n",
                                            "ml-1m/ratings.dat": _ratings_dat()})
    assert _decoded(movielens.read(archive)) == _expected(RATINGS)
    # ml-100k's zip also holds u1.base etc.; u.data is the full set
    archive = _zip(tmp_path / "ml-100k.zip", {"ml-100k/u1.base": _u_data(RATINGS[:1]),
                                              "ml-100k/u.data": _u_data()})
    assert _decoded(movielens.read(archive, variant="ml-100k")) == _expected(RATINGS)


def test_movielens_load_from_cache_extracts_once(tmp_path):
    archive = _zip(tmp_path / "cache" / "downloads" / "ml-10m.zip",
                   {"ml-10M100K/ratings.dat": _ratings_dat()})
    inter = movielens.load(variant="ml-10m", cache_dir=tmp_path / "cache")
    assert _decoded(inter) == _expected(RATINGS)
    assert (tmp_path / "cache" / "extracted" / "ml-10m" / "ml-10M100K" / "ratings.dat").exists()
    archive.unlink()  # the extracted copy is enough from now on
    assert _decoded(movielens.load(variant="ml-10m", cache_dir=tmp_path / "cache")) == _expected(
        RATINGS
    )


def test_movielens_download_via_local_server(file_server, tmp_path, monkeypatch):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("ml-latest-small/ratings.csv", _ratings_csv())
    file_server.files["ml-latest-small.zip"] = buffer.getvalue()
    sha = hashlib.sha256(buffer.getvalue()).hexdigest()
    monkeypatch.setitem(
        movielens.URLS, "ml-latest-small",
        dl.RemoteFile(file_server.url("ml-latest-small.zip"), sha, "ml-latest-small.zip"),
    )
    inter = movielens.load(variant="ml-latest-small", download=True, cache_dir=tmp_path)
    assert _decoded(inter) == _expected(RATINGS)
    assert len(file_server.requests) == 1


def test_movielens_download_failure_names_url_path_and_override(tmp_path, monkeypatch):
    dead_url = "http://127.0.0.1:9/ml-1m.zip"  # port 9 (discard): nothing listens
    monkeypatch.setitem(movielens.URLS, "ml-1m", dl.RemoteFile(dead_url, None, "ml-1m.zip"))
    with pytest.raises(DownloadError) as info:
        movielens.load(variant="ml-1m", download=True, cache_dir=tmp_path)
    message = str(info.value)
    assert dead_url in message and str(tmp_path / "downloads" / "ml-1m.zip") in message
    assert "linrec data=movielens data.source.variant=ml-1m data.source.path=" in message


def test_movielens_missing_in_cache_says_where_to_put_it(tmp_path):
    with pytest.raises(DownloadError) as info:
        movielens.load(variant="ml-1m", cache_dir=tmp_path)
    message = str(info.value)
    assert str(tmp_path / "downloads" / "ml-1m.zip") in message
    assert "https://files.grouplens.org/datasets/movielens/ml-1m.zip" in message
    assert "linrec data=movielens data.source.variant=ml-1m data.source.path=" in message


def test_movielens_missing_path_and_unknown_variant(tmp_path):
    with pytest.raises(DownloadError, match=str(tmp_path / "nope.dat")):
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
    path = _write(tmp_path / file_name, text)
    with pytest.raises(DataError) as info:
        movielens.read(path)
    message = str(info.value)
    assert message.startswith(f"{path}: line {line}: ")
    assert fragment in message
    bad_line = [ln for ln in text.split("\n")][line - 1]
    assert repr(bad_line) in message


def test_movielens_malformed_line_inside_zip(tmp_path):
    archive = _zip(tmp_path / "ml-1m.zip", {"ml-1m/ratings.dat": "1::10::4::100\n1::2\n"})
    with pytest.raises(DataError, match=r"ml-1m.zip:ml-1m/ratings.dat: line 2: "):
        movielens.read(archive)


def test_movielens_unknown_csv_column(tmp_path):
    path = _write(tmp_path / "ratings.csv", "user,movieId,rating,timestamp\n1,2,3,4\n")
    with pytest.raises(DataError, match=r"no column\(s\) \['userId'\]; the file's columns are "
                                        r"\['user', 'movieId', 'rating', 'timestamp'\]"):
        movielens.read(path)


# ------------------------------------------------------------------------------ netflix

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
        _write(tmp_path / "training_set" / f"mv_{movie:07d}.txt", _netflix_block(movie))
    inter = netflix.read(tmp_path / "training_set")
    assert _decoded(inter) == _expected(_netflix_rows())
    assert inter.timestamps.dtype == np.int64


def test_netflix_combined_files_match_the_directory_layout(tmp_path):
    _write(tmp_path / "combined_data_1.txt", _netflix_block(1) + _netflix_block(2))
    _write(tmp_path / "combined_data_2.txt", _netflix_block(17770))
    _write(tmp_path / "movie_titles.csv", "1,2003,Dinosaur Planet\n")
    assert _decoded(netflix.read(tmp_path)) == _expected(_netflix_rows())
    single = netflix.read(tmp_path / "combined_data_1.txt")
    assert _decoded(single) == _expected([r for r in _netflix_rows() if r[1] in (1, 2)])


def test_netflix_batches_split_mid_movie(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    blocks = {m: [(int(c), int(r), f"2005-01-0{1 + k % 9}")
                  for k, (c, r) in enumerate(zip(rng.integers(1, 10**6, 40),
                                                 rng.integers(1, 6, 40), strict=True))]
              for m in (3, 4, 5)}
    text = "".join(
        f"{m}:\n" + "".join(f"{c},{r},{d}\n" for c, r, d in b) for m, b in blocks.items()
    )
    path = _write(tmp_path / "combined_data_1.txt", text)
    whole = netflix.read(path)
    monkeypatch.setattr(netflix, "_BATCH_BYTES", 97)  # many batches, most without a header
    pieces = netflix.read(path)
    for field in ("users", "items", "user_ids", "item_ids", "values", "timestamps"):
        np.testing.assert_array_equal(getattr(pieces, field), getattr(whole, field))
    rows = [(c, m, float(r), int(dt.datetime.fromisoformat(d).replace(
        tzinfo=dt.timezone.utc).timestamp())) for m, b in blocks.items() for c, r, d in b]
    assert _decoded(whole) == _expected(rows)


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
    path = _write(tmp_path / "combined_data_1.txt", text)
    with pytest.raises(DataError) as info:
        netflix.read(path)
    assert str(info.value).startswith(f"{path}: line {line}: ")
    assert fragment in str(info.value)


def test_netflix_malformed_line_names_the_movie_file(tmp_path):
    _write(tmp_path / "training_set" / "mv_0000001.txt", _netflix_block(1))
    bad = _write(tmp_path / "training_set" / "mv_0000002.txt", "2:\n5,4,2005-01-01\n6,x,2005\n")
    with pytest.raises(DataError, match=f"^{bad}: line 3: "):
        netflix.read(tmp_path / "training_set")


def test_netflix_not_in_cache(tmp_path):
    with pytest.raises(DownloadError) as info:
        netflix.load(cache_dir=tmp_path)
    assert str(tmp_path / "netflix") in str(info.value)
    assert "data.source.path=" in str(info.value)
    _write(tmp_path / "netflix" / "combined_data_1.txt", _netflix_block(1))
    assert netflix.load(cache_dir=tmp_path).n_interactions == 2


# ------------------------------------------------------------------------------ msd

MSD_ROWS = [("b80344d063b5ccb3212f76538f3d9e43d87dca9e", "SOAKIMP12A8C130995", 1),
            ("b80344d063b5ccb3212f76538f3d9e43d87dca9e", "SOBBMDR12A8C13253B", 2),
            ("85c1f87fea955d09b4bec2e36aee110927aedf9a", "SOAKIMP12A8C130995", 7),
            ("4bd49bfc8b3d4bbd1b4e2aef4b5fda1a09a7c4e8", "SOZZZZZ12A8C130999", 19)]


def _triplets(rows=MSD_ROWS) -> str:
    return "".join(f"{u}\t{s}\t{c}\n" for u, s, c in rows)


@pytest.fixture(params=["pyarrow", "pandas"])
def string_reader(request, monkeypatch):
    """Run a test with pyarrow's CSV reader for string ids, and with the pandas-only path."""
    if request.param == "pyarrow":
        pytest.importorskip("pyarrow")
    else:
        monkeypatch.setattr(_parsing, "_has_pyarrow", lambda: False)
    return request.param


def test_msd_triplets_file_and_zip(tmp_path, string_reader):
    expected = _expected([(u, s, float(c), None) for u, s, c in MSD_ROWS])
    inter = msd.read(_write(tmp_path / "train_triplets.txt", _triplets()))
    assert _decoded(inter) == expected
    assert list(inter.user_ids) == sorted({u for u, _, _ in MSD_ROWS})  # raw-id order
    assert list(inter.item_ids) == sorted({s for _, s, _ in MSD_ROWS})
    archive = _zip(tmp_path / "train_triplets.txt.zip", {"train_triplets.txt": _triplets()})
    assert _decoded(msd.read(archive)) == expected


def test_msd_malformed_line_and_missing_file(tmp_path, string_reader):
    path = _write(tmp_path / "train_triplets.txt", _triplets() + "abc\tSOX\n")
    with pytest.raises(DataError, match=f"^{path}: line 5: expected 3 fields"):
        msd.read(path)
    path = _write(tmp_path / "train_triplets.txt", _triplets() + "\n" + _triplets()[:-1] + "x\n")
    with pytest.raises(DataError, match=f"^{path}: line 9: field 'play_count' = '19x' is not a"):
        msd.read(path)
    with pytest.raises(DownloadError, match=str(tmp_path / "downloads" / "train_triplets")):
        msd.load(cache_dir=tmp_path)


# ------------------------------------------------------------------------------ lightgcn


def test_lightgcn_identity_vocabulary(tmp_path):
    _write(tmp_path / "train.txt", "0 1 2 3\n1\n2 0 0 5\n")  # user 1 has no items; 0 repeated
    _write(tmp_path / "test.txt", "0 4\n1 2\n\n3 1 6\n")
    data = lightgcn.read(tmp_path)
    assert isinstance(data, PredefinedSplitData)
    expected_train = np.zeros((4, 7))
    expected_train[0, [1, 2, 3]] = expected_train[2, [0, 5]] = 1
    expected_test = np.zeros((4, 7))
    expected_test[0, 4] = expected_test[1, 2] = expected_test[3, [1, 6]] = 1
    np.testing.assert_array_equal(data.train.to_csr().toarray(), expected_train)
    np.testing.assert_array_equal(data.test.to_csr().toarray(), expected_test)
    np.testing.assert_array_equal(data.train.user_ids, np.arange(4))
    np.testing.assert_array_equal(data.test.item_ids, np.arange(7))


def test_lightgcn_malformed_and_missing(tmp_path):
    _write(tmp_path / "train.txt", "0 1 2\n1 3 x4\n")
    _write(tmp_path / "test.txt", "0 4\n")
    with pytest.raises(DataError, match=r"train.txt: line 2: 'x4' is not an integer id"):
        lightgcn.read(tmp_path)
    _write(tmp_path / "train.txt", "0 1 2\n1 -3\n")
    with pytest.raises(DataError, match=r"train.txt: line 2: ids must be >= 0"):
        lightgcn.read(tmp_path)
    with pytest.raises(DownloadError, match=str(tmp_path / "empty")):
        lightgcn.read(tmp_path / "empty")
    with pytest.raises(DownloadError) as info:
        lightgcn.load(variant="yelp2018", cache_dir=tmp_path)
    assert str(tmp_path / "downloads" / "lightgcn-yelp2018-train.txt") in str(info.value)
    with pytest.raises(ConfigError, match="gowalla, yelp2018, amazon-book"):
        lightgcn.load(variant="pinterest")


def test_lightgcn_download_via_local_server(file_server, tmp_path, monkeypatch):
    file_server.files["g/train.txt"] = b"0 1\n1 0 2\n"
    file_server.files["g/test.txt"] = b"0 2\n1 1\n"
    monkeypatch.setitem(lightgcn.URLS, "gowalla", {
        part: dl.RemoteFile(file_server.url(f"g/{part}.txt"), None, f"lg-{part}.txt")
        for part in ("train", "test")
    })
    data = lightgcn.load(variant="gowalla", download=True, cache_dir=tmp_path)
    assert data.train.to_csr().toarray().tolist() == [[0, 1, 0], [1, 0, 1]]
    assert data.test.to_csr().toarray().tolist() == [[0, 0, 1], [0, 1, 0]]


# ------------------------------------------------------------------------------ ncf


def _ncf_files(root: Path, name: str = "ml-1m", timestamps: bool = True) -> None:
    stamp = (lambda t: f"\t{t}") if timestamps else (lambda t: "")
    _write(root / f"{name}.train.rating",
           f"0\t1\t5{stamp(100)}\n0\t2\t3{stamp(101)}\n1\t0\t4{stamp(102)}\n2\t2\t1{stamp(9)}\n")
    _write(root / f"{name}.test.rating", f"0\t3\t5{stamp(200)}\n1\t2\t4{stamp(201)}\n"
                                          f"2\t0\t2{stamp(202)}\n")
    _write(root / f"{name}.test.negative", "(0,3)\t0\t4\t6\n(1,2)\t5\t1\t3\n(2,0)\t1\t3\t4\n")


@pytest.mark.parametrize("timestamps", [True, False])
def test_ncf_files(tmp_path, timestamps):
    _ncf_files(tmp_path, timestamps=timestamps)
    data = ncf.read(tmp_path)
    assert data.name == "ml-1m"
    np.testing.assert_array_equal(data.test_negatives, [[0, 4, 6], [5, 1, 3], [1, 3, 4]])
    assert data.test_negatives.dtype == np.int64
    np.testing.assert_array_equal(data.negative_users, [0, 1, 2])
    assert (data.train.n_users, data.train.n_items) == (3, 7)  # item 6 only among negatives
    assert _decoded(data.train) == {
        (0, 1): (5.0, 100 if timestamps else None), (0, 2): (3.0, 101 if timestamps else None),
        (1, 0): (4.0, 102 if timestamps else None), (2, 2): (1.0, 9 if timestamps else None)}
    assert _decoded(data.test) == {
        (0, 3): (5.0, 200 if timestamps else None), (1, 2): (4.0, 201 if timestamps else None),
        (2, 0): (2.0, 202 if timestamps else None)}
    # the prefix and a single file name the same set
    for path in (tmp_path / "ml-1m", tmp_path / "ml-1m.test.negative"):
        np.testing.assert_array_equal(ncf.read(path).test_negatives, data.test_negatives)


def test_ncf_errors(tmp_path):
    _ncf_files(tmp_path)
    _ncf_files(tmp_path, name="pinterest-20")
    with pytest.raises(DataError, match="holds 2 '\\*.train.rating' sets"):
        ncf.read(tmp_path)
    assert ncf.load(path=tmp_path, variant="pinterest-20").name == "pinterest-20"
    negative = tmp_path / "ml-1m.test.negative"
    _write(negative, "(0,3)\t0\t4\t6\n(1,9)\t5\t1\t3\n(2,0)\t1\t3\t4\n")
    with pytest.raises(DataError, match=r"row 2 names \(1,9\)"):
        ncf.read(tmp_path, name="ml-1m")
    _write(negative, "(0,3)\t0\t4\t6\n1,2\t5\t1\t3\n(2,0)\t1\t3\t4\n")
    with pytest.raises(DataError, match=f"^{negative}: line 2: expected '\\(user,item\\)'"):
        ncf.read(tmp_path, name="ml-1m")
    _write(negative, "(0,3)\t0\t4\t6\n(1,2)\t5\t1\n")
    with pytest.raises(DataError, match=f"^{negative}: line 2: expected 4 fields"):
        ncf.read(tmp_path, name="ml-1m")
    (tmp_path / "ml-1m.test.rating").unlink()
    with pytest.raises(DownloadError, match=str(tmp_path / "ml-1m.test.rating")):
        ncf.read(tmp_path / "ml-1m")


def test_ncf_download_via_local_server(file_server, tmp_path, monkeypatch):
    _ncf_files(tmp_path / "src")
    remotes = {}
    for suffix in ncf.SUFFIXES:
        file_server.files[f"ml-1m.{suffix}"] = (tmp_path / "src" / f"ml-1m.{suffix}").read_bytes()
        remotes[suffix] = dl.RemoteFile(file_server.url(f"ml-1m.{suffix}"), None, f"n.{suffix}")
    monkeypatch.setitem(ncf.URLS, "ml-1m", remotes)
    data = ncf.load(variant="ml-1m", download=True, cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(data.test_negatives, ncf.read(tmp_path / "src").test_negatives)
    assert len(file_server.requests) == 3


def test_ncf_not_in_cache(tmp_path):
    with pytest.raises(DownloadError) as info:
        ncf.load(cache_dir=tmp_path)
    assert str(tmp_path / "downloads" / "ncf-ml-1m.train.rating") in str(info.value)
    assert "data.source.variant=ml-1m" in str(info.value)


# ------------------------------------------------------------------------------ tabular


def test_tabular_csv_with_string_ids_and_dates(tmp_path):
    path = _write(tmp_path / "events.csv",
                  "who,what,score,when,extra\nann,x1,4.5,2020-01-01,q\nbob,x2,3,2020-01-02,q\n"
                  "ann,x2,1,2021-03-04T05:06:07,z\n")
    inter = tabular.read(path, user_col="who", item_col="what", rating_col="score",
                         timestamp_col="when")
    stamp = lambda s: int(dt.datetime.fromisoformat(s).replace(  # noqa: E731
        tzinfo=dt.timezone.utc).timestamp())
    assert _decoded(inter) == {("ann", "x1"): (4.5, stamp("2020-01-01")),
                               ("bob", "x2"): (3.0, stamp("2020-01-02")),
                               ("ann", "x2"): (1.0, stamp("2021-03-04T05:06:07"))}
    assert list(inter.user_ids) == ["ann", "bob"]


def test_tabular_tsv_integers_without_rating(tmp_path):
    path = _write(tmp_path / "events.tsv", "u\ti\tt\n3\t10\t100\n1\t10\t50\n3\t11\t70\n")
    inter = tabular.read(path, user_col="u", item_col="i", timestamp_col="t")
    assert inter.values is None
    assert _decoded(inter) == {(3, 10): (1.0, 100), (1, 10): (1.0, 50), (3, 11): (1.0, 70)}
    assert inter.user_ids.dtype.kind == "i"


def test_tabular_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "events.parquet"
    pd.DataFrame({"u": ["a", "b", "a"], "i": [5, 6, 6], "r": [1.0, 2.0, 3.0],
                  "t": pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-03"])}).to_parquet(path)
    inter = tabular.read(path, "u", "i", rating_col="r", timestamp_col="t")
    day = 86_400
    assert _decoded(inter) == {("a", 5): (1.0, 18262 * day), ("b", 6): (2.0, 18263 * day),
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
    path = _write(tmp_path / "events.csv", "u,i,r\n1,2,3\n")
    with pytest.raises(DataError, match=r"no column\(s\) \['item'\]; the file's columns are "
                                        r"\['u', 'i', 'r'\]"):
        tabular.read(path, "u", "item")
    bad = _write(tmp_path / "bad.csv", "u,i,r\n1,2,3\n4,,5\n")
    with pytest.raises(DataError, match=f"^{bad}: line 3: field 'i' is empty"):
        tabular.read(bad, "u", "i", rating_col="r")
    dates = _write(tmp_path / "dates.csv", "u,i,t\n1,2,2020-01-01\n1,3,soon\n")
    with pytest.raises(DataError, match=r"line 3 \('1,3,soon'\): column 't' = 'soon' is not"):
        tabular.read(dates, "u", "i", timestamp_col="t")
    with pytest.raises(ConfigError, match="set data.source.sep"):
        tabular.read(_write(tmp_path / "events.txt", "u i\n1 2\n"), "u", "i")
    assert tabular.read(tmp_path / "events.txt", "u", "i", sep=" ").n_interactions == 1
    tab_path = _write(tmp_path / "events.dat", "u\ti\n1\t2\n3\t2\n")
    assert tabular.read(tab_path, "u", "i", sep="\\t").n_interactions == 2  # "\t" from a config
    with pytest.raises(ConfigError, match="one-character separator"):
        tabular.read(tab_path, "u", "i", sep="::")
    with pytest.raises(ConfigError, match="data.source.path is required"):
        tabular.load()


# ------------------------------------------------------------------------------ synthetic


@pytest.fixture(scope="module")
def default_synthetic() -> tuple[Interactions, float]:
    """The default synthetic dataset and the CPU seconds its generation took."""
    start = time.process_time()
    inter = synthetic.load()
    return inter, time.process_time() - start


def test_synthetic_defaults_size_and_speed(default_synthetic):
    inter, cpu_seconds = default_synthetic
    assert inter.n_users == 6000 and 1900 <= inter.n_items <= 2000
    assert 150_000 <= inter.n_interactions <= 250_000
    assert np.bincount(inter.users).min() >= 3  # every user keeps targets after a split
    assert inter.values is None and inter.timestamps.dtype == np.int64
    assert cpu_seconds < 5  # ~0.3 s on an idle core; generous for a loaded CI machine


def test_synthetic_is_deterministic_per_seed():
    params = dict(n_users=300, n_items=200, mean_user_interactions=12)
    first, again = synthetic.load(seed=7, **params), synthetic.load(seed=7, **params)
    other = synthetic.load(seed=8, **params)
    for field in ("users", "items", "user_ids", "item_ids", "timestamps"):
        np.testing.assert_array_equal(getattr(first, field), getattr(again, field))
    assert first.n_interactions != other.n_interactions or not np.array_equal(
        first.items, other.items)


def test_synthetic_popularity_is_heavy_tailed(default_synthetic):
    inter, _ = default_synthetic
    counts = np.sort(np.bincount(inter.items, minlength=inter.n_items))[::-1]
    top_decile_share = counts[: len(counts) // 10].sum() / counts.sum()
    assert top_decile_share > 0.35  # uniform popularity would give ~0.10
    # log-log slope of count vs popularity rank over the head is close to -exponent
    ranks = np.arange(1, 201)
    slope = np.polyfit(np.log(ranks), np.log(counts[:200]), 1)[0]
    assert -1.3 < slope < -0.5


def test_synthetic_user_activity_mean_and_bounds():
    inter = synthetic.load(n_users=4000, n_items=1000, mean_user_interactions=20,
                           activity_sigma=0.5, min_user_interactions=5,
                           max_user_interactions=120, seed=2)
    per_user = np.bincount(inter.users)
    assert per_user.min() >= 5 and per_user.max() <= 120
    assert abs(per_user.mean() - 20) < 1.0


def test_gumbel_top_k_matches_successive_sampling_probabilities():
    rng = np.random.default_rng(11)
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1], dtype=np.float32))
    n_rows = 200_000
    counts = np.full(n_rows, 2)
    items, rows = synthetic._gumbel_top_k(rng, np.tile(logits, (n_rows, 1)), counts)
    np.testing.assert_array_equal(np.bincount(rows), counts)
    assert len(np.unique(rows * 4 + items)) == len(items)  # without replacement
    p = np.exp(logits.astype(np.float64))
    # P(i in a 2-draw successive sample) = p_i + sum_{j != i} p_j * p_i / (1 - p_j)
    inclusion = np.array([p[i] + sum(p[j] * p[i] / (1 - p[j]) for j in range(4) if j != i)
                          for i in range(4)])
    observed = np.bincount(items, minlength=4) / n_rows
    np.testing.assert_allclose(observed, inclusion, atol=0.005)
    # the first draw (column order is the draw order) follows p itself
    first = items[::2]
    np.testing.assert_allclose(np.bincount(first, minlength=4) / n_rows, p, atol=0.005)


def test_synthetic_rejects_bad_parameters():
    with pytest.raises(ConfigError, match="data.source.n_items=1 is out of range"):
        synthetic.load(n_items=1)
    with pytest.raises(ConfigError, match="max_user_interactions=500"):
        synthetic.load(n_items=100, max_user_interactions=500)


@pytest.mark.parametrize(
    ("params", "match"),
    [  # these were TypeError/ValueError tracebacks from a command-line typo
        ({"n_users": "abc"}, r"data.source.n_users='abc' must be an integer"),
        ({"rank": 2.5}, r"data.source.rank=2.5 must be an integer"),
        ({"seed": "x"}, r"data.source.seed='x' must be an integer"),
        ({"seed": -1}, r"data.source.seed=-1 is out of range"),
        ({"max_user_interactions": "abc"}, r"data.source.max_user_interactions='abc' must be"),
        ({"mean_user_interactions": "abc"}, r"mean_user_interactions='abc' must be a finite"),
        ({"preference_strength": float("nan")}, r"preference_strength=nan must be a finite"),
    ],
)
def test_synthetic_rejects_mistyped_parameters(params, match):
    with pytest.raises(ConfigError, match=match):
        synthetic.load(**params)


def test_synthetic_has_learnable_structure():
    """Brute-force EASE (closed form, lambda=100) beats MostPopular by a wide margin on a
    random leave-one-out split: the low-rank preferences carry signal beyond popularity."""
    inter = synthetic.load(n_users=1500, n_items=400, seed=3)
    matrix = inter.to_csr()
    rng = np.random.default_rng(1)
    lengths = np.diff(matrix.indptr)
    held_pos = matrix.indptr[:-1] + (rng.random(matrix.shape[0]) * lengths).astype(int)
    held = matrix.indices[held_pos]
    keep = np.ones(matrix.nnz, dtype=bool)
    keep[held_pos] = False
    rows = np.repeat(np.arange(matrix.shape[0]), lengths)
    train = sp.csr_matrix((matrix.data[keep], (rows[keep], matrix.indices[keep])),
                          shape=matrix.shape).toarray().astype(np.float64)

    def hit_rate_at_20(scores: np.ndarray) -> float:
        scores = np.where(train > 0, -np.inf, scores)
        target = scores[np.arange(len(held)), held]
        return float(np.mean(1 + (scores > target[:, None]).sum(axis=1) <= 20))

    gram = train.T @ train
    inverse = np.linalg.inv(gram + 100.0 * np.eye(gram.shape[0]))
    weights = -inverse / np.diag(inverse)
    np.fill_diagonal(weights, 0.0)
    ease = hit_rate_at_20(train @ weights)
    most_popular = hit_rate_at_20(np.tile(train.sum(axis=0), (train.shape[0], 1)))
    assert ease > 1.5 * most_popular
    assert most_popular > 0.05  # popularity is informative too, just less
