"""GPT (Radford et al., 2018/2019): a decoder-only, left-to-right language model.

The encoder–decoder's decoder without cross-attention: token + position embeddings, N causal
self-attention blocks (pre-LN with a final LayerNorm as GPT-2, or post-LN as GPT-1), and an output
projection tied to the token embedding. Position t sees positions ≤ t only, so one forward pass
trains every next-token prediction of a sequence at once.

Dimension letters: B batch, T length, C n_embd, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bertkit.config import GPTConfig
from bertkit.functional import causal_mask_bias, padding_mask_bias, sinusoidal_positions
from bertkit.generation import DecodingState, GenerationMixin
from bertkit.models.dropout import Dropout
from bertkit.models.transformer import KVCache, PretrainedMixin, TransformerLayer, check_ids, sequence_loss


@dataclass
class CausalLMOutput:
    """What GPTForCausalLM returns; names as transformers' CausalLMOutputWithPast."""

    loss: Tensor | None
    logits: Tensor                                   # (B, T, V)
    past_key_values: KVCache | None = None
    attentions: tuple[Tensor, ...] | None = None     # each layer, (B, H, T, S)


class GPTForCausalLM(PretrainedMixin, GenerationMixin, nn.Module):
    """Decoder-only Transformer LM: ids (B, T) -> next-token logits (B, T, V)."""

    config_class = GPTConfig

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config
        C = config.n_embd
        self.embed_tokens = nn.Embedding(config.vocab_size, C)
        if config.position_embedding_type == "sinusoidal":
            self.register_buffer("sinusoidal_table", sinusoidal_positions(config.n_positions, C), persistent=False)
        else:
            self.embed_positions = nn.Embedding(config.n_positions, C)
        self.dropout = Dropout(config.embd_pdrop)
        self.layers = nn.ModuleList(
            TransformerLayer(C, config.n_head, config.inner_size, dropout=config.resid_pdrop,
                             attention_dropout=config.attn_pdrop, activation=config.activation_function,
                             layer_norm_eps=config.layer_norm_epsilon, normalize_before=config.normalize_before)
            for _ in range(config.n_layer))
        self.layer_norm = nn.LayerNorm(C, eps=config.layer_norm_epsilon) if config.normalize_before else None
        self.lm_head = nn.Linear(C, config.vocab_size, bias=False)
        self.init_weights()
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def init_weights(self) -> None:
        """GPT-2's: N(0, 0.02) everywhere, the projections into the residual stream scaled by 1/√(2N)."""
        std = self.config.initializer_range
        for name, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                # each block adds two outputs to the residual sum; keep its variance from growing with depth
                residual = name.endswith(("fc2", "out_proj"))
                nn.init.normal_(module.weight, std=std / math.sqrt(2 * self.config.n_layer) if residual else std)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def tied_weights(self) -> dict[str, str]:
        return {"lm_head.weight": "embed_tokens.weight"} if self.config.tie_word_embeddings else {}

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                past_key_values: KVCache | None = None, use_cache: bool = False,
                output_attentions: bool = False) -> CausalLMOutput:
        """Logits for every position; with `labels` (usually = input_ids; -100 ignored) the next-token loss.

        `past_key_values` continues from cached positions; `attention_mask` (B, S over cached + new) masks
        padding keys of right-padded batches.
        """
        cfg = self.config
        past = len(past_key_values) if past_key_values is not None else 0
        check_ids("input_ids", input_ids, cfg.vocab_size)
        B, T = input_ids.shape
        if past + T > cfg.n_positions:
            raise ValueError(f"{past + T} positions is more than the model's {cfg.n_positions}; truncate the input")
        if past_key_values is None and use_cache:
            past_key_values = KVCache(cfg.n_layer)
        x = self.embed_tokens(input_ids) + self._positions(past, T)
        x = self.dropout(x)
        bias = None if T == 1 else causal_mask_bias(T, x.dtype, x.device, key_length=past + T)    # (T, S)
        if attention_mask is not None and not bool(attention_mask.all()):
            if tuple(attention_mask.shape) != (B, past + T):
                raise ValueError(f"attention_mask must be (batch, past + new) = {(B, past + T)}, "
                                 f"got {tuple(attention_mask.shape)}")
            padding = padding_mask_bias(attention_mask, x.dtype)                                # (B, 1, 1, S)
            bias = padding if bias is None else torch.minimum(bias, padding)           # (B, 1, T, S)
        attentions = []
        for i, layer in enumerate(self.layers):
            x, probs, _ = layer(x, bias, cache=past_key_values.layers[i] if past_key_values is not None else None,
                                output_attentions=output_attentions)
            attentions.append(probs)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        logits = self.lm_head(x)
        loss = None
        if labels is not None:  # position t predicts token t + 1
            loss = sequence_loss(logits[:, :-1], labels[:, 1:], 0.0)
        return CausalLMOutput(loss, logits, past_key_values, tuple(attentions) if output_attentions else None)

    def _positions(self, past: int, length: int) -> Tensor:
        if hasattr(self, "sinusoidal_table"):
            return self.sinusoidal_table[past: past + length]
        return self.embed_positions.weight[past: past + length]

    def start_decoding(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                       use_cache: bool = True) -> DecodingState:
        """Continue `input_ids` (B, T0), prompts of equal length; no prompt = start from bos."""
        if input_ids is None:
            input_ids = torch.full((1, 1), self.config.bos_token_id, dtype=torch.long,
                                   device=self.embed_tokens.weight.device)
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("generate() continues prompts of equal length; give one prompt, or prompts "
                             "without padding")
        check_ids("input_ids", input_ids, self.config.vocab_size, self.config.n_positions)
        return GPTDecoding(self, input_ids, use_cache)


class GPTDecoding(DecodingState):
    """Decoding state of a GPT: the KV cache of everything fed so far (or, without one, the tokens)."""

    def __init__(self, model: GPTForCausalLM, prompt: Tensor, use_cache: bool) -> None:
        self.model, self.start = model, prompt
        self.cache = KVCache(model.config.n_layer) if use_cache else None
        self.prefix: Tensor | None = None
        self.max_new_tokens = model.config.n_positions - prompt.size(1)

    def step(self, tokens: Tensor) -> Tensor:
        if self.cache is None:
            self.prefix = tokens if self.prefix is None else torch.cat([self.prefix, tokens], dim=1)
            tokens = self.prefix
        return self.model(tokens, past_key_values=self.cache).logits[:, -1]

    def reorder(self, index: Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(index)
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)
