"""The model families bertkit knows, found by the `model_type` of a directory's config.json (as transformers' Auto
classes).

    family = family_of("runs/gpt")          # reads config.json only: no torch, no weights
    family.name, family.inputs              # "GPT-2", "text"
    model = family.load("runs/gpt")         # the class config.json's `architectures` names, weights loaded
    require("runs/gpt", "translate")        # ConfigError: a GPT-2 model; translate takes translation models

A family is its config class, its model classes, the class a directory's config chooses, its task heads, whether
it reads text or images, and the commands that can serve it. Every command that takes a model directory asks
here, so what a command does with a family, and the refusal of a family it cannot serve, are decided in one
place. Classes are named as "module:Class" and imported on first use, so the command line stays quick to start.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.models.configuration import CONFIG_NAME, ConfigError, read_config_json

COMMANDS = ("encode", "predict", "evaluate", "attention", "export", "generate", "translate", "summarize", "serve",
            "pretrain")


def _resolve(dotted: str) -> Any:
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class ModelFamily:
    """One family of models: what config.json says it is, and what bertkit can do with it."""

    name: str                          # how messages name it: "BERT", "GPT-2", "ViT", "translation"
    model_types: tuple[str, ...]       # config.json's model_type: the family's own, then bertkit's variants
    config: str                        # "module:Class" of its config
    chooser: str                       # "module:function": (config) -> the model class a directory was saved from
    inputs: str = "text"               # "text" (a tokenizer in the directory) or "images" (an image processor)
    serves: frozenset[str] = frozenset()  # the COMMANDS that can use a model of this family
    heads: dict[str, str] = field(default_factory=dict)  # task kind -> "module:Class" of the head that serves it

    @property
    def config_class(self) -> type:
        return _resolve(self.config)

    def load_config(self, path: str | os.PathLike):
        """The family's config from a model directory."""
        return self.config_class.from_pretrained(path)

    def model_class(self, config: Any) -> type:
        """The class a directory with this config was saved from."""
        return _resolve(self.chooser)(config)

    def load(self, path: str | os.PathLike, config: Any = None, **config_changes: Any):
        """The model of a directory (eval mode), as the class its config.json names."""
        config = config if config is not None else self.load_config(path)
        return self.model_class(config).from_pretrained(path, config=config, **config_changes)

    def holds_head(self, path: str | os.PathLike, task: str) -> bool:
        """Whether the directory was saved from this family's head for the task kind `task` (reads config.json)."""
        return task in self.heads and self.model_class(self.load_config(path)) is self.head(task)

    def head(self, task: str) -> type:
        """The model class that serves the task kind `task` (e.g. "classify", "ner") in this family."""
        if task not in self.heads:
            raise ConfigError(f"a {self.name} model has no head for the {task!r} task")
        return _resolve(self.heads[task])


FAMILIES: tuple[ModelFamily, ...] = (
    ModelFamily("BERT", ("bert", "bertkit-bert-pre-ln"), "bertkit.models.bert.configuration:BertConfig",
                "bertkit.models.bert.unilm:bert_class_for",
                serves=frozenset({"encode", "predict", "evaluate", "attention", "export", "serve", "pretrain",
                                  "summarize"}),
                heads={"classify": "bertkit.models.bert.heads:BertForSequenceClassification",
                       "pairs": "bertkit.models.bert.heads:BertForSequenceClassification",
                       "prompt": "bertkit.models.bert.heads:BertForPromptClassification",
                       "ner": "bertkit.models.bert.heads:BertForTokenClassification",
                       "qa": "bertkit.models.bert.heads:BertForQuestionAnswering",
                       "pretraining": "bertkit.models.bert.heads:BertForPreTraining",
                       "masked-lm": "bertkit.models.bert.heads:BertForMaskedLM",
                       "seq2seq": "bertkit.models.bert.unilm:BertForUniLM",
                       "encoder": "bertkit.models.bert.modeling:BertModel"}),
    ModelFamily("ModernBERT", ("modernbert", "bertkit-modernbert"),
                "bertkit.models.modernbert.configuration:ModernBertConfig",
                "bertkit.models.modernbert.modeling:modernbert_class_for",
                serves=frozenset({"encode", "predict", "evaluate", "attention", "export", "serve", "pretrain"}),
                heads={"classify": "bertkit.models.modernbert.modeling:ModernBertForSequenceClassification",
                       "pairs": "bertkit.models.modernbert.modeling:ModernBertForSequenceClassification",
                       "ner": "bertkit.models.modernbert.modeling:ModernBertForTokenClassification",
                       "qa": "bertkit.models.modernbert.modeling:ModernBertForQuestionAnswering",
                       "masked-lm": "bertkit.models.modernbert.modeling:ModernBertForMaskedLM",
                       "encoder": "bertkit.models.modernbert.modeling:ModernBertModel"}),
    ModelFamily("GPT-2", ("gpt2", "bertkit-gpt2", "bertkit-gpt"), "bertkit.models.gpt.configuration:GPT2Config",
                "bertkit.models.gpt.modeling:gpt_class_for", serves=frozenset({"generate", "attention"}),
                heads={"language-model": "bertkit.models.gpt.modeling:GPT2LMHeadModel"}),
    ModelFamily("ViT", ("vit", "bertkit-vit"), "bertkit.models.vit.configuration:ViTConfig",
                "bertkit.models.vit.modeling:vit_class_for", inputs="images",
                serves=frozenset({"predict", "attention"}),
                heads={"classify": "bertkit.models.vit.modeling:ViTForImageClassification"}),
    ModelFamily("translation", ("bertkit-seq2seq",), "bertkit.models.seq2seq.configuration:Seq2SeqConfig",
                "bertkit.models.seq2seq.transformer:seq2seq_class", serves=frozenset({"translate", "attention"})),
    ModelFamily("recurrent", ("bertkit-rnn-lm",), "bertkit.models.rnn_lm.configuration:RNNLMConfig",
                "bertkit.models.rnn_lm.modeling:rnn_lm_class", serves=frozenset({"generate"}),
                heads={"language-model": "bertkit.models.rnn_lm.modeling:RNNForCausalLM"}),
    ModelFamily("summarization", ("bertkit-bert-seq2seq",), "bertkit.models.seq2seq.bert_encoder:BertSeq2SeqConfig",
                "bertkit.models.seq2seq.bert_encoder:bert_seq2seq_class", serves=frozenset({"summarize"})),
)


def model_type_of(path: str | os.PathLike) -> str:
    """The model_type a model directory's config.json gives ("bert" where it gives none, as old BERT configs)."""
    path = Path(path)
    config = path / CONFIG_NAME if path.is_dir() else path
    if path.is_dir() and not config.is_file():
        raise FileNotFoundError(f"{path} has no {CONFIG_NAME}: it is not a model directory")
    model_type = read_config_json(config).get("model_type", "bert")
    if not isinstance(model_type, str):
        raise ConfigError(f"{config}: model_type must be a string, got {model_type!r}")
    return model_type


def family_for(model_type: str) -> ModelFamily:
    """The family of a model_type; an unknown one is a ConfigError naming those bertkit knows."""
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    known = ", ".join(f"{t} ({f.name})" for f in FAMILIES for t in f.model_types[:1])
    raise ConfigError(f"model_type {model_type!r} is not a family bertkit knows: {known}")


def family_of(path: str | os.PathLike) -> ModelFamily:
    """The family of a model directory, from its config.json alone."""
    return family_for(model_type_of(path))


def families_serving(command: str) -> list[ModelFamily]:
    return [family for family in FAMILIES if command in family.serves]


def require(path: str | os.PathLike, command: str) -> ModelFamily:
    """The family of a model directory when it can serve `command`; else a ConfigError naming the family and the
    families that can ("bertkit translate" on a GPT-2 directory)."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; known: {', '.join(COMMANDS)}")
    model_type = model_type_of(path)
    family = family_for(model_type)
    if command not in family.serves:
        names = [f.name for f in families_serving(command)]
        able = " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"
        raise ConfigError(f"{path} holds a {family.name} model (model_type {model_type!r}); {command} takes {able} "
                          "models")
    return family
