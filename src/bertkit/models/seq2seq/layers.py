"""The encoder–decoder Transformer's layers: multi-head attention (with a key/value cache) and the residual block.

The block is post-LN as in the paper, or pre-LN.
Module names follow Hugging Face's BART/Marian (`self_attn.q_proj`, `encoder_attn`, `fc1`, `final_layer_norm`).

Dimension letters: B batch, T new (query) positions, S key positions, H heads, D head size, C model size.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.models.dropout import Dropout
from bertkit.models.functional import ACT2FN, multi_head_attention
from bertkit.models.generation import KVCache, extend_self_attention_cache  # noqa: F401  (re-exported)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W_O, head_i = Attention(Q W_Q_i, K W_K_i, V W_V_i) (3.2.2)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % num_heads:
            raise InputError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
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
            k, v = extend_self_attention_cache(cache, self._heads(self.k_proj(x)), self._heads(self.v_proj(x)))
        elif cache is not None and "cross" in cache:          # the encoder output never changes while decoding
            k, v = cache["cross"]
        else:
            k, v = self._heads(self.k_proj(memory)), self._heads(self.v_proj(memory))
            if cache is not None:
                cache["cross"] = (k, v)
        context, probs = multi_head_attention(q, k, v, bias, self.dropout, self.training, output_attentions)
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
