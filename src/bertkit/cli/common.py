"""What every command module shares."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

from bertkit.errors import InputError
from bertkit.models.sentence_files import CHUNK_POOLINGS, MEAN
from bertkit.utils.devices import DEVICE_HELP
from bertkit.utils.dtypes import INT8
from bertkit.utils.ranges import out_of_range


def _numeric(convert: Callable[[str], float], kind: str, **bounds: float | None) -> Callable[[str], Any]:
    """An argparse `type`: `convert` the text, then check it against `bounds` (the one range check,
    bertkit.utils.ranges); a bad value is a one-line error naming the flag (argparse adds "argument --flag:")."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {kind}, got {text!r}") from None
        stated = out_of_range(value, **bounds)
        if stated is not None:
            raise argparse.ArgumentTypeError(f"must be {stated}, got {text}")
        return value

    parse.__name__ = convert.__name__
    return parse


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse `type` for an integer flag within [minimum, maximum]."""
    return _numeric(int, "an integer", minimum=minimum, maximum=maximum)


def number(above: float | None = None, maximum: float | None = None) -> Callable[[str], float]:
    """An argparse `type` for a finite number above `above` and at most `maximum`."""
    return _numeric(float, "a number", above=above, maximum=maximum)


def add_long_input_options(p: argparse.ArgumentParser, default: str, what_default_does: str, where: str = "") -> None:
    """--long-inputs, --chunk-stride, --chunk-pooling: what `encode` and `serve` do with a text longer than the
    model's positions (bertkit.inference.long_inputs); `where` says where chunking applies."""
    p.add_argument("--long-inputs", choices=[default, "chunk"], default=default,
                   help=f"a text longer than the model's positions: {default}: {what_default_does}; chunk: read it "
                        f"whole{where}, in overlapping windows whose vectors are pooled into one (default: {default})")
    p.add_argument("--chunk-stride", type=integer(0), metavar="N",
                   help="with --long-inputs chunk: tokens each window shares with the one before (default: a "
                        "quarter of a window)")
    p.add_argument("--chunk-pooling", choices=CHUNK_POOLINGS, default=MEAN,
                   help="with --long-inputs chunk: the windows' vectors averaged, weighted by the tokens of the "
                        "text each holds, or the first window's alone (default: mean)")


def check_long_input_options(args: argparse.Namespace) -> bool:
    """Whether the command reads long texts in windows (--long-inputs chunk); the window flags without it are an
    error, not ignored."""
    if args.long_inputs != "chunk" and (args.chunk_stride is not None or args.chunk_pooling != MEAN):
        raise InputError("--chunk-stride and --chunk-pooling are for --long-inputs chunk")
    return args.long_inputs == "chunk"


def add_device_option(p: argparse.ArgumentParser, where: str = "") -> None:
    """`--device auto|cpu|cuda|cuda:N` (bertkit.utils.devices: the one device rule), for the commands that run a
    model; `command_device(args)` resolves it. `where` says what it applies to, where not to everything."""
    p.add_argument("--device", default="auto", metavar="DEVICE", help=f"{DEVICE_HELP}{where} (default: auto)")


def command_device(args: argparse.Namespace, dtype: str | None = None) -> Any:
    """The torch device `--device` names on this machine, checked before any work: a spelling bertkit does not know
    or a GPU the machine lacks is a one-line error, and so is `dtype` int8 (Linear layers in int8, CPU kernels) on a
    GPU given by name; with auto, int8 runs where it can, on the CPU."""
    from bertkit.utils.devices import check_device, resolve_device

    if dtype == INT8 and check_device(args.device) == "auto":
        return resolve_device("cpu")
    device = resolve_device(args.device)
    if dtype == INT8 and device.type != "cpu":
        raise InputError(f"--dtype int8 runs on the CPU only; this command runs on {device} (--device "
                        f"{args.device}): give --device cpu for int8, or --dtype bf16 or fp32 on the GPU")
    return device




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
