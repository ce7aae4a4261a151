"""Where linrec keeps what it can reuse, and the lock that lets parallel jobs share it.

`cache_home()`: `$LINREC_DATA`, else `~/.cache/linrec`. Below it: `downloads/`, `extracted/`
(data files), `splits/` (prepared splits), `spectra/` (eigendecompositions shared by the jobs
of a sweep), `checkpoints/` (MF training). `file_lock(path)`: an exclusive advisory lock (flock)
held for a block; the kernel releases it when its process dies, so a killed job never leaves a
lock behind.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def cache_home(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache root: `cache_dir`, else `$LINREC_DATA`, else `~/.cache/linrec`."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("LINREC_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "linrec"


@contextlib.contextmanager
def file_lock(lock_path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created, with its directory) for the block, so
    that parallel processes do the guarded work once; a no-op where fcntl is missing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
