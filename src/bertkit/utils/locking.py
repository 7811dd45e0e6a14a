"""The one file lock: concurrent processes that would make the same thing (a fetched source, a token store, a plan)
take turns, and the second finds the first one's result."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def locked(root: Path, name: str) -> Iterator[None]:
    """Hold the exclusive lock called `name` in directory `root` while the block runs.

    - Exclusive and blocking: an advisory `flock(LOCK_EX)` on the file `root/.NAME.lock`; a second process (or a
      second open of the file in this one) waits, with no timeout, until the holder leaves its block. The lock
      goes with the holder: a killed process holds nothing.
    - `root` is made if it is missing. The lock file is opened for appending, so taking the lock changes nothing
      on disk, and it is left behind afterwards (removing it could let two processes lock two different files).
    - A read-only (or otherwise unwritable) `root` raises the OSError of making or opening the lock file: the
      caller was about to write there anyway.
    - Without advisory locks (Windows, no fcntl) the block runs unlocked: concurrent makers race, and each
      finishes (every caller writes through an atomic rename)."""
    root.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(root / f".{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
