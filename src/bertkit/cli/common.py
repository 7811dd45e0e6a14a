"""What every command module shares."""

from __future__ import annotations

import argparse
import inspect
import math
from collections.abc import Callable
from typing import Any


class UserError(Exception):
    """A problem with what the user asked for; printed as one line, exit status 2."""


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse `type` for an integer flag within [minimum, maximum]: a bad value is a one-line error
    naming the flag (argparse adds "argument --flag:")."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            stated = (f"in [{minimum}, {maximum}]" if minimum is not None and maximum is not None else
                      f"at least {minimum}" if minimum is not None else f"at most {maximum}")
            raise argparse.ArgumentTypeError(f"must be {stated}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def number(above: float | None = None, maximum: float | None = None) -> Callable[[str], float]:
    """An argparse `type` for a finite number above `above` and at most `maximum`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value) or (above is not None and value <= above) or (
                maximum is not None and value > maximum):
            stated = " ".join(part for part in ("a finite number", f"above {above}" if above is not None else "",
                                                f"at most {maximum}" if maximum is not None else "") if part)
            raise argparse.ArgumentTypeError(f"must be {stated}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def shorten(text: str, width: int = 70) -> str:
    """One line of at most `width` characters, with an ellipsis when cut."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _model_help() -> str:
    from bertkit.data.sources import model_names

    return f"a model directory, or a model name ({', '.join(model_names())})"


MODEL_HELP = _model_help()  # what every --model takes (bertkit.data.sources.resolve_model)


def add_command(sub: argparse._SubParsersAction, name: str, run: Callable[[argparse.Namespace], int],
                **parser_options: Any) -> argparse.ArgumentParser:
    """Subcommand `name`, run by `run`: the first paragraph of run's docstring is its one-line help in
    `bertkit --help`, the rest its description in `bertkit NAME --help`."""
    summary, _, details = inspect.getdoc(run).partition("\n\n")
    summary = " ".join(summary.split())
    parser = sub.add_parser(name, help=summary, description=details or summary, **parser_options)
    parser.set_defaults(func=run)
    return parser
