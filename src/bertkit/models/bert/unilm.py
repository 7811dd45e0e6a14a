"""UniLM (Dong et al., 2019): the same pretrained BERT reads a source and writes a target, left to right.

BERT's masked LM predicts a token from both sides, which is why it cannot write: at generation time there is no
right side yet. UniLM keeps every weight of BERT and changes only who may see whom. One sequence holds both texts,

    [CLS] source [SEP] target [SEP]        segment ids 0 ... 0 1 ... 1

and the attention mask (`functional.unilm_mask`) lets a source token see the whole source, as BERT reads, and a
target token the whole source and the target tokens up to itself, as a language model writes. The masked-LM head
(its decoder tied to the word embeddings) then predicts, at each position from the source's [SEP] on, the next
target token; the loss is on target tokens only, and the C -> V projection runs at those positions only.

Decoding needs no second network: the source runs once, its keys and values kept per layer (a source token never
sees the target, so they never change), then each written token is one position appended with segment 1,
`UniLMDecoding`. The saved directory is a BERT masked-LM one (transformers' BertForMaskedLM loads its weights);
config.json's `architectures` says it is a writer.

Dimension letters: B batch, S source (with its padding), T positions, C hidden, V vocabulary, N predicted positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bertkit.errors import InputError
from bertkit.models.bert.heads import BertForMaskedLM, model_class_for
from bertkit.models.functional import unilm_mask
from bertkit.models.generation import DecodingState, GenerationMixin, KVCache
from bertkit.models.losses import IGNORE_INDEX
from bertkit.models.outputs import MaskedLMOutput

TARGET = 1  # the target's segment id; the source's is 0
LM = "lm"   # the loss term: next-token cross-entropy over target tokens


def next_token_labels(labels: Tensor) -> Tensor:
    """Labels at their own positions (B, T) -> what each position predicts: the next position's label, and
    -100 at the last position (nothing follows it)."""
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


class BertForUniLM(GenerationMixin, BertForMaskedLM):
    """BERT with its masked-LM head, trained and decoded as a sequence-to-sequence model under UniLM's mask."""

    def __init__(self, config) -> None:
        super().__init__(config)
        if config.type_vocab_size < 2:
            raise InputError(f"UniLM tells the target from the source by segment id 1; this BERT has "
                             f"{config.type_vocab_size} segment embedding (type_vocab_size), so it cannot mark one")
        self.label_smoothing = 0.0  # set by training; not part of the saved model

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None, labels: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False, past_key_values: KVCache | None = None) -> MaskedLMOutput:
        """input_ids (B, T) `[CLS] source [SEP] target [SEP]`, token_type_ids (B, T) 0 on the source, 1 on the
        target; attention_mask (B, T) 1 on tokens, 0 on padding (UniLM's mask is built from the two), or the
        (B, T, S) mask itself. labels (B, T): the target's ids at their own positions, -100 elsewhere; position t
        is scored on labels[t + 1], so with labels the logits are those of the N predicting positions, (N, V)."""
        if token_type_ids is None:
            raise InputError("UniLM tells the target from the source by token_type_ids (0 source, 1 target); "
                             "give them")
        mask = attention_mask
        if past_key_values is None and (mask is None or mask.dim() == 2):
            mask = unilm_mask(token_type_ids, attention_mask)
        out = self.bert(input_ids, mask, token_type_ids, position_ids, output_attentions, output_hidden_states,
                        past_key_values)
        hidden = out.last_hidden_state
        if labels is None:
            return MaskedLMOutput(None, self.cls.predictions(hidden), out.hidden_states, out.attentions)
        targets = next_token_labels(labels)
        predicted = targets != IGNORE_INDEX                                      # (B, T)
        logits = self.cls.predictions(hidden[predicted])                         # (N, V): target positions only
        total = F.cross_entropy(logits.float(), targets[predicted], reduction="sum",
                                label_smoothing=self.label_smoothing)
        count = logits.size(0)
        return MaskedLMOutput(total / max(count, 1), logits, out.hidden_states, out.attentions, {LM: total})

    @staticmethod
    def count_loss_items(batch: dict[str, Tensor]) -> dict[str, int]:
        """The target tokens a batch predicts (the trainer averages the loss over them exactly)."""
        return {LM: int((next_token_labels(batch["labels"]) != IGNORE_INDEX).sum())} if "labels" in batch else {}

    def start_decoding(self, input_ids: Tensor | None, attention_mask: Tensor | None,
                       use_cache: bool = True) -> UniLMDecoding:
        """Write a target for each source: input_ids (B, S) `[CLS] source [SEP]`, right-padded (attention_mask)."""
        if input_ids is None:
            raise InputError("UniLM writes a target for a source: give the sources' input_ids")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        return UniLMDecoding(self, input_ids, attention_mask, use_cache)


class UniLMDecoding(DecodingState):
    """Decoding state of a UniLM: the source's keys and values, computed once, and those of the tokens written.

    A source may be shorter than the batch's longest: its target then starts at its own length (its positions
    continue from its [SEP]), and its padding stays masked. Without a cache each step re-runs the whole sequence
    (the tests' reference). The tokens fed at the first step are none: the first target token's logits come from
    the source's [SEP].
    """

    def __init__(self, model: BertForUniLM, source: Tensor, attention_mask: Tensor, use_cache: bool) -> None:
        B = source.size(0)
        self.model = model
        self.start = source.new_zeros(B, 0)
        self.lengths = attention_mask.sum(dim=1)                                 # (B,) each source's tokens
        self.max_new_tokens = model.config.max_position_embeddings - int(self.lengths.max())
        self.source, self.keys = source, attention_mask.to(torch.long)           # keys: (B, S) who may be seen
        self.written = source.new_zeros(B, 0)                                    # (B, t) the target so far
        self.cache = KVCache(model.config.num_hidden_layers) if use_cache else None
        segments = torch.zeros_like(source)
        # the source alone (a source token sees the source only): its keys and values are all a cache needs
        hidden = model.bert(source, attention_mask, segments, past_key_values=self.cache).last_hidden_state
        last = hidden[torch.arange(B, device=source.device), self.lengths - 1]      # (B, C) each source's [SEP]
        self.first_logits = model.cls.predictions(last)                          # (B, V)

    def step(self, tokens: Tensor) -> Tensor:
        if tokens.size(1):
            self.written = torch.cat([self.written, tokens], dim=1)
        t = self.written.size(1)
        return self.first_logits if t == 0 else self._next_logits(tokens, t)

    def _next_logits(self, tokens: Tensor, t: int) -> Tensor:
        B, device = tokens.size(0), tokens.device
        positions = self.lengths[:, None] + torch.arange(t, device=device)     # (B, t) after each source
        if self.cache is not None:  # one new position: it sees the source's tokens and every target token
            self.keys = torch.cat([self.keys, self.keys.new_ones(B, 1)], dim=1)   # (B, S + t)
            hidden = self.model.bert(tokens, self.keys, torch.full_like(tokens, TARGET), positions[:, -1:],
                                     past_key_values=self.cache).last_hidden_state[:, -1]
        else:  # the whole sequence again, under UniLM's mask
            S = self.source.size(1)
            ids = torch.cat([self.source, self.written], dim=1)
            segments = torch.cat([torch.zeros_like(self.source), torch.full_like(self.written, TARGET)], dim=1)
            keep = torch.cat([self.keys[:, :S], torch.ones_like(self.written)], dim=1)
            source_positions = torch.arange(S, device=device).expand(B, S)
            hidden = self.model.bert(ids, unilm_mask(segments, keep), segments,
                                     torch.cat([source_positions, positions], dim=1)).last_hidden_state[:, -1]
        return self.model.cls.predictions(hidden)

    def reorder(self, index: Tensor) -> None:
        for name in ("source", "keys", "lengths", "written", "first_logits"):
            setattr(self, name, getattr(self, name).index_select(0, index))
        if self.cache is not None:
            self.cache.reorder(index)



def bert_class_for(config) -> type:
    """The class a BERT directory was saved from (the registry's chooser for the family): a writer when config.json
    names BertForUniLM, else the encoder or the task head it names (`heads.model_class_for`)."""
    return BertForUniLM if "BertForUniLM" in config.architectures else model_class_for(config)
