"""bertkit: a readable, fast Transformer/BERT toolkit verified against Hugging Face transformers.

The public API is imported lazily, so `from bertkit.models.reference import NumpyBert` needs no torch.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

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

# Modules that moved when the tree was grouped by layer: the old name still imports, with a DeprecationWarning.
_MOVED = {
    "bertkit.atomic": "bertkit.utils.atomic",
    "bertkit.config": "bertkit.models.configuration",
    "bertkit.functional": "bertkit.models.functional",
    "bertkit.checkpoint": "bertkit.models.checkpoint",
    "bertkit.generation": "bertkit.models.generation",
    "bertkit.reference": "bertkit.models.reference",
    "bertkit.models.heads": "bertkit.models.bert.heads",
    "bertkit.models.transformer": "bertkit.models.seq2seq.layers",
    "bertkit.models.rnn": "bertkit.models.seq2seq.rnn",
    "bertkit.models.encoder_decoder": "bertkit.models.seq2seq.encoder_decoder",
    "bertkit.vocab": "bertkit.data.vocab",
    "bertkit.task_kinds": "bertkit.data.task_kinds",
    "bertkit.precision": "bertkit.inference.precision",
    "bertkit.export": "bertkit.inference.export",
    "bertkit.viz": "bertkit.pictures.figures",
    "bertkit.attention_view": "bertkit.pictures.attention_view",
    "bertkit.image_attention": "bertkit.pictures.image_attention",
    "bertkit.explain": "bertkit.pictures.explain",
    "bertkit.options": "bertkit.pipelines.options",
    "bertkit.option_fields": "bertkit.pipelines.option_fields",
    "bertkit.run_directory": "bertkit.pipelines.run_directory",
    "bertkit.demo": "bertkit.pipelines.demo",
}


_CONFIG_HOMES = ("bertkit.models.configuration", "bertkit.models.bert.configuration",
                 "bertkit.models.gpt.configuration", "bertkit.models.vit.configuration",
                 "bertkit.models.seq2seq.configuration", "bertkit.pipelines.presets")


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import bertkit.config` (and its submodules, e.g. bertkit.explain.base) gives the module under its new name."""

    @staticmethod
    def _target(name: str) -> str | None:
        for old, new in _MOVED.items():
            if name == old or name.startswith(old + "."):
                return new + name[len(old):]
        return None

    def find_spec(self, name, path, target=None):
        if self._target(name) is None:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        new = self._target(spec.name)
        warnings.warn(f"{spec.name} is now {new}; the old name will go in a later release", DeprecationWarning,
                      stacklevel=2)
        if spec.name == "bertkit.config":  # it held every family's config, now each beside its model
            module = types.ModuleType(spec.name, "bertkit's configs, under their old module name")
            for home in _CONFIG_HOMES:
                source = importlib.import_module(home)
                module.__dict__.update({k: v for k, v in vars(source).items() if not k.startswith("__")})
            return module
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        pass  # the module is the moved one, already executed


sys.meta_path.insert(0, _MovedModules())  # before the path finder, which would load a second copy of a submodule

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'bertkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
