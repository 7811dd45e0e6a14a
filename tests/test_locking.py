"""bertkit.utils.locking: the one file lock the source cache, the store cache and the plan cache take turns by."""

from __future__ import annotations

import os
import sys

import pytest

from bertkit.utils.locking import locked

fcntl = pytest.importorskip("fcntl")


def _free(path) -> bool:
    """Whether another open of `path` can take the lock now (it cannot while `locked` holds it)."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def test_the_lock_is_exclusive_while_held_and_free_after(tmp_path):
    root = tmp_path / "missing" / "root"  # made on the way in
    lock = root / ".thing.lock"
    with locked(root, "thing"):
        assert lock.is_file() and not _free(lock)
    assert _free(lock)
    assert lock.read_bytes() == b""  # taking the lock writes nothing; the file stays behind


def test_the_lock_is_released_when_the_block_raises(tmp_path):
    with pytest.raises(KeyError), locked(tmp_path, "thing"):
        raise KeyError("inside")
    assert _free(tmp_path / ".thing.lock")


def test_an_unwritable_root_raises_the_os_error(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(OSError), locked(tmp_path / "file" / "root", "thing"):
        pass


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root may write into a read-only directory")
def test_a_read_only_root_raises_permission_error(tmp_path):
    root = tmp_path / "read-only"
    root.mkdir()
    root.chmod(0o555)
    try:
        with pytest.raises(PermissionError), locked(root, "thing"):
            pass
    finally:
        root.chmod(0o755)
