"""The pieces the encoder–decoder Transformer, GPT and the RNN baselines share.

Multi-head attention with a key/value cache, the residual block (post-LN as in the paper, or pre-LN),
and saving/loading for bertkit's own model families (config.json + model.safetensors). Module names
follow Hugging Face's BART/Marian (`self_attn.q_proj`, `encoder_attn`, `fc1`, `final_layer_norm`).

Dimension letters: B batch, T new (query) positions, S key positions, H heads, D head size, C model size.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit import checkpoint
from bertkit.functional import ACT2FN, attention, efficient_attention
from bertkit.models.dropout import Dropout

IGNORE_INDEX = -100


@dataclass
class Seq2SeqLMOutput:
    """What the encoder–decoder models return; names as transformers' Seq2SeqLMOutput."""

    loss: Tensor | None
    logits: Tensor                                   # (B, T, V)
    encoder_last_hidden_state: Tensor | None = None  # (B, S, C)
    encoder_attentions: tuple[Tensor, ...] | None = None
    decoder_attentions: tuple[Tensor, ...] | None = None
    cross_attentions: tuple[Tensor, ...] | None = None


def shift_tokens_right(labels: Tensor, pad_token_id: int, start_token_id: int) -> Tensor:
    """Teacher forcing: the decoder reads [start] + labels[:-1] and predicts labels (-100 read as padding)."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = start_token_id
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad_token_id)


def sequence_loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy over the labelled positions; with smoothing ε the target is (1-ε)·one-hot + ε/V."""
    if not bool((labels != IGNORE_INDEX).any()):
        raise ValueError("every label is -100: nothing to predict in this batch")
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                           ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing)


def check_ids(name: str, ids: Tensor, vocab_size: int, max_length: int | None = None) -> None:
    """Clear errors for ids that would otherwise fail deep inside an embedding lookup."""
    if not isinstance(ids, Tensor) or ids.dim() != 2:
        raise ValueError(f"{name} must be a (batch, length) tensor of token ids, got "
                         f"{tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__}")
    if ids.numel() == 0:
        raise ValueError(f"empty batch: {name} has shape {tuple(ids.shape)}")
    if max_length is not None and ids.size(1) > max_length:
        raise ValueError(f"{name} has length {ids.size(1)}, longer than the model's {max_length} positions; "
                         "truncate it")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise ValueError(f"{name} must be in [0, {vocab_size}), got values in [{int(ids.min())}, {int(ids.max())}]")


class KVCache:
    """Keys and values of the positions decoded so far, per layer, so each new token costs O(S), not O(S²).

    Each layer's entry holds `self` (B, H, S, D) pairs that grow by one position per step and, in a decoder
    with cross-attention, `cross` pairs projected from the encoder output once.
    """

    def __init__(self, num_layers: int) -> None:
        self.layers: list[dict[str, tuple[Tensor, Tensor]]] = [{} for _ in range(num_layers)]

    def __len__(self) -> int:
        """Positions cached so far (the self-attention key length)."""
        first = self.layers[0].get("self") if self.layers else None
        return 0 if first is None else first[0].size(2)

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (beam search picks, and first repeats, its hypotheses this way)."""
        for layer in self.layers:
            for name, (k, v) in layer.items():
                layer[name] = (k.index_select(0, index), v.index_select(0, index))


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W_O, head_i = Attention(Q W_Q_i, K W_K_i, V W_V_i) (3.2.2)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
        self.num_heads, self.head_dim, self.dropout = num_heads, d_model // num_heads, dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)           # (B, H, T, D)

    def forward(self, x: Tensor, memory: Tensor | None = None, bias: Tensor | None = None,
                cache: dict | None = None, output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        """Self-attention over x (B, T, C), or cross-attention from x to `memory` (B, S, C).

        `bias` is added to the (B, H, T, S) scores; `cache` is this layer's KVCache entry, updated in place.
        """
        q = self._heads(self.q_proj(x))
        if memory is None:                                   # self-attention: new keys join the cached ones
            k, v = self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
            if cache is not None:
                if "self" in cache:
                    k = torch.cat([cache["self"][0], k], dim=2)
                    v = torch.cat([cache["self"][1], v], dim=2)
                cache["self"] = (k, v)
        elif cache is not None and "cross" in cache:          # the encoder output never changes while decoding
            k, v = cache["cross"]
        else:
            k, v = self._heads(self.k_proj(memory)), self._heads(self.v_proj(memory))
            if cache is not None:
                cache["cross"] = (k, v)
        if output_attentions:
            context, probs = attention(q, k, v, bias, dropout=self.dropout, training=self.training)
        else:
            context, probs = efficient_attention(q, k, v, bias, dropout=self.dropout, training=self.training), None
        B, H, T, D = context.shape
        return self.out_proj(context.transpose(1, 2).reshape(B, T, H * D)), probs


class TransformerLayer(nn.Module):
    """One block: self-attention, optional cross-attention to an encoder, feed-forward; each sublayer residual.

    Post-LN (the paper): x = LN(x + Dropout(f(x))). Pre-LN: x = x + Dropout(f(LN(x))), which trains stably
    without warm-up and needs one LayerNorm after the last block. As in the paper (5.4) and GPT-2, dropout
    acts on each sublayer's output, not inside the feed-forward, unless `activation_dropout` asks for it
    (BART's option); the inner activation is 4x wider, so its dropout mask is the costliest to draw.
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, *, cross_attention: bool = False,
                 dropout: float = 0.1, attention_dropout: float = 0.0, activation_dropout: float = 0.0,
                 activation: str = "relu", layer_norm_eps: float = 1e-5, normalize_before: bool = False) -> None:
        super().__init__()
        self.normalize_before = normalize_before
        self.self_attn = MultiHeadAttention(d_model, num_heads, attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        if cross_attention:
            self.encoder_attn = MultiHeadAttention(d_model, num_heads, attention_dropout)
            self.encoder_attn_layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.activation = ACT2FN[activation]
        self.final_layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = Dropout(dropout)
        self.activation_dropout = Dropout(activation_dropout)  # p = 0 hands x back untouched

    def _sublayer(self, x: Tensor, norm: nn.LayerNorm, f: Callable[[Tensor], Tensor]) -> Tensor:
        if self.normalize_before:
            return x + self.dropout(f(norm(x)))
        return norm(x + self.dropout(f(x)))

    def forward(self, x: Tensor, bias: Tensor | None = None, memory: Tensor | None = None,
                memory_bias: Tensor | None = None, cache: dict | None = None,
                output_attentions: bool = False) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x (B, T, C) -> (x, self-attention probs, cross-attention probs); probs only if asked for."""
        probs: dict[str, Tensor | None] = {"self": None, "cross": None}

        def self_attention(h: Tensor) -> Tensor:
            out, probs["self"] = self.self_attn(h, bias=bias, cache=cache, output_attentions=output_attentions)
            return out

        def cross_attention(h: Tensor) -> Tensor:
            out, probs["cross"] = self.encoder_attn(h, memory, memory_bias, cache, output_attentions)
            return out

        def feed_forward(h: Tensor) -> Tensor:
            return self.fc2(self.activation_dropout(self.activation(self.fc1(h))))

        x = self._sublayer(x, self.self_attn_layer_norm, self_attention)
        if memory is not None:
            x = self._sublayer(x, self.encoder_attn_layer_norm, cross_attention)
        x = self._sublayer(x, self.final_layer_norm, feed_forward)
        return x, probs["self"], probs["cross"]


def init_transformer_weights(module: nn.Module, std: float | None = None) -> None:
    """Xavier-uniform Linear weights and zero biases (as the Annotated Transformer), N(0, std) embeddings
    (std = C^-1/2 unless given, so embeddings × √C have unit variance), LayerNorm 1/0, padding rows zero."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std if std is not None else m.embedding_dim ** -0.5)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class PretrainedMixin:
    """save_pretrained / from_pretrained for models with a `config_class`: config.json + model.safetensors.

    Tied parameters (one tensor under two names) are stored once, under the name `tied_weights()` maps to.
    """

    config_class: type

    def tied_weights(self) -> dict[str, str]:
        """{name not stored: name it is the same tensor as}."""
        return {}

    def num_parameters(self) -> int:
        """Distinct parameters (a tied tensor counts once)."""
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """Write config.json + model.safetensors into `path`, atomically."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.config.save_pretrained(path)
        tied = self.tied_weights()
        state = {k: v for k, v in self.state_dict().items() if k not in tied}
        checkpoint.save_weights(state, path / checkpoint.SAFETENSORS_NAME)
        return path

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **config_changes):
        """Load a directory written by `save_pretrained`, strictly: every tensor present, named and shaped right."""
        path = Path(path)
        config = cls.config_class.from_pretrained(path)
        if config_changes:
            config = config.replace(**config_changes)
        model = cls(config)
        weights_file = checkpoint.find_weights_file(path)
        state = checkpoint.read_weights(weights_file)
        tied = model.tied_weights()
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items() if k not in tied}
        checkpoint.match_state_dict(expected, state, source=str(weights_file))
        missing, _ = model.load_state_dict(state, strict=False)
        assert set(missing) <= set(tied), missing  # tied names share their source's tensor, loaded above
        return model.eval()
