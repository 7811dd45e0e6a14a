"""The `bertkit` command. The only package that parses arguments or prints for people.

One module per family of commands: models, data, train, predict, explain, seq2seq, vision.

Each subcommand is a pair: `_add_NAME(subparsers)` declares its arguments, `_cmd_NAME(args)` runs it.
Heavy imports (torch, the model) happen inside the `_cmd_` functions so `bertkit --help` is instant.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Iterator, Sequence

from bertkit.cli import data, explain, models, predict, seq2seq, train, vision
from bertkit.cli.common import UserError
from bertkit.data.sources import SourceError

__all__ = ["UserError", "build_parser", "main"]

COMMANDS = (models._add_info, data._add_data, data._add_vocab, train._add_pretrain, train._add_finetune,
            train._add_demo, predict._add_predict, predict._add_evaluate, predict._add_encode,
            explain._add_attention, explain._add_explain, seq2seq._add_translate_train, seq2seq._add_translate,
            seq2seq._add_lm_train, seq2seq._add_generate, vision._add_vision_train)


@contextlib.contextmanager
def _warnings_to_stderr(command: str) -> Iterator[None]:
    """Library warnings (truncation, skipped lines, unused config keys) as one line each, in the command's voice."""
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, *_, **__: print(f"bertkit {command}: warning: {message}",
                                                                file=sys.stderr)
        yield


def build_parser() -> argparse.ArgumentParser:
    from bertkit import __version__

    parser = argparse.ArgumentParser(
        prog="bertkit",
        description="BERT and the Transformer, readable and fast: tokenize, pretrain, fine-tune, explain.")
    parser.add_argument("--version", action="version", version=f"bertkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    from bertkit.training.memory import keep_freed_memory

    keep_freed_memory()  # training and batched inference alike: tensors of changing shapes, reused memory
    try:
        with _warnings_to_stderr(args.command):
            return int(args.func(args) or 0)
    except (UserError, SourceError, FileNotFoundError, ValueError) as err:
        # bertkit raises these with messages written for people (bad path, bad config, bad checkpoint, a source
        # that could not be fetched)
        print(f"bertkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bertkit {args.command}: interrupted", file=sys.stderr)
        return 130

