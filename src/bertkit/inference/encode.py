"""Sentence vectors: [CLS]'s or the mean of the real tokens' last hidden states, over length-sorted batches.

    vectors = encode(model, tokenizer, ["今天天气很好", "明天会下雨"], pooling="mean", normalize=True)

`dtype="bfloat16"` or `"int8"` runs a converted copy of the model (bertkit.inference.precision); the vectors are
float32 either way. `long_inputs="chunk"` reads a text longer than the model's positions whole, in overlapping
windows whose vectors are pooled into one (long_inputs.py), instead of cutting it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.inference.batching import ChunkedRun, check_texts, encoder_of, in_chunks, input_limit
from bertkit.inference.long_inputs import check_overlap, check_pooling, pool_rows, split_rows
from bertkit.inference.precision import for_inference

POOLINGS = ("cls", "mean")


def pool(hidden: Tensor, attention_mask: Tensor, pooling: str) -> Tensor:
    """(B, T, C) hidden states -> (B, C): the [CLS] vector, or the mean over real (unpadded) tokens."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)                    # (B, T, 1)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
    raise InputError(f"pooling must be one of {POOLINGS}, not {pooling!r}")


def sentence_vectors(encoder: nn.Module, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor,
                     pooling: str, normalize: bool = False) -> Tensor:
    """(B, C) float32 sentence vectors of one padded batch: the encoder's last hidden states, pooled, normalized if
    asked. `encode` and the server (bertkit.inference.serving) both run this, so they give the same vectors."""
    hidden = encoder(input_ids, attention_mask, token_type_ids).last_hidden_state.float()
    vectors = pool(hidden, attention_mask, pooling)
    return F.normalize(vectors, dim=-1) if normalize else vectors


def encode(model: nn.Module, tokenizer: Any, texts: Sequence[str] | str, batch_size: int = 32,
           pooling: str = "cls", max_length: int | None = 512, normalize: bool = False,
           progress: bool | None = False, truncation: bool = True, dtype: str | torch.dtype | None = None,
           long_inputs: str | None = None, chunk_stride: int | None = None, chunk_pooling: str = "mean"
           ) -> np.ndarray:
    """Sentence vectors, float32 (N, C) (one text: (C,)): [CLS]'s or the mean of the real tokens' last hidden states.

    `dtype` ("float32"/"fp32", "bfloat16"/"bf16", "int8") runs a converted copy of the model (`precision.py`);
    None runs the model as it is. `progress`: a progress bar (None: for long inputs drawn to a terminal). The
    texts run CHUNK_TEXTS at a time, as `encode_stream` runs a file: the same vectors either way.

    A text longer than the model's positions (or `max_length`) is cut (`truncation`) or refused; with
    `long_inputs="chunk"` it is read in windows of that length sharing `chunk_stride` tokens (default: a quarter of
    a window), whose vectors are pooled by `chunk_pooling` ("mean", weighted by their tokens, or "first"), and
    normalized after pooling (long_inputs.py).
    """
    single = isinstance(texts, str)
    texts = check_texts([texts] if single else texts, content=False)
    vectors = np.concatenate(list(encode_stream(model, tokenizer, in_chunks(texts), total=len(texts),
                                                batch_size=batch_size, pooling=pooling, max_length=max_length,
                                                normalize=normalize, progress=progress, truncation=truncation,
                                                dtype=dtype, long_inputs=long_inputs, chunk_stride=chunk_stride,
                                                chunk_pooling=chunk_pooling)))
    return vectors[0] if single else vectors


def encode_stream(model: nn.Module, tokenizer: Any, chunks: Iterable[Sequence[str]], *, total: int | None = None,
                  batch_size: int = 32, pooling: str = "cls", max_length: int | None = 512, normalize: bool = False,
                  progress: bool | None = False, truncation: bool = True, dtype: str | torch.dtype | None = None,
                  long_inputs: str | None = None, chunk_stride: int | None = None, chunk_pooling: str = "mean"
                  ) -> Iterator[np.ndarray]:
    """The vectors of each chunk of texts, chunk by chunk, in order: a file of any length in bounded memory.

    Each chunk is tokenized, sorted by length and run in batches on its own; empty and truncated texts are counted
    over all chunks and said once, after the last. `total` (the number of texts, when known) sizes the progress bar.
    `long_inputs`, `chunk_stride`, `chunk_pooling` as in `encode`.
    """
    if pooling not in POOLINGS:
        raise InputError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
    if long_inputs not in (None, "truncate", "chunk"):
        raise InputError(f"long_inputs must be None, 'truncate' or 'chunk', not {long_inputs!r}")
    encoder = encoder_of(model)
    limit, limit_name = input_limit(encoder, max_length)
    chunked = long_inputs == "chunk"
    if chunked:
        overlap = check_overlap(chunk_stride, limit)
        check_pooling(chunk_pooling)
    encoder = for_inference(encoder, dtype)
    run = ChunkedRun(total, progress, "encode")

    def forward(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> np.ndarray:
        return sentence_vectors(encoder, input_ids, attention_mask, token_type_ids, pooling, normalize).cpu().numpy()

    def raw(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> np.ndarray:
        return sentence_vectors(encoder, input_ids, attention_mask, token_type_ids, pooling).cpu().numpy()

    for chunk in chunks:
        texts = run.check(chunk)
        if not chunked:
            rows = run.tokenize(tokenizer, texts, max_length=limit, truncation=truncation, limit_name=limit_name)
            yield np.stack(run.results(encoder, rows, forward, batch_size, tokenizer.pad_token_id))
            continue
        # tokenized whole (no limit refuses or cuts them), then each long text split into windows of `limit`
        rows = run.tokenize(tokenizer, texts, max_length=sys.maxsize, truncation=False, limit_name=limit_name)
        windows, counts = split_rows(rows, limit, overlap)
        outputs = run.results(encoder, windows, raw, batch_size, tokenizer.pad_token_id, texts=len(rows))
        vectors = torch.from_numpy(np.stack(pool_rows(outputs, windows, counts, chunk_pooling)))
        # normalized after pooling, row by row as sentence_vectors normalizes a batch
        yield (F.normalize(vectors, dim=-1) if normalize else vectors).numpy()
    run.finish()
