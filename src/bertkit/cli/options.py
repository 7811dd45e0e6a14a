"""Command-line arguments generated from an options dataclass (`bertkit.pipelines.options`): one flag per field.

The flag is `--the-field-name` unless the field's metadata names another (aliases too); the type, the
default and the choices are the field's; the help line is the field's, ending in its default. A bool
that defaults to False is a switch (`--bf16`), one that defaults to True is turned off by its flag
(`--no-progress`), one that defaults to None takes `--x` / `--no-x`.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

from bertkit.errors import InputError
from bertkit.pipelines.option_fields import flag_of


def _flags(f: dataclasses.Field) -> list[str]:
    return [flag_of(f), *f.metadata.get("aliases", ())]


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _shown(f: dataclasses.Field, kind: Any) -> str:
    """How the help line states the default."""
    if f.metadata.get("shown"):
        return f.metadata["shown"]
    default = _default(f)
    if kind is bool:
        return "on" if default else "off"
    return " ".join(map(str, default)) if isinstance(default, list) else str(default)


def _fields(options_class: type) -> list[dataclasses.Field]:
    """The class's own fields first (what the command is about), then those every training command shares."""
    shared = {f.name for base in options_class.__mro__[1:] if dataclasses.is_dataclass(base)
              for f in dataclasses.fields(base)}
    fields = dataclasses.fields(options_class)
    return sorted(fields, key=lambda f: (f.name in shared, fields.index(f)))


def add_options(parser: argparse.ArgumentParser, options_class: type, *, required: str | None = None) -> None:
    """One argument per field of `options_class`; fields without a default are required flags, unless
    `required` says when they are (then the command checks them with `missing_flags`)."""
    hints = typing.get_type_hints(options_class)
    for f in _fields(options_class):
        kind, many = hints[f.name], False
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
            kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
        if typing.get_origin(kind) is list:
            kind, many = typing.get_args(kind)[0], True
        stated = (required or "required") if _required(f) else f"default: {_shown(f, kind)}"
        help_line = f"{f.metadata.get('help', '')} ({stated})".replace("%", "%%")
        # No argparse default: a flag the user did not type is absent from the namespace, so `given_options`
        # tells typed values from defaults (a recipe's values, a resumed run's options) and the dataclass
        # supplies the rest.
        common: dict[str, Any] = dict(dest=f.name, help=help_line, default=argparse.SUPPRESS)
        if kind is bool:
            default = _default(f)
            action = (argparse.BooleanOptionalAction if default is None else
                      "store_false" if default else "store_true")
            parser.add_argument(*_flags(f), action=action, **common)
            continue
        if f.metadata.get("metavar"):
            common["metavar"] = f.metadata["metavar"]
        if f.metadata.get("choices"):
            common["choices"] = list(f.metadata["choices"])
        parser.add_argument(*_flags(f), type=kind, nargs="+" if many else None,
                            required=_required(f) and required is None, **common)


def given_options(options_class: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of `options_class` whose flags the user typed, with their values."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(options_class) if hasattr(args, f.name)}


def missing_flags(options_class: type, args: argparse.Namespace, base: dict[str, Any] | None = None) -> list[str]:
    """The flags of required fields that neither `args` nor `base` gives."""
    given = {**(base or {}), **given_options(options_class, args)}
    return [_flags(f)[0] for f in _fields(options_class) if _required(f) and given.get(f.name) is None]


def options_from_args(options_class: type, args: argparse.Namespace, base: dict[str, Any] | None = None) -> Any:
    """The options dataclass filled from the typed flags over `base` (e.g. a recipe's values) over the
    dataclass defaults (a value it refuses is a ValueError naming it)."""
    missing = missing_flags(options_class, args, base)
    if missing:
        raise InputError(f"give {', '.join(missing)}")
    return options_class(**{**(base or {}), **given_options(options_class, args)})
