"""The machinery of `bertkit.pipelines.options`: a field that knows its command-line form, and the Options base.

`option(...)` is a dataclass field whose metadata is its flag, help line, choices and numeric range, and
whether it names a path (and which names it takes besides: `Names`). `Options` checks every field against its
choices and range when it is made (so the command line and the Python API refuse the same values, naming the
flag), and saves and loads itself as JSON with paths recorded relative to the run directory (or absolute), so a
run directory can be copied or moved, and names recorded as names, so a resumed run reads what the run read.
Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import DataError, InputError
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text
from bertkit.utils.ranges import check_number, stated_range


class OptionWarning(UserWarning):
    """An option value that is valid but will not do all it seems to: a name a same-named path hides, a value
    that another option makes unused. Said once, when the options are made (not again when a run resumes)."""


def warn_unused(given: str, why: str) -> None:
    """Say that an option's value (`given`: "--dupe-factor 3") is not used, and `why`."""
    warnings.warn(f"{given} is not used: {why}", OptionWarning, stacklevel=4)


@dataclass(frozen=True)
class Names:
    """The names a path option takes besides paths (presets, corpora, models, datasets), and which of the two the
    command reads when a value is both a name and a path in the working directory: the name (`first`), or the
    path. `directory`: only a directory is read as a path (a model)."""

    what: str                                # "preset", "corpus", "model", "dataset"
    known: Callable[[], Iterable[str]]
    first: bool
    directory: bool = False

    def __contains__(self, value: object) -> bool:
        return value in set(self.known())

    def path_wins(self, value: str) -> bool:
        """Whether the command reads `value` as a path where it is also a name."""
        path = Path(value)
        return not self.first and (path.is_dir() if self.directory else path.exists())


def option(default: Any = MISSING, help: str = "", *, flag: str | None = None, aliases: tuple[str, ...] = (),
           choices: tuple | None = None, metavar: str | None = None, shown: str | None = None,
           minimum: float | None = None, above: float | None = None, maximum: float | None = None,
           below: float | None = None, path: bool = False, names: Names | None = None,
           tasks: tuple[str, ...] | None = None, default_factory: Any = MISSING) -> Any:
    """A dataclass field with its command-line form: `help` (one line), `flag` (default: --the-name),
    `aliases`, `choices` (checked in Python too), `metavar`, and `shown`, what the help says the default is
    (default: the default itself; needed where None means something).

    A number's range is checked in Python too: `minimum` / `maximum` inclusive, `above` / `below` exclusive;
    a float must be finite. `path`: the value is a file or directory: a saved run records it so that the run
    directory can move (`Options.save`); `names`: the names it takes besides (a corpus, a preset), and which wins
    where a path of the same name exists too. `tasks`: the fine-tuning tasks it is for (`bertkit finetune --task`);
    given for another, it is refused (`Options.check_tasks`)."""
    metadata = {"help": help, "flag": flag, "aliases": aliases, "choices": choices, "metavar": metavar,
                "shown": shown, "minimum": minimum, "above": above, "maximum": maximum, "below": below,
                "path": path or names is not None, "names": names, "tasks": tasks}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def progress_option(what: str = "the progress bars") -> Any:
    """--no-progress, the same flag for every command that shows progress."""
    return option(True, f"hide {what}", flag="--no-progress", shown="shown")


def overwrite_option(what: str) -> Any:
    """--overwrite: replace `what` in --out. Only what bertkit wrote there is deleted (bertkit.pipelines.run_directory
    enforces it), so a user's own files in --out, or the run's own input, survive."""
    return option(False, f"replace {what} already in --out (only what bertkit wrote there is deleted)")


def flag_of(f: dataclasses.Field) -> str:
    """The command-line flag of an options field: its metadata's `flag`, else --the-field-name."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _bounds(f: dataclasses.Field) -> dict[str, Any]:
    return {key: f.metadata.get(key) for key in ("minimum", "above", "maximum", "below")}


def allowed_range(f: dataclasses.Field) -> str | None:
    """How an error states a numeric field's range ("at least 1", "in [0, 1)"), or None for no range."""
    return stated_range(**_bounds(f))


def check_range(f: dataclasses.Field, value: Any) -> None:
    """A ValueError naming the flag and its range for a number outside it (and for NaN or an infinity); a list
    option's range holds for each of its items."""
    if isinstance(value, list | tuple):
        for item in value:
            check_range(f, item)
        return
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return
    check_number(flag_of(f), value, **_bounds(f))


def reads_path(f: dataclasses.Field, value: str) -> bool:
    """Whether the command reads `value` of the path option `f` as a file or directory (not as a name, nor a path
    that is not there)."""
    names = f.metadata.get("names")
    if names is not None and value in names:
        return names.path_wins(value)
    return Path(value).exists()


def _stored_path(f: dataclasses.Field, value: str, directory: Path) -> str:
    """How a saved run records a path: relative to its directory if inside it, else absolute; a name as it is. A
    path inside the directory that reads like one of the option's names is recorded as ./NAME."""
    if not reads_path(f, value):
        return value  # a name (a corpus, a preset, a dataset) or a path the run will report
    resolved = Path(value).resolve()
    try:
        stored = str(resolved.relative_to(directory.resolve()))
    except ValueError:
        return str(resolved)
    names = f.metadata.get("names")
    return f"./{stored}" if names is not None and stored in names else stored


def _loaded_path(f: dataclasses.Field, value: str, directory: Path) -> str:
    """A recorded path as it is now: relative ones against the run's directory, wherever it is; a name stays one."""
    names = f.metadata.get("names")
    if names is not None and value in names:
        return value
    return str(directory / value) if not Path(value).is_absolute() and (directory / value).exists() else value


def _map_paths(options: dict[str, Any], cls: type, convert) -> dict[str, Any]:
    fields = {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("path")}
    return {name: (value if name not in fields or value is None else
                   [convert(fields[name], v) for v in value] if isinstance(value, list) else
                   convert(fields[name], value))
            for name, value in options.items()}


@contextmanager
def _quietly() -> Iterator[None]:
    """Options remade from a saved run, or as a resumed one: what was said when the run began is not said again."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptionWarning)
        yield


def _values(value: Any) -> list:
    return value if isinstance(value, list) else [value]


RESUME_CHANGEABLE = ("progress",)  # options a resumed run may change: they change nothing of its result


def _same_value(f: dataclasses.Field, a: Any, b: Any) -> bool:
    """Whether a typed value and a saved one agree (paths compared as the files they name)."""
    if not f.metadata.get("path") or a is None or b is None:
        return a == b
    as_list = lambda v: v if isinstance(v, list) else [v]  # noqa: E731
    return len(as_list(a)) == len(as_list(b)) and all(
        x == y or (Path(x).exists() and Path(y).exists() and Path(x).resolve() == Path(y).resolve())
        for x, y in zip(as_list(a), as_list(b)))


def _shown_value(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


@dataclass(kw_only=True)
class Options:
    """The base of every command's options: a value outside its declared choices or range is an error
    naming the flag."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            choices, value = f.metadata.get("choices"), getattr(self, f.name)
            if choices and value not in choices and not (value is None and f.default is None):  # None: unset
                raise InputError(f"{f.name} {value!r} is not one of {', '.join(map(str, choices))}")
            check_range(f, value)
        self.check_names()

    def _field(self, name: str) -> dataclasses.Field:
        return next(f for f in dataclasses.fields(self) if f.name == name)

    def flag(self, name: str) -> str:
        """The command-line flag of the option `name`."""
        return flag_of(self._field(name))

    def differs(self, name: str) -> bool:
        """Whether the option `name` has another value than its default (so it was given)."""
        f = self._field(name)
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        return getattr(self, name) != default

    def check_tasks(self, task: str) -> None:
        """Refuse the options given that are for other tasks than `task` (their `tasks`), naming them."""
        wrong: dict[tuple[str, ...], list[str]] = {}
        for f in dataclasses.fields(self):
            tasks = f.metadata.get("tasks")
            if tasks and task not in tasks and self.differs(f.name):
                wrong.setdefault(tasks, []).append(flag_of(f))
        for tasks, flags in wrong.items():
            raise InputError(f"{', '.join(flags)} {'is' if len(flags) == 1 else 'are'} for --task "
                             f"{' or '.join(tasks)}, not {task}")

    def given(self, name: str) -> str:
        """The option `name` as typed: "--dupe-factor 3"."""
        return f"{self.flag(name)} {_shown_value(getattr(self, name))}"

    def check_names(self, resuming: str | os.PathLike | None = None) -> None:
        """Say where a value that is one of its option's names is also a path in the working directory: which of
        the two the command reads (`Names`), and how to get the other. `resuming` (the run's directory): the run
        read a name that a path here would now replace, an InputError."""
        for f in dataclasses.fields(self):
            names, value = f.metadata.get("names"), getattr(self, f.name)
            if names is None or value is None:
                continue
            for v in _values(value):
                path = Path(v)
                if v not in names or path.is_absolute() or not path.exists():
                    continue
                kind = "folder" if path.is_dir() else "file"
                if not names.path_wins(v):
                    warnings.warn(f"{flag_of(f)} {v} is the {names.what} {v}; the {kind} {v} in the working "
                                  f"directory is not read (to read it, give its path: ./{v})", OptionWarning,
                                  stacklevel=4)
                elif resuming is not None:
                    raise InputError(f"the run in {resuming} read the {names.what} {v}, but here {flag_of(f)} {v} "
                                     f"would read the {kind} {v} in the working directory instead; resume it from "
                                     f"another directory, or rename the {kind}")
                else:
                    warnings.warn(f"{flag_of(f)} {v} reads the {kind} {v} in the working directory, not the "
                                  f"{names.what} {v} (to use the {names.what}, rename or move the {kind}, or run "
                                  "from another directory)", OptionWarning, stacklevel=4)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the options as JSON (atomically), so a run directory says how it was made.

        Paths are recorded relative to the file's directory when they lie inside it (`out` is then "."), else
        absolute, so the directory can be copied or moved and `load` finds them from wherever it is."""
        directory = Path(path).parent
        values = _map_paths(dataclasses.asdict(self), type(self), lambda f, v: _stored_path(f, v, directory))
        return atomic_write_text(path, json.dumps(values, indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike):
        """Options written by `save`, their relative paths resolved against the file's directory."""
        try:
            values = jsonfiles.loads(Path(path).read_text(encoding="utf-8"))
        except ValueError as err:  # not JSON, or not UTF-8: the file was damaged after the run wrote it
            raise DataError(f"{path} cannot be read as a run's options ({err})") from None
        with _quietly():
            return cls(**_map_paths(values, cls, lambda f, v: _loaded_path(f, v, Path(path).parent)))

    def resumed(self, directory: str | os.PathLike, given: dict[str, Any] | None = None):
        """These saved options as a run resumed in `directory`, wherever it now is (`out` becomes it).

        `given` are the flags typed with --resume: a resumed run continues exactly as it was started, so a flag
        that differs from the run's own value is an error naming it; only those that change nothing of the
        result (RESUME_CHANGEABLE: the progress bars) are applied."""
        given = dict(given or {})
        if given.pop("overwrite", False):
            raise InputError("--resume continues the run in its directory and --overwrite replaces it; give one")
        out = given.pop("out", None)
        if out is not None and Path(out).resolve() != Path(directory).resolve():
            raise InputError(f"--resume continues the run in {directory}; --out {out} is another directory "
                             "(leave --out out)")
        fields = {f.name: f for f in dataclasses.fields(self)}
        differ = [f"{flag_of(fields[name])} {_shown_value(value)} (the run's: {_shown_value(getattr(self, name))})"
                  for name, value in given.items()
                  if name not in RESUME_CHANGEABLE and not _same_value(fields[name], value, getattr(self, name))]
        if differ:
            raise InputError(f"--resume continues the run in {directory} with the options it was started with; "
                             f"these flags differ from them: {'; '.join(differ)}. Leave them out, or start a new "
                             "run (a new --out)")
        changes = {name: value for name, value in given.items() if name in RESUME_CHANGEABLE}
        with _quietly():
            resumed = dataclasses.replace(self, out=str(directory), **changes)
        resumed.check_names(resuming=directory)
        return resumed

    def inputs(self) -> list[tuple[str, str]]:
        """(flag, path) of each file or directory this run reads: the path options other than `out` that name
        something on disk and are read as paths (not a corpus, preset or model name)."""
        found = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("path") and f.name != "out" and value is not None:
                found += [(flag_of(f), v) for v in _values(value) if reads_path(f, v)]
        return found

    def missing_paths(self) -> list[str]:
        """The recorded inputs that are gone ("--vocab /data/vocab"): absolute paths that no longer exist."""
        gone = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("path") and value is not None:
                gone += [f"{flag_of(f)} {v}" for v in (value if isinstance(value, list) else [value])
                         if Path(v).is_absolute() and not Path(v).exists()]
        return gone
