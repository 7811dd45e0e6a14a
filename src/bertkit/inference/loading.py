"""A model directory (or a built-in model's name) loaded for a command: the registry of families decides whether the
command can serve it and which class its weights are; a text model comes with its tokenizer, checked against its
embeddings, an image model with its image processor.

    model, tokenizer = load_text_model("runs/ft/best", "predict")
    family = model_family("runs/vit/best", "attention")      # family.inputs: "text" or "images"
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bertkit.data.quality import check_tokenizer_fits
from bertkit.data.sources import resolve_model
from bertkit.models.registry import ModelFamily, require


def model_family(spec: str | os.PathLike, command: str) -> tuple[Path, ModelFamily]:
    """(the directory `spec` names, its family), or a clear error when `command` cannot serve that family."""
    path = resolve_model(spec)
    return path, require(path, command)


def load_text_model(spec: str | os.PathLike, command: str = "predict", **config_changes: Any):
    """(model in eval mode, its BertTokenizer) of a text model's directory or name, for `command`."""
    from bertkit.tokenizer import BertTokenizer

    path, family = model_family(spec, command)
    if family.inputs != "text":
        raise ValueError(f"{path} holds a {family.name} model, which reads {family.inputs}, not text")
    config = family.load_config(path)
    model = family.load(path, config, **config_changes)
    tokenizer = BertTokenizer.from_pretrained(path)
    check_tokenizer_fits(len(tokenizer), config.vocab_size, str(path))
    return model, tokenizer
