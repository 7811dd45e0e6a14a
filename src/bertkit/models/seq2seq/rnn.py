"""The recurrent family the Transformer replaced: RNN, LSTM and GRU written from their equations.

Cells are pure functions next to their formulas; the modules around them keep torch.nn's parameter
names (`weight_ih_l0`, `bias_hh_l1_reverse`, ...) and gate order, so weights copy across unchanged and
`torch.nn.RNN/LSTM/GRU` serve as the reference in the tests (the tutorials' GRU, `variant="tutorial"`, which torch
does not have, is checked against its equations in NumPy). The input half of every gate, W_ih x + b_ih,
does not depend on the previous state, so layers compute it for all time steps in one matmul and loop
only over the recurrent half.

Dimension letters: B batch, T time, I input size, H hidden size, G gates × H.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.models.dropout import Dropout
from bertkit.models.functional import dropout
from bertkit.models.generation import DecodingState
from bertkit.models.outputs import Seq2SeqLMOutput
from bertkit.models.pretrained import check_ids, zero_padding_row
from bertkit.models.seq2seq.configuration import ATTENTION_SCORES, GRU_VARIANTS, Seq2SeqConfig
from bertkit.models.seq2seq.encoder_decoder import Seq2SeqPreTrainedModel

# mode -> number of gate blocks stacked in W_ih / W_hh
GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def check_gru_variant(variant: str) -> str:
    if variant not in GRU_VARIANTS:
        raise InputError(f"GRU variant must be {' or '.join(map(repr, GRU_VARIANTS))}, got {variant!r}")
    return variant


# ---- the equations ---------------------------------------------------------------------------------

def rnn_step(gx: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None, nonlinearity: str = "tanh") -> Tensor:
    """Elman RNN: h' = tanh(W_ih x + b_ih + W_hh h + b_hh); `gx` is the input half, (B, H)."""
    pre = gx + F.linear(h, w_hh, b_hh)
    return torch.tanh(pre) if nonlinearity == "tanh" else torch.relu(pre)


def lstm_step(gx: Tensor, state: tuple[Tensor, Tensor], w_hh: Tensor, b_hh: Tensor | None) -> tuple[Tensor, Tensor]:
    """LSTM (Hochreiter & Schmidhuber; torch's gate order i, f, g, o), `gx` = W_ih x + b_ih, (B, 4H).

    i = σ(·), f = σ(·), g = tanh(·), o = σ(·);  c' = f ⊙ c + i ⊙ g;  h' = o ⊙ tanh(c').
    """
    h, c = state
    i, f, g, o = (gx + F.linear(h, w_hh, b_hh)).chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def gru_step(gx: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None, variant: str = "torch") -> Tensor:
    """GRU (Cho et al., 2014; torch's gate order r, z, n), `gx` = W_ih x + b_ih, (B, 3H).

    r = σ(W_ir x + W_hr h), z = σ(W_iz x + W_hz h), h' = (1 - z) ⊙ n + z ⊙ h, and the candidate n is
      variant "torch":    n = tanh(W_in x + r ⊙ (W_hn h + b_hn)), the reset gate after the product, bias included
                          (cuDNN's form, and torch.nn.GRU's);
      variant "tutorial": n = tanh(W_in x + W_hn (r ⊙ h) + b_hn), the reset gate before it: h~ = tanh(W·[r ⊙ h, x] + b),
                          as Cho et al. and the tutorials write it.
    The two agree when r = 1 and differ otherwise; the weights have the same shapes and names.
    """
    xr, xz, xn = gx.chunk(3, dim=-1)
    if variant == "torch":
        hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, dim=-1)
        r = torch.sigmoid(xr + hr)
        n = torch.tanh(xn + r * hn)
    else:
        H = h.size(-1)
        b_rz, b_n = (None, None) if b_hh is None else b_hh.split([2 * H, H])
        hr, hz = F.linear(h, w_hh[: 2 * H], b_rz).chunk(2, dim=-1)
        r = torch.sigmoid(xr + hr)
        n = torch.tanh(xn + F.linear(r * h, w_hh[2 * H:], b_n))
    z = torch.sigmoid(xz + hz)
    return (1 - z) * n + z * h


def _step(mode: str, gx: Tensor, state, w_hh: Tensor, b_hh: Tensor | None, variant: str = "torch"):
    if mode == "LSTM":
        return lstm_step(gx, state, w_hh, b_hh)
    if mode == "GRU":
        return gru_step(gx, state, w_hh, b_hh, variant)
    return rnn_step(gx, state, w_hh, b_hh, "tanh" if mode == "RNN_TANH" else "relu")


# ---- one step: cells ---------------------------------------------------------------------------------

class _CellBase(nn.Module):
    """One time step; parameters named as torch.nn.RNNCell/LSTMCell/GRUCell's."""

    mode = "RNN_TANH"
    variant = "torch"  # the GRU's: where its reset gate acts

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        gates = GATES[self.mode] * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(gates, input_size))
        self.weight_hh = nn.Parameter(torch.empty(gates, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(gates)) if bias else None
        self.bias_hh = nn.Parameter(torch.empty(gates)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """U(-1/√H, 1/√H) for every weight and bias, torch's initialisation."""
        bound = 1 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def zero_state(self, batch: int, like: Tensor):
        h = like.new_zeros(batch, self.hidden_size)
        return (h, h.clone()) if self.mode == "LSTM" else h

    def forward(self, x: Tensor, state=None):
        """x (B, I), state (B, H) — for the LSTM a pair (h, c) — -> the next state."""
        if state is None:
            state = self.zero_state(x.size(0), x)
        return _step(self.mode, F.linear(x, self.weight_ih, self.bias_ih), state, self.weight_hh, self.bias_hh,
                     self.variant)


class RNNCell(_CellBase):
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh), or relu."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh") -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise InputError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(input_size, hidden_size, bias)


class LSTMCell(_CellBase):
    """Input, forget and output gates around a cell state c; returns (h', c')."""

    mode = "LSTM"


class GRUCell(_CellBase):
    """Reset and update gates; no separate cell state. `variant`: "torch" (torch.nn.GRUCell's) or "tutorial"."""

    mode = "GRU"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, variant: str = "torch") -> None:
        self.variant = check_gru_variant(variant)
        super().__init__(input_size, hidden_size, bias)


CELLS = {"rnn": RNNCell, "lstm": LSTMCell, "gru": GRUCell}


# ---- many steps, many layers -----------------------------------------------------------------------------

class _RNNBase(nn.Module):
    """Stacked (optionally bidirectional) recurrent layers with torch.nn.RNN's arguments and parameter names.

    `mask` (B, T), 1 on real steps, handles right-padded batches the way packed sequences do: a padded step
    leaves the state unchanged and outputs zeros, so the forward direction ends on each sequence's last real
    step and the backward direction starts there.
    """

    variant = "torch"  # the GRU's: where its reset gate acts

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False) -> None:
        super().__init__()
        if num_layers < 1 or hidden_size < 1 or input_size < 1:
            raise InputError("input_size, hidden_size and num_layers must be positive")
        if not 0.0 <= dropout < 1.0:
            raise InputError(f"dropout must be in [0, 1), got {dropout}")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional = dropout, bidirectional
        self.num_directions = 2 if bidirectional else 1
        gates = GATES[mode] * hidden_size
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size * self.num_directions
            for suffix in self._suffixes(layer):
                self.register_parameter(f"weight_ih{suffix}", nn.Parameter(torch.empty(gates, layer_input)))
                self.register_parameter(f"weight_hh{suffix}", nn.Parameter(torch.empty(gates, hidden_size)))
                if bias:
                    self.register_parameter(f"bias_ih{suffix}", nn.Parameter(torch.empty(gates)))
                    self.register_parameter(f"bias_hh{suffix}", nn.Parameter(torch.empty(gates)))
        self.reset_parameters()

    def _suffixes(self, layer: int) -> list[str]:
        return [f"_l{layer}"] + ([f"_l{layer}_reverse"] if self.bidirectional else [])

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def _weights(self, suffix: str) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        get = lambda name: getattr(self, f"{name}{suffix}", None)
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    def _run_direction(self, x: Tensor, state, suffix: str, reverse: bool, mask: Tensor | None):
        """One layer, one direction over x (B, T, I); returns outputs (B, T, H) and the final state."""
        w_ih, w_hh, b_ih, b_hh = self._weights(suffix)
        gx = F.linear(x, w_ih, b_ih)                                                 # (B, T, G), all steps at once
        outputs = [None] * x.size(1)
        for t in (reversed(range(x.size(1))) if reverse else range(x.size(1))):
            new = _step(self.mode, gx[:, t], state, w_hh, b_hh, self.variant)
            if mask is not None:  # padded steps keep the old state
                keep = mask[:, t, None]
                new = tuple(torch.where(keep, n, s) for n, s in zip(new, state)) if self.mode == "LSTM" \
                    else torch.where(keep, new, state)
            state = new
            h = state[0] if self.mode == "LSTM" else state
            outputs[t] = h if mask is None else h * keep
        return torch.stack(outputs, dim=1), state

    def forward(self, input: Tensor, hx=None, mask: Tensor | None = None):
        """input (T, B, I), or (B, T, I) if batch_first; hx (L·dirs, B, H) (LSTM: a pair) -> (output, h_n)."""
        x = input if self.batch_first else input.transpose(0, 1)                    # (B, T, I)
        if x.dim() != 3 or x.size(-1) != self.input_size:
            raise InputError(f"input must be 3-D with {self.input_size} features, got {tuple(input.shape)}")
        B = x.size(0)
        if mask is not None:
            if tuple(mask.shape) != tuple(x.shape[:2]):
                raise InputError(f"mask must be (batch, time) = {tuple(x.shape[:2])}, got {tuple(mask.shape)}")
            mask = mask.to(torch.bool)
        if hx is None:
            zeros = x.new_zeros(self.num_layers * self.num_directions, B, self.hidden_size)
            hx = (zeros, zeros) if self.mode == "LSTM" else zeros
        final_h, final_c = [], []
        for layer in range(self.num_layers):
            outs = []
            for d, suffix in enumerate(self._suffixes(layer)):
                i = layer * self.num_directions + d
                state = (hx[0][i], hx[1][i]) if self.mode == "LSTM" else hx[i]
                out, state = self._run_direction(x, state, suffix, reverse=d == 1, mask=mask)
                outs.append(out)
                final_h.append(state[0] if self.mode == "LSTM" else state)
                if self.mode == "LSTM":
                    final_c.append(state[1])
            x = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]              # (B, T, dirs·H)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = dropout(x, self.dropout)
        output = x if self.batch_first else x.transpose(0, 1)
        h_n = torch.stack(final_h)
        return (output, (h_n, torch.stack(final_c))) if self.mode == "LSTM" else (output, h_n)


class RNN(_RNNBase):
    """Elman RNN layers, as torch.nn.RNN."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 **kwargs) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise InputError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size,
                         num_layers, **kwargs)


class LSTM(_RNNBase):
    """LSTM layers, as torch.nn.LSTM; the state is a pair (h, c)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, **kwargs) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, **kwargs)


class GRU(_RNNBase):
    """GRU layers, as torch.nn.GRU; `variant` "tutorial" applies the reset gate before the product (`gru_step`)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, variant: str = "torch",
                 **kwargs) -> None:
        self.variant = check_gru_variant(variant)
        super().__init__("GRU", input_size, hidden_size, num_layers, **kwargs)


LAYERS = {"rnn": RNN, "lstm": LSTM, "gru": GRU}


# ---- the encoder–decoder of Cho et al. / Bahdanau et al. -------------------------------------------------

def attend(scores: Tensor, memory: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Scores (B, S) -> α = softmax over the real source positions, and the context c = Σ α_j h_j (B, K)."""
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return torch.bmm(weights[:, None], memory).squeeze(1), weights


class BahdanauAttention(nn.Module):
    """Additive attention: e_j = vᵀ tanh(W s + U h_j), α = softmax(e) over source positions, c = Σ α_j h_j.

    (Bahdanau et al., 2015, appendix A.1.2.) U h_j does not depend on the decoder state: `project_keys`
    computes it once per source.
    """

    def __init__(self, query_size: int, key_size: int, attention_size: int) -> None:
        super().__init__()
        self.query = nn.Linear(query_size, attention_size, bias=False)   # W
        self.key = nn.Linear(key_size, attention_size)                   # U (and the bias of the tanh)
        self.energy = nn.Linear(attention_size, 1, bias=False)          # v

    def project_keys(self, memory: Tensor) -> Tensor:
        return self.key(memory)                                         # (B, S, A)

    def forward(self, query: Tensor, keys: Tensor, memory: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """query (B, Q), keys (B, S, A), memory (B, S, K), mask (B, S) bool -> context (B, K), weights (B, S)."""
        scores = self.energy(torch.tanh(self.query(query)[:, None] + keys)).squeeze(-1)       # (B, S)
        return attend(scores, memory, mask)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention: e_j = sᵀ h_j / √d, α = softmax(e), c = Σ α_j h_j (Luong et al., 2015's "dot"
    score, scaled by √d as the Transformer's so that the scores do not grow with the width d).

    sᵀ h_j needs states of one width. Where the keys are wider than the query (the bidirectional encoder's 2H
    against the decoder's H) `project_keys` first maps them to d = the query's width, k_j = W h_j, once per
    source: the score is then sᵀ W h_j / √d, Luong's "general" form. Of equal widths there is no parameter at
    all. The context is always the unprojected states h_j.
    """

    def __init__(self, query_size: int, key_size: int) -> None:
        super().__init__()
        self.key = nn.Linear(key_size, query_size, bias=False) if key_size != query_size else None   # W
        self.scale = query_size ** -0.5

    def project_keys(self, memory: Tensor) -> Tensor:
        return memory if self.key is None else self.key(memory)         # (B, S, Q)

    def forward(self, query: Tensor, keys: Tensor, memory: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """query (B, Q), keys (B, S, Q), memory (B, S, K), mask (B, S) bool -> context (B, K), weights (B, S)."""
        scores = torch.bmm(keys, query[:, :, None]).squeeze(-1) * self.scale                 # (B, S)
        return attend(scores, memory, mask)


def attention_for(score: str, query_size: int, key_size: int) -> nn.Module:
    """The attention of a score kind: "additive" (Bahdanau, its hidden layer as wide as the query) or "dot"."""
    if score == "additive":
        return BahdanauAttention(query_size, key_size, query_size)
    if score == "dot":
        return DotProductAttention(query_size, key_size)
    raise InputError(f"attention score must be {' or '.join(map(repr, ATTENTION_SCORES))}, got {score!r}")


class RNNSeq2Seq(Seq2SeqPreTrainedModel):
    """Bidirectional RNN encoder, RNN decoder; with attention (Bahdanau's additive score, or the scaled dot
    product) a new context per step, without it one fixed summary of the source fed to every step (Cho et al.,
    2014). Same interface as Seq2SeqTransformer.
    """

    architecture = "rnn"
    source_embedding_weight = "source_embeddings.weight"
    target_embedding_weight = "target_embeddings.weight"

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__(config)
        H, mode = config.d_model, config.rnn_cell
        source = nn.Embedding(config.vocab_size, H, padding_idx=config.pad_token_id)
        self.source_embeddings = source
        self.target_embeddings = source if config.share_encoder_decoder_embeddings else nn.Embedding(
            config.target_vocab_size, H, padding_idx=config.pad_token_id)
        variant = {"variant": config.gru_variant} if mode == "gru" else {}
        self.encoder = LAYERS[mode](H, H, num_layers=config.encoder_layers, batch_first=True,
                                    dropout=config.dropout, bidirectional=True, **variant)
        self.bridge = nn.Linear(2 * H, H)          # last encoder states (both directions) -> first decoder state
        self.attention = attention_for(config.attention_score, H, 2 * H) if config.rnn_attention else None
        self.cells = nn.ModuleList(CELLS[mode](H + 2 * H if i == 0 else H, H, **variant)
                                   for i in range(config.decoder_layers))
        self.pre_output = nn.Linear(H + 2 * H + H, H)  # [s_t; c_t; embedding of y_{t-1}] -> the output layer's input
        self.lm_head = nn.Linear(H, config.target_vocab_size, bias=False)
        self.dropout = Dropout(config.dropout)
        self.init_weights()

    def _init_weights(self, module: nn.Module) -> None:
        """N(0, H^-1/2) embeddings with a zero padding row; the recurrent layers and Linears keep torch's init."""
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=module.embedding_dim ** -0.5)
            zero_padding_row(module)

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> dict[str, Tensor | None]:
        """Source ids (B, S) -> the decoder's starting point: memory, keys, mask, fixed context, first state."""
        check_ids("input_ids", input_ids, self.config.vocab_size, values=self.checks_values(input_ids))
        mask = attention_mask.to(torch.bool) if attention_mask is not None else torch.ones_like(input_ids, dtype=bool)
        memory, final = self.encoder(self.dropout(self.source_embeddings(input_ids)), mask=mask)   # (B, S, 2H)
        h_n = final[0] if isinstance(final, tuple) else final                                  # (L·2, B, H)
        summary = torch.cat([h_n[-2], h_n[-1]], dim=-1)                  # last layer, forward and backward (B, 2H)
        first = torch.tanh(self.bridge(summary))
        state = [(first, torch.zeros_like(first)) if self.config.rnn_cell == "lstm" else first
                 for _ in self.cells]
        keys = self.attention.project_keys(memory) if self.attention is not None else None
        return {"memory": memory, "keys": keys, "mask": mask, "summary": summary, "state": state}

    def _top(self, state: list) -> Tensor:
        return state[-1][0] if self.config.rnn_cell == "lstm" else state[-1]

    def decode_step(self, embedded: Tensor, enc: dict) -> tuple[Tensor, Tensor | None]:
        """One target step: read y_{t-1}'s embedding (B, H), update enc['state']; return [s_t; c_t; e] (B, 4H)
        and the attention weights α_t over the source (B, S) that made c_t (None without attention)."""
        state = enc["state"]
        if self.attention is not None:  # attend with the previous state, as Bahdanau et al.
            context, weights = self.attention(self._top(state), enc["keys"], enc["memory"], enc["mask"])
        else:
            context, weights = enc["summary"], None
        x = torch.cat([embedded, context], dim=-1)
        new_state = []
        for i, (cell, s) in enumerate(zip(self.cells, state)):
            s = cell(x if i == 0 else self.dropout(x), s)
            new_state.append(s)
            x = s[0] if isinstance(s, tuple) else s
        enc["state"] = new_state
        return torch.cat([x, context, embedded], dim=-1), weights

    def output_logits(self, features: Tensor) -> Tensor:
        return self.lm_head(self.dropout(torch.tanh(self.pre_output(features))))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                decoder_input_ids: Tensor | None = None, labels: Tensor | None = None,
                output_attentions: bool = False) -> Seq2SeqLMOutput:
        """Teacher-forced logits (B, T, V); with `labels` (-100 = ignored) also the label-smoothed loss; with
        `output_attentions` and attention, the alignment (Bahdanau's α) as cross_attentions: one (B, 1, T, S)."""
        decoder_input_ids = self.decoder_inputs(decoder_input_ids, labels)
        enc = self.encode(input_ids, attention_mask)
        embedded = self.dropout(self.target_embeddings(decoder_input_ids))                  # (B, T, H)
        features, weights = zip(*(self.decode_step(embedded[:, t], enc) for t in range(embedded.size(1))))
        logits = self.output_logits(torch.stack(features, dim=1))
        alignment = None
        if output_attentions and self.attention is not None:  # one layer of one head, as transformers shapes them
            alignment = (torch.stack(weights, dim=1)[:, None],)
        return Seq2SeqLMOutput(self.loss(logits, labels), logits, enc["memory"], cross_attentions=alignment)

    def start_decoding(self, input_ids: Tensor | None, attention_mask: Tensor | None = None,
                       use_cache: bool = True) -> DecodingState:
        """Encode the source once; the decoder starts from bos. An RNN's state is its own cache."""
        state = RNNDecoding(self, self.encode(self.require_source(input_ids), attention_mask))
        state.default_max_new_tokens = 2 * int(state.enc["mask"].sum(1).max()) + 10
        return state


class RNNDecoding(DecodingState):
    """Decoding state of an RNNSeq2Seq: the encoder's outputs and the decoder's recurrent state."""

    def __init__(self, model: RNNSeq2Seq, enc: dict) -> None:
        self.model, self.enc = model, enc
        self.start = torch.full((enc["memory"].size(0), 1), model.config.bos_token_id, dtype=torch.long,
                                device=enc["memory"].device)

    def step(self, tokens: Tensor) -> Tensor:
        embedded = self.model.target_embeddings(tokens)
        for t in range(tokens.size(1)):
            features, _ = self.model.decode_step(embedded[:, t], self.enc)
        return self.model.output_logits(features)

    def reorder(self, index: Tensor) -> None:
        pick = lambda x: None if x is None else x.index_select(0, index)
        for name, value in self.enc.items():
            if name == "state":
                self.enc[name] = [tuple(pick(t) for t in s) if isinstance(s, tuple) else pick(s) for s in value]
            else:
                self.enc[name] = pick(value)
