"""The recurrent language model's configuration: its cell, width, depth and output layer."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.models.configuration import PretrainedConfig
from bertkit.models.seq2seq.configuration import GRU_VARIANTS, RNN_CELLS


@dataclass
class RNNLMConfig(PretrainedConfig):
    """A language model of stacked recurrent layers (Mikolov et al., 2010; Zaremba et al., 2014): tokens are
    embedded in `hidden_size` dimensions, run through `num_layers` RNN / LSTM / GRU layers, and the top state
    predicts the next token, through the embedding matrix itself when `tie_word_embeddings` (Press & Wolf, 2017).
    """

    model_type = "bertkit-rnn-lm"
    family = "recurrent"

    vocab_size: int = 8000
    hidden_size: int = 256                      # embedding and state width (one, so the output can be tied)
    num_layers: int = 2
    rnn_cell: str = "lstm"                      # "rnn" (Elman, tanh) | "lstm" | "gru"
    gru_variant: str = "torch"                  # "torch" | "tutorial": where a GRU's reset gate acts
    dropout: float = 0.1                        # on the embeddings, between layers and before the output
    tie_word_embeddings: bool = True            # output projection = the input embeddings
    pad_token_id: int | None = 0
    bos_token_id: int | None = 2                # a document's start: generation without a prompt starts here
    eos_token_id: int | None = 3

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""
        self.check_positive(("vocab_size", "hidden_size", "num_layers"))
        self.check_choice("rnn_cell", RNN_CELLS)
        self.check_choice("gru_variant", GRU_VARIANTS)
        self.check_probabilities(("dropout",))
        self.check_token_ids(("pad_token_id", "bos_token_id", "eos_token_id"), self.vocab_size, harmless=True)

    def summary(self) -> list[tuple[str, str]]:
        cell = self.rnn_cell.upper() + (" (the tutorials' reset gate)" if self.rnn_cell == "gru" and
                                        self.gru_variant == "tutorial" else "")
        output = "tied to" if self.tie_word_embeddings else "apart from"
        return [("layers", f"{self.num_layers} × {cell}  hidden {self.hidden_size}"),
                ("vocab", f"{self.vocab_size}, output {output} the token embedding"),
                ("special ids", f"bos {self.bos_token_id}  eos {self.eos_token_id}  pad {self.pad_token_id}")]
