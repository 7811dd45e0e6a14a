"""Where a command may write: the one rule for output directories, and the lock a run holds on its own.

Every command that writes a directory (pretrain, finetune, vocab, translate-train, lm-train, demo) opens it
with `run_directory`:

- absent or empty: written;
- a file: an error;
- holding a bertkit run or model (a checkpoint, a model's config.json, a tokenizer, metrics, a report): an
  error, unless `overwrite`; then what bertkit writes there is deleted first, and nothing else;
- holding other files only: written beside them.

While it runs, a run holds an exclusive `flock` on `DIR/.bertkit-lock`, a file naming the holder (pid, host,
command, start time). A second run on the same directory is refused with that name. The operating system
drops the lock when its process dies, however it dies, so a lock file left by a killed run is stale by
construction: the next run takes it over, and says so. Under torchrun rank 0 holds the lock for the job.
Where `fcntl` does not exist (Windows) runs are not locked.

`--overwrite` replaces the *outputs* of an earlier run, never an *input* of this one: a run started with
`--model RUN/best --out RUN --overwrite` is refused before anything is touched, because clearing RUN would
delete the model it is about to read (`check_inputs_survive`).

A command that writes single files (`encode --out vectors.npy`, `attention --out page.html`, the pictures of
`explain`) follows the same rule per file (`check_output_file`): a file already there is replaced only when
told `--overwrite`, an input of the command never, and every file is written whole or not at all.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from bertkit.errors import InputError
from bertkit.models.sentence_files import SENTENCE_FILES

LOCK_NAME = ".bertkit-lock"

# What shows that a directory holds a bertkit run or model.
RUN_MARKERS = ("config.json", "model.safetensors", "pytorch_model.bin", "vocab.txt", "tokenizer.json",
               "tokenizer_config.json", "metrics.jsonl", "training_args.json", "train_results.json",
               "*_options.json", "*_results.json", "report.json", "data_report.json", "checkpoint-*", "best",
               "source_tokenizer", "model.onnx", "model_int8.onnx", "store.json")
# What bertkit writes into a run directory: `overwrite` deletes these, never anything else.
RUN_ENTRIES = (*RUN_MARKERS, "special_tokens_map.json", "generation_config.json", "languages.json",
               "eval_results.json", "target_tokenizer", "report.md", "*.onnx.data", ".final", ".*.tmp-*", ".*.old-*",
               ".*.tmp", "store.*", "corpus_stores.json", *SENTENCE_FILES)


class OutputDirectoryError(InputError):
    """An output directory the command may not write: a file, or one holding a run or model (no overwrite)."""


class RunLockedError(OutputDirectoryError):
    """Another run, still alive, holds the directory's lock."""


class OutputFileError(OutputDirectoryError):
    """An output file the command may not write: a directory, a file already there (no overwrite), or an input."""


Inputs = Iterable[tuple[str, "str | os.PathLike"]]  # (the flag that named it, the path) of each input of a run


def _same_or_inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


def check_inputs_survive(out: str | os.PathLike, inputs: Inputs, also: Iterable[str] = (),
                         flag: str = "--out") -> None:
    """Raise OutputDirectoryError if clearing `out` (what `--overwrite` does: RUN_ENTRIES and `also`) would delete
    an input of this run: an input that is, or lies inside, one of those entries, or a directory input that is
    `out` itself (a model or vocabulary directory given as its own --out). No side effects."""
    out = Path(out)
    doomed = [(out / name).resolve() for name in run_entries(out, (*RUN_ENTRIES, *also))]
    if not doomed:
        return
    for input_flag, value in inputs:
        path = Path(value).resolve()
        hit = next((entry for entry in doomed if _same_or_inside(path, entry) or entry.parent == path), None)
        if hit is not None:
            raise OutputDirectoryError(
                f"{input_flag} {value} is an input of this run, and --overwrite would delete it with the run in "
                f"{flag} {out} ({hit.name}); choose another {flag}, or move the input out of it first")


def check_output_file(path: str | os.PathLike, overwrite: bool = False, *, flag: str = "--out",
                      suffixes: Iterable[str] = (), inputs: Inputs = ()) -> Path:
    """Where a command may write one file: not a directory, a name with one of `suffixes` (when given), not one of
    its `inputs` (even with overwrite), and not a file already there unless `overwrite`. Returns the path; no side
    effects (write it with `bertkit.utils.atomic.atomic_write`, so it appears whole or not at all)."""
    path = Path(path)
    suffixes = tuple(s.lower() for s in suffixes)
    if path.is_dir():
        raise OutputFileError(f"{flag} {path} is a directory; give a file name"
                              + (f" ending in {' or '.join(suffixes)}" if suffixes else ""))
    if suffixes and path.suffix.lower() not in suffixes:
        raise OutputFileError(f"{flag} {path}: give a file name ending in {' or '.join(suffixes)}")
    for input_flag, value in inputs:
        if path.exists() and Path(value).exists() and path.resolve() == Path(value).resolve():
            raise OutputFileError(f"{flag} {path} is also {input_flag}, an input of this command; write the output "
                                  "to another file")
    if path.exists() and not overwrite:
        raise OutputFileError(f"{flag} {path} already exists; give --overwrite to replace it, or choose another name")
    return path


def run_entries(directory: str | os.PathLike, patterns: Iterable[str] = RUN_MARKERS) -> list[str]:
    """The names in `directory` that match `patterns` (by default: the signs of a bertkit run or model)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted({path.name for pattern in patterns for path in directory.glob(pattern)} - {LOCK_NAME})


def check_output_directory(out: str | os.PathLike, overwrite: bool = False, also: Iterable[str] = (),
                           flag: str = "--out") -> None:
    """Raise OutputDirectoryError if the rule forbids writing `out`: it is a file, or it holds a run (RUN_MARKERS
    or the caller's `also` patterns) and `overwrite` is off. No side effects."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputDirectoryError(f"{flag} {out} is a file, not a directory; choose a directory (new or empty)")
    found = run_entries(out, (*RUN_MARKERS, *also))
    if found and not overwrite:
        shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
        raise OutputDirectoryError(f"{flag} {out} already holds a bertkit run or model ({shown}); give --overwrite "
                                   "to replace it, or choose a new or empty directory")


def clear_run(out: str | os.PathLike, also: Iterable[str] = ()) -> list[str]:
    """Delete what bertkit wrote into `out` (RUN_ENTRIES and the caller's `also` patterns); other files stay.
    Returns the names deleted."""
    out = Path(out)
    doomed = run_entries(out, (*RUN_ENTRIES, *also))
    for name in doomed:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return doomed


@contextmanager
def new_files_in(directory: str | os.PathLike, *, overwrite: bool = False, flag: str = "--out") -> Iterator[Path]:
    """Yield a hidden staging folder beside `directory`'s files; when the block ends, the files written there move
    into `directory`. A file of the same name already there is replaced only with `overwrite`, checked for every
    file before any moves, so on a refusal (OutputFileError naming them) or an error nothing in `directory`
    changes. For commands that write several files into a folder of the user's (`explain`'s pictures)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise OutputFileError(f"{flag} {directory} is a file; give a folder")
    created = [path for path in (directory, *directory.parents) if not path.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    staging = directory / f".{directory.name or 'out'}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        yield staging
        made = sorted(staging.iterdir())
        there = [path.name for path in made if (directory / path.name).exists()]
        if there and not overwrite:
            shown = ", ".join(there[:4]) + (f" and {len(there) - 4} more" if len(there) > 4 else "")
            raise OutputFileError(f"{flag} {directory} already holds {shown}; give --overwrite to replace "
                                  f"{'them' if len(there) > 1 else 'it'}, or choose another folder")
        for path in made:
            os.replace(path, directory / path.name)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_unused(created)
        raise
    shutil.rmtree(staging, ignore_errors=True)


def _holder_text(holder: dict) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, int | float) else "?"
    return (f"{holder.get('command', 'a bertkit run')} (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, "
            f"started {when})")


_HELD_LOCKS: set[int] = set()  # the descriptors of the locks this process holds


def _let_go_in_child() -> None:
    """In a process forked while a run holds its lock (a data loader's worker, a tokenizing or planning process):
    close its copies of the lock's descriptor. Otherwise the copy would hold the lock after the run's own process
    died, until the child noticed (a data loader's worker looks every 5 s), and refuse a `--resume` meanwhile."""
    for fd in _HELD_LOCKS:
        with suppress(OSError):
            os.close(fd)  # the child's copy only: the parent's lock stands
    _HELD_LOCKS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_let_go_in_child)


class RunLock:
    """The exclusive lock of a run on its directory; `acquire` raises RunLockedError naming a live holder."""

    def __init__(self, directory: str | os.PathLike, command: str) -> None:
        self.path = Path(directory) / LOCK_NAME
        self.command = command
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        try:
            import fcntl
        except ImportError:  # no flock here: unlocked
            return self
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunLockedError(f"{self.path.parent} is in use by another run: {_holder_text(holder)}; wait "
                                     "for it to finish, or choose another directory") from None
            # The last holder deletes the file as it lets go; if that happened between our open and our flock,
            # we hold a lock on a deleted file: open again.
            try:
                current = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                current = False
            if current:
                break
            os.close(fd)
        stale = _read_holder(fd)
        if stale:
            warnings.warn(f"{self.path.parent}: taking over the lock of a run that is no longer running: "
                          f"{_holder_text(stale)}", stacklevel=3)
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                  "argv": sys.argv, "started": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode("utf-8"), 0)
        self._fd = fd
        _HELD_LOCKS.add(fd)
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # while still held: no one can take a lock on it in between
        _HELD_LOCKS.discard(self._fd)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> dict:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


@contextmanager
def run_directory(out: str | os.PathLike, command: str, *, overwrite: bool = False, resume: bool = False,
                  main: bool = True, also: Iterable[str] = (), inputs: Inputs = (), flag: str = "--out"
                  ) -> Iterator[Path]:
    """Open `out` for a run of `command` (e.g. "bertkit pretrain"): check the rule, lock it, and with
    `overwrite` clear what bertkit wrote there (`also`: the caller's own entries), unless that would delete one
    of the run's `inputs` ((flag, path) pairs: then nothing is touched); the lock is held until the block ends.
    `resume` continues the run already there. Processes other than the `main` one of a torchrun job neither
    check nor lock: rank 0 does it for the job. `flag` is how messages name `out`."""
    out = Path(out)
    if not main:
        yield out
        return
    if resume and overwrite:
        raise OutputDirectoryError("--resume continues the run in its directory and --overwrite replaces it; "
                                   "give one of them")
    if out.exists() and not out.is_dir():
        check_output_directory(out, flag=flag)
    created = [path for path in (out, *out.parents) if not path.exists()]  # deepest first
    out.mkdir(parents=True, exist_ok=True)
    try:
        with RunLock(out, command):
            if not resume:  # checked under the lock, so a run that just started cannot be cleared away
                check_output_directory(out, overwrite, also, flag)
                if overwrite:
                    check_inputs_survive(out, inputs, also, flag)
                    clear_run(out, also)
            yield out
    except BaseException:
        _remove_unused(created)
        raise


def holds_out(command: str, distributed: bool = True) -> Callable:
    """Decorate a training run `fn(options)` so it runs holding options.out (`run_directory`: an earlier run
    or model there is refused unless options.overwrite); under torchrun (`distributed`) rank 0 holds it."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(options, *args, **kwargs):
            main = True
            if distributed:
                from bertkit.training.distributed import process_rank

                main = process_rank() == 0
            with run_directory(options.out, command, overwrite=options.overwrite, main=main,
                               inputs=options.inputs()):
                return fn(options, *args, **kwargs)
        return run
    return wrap


def _remove_unused(created: list[Path]) -> None:
    """After a run failed: remove the directories it created if it wrote nothing there but its options (it
    failed before training), so the same command can simply be run again."""
    if not created or not created[0].is_dir() or any(not path.name.endswith("_options.json")
                                                      for path in created[0].iterdir()):
        return
    for path in created[0].iterdir():
        path.unlink()
    for directory in created:
        try:
            directory.rmdir()
        except OSError:  # not empty: another process wrote there meanwhile
            return
