"""The spectra shared on disk by the processes of a sweep (linrec.models.spectrum_store): the
store's own reads and writes, and compute_spectrum reading it, locking it and surviving a killed
writer."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import linrec.models.spectral as spectral
from linrec.models import spectrum_store


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty store under its own $LINREC_DATA."""
    monkeypatch.setenv("LINREC_DATA", str(tmp_path))
    monkeypatch.delenv(spectrum_store.ENABLE_ENV, raising=False)
    monkeypatch.delenv(spectrum_store.MAX_GB_ENV, raising=False)
    return spectrum_store.root()


def _spectrum(n_items: int, components: int, dtype=np.float64, seed: int = 0):
    rng = np.random.default_rng(seed)
    vectors, _ = np.linalg.qr(rng.normal(size=(n_items, components)))
    return np.sort(rng.random(components))[::-1].copy(), vectors.astype(dtype)


@pytest.mark.parametrize("value, on", [(None, True), ("1", True), ("0", False), ("false", False),
                                       (" Off ", False), ("no", False), ("yes", True)])
def test_enabled_by_default_and_off_by_the_environment(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv(spectrum_store.ENABLE_ENV, raising=False)
    else:
        monkeypatch.setenv(spectrum_store.ENABLE_ENV, value)
    assert spectrum_store.enabled() is on


def test_the_store_lives_under_the_cache_root(store, tmp_path):
    assert store == tmp_path / "spectra"
    assert spectrum_store.lock_path("abc", np.float32) == tmp_path / "spectra" / "abc-float32.lock"


def test_save_then_load_gives_the_arrays_back_read_only(store):
    values, vectors = _spectrum(12, 5)
    spectrum_store.save("key", np.float64, values, vectors)
    entry = store / "key-float64-5"
    assert sorted(p.name for p in entry.iterdir()) == ["eigenvalues.npy", "vectors.npy"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o777 & ~umask  # readable by collaborators
    got_values, got_vectors = spectrum_store.load("key", np.float64, 5)
    np.testing.assert_array_equal(got_values, values)
    np.testing.assert_array_equal(got_vectors, vectors)
    assert isinstance(got_vectors, np.memmap)
    assert not got_values.flags.writeable and not got_vectors.flags.writeable
    assert [p.name for p in store.iterdir() if p.name.startswith(".tmp")] == []


def test_load_takes_the_smallest_entry_with_enough_components(store):
    for components in (3, 8, 5):
        spectrum_store.save("key", np.float64, *_spectrum(10, components, seed=components))
    assert spectrum_store.load("key", np.float64, 4)[0].shape == (5,)
    assert spectrum_store.load("key", np.float64, 6)[0].shape == (8,)
    assert spectrum_store.load("key", np.float64, 2)[0].shape == (3,)
    assert spectrum_store.load("key", np.float64, 9) is None  # none large enough
    assert spectrum_store.load("key", np.float32, 2) is None  # another dtype
    assert spectrum_store.load("other", np.float64, 2) is None  # another matrix


def test_an_existing_entry_is_not_overwritten(store):
    first = _spectrum(6, 2, seed=1)
    spectrum_store.save("key", np.float64, *first)
    spectrum_store.save("key", np.float64, *_spectrum(6, 2, seed=2))
    np.testing.assert_array_equal(spectrum_store.load("key", np.float64, 2)[1], first[1])


def test_an_entry_larger_than_the_limit_is_not_stored(store, monkeypatch, caplog):
    values, vectors = _spectrum(64, 8)  # 64·8·8 + 8·8 bytes = 4 160 bytes
    monkeypatch.setenv(spectrum_store.MAX_GB_ENV, str(4000 / 2**30))
    with caplog.at_level(logging.INFO, logger=spectrum_store.__name__):
        spectrum_store.save("key", np.float64, values, vectors)
    assert not store.exists() or list(store.iterdir()) == []
    assert "exceeds LINREC_SPECTRUM_CACHE_MAX_GB" in caplog.text
    monkeypatch.setenv(spectrum_store.MAX_GB_ENV, str(5000 / 2**30))
    spectrum_store.save("key", np.float64, values, vectors)
    assert spectrum_store.load("key", np.float64, 8) is not None


def test_unreadable_or_inconsistent_entries_are_ignored_with_a_warning(store, caplog):
    values, vectors = _spectrum(10, 4)
    spectrum_store.save("broken", np.float64, values, vectors)
    (store / "broken-float64-4" / "vectors.npy").write_bytes(b"not an array")
    spectrum_store.save("mismatch", np.float64, values, vectors)
    np.save(store / "mismatch-float64-4" / "eigenvalues.npy", values[:3])
    (store / "junk-float64-x").mkdir()  # not an entry name: skipped
    with caplog.at_level(logging.WARNING, logger=spectrum_store.__name__):
        assert spectrum_store.load("broken", np.float64, 4) is None
        assert spectrum_store.load("mismatch", np.float64, 4) is None
        assert spectrum_store.load("junk", np.float64, 1) is None
    assert "ignoring" in caplog.text and "inconsistent arrays" in caplog.text


def test_a_disk_that_cannot_be_written_is_logged_not_raised(store, caplog):
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text("a file where the directory should be")
    with caplog.at_level(logging.WARNING, logger=spectrum_store.__name__):
        spectrum_store.save("key", np.float64, *_spectrum(5, 2))
    assert "could not store" in caplog.text


def test_a_spectrum_is_shared_through_the_disk_cache_by_other_processes(tmp_path, monkeypatch):
    """A second process (here: an emptied in-memory cache) reads the stored spectrum instead of
    decomposing again; a larger rank request than stored decomposes and stores again."""
    monkeypatch.setenv("LINREC_DATA", str(tmp_path))
    rng = np.random.default_rng(0)
    train = sp.csr_matrix((rng.random((60, 30)) < 0.2).astype(np.float32))
    calls = []
    real = spectral._decompose
    monkeypatch.setattr(spectral, "_decompose", lambda *a: calls.append(a[2]) or real(*a))
    first = spectral.compute_spectrum(train, rank=4)  # stores the partial limit, 6 of 30
    spectral.clear_spectrum_cache()
    again = spectral.compute_spectrum(train, rank=3)
    assert calls == [6] and isinstance(again.vectors, np.memmap)
    np.testing.assert_array_equal(again.vectors, first.vectors)
    np.testing.assert_array_equal(again.eigenvalues, first.eigenvalues)
    assert not again.vectors.flags.writeable
    spectral.clear_spectrum_cache()
    spectral.compute_spectrum(train)  # the full spectrum: not stored yet
    assert calls == [6, 30]
    stored = sorted(p.name.rsplit("-", 1)[1] for p in spectrum_store.root().iterdir()
                    if p.is_dir())
    assert stored == ["30", "6"]
    monkeypatch.setenv("LINREC_SPECTRUM_CACHE", "0")
    spectral.clear_spectrum_cache()
    spectral.compute_spectrum(train, rank=4)
    assert calls == [6, 30, 6]


def test_concurrent_processes_decompose_once(tmp_path):
    """Two processes ask for the same spectrum at once: one decomposes under the lock, the other
    waits and reads it."""
    script = textwrap.dedent("""
        import sys, numpy as np, scipy.sparse as sp
        import linrec.models.spectral as spectral
        real = spectral._decompose
        def counted(*a):
            print("decomposed", flush=True)
            return real(*a)
        spectral._decompose = counted
        rng = np.random.default_rng(0)
        train = sp.csr_matrix((rng.random((400, 300)) < 0.1).astype(np.float32))
        s = spectral.compute_spectrum(train)
        print("sum", float(np.abs(s.vectors).sum()))
    """)
    env = {**os.environ, "LINREC_DATA": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env=env) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(o.count("decomposed") for o in outs) == 1
    sums = {line for o in outs for line in o.splitlines() if line.startswith("sum")}
    assert len(sums) == 1


def test_a_writer_killed_while_storing_leaves_no_entry(tmp_path, monkeypatch):
    """Interrupted between the two arrays: nothing under spectra/ but the lock; the next
    process decomposes again and stores a whole entry."""
    monkeypatch.setenv("LINREC_DATA", str(tmp_path))
    rng = np.random.default_rng(1)
    train = sp.csr_matrix((rng.random((50, 20)) < 0.3).astype(np.float32))
    real_save = np.save
    calls = []

    def dying(path, array, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed while writing the vectors
        return real_save(path, array, *args, **kwargs)

    monkeypatch.setattr(np, "save", dying)
    with pytest.raises(KeyboardInterrupt):
        spectral.compute_spectrum(train)
    monkeypatch.setattr(np, "save", real_save)
    leftovers = [p.name for p in spectrum_store.root().iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []
    spectral.clear_spectrum_cache()
    spectral.compute_spectrum(train)
    assert len([p for p in spectrum_store.root().iterdir() if p.is_dir()]) == 1
