"""The real model the attention topics look at: m3e-small (a 4-layer Chinese BERT) from the bertkit cache."""

from __future__ import annotations

import functools
import os
from pathlib import Path

DEFAULT_MODEL = "m3e-small"
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]")


def resolve_model_dir(model_dir: str | os.PathLike | None) -> Path:
    """A model directory or model name (`bertkit.data.sources.resolve_model`); None means m3e-small."""
    from bertkit.data.sources import resolve_model

    return resolve_model(DEFAULT_MODEL if model_dir is None else model_dir)


@functools.cache
def _load(path: Path, device: str | None):
    from bertkit.pictures.attention_view import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(path)
    if device is not None:
        from bertkit.utils.devices import resolve_device

        model.to(resolve_device(device))
    return model, tokenizer


def load(model_dir: str | os.PathLike | None = None, device: str | None = None):
    """(model, tokenizer) for `model_dir` (default m3e-small), loaded once per process (and device); on `device`
    (auto, cpu, cuda, cuda:N: `bertkit.utils.devices.resolve_device`), None: the CPU."""
    return _load(resolve_model_dir(model_dir).resolve(), device)
