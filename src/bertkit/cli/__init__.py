"""The `bertkit` command. The only package that parses arguments or prints for people.

One module per family of commands: models, data, train, predict, explain, seq2seq, vision, serve.

Each subcommand is a pair: `_add_NAME(subparsers)` declares its arguments, `_cmd_NAME(args)` runs it.
Heavy imports (torch, the model) happen inside the `_cmd_` functions so `bertkit --help` is instant.

What escapes a command is sorted by `main` (docs/architecture.md, Errors): a `bertkit.errors.BertkitError` or an
OSError is the user's to fix (one line, exit status 2), a diverged run or one out of memory exits 1, Ctrl+C 130, and
anything else is a bug in bertkit (one line naming a file that keeps the traceback, exit status 3).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import pickle
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence

from bertkit.cli import data, explain, models, predict, seq2seq, serve, train, vision
from bertkit.errors import BertkitError
from bertkit.utils.visible import shorten

__all__ = ["build_parser", "main"]

COMMANDS = (models._add_info, data._add_data, data._add_vocab, data._add_prepare, train._add_pretrain,
            train._add_finetune, data._add_mine_negatives, train._add_demo, predict._add_predict,
            predict._add_evaluate, predict._add_encode,
            models._add_export, explain._add_attention, explain._add_explain, seq2seq._add_translate_train,
            seq2seq._add_translate, seq2seq._add_summarize_train, seq2seq._add_summarize, seq2seq._add_lm_train,
            seq2seq._add_generate, vision._add_vision_train, serve._add_serve)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class _VoiceHandler(logging.Handler):
    """bertkit's log records of level WARNING and above, in the command's voice."""

    def __init__(self, command: str) -> None:
        super().__init__(logging.WARNING)
        self.command = command

    def emit(self, record: logging.LogRecord) -> None:
        level = "warning" if record.levelno < logging.ERROR else "error"
        print(f"bertkit {self.command}: {level}: {_one_line(record.getMessage())}", file=sys.stderr)


@contextlib.contextmanager
def _warnings_to_stderr(command: str) -> Iterator[None]:
    """Library warnings (truncation, skipped lines, unused config keys) and bertkit's logged warnings as one line
    each, in the command's voice: no source line, no module path."""
    logger = logging.getLogger("bertkit")
    handler, propagate = _VoiceHandler(command), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with warnings.catch_warnings():
            warnings.showwarning = lambda message, *_, **__: print(
                f"bertkit {command}: warning: {_one_line(message)}", file=sys.stderr)
            yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, `bertkit COMMAND: error: ...` (`--help` shows the usage)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)\n")


def _os_error(err: OSError) -> str:
    """An OSError for people: "PATH: what went wrong" (its own message when bertkit wrote one)."""
    if err.errno is None or err.strerror is None:
        return str(err)
    where = f"{err.filename}: " if err.filename is not None else ""
    return f"{where}{err.strerror[0].lower()}{err.strerror[1:]}" + (
        f" ({os.fspath(err.filename2)})" if err.filename2 is not None else "")


def build_parser() -> argparse.ArgumentParser:
    from bertkit import __version__

    parser = _Parser(
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
    except OSError as err:  # a path that is missing, a directory, a file, not writable...
        print(f"bertkit {args.command}: error: {_os_error(err)}", file=sys.stderr)
        return 2
    except (BertkitError, pickle.UnpicklingError) as err:
        # what the user can fix, said for people (bad option, bad path, bad config, a damaged checkpoint, a source
        # that could not be fetched); a pickle refused as unsafe, or one that does not unpickle
        print(f"bertkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bertkit {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        trainer = sys.modules.get("bertkit.training.trainer")  # imported if a run trained (it needs torch)
        if trainer is not None and isinstance(err, trainer.TrainingError):
            print(f"bertkit {args.command}: error: {err}", file=sys.stderr)  # a NaN loss: the run cannot go on
            return 1
        memory = _out_of_memory(parser, args, err)
        if memory is not None:  # not a bug: what was asked of the machine does not fit it
            print(f"bertkit {args.command}: error: {memory}", file=sys.stderr)
            return 1
        return _bug(args.command, err, sys.argv[1:] if argv is None else argv)


# The options that shrink what a step or a batch holds, by their argparse names, in the order a hint names them
SMALLER = ("batch_size", "batch_tokens", "max_batch_tokens", "max_seq_length", "max_length", "max_source_length")


def _out_of_memory(parser: argparse.ArgumentParser, args: argparse.Namespace, err: BaseException) -> str | None:
    """The line for a command whose GPU (torch.OutOfMemoryError) or machine (MemoryError) ran out of memory: torch's
    first sentences, and the command's own options that ask for less; None for any other exception."""
    torch = sys.modules.get("torch")
    on_gpu = torch is not None and isinstance(err, torch.cuda.OutOfMemoryError)
    if not (on_gpu or isinstance(err, MemoryError)):
        return None
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    flags = {a.dest: max((o for o in a.option_strings if not o.startswith("--no-")), key=len, default=None)
             for a in commands[args.command]._actions}
    flags = {name: flag for name, flag in flags.items() if flag is not None}  # positionals and --no-X switches out
    if "gradient_accumulation_steps" in flags and "batch_size" in flags:
        flags["batch_size"] += f" (with {flags['gradient_accumulation_steps']} for the same batch a step)"
    smaller = [flags[name] for name in SMALLER if name in flags]
    ways = [f"a smaller {', '.join(smaller[:-1])}{' or ' if len(smaller) > 1 else ''}{smaller[-1]}"] if smaller else []
    # bf16 halves the activations, where a command sizes its work by options at all (not demo, explain); an option
    # left out may not be in args
    if ways and "bf16" in flags and not getattr(args, "bf16", False):
        ways.append(flags["bf16"])
    elif ways and "dtype" in flags and getattr(args, "dtype", None) in ("fp32", "float32"):
        ways.append(f"{flags['dtype']} bf16")
    said = _one_line(". ".join(str(err).split(". ")[:2])) if on_gpu else ""  # what it tried to allocate
    where = "the GPU" if on_gpu else "this machine"
    return f"{where} ran out of memory{f' ({said})' if said else ''}" + (f": give {', or '.join(ways)}" if ways else "")


BUG_STATUS = 3  # the exit status of a command stopped by a bug in bertkit, not by what it was given


def _bug(command: str, err: Exception, argv: Sequence[str]) -> int:
    """An exception bertkit did not raise for people (a bare ValueError from deep inside, a TypeError, an
    IndexError...): one line saying it is a bug, naming the exception and a file that keeps its traceback
    (`bertkit-crash-*.txt` in the temporary directory; the traceback goes to standard error when no file can be
    written). Exit status 3."""
    from bertkit import __version__

    what = type(err).__name__ + (f": {shorten(str(err), 200)}" if str(err).strip() else "")
    trace = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    said = f"bertkit {command}: bug: {what} (a bug in bertkit, not in what you gave it"
    try:
        fd, name = tempfile.mkstemp(prefix=f"bertkit-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as file:
            file.write(f"bertkit {__version__}, Python {sys.version.split()[0]}, {sys.platform}\n"
                       f"command: bertkit {' '.join(map(str, argv))}\n\n{trace}")
    except OSError:
        print(f"{said}; its traceback follows)", file=sys.stderr)
        print(trace, end="", file=sys.stderr)
        return BUG_STATUS
    print(f"{said}; its traceback is in {name}: please include it when you report the bug)", file=sys.stderr)
    return BUG_STATUS

