"""What the encoder–decoder families share: Seq2SeqConfig, tied embeddings, teacher forcing, the loss.

The Transformer (seq2seq.py) and the RNN encoder–decoders (rnn.py) subclass `Seq2SeqPreTrainedModel`, name
their architecture and where their embeddings live, and get the rest: `forward(input_ids, attention_mask,
decoder_input_ids | labels)` and `generate(input_ids, ...)` behave the same for both.

Dimension letters: B batch, T target length, V target vocabulary.
"""

from __future__ import annotations

from torch import Tensor

from bertkit.errors import InputError
from bertkit.models.generation import GenerationMixin
from bertkit.models.losses import sequence_loss, shift_tokens_right
from bertkit.models.pretrained import PreTrainedModel, check_ids
from bertkit.models.seq2seq.configuration import Seq2SeqConfig


class Seq2SeqPreTrainedModel(GenerationMixin, PreTrainedModel):
    """Base of the encoder–decoder models: one Seq2SeqConfig `architecture` per class."""

    config_class = Seq2SeqConfig
    architecture = ""                  # the Seq2SeqConfig.architecture this class builds
    source_embedding_weight = ""       # parameter names of the two embedding matrices, for the ties
    target_embedding_weight = ""

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__(config)
        if config.architecture != self.architecture:
            raise TypeError(f"{type(self).__name__} needs a Seq2SeqConfig with architecture {self.architecture!r}")

    def tied_weights(self) -> dict[str, str]:
        tied = {}
        if self.config.share_encoder_decoder_embeddings:
            tied[self.target_embedding_weight] = self.source_embedding_weight
        if self.config.tie_word_embeddings:
            tied["lm_head.weight"] = self.target_embedding_weight
        return tied

    def decoder_inputs(self, decoder_input_ids: Tensor | None, labels: Tensor | None,
                       max_length: int | None = None) -> Tensor:
        """The decoder's input ids (B, T): as given, or for teacher forcing the labels shifted right; checked."""
        cfg = self.config
        if decoder_input_ids is None:
            if labels is None:
                raise InputError("give decoder_input_ids or labels (decoder inputs are labels shifted right)")
            decoder_input_ids = shift_tokens_right(labels, cfg.pad_token_id, cfg.bos_token_id)
        check_ids("decoder_input_ids", decoder_input_ids, cfg.target_vocab_size, max_length,
                  self.checks_values(decoder_input_ids))
        return decoder_input_ids

    def loss(self, logits: Tensor, labels: Tensor | None) -> Tensor | None:
        """Label-smoothed cross-entropy over the labelled positions (-100 = ignored); None without labels."""
        if labels is None:
            return None
        return sequence_loss(logits, labels, self.config.label_smoothing, check=self.checks_values(labels))

    @staticmethod
    def require_source(input_ids: Tensor | None) -> Tensor:
        """Generation starts from an encoded source; say so when there is none."""
        if input_ids is None:
            raise InputError("an encoder–decoder model needs input_ids (the source) to generate from")
        return input_ids
