"""BERT (Devlin et al., 2018): embeddings, N post-LN Transformer encoder blocks, pooler.

Module and attribute names are Hugging Face's, because they are the checkpoint format:
`state_dict()` keys equal `transformers.BertModel`'s. ALBERT's two ideas are options of the config:
a factorised embedding (`embedding_size` E < hidden H, projected up) and one layer shared by all N.

Dimension letters: B batch, T sequence, C hidden, H heads, D head size (C = H·D), V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.dropout import Dropout
from bertkit.models.functional import (
    ACT2FN,
    PackedSequences,
    min_padding_to_pack,
    multi_head_attention,
    pack_padded,
    packed_attention,
    sinusoidal_positions,
)
from bertkit.models.generation import KVCache, extend_self_attention_cache
from bertkit.models.layer_norm import LayerNorm
from bertkit.models.outputs import BertModelOutput
from bertkit.models.pretrained import PreTrainedModel, check_ids


class BertEmbeddings(nn.Module):
    """word + position + token type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        dim = config.embedding_size or config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, dim, padding_idx=config.pad_token_id)
        fixed = config.position_embedding_type == "sinusoidal"
        # fixed positions are a buffer (neither trained nor saved), learned ones an embedding; the other is None
        self.register_buffer("sinusoidal_table", sinusoidal_positions(config.max_position_embeddings, dim)
                             if fixed else None, persistent=False)
        self.position_embeddings = None if fixed else nn.Embedding(config.max_position_embeddings, dim)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, dim)
        self.LayerNorm = LayerNorm(dim, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor | None) -> Tensor:
        T = input_ids.size(1)
        table = self.sinusoidal_table if self.position_embeddings is None else self.position_embeddings.weight
        positions = table[:T] if position_ids is None else table[position_ids]     # (T, E) broadcast, or (B, T, E)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) + positions
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    """Multi-head self-attention: project to Q, K, V, split into heads, attend, merge heads.

    Three projections, three matmuls. Stacking the weights into one (C -> 3C) matmul costs a copy of them
    per call, which is as slow as the attention itself for a short input, and one large matmul is no faster
    than three here (benchmarks/bench_qkv.py). Keeping the stack between calls would need to know when a
    weight changes, and torch's fused AdamW and writes through `.data` change weights without telling.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size, bias=config.use_bias)
        self.key = nn.Linear(config.hidden_size, config.hidden_size, bias=config.use_bias)
        self.value = nn.Linear(config.hidden_size, config.hidden_size, bias=config.use_bias)
        self.dropout_prob = config.attention_probs_dropout_prob

    def forward(self, x: Tensor, bias: Tensor | PackedSequences | None, output_attentions: bool,
                cache: dict | None = None) -> tuple[Tensor, Tensor | None]:
        if isinstance(bias, PackedSequences):  # x (N, C): the batch's real tokens, packed (`BertModel.unpad`)
            N, C = x.shape
            q, k, v = (linear(x).view(N, self.num_heads, self.head_dim)                     # 3 x (N, H, D)
                       for linear in (self.query, self.key, self.value))
            return packed_attention(q, k, v, bias, self.dropout_prob, self.training).reshape(N, C), None
        B, T, C = x.shape
        q, k, v = (linear(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)   # 3 x (B, H, T, D)
                   for linear in (self.query, self.key, self.value))
        k, v = extend_self_attention_cache(cache, k, v)      # with a cache: the earlier positions' too, (B, H, S, D)
        context, probs = multi_head_attention(q, k, v, bias, self.dropout_prob, self.training, output_attentions)
        return context.transpose(1, 2).reshape(B, T, C), probs


class BertSelfOutput(nn.Module):
    """Output projection W_O, dropout, residual add, and this sublayer's LayerNorm: after the residual add (post-LN,
    BERT's), or on the sublayer's input (pre-LN: `normalize_input`), where forward then only adds the residual."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.use_bias)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.normalize_before = config.normalize_before

    def normalize_input(self, x: Tensor) -> Tensor:
        """What the sublayer reads: LN(x) in a pre-LN block, x itself in a post-LN one."""
        return self.LayerNorm(x) if self.normalize_before else x

    def forward(self, hidden: Tensor, residual: Tensor) -> Tensor:
        out = self.dropout(self.dense(hidden)) + residual
        return out if self.normalize_before else self.LayerNorm(out)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: Tensor, bias: Tensor | None, output_attentions: bool,
                cache: dict | None = None) -> tuple[Tensor, Tensor | None]:
        context, probs = self.self(self.output.normalize_input(x), bias, output_attentions, cache)
        return self.output(context, x), probs


class BertIntermediate(nn.Module):
    """The feed-forward's first half: Linear C -> 4C and the activation."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.use_bias)
        self.act = ACT2FN[config.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.dense(x))


class BertOutput(BertSelfOutput):
    """The feed-forward's second half: Linear 4C -> C, dropout, residual add, LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.use_bias)


class BertLayer(nn.Module):
    """One encoder block. Post-LN (BERT): x = LN(x + Attn(x)); x = LN(x + FFN(x)).
    Pre-LN (`normalize_before`): x = x + Attn(LN(x)); x = x + FFN(LN(x)), with the same two LayerNorms."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x: Tensor, bias: Tensor | None, output_attentions: bool,
                cache: dict | None = None) -> tuple[Tensor, Tensor | None]:
        x, probs = self.attention(x, bias, output_attentions, cache)
        return self.output(self.intermediate(self.output.normalize_input(x)), x), probs


class BertEncoder(nn.Module):
    """N blocks; with `share_layers` (ALBERT) one block's parameters are applied N times."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_layers = config.num_hidden_layers
        factorised = config.embedding_size and config.embedding_size != config.hidden_size
        self.embedding_hidden_mapping_in = (nn.Linear(config.embedding_size, config.hidden_size)    # E -> C
                                            if factorised else None)
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(1 if config.share_layers else self.num_layers))
        # pre-LN blocks leave the residual sum unnormalised: normalise it once
        self.final_layer_norm = (LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
                                 if config.normalize_before else None)

    def forward(self, x: Tensor, bias: Tensor | None, output_attentions: bool = False,
                output_hidden_states: bool = False, cache: KVCache | None = None,
                ) -> tuple[Tensor, tuple | None, tuple | None]:
        if self.embedding_hidden_mapping_in is not None:
            x = self.embedding_hidden_mapping_in(x)
        hidden_states, attentions = ((x,) if output_hidden_states else None), (() if output_attentions else None)
        for i in range(self.num_layers):
            x, probs = self.layer[0 if len(self.layer) == 1 else i](x, bias, output_attentions,
                                                                    None if cache is None else cache.layers[i])
            if output_hidden_states:
                hidden_states += (x,)
            if output_attentions:
                attentions += (probs,)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
            if output_hidden_states:  # the last hidden state is the normalised one, as in pre-LN GPT-2
                hidden_states = hidden_states[:-1] + (x,)
        return x, hidden_states, attentions


class BertPooler(nn.Module):
    """tanh(Linear(hidden of [CLS])): the sentence vector NSP and classification read."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden: Tensor) -> Tensor:
        return self.activation(self.dense(hidden[:, 0]))


class BertPreTrainedModel(PreTrainedModel):
    """The BERT family: BertConfig, Hugging Face's initialisation, task models hold the encoder as `bert`."""

    config_class = BertConfig
    base_model_prefix = "bert"


class BertModel(BertPreTrainedModel):
    """The BERT encoder: ids -> contextual vectors (B, T, C) and the pooled [CLS] vector (B, C)."""

    head_prefixes = ("pooler.",)  # token-tagging checkpoints have no pooler

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        # Padded batches on a GPU run packed, their padding left out (`packs`, `pack_padded`): the outputs at padded
        # positions are then zeros, where the padded computation gives vectors nobody reads. None: on a GPU; True:
        # everywhere (a test's switch: a CPU's batches are sorted by length, so its padding costs little); False:
        # never.
        self.unpad: bool | None = None
        self.init_weights()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False, past_key_values: KVCache | None = None) -> BertModelOutput:
        """input_ids (B, T); token_type_ids (B, T) segment A/B; attention_mask 1 = may be attended, 0 = not: (B, S)
        over the keys (1 = token, 0 = padding), or (B, T, S), which keys each query may see (UniLM's mask).
        `past_key_values`: a KVCache whose keys and values of S - T earlier positions these T follow (positions
        continue after them unless `position_ids` say otherwise); the new positions' are added to it."""
        past = len(past_key_values) if past_key_values is not None else 0
        self._check_inputs(input_ids, attention_mask, token_type_ids, past)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None and past:
            position_ids = torch.arange(past, past + input_ids.size(1), device=input_ids.device)[None]
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        if past_key_values is None and attention_mask is not None and attention_mask.dim() == 2 and \
                self.packs(attention_mask, output_attentions or output_hidden_states):
            packed = pack_padded(attention_mask, x.dtype)
            cfg = self.config
            if packed.padding >= min_padding_to_pack(x, cfg.hidden_size // cfg.num_attention_heads,
                                                     cfg.attention_probs_dropout_prob, self.training):
                B, T, _ = x.shape
                h, _, _ = self.encoder(x.flatten(0, 1).index_select(0, packed.indices), packed)     # (N, C)
                x = h.new_zeros(B * T, h.size(-1)).index_copy(0, packed.indices, h).view(B, T, -1)  # pads: zeros
                return BertModelOutput(x, self.pooler(x) if self.pooler is not None else None, None, None)
            if packed.padding == 0:
                attention_mask = None  # nothing padded: the fused attention's fastest kernel (flash) takes no mask
        bias = self.padding_bias(attention_mask, x.dtype)
        x, hidden_states, attentions = self.encoder(x, bias, output_attentions, output_hidden_states,
                                                    past_key_values)
        pooled = self.pooler(x) if self.pooler is not None else None
        return BertModelOutput(x, pooled, hidden_states, attentions)

    def packs(self, attention_mask: Tensor | None, per_layer_outputs: bool) -> bool:
        """Whether this forward may run on the batch's real tokens alone, packed (`unpad`; `pack_padded` decides
        whether the batch has padding enough to pay): for a forward that asks for no per-layer outputs, outside
        torch.compile's graphs."""
        unpad = self.unpad if self.unpad is not None else (attention_mask is not None
                                                             and attention_mask.device.type == "cuda")
        return bool(unpad) and attention_mask is not None and not per_layer_outputs and \
            not torch.compiler.is_compiling()

    def _check_inputs(self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor | None,
                      past: int = 0) -> None:
        """Clear errors for inputs that would otherwise fail deep inside an embedding lookup, or silently."""
        cfg = self.config
        values = isinstance(input_ids, Tensor) and self.checks_values(input_ids)
        check_ids("input_ids", input_ids, cfg.vocab_size, cfg.max_position_embeddings - past, values)
        B, T = input_ids.shape
        if attention_mask is not None and tuple(attention_mask.shape) not in ((B, past + T), (B, T, past + T)):
            raise InputError(f"attention_mask has shape {tuple(attention_mask.shape)}; for input_ids {(B, T)}"
                             f"{f' after {past} cached positions' if past else ''} it is (batch, keys) = "
                             f"{(B, past + T)} or (batch, queries, keys) = {(B, T, past + T)}")
        if token_type_ids is not None and tuple(token_type_ids.shape) != (B, T):
            raise InputError(f"token_type_ids has shape {tuple(token_type_ids.shape)}, input_ids {(B, T)}")
        if values and token_type_ids is not None and (int(token_type_ids.min()) < 0
                                                      or int(token_type_ids.max()) >= cfg.type_vocab_size):
            raise InputError(f"token_type_ids must be in [0, {cfg.type_vocab_size})")
