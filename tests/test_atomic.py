"""linrec.atomic: one atomic write that respects the umask."""

import os
import stat

import numpy as np
import pytest

from linrec.atomic import atomic_open, current_umask, write_bytes_atomic, write_text_atomic


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_get_the_umask_mode_not_0600(tmp_path, umask_022):
    assert current_umask() == 0o022
    assert _mode(write_text_atomic(tmp_path / "a.txt", "x")) == 0o644
    assert _mode(write_bytes_atomic(tmp_path / "sub" / "b.bin", b"x")) == 0o644
    os.umask(0o077)
    assert _mode(write_text_atomic(tmp_path / "c.txt", "x")) == 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "results.json"
    write_text_atomic(target, "old")
    with pytest.raises(RuntimeError), atomic_open(target, "w") as fh:
        fh.write("half")
        raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_an_os_error_while_writing_names_the_target_not_the_temporary(tmp_path):
    """A write's own error (a full disk: ENOSPC) carries no file name; the one raised names
    the file being written, with the same errno and cause."""
    import errno

    target = tmp_path / "ranks.npz"
    with pytest.raises(OSError) as caught, atomic_open(target, "wb"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert caught.value.strerror == "No space left on device"
    assert list(tmp_path.iterdir()) == []


def test_binary_writers_such_as_numpy_write_through_the_handle(tmp_path):
    with atomic_open(tmp_path / "x.npz", "wb") as fh:
        np.savez(fh, a=np.arange(3))
    assert np.array_equal(np.load(tmp_path / "x.npz")["a"], np.arange(3))


def test_every_output_of_a_run_is_readable_by_the_group(tmp_path, umask_022):
    """results.json, ranks.npz, the split cache and a saved model follow the umask."""
    from linrec.eval.ranks import RankTable
    from linrec.models import EASE

    table = RankTable(users=np.array([0]), items=np.array([1]), ranks=np.array([1]),
                      rows=np.array([0]), n_candidates=np.array([2]), n_items=3)
    table.save_npz(tmp_path / "ranks.npz")
    model = EASE(lam=1.0)
    model.save(tmp_path / "model.pkl")
    assert _mode(tmp_path / "ranks.npz") == 0o644
    assert _mode(tmp_path / "model.pkl") == 0o644
