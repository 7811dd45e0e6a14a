"""The `bertkit` command. The only module that parses arguments or prints for people.

Each subcommand is a pair: `_add_NAME(subparsers)` declares its arguments, `_cmd_NAME(args)` runs it.
Heavy imports (torch, the model) happen inside the `_cmd_` functions so `bertkit --help` is instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


class UserError(Exception):
    """A problem with what the user asked for; printed as one line, exit status 2."""


# ---- info ----------------------------------------------------------------------------------------

def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="summarise a model directory: config, parameter count, file format")
    p.add_argument("model", help="a model directory (config.json + model.safetensors | pytorch_model.bin)")
    p.set_defaults(func=_cmd_info)


def _cmd_info(args: argparse.Namespace) -> int:
    from bertkit.checkpoint import describe_checkpoint

    info = describe_checkpoint(args.model)
    config = info["config"]
    print(f"model directory   {info['path']}")
    print(f"weights file      {info['weights_file']} ({info['format']}, {info['file_bytes'] / 1e6:.1f} MB)")
    print(f"tensors           {info['num_tensors']}  parameters {info['num_parameters']:,}")
    if info["prefix"]:
        print(f"task checkpoint   weights under '{info['prefix']}', heads: {', '.join(info['heads']) or '-'}")
    print(f"layers            {config.num_hidden_layers}  hidden {config.hidden_size}  "
          f"heads {config.num_attention_heads} (head size {config.head_dim})  ffn {config.intermediate_size}")
    print(f"vocab             {config.vocab_size}  positions {config.max_position_embeddings} "
          f"({config.position_embedding_type})  token types {config.type_vocab_size}")
    print(f"activation        {config.hidden_act}  layer_norm_eps {config.layer_norm_eps}")
    if config.embedding_size or config.share_layers:
        print(f"albert            embedding_size {config.embedding_size}  share_layers {config.share_layers}")
    if config.id2label:
        print(f"labels            {', '.join(config.id2label[i] for i in sorted(config.id2label))}")
    for name in info["tokenizer_files"]:
        print(f"tokenizer         {name}")
    return 0


# ---- main ----------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from bertkit import __version__

    parser = argparse.ArgumentParser(
        prog="bertkit",
        description="BERT and the Transformer, readable and fast: tokenize, pretrain, fine-tune, explain.")
    parser.add_argument("--version", action="version", version=f"bertkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_info,):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"bertkit {args.command}: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as err:
        # bertkit raises these with messages written for people (bad path, bad config, bad checkpoint)
        print(f"bertkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bertkit {args.command}: interrupted", file=sys.stderr)
        return 130

