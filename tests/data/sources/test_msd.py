"""The Million Song Dataset (Taste Profile) reader on small files written by the tests."""

from __future__ import annotations

import pytest

from linrec.data.sources import (
    _parsing,
    msd,
)
from linrec.errors import DataError, DownloadError
from tests.data.sources.conftest import (
    decoded,
    expected_pairs,
    write,
    write_zip,
)

MSD_ROWS = [("b80344d063b5ccb3212f76538f3d9e43d87dca9e", "SOAKIMP12A8C130995", 1),
            ("b80344d063b5ccb3212f76538f3d9e43d87dca9e", "SOBBMDR12A8C13253B", 2),
            ("85c1f87fea955d09b4bec2e36aee110927aedf9a", "SOAKIMP12A8C130995", 7),
            ("4bd49bfc8b3d4bbd1b4e2aef4b5fda1a09a7c4e8", "SOZZZZZ12A8C130999", 19)]


def _triplets(rows=MSD_ROWS) -> str:
    return "".join(f"{u}\t{s}\t{c}\n" for u, s, c in rows)


@pytest.fixture(params=["pyarrow", "pandas"])
def string_reader(request, monkeypatch):
    """Run a test with pyarrow's CSV reader for string ids, and with the pandas-only path."""
    if request.param == "pandas":  # pyarrow is in the test extra: its path always runs
        monkeypatch.setattr(_parsing, "_has_pyarrow", lambda: False)
    return request.param


def test_msd_triplets_file_and_zip(tmp_path, string_reader):
    expected = expected_pairs([(u, s, float(c), None) for u, s, c in MSD_ROWS])
    inter = msd.read(write(tmp_path / "train_triplets.txt", _triplets()))
    assert decoded(inter) == expected
    assert list(inter.user_ids) == sorted({u for u, _, _ in MSD_ROWS})  # raw-id order
    assert list(inter.item_ids) == sorted({s for _, s, _ in MSD_ROWS})
    archive = write_zip(tmp_path / "train_triplets.txt.zip", {"train_triplets.txt": _triplets()})
    assert decoded(msd.read(archive)) == expected


def test_msd_malformed_line_and_missing_file(tmp_path, string_reader):
    path = write(tmp_path / "train_triplets.txt", _triplets() + "abc\tSOX\n")
    with pytest.raises(DataError, match=f"^{path}: line 5: expected 3 fields"):
        msd.read(path)
    path = write(tmp_path / "train_triplets.txt", _triplets() + "\n" + _triplets()[:-1] + "x\n")
    with pytest.raises(DataError, match=f"^{path}: line 9: field 'play_count' = '19x' is not a"):
        msd.read(path)
    with pytest.raises(DownloadError, match=str(tmp_path / "downloads" / "train_triplets")):
        msd.load(cache_dir=tmp_path)
