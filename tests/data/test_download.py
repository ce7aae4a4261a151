"""linrec.data.download against a local HTTP server on 127.0.0.1 (see conftest.file_server)."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import socket
import tarfile
import zipfile
from pathlib import Path

import pytest

from linrec.data import download as dl
from linrec.errors import ConfigError, DownloadError

PAYLOAD = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4 bytes: more than one read chunk
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture
def served(file_server):
    file_server.files["data/file.bin"] = PAYLOAD
    return file_server


def test_fetch_downloads_verifies_and_caches(served, linrec_data_home):
    path = dl.fetch(served.url("data/file.bin"), PAYLOAD_SHA, "file.bin")
    assert path == linrec_data_home / "downloads" / "file.bin"
    assert path.read_bytes() == PAYLOAD
    assert not path.with_name("file.bin.part").exists()
    assert served.requests == [("data/file.bin", None)]
    # a second call finds the verified file and makes no request
    assert dl.fetch(served.url("data/file.bin"), PAYLOAD_SHA, "file.bin") == path
    assert len(served.requests) == 1


def test_fetch_resumes_an_existing_part_with_a_range_request(served, tmp_path):
    part = tmp_path / "downloads" / "file.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(PAYLOAD[:1000])
    path = dl.fetch(served.url("data/file.bin"), PAYLOAD_SHA, "file.bin", cache_dir=tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert served.requests == [("data/file.bin", "bytes=1000-")]
    assert not part.exists()


def test_interrupted_download_keeps_part_and_next_fetch_resumes(served, tmp_path):
    served.drop_after["data/file.bin"] = 300_000
    url = served.url("data/file.bin")
    with pytest.raises(DownloadError) as info:
        dl.fetch(url, PAYLOAD_SHA, "file.bin", cache_dir=tmp_path)
    part = tmp_path / "downloads" / "file.bin.part"
    assert part.stat().st_size == 300_000
    assert url in str(info.value) and str(tmp_path / "downloads" / "file.bin") in str(info.value)
    path = dl.fetch(url, PAYLOAD_SHA, "file.bin", cache_dir=tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert served.requests[-1] == ("data/file.bin", "bytes=300000-")


def test_complete_part_answered_416_is_verified_and_kept(served, tmp_path):
    part = tmp_path / "downloads" / "file.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(PAYLOAD)
    path = dl.fetch(served.url("data/file.bin"), PAYLOAD_SHA, "file.bin", cache_dir=tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert served.requests == [("data/file.bin", f"bytes={len(PAYLOAD)}-")]


def test_server_ignoring_range_restarts_from_zero(served, tmp_path):
    served.ignore_range = True
    part = tmp_path / "downloads" / "file.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"garbage that must not stay in front")
    path = dl.fetch(served.url("data/file.bin"), PAYLOAD_SHA, "file.bin", cache_dir=tmp_path)
    assert path.read_bytes() == PAYLOAD


def test_checksum_mismatch_removes_the_file(served, tmp_path):
    wrong = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(DownloadError, match="checksum mismatch") as info:
        dl.fetch(served.url("data/file.bin"), wrong, "file.bin", cache_dir=tmp_path)
    assert PAYLOAD_SHA in str(info.value) and wrong in str(info.value)
    assert list((tmp_path / "downloads").glob("file.bin*")) == [
        tmp_path / "downloads" / "file.bin.lock"
    ]


def test_unknown_checksum_warns_and_keeps_the_file(served, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="linrec.data.download"):
        path = dl.fetch(served.url("data/file.bin"), None, "file.bin", cache_dir=tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert "unverified" in caplog.text and PAYLOAD_SHA in caplog.text


def test_offline_error_says_what_to_download_and_where(tmp_path):
    with socket.socket() as sock:  # a port on 127.0.0.1 that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/ml-1m.zip"
    with pytest.raises(DownloadError) as info:
        dl.fetch(url, None, "ml-1m.zip", cache_dir=tmp_path, timeout=5)
    message = str(info.value)
    assert url in message
    assert str(tmp_path / "downloads" / "ml-1m.zip") in message
    assert not (tmp_path / "downloads" / "ml-1m.zip").exists()


def test_http_error_is_a_download_error_with_the_hint(file_server, tmp_path):
    with pytest.raises(DownloadError, match="404") as info:
        dl.fetch(file_server.url("missing.zip"), None, "missing.zip", cache_dir=tmp_path,
                 hint="linrec data=x data.source.path=/your/copy")
    assert str(info.value).endswith("Alternatively: linrec data=x data.source.path=/your/copy")


def test_existing_file_with_wrong_checksum_is_reported_not_deleted(tmp_path):
    target = tmp_path / "downloads" / "file.bin"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not the published file")
    with pytest.raises(DownloadError, match="Delete") as info:
        dl.fetch("http://127.0.0.1:9/file.bin", PAYLOAD_SHA, "file.bin", cache_dir=tmp_path)
    assert str(target) in str(info.value)
    assert target.exists()


def test_checksum_stamp_skips_rehashing_until_the_file_changes(served, tmp_path, monkeypatch):
    path = dl.fetch(served.url("data/file.bin"), PAYLOAD_SHA, "file.bin", cache_dir=tmp_path)
    calls = []
    monkeypatch.setattr(dl, "sha256_of", lambda p: calls.append(p) or "0" * 64)
    dl.fetch(served.url("data/file.bin"), PAYLOAD_SHA, "file.bin", cache_dir=tmp_path)
    assert calls == []
    os.utime(path, ns=(1, 1))  # the file changed on disk: hash it again
    with pytest.raises(DownloadError):
        dl.fetch(served.url("data/file.bin"), PAYLOAD_SHA, "file.bin", cache_dir=tmp_path)
    assert calls == [path]


def test_progress_bar_on_a_terminal(served, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(dl.sys.stderr, "isatty", lambda: True, raising=False)
    path = dl.fetch(served.url("data/file.bin"), PAYLOAD_SHA, "file.bin", cache_dir=tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert "file.bin" in capsys.readouterr().err  # tqdm's label


def test_data_home_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("LINREC_DATA", str(tmp_path / "env"))
    assert dl.data_home() == tmp_path / "env"
    assert dl.data_home(tmp_path / "explicit") == tmp_path / "explicit"
    monkeypatch.delenv("LINREC_DATA")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert dl.data_home() == tmp_path / "home" / ".cache" / "linrec"


def test_locate_without_download_says_where_to_put_the_file(tmp_path):
    remote = dl.RemoteFile("https://example.org/x.zip", None, "x.zip")
    with pytest.raises(DownloadError) as info:
        dl.locate(remote, download=False, dataset="x", override_hint="linrec data=x",
                  cache_dir=tmp_path)
    message = str(info.value)
    assert remote.url in message
    assert str(tmp_path / "downloads" / "x.zip") in message
    assert "linrec data=x" in message and "data.download=true" in message


def test_locate_rejects_a_non_boolean_download_flag(tmp_path):
    """download='abc' from the command line used to be truthy and start a download."""
    remote = dl.RemoteFile("https://example.org/x.zip", None, "x.zip")
    with pytest.raises(ConfigError, match="data.download must be true or false, got 'no'"):
        dl.locate(remote, download="no", dataset="x", override_hint="", cache_dir=tmp_path)
    assert not (tmp_path / "downloads").exists()


def test_locate_downloads_when_asked(served, tmp_path):
    remote = dl.RemoteFile(served.url("data/file.bin"), PAYLOAD_SHA, "file.bin")
    path = dl.locate(remote, download=True, dataset="x", override_hint="", cache_dir=tmp_path)
    assert path.read_bytes() == PAYLOAD


def _zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def _tar_gz_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("archive_name", "make"), [("set.zip", _zip_bytes), ("set.tar.gz", _tar_gz_bytes)]
)
def test_extract_archive_into_the_cache(tmp_path, archive_name, make):
    members = {"set/a.txt": b"alpha", "set/sub/b.txt": b"beta"}
    archive = tmp_path / archive_name
    archive.write_bytes(make(members))
    root = dl.extract(archive, cache_dir=tmp_path / "cache")
    assert root == tmp_path / "cache" / "extracted" / "set"
    for name, data in members.items():
        assert (root / name).read_bytes() == data
    # no temporary directory is left next to it, and a second call reuses the result
    assert [p.name for p in root.parent.iterdir()] == ["set"]
    (root / "set" / "a.txt").write_bytes(b"changed")
    assert dl.extract(archive, cache_dir=tmp_path / "cache") == root
    assert (root / "set" / "a.txt").read_bytes() == b"changed"


def test_extract_refuses_members_outside_the_target(tmp_path):
    archive = tmp_path / "evil.zip"
    archive.write_bytes(_zip_bytes({"../outside.txt": b"x"}))
    with pytest.raises(DownloadError, match="outside"):
        dl.extract(archive, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / "extracted" / "evil").exists()
    assert not (tmp_path / "cache" / "outside.txt").exists()
    assert list((tmp_path / "cache" / "extracted").iterdir()) == []


def test_extract_corrupt_archive_is_a_download_error(tmp_path):
    archive = tmp_path / "broken.zip"
    archive.write_bytes(b"PK\x03\x04 definitely not a zip")
    with pytest.raises(DownloadError, match="broken.zip"):
        dl.extract(archive, cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache" / "extracted").iterdir()) == []


def test_extract_unknown_archive_type(tmp_path):
    with pytest.raises(DownloadError, match="unknown archive type"):
        dl.extract(Path(tmp_path / "file.rar"), cache_dir=tmp_path)
