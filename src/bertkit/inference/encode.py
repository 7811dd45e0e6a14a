"""Sentence vectors: [CLS]'s or the mean of the real tokens' last hidden states, over length-sorted batches.

    vectors = encode(model, tokenizer, ["今天天气很好", "明天会下雨"], pooling="mean", normalize=True)

`dtype="bfloat16"` or `"int8"` runs a converted copy of the model (bertkit.inference.precision); the vectors are
float32 either way. `long_inputs="chunk"` reads a text longer than the model's positions whole, in overlapping
windows whose vectors are pooled into one (long_inputs.py), instead of cutting it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.inference.batching import AUTO, ChunkedRun, check_texts, encoder_of, in_chunks, input_limit
from bertkit.inference.long_inputs import check_overlap, check_pooling, pool_rows, split_rows
from bertkit.inference.machine import native_bfloat16
from bertkit.inference.precision import for_inference, quantize_int8
from bertkit.models.functional import pool_tokens
from bertkit.models.sentence_files import (
    DEFAULT_POOLING,
    MEAN,
    SentenceConfig,
    check_sentence_pooling,
    read_sentence_config,
)
from bertkit.utils.dtypes import BFLOAT16, FLOAT32, INT8


def declared_settings(path: str | os.PathLike, pooling: str | None = None, normalize: bool | None = None,
                      max_length: int | None = None) -> SentenceConfig:
    """The pooling, normalisation and longest text (tokens) to encode a model directory's texts with: each value
    given, else what the directory declares in sentence-transformers' files (`bertkit.models.sentence_files`: so
    bertkit gives the vectors sentence-transformers gives), else [CLS], not normalised, the model's positions."""
    declared = read_sentence_config(path)
    return SentenceConfig(pooling or declared.pooling or DEFAULT_POOLING,
                          declared.normalize if normalize is None else normalize,
                          max_length or declared.max_seq_length)


# The BLAS under torch multiplies a matrix of fewer than 4 rows (B x T tokens) by another kernel than a taller one,
# which rounds differently: a lone text of one or two tokens would get a vector a few 1e-6 off its vector in a batch.
MIN_ROWS = 8


def at_least_rows(encoder: nn.Module, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """The batch padded (masked: the vectors do not change) to at least MIN_ROWS tokens in all, where the model's
    positions allow, so even a lone short text runs through the kernels a batch runs through."""
    B, T = input_ids.shape
    extra = -(-MIN_ROWS // B) - T
    positions = getattr(getattr(encoder, "config", None), "max_position_embeddings", 0)
    if extra <= 0 or T + extra > positions:
        return input_ids, attention_mask, token_type_ids
    return F.pad(input_ids, (0, extra)), F.pad(attention_mask, (0, extra)), F.pad(token_type_ids, (0, extra))


def sentence_vectors(encoder: nn.Module, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor,
                     pooling: str, normalize: bool = False) -> Tensor:
    """(B, C) float32 sentence vectors of one padded batch: the encoder's last hidden states, pooled, normalized if
    asked. `encode` and the server (bertkit.inference.serving) both run this, so they give the same vectors."""
    input_ids, attention_mask, token_type_ids = at_least_rows(encoder, input_ids, attention_mask, token_type_ids)
    hidden = encoder(input_ids, attention_mask, token_type_ids).last_hidden_state.float()
    vectors = pool_tokens(hidden, attention_mask, pooling)
    return F.normalize(vectors, dim=-1) if normalize else vectors


def encode(model: nn.Module, tokenizer: Any, texts: Sequence[str] | str, batch_size: int = 32,
           pooling: str = DEFAULT_POOLING, max_length: int | None = 512, normalize: bool = False,
           progress: bool | None = False, truncation: bool = True, dtype: str | torch.dtype | None = None,
           long_inputs: str | None = None, chunk_stride: int | None = None, chunk_pooling: str = MEAN,
           batch_tokens: int | str | None = AUTO) -> np.ndarray:
    """Sentence vectors, float32 (N, C) (one text: (C,)): [CLS]'s or the mean of the real tokens' last hidden states.

    `dtype` ("float32"/"fp32", "bfloat16"/"bf16", "int8") runs a converted copy of the model (`precision.py`);
    None runs the model as it is. `progress`: a progress bar (None: for long inputs drawn to a terminal). The
    texts run CHUNK_TEXTS at a time, as `encode_stream` runs a file: the same vectors either way.

    A text longer than the model's positions (or `max_length`) is cut (`truncation`) or refused; with
    `long_inputs="chunk"` it is read in windows of that length sharing `chunk_stride` tokens (default: a quarter of
    a window), whose vectors are pooled by `chunk_pooling` ("mean", weighted by their tokens, or "first"), and
    normalized after pooling (long_inputs.py).

    `batch_tokens`: a batch of short texts grows past `batch_size` while its padded tokens stay within this many;
    "auto" (the default): `utils.constants.GPU_BATCH_TOKENS` on a GPU, where a small batch leaves it waiting on the
    host, and batches of `batch_size` on the CPU; None: always `batch_size`.
    """
    single = isinstance(texts, str)
    texts = check_texts([texts] if single else texts, content=False)
    vectors = np.concatenate(list(encode_stream(model, tokenizer, in_chunks(texts), total=len(texts),
                                                batch_size=batch_size, pooling=pooling, max_length=max_length,
                                                normalize=normalize, progress=progress, truncation=truncation,
                                                dtype=dtype, long_inputs=long_inputs, chunk_stride=chunk_stride,
                                                chunk_pooling=chunk_pooling, batch_tokens=batch_tokens)))
    return vectors[0] if single else vectors


def encode_stream(model: nn.Module, tokenizer: Any, chunks: Iterable[Sequence[str]], *, total: int | None = None,
                  batch_size: int = 32, pooling: str = DEFAULT_POOLING, max_length: int | None = 512,
                  normalize: bool = False,
                  progress: bool | None = False, truncation: bool = True, dtype: str | torch.dtype | None = None,
                  long_inputs: str | None = None, chunk_stride: int | None = None, chunk_pooling: str = MEAN,
                  batch_tokens: int | str | None = AUTO) -> Iterator[np.ndarray]:
    """The vectors of each chunk of texts, chunk by chunk, in order: a file of any length in bounded memory.

    Each chunk is tokenized, sorted by length and run in batches on its own; empty and truncated texts are counted
    over all chunks and said once, after the last. `total` (the number of texts, when known) sizes the progress bar.
    `long_inputs`, `chunk_stride`, `chunk_pooling`, `batch_tokens` as in `encode`.
    """
    check_sentence_pooling(pooling)
    if long_inputs not in (None, "truncate", "chunk"):
        raise InputError(f"long_inputs must be None, 'truncate' or 'chunk', not {long_inputs!r}")
    encoder = encoder_of(model)
    limit, limit_name = input_limit(encoder, max_length)
    chunked = long_inputs == "chunk"
    if chunked:
        overlap = check_overlap(chunk_stride, limit)
        check_pooling(chunk_pooling)
    encoder = for_inference(encoder, dtype)
    run = ChunkedRun(total, progress, "encode", batch_tokens)

    # (B, C) vectors where the model computed them: `run_sorted` reads a GPU's back while the next batch runs
    def forward(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
        return sentence_vectors(encoder, input_ids, attention_mask, token_type_ids, pooling, normalize)

    def raw(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
        return sentence_vectors(encoder, input_ids, attention_mask, token_type_ids, pooling)

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


# The least cosine between a format's sentence vectors and float32's on PROBE_TEXTS for `choose_dtype` to take it.
MIN_COSINE = 0.999
# Sentences of the kinds a served model meets (English, Chinese, mixed, short and long), for `choose_dtype`.
PROBE_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "How do I reset my password if I no longer have access to my email account?",
    "Transformers replaced recurrent networks because attention relates every token to every other one at once.",
    "Revenue grew 12% year over year, driven by strong demand in the Asia-Pacific region and new subscriptions.",
    "ok",
    "Paris is the capital and most populous city of France, with an estimated population of two million.",
    "今天天气很好，我们去公园散步吧。",
    "央行宣布下调存款准备金率0.5个百分点，释放长期资金约一万亿元。",
    "这部电影的剧情很一般，但是演员的表演非常出色，值得一看。",
    "北京大学是中国最早的国立综合性大学之一。",
    "好",
    "BERT 模型在 2018 年发布，使用了 masked language model 和 next sentence prediction 两个预训练任务。",
    "Machine learning models can be quantized to int8 to run faster on CPUs with VNNI instructions.",
    "请问从上海到杭州的高铁大概需要多长时间？",
    "She sells sea shells by the sea shore, and the shells she sells are surely sea shells.",
    "深度学习的发展离不开大规模数据和强大的计算能力。",
)


def choose_dtype(model: nn.Module, tokenizer, pooling: str = MEAN) -> tuple[str, str]:
    """(dtype, why): the fastest number format for inference on this machine whose sentence vectors stay within
    cosine MIN_COSINE of float32's on PROBE_TEXTS. bfloat16 where the model's device computes it natively (a CPU
    with AVX-512 BF16 or AMX, a GPU of compute capability 8.0 on); else, on the CPU, int8 where the model passes the
    check (faster than float32 with VNNI, and with AVX2 alone too); else float32. `model`: the encoder whose
    sentence vectors are compared."""
    device = next(model.parameters()).device
    if native_bfloat16(device):
        return BFLOAT16, f"this {'GPU' if device.type == 'cuda' else device.type.upper()} computes bfloat16 natively"
    if device.type != "cpu":
        return FLOAT32, f"int8 runs on CPU only, this model is on {device}"
    exact = encode(model, tokenizer, list(PROBE_TEXTS), pooling=pooling, normalize=True)
    int8 = encode(quantize_int8(model), tokenizer, list(PROBE_TEXTS), pooling=pooling, normalize=True)
    cosine = float((exact * int8).sum(1).min())
    if cosine >= MIN_COSINE:
        return INT8, f"no native bfloat16; int8's vectors are within cosine {cosine:.4f} of float32's"
    return FLOAT32, (f"no native bfloat16, and int8's vectors are only within cosine {cosine:.4f} of float32's "
                       f"(below {MIN_COSINE})")
