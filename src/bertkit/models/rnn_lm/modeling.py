"""The recurrent language model: ids (B, T) -> embedding -> RNN / LSTM / GRU layers -> next-token logits (B, T, V).

The layers are bertkit's own (models/seq2seq/rnn.py, checked against torch.nn). Nothing bounds the length it
reads: the state carries the whole prefix, and in generation that state is the whole cache, one step per token.

Dimension letters: B batch, T time, H hidden size, V vocabulary, L layers.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.models.dropout import Dropout
from bertkit.models.generation import DecodingState, GenerationMixin
from bertkit.models.losses import sequence_loss
from bertkit.models.outputs import CausalLMOutput
from bertkit.models.pretrained import PreTrainedModel, check_ids
from bertkit.models.rnn_lm.configuration import RNNLMConfig
from bertkit.models.seq2seq.rnn import LAYERS


class RNNForCausalLM(GenerationMixin, PreTrainedModel):
    """Embedding -> recurrent layers -> the output projection; `generate()` continues a prompt."""

    config_class = RNNLMConfig

    def __init__(self, config: RNNLMConfig) -> None:
        super().__init__(config)
        H = config.hidden_size
        self.embeddings = nn.Embedding(config.vocab_size, H)
        variant = {"variant": config.gru_variant} if config.rnn_cell == "gru" else {}
        self.rnn = LAYERS[config.rnn_cell](H, H, num_layers=config.num_layers, batch_first=True,
                                           dropout=config.dropout, **variant)
        self.lm_head = nn.Linear(H, config.vocab_size, bias=False)
        self.dropout = Dropout(config.dropout)
        self.init_weights()

    def _init_weights(self, module: nn.Module) -> None:
        """N(0, H^-1/2) embeddings (tied, logits of O(1) from states in [-1, 1]); the recurrent layers keep torch's
        U(-1/√H, 1/√H), and an untied output layer nn.Linear's."""
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=module.embedding_dim ** -0.5)

    def tied_weights(self) -> dict[str, str]:
        return {"lm_head.weight": "embeddings.weight"} if self.config.tie_word_embeddings else {}

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                state: Tensor | tuple[Tensor, Tensor] | None = None) -> CausalLMOutput:
        """Logits for every position, continuing from `state` (L, B, H) (an LSTM's: a pair) if given; with
        `labels` (usually = input_ids; -100 ignored) the next-token loss. Right padding in `attention_mask` leaves
        the state as it was. `past_key_values` of the output is the state after the last step."""
        check_ids("input_ids", input_ids, self.config.vocab_size, values=self.checks_values(input_ids))
        out, state = self.rnn(self.dropout(self.embeddings(input_ids)), state, mask=attention_mask)   # (B, T, H)
        logits = self.lm_head(self.dropout(out))
        loss = None
        if labels is not None:  # position t predicts token t + 1
            loss = sequence_loss(logits[:, :-1], labels[:, 1:], check=self.checks_values(labels))
        return CausalLMOutput(loss, logits, state)

    def start_decoding(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                       use_cache: bool = True) -> DecodingState:
        """Continue `input_ids` (B, T0), prompts of equal length; no prompt = start from bos. The recurrent state
        is the cache whatever `use_cache` says: without it each step would re-read the prefix to the same state."""
        if input_ids is None:
            bos = self.config.bos_token_id
            if bos is None or not 0 <= bos < self.config.vocab_size:
                raise InputError(f"generate() without a prompt starts from bos_token_id, and this model's ({bos}) is "
                                 f"not in its vocabulary (size {self.config.vocab_size}); give a prompt")
            input_ids = torch.full((1, 1), bos, dtype=torch.long, device=self.embeddings.weight.device)
        if attention_mask is not None and not bool(attention_mask.all()):
            raise InputError("generate() continues prompts of equal length; give one prompt, or prompts "
                             "without padding")
        check_ids("input_ids", input_ids, self.config.vocab_size)
        return RNNLMDecoding(self, input_ids)


class RNNLMDecoding(DecodingState):
    """Decoding state of a recurrent LM: the state after everything fed so far."""

    def __init__(self, model: RNNForCausalLM, prompt: Tensor) -> None:
        self.model, self.start = model, prompt
        self.state: Tensor | tuple[Tensor, Tensor] | None = None

    def step(self, tokens: Tensor) -> Tensor:
        out = self.model(tokens, state=self.state)
        self.state = out.past_key_values
        return out.logits[:, -1]

    def reorder(self, index: Tensor) -> None:
        if isinstance(self.state, tuple):                                        # the state's batch is dim 1
            self.state = tuple(s.index_select(1, index) for s in self.state)
        elif self.state is not None:
            self.state = self.state.index_select(1, index)


def rnn_lm_class(config: RNNLMConfig) -> type[RNNForCausalLM]:
    """The class a recurrent LM directory was saved from: there is one."""
    return RNNForCausalLM
