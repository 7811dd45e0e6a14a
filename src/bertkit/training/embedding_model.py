"""A BERT encoder trained for sentence vectors: the model `bertkit finetune --task embedding` hands the Trainer.

A batch is the texts of B rows, column by column: input_ids (K·B, T) holds the B first texts (anchors), then the
B second texts (positives), then any hard negatives; `scores` (B,) come with scored pairs. SimCSE's rows have one
column, which the model runs twice: dropout makes the two views; with cropped views (`crop`) the collator makes two
columns of each text, and they are the views. Each column runs through the encoder trimmed to
its own longest text (an anchor is not padded to its document's length), is pooled ([CLS] or the mean of the real
tokens: `bertkit.models.functional.pool_tokens`, what `encode` runs), and the loss of
`bertkit.training.embedding_losses` compares the vectors.

Under torchrun each process holds its share of the rows; their vectors are gathered (`gather_with_grad`) before the
loss, so every anchor meets the whole global batch's negatives and the loss equals one process's on the whole
batch. Each process reports that loss as `loss_sums["embedding"]` with one item (`count_items`): the trainer
divides it by the processes' count, and the gradients, summed over processes, are the whole batch's.

`cached_batch=N` is GradCache (Gao et al., 2021): the texts go through the encoder N at a time without a graph,
the loss's gradient with respect to the vectors is computed and kept, and the backward runs each mini-batch again
with its graph (the same dropout: its random state is kept) and back-propagates the kept gradient into it. Memory
then holds one mini-batch's graph, whatever the batch: a batch of 1,024 negatives on a laptop, with the gradients
of the uncached loss.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from bertkit.data.embedding_data import crop_view
from bertkit.errors import InputError
from bertkit.models.bert.modeling import BertModel
from bertkit.models.functional import pool_tokens
from bertkit.models.sentence_files import (
    TRAINING_POOLING,
    SentenceConfig,
    check_sentence_pooling,
    write_sentence_config,
)
from bertkit.training.distributed import gather_with_grad
from bertkit.training.embedding_losses import LOSSES, TEMPERATURE, at_least_float32, embedding_loss

LOSS_TERM = "embedding"


@dataclass(frozen=True)
class EmbeddingSettings:
    """How the vectors are made and trained: the loss, its temperature, the pooling, and the output's files."""

    loss: str                                   # one of LOSSES
    pooling: str = TRAINING_POOLING             # sentence_files.POOLINGS
    normalize: bool = False                     # the saved model declares unit vectors (2_Normalize)
    temperature: float = TEMPERATURE
    symmetric: bool = False                     # infonce both ways
    columns: int = 2                            # texts per row: 1 (simcse), 2 (pairs, scored, simcse's cropped
                                                # views), more (negatives)
    cached_batch: int | None = None             # texts per encoder pass of the cached loss; None: uncached
    max_seq_length: int | None = None           # the length the saved model declares

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise InputError(f"loss must be one of {', '.join(LOSSES)}, not {self.loss!r}")
        check_sentence_pooling(self.pooling)
        if not self.temperature > 0:
            raise InputError(f"temperature must be above 0, got {self.temperature}")
        if self.cached_batch is not None and self.cached_batch < 1:
            raise InputError(f"cached_batch must be at least 1, got {self.cached_batch}")


@dataclass
class EmbeddingOutput:
    loss: Tensor
    loss_sums: dict[str, Tensor]


def count_items(batch: dict[str, Any]) -> dict[str, int]:
    """The Trainer's item counts: one loss per process and step, whatever its rows (see the module's docstring)."""
    return {LOSS_TERM: 1}


class EmbeddingCollator:
    """Features -> a batch of the model's inputs: every feature's texts (`texts`: token ids, anchor first) column by
    column, padded to the longest, and `score` where the rows are scored pairs.

    `crop=(low, high)` (SimCSE with cropped views) makes two columns of each feature's one text: two random spans
    (`crop_view`), drawn from the trainer's seed of the example: the same seed crops a run the same way.
    Otherwise the trainer's seeds are not needed: the only randomness is dropout's."""

    def __init__(self, pad_token_id: int, crop: Sequence[float] | None = None) -> None:
        self.pad_token_id = pad_token_id
        self.crop = tuple(crop) if crop is not None else None

    def __call__(self, features: Sequence[dict[str, Any]], seeds: Sequence[int] | None = None
                 ) -> dict[str, Tensor]:
        if not features:
            raise ValueError("cannot collate an empty batch")
        if self.crop is not None:
            # (without the trainer's seeds, e.g. a batch made by hand, the crops are drawn afresh)
            rngs = [random.Random(None if seeds is None else seeds[j]) for j in range(len(features))]
            views = [[crop_view(f["texts"][0], *self.crop, rng) for _ in range(2)] for f, rng in zip(features, rngs)]
            texts = [view[k] for k in range(2) for view in views]
        else:
            columns = len(features[0]["texts"])
            texts = [feature["texts"][k] for k in range(columns) for feature in features]
        T = max(len(ids) for ids in texts)
        input_ids = torch.full((len(texts), T), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(texts), T), dtype=torch.long)
        for row, ids in enumerate(texts):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            attention_mask[row, :len(ids)] = 1
        batch = {"input_ids": input_ids, "attention_mask": attention_mask,
                 "token_type_ids": torch.zeros_like(input_ids)}
        if features[0].get("score") is not None:
            batch["scores"] = torch.tensor([feature["score"] for feature in features], dtype=torch.float32)
        return batch


Chunk = tuple[Tensor, Tensor, Tensor]  # input_ids, attention_mask, token_type_ids of some rows, trimmed


def trimmed(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Chunk:
    """The rows cut to their longest text: the padding no row of them needs is not run."""
    length = max(1, int(attention_mask.sum(1).max()))
    return input_ids[:, :length], attention_mask[:, :length], token_type_ids[:, :length]


class SentenceEmbeddingModel(nn.Module):
    """`encoder` (a BertModel) with a pooling and a loss; saves as a sentence-transformers directory."""

    def __init__(self, encoder: BertModel, settings: EmbeddingSettings) -> None:
        super().__init__()
        self.encoder, self.settings = encoder, settings
        # The pooler makes no sentence vector here: it is kept (and saved) as it came, and held, so that no process
        # waits for its gradient.
        if encoder.pooler is not None:
            encoder.pooler.requires_grad_(False)

    @property
    def config(self):
        return self.encoder.config

    @property
    def runs_forward_in_backward(self) -> bool:
        """The cached loss runs the encoder again in its backward (the Trainer then averages gradients itself)."""
        return self.settings.cached_batch is not None

    # ---- vectors ---------------------------------------------------------------------------------

    def embed(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
        """(N, T) texts -> (N, C) sentence vectors (float32 at least), pooled as the saved model declares."""
        hidden = self.encoder(input_ids, attention_mask, token_type_ids).last_hidden_state
        return pool_tokens(at_least_float32(hidden), attention_mask, self.settings.pooling)

    def _texts(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> tuple[Chunk, int]:
        """All texts of the batch as encoder rows (SimCSE's twice: the two views), and the rows per column."""
        if self.settings.loss == "simcse" and self.settings.columns == 1:
            input_ids, attention_mask, token_type_ids = (torch.cat([x, x]) for x in (input_ids, attention_mask,
                                                                                     token_type_ids))
            return (input_ids, attention_mask, token_type_ids), input_ids.size(0) // 2
        if input_ids.size(0) % self.settings.columns:
            raise ValueError(f"{input_ids.size(0)} texts are not rows of {self.settings.columns} columns")
        return (input_ids, attention_mask, token_type_ids), input_ids.size(0) // self.settings.columns

    def _loss(self, vectors: Tensor, rows: int, scores: Tensor | None) -> Tensor:
        """The loss of this process's vectors (K·rows, C), column by column, over every process's rows."""
        columns = vectors.view(-1, rows, vectors.size(-1))                       # (K, rows, C)
        gathered = torch.stack([gather_with_grad(column) for column in columns])  # (K, B, C)
        if scores is not None:
            scores = gather_with_grad(scores)
        s = self.settings
        return embedding_loss(s.loss, gathered, scores, s.temperature, s.symmetric)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None,
                scores: Tensor | None = None) -> EmbeddingOutput:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        texts, rows = self._texts(input_ids, attention_mask, token_type_ids)
        if self.settings.cached_batch is None or not torch.is_grad_enabled():
            # one encoder pass per column, each trimmed to its own longest text
            vectors = torch.cat([self.embed(*trimmed(*(x[k:k + rows] for x in texts)))
                                 for k in range(0, texts[0].size(0), rows)])
            loss = self._loss(vectors, rows, scores)
        else:
            loss = self._cached_loss(texts, rows, scores)
        return EmbeddingOutput(loss, {LOSS_TERM: loss})

    # ---- the cached loss -------------------------------------------------------------------------

    def _chunks(self, texts: Chunk) -> list[Chunk]:
        N = self.settings.cached_batch
        return [trimmed(*(x[i:i + N] for x in texts)) for i in range(0, texts[0].size(0), N)]

    def _cached_loss(self, texts: Chunk, rows: int, scores: Tensor | None) -> Tensor:
        """The loss as a leaf whose backward runs the encoder again, mini-batch by mini-batch (GradCache)."""
        chunks = self._chunks(texts)
        states, parts = [], []
        with torch.no_grad():
            for chunk in chunks:
                states.append(_random_state(chunk[0].device))
                parts.append(self.embed(*chunk))
        vectors = torch.cat(parts).requires_grad_()
        loss = self._loss(vectors, rows, scores)
        # the gradient with respect to the vectors, now: under torchrun its gathering is a collective every process
        # takes part in here, in the same order
        (vector_grad,) = torch.autograd.grad(loss, vectors)
        cached = loss.detach().requires_grad_()
        autocast = (torch.is_autocast_enabled(vectors.device.type), torch.get_autocast_dtype(vectors.device.type))
        sizes = [chunk[0].size(0) for chunk in chunks]

        def backward(grad: Tensor) -> None:
            # the trainer's backward reached the loss with `grad` (its scale): run each mini-batch again, with its
            # graph and its dropout, and send its share of the kept gradient into the encoder
            for chunk, state, chunk_grad in zip(chunks, states, vector_grad.split(sizes)):
                # (autograd runs hooks with gradients off, and outside the forward's autocast: both are set again)
                with torch.random.fork_rng(devices=_cuda_devices(chunk[0].device)), torch.enable_grad():
                    _set_random_state(state, chunk[0].device)
                    with torch.autocast(vectors.device.type, dtype=autocast[1], enabled=autocast[0]):
                        again = self.embed(*chunk)
                    again.backward(chunk_grad * grad)

        cached.register_hook(backward)
        return cached

    # ---- saving ----------------------------------------------------------------------------------

    def sentence_config(self) -> SentenceConfig:
        s = self.settings
        return SentenceConfig(s.pooling, s.normalize, s.max_seq_length or self.config.max_position_embeddings)

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """The encoder as a BERT model directory (transformers and bertkit load it as BertModel), with
        sentence-transformers' files declaring its pooling and normalisation."""
        path = self.encoder.save_pretrained(path)
        write_sentence_config(path, self.sentence_config(), self.config.hidden_size)
        return path

    def load_weights(self, path: str | os.PathLike, allow_fresh_head: bool = False) -> list[str]:
        return self.encoder.load_weights(path, allow_fresh_head=allow_fresh_head)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, settings: EmbeddingSettings) -> SentenceEmbeddingModel:
        return cls(BertModel.from_pretrained(path), settings)


def _cuda_devices(device: torch.device) -> Sequence[int]:
    return [device.index or 0] if device.type == "cuda" else []


def _random_state(device: torch.device) -> tuple[Tensor, Tensor | None]:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_random_state(state: tuple[Tensor, Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)
