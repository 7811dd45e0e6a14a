"""A model directory (or a built-in model's name) loaded for a command: the registry of families decides whether the
command can serve it and which class its weights are; a text model comes with its tokenizer, checked against its
embeddings, an image model with its image processor.

    model, tokenizer = load_text_model("runs/ft/best", "predict")
    model, tokenizer = load_text_model("m3e-small", "encode", device="cuda")   # its weights on the GPU
    family = model_family("runs/vit/best", "attention")      # family.inputs: "text" or "images"
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bertkit.data.quality import check_tokenizer_fits
from bertkit.data.sources import resolve_model
from bertkit.data.task_kinds import TASKS, TaskKind
from bertkit.errors import InputError
from bertkit.models.registry import ModelFamily, family_for, require


def model_family(spec: str | os.PathLike, command: str) -> tuple[Path, ModelFamily]:
    """(the directory `spec` names, its family), or a clear error when `command` cannot serve that family."""
    path = resolve_model(spec)
    return path, require(path, command)


def on_device(model: Any, device: Any = None) -> Any:
    """`model` moved to `device` (a torch.device, or a spelling `bertkit.utils.devices.resolve_device` reads: auto,
    cpu, cuda, cuda:N); None leaves it where it is (the CPU, as loaded)."""
    if device is None:
        return model
    if isinstance(device, str):
        from bertkit.utils.devices import resolve_device

        device = resolve_device(device)
    return model.to(device)


def load_text_model(spec: str | os.PathLike, command: str = "predict", device: Any = None, **config_changes: Any):
    """(model in eval mode, its tokenizer) of a text model's directory or name, for `command`; on `device`
    (`on_device`: None leaves it on the CPU). The tokenizer is the kind its files hold: a BertTokenizer for
    WordPiece, a BPETokenizer for byte-level BPE (ModernBERT's own checkpoints)."""
    from bertkit.tokenizer import load_tokenizer

    path, family = model_family(spec, command)
    if family.inputs != "text":
        raise InputError(f"{path} holds a {family.name} model, which reads {family.inputs}, not text")
    config = family.load_config(path)
    model = family.load(path, config, **config_changes)
    tokenizer = load_tokenizer(path)
    check_tokenizer_fits(len(tokenizer), config.vocab_size, str(path))
    return on_device(model, device), tokenizer


def task_of_model(model: Any, purpose: str = "predict") -> TaskKind:
    """The task kind a fine-tuned model's head serves (classify for any sequence classifier): the kinds of
    bertkit.data.task_kinds name their heads, the registry gives their classes in the model's own family (a BERT's,
    a ModernBERT's)."""
    family = family_for(getattr(model.config, "model_type", "bert"))
    for kind in TASKS.values():
        if isinstance(model, tuple(family.head(name) for name in kind.heads if name in family.heads)):
            return kind
    heads = " or ".join(dict.fromkeys(family.head(kind.name).__name__ for kind in TASKS.values()
                                      if kind.name in family.heads))
    raise InputError(f"{purpose} needs a fine-tuned {heads}, not {type(model).__name__}; "
                     f"for sentence vectors, encode the texts instead (bertkit encode)")
