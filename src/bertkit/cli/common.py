"""What every command module shares."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any


class UserError(Exception):
    """A problem with what the user asked for; printed as one line, exit status 2."""


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
