"""A pretrained BERT as the encoder of an encoder–decoder: the warm start of "Leveraging Pre-trained Checkpoints for
Sequence Generation Tasks" (Rothe et al., 2020), under the Transformer decoder of transformer.py, with a copy
mechanism (the pointer-generator of See et al., 2017).

The encoder is a `BertModel` (e.g. m3e-small); the decoder reads its last hidden states through cross-attention.
The decoder has its own vocabulary (the target side's, usually much smaller than BERT's: a title uses a few thousand
characters, and the output layer over 21,128 would cost more than the decoder itself); its embedding rows start as
the encoder's embeddings of the same tokens, and the output layer is tied to them.

Copying: a summary repeats much of its source, so the next-token distribution mixes generating and copying,

    P(w) = g · softmax(W h)[w] + (1 - g) · Σ_{i: source_i = w} a_i,     g = σ(w_g · h),

with a = softmax(q(h) · k(memory)ᵀ / √C) an attention over the source positions. `source_to_target` maps each
encoder token id to the decoder's id of the same token ([UNK] where the target vocabulary lacks it). The model
returns log P as its logits, so the loss, greedy and beam search take it unchanged (log_softmax(log P) = log P).

`forward` takes `encoder_hidden_states` in place of running the encoder: a frozen encoder's states, computed once
per source, make training the decoder cheap.

Dimension letters: B batch, S source length, T target length, C d_model, V target vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.models.configuration import ACTIVATIONS, ConfigError
from bertkit.models.functional import causal_mask_bias
from bertkit.models.generation import DecodingState, KVCache
from bertkit.models.outputs import Seq2SeqLMOutput
from bertkit.models.seq2seq.configuration import Seq2SeqConfig
from bertkit.models.seq2seq.encoder_decoder import Seq2SeqPreTrainedModel
from bertkit.models.seq2seq.transformer import TransformerDecoding, TransformerStack, init_transformer_weights


@dataclass
class BertSeq2SeqConfig(Seq2SeqConfig):
    """A BERT encoder (its BertConfig under `encoder`) and a Transformer decoder of d_model = its hidden size."""

    model_type = "bertkit-bert-seq2seq"
    family = "BERT encoder-decoder"

    architecture: str = "bert-encoder"
    encoder: dict[str, Any] = field(default_factory=dict)   # the encoder's config.json
    copy_attention: bool = True                              # the pointer-generator's copying
    unk_token_id: int = 1                                    # the target id of a source token it lacks

    @property
    def encoder_config(self) -> BertConfig:
        return BertConfig.from_dict(self.encoder)

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""
        if self.architecture != "bert-encoder":
            raise ConfigError(f"architecture must be 'bert-encoder', got {self.architecture!r}")
        if not self.encoder:
            raise ConfigError("encoder must hold the BERT encoder's config")
        encoder = self.encoder_config
        if (self.vocab_size, self.d_model) != (encoder.vocab_size, encoder.hidden_size):
            raise ConfigError(f"vocab_size {self.vocab_size} and d_model {self.d_model} must be the encoder's "
                              f"vocab_size {encoder.vocab_size} and hidden_size {encoder.hidden_size}")
        self.check_positive(("target_vocab_size", "decoder_layers", "attention_heads", "ffn_dim",
                             "max_position_embeddings"))
        self.check_divisible("d_model", "attention_heads")
        self.check_choice("activation_function", ACTIVATIONS)
        self.check_probabilities(("dropout", "attention_dropout", "activation_dropout", "label_smoothing"))
        if self.share_encoder_decoder_embeddings:
            raise ConfigError("the decoder has its own vocabulary: share_encoder_decoder_embeddings must be false")
        self.check_token_ids(("pad_token_id", "bos_token_id", "eos_token_id", "unk_token_id"),
                             self.target_vocab_size)

    def summary(self) -> list[tuple[str, str]]:
        encoder = self.encoder_config
        return [("model", f"BERT encoder ({encoder.num_hidden_layers} layers, hidden {encoder.hidden_size}) + "
                          f"Transformer decoder ({self.decoder_layers} layers, {self.attention_heads} heads, "
                          f"ffn {self.ffn_dim}){', copying' if self.copy_attention else ''}"),
                ("vocab", f"source {self.vocab_size}  target {self.target_vocab_size}  target positions "
                          f"{self.max_position_embeddings}"),
                ("special ids", f"pad {self.pad_token_id}  bos {self.bos_token_id}  eos {self.eos_token_id}")]


class BertSeq2Seq(Seq2SeqPreTrainedModel):
    """BERT encoder + Transformer decoder (+ copying): (source ids, target ids) -> next-target-token log-probs."""

    config_class = BertSeq2SeqConfig
    architecture = "bert-encoder"
    source_embedding_weight = "encoder.embeddings.word_embeddings.weight"
    target_embedding_weight = "decoder.embed.embed_tokens.weight"

    def __init__(self, config: BertSeq2SeqConfig) -> None:
        super().__init__(config)
        C = config.d_model
        self.encoder = BertModel(config.encoder_config, add_pooling_layer=False)
        target = nn.Embedding(config.target_vocab_size, C, padding_idx=config.pad_token_id)
        self.decoder = TransformerStack(config, target, config.decoder_layers, decoder=True)
        self.lm_head = nn.Linear(C, config.target_vocab_size, bias=False)
        if config.copy_attention:
            self.copy_query, self.copy_key, self.copy_gate = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, 1)
        self.register_buffer("source_to_target", torch.full((config.vocab_size,), config.unk_token_id))
        self.init_weights()

    def _init_weights(self, module: nn.Module) -> None:
        """The decoder as transformer.py's; the encoder is loaded."""
        if not init_transformer_weights(module):
            super()._init_weights(module)

    @torch.no_grad()
    def warm_start(self, encoder: BertModel, source_to_target: Tensor) -> None:
        """Take a pretrained encoder's weights, and start each target embedding as the encoder's embedding of the
        same token: `source_to_target` (vocab_size,) gives each encoder id's target id ([UNK] where none)."""
        # every encoder tensor but the pooler's (the [CLS] vector no decoder reads)
        self.encoder.load_state_dict({k: v for k, v in encoder.state_dict().items() if not k.startswith("pooler.")})
        self.source_to_target.copy_(source_to_target)
        known = source_to_target != self.config.unk_token_id
        self.decoder.embed_tokens.weight[source_to_target[known]] = encoder.embeddings.word_embeddings.weight[known]

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None,
               encoder_hidden_states: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Source ids (B, S) -> (memory (B, S, C), its padding bias (B, 1, 1, S) or None); given states are the
        memory as they are."""
        memory = (encoder_hidden_states if encoder_hidden_states is not None
                  else self.encoder(input_ids, attention_mask).last_hidden_state)
        return memory, self.padding_bias(attention_mask, memory.dtype)

    def decode(self, decoder_input_ids: Tensor, memory: Tensor, memory_bias: Tensor | None,
               cache: KVCache | None = None) -> Tensor:
        """Target ids (B, T) read against the memory -> the decoder's hidden states (B, T, C)."""
        T = decoder_input_ids.size(1)
        past = len(cache) if cache is not None else 0
        bias = None if T == 1 else causal_mask_bias(T, memory.dtype, memory.device, key_length=past + T)
        return self.decoder(decoder_input_ids, bias, memory, memory_bias, cache)[0]

    def copy_keys(self, memory: Tensor) -> Tensor | None:
        return self.copy_key(memory) if self.config.copy_attention else None

    def output_logits(self, hidden: Tensor, keys: Tensor | None, memory_bias: Tensor | None,
                      input_ids: Tensor) -> Tensor:
        """Hidden states (B, T, C) -> logits (B, T, V); with copying, log P of the generate-or-copy mixture."""
        logits = self.lm_head(hidden)
        if keys is None:
            return logits
        scores = self.copy_query(hidden) @ keys.transpose(1, 2) / math.sqrt(keys.size(-1))     # (B, T, S)
        if memory_bias is not None:
            scores = scores + memory_bias[:, 0]
        gate = torch.sigmoid(self.copy_gate(hidden)).float()                                    # (B, T, 1)
        copied = (1 - gate) * scores.float().softmax(dim=-1)
        targets = self.source_to_target[input_ids][:, None, :].expand_as(copied)              # (B, T, S)
        probs = (gate * logits.float().softmax(dim=-1)).scatter_add(-1, targets, copied)
        return probs.clamp_min(1e-12).log()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                decoder_input_ids: Tensor | None = None, labels: Tensor | None = None,
                encoder_hidden_states: Tensor | None = None) -> Seq2SeqLMOutput:
        """Teacher-forced logits (B, T, V); with `labels` (B, T; -100 = ignored) also the label-smoothed loss."""
        decoder_input_ids = self.decoder_inputs(decoder_input_ids, labels, self.config.max_position_embeddings)
        memory, memory_bias = self.encode(input_ids, attention_mask, encoder_hidden_states)
        hidden = self.decode(decoder_input_ids, memory, memory_bias)
        logits = self.output_logits(hidden, self.copy_keys(memory), memory_bias, input_ids)
        return Seq2SeqLMOutput(self.loss(logits, labels), logits, memory)

    def start_decoding(self, input_ids: Tensor | None, attention_mask: Tensor | None = None,
                       use_cache: bool = True) -> DecodingState:
        """Encode the source once; the decoder starts from bos."""
        input_ids = self.require_source(input_ids)
        memory, memory_bias = self.encode(input_ids, attention_mask)
        state = BertSeq2SeqDecoding(self, memory, memory_bias, use_cache, input_ids)
        state.max_new_tokens = self.config.max_position_embeddings - 1
        state.default_max_new_tokens = state.max_new_tokens
        return state


class BertSeq2SeqDecoding(TransformerDecoding):
    """Decoding state of a BertSeq2Seq: the Transformer's, plus the source ids and copy keys copying reads."""

    def __init__(self, model: BertSeq2Seq, memory: Tensor, memory_bias: Tensor | None, use_cache: bool,
                 input_ids: Tensor) -> None:
        super().__init__(model, memory, memory_bias, use_cache)
        self.input_ids, self.keys = input_ids, model.copy_keys(memory)

    def step(self, tokens: Tensor) -> Tensor:
        if self.cache is None:
            self.prefix = tokens if self.prefix is None else torch.cat([self.prefix, tokens], dim=1)
            tokens = self.prefix
        hidden = self.model.decode(tokens, self.memory, self.memory_bias, self.cache)[:, -1:]
        return self.model.output_logits(hidden, self.keys, self.memory_bias, self.input_ids)[:, 0]

    def reorder(self, index: Tensor) -> None:
        super().reorder(index)
        self.input_ids = self.input_ids.index_select(0, index)
        if self.keys is not None:
            self.keys = self.keys.index_select(0, index)


def bert_seq2seq_class(config: BertSeq2SeqConfig) -> type:
    """The class a BertSeq2SeqConfig describes (the registry's chooser)."""
    return BertSeq2Seq
