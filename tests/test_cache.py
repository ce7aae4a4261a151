"""linrec.cache: the cache root ($LINREC_DATA) and the lock parallel jobs share it with."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from linrec.cache import cache_home, file_lock


def test_the_cache_root_is_the_argument_then_linrec_data_then_the_user_cache(monkeypatch,
                                                                             tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LINREC_DATA", "~/data")
    assert cache_home() == tmp_path / "home" / "data"  # ~ expanded
    assert cache_home(tmp_path / "given") == tmp_path / "given"
    assert cache_home("~/given") == tmp_path / "home" / "given"
    monkeypatch.delenv("LINREC_DATA")
    assert cache_home() == tmp_path / "home" / ".cache" / "linrec"
    monkeypatch.setenv("LINREC_DATA", "")  # empty: as if unset
    assert cache_home() == tmp_path / "home" / ".cache" / "linrec"


def _locked_by_someone_else(path: Path) -> bool:
    """Whether another open file description holds an exclusive lock on `path`."""
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


def test_the_lock_is_held_for_the_block_and_released_after(tmp_path):
    lock = tmp_path / "new" / "dir" / "x.lock"
    with file_lock(lock):
        assert lock.exists()  # created with its directory
        assert _locked_by_someone_else(lock)
    assert not _locked_by_someone_else(lock)
    with pytest.raises(RuntimeError), file_lock(lock):
        raise RuntimeError("the block failed")
    assert not _locked_by_someone_else(lock)  # released on an exception too


def _hold_lock_in_child(lock: Path) -> subprocess.Popen:
    script = textwrap.dedent(f"""
        import time
        from linrec.cache import file_lock
        with file_lock({str(lock)!r}):
            print("locked", flush=True)
            time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    return child


def test_a_second_process_waits_and_a_killed_holder_releases_the_lock(tmp_path):
    """Parallel jobs do the guarded work once: a second holder waits; the kernel drops the
    lock of a killed job, so nothing is left behind."""
    lock = tmp_path / "spectra" / "k.lock"
    child = _hold_lock_in_child(lock)
    try:
        assert _locked_by_someone_else(lock)
        child.kill()
        child.wait(timeout=30)
        assert not _locked_by_someone_else(lock)  # released the moment its holder died
        with file_lock(lock):
            pass
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert os.path.exists(lock)
