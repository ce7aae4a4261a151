"""Dataset files in the local cache: fetch (atomic, resumable, SHA-256 verified), locate, extract.

Layout under `data_home()` (`$LINREC_DATA`, default `~/.cache/linrec`):
  downloads/<filename>           fetched files, complete and verified (`<filename>.part` while
                                 downloading, resumed with an HTTP Range request)
  extracted/<archive name>/      archive contents, renamed into place only once fully extracted
Only urllib is used, so offline machines need nothing more than the files placed by hand.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path

from linrec.atomic import make_dir_readable, write_text_atomic
from linrec.cache import cache_home, file_lock
from linrec.errors import ConfigError, DownloadError

log = logging.getLogger(__name__)

_CHUNK_BYTES = 1 << 20
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip")


@dataclass(frozen=True)
class RemoteFile:
    """A public file: where to get it, its SHA-256 (None = unknown, fetched unverified) and the
    name it gets in `downloads/`."""

    url: str
    sha256: str | None
    filename: str


def data_home(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache root (linrec.cache.cache_home)."""
    return cache_home(cache_dir)


def download_path(filename: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where `fetch` puts (and looks for) `filename`."""
    return data_home(cache_dir) / "downloads" / filename


def extracted_path(archive_name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where `extract` puts the contents of the archive named `archive_name`."""
    return data_home(cache_dir) / "extracted" / _archive_stem(Path(archive_name))


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(
    url: str,
    sha256: str | None,
    filename: str,
    cache_dir: str | os.PathLike | None = None,
    timeout: float = 30.0,
    hint: str | None = None,
) -> Path:
    """Download `url` to `<data_home>/downloads/<filename>` unless it is already there; return
    the path.

    The bytes go to `<filename>.part` (resumed with an HTTP Range request when it exists) and are
    moved into place with `os.replace` only after the SHA-256 matched. A mismatch removes the bad
    file and raises DownloadError; `sha256=None` logs a warning that the file is unverified.
    Offline or any network failure raises DownloadError saying which URL to fetch by hand and the
    exact path to place it at; `hint` (e.g. how to point linrec at a local copy instead) is
    appended to every error message.
    """
    try:
        return _fetch(url, sha256, filename, cache_dir, timeout)
    except DownloadError as exc:
        if hint:
            raise DownloadError(f"{exc}. Alternatively: {hint}") from exc.__cause__
        raise


def _fetch(
    url: str, sha256: str | None, filename: str, cache_dir: str | os.PathLike | None,
    timeout: float,
) -> Path:
    target = download_path(filename, cache_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.with_name(filename + ".lock")):
        if target.exists():
            _verify_existing(target, url, sha256)
            return target
        part = target.with_name(filename + ".part")
        _download_to_part(url, part, target, timeout)
        actual = sha256_of(part)
        if sha256 is None:
            log.warning(
                "%s is unverified: linrec knows no SHA-256 for %s (got %s)", target, url, actual
            )
        elif actual != sha256.lower():
            part.unlink(missing_ok=True)
            raise DownloadError(
                f"checksum mismatch for {filename} downloaded from {url}: expected SHA-256 "
                f"{sha256}, got {actual}; the bad file was removed. Retry, or download it by hand "
                f"and place it at {target}"
            )
        os.replace(part, target)
        _write_checksum_stamp(target, actual)
        log.info("downloaded %s -> %s", url, target)
    return target


def locate(
    remote: RemoteFile,
    *,
    download: bool,
    dataset: str,
    override_hint: str,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """The cached copy of `remote` (verified), fetched first when `download` is True.

    Without the file and with `download=False`, raises DownloadError naming the URL, the exact
    cache path to place the file at, and `override_hint` (how to point linrec at a local copy).
    """
    if not isinstance(download, bool):  # a string such as 'no' would be truthy
        raise ConfigError(f"data.download must be true or false, got {download!r}")
    target = download_path(remote.filename, cache_dir)
    if download or target.exists():
        return fetch(remote.url, remote.sha256, remote.filename, cache_dir, hint=override_hint)
    raise DownloadError(
        f"{dataset}: {remote.filename} is not in the cache. Either download it from {remote.url} "
        f"and place it at {target}, or let linrec download it (data.download=true), or "
        f"point at your copy: {override_hint}"
    )


def extract(archive: Path, cache_dir: str | os.PathLike | None = None) -> Path:
    """Extract a .zip / .tar.gz / .tgz archive to `<data_home>/extracted/<archive stem>/` (once)
    and return that directory. The contents go to a temporary directory that is renamed into
    place only when complete, so a crash never leaves a half-extracted directory behind."""
    archive = Path(archive)
    dest = extracted_path(archive.name, cache_dir)
    stem = dest.name
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{stem}-", dir=dest.parent))
    make_dir_readable(tmp)  # mkdtemp makes it 0700; the extracted data is for everyone
    try:
        _extract_into(archive, tmp)
        try:
            os.replace(tmp, dest)
        except OSError:
            if not dest.is_dir():  # not a concurrent extraction that finished first
                raise
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise DownloadError(
            f"could not extract {archive} into {dest}: {exc}; delete {archive} and fetch it again"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _archive_stem(archive: Path) -> str:
    name = archive.name
    for suffix in _ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    raise DownloadError(
        f"{archive}: unknown archive type; expected one of {', '.join(_ARCHIVE_SUFFIXES)}"
    )


def _extract_into(archive: Path, dest: Path) -> None:
    root = dest.resolve()
    if archive.name.lower().endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                _check_inside(root, member, archive)
            zf.extractall(dest)
        return
    with tarfile.open(archive, "r:gz") as tf:
        for member in tf.getmembers():
            _check_inside(root, member.name, archive)
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, filter="data")
        else:  # pragma: no cover - Python < 3.11.4
            tf.extractall(dest)


def _check_inside(root: Path, member: str, archive: Path) -> None:
    if not (root / member).resolve().is_relative_to(root):
        raise DownloadError(f"{archive}: member {member!r} would be written outside {root}")


def _verify_existing(target: Path, url: str, sha256: str | None) -> None:
    """Check a file already in the cache (hash once, then trust its size+mtime stamp)."""
    if sha256 is None or _checksum_stamp_matches(target, sha256):
        return
    actual = sha256_of(target)
    if actual != sha256.lower():
        raise DownloadError(
            f"{target} has SHA-256 {actual}, expected {sha256} (the file at {url} as linrec "
            f"knows it). Delete {target} to download it again, or replace it with the "
            f"original file from {url}"
        )
    _write_checksum_stamp(target, actual)


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _write_checksum_stamp(target: Path, digest: str) -> None:
    stat = target.stat()
    stamp = _stamp_path(target)
    write_text_atomic(stamp, f"{digest} {stat.st_size} {stat.st_mtime_ns}\n")


def _checksum_stamp_matches(target: Path, sha256: str) -> bool:
    try:
        digest, size, mtime_ns = _stamp_path(target).read_text().split()
    except (OSError, ValueError):
        return False
    stat = target.stat()
    return (digest, int(size), int(mtime_ns)) == (sha256.lower(), stat.st_size, stat.st_mtime_ns)


def _download_to_part(url: str, part: Path, target: Path, timeout: float) -> None:
    """Stream `url` into `part`, resuming from its current size with a Range request."""
    offset = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "linrec"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code != 416 or not offset:
                raise
            # 416: nothing left past `offset`, i.e. the .part is already complete
            return
        with response:
            if offset and response.status != 206:  # server ignored Range: start over
                offset = 0
            total = response.headers.get("Content-Length")
            total_bytes = int(total) + offset if total is not None else None
            mode = "ab" if offset else "wb"
            with open(part, mode) as out, _progress(part.stem, total_bytes, offset) as bar:
                for block in iter(lambda: response.read(_CHUNK_BYTES), b""):
                    out.write(block)
                    bar(len(block))
            if total_bytes is not None and part.stat().st_size < total_bytes:
                raise DownloadError(
                    f"connection closed after {part.stat().st_size} of {total_bytes} bytes"
                )
    except (urllib.error.URLError, HTTPException, OSError, DownloadError, ValueError) as exc:
        reason = exc if isinstance(exc, urllib.error.HTTPError) else getattr(exc, "reason", exc)
        raise DownloadError(
            f"could not download {target.name} from {url}: {reason}. If this machine is "
            f"offline, download {url} elsewhere and place it at {target} "
            f"(a partial download is kept at {part} and resumed on the next try)"
        ) from exc


@contextlib.contextmanager
def _progress(label: str, total: int | None, initial: int) -> Iterator:
    """Yield `update(n_bytes)`: a tqdm bar on a terminal, silent otherwise."""
    if sys.stderr.isatty():
        from tqdm.auto import tqdm

        with tqdm(
            total=total, initial=initial, unit="B", unit_scale=True, desc=label
        ) as bar:
            yield bar.update
    else:
        log.info("downloading %s (%s bytes)", label, total if total is not None else "unknown")
        yield lambda n: None


