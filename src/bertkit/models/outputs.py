"""What the models return: one dataclass per kind of output, field names as transformers' ModelOutputs.

Dimension letters: B batch, T sequence (target) length, S source length, C hidden, H heads, V vocabulary,
N predicted positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor


@dataclass
class BertModelOutput:
    """An encoder's output; names as transformers' BaseModelOutputWithPooling."""

    last_hidden_state: Tensor                      # (B, T, C)
    pooler_output: Tensor | None = None            # (B, C)
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings + each layer, (B, T, C) each
    attentions: tuple[Tensor, ...] | None = None   # each layer, (B, H, T, T)


@dataclass
class BertForPreTrainingOutput:
    loss: Tensor | None = None
    prediction_logits: Tensor | None = None        # (B, T, V); with labels only the N predicted rows, (N, V)
    seq_relationship_logits: Tensor | None = None  # (B, 2)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None
    loss_sums: dict[str, Tensor] | None = None     # summed per-item losses, for exact averaging across batches


@dataclass
class MaskedLMOutput:
    loss: Tensor | None = None
    logits: Tensor | None = None                   # (B, T, V); with labels only the N predicted rows, (N, V)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None
    loss_sums: dict[str, Tensor] | None = None


@dataclass
class ClassifierOutput:
    loss: Tensor | None = None
    logits: Tensor | None = None                   # (B, num_labels) or, per token, (B, T, num_labels)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class QuestionAnsweringOutput:
    """What an extractive QA head returns; names as transformers' QuestionAnsweringModelOutput."""

    loss: Tensor | None = None
    start_logits: Tensor | None = None             # (B, T): where the answer starts
    end_logits: Tensor | None = None               # (B, T): where it ends
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class Seq2SeqLMOutput:
    """What the encoder–decoder models return; names as transformers' Seq2SeqLMOutput."""

    loss: Tensor | None
    logits: Tensor                                   # (B, T, V)
    encoder_last_hidden_state: Tensor | None = None  # (B, S, C)
    encoder_attentions: tuple[Tensor, ...] | None = None
    decoder_attentions: tuple[Tensor, ...] | None = None
    cross_attentions: tuple[Tensor, ...] | None = None


@dataclass
class BaseModelOutputWithPast:
    """What a bare decoder returns; names as transformers'."""

    last_hidden_state: Tensor                        # (B, T, C)
    past_key_values: Any = None                      # the KVCache, when decoding with one
    attentions: tuple[Tensor, ...] | None = None     # each layer, (B, H, T, S)


@dataclass
class CausalLMOutput:
    """What a decoder-only LM returns; names as transformers' CausalLMOutputWithPast."""

    loss: Tensor | None
    logits: Tensor                                   # (B, T, V)
    past_key_values: Any = None                      # the KVCache, when decoding with one
    attentions: tuple[Tensor, ...] | None = None     # each layer, (B, H, T, S)
