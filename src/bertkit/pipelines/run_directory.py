"""Where a command may write: the one rule for output directories, and the lock a run holds on its own.

Every command that writes a directory (prepare, pretrain, finetune, vocab, translate-train, lm-train, vision-train,
export, demo) opens it with `run_directory`, and records there what it wrote: `DIR/.bertkit-manifest.json` names
the entries (top-level files and folders) that are bertkit's. The rule:

- absent or empty: written;
- a file: an error;
- holding a bertkit run or model (the entries its manifest names, `entries`): an error, unless `overwrite`; then
  those entries are deleted first, and nothing else;
- holding files of the names bertkit writes (a `config.json`, a `metrics.jsonl`, ...) that bertkit did not write
  (no manifest names them): an error, with or without `overwrite`: they are the user's, and a run could write
  over them;
- holding other files only: written beside them.

The manifest is written before the run writes anything: it lists what the directory held then (the user's), and
when the run ends the entries that appeared meanwhile under names bertkit writes (RUN_ENTRIES) become its own. A
run killed before it could say so leaves the manifest open; the next run on the directory counts what appeared
the same way, and records it when it begins.
A directory written before bertkit kept manifests is taken for a run when it holds what only a run leaves
(RUN_RECORDS: options, results, checkpoints, a store, at its top or in a folder of a bertkit name); then the
entries of bertkit's names are its own, and the rest stays. Without such a sign, files of bertkit's names are not
taken for bertkit's: a model directory from elsewhere is never replaced. Whatever a manifest says, only entries of
the names bertkit writes can be its own.

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

import fnmatch
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
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import InputError
from bertkit.models.sentence_files import SENTENCE_FILES

LOCK_NAME = ".bertkit-lock"
# What bertkit adds later to an entry it wrote, outside the command that wrote it: (its entry, the cache's entry).
# A store's plans are cached beside it by the runs that read it (bertkit.data.pretraining.plans).
LATER_CACHES = (("store.json", "store.plans"),)
MANIFEST_NAME = ".bertkit-manifest.json"  # the entries of the directory that bertkit wrote
BOOKKEEPING = (LOCK_NAME, MANIFEST_NAME)

# What shows that a directory holds a bertkit run or model.
RUN_MARKERS = ("config.json", "model.safetensors", "pytorch_model.bin", "vocab.txt", "tokenizer.json",
               "tokenizer_config.json", "metrics.jsonl", "training_args.json", "train_results.json",
               "*_options.json", "*_results.json", "report.json", "data_report.json", "checkpoint-*", "best",
               "source_tokenizer", "model.onnx", "model_int8.onnx", "store.json")
# The names bertkit writes into a run directory: only entries of these names can be bertkit's, and `overwrite`
# deletes only those of them that are (the manifest's), never anything else.
TEMPORARY = (".*.tmp-*", ".*.old-*", ".*.tmp")  # what an atomic write leaves when it is killed half-way
RUN_ENTRIES = (*RUN_MARKERS, "special_tokens_map.json", "generation_config.json", "languages.json",
               "eval_results.json", "target_tokenizer", "report.md", "*.onnx.data", ".final", *TEMPORARY,
               "store.*", "corpus_stores.json", "predictions.json", "loss_curve.png",
               *SENTENCE_FILES)
# What only a bertkit run leaves: a directory without a manifest (written by a bertkit from before manifests)
# holding one of these, at its top or in a folder of a bertkit name, holds a run. A model's weights are not such a
# sign: a model directory from elsewhere (transformers', a copied m3e-small) has them too, and is never bertkit's.
RUN_RECORDS = ("pretrain_options.json", "lm_options.json", "translation_options.json", "training_args.json",
               "train_results.json", "finetune_results.json", "data_report.json", "corpus_stores.json", "store.json",
               "checkpoint-*")


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
    """Raise OutputDirectoryError if clearing `out` (what `--overwrite` does: `clear_run`, the entries bertkit wrote)
    would delete an input of this run: an input that is, or lies inside, one of those entries, or a directory input
    that is `out` itself (a model or vocabulary directory given as its own --out). No side effects."""
    out = Path(out)
    doomed = [(out / name).resolve() for name in sorted(entries(out, also).ours)]
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
    return sorted({path.name for pattern in patterns for path in directory.glob(pattern)} - set(BOOKKEEPING))


def _shown(names: Iterable[str]) -> str:
    names = sorted(names)
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _read_manifest(directory: Path) -> dict | None:
    """The directory's manifest, or None where it has none (or one that cannot be read: then the rule for
    directories without one holds)."""
    try:
        manifest = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("entries"), list):
        return None
    return manifest


@dataclass
class Entries:
    """A directory's entries (top-level names) by whose they are: `ours` (bertkit wrote them: `overwrite` deletes
    them), `foreign` (of names bertkit writes, but bertkit did not write them: refused), `others` (the rest)."""

    ours: set[str] = field(default_factory=set)
    foreign: set[str] = field(default_factory=set)
    others: set[str] = field(default_factory=set)

    @property
    def run(self) -> set[str]:
        """The entries that make the directory hold a run or model (ours, less what killed writes left)."""
        return {name for name in self.ours if not any(fnmatch.fnmatch(name, t) for t in TEMPORARY)}


def _holds_record(directory: Path, named: Iterable[str]) -> bool:
    """Whether a directory without a manifest holds a run of an earlier bertkit: a RUN_RECORDS entry at its top,
    or in one of its folders of bertkit's names (`best`, a demo's `pretrain`), or such a folder's manifest."""
    if run_entries(directory, RUN_RECORDS):
        return True
    return any((directory / name).is_dir() and ((directory / name / MANIFEST_NAME).is_file()
                                                 or run_entries(directory / name, RUN_RECORDS)) for name in named)


def entries(directory: str | os.PathLike, also: Iterable[str] = ()) -> Entries:
    """Whose `directory`'s entries are. With a manifest: the entries it names are bertkit's, and so are those of
    bertkit's names (RUN_ENTRIES, `also`) that appeared while a run that never closed its manifest held it (it was
    killed). Without one: the entries of bertkit's names are bertkit's if the directory holds a run of an earlier
    bertkit (`_holds_record`), else foreign. What a killed atomic write left (TEMPORARY) is bertkit's always."""
    directory = Path(directory)
    if not directory.is_dir():
        return Entries()
    names = {path.name for path in directory.iterdir()} - set(BOOKKEEPING)
    named = set(run_entries(directory, (*RUN_ENTRIES, *also)))
    temporary = set(run_entries(directory, TEMPORARY))
    manifest = _read_manifest(directory)
    if manifest is not None:
        # only names bertkit writes can be its own, whatever a manifest says (an edited one, a copied one)
        ours = set(manifest["entries"]) & named
        if manifest.get("open"):  # its run was killed before it said what it wrote
            ours |= (names - ours - set(manifest.get("others", []))) & named
        ours = (ours & names) | temporary
        ours |= {cache for owner, cache in LATER_CACHES if owner in ours and cache in names}
        return Entries(ours, (names - ours) & named, names - ours - named)
    if _holds_record(directory, named):
        return Entries(named | temporary, set(), names - named - temporary)
    return Entries(temporary, named - temporary, names - named - temporary)


def check_output_directory(out: str | os.PathLike, overwrite: bool = False, also: Iterable[str] = (),
                           flag: str = "--out") -> None:
    """Raise OutputDirectoryError if the rule forbids writing `out`: it is a file, it holds files of bertkit's names
    that bertkit did not write (`entries`: whatever `overwrite` says), or it holds a run and `overwrite` is off.
    No side effects."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputDirectoryError(f"{flag} {out} is a file, not a directory; choose a directory (new or empty)")
    found = entries(out, also)
    if found.foreign:
        raise OutputDirectoryError(
            f"{flag} {out} holds files that bertkit did not write ({_shown(found.foreign)}): they are not bertkit's, "
            "and a run there could write over them; choose a new or empty directory, or move them out of it")
    if found.run and not overwrite:
        signs = found.run & set(run_entries(out, (*RUN_MARKERS, *also))) or found.run
        raise OutputDirectoryError(f"{flag} {out} already holds a bertkit run or model ({_shown(signs)}); give "
                                   "--overwrite to replace it, or choose a new or empty directory")


def _delete(out: Path, names: Iterable[str]) -> list[str]:
    doomed = sorted(names)
    for name in doomed:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    return doomed


def clear_run(out: str | os.PathLike, also: Iterable[str] = ()) -> list[str]:
    """Delete what bertkit wrote into `out` (`entries`: what its manifest names, or for a run of an earlier bertkit
    the entries of bertkit's names); other files stay. Returns the names deleted."""
    return _delete(Path(out), entries(out, also).ours)


class Manifest:
    """The record of what a run wrote into its directory, kept while it holds the directory's lock.

    `begin` writes it (atomically) before the run writes anything: the entries that are bertkit's already and,
    while the run is open, those that were there and are not. `end` records as bertkit's the entries of bertkit's
    names that appeared meanwhile; a run killed before `end` leaves it open, and `entries` reads it the same way."""

    def __init__(self, directory: Path, command: str, also: Iterable[str] = ()) -> None:
        self.directory, self.command, self.also = directory, command, tuple(also)
        self.existed = (directory / MANIFEST_NAME).exists()

    def _write(self, values: dict) -> None:
        from bertkit.utils.atomic import atomic_write_text

        atomic_write_text(self.directory / MANIFEST_NAME, json.dumps(values, indent=1, ensure_ascii=False) + "\n")

    def begin(self, found: Entries) -> Manifest:
        self._write({"command": self.command, "entries": sorted(found.run),
                     "others": sorted(found.others | found.foreign),
                     "open": {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}})
        return self

    def end(self) -> None:
        ours = entries(self.directory, self.also).run
        if not ours and not self.existed:
            (self.directory / MANIFEST_NAME).unlink(missing_ok=True)  # wrote nothing: leave no trace
            return
        self._write({"command": self.command, "entries": sorted(ours)})


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
    `overwrite` delete what bertkit wrote there (`also`: the caller's own entries), unless that would delete one
    of the run's `inputs` ((flag, path) pairs: then nothing is touched); the lock is held, and the directory's
    manifest open, until the block ends. `resume` continues the run already there. Processes other than the
    `main` one of a torchrun job neither check nor lock: rank 0 does it for the job. `flag` is how messages name
    `out`."""
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
                if overwrite:
                    check_inputs_survive(out, inputs, also, flag)
                check_output_directory(out, overwrite, also, flag)
                if overwrite:
                    clear_run(out, also)
            manifest = Manifest(out, command, also).begin(entries(out, also))
            try:
                yield out
            finally:
                manifest.end()
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
    """After a run failed: remove the directories it created if it wrote nothing there but its options and
    manifest (it failed before training), so the same command can simply be run again."""
    if not created or not created[0].is_dir() or any(not path.name.endswith("_options.json")
                                                      and path.name != MANIFEST_NAME
                                                      for path in created[0].iterdir()):
        return
    for path in created[0].iterdir():
        path.unlink()
    for directory in created:
        try:
            directory.rmdir()
        except OSError:  # not empty: another process wrote there meanwhile
            return
