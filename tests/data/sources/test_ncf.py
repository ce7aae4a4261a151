"""The NCF-format reader (with its given negatives) on small files written by the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from linrec.data import download as dl
from linrec.data.sources import (
    ncf,
)
from linrec.errors import DataError, DownloadError
from tests.data.sources.conftest import (
    decoded,
    write,
)


def _ncf_files(root: Path, name: str = "ml-1m", timestamps: bool = True) -> None:
    stamp = (lambda t: f"\t{t}") if timestamps else (lambda t: "")
    write(root / f"{name}.train.rating",
           f"0\t1\t5{stamp(100)}\n0\t2\t3{stamp(101)}\n1\t0\t4{stamp(102)}\n2\t2\t1{stamp(9)}\n")
    write(root / f"{name}.test.rating", f"0\t3\t5{stamp(200)}\n1\t2\t4{stamp(201)}\n"
                                          f"2\t0\t2{stamp(202)}\n")
    write(root / f"{name}.test.negative", "(0,3)\t0\t4\t6\n(1,2)\t5\t1\t3\n(2,0)\t1\t3\t4\n")


@pytest.mark.parametrize("timestamps", [True, False])
def test_ncf_files(tmp_path, timestamps):
    _ncf_files(tmp_path, timestamps=timestamps)
    data = ncf.read(tmp_path)
    assert data.name == "ml-1m"
    np.testing.assert_array_equal(data.test_negatives, [[0, 4, 6], [5, 1, 3], [1, 3, 4]])
    assert data.test_negatives.dtype == np.int64
    np.testing.assert_array_equal(data.negative_users, [0, 1, 2])
    assert (data.train.n_users, data.train.n_items) == (3, 7)  # item 6 only among negatives
    assert decoded(data.train) == {
        (0, 1): (5.0, 100 if timestamps else None), (0, 2): (3.0, 101 if timestamps else None),
        (1, 0): (4.0, 102 if timestamps else None), (2, 2): (1.0, 9 if timestamps else None)}
    assert decoded(data.test) == {
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
    write(negative, "(0,3)\t0\t4\t6\n(1,9)\t5\t1\t3\n(2,0)\t1\t3\t4\n")
    with pytest.raises(DataError, match=r"row 2 names \(1,9\)"):
        ncf.read(tmp_path, name="ml-1m")
    write(negative, "(0,3)\t0\t4\t6\n1,2\t5\t1\t3\n(2,0)\t1\t3\t4\n")
    with pytest.raises(DataError, match=f"^{negative}: line 2: expected '\\(user,item\\)'"):
        ncf.read(tmp_path, name="ml-1m")
    write(negative, "(0,3)\t0\t4\t6\n(1,2)\t5\t1\n")
    with pytest.raises(DataError, match=f"^{negative}: line 2: expected 4 fields"):
        ncf.read(tmp_path, name="ml-1m")
    (tmp_path / "ml-1m.test.rating").unlink()
    with pytest.raises(DataError, match=str(tmp_path / "ml-1m.test.rating")):
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
    assert "data.variant=ml-1m" in str(info.value)
