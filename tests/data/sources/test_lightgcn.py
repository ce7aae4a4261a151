"""The LightGCN-format reader on small files written by the tests."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.data import download as dl
from linrec.data.interactions import PredefinedSplitData
from linrec.data.sources import (
    lightgcn,
)
from linrec.errors import ConfigError, DataError, DownloadError
from tests.data.sources.conftest import (
    write,
)


def test_lightgcn_identity_vocabulary(tmp_path):
    write(tmp_path / "train.txt", "0 1 2 3\n1\n2 0 0 5\n")  # user 1 has no items; 0 repeated
    write(tmp_path / "test.txt", "0 4\n1 2\n\n3 1 6\n")
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
    write(tmp_path / "train.txt", "0 1 2\n1 3 x4\n")
    write(tmp_path / "test.txt", "0 4\n")
    with pytest.raises(DataError, match=r"train.txt: line 2: 'x4' is not an integer id"):
        lightgcn.read(tmp_path)
    write(tmp_path / "train.txt", "0 1 2\n1 -3\n")
    with pytest.raises(DataError, match=r"train.txt: line 2: ids must be >= 0"):
        lightgcn.read(tmp_path)
    with pytest.raises(DataError, match=str(tmp_path / "empty")):
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


def test_lightgcn_gowalla_download_is_checked_against_the_published_checksum(
        file_server, tmp_path, monkeypatch):
    """The published Gowalla files have known SHA-256s: other bytes at the URL are refused and
    not kept in the cache."""
    published = lightgcn.URLS["gowalla"]
    assert all(len(published[part].sha256 or "") == 64 for part in ("train", "test"))
    file_server.files["g/train.txt"] = b"0 1\n1 0 2\n"
    file_server.files["g/test.txt"] = b"0 2\n1 1\n"
    monkeypatch.setitem(lightgcn.URLS, "gowalla", {
        part: dl.RemoteFile(file_server.url(f"g/{part}.txt"), published[part].sha256,
                            f"lg-{part}.txt")
        for part in ("train", "test")
    })
    with pytest.raises(DownloadError, match="checksum mismatch for lg-train.txt"):
        lightgcn.load(variant="gowalla", download=True, cache_dir=tmp_path)
    assert not (tmp_path / "downloads" / "lg-train.txt").exists()
