"""`bertkit info`: what a model directory holds; `bertkit export`: the model as an ONNX graph."""

from __future__ import annotations

import argparse

from bertkit.cli.common import MODEL_HELP, UserError, add_command

# ---- info ----------------------------------------------------------------------------------------

def _add_info(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "info", _cmd_info)
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP + "; a directory holds config.json + model.safetensors "
                                                   "or pytorch_model.bin")


def _cmd_info(args: argparse.Namespace) -> int:
    """summarise a model directory: config, parameter count, file format"""
    from bertkit.checkpoint import describe_checkpoint
    from bertkit.data.sources import resolve_model
    from bertkit.pipelines.vision import is_image_model

    path = resolve_model(args.model)
    if is_image_model(path):
        from bertkit.cli.vision import image_model_info

        return image_model_info(path)
    info = describe_checkpoint(path)
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

    Export a model to ONNX for onnxruntime: inputs input_ids, attention_mask and token_type_ids (int64, batch x
    sequence, both dynamic); outputs last_hidden_state and pooler_output (an encoder) or logits (a classifier).
    Needs the onnx extra: pip install 'bertkit[onnx]'.
    """
    from pathlib import Path

    from bertkit.data.sources import resolve_model
    from bertkit.export import export_onnx
    from bertkit.pipelines.predict import load_model
    from bertkit.run_directory import run_directory

    source, out = Path(resolve_model(args.model)), Path(args.onnx)
    if out.resolve() == source.resolve():
        raise UserError(f"--onnx {out} is the model being exported; choose another directory")
    with run_directory(out, "bertkit export", overwrite=args.overwrite, inputs=[("--model", source)],
                       also=("*.onnx",), flag="--onnx"):
        model, tokenizer = load_model(source)
        info = export_onnx(model, tokenizer, out, int8=args.int8)
    print(f"wrote {out}: {', '.join(info['files'])}")
    print(f"{info['kind']}: inputs {', '.join(info['inputs'])} (int64, batch x sequence); "
          f"outputs {', '.join(info['outputs'])} (float32)")
    return 0
