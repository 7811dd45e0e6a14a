"""`bertkit info`: what a model directory holds."""

from __future__ import annotations

import argparse

from bertkit.cli.common import MODEL_HELP, add_command

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
