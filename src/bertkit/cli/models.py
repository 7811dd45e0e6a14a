"""`bertkit info`: what a model directory holds; `bertkit export`: the model as an ONNX graph."""

from __future__ import annotations

import argparse

from bertkit.cli.common import MODEL_HELP, add_command
from bertkit.errors import InputError

# ---- info ----------------------------------------------------------------------------------------

def _add_info(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "info", _cmd_info)
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP + "; a directory holds config.json + model.safetensors "
                                                   "or pytorch_model.bin")


def _cmd_info(args: argparse.Namespace) -> int:
    """summarise a model directory: its family, config, parameter count, file format, what reads its inputs

    Summarise a model directory of any family bertkit knows (BERT, GPT-2, ViT, a translation model), found by the
    model_type of its config.json: the weights file, the parameters, the config, and its tokenizer (or image
    processor).
    """
    from bertkit.data.sources import resolve_model
    from bertkit.models.checkpoint import describe_checkpoint
    from bertkit.models.registry import family_of

    path = resolve_model(args.model)
    family = family_of(path)
    config = family.load_config(path)
    info = describe_checkpoint(path, family.model_class(config).base_model_prefix)
    classes = ", ".join(config.architectures) or "no class named"
    rows = [("model directory", f"{info['path']}  ({family.name}: {classes})"),
            ("weights file", f"{info['weights_file']} ({info['format']}, {info['file_bytes'] / 1e6:.1f} MB)"),
            ("tensors", f"{info['num_tensors']}  parameters {info['num_parameters']:,}")]
    if info["prefix"]:
        rows.append(("task checkpoint", f"weights under '{info['prefix']}', heads: {', '.join(info['heads']) or '-'}"))
    rows += config.summary()
    if family.inputs == "images":
        rows += _image_processor_rows(path)
    else:
        rows += [("tokenizer", name) for name in info["tokenizer_files"]]
        rows += [("tokenizer", f"{side}/ ({', '.join(n for n in _TOKENIZER_FILES if (path / side / n).exists())})")
                 for side in ("source_tokenizer", "target_tokenizer") if (path / side).is_dir()]
    for label, value in rows:
        print(f"{label:<17} {value}")
    return 0


_TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json")


def _image_processor_rows(path) -> list[tuple[str, str]]:
    from bertkit.data.images import PROCESSOR_NAME, ImageProcessor

    if not (path / PROCESSOR_NAME).is_file():
        return [("preprocessing", f"none: no {PROCESSOR_NAME}")]
    processor = ImageProcessor.from_pretrained(path)
    return [("preprocessing", f"resize to {processor.size[0]} × {processor.size[1]}, mean {processor.image_mean}, "
                              f"std {processor.image_std}")]


# ---- export --------------------------------------------------------------------------------------

def _add_export(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "export", _cmd_export)
    p.add_argument("--model", required=True, metavar="DIR|NAME", help=MODEL_HELP + "; an encoder, or a classifier "
                                                                            "of `bertkit finetune`")
    p.add_argument("--onnx", required=True, metavar="DIR", help="write DIR/model.onnx, config.json and the "
                                                                 "tokenizer's files")
    p.add_argument("--int8", action="store_true", help="also write DIR/model_int8.onnx, quantized by onnxruntime "
                                                       "(default: float32 only)")
    p.add_argument("--overwrite", action="store_true", help="replace the model already in DIR (only what bertkit wrote "
                                                            "there is deleted) (default: refuse)")


def _cmd_export(args: argparse.Namespace) -> int:
    """export an encoder or a classifier to ONNX (dynamic batch and sequence axes)

    Export a BERT or a ModernBERT to ONNX for onnxruntime: inputs input_ids, attention_mask and, for a BERT,
    token_type_ids (int64, batch x sequence, both dynamic; a ModernBERT has no segments, so its graph takes no
    token_type_ids); outputs last_hidden_state and pooler_output (an encoder) or logits (a classifier). Needs the
    onnx extra: pip install 'bertkit[onnx]'.
    """
    from pathlib import Path

    from bertkit.inference.export import export_onnx
    from bertkit.inference.loading import load_text_model, model_family
    from bertkit.pipelines.run_directory import run_directory

    source, _ = model_family(args.model, "export")
    out = Path(args.onnx)
    if out.resolve() == source.resolve():
        raise InputError(f"--onnx {out} is the model being exported; choose another directory")
    with run_directory(out, "bertkit export", overwrite=args.overwrite, inputs=[("--model", source)],
                       also=("*.onnx",), flag="--onnx"):
        model, tokenizer = load_text_model(source, "export")
        info = export_onnx(model, tokenizer, out, int8=args.int8)
    print(f"wrote {out}: {', '.join(info['files'])}")
    print(f"{info['kind']}: inputs {', '.join(info['inputs'])} (int64, batch x sequence); "
          f"outputs {', '.join(info['outputs'])} (float32)")
    return 0
