"""GPT-2 (Radford et al., 2019): a decoder-only, left-to-right language model, with GPT-2's names and layout.

Token + position embeddings, N causal self-attention blocks (pre-LN with a final LayerNorm as GPT-2, or
post-LN as GPT-1), and an output projection tied to the token embedding. Position t sees positions ≤ t
only, so one forward pass trains every next-token prediction of a sequence at once.

Module and weight names are transformers' GPT2LMHeadModel's (`transformer.wte`, `transformer.h.N.attn.c_attn`,
`transformer.ln_f`, `lm_head`), and so is the layout: GPT-2's projections are `Conv1D`s, Linears that store
their weight as (in, out). So a directory written by either library loads in the other.

Dimension letters: B batch, T new positions, S key positions (cached + new), C n_embd, H heads, D head size,
V vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.models.dropout import Dropout
from bertkit.models.functional import ACT2FN, causal_mask_bias, multi_head_attention, sinusoidal_positions
from bertkit.models.generation import DecodingState, GenerationMixin, KVCache, extend_self_attention_cache
from bertkit.models.gpt.configuration import GPT2Config
from bertkit.models.losses import sequence_loss
from bertkit.models.outputs import BaseModelOutputWithPast, CausalLMOutput
from bertkit.models.pretrained import PreTrainedModel, check_ids


class Conv1D(nn.Module):
    """GPT-2's Linear: y = x W + b with W stored (in, out), the transpose of torch's Linear (out, in)."""

    def __init__(self, out_features: int, in_features: int) -> None:  # transformers' argument order
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight.t(), self.bias)


class GPT2Attention(nn.Module):
    """Causal multi-head self-attention: Q, K, V from one (C -> 3C) projection `c_attn`, output `c_proj`."""

    def __init__(self, config: GPT2Config, layer_idx: int) -> None:
        super().__init__()
        C = config.n_embd
        self.num_heads, self.head_dim = config.n_head, C // config.n_head
        self.c_attn = Conv1D(3 * C, C)
        self.c_proj = Conv1D(C, C)
        self.attn_dropout = config.attn_pdrop
        self.resid_dropout = Dropout(config.resid_pdrop)
        # The attention maths divides scores by √D; GPT-2's options change that scale, applied to Q instead.
        self.query_scale = 1.0 if config.scale_attn_weights else math.sqrt(self.head_dim)
        if config.scale_attn_by_inverse_layer_idx:
            self.query_scale /= layer_idx + 1

    def forward(self, x: Tensor, bias: Tensor | None, cache: dict | None = None,
                output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (B, H, T, D)
        if self.query_scale != 1.0:
            q = q * self.query_scale
        k, v = extend_self_attention_cache(cache, k, v)                                       # (B, H, S, D)
        context, probs = multi_head_attention(q, k, v, bias, self.attn_dropout, self.training, output_attentions)
        return self.resid_dropout(self.c_proj(context.transpose(1, 2).reshape(B, T, C))), probs


class GPT2MLP(nn.Module):
    """The feed-forward: Conv1D C -> inner, activation, Conv1D inner -> C, dropout."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.c_fc = Conv1D(config.inner_size, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, config.inner_size)
        self.act = ACT2FN[config.activation_function]
        self.dropout = Dropout(config.resid_pdrop)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    """GPT-2's pre-LN block, x += Attn(LN_1(x)); x += MLP(LN_2(x)), or GPT-1's post-LN one,
    x = LN_1(x + Attn(x)); x = LN_2(x + MLP(x))."""

    def __init__(self, config: GPT2Config, layer_idx: int) -> None:
        super().__init__()
        self.normalize_before = config.normalize_before
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(config)

    def forward(self, x: Tensor, bias: Tensor | None, cache: dict | None = None,
                output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        if self.normalize_before:
            attended, probs = self.attn(self.ln_1(x), bias, cache, output_attentions)
            x = x + attended
            return x + self.mlp(self.ln_2(x)), probs
        attended, probs = self.attn(x, bias, cache, output_attentions)
        x = self.ln_1(x + attended)
        return self.ln_2(x + self.mlp(x)), probs


class GPT2PreTrainedModel(PreTrainedModel):
    """The GPT-2 family: GPT2Config, GPT-2's initialisation, task models hold the decoder as `transformer`."""

    config_class = GPT2Config
    base_model_prefix = "transformer"

    def _init_weights(self, module: nn.Module) -> None:
        """N(0, 0.02) everywhere, the projections into the residual stream scaled by 1/√(2N) (GPT-2, 2.3)."""
        std = self.config.initializer_range
        if isinstance(module, Conv1D):
            nn.init.normal_(module.weight, std=std)
            nn.init.zeros_(module.bias)
        elif isinstance(module, (GPT2Attention, GPT2MLP)):
            # each block adds two outputs to the residual sum; keep its variance from growing with depth
            nn.init.normal_(module.c_proj.weight, std=std / math.sqrt(2 * self.config.n_layer))
        else:
            super()._init_weights(module)


class GPT2Model(GPT2PreTrainedModel):
    """The decoder: ids (B, T) -> hidden states (B, T, C), continuing from a KV cache if given one."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__(config)
        C = config.n_embd
        self.wte = nn.Embedding(config.vocab_size, C)
        fixed = config.position_embedding_type == "sinusoidal"
        # fixed positions are a buffer (neither trained nor saved), learned ones an embedding; the other is None
        self.register_buffer("sinusoidal_table", sinusoidal_positions(config.n_positions, C) if fixed else None,
                             persistent=False)
        self.wpe = None if fixed else nn.Embedding(config.n_positions, C)
        self.drop = Dropout(config.embd_pdrop)
        self.h = nn.ModuleList(GPT2Block(config, i) for i in range(config.n_layer))
        self.ln_f = nn.LayerNorm(C, eps=config.layer_norm_epsilon) if config.normalize_before else None
        self.init_weights()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                past_key_values: KVCache | None = None, use_cache: bool = False,
                output_attentions: bool = False) -> BaseModelOutputWithPast:
        """input_ids (B, T) follow the `past_key_values` positions; `attention_mask` (B, S) over cached + new
        positions marks padding keys (1 = token, 0 = padding), e.g. of right-padded batches."""
        cfg = self.config
        check_ids("input_ids", input_ids, cfg.vocab_size, values=self.checks_values(input_ids))
        past = len(past_key_values) if past_key_values is not None else 0
        B, T = input_ids.shape
        if past + T > cfg.n_positions:
            raise InputError(f"{past + T} positions is more than the model's {cfg.n_positions}; truncate the input")
        if attention_mask is not None and tuple(attention_mask.shape) != (B, past + T):
            raise InputError(f"attention_mask must be (batch, past + new) = {(B, past + T)}, "
                             f"got {tuple(attention_mask.shape)}")
        if past_key_values is None and use_cache:
            past_key_values = KVCache(cfg.n_layer)
        x = self.drop(self.wte(input_ids) + self.positions(past, T))
        bias = None if T == 1 else causal_mask_bias(T, x.dtype, x.device, key_length=past + T)    # (T, S)
        padding = self.padding_bias(attention_mask, x.dtype)                                      # (B, 1, 1, S)
        if padding is not None:
            bias = padding if bias is None else torch.minimum(bias, padding)                      # (B, 1, T, S)
        attentions = []
        for i, block in enumerate(self.h):
            x, probs = block(x, bias, past_key_values.layers[i] if past_key_values is not None else None,
                             output_attentions)
            attentions.append(probs)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return BaseModelOutputWithPast(x, past_key_values, tuple(attentions) if output_attentions else None)

    def positions(self, past: int, length: int) -> Tensor:
        """Position vectors (T, C) of positions past .. past + length - 1."""
        table = self.sinusoidal_table if self.wpe is None else self.wpe.weight
        return table[past: past + length]


class GPT2LMHeadModel(GenerationMixin, GPT2PreTrainedModel):
    """GPT-2 language model: ids (B, T) -> next-token logits (B, T, V); `generate()` continues a prompt."""

    head_prefixes = ("lm_head.",)  # a bare GPT2Model checkpoint: an untied head starts fresh

    def __init__(self, config: GPT2Config) -> None:
        super().__init__(config)
        self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.init_weights()

    def tied_weights(self) -> dict[str, str]:
        return {"lm_head.weight": "transformer.wte.weight"} if self.config.tie_word_embeddings else {}

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                past_key_values: KVCache | None = None, use_cache: bool = False,
                output_attentions: bool = False) -> CausalLMOutput:
        """Logits for every position; with `labels` (usually = input_ids; -100 ignored) the next-token loss."""
        out = self.transformer(input_ids, attention_mask, past_key_values, use_cache, output_attentions)
        logits = self.lm_head(out.last_hidden_state)
        loss = None
        if labels is not None:  # position t predicts token t + 1
            loss = sequence_loss(logits[:, :-1], labels[:, 1:], check=self.checks_values(labels))
        return CausalLMOutput(loss, logits, out.past_key_values, out.attentions)

    def start_decoding(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                       use_cache: bool = True) -> DecodingState:
        """Continue `input_ids` (B, T0), prompts of equal length; no prompt = start from bos."""
        if input_ids is None:
            bos = self.config.bos_token_id
            if bos is None or not 0 <= bos < self.config.vocab_size:
                raise InputError(f"generate() without a prompt starts from bos_token_id, and this model's ({bos}) is "
                                 f"not in its vocabulary (size {self.config.vocab_size}); give a prompt")
            input_ids = torch.full((1, 1), bos, dtype=torch.long,
                                   device=self.transformer.wte.weight.device)
        if attention_mask is not None and not bool(attention_mask.all()):
            raise InputError("generate() continues prompts of equal length; give one prompt, or prompts "
                             "without padding")
        check_ids("input_ids", input_ids, self.config.vocab_size, self.config.n_positions)
        return GPT2Decoding(self, input_ids, use_cache)


class GPT2Decoding(DecodingState):
    """Decoding state of a GPT-2: the KV cache of everything fed so far (or, without one, the tokens)."""

    def __init__(self, model: GPT2LMHeadModel, prompt: Tensor, use_cache: bool) -> None:
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


def gpt_class_for(config: GPT2Config) -> type[GPT2PreTrainedModel]:
    """The class a GPT-2 directory was saved from (config.json's `architectures`): the bare decoder, else the
    language model (which starts from a bare decoder's weights too)."""
    return GPT2Model if config.architectures == ["GPT2Model"] else GPT2LMHeadModel
