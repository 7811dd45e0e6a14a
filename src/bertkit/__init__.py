"""bertkit: a readable, fast Transformer/BERT toolkit verified against Hugging Face transformers.

The public API is imported lazily, so `from bertkit.reference import NumpyBert` needs no torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "BertConfig": "bertkit.config",
    "BertModel": "bertkit.models.bert",
    "BertForPreTraining": "bertkit.models.heads",
    "BertForMaskedLM": "bertkit.models.heads",
    "BertForSequenceClassification": "bertkit.models.heads",
    "BertForTokenClassification": "bertkit.models.heads",
    "BertTokenizer": "bertkit.tokenizer",
    "GPT2Config": "bertkit.config",
    "GPT2Model": "bertkit.models.gpt",
    "GPT2LMHeadModel": "bertkit.models.gpt",
    "NumpyBert": "bertkit.reference",
    "NumpyGPT2": "bertkit.reference",
    "ViTConfig": "bertkit.config",
    "ViTModel": "bertkit.models.vit",
    "ViTForImageClassification": "bertkit.models.vit",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'bertkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
