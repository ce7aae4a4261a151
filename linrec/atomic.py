"""One atomic write for every file linrec produces (results, ranks, split cache, models, figures,
tables, downloads' stamps).

The bytes go to a hidden temporary file beside the target, which is renamed over the target only
when complete, so a reader (or a killed run) never sees half a file. The temporary file is created
with mode 0o666 filtered by the process umask, like any `open(path, "w")`: collaborators on a
shared machine can read what linrec writes (mkstemp's 0600 would hide it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def current_umask() -> int:
    """The process umask (read without changing it where /proc allows)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, but only a fallback)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, fsync: bool = False) -> Iterator[IO]:
    """Open a temporary file beside `path` for writing ("w" text or "wb" binary); on a clean
    exit it replaces `path`, on an exception it is removed and `path` is untouched. Parent
    directories are created. fsync: flush to disk before the rename (for caches)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno is not None and exc.filename in (None, str(tmp)):
            # a failed write names no file, or the temporary one: name the file being written
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` to `path` atomically; returns the path."""
    with atomic_open(path, "w") as fh:
        fh.write(text)
    return Path(path)


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` atomically; returns the path."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def make_dir_readable(path: str | Path) -> None:
    """chmod a directory made by tempfile.mkdtemp (0700) to 0o777 filtered by the umask."""
    os.chmod(path, 0o777 & ~current_umask())
