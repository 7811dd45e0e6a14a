"""The encoder–decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017, figure 1).

Encoder: N blocks of self-attention + feed-forward over the source. Decoder: N blocks of masked
(causal) self-attention, cross-attention to the encoder output, feed-forward; then a Linear to the
target vocabulary. Embeddings are scaled by √d_model and summed with fixed sinusoidal positions.
Post-LN as in the paper by default, pre-LN as an option; source and target may share one embedding,
and the output projection may reuse the target embedding. Trained with label-smoothed cross-entropy.

Dimension letters: B batch, S source length, T target length, C d_model, V target vocabulary.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.models.dropout import Dropout
from bertkit.models.functional import causal_mask_bias, sinusoidal_positions
from bertkit.models.generation import DecodingState, KVCache
from bertkit.models.outputs import Seq2SeqLMOutput
from bertkit.models.pretrained import check_ids, zero_padding_row
from bertkit.models.seq2seq.configuration import Seq2SeqConfig
from bertkit.models.seq2seq.encoder_decoder import Seq2SeqPreTrainedModel
from bertkit.models.seq2seq.layers import TransformerLayer


def init_transformer_weights(module: nn.Module) -> bool:
    """Xavier-uniform Linear weights (as the Annotated Transformer), N(0, C^-1/2) embeddings (so embeddings
    × √C have unit variance), zero biases, padding rows zero; False for a module of another kind (LayerNorm: the
    model's base initialises it to 1 and 0)."""
    if isinstance(module, nn.Linear):
        nn.init.xavier_uniform_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=module.embedding_dim ** -0.5)
        zero_padding_row(module)
    else:
        return False
    return True


class ScaledSinusoidalEmbedding(nn.Module):
    """tokens -> E[token] · √C + PE[position] (3.4, 3.5), then dropout."""

    def __init__(self, embed_tokens: nn.Embedding, max_positions: int, scale: bool, dropout: float) -> None:
        super().__init__()
        self.embed_tokens = embed_tokens
        self.scale = math.sqrt(embed_tokens.embedding_dim) if scale else 1.0
        self.register_buffer("positions", sinusoidal_positions(max_positions, embed_tokens.embedding_dim),
                             persistent=False)
        self.dropout = Dropout(dropout)

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        T = ids.size(1)
        if offset + T > self.positions.size(0):
            raise InputError(f"position {offset + T - 1} is past the model's {self.positions.size(0)} positions")
        return self.dropout(self.embed_tokens(ids) * self.scale + self.positions[offset: offset + T])


class TransformerStack(nn.Module):
    """Embedding, N blocks and (pre-LN only) a final LayerNorm: the encoder, or with cross-attention the decoder."""

    def __init__(self, config: Seq2SeqConfig, embed_tokens: nn.Embedding, num_layers: int, decoder: bool) -> None:
        super().__init__()
        self.embed = ScaledSinusoidalEmbedding(embed_tokens, config.max_position_embeddings,
                                               config.scale_embedding, config.dropout)
        self.layers = nn.ModuleList(
            TransformerLayer(config.d_model, config.attention_heads, config.ffn_dim, cross_attention=decoder,
                             dropout=config.dropout, attention_dropout=config.attention_dropout,
                             activation_dropout=config.activation_dropout,
                             activation=config.activation_function, layer_norm_eps=config.layer_norm_eps,
                             normalize_before=config.normalize_before)
            for _ in range(num_layers))
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.normalize_before else None

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.embed.embed_tokens

    def forward(self, ids: Tensor, bias: Tensor | None = None, memory: Tensor | None = None,
                memory_bias: Tensor | None = None, cache: KVCache | None = None,
                output_attentions: bool = False) -> tuple[Tensor, tuple | None, tuple | None]:
        """ids (B, T) -> hidden (B, T, C), self- and cross-attention probabilities per layer (if asked for)."""
        x = self.embed(ids, offset=len(cache) if cache is not None else 0)
        self_probs, cross_probs = [], []
        for i, layer in enumerate(self.layers):
            x, p_self, p_cross = layer(x, bias, memory, memory_bias, cache.layers[i] if cache is not None else None,
                                       output_attentions)
            self_probs.append(p_self)
            cross_probs.append(p_cross)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        if not output_attentions:
            return x, None, None
        return x, tuple(self_probs), (tuple(cross_probs) if memory is not None else None)


class Seq2SeqTransformer(Seq2SeqPreTrainedModel):
    """Encoder–decoder Transformer for translation: (source ids, target ids) -> next-target-token logits."""

    architecture = "transformer"
    source_embedding_weight = "encoder.embed.embed_tokens.weight"
    target_embedding_weight = "decoder.embed.embed_tokens.weight"

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__(config)
        source = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        target = source if config.share_encoder_decoder_embeddings else nn.Embedding(
            config.target_vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = TransformerStack(config, source, config.encoder_layers, decoder=False)
        self.decoder = TransformerStack(config, target, config.decoder_layers, decoder=True)
        self.lm_head = nn.Linear(config.d_model, config.target_vocab_size, bias=False)
        self.init_weights()

    def _init_weights(self, module: nn.Module) -> None:
        if not init_transformer_weights(module):
            super()._init_weights(module)

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None,
               output_attentions: bool = False) -> tuple[Tensor, Tensor | None, tuple | None]:
        """Source ids (B, S) -> (memory (B, S, C), its padding bias (B, 1, 1, S) or None, attentions)."""
        check_ids("input_ids", input_ids, self.config.vocab_size, self.config.max_position_embeddings,
                  self.checks_values(input_ids))
        if attention_mask is not None and tuple(attention_mask.shape) != tuple(input_ids.shape):
            raise InputError(f"attention_mask has shape {tuple(attention_mask.shape)}, "
                             f"input_ids {tuple(input_ids.shape)}")
        bias = self.padding_bias(attention_mask, self.encoder.embed_tokens.weight.dtype)
        memory, probs, _ = self.encoder(input_ids, bias, output_attentions=output_attentions)
        return memory, bias, probs

    def decode(self, decoder_input_ids: Tensor, memory: Tensor, memory_bias: Tensor | None,
               cache: KVCache | None = None, output_attentions: bool = False,
               ) -> tuple[Tensor, tuple | None, tuple | None]:
        """Target ids (B, T) read against the memory -> (hidden (B, T, C), self probs, cross probs)."""
        T = decoder_input_ids.size(1)
        past = len(cache) if cache is not None else 0
        # a single new token may see every cached position; longer inputs see only their past
        bias = None if T == 1 else causal_mask_bias(T, memory.dtype, memory.device, key_length=past + T)
        return self.decoder(decoder_input_ids, bias, memory, memory_bias, cache, output_attentions)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                decoder_input_ids: Tensor | None = None, labels: Tensor | None = None,
                output_attentions: bool = False) -> Seq2SeqLMOutput:
        """Teacher-forced logits (B, T, V); with `labels` (B, T; -100 = ignored) also the label-smoothed loss."""
        decoder_input_ids = self.decoder_inputs(decoder_input_ids, labels, self.config.max_position_embeddings)
        memory, memory_bias, enc_probs = self.encode(input_ids, attention_mask, output_attentions)
        hidden, dec_probs, cross_probs = self.decode(decoder_input_ids, memory, memory_bias,
                                                     output_attentions=output_attentions)
        logits = self.lm_head(hidden)
        return Seq2SeqLMOutput(self.loss(logits, labels), logits, memory, enc_probs, dec_probs, cross_probs)

    def start_decoding(self, input_ids: Tensor | None, attention_mask: Tensor | None = None,
                       use_cache: bool = True) -> DecodingState:
        """Encode the source once; the decoder starts from bos."""
        memory, memory_bias, _ = self.encode(self.require_source(input_ids), attention_mask)
        state = TransformerDecoding(self, memory, memory_bias, use_cache)
        lengths = attention_mask.sum(1) if attention_mask is not None else torch.full((input_ids.size(0),),
                                                                                     input_ids.size(1))
        state.max_new_tokens = self.config.max_position_embeddings - 1
        state.default_max_new_tokens = min(state.max_new_tokens, 2 * int(lengths.max()) + 10)
        return state


class TransformerDecoding(DecodingState):
    """Decoding state of a Seq2SeqTransformer: the encoder output and the decoder's KV cache (or its prefix)."""

    def __init__(self, model: Seq2SeqTransformer, memory: Tensor, memory_bias: Tensor | None, use_cache: bool) -> None:
        self.model, self.memory, self.memory_bias = model, memory, memory_bias
        self.cache = KVCache(len(model.decoder.layers)) if use_cache else None
        self.prefix: Tensor | None = None                 # without a cache: every token so far, re-run each step
        self.start = torch.full((memory.size(0), 1), model.config.bos_token_id, dtype=torch.long,
                                device=memory.device)

    def step(self, tokens: Tensor) -> Tensor:
        if self.cache is None:
            self.prefix = tokens if self.prefix is None else torch.cat([self.prefix, tokens], dim=1)
            tokens = self.prefix
        hidden, _, _ = self.model.decode(tokens, self.memory, self.memory_bias, self.cache)
        return self.model.lm_head(hidden[:, -1])

    def reorder(self, index: Tensor) -> None:
        self.memory = self.memory.index_select(0, index)
        if self.memory_bias is not None:
            self.memory_bias = self.memory_bias.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)


def seq2seq_class(config: Seq2SeqConfig) -> type:
    """The class a Seq2SeqConfig describes: the Transformer or the RNN encoder–decoder."""
    if config.architecture == "rnn":
        from bertkit.models.seq2seq.rnn import RNNSeq2Seq

        return RNNSeq2Seq
    return Seq2SeqTransformer


def build_seq2seq(config: Seq2SeqConfig) -> nn.Module:
    """A freshly initialised model of the architecture the config names."""
    return seq2seq_class(config)(config)


def load_seq2seq(path: str | os.PathLike) -> nn.Module:
    """Load any encoder–decoder saved by bertkit, choosing the class from config.json's architecture."""
    return seq2seq_class(Seq2SeqConfig.from_pretrained(Path(path))).from_pretrained(path)
