"""Atomic writes: a file or a whole directory appears complete, or not at all.

Everything is written beside its final place under a hidden temporary name, fsynced, then renamed onto
the final name (`os.replace` is atomic on one file system), so a crash leaves the old version or the
new one, never half of either. Files and directories get the mode the user's umask gives, as `open`
and `mkdir` would (mkstemp's private 0600 would surprise whoever shares a run or a cache).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["atomic_directory", "atomic_write", "atomic_write_text", "fsync_directory", "fsync_tree",
           "remove_leftovers"]


def fsync_directory(path: str | os.PathLike) -> None:
    """Make a directory's entries (a rename into it) durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. Windows; the rename is still atomic there
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike) -> None:
    """fsync every file below `root`, then the directories, deepest first."""
    root = Path(root)
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        elif path.is_dir():
            fsync_directory(path)
    fsync_directory(root)


def _new_temp_file(path: Path) -> Path:
    """Create an empty temp file beside `path` with the umask's mode (os.open applies it; mkstemp would not)."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:  # another writer drew the same name; draw again
            continue
        except OSError as err:  # say so of the file asked for, not of the hidden name beside it
            raise OSError(err.errno, f"cannot write a file there ({err.strerror})", str(path)) from None


def atomic_write(path: str | os.PathLike, write: Callable[[Path], Any]) -> Path:
    """Call `write(tmp_path)`, fsync, then rename onto `path`: a crash leaves the old file or the new, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_temp_file(path)
    umask_mode = stat.S_IMODE(tmp.stat().st_mode)
    try:
        write(tmp)
        os.chmod(tmp, umask_mode)  # a writer that recreates the file (safetensors does) may have made it 0600
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write UTF-8 text atomically, with "\\n" line ends on every platform."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)

    return atomic_write(path, write)


@contextmanager
def atomic_directory(final: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temp directory beside `final`; when the block ends without an error, fsync it and
    rename it to `final`, replacing what was there. On an error nothing at `final` changes.

    A directory cannot be renamed over another, so an old `final` is first moved aside: a crash in that
    instant leaves it whole as `.NAME.old-PID` (which `remove_leftovers` deletes), the new one as `.NAME.tmp-PID`.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        fsync_tree(tmp)
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        if final.exists():
            os.replace(final, old)  # a directory cannot be replaced by a rename: move it aside first
        os.replace(tmp, final)
        fsync_directory(final.parent)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_leftovers(directory: str | os.PathLike, name: str = "*") -> None:
    """Delete what a process killed inside `atomic_directory(directory / name)` left behind."""
    for pattern in (f".{name}.tmp-*", f".{name}.old-*"):
        for path in Path(directory).glob(pattern):
            shutil.rmtree(path, ignore_errors=True)
