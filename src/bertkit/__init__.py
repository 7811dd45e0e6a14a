"""bertkit: a readable, fast Transformer/BERT toolkit verified against Hugging Face transformers.

The public API is imported lazily, so `from bertkit.models.reference import NumpyBert` needs no torch.
"""

from __future__ import annotations

import importlib

from bertkit import tasks as _tasks  # noqa: F401  (the fine-tuning tasks fill their registry, bertkit.data.task_kinds)

__version__ = "0.1.0"

# public name -> module that defines it: every family's config and every model and head class, as transformers
# exports them (`from bertkit import BertForQuestionAnswering`)
_EXPORTS = {
    "BertConfig": "bertkit.models.bert.configuration",
    "BertPreTrainedModel": "bertkit.models.bert.modeling",
    "BertModel": "bertkit.models.bert.modeling",
    "BertForPreTraining": "bertkit.models.bert.heads",
    "BertForMaskedLM": "bertkit.models.bert.heads",
    "BertForSequenceClassification": "bertkit.models.bert.heads",
    "BertForTokenClassification": "bertkit.models.bert.heads",
    "BertForPromptClassification": "bertkit.models.bert.heads",
    "BertForQuestionAnswering": "bertkit.models.bert.heads",
    "BertForUniLM": "bertkit.models.bert.unilm",
    "BertTokenizer": "bertkit.tokenizer",
    "BPETokenizer": "bertkit.tokenizer",
    "SentenceEncoder": "bertkit.inference.sentence_encoder",
    "GPT2Config": "bertkit.models.gpt.configuration",
    "GPT2PreTrainedModel": "bertkit.models.gpt.modeling",
    "GPT2Model": "bertkit.models.gpt.modeling",
    "GPT2LMHeadModel": "bertkit.models.gpt.modeling",
    "NumpyBert": "bertkit.models.reference",
    "NumpyGPT2": "bertkit.models.reference",
    "Seq2SeqConfig": "bertkit.models.seq2seq.configuration",
    "Seq2SeqPreTrainedModel": "bertkit.models.seq2seq.encoder_decoder",
    "Seq2SeqTransformer": "bertkit.models.seq2seq.transformer",
    "RNNSeq2Seq": "bertkit.models.seq2seq.rnn",
    "RNNLMConfig": "bertkit.models.rnn_lm.configuration",
    "RNNForCausalLM": "bertkit.models.rnn_lm.modeling",
    "BertSeq2SeqConfig": "bertkit.models.seq2seq.bert_encoder",
    "BertSeq2Seq": "bertkit.models.seq2seq.bert_encoder",
    "ViTConfig": "bertkit.models.vit.configuration",
    "ViTPreTrainedModel": "bertkit.models.vit.modeling",
    "ViTModel": "bertkit.models.vit.modeling",
    "ViTForImageClassification": "bertkit.models.vit.modeling",
    "ModernBertConfig": "bertkit.models.modernbert.configuration",
    "ModernBertPreTrainedModel": "bertkit.models.modernbert.modeling",
    "ModernBertModel": "bertkit.models.modernbert.modeling",
    "ModernBertForMaskedLM": "bertkit.models.modernbert.modeling",
    "ModernBertForSequenceClassification": "bertkit.models.modernbert.modeling",
    "ModernBertForTokenClassification": "bertkit.models.modernbert.modeling",
    "ModernBertForQuestionAnswering": "bertkit.models.modernbert.modeling",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'bertkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
