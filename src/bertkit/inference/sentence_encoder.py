"""A model directory's sentence vectors as the directory declares them, in one object: what
sentence-transformers' `SentenceTransformer(path).encode(texts)` is.

    encoder = SentenceEncoder.from_pretrained("m3e-small")       # a directory or a built-in name
    vectors = encoder.encode(["今天天气很好", "明天会下雨"])        # float32 (2, 512)

The pooling, the normalisation and the longest text come from the directory's sentence-transformers files
(`declared_settings`: 1_Pooling/config.json, a 2_Normalize module, sentence_bert_config.json), else [CLS], not
normalised, the model's positions; a value given to `from_pretrained` wins. `bertkit encode`, `bertkit serve` and
`bertkit evaluate --task` read a directory by the same rule, so all four give the same vectors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from bertkit.inference.encode import declared_settings, encode
from bertkit.models.sentence_files import SentenceConfig


class SentenceEncoder:
    """A text encoder, its tokenizer and the settings its vectors are made with (`SentenceConfig`)."""

    def __init__(self, model: Any, tokenizer: Any, settings: SentenceConfig) -> None:
        self.model, self.tokenizer, self.settings = model, tokenizer, settings

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, pooling: str | None = None, normalize: bool | None = None,
                        max_length: int | None = None, device: Any = None) -> SentenceEncoder:
        """The encoder of a model directory or a built-in model's name, with what the directory declares (each
        value given here wins); on `device` (None: the CPU)."""
        from bertkit.data.sources import resolve_model
        from bertkit.inference.loading import load_text_model

        model, tokenizer = load_text_model(path, "encode", device=device)
        return cls(model, tokenizer, declared_settings(resolve_model(path), pooling, normalize, max_length))

    def encode(self, texts: Sequence[str] | str, batch_size: int = 32, **options: Any) -> np.ndarray:
        """Sentence vectors, float32 (N, C) (one text: (C,)), with the encoder's settings; `options` go to
        `bertkit.inference.encode.encode` (`progress`, `dtype`, `long_inputs`, ...)."""
        s = self.settings
        return encode(self.model, self.tokenizer, texts, batch_size=batch_size, pooling=s.pooling,
                      normalize=s.normalize, max_length=s.max_seq_length, **options)
