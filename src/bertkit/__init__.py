"""bertkit: a readable, fast Transformer/BERT toolkit verified against Hugging Face transformers.

The public API is imported lazily, so `from bertkit.models.reference import NumpyBert` needs no torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "BertConfig": "bertkit.models.bert.configuration",
    "BertModel": "bertkit.models.bert.modeling",
    "BertForPreTraining": "bertkit.models.bert.heads",
    "BertForMaskedLM": "bertkit.models.bert.heads",
    "BertForSequenceClassification": "bertkit.models.bert.heads",
    "BertForTokenClassification": "bertkit.models.bert.heads",
    "BertTokenizer": "bertkit.tokenizer",
    "GPT2Config": "bertkit.models.gpt.configuration",
    "GPT2Model": "bertkit.models.gpt.modeling",
    "GPT2LMHeadModel": "bertkit.models.gpt.modeling",
    "NumpyBert": "bertkit.models.reference",
    "NumpyGPT2": "bertkit.models.reference",
    "ViTConfig": "bertkit.models.vit.configuration",
    "ViTModel": "bertkit.models.vit.modeling",
    "ViTForImageClassification": "bertkit.models.vit.modeling",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'bertkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
