"""The errors bertkit raises for what its user can fix: one family, importable by every layer.

`BertkitError` is the base; each kind below also subclasses the builtin exception it stands for, so
`except ValueError` (or `except RuntimeError` for a source) catches it as before. Its message is written for
people: the command line prints it as one line, `bertkit COMMAND: error: MESSAGE`, and exits with status 2.

- `InputError` (a ValueError): an argument, option, text, label, file name or value the user gave that bertkit
  cannot use ("--batch-size must be at least 1, got 0", "input file x is a directory").
- `ConfigError` (a ValueError): a model configuration no model can be built from (a config.json, a preset's
  values).
- `DataError` (a ValueError): a file, token store, checkpoint or dataset that is damaged, incomplete or not of the
  kind asked for ("cannot read weights file x: it is truncated or corrupt").
- `SourceError` (a RuntimeError): a named source that could not be fetched (pip or the index failed, a hash
  differs).

A package's own error classes (`StoreError`, `CheckpointError`, `OutputDirectoryError`, ...) subclass one of these.
An operating-system error about a path the user gave (`FileNotFoundError`, `IsADirectoryError`, ...) is the user's
to fix too, and stays the OSError it is. Anything else escaping a command (a bare ValueError from deep inside,
a TypeError, an IndexError) is a bug in bertkit: the command line says so, keeps the traceback in a file, and exits
with status 3.
"""

from __future__ import annotations

__all__ = ["BertkitError", "ConfigError", "DataError", "InputError", "SourceError"]


class BertkitError(Exception):
    """Something the user can fix; the message says what, in one line for people."""


class InputError(BertkitError, ValueError):
    """An argument, option, text, label, file name or value the user gave that bertkit cannot use."""


class ConfigError(BertkitError, ValueError):
    """A configuration value that no model can be built from."""


class DataError(BertkitError, ValueError):
    """A file, token store, checkpoint or dataset that is damaged, incomplete, or not of the kind asked for."""


class SourceError(BertkitError, RuntimeError):
    """A source could not be fetched: unknown name, pip or the index failed, or a hash differs."""
