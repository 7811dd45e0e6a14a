"""NumpyBert and NumpyGPT2: the forward passes in plain NumPy, over the same weight names as the PyTorch models.

A second, independent implementation to check the first against: every step is a line of NumPy that
can be read next to its formula. It needs no torch (safetensors files are read with numpy; a
pytorch_model.bin needs torch only to be unzipped).

Dimension letters: B batch, T sequence, C hidden, H heads, D head size, V vocabulary.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from bertkit.errors import InputError
from bertkit.models import checkpoint
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.gpt.configuration import GPT2Config


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """Normalise each token's vector over the hidden dimension, then scale and shift (Ba et al., 2016)."""
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def softmax(x: np.ndarray) -> np.ndarray:
    """exp(x - max) / Σ exp(x - max) over the last axis; subtracting the max keeps exp from overflowing."""
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _erf(x: np.ndarray) -> np.ndarray:
    """The error function, vectorised over math.erf (NumPy has none; SciPy is not a dependency)."""
    return np.frompyfunc(math.erf, 1, 1)(x).astype(x.dtype)


ACTIVATIONS = {
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0).astype(x.dtype))),
    "gelu_new": lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3))),
    "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}
ACTIVATIONS["gelu_pytorch_tanh"] = ACTIVATIONS["gelu_new"]


def multi_head_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias, num_heads: int) -> np.ndarray:
    """Concat_h softmax(Q_h K_hᵀ / √D + bias) V_h for q, k, v (B, T, C) split into heads of D = C / H."""
    B, T, C = q.shape
    D = C // num_heads

    def heads(t):  # (B, T, C) -> (B, H, T, D)
        return t.reshape(B, T, num_heads, D).transpose(0, 2, 1, 3)

    scores = heads(q) @ heads(k).transpose(0, 1, 3, 2) / np.float32(math.sqrt(D)) + bias    # (B, H, T, T)
    return (softmax(scores) @ heads(v)).transpose(0, 2, 1, 3).reshape(B, T, C)             # concat heads


def padding_bias(attention_mask) -> np.ndarray:
    """(B, T) 1/0 mask -> (B, 1, 1, T) additive bias: 0 on tokens, the most negative float32 on padding."""
    return np.where(np.asarray(attention_mask)[:, None, None, :] > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)


def check_like_ids(name: str, values, ids: np.ndarray, upper: int | None = None) -> np.ndarray:
    """`values` as an array of the shape of `ids` (batch, seq), with values in [0, upper) if given; else a clear
    error (numpy would broadcast a mismatched mask, or fail deep inside, without naming it)."""
    array = np.asarray(values)
    if array.shape != ids.shape:
        raise InputError(f"{name} must have the shape of input_ids {ids.shape}, got {array.shape}")
    if upper is not None and (array.min() < 0 or array.max() >= upper):
        raise InputError(f"{name} must be in [0, {upper}), got values in [{array.min()}, {array.max()}]")
    return array


def sinusoidal_positions(max_len: int, dim: int) -> np.ndarray:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d))."""
    angle = np.arange(max_len)[:, None] / np.power(10000.0, np.arange(0, dim, 2) / dim)
    pe = np.zeros((max_len, dim))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : dim // 2])
    return pe.astype(np.float32)


class _NumpyModel:
    """Loading for the NumPy models: a model directory's weights, through checkpoint.py's quirks and checks."""

    config_class: type

    def __init__(self, config, weights: dict[str, np.ndarray], expected: dict[str, tuple], prefix: str,
                 tied: dict[str, str] | None = None) -> None:
        self.config = config
        weights, _, _ = checkpoint.prepare_state_dict(weights, expected, prefix=prefix, tied=tied, source="weights")
        self.w = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items()}

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike):
        """Load a model directory (transformers' or bertkit's); a task checkpoint's heads are ignored."""
        path = Path(path)
        config = cls.config_class.from_pretrained(path)
        return cls(config, checkpoint.read_weights(checkpoint.find_weights_file(path), framework="np"))


class NumpyBert(_NumpyModel):
    """BERT forward in NumPy: `NumpyBert(config, weights)(input_ids, attention_mask, token_type_ids)`."""

    config_class = BertConfig

    def __init__(self, config: BertConfig, weights: dict[str, np.ndarray]) -> None:
        has_pooler = any(k.endswith("pooler.dense.weight") for k in weights)  # token-tagging models have none
        super().__init__(config, weights, _expected_shapes(config, has_pooler), prefix="bert")
        self.act = ACTIVATIONS[config.hidden_act]

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None) -> tuple[np.ndarray, np.ndarray]:
        """input_ids (B, T) -> (sequence_output (B, T, C), pooled_output (B, C))."""
        cfg, w = self.config, self.w
        ids = np.asarray(input_ids)
        if ids.ndim != 2 or ids.size == 0:
            raise InputError(f"input_ids must be a non-empty (batch, seq) array, got shape {ids.shape}")
        if ids.shape[1] > cfg.max_position_embeddings:
            raise InputError(f"sequence length {ids.shape[1]} exceeds {cfg.max_position_embeddings} positions")
        if ids.min() < 0 or ids.max() >= cfg.vocab_size:
            raise InputError(f"input_ids must be in [0, {cfg.vocab_size})")
        types = np.zeros_like(ids) if token_type_ids is None else \
            check_like_ids("token_type_ids", token_type_ids, ids, cfg.type_vocab_size)
        if attention_mask is not None:
            attention_mask = check_like_ids("attention_mask", attention_mask, ids)
        T = ids.shape[1]

        # Embeddings: word + position + segment, then LayerNorm.
        pos = (sinusoidal_positions(cfg.max_position_embeddings, w["embeddings.word_embeddings.weight"].shape[1])
               if cfg.position_embedding_type == "sinusoidal" else w["embeddings.position_embeddings.weight"])
        x = (w["embeddings.word_embeddings.weight"][ids] + pos[:T]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], cfg.layer_norm_eps)
        if "encoder.embedding_hidden_mapping_in.weight" in w:  # ALBERT: E -> C
            x = self._linear(x, "encoder.embedding_hidden_mapping_in")

        # Padding gets a large negative score before the softmax, so it receives ~zero attention.
        bias = 0.0 if attention_mask is None else padding_bias(attention_mask)              # (B, 1, 1, T)
        for i in range(cfg.num_hidden_layers):
            x = self._layer(x, bias, f"encoder.layer.{0 if cfg.share_layers else i}.")
        if cfg.normalize_before:
            x = self._norm(x, "encoder.final_layer_norm")

        pooled = np.tanh(self._linear(x[:, 0], "pooler.dense")) if "pooler.dense.weight" in w else None
        return x, pooled

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        # torch stores Linear weights as (out, in): y = x Wᵀ + b (no b in a bias-free layer)
        y = x @ self.w[f"{name}.weight"].T
        return y + self.w[f"{name}.bias"] if f"{name}.bias" in self.w else y

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        return layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.config.layer_norm_eps)

    def _layer(self, x: np.ndarray, bias, p: str) -> np.ndarray:
        """One block, post-LN: x = LN(x + MultiHead(x)); x = LN(x + FFN(x)); or pre-LN: x = x + MultiHead(LN(x));
        x = x + FFN(LN(x))."""
        cfg = self.config
        pre = cfg.normalize_before
        h = self._norm(x, f"{p}attention.output.LayerNorm") if pre else x
        q, k, v = (self._linear(h, f"{p}attention.self.{n}") for n in ("query", "key", "value"))
        context = multi_head_attention(q, k, v, bias, cfg.num_attention_heads)
        x = self._linear(context, f"{p}attention.output.dense") + x
        x = x if pre else self._norm(x, f"{p}attention.output.LayerNorm")
        h = self._norm(x, f"{p}output.LayerNorm") if pre else x
        x = self._linear(self.act(self._linear(h, f"{p}intermediate.dense")), f"{p}output.dense") + x
        return x if pre else self._norm(x, f"{p}output.LayerNorm")


def _expected_shapes(cfg: BertConfig, pooler: bool = True) -> dict[str, tuple]:
    """The parameter names and shapes of a BertModel with this config, without torch."""
    C, E, F = cfg.hidden_size, cfg.embedding_size or cfg.hidden_size, cfg.intermediate_size
    shapes = {
        "embeddings.word_embeddings.weight": (cfg.vocab_size, E),
        "embeddings.token_type_embeddings.weight": (cfg.type_vocab_size, E),
        "embeddings.LayerNorm.weight": (E,), "embeddings.LayerNorm.bias": (E,),
    }
    if pooler:
        shapes["pooler.dense.weight"], shapes["pooler.dense.bias"] = (C, C), (C,)
    if cfg.position_embedding_type == "absolute":
        shapes["embeddings.position_embeddings.weight"] = (cfg.max_position_embeddings, E)
    if E != C:
        shapes["encoder.embedding_hidden_mapping_in.weight"] = (C, E)
        shapes["encoder.embedding_hidden_mapping_in.bias"] = (C,)
    for i in range(1 if cfg.share_layers else cfg.num_hidden_layers):
        p = f"encoder.layer.{i}."
        linears = {n: (C, C) for n in ("attention.self.query", "attention.self.key", "attention.self.value",
                                       "attention.output.dense")}
        linears.update({"intermediate.dense": (F, C), "output.dense": (C, F)})
        for n, shape in linears.items():
            shapes[f"{p}{n}.weight"] = shape
            if cfg.use_bias:
                shapes[f"{p}{n}.bias"] = shape[:1]
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}{n}.weight"], shapes[f"{p}{n}.bias"] = (C,), (C,)
    if cfg.normalize_before:
        shapes["encoder.final_layer_norm.weight"], shapes["encoder.final_layer_norm.bias"] = (C,), (C,)
    return shapes


class NumpyGPT2(_NumpyModel):
    """GPT-2 forward in NumPy: `NumpyGPT2(config, weights)(input_ids, attention_mask)` -> logits (B, T, V)."""

    config_class = GPT2Config

    def __init__(self, config: GPT2Config, weights: dict[str, np.ndarray]) -> None:
        tied = {"lm_head.weight": "transformer.wte.weight"} if config.tie_word_embeddings else {}
        super().__init__(config, weights, _gpt2_shapes(config), prefix="transformer", tied=tied)
        self.act = ACTIVATIONS[config.activation_function]

    def __call__(self, input_ids, attention_mask=None) -> np.ndarray:
        cfg, w = self.config, self.w
        ids = np.asarray(input_ids)
        if ids.ndim != 2 or ids.size == 0 or ids.shape[1] > cfg.n_positions:
            raise InputError(f"input_ids must be a non-empty (batch, seq) array of at most {cfg.n_positions} "
                             f"positions, got shape {ids.shape}")
        if ids.min() < 0 or ids.max() >= cfg.vocab_size:
            raise InputError(f"input_ids must be in [0, {cfg.vocab_size})")
        if attention_mask is not None:
            attention_mask = check_like_ids("attention_mask", attention_mask, ids)
        T = ids.shape[1]
        pos = (sinusoidal_positions(cfg.n_positions, cfg.n_embd) if cfg.position_embedding_type == "sinusoidal"
               else w["transformer.wpe.weight"])
        x = w["transformer.wte.weight"][ids] + pos[:T]

        # Position t attends to positions <= t, and never to padding.
        bias = np.triu(np.full((T, T), np.finfo(np.float32).min, dtype=np.float32), k=1)       # (T, T)
        if attention_mask is not None:
            bias = np.minimum(bias, padding_bias(attention_mask))                                # (B, 1, T, T)
        for i in range(cfg.n_layer):
            x = self._block(x, bias, i)
        if cfg.normalize_before:
            x = self._norm(x, "transformer.ln_f")
        return x @ w["lm_head.weight" if "lm_head.weight" in w else "transformer.wte.weight"].T

    def _conv1d(self, x: np.ndarray, name: str) -> np.ndarray:
        # GPT-2 stores its projections (in, out): y = x W + b
        return x @ self.w[f"{name}.weight"] + self.w[f"{name}.bias"]

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        return layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.config.layer_norm_epsilon)

    def _attention(self, x: np.ndarray, bias: np.ndarray, i: int) -> np.ndarray:
        cfg, p = self.config, f"transformer.h.{i}.attn."
        q, k, v = np.split(self._conv1d(x, f"{p}c_attn"), 3, axis=-1)
        scale = 1.0 if cfg.scale_attn_weights else math.sqrt(cfg.n_embd // cfg.n_head)  # undo the 1/√D
        if cfg.scale_attn_by_inverse_layer_idx:
            scale /= i + 1
        return self._conv1d(multi_head_attention(q * np.float32(scale), k, v, bias, cfg.n_head), f"{p}c_proj")

    def _block(self, x: np.ndarray, bias: np.ndarray, i: int) -> np.ndarray:
        """GPT-2's pre-LN block, x += Attn(LN_1(x)); x += MLP(LN_2(x)), or GPT-1's post-LN one."""
        p = f"transformer.h.{i}."

        def mlp(h):
            return self._conv1d(self.act(self._conv1d(h, f"{p}mlp.c_fc")), f"{p}mlp.c_proj")

        if self.config.normalize_before:
            x = x + self._attention(self._norm(x, f"{p}ln_1"), bias, i)
            return x + mlp(self._norm(x, f"{p}ln_2"))
        x = self._norm(x + self._attention(x, bias, i), f"{p}ln_1")
        return self._norm(x + mlp(x), f"{p}ln_2")


def _gpt2_shapes(cfg: GPT2Config) -> dict[str, tuple]:
    """The parameter names and shapes of a GPT2LMHeadModel with this config (tied head left out), without torch."""
    C, F, V = cfg.n_embd, cfg.inner_size, cfg.vocab_size
    shapes = {"transformer.wte.weight": (V, C)}
    if cfg.position_embedding_type == "absolute":
        shapes["transformer.wpe.weight"] = (cfg.n_positions, C)
    if cfg.normalize_before:
        shapes["transformer.ln_f.weight"], shapes["transformer.ln_f.bias"] = (C,), (C,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, C)
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        for name, (n_in, n_out) in (("attn.c_attn", (C, 3 * C)), ("attn.c_proj", (C, C)), ("mlp.c_fc", (C, F)),
                                    ("mlp.c_proj", (F, C))):
            shapes[f"{p}{name}.weight"], shapes[f"{p}{name}.bias"] = (n_in, n_out), (n_out,)
        for name in ("ln_1", "ln_2"):
            shapes[f"{p}{name}.weight"], shapes[f"{p}{name}.bias"] = (C,), (C,)
    return shapes
