"""Task heads on BertModel, with Hugging Face's names and signatures so checkpoints move both ways.

- BertForPreTraining: masked LM + next-sentence (or sentence-order) prediction (Devlin et al., 3.1).
- BertForMaskedLM: masked LM alone (RoBERTa's objective).
- BertForSequenceClassification: a Linear on the pooled [CLS] vector (single sentences and pairs).
- BertForTokenClassification: a Linear on every token's vector (NER).
- BertForPromptClassification: the masked-LM head read as a classifier through a cloze template (PET, LM-BFF).
- BertForQuestionAnswering: a Linear on every token's vector giving the scores of "the answer starts here" and
  "ends here" (extractive QA, SQuAD; Devlin et al., 4.2).

Dimension letters: B batch, T sequence, C hidden, E embedding size, V vocabulary, N predicted positions,
K [MASK]s of a cloze template, L labels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel, BertPreTrainedModel
from bertkit.models.configuration import ConfigError
from bertkit.models.dropout import Dropout
from bertkit.models.functional import ACT2FN, cloze_scores
from bertkit.models.layer_norm import LayerNorm
from bertkit.models.losses import IGNORE_INDEX, mean_or_zero
from bertkit.models.outputs import (
    BertForPreTrainingOutput,
    ClassifierOutput,
    MaskedLMOutput,
    QuestionAnsweringOutput,
)
from bertkit.models.pretrained import check_labels, classification_loss, span_loss, token_classification_loss
from bertkit.utils.constants import MLM, NSP

# The MLM decoder is the word-embedding matrix, and its bias the head's `bias` (Hugging Face's layout).
MLM_TIED_WEIGHTS = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
                    "cls.predictions.decoder.bias": "cls.predictions.bias"}


class BertPredictionHeadTransform(nn.Module):
    """Dense + activation + LayerNorm before the vocabulary projection (to E wide when embeddings are factorised)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        out = config.embedding_size or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, out)
        self.transform_act_fn = ACT2FN[config.hidden_act]
        self.LayerNorm = LayerNorm(out, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """Scores over the vocabulary; the decoder's weight is the word-embedding matrix (tied), plus a bias."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.embedding_size or config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder.bias = self.bias  # one parameter, two names, as in Hugging Face checkpoints

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.transform(x))


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)  # is-next / not-next (or in-order / swapped)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


def masked_lm_scores(head: BertLMPredictionHead, sequence_output: Tensor,
                     labels: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """Vocabulary logits, and the summed cross-entropy over predicted positions when labels are given.

    Only ~15% of positions are predicted, and the C -> V projection is most of a small BERT's FLOPs, so
    with labels the head runs on the N predicted rows only: (N, C) -> (N, V). The loss is the same as
    computing every position and ignoring the rest.
    """
    if labels is None:
        return head(sequence_output), None
    predicted = labels != IGNORE_INDEX                                         # (B, T)
    logits = head(sequence_output[predicted])                                   # (N, V)
    return logits, F.cross_entropy(logits.float(), labels[predicted], reduction="sum")


class BertForPreTraining(BertPreTrainedModel):
    """BERT with its two pretraining heads: masked LM (tied decoder) and next-sentence prediction."""

    head_prefixes = ("cls.", "bert.pooler.")  # a reader (QA) or masked-LM checkpoint has no pooler: it starts fresh
    other_head_prefixes = ("classifier.", "qa_outputs.")

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.init_weights()

    def tied_weights(self) -> dict[str, str]:
        return dict(MLM_TIED_WEIGHTS)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None, labels: Tensor | None = None,
                next_sentence_label: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> BertForPreTrainingOutput:
        """labels (B, T): token ids to predict, -100 elsewhere; next_sentence_label (B,): 0 = is next, 1 = random."""
        out = self.bert(input_ids, attention_mask, token_type_ids, position_ids, output_attentions,
                        output_hidden_states)
        logits, mlm_sum = masked_lm_scores(self.cls.predictions, out.last_hidden_state, labels)
        nsp_logits = self.cls.seq_relationship(out.pooler_output)
        loss, sums = None, {}
        if labels is not None:
            sums[MLM] = mlm_sum
            loss = mean_or_zero(mlm_sum, logits.size(0))
        if next_sentence_label is not None:
            sums[NSP] = F.cross_entropy(nsp_logits.float(), next_sentence_label.view(-1), reduction="sum")
            nsp = mean_or_zero(sums[NSP], next_sentence_label.numel())
            loss = nsp if loss is None else loss + nsp
        return BertForPreTrainingOutput(loss, logits, nsp_logits, out.hidden_states, out.attentions, sums or None)

    @staticmethod
    def count_loss_items(batch: dict[str, Tensor]) -> dict[str, int]:
        """How many items each loss term averages over in `batch` (the trainer's exact averaging needs it)."""
        counts = {}
        if "labels" in batch:
            counts[MLM] = int((batch["labels"] != IGNORE_INDEX).sum())
        if "next_sentence_label" in batch:
            counts[NSP] = int(batch["next_sentence_label"].numel())
        return counts


class BertForMaskedLM(BertPreTrainedModel):
    """BERT with the masked-LM head only (no pooler, no NSP): RoBERTa's objective."""

    head_prefixes = ("cls.predictions.",)
    other_head_prefixes = ("cls.seq_relationship.", "bert.pooler.", "classifier.", "qa_outputs.")

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.init_weights()

    def tied_weights(self) -> dict[str, str]:
        return dict(MLM_TIED_WEIGHTS)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None, labels: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> MaskedLMOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, position_ids, output_attentions,
                        output_hidden_states)
        logits, mlm_sum = masked_lm_scores(self.cls.predictions, out.last_hidden_state, labels)
        if labels is None:
            return MaskedLMOutput(None, logits, out.hidden_states, out.attentions)
        return MaskedLMOutput(mean_or_zero(mlm_sum, logits.size(0)), logits, out.hidden_states, out.attentions,
                              {MLM: mlm_sum})

    count_loss_items = staticmethod(BertForPreTraining.count_loss_items)


class _BertWithClassifier(BertPreTrainedModel):
    """dropout + Linear(hidden -> num_labels) on the encoder's pooled vector or on every token's vector."""

    head_prefixes = ("classifier.",)
    pooled = True  # classify the pooled [CLS] vector (B, C), else each token's (B, T, C)

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=self.pooled)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        self.init_weights()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None, labels: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> ClassifierOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, position_ids, output_attentions,
                        output_hidden_states)
        features = out.pooler_output if self.pooled else out.last_hidden_state
        logits = self.classifier(self.dropout(features))                 # (B, num_labels) or (B, T, num_labels)
        loss = self.loss(logits, labels) if labels is not None else None
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        raise NotImplementedError


class BertForSequenceClassification(_BertWithClassifier):
    """dropout + Linear on the pooled [CLS] vector; cross-entropy, or MSE when num_labels == 1 (regression)."""

    head_prefixes = ("classifier.", "bert.pooler.")  # a masked-LM checkpoint (RoBERTa's objective) has no pooler
    other_head_prefixes = ("cls.", "qa_outputs.")

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        """labels (B,): class ids, or target values when num_labels == 1."""
        return classification_loss(logits, labels, self.num_labels, self.checks_values(labels))


class BertForTokenClassification(_BertWithClassifier):
    """dropout + Linear on every token's vector (NER); positions labelled -100 are not scored."""

    pooled = False
    other_head_prefixes = ("cls.", "bert.pooler.", "qa_outputs.")

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        """labels (B, T): tag ids, -100 on positions not scored."""
        return token_classification_loss(logits, labels, self.num_labels, self.checks_values(labels))


class BertForPromptClassification(BertForMaskedLM):
    """Classification as a cloze: BertForMaskedLM (same modules and weights; saved as one, for transformers) whose
    forward reads a class off the masked-LM head. With the template "[MASK][MASK]新闻：{text}" (`config.prompt`)
    and label word w_c = (w_c1, w_c2) of class c, the score of c is s_c = Σ_j log p(w_cj | [MASK] j) and
    p(c | x) = softmax_c(s_c) (PET's multi-token verbaliser, Schick & Schütze 2021). Fine-tuning goes through
    the masked-LM head, so no parameter starts from scratch (LM-BFF, Gao et al. 2021)."""

    saved_architecture = "BertForMaskedLM"  # the same weights; config.prompt says how to classify with them

    def __init__(self, config: BertConfig) -> None:
        if config.prompt is None:
            raise InputError("BertForPromptClassification needs config.prompt (template and label words); "
                             "see bertkit.data.prompts.PromptTemplate.config")
        super().__init__(config)  # BertForMaskedLM's modules; the buffer below is not a weight
        self.num_labels = len(config.prompt["label_word_ids"])
        self.mask_token_id = int(config.prompt["mask_token_id"])
        self.register_buffer("label_word_ids", torch.tensor(config.prompt["label_word_ids"]), persistent=False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None, labels: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> ClassifierOutput:
        """input_ids (B, T) hold the template's K [MASK]s; logits (B, L) are the class scores s_c."""
        masks = input_ids == self.mask_token_id                                   # (B, T)
        K = self.label_word_ids.size(1)
        if self.checks_values(input_ids) and not bool((masks.sum(1) == K).all()):
            raise InputError(f"every input must hold the template's {K} [MASK] tokens (id {self.mask_token_id}); "
                             "encode texts with the model's prompt template")
        out = self.bert(input_ids, attention_mask, token_type_ids, position_ids, output_attentions,
                        output_hidden_states)
        hidden = out.last_hidden_state[masks].view(input_ids.size(0), K, -1)      # (B, K, C), masks in order
        logits = cloze_scores(self.cls.predictions(hidden), self.label_word_ids)  # (B, L)
        loss = None
        if labels is not None:
            if self.checks_values(labels):
                check_labels(labels, self.num_labels)
            loss = F.cross_entropy(logits, labels.view(-1))
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class BertForQuestionAnswering(BertPreTrainedModel):
    """Extractive QA: `qa_outputs`, a Linear(hidden -> 2) on every token's vector, scores each position as the
    answer's start and its end (transformers' names, so directories load both ways). No pooler, no dropout on
    the head, as in transformers."""

    head_prefixes = ("qa_outputs.",)
    other_head_prefixes = ("cls.", "bert.pooler.", "classifier.")

    def __init__(self, config: BertConfig) -> None:
        if config.num_labels != 2:
            raise ConfigError(f"a question-answering head has 2 outputs (answer start and end), but the config has "
                              f"{config.num_labels} labels")
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.init_weights()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None, start_positions: Tensor | None = None,
                end_positions: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> QuestionAnsweringOutput:
        """start_positions, end_positions (B,): the answer's first and last token; 0 ([CLS]) for no answer here."""
        out = self.bert(input_ids, attention_mask, token_type_ids, position_ids, output_attentions,
                        output_hidden_states)
        start_logits, end_logits = self.qa_outputs(out.last_hidden_state).unbind(-1)   # (B, T) each
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return QuestionAnsweringOutput(loss, start_logits, end_logits, out.hidden_states, out.attentions)


MODEL_CLASSES = {cls.__name__: cls for cls in (BertModel, BertForPreTraining, BertForMaskedLM,
                                                BertForSequenceClassification, BertForTokenClassification,
                                                BertForPromptClassification, BertForQuestionAnswering)}


def model_class_for(config: BertConfig) -> type[BertPreTrainedModel]:
    """The class a checkpoint was saved from (config.json's `architectures`), BertModel when unknown; a
    config with a cloze prompt is a BertForPromptClassification (saved as BertForMaskedLM, for transformers)."""
    if config.prompt is not None:
        return BertForPromptClassification
    for name in config.architectures:
        if name in MODEL_CLASSES:
            return MODEL_CLASSES[name]
    return BertModel
