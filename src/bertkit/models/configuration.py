"""What every model family's config shares: config.json reading and writing, one rule for unknown keys, label names.

Field names are Hugging Face's, so a `config.json` reads and writes unchanged. Each family's config lives beside
its model (`bert/configuration.py`, `gpt/configuration.py`, `vit/configuration.py`, `seq2seq/configuration.py`);
this module is their base. Nothing here imports torch: the NumPy reference and the command line read configs.

One rule for keys a family does not use: keys transformers writes into every config.json and that carry no
model maths (`architectures`, `torch_dtype`, ...) are read silently; any other unknown key is named in one
warning. Both are kept in `extra` and written back on save, so a config round-trips unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from bertkit.errors import ConfigError
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu")
POSITION_EMBEDDING_TYPES = ("absolute", "sinusoidal")
CONFIG_NAME = "config.json"
# What an extractive reader's config saves of how it was fine-tuned to read questions (`qa`, bertkit.inference.qa)
QA_KEYS = ("max_length", "doc_stride", "max_answer_length", "impossible")

# Keys Hugging Face writes into every config.json that carry no model maths; read silently.
HF_BOOKKEEPING = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "classifier_dropout", "gradient_checkpointing", "output_past", "directionality",
    "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers", "pooler_size_per_head",
    "pooler_type", "_name_or_path", "is_decoder", "add_cross_attention", "chunk_size_feed_forward",
    "tie_word_embeddings", "return_dict", "output_hidden_states", "output_attentions",
    "problem_type", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id", "tokenizer_class",
    "finetuning_task",  # the task a head was fine-tuned for (bertkit finetune writes its --task: "pairs", ...)
    # sentence-embedding libraries' notes in a model's config.json: how to pool, not what to compute
    "uniem_embedding_strategy",
})


class ConfigWarning(UserWarning):
    """A configuration value a model can be built from, but that limits what it can do."""


@dataclass
class PretrainedConfig:
    """The base of the families' config dataclasses: `model_type` names the family in config.json, `extra` keeps
    the keys the family does not use (written back on save). A subclass declares its fields and `validate()`."""

    model_type: ClassVar[str] = ""
    family: ClassVar[str] = ""                           # how messages name the family: "BERT", "GPT-2", ...
    other_model_types: ClassVar[tuple[str, ...]] = ()    # also read: bertkit's variants and earlier formats
    ignored_keys: ClassVar[frozenset[str]] = frozenset()  # keys of this family's config.json read silently, unused
    # Keys of a config.json that bertkit does not use; kept so a save writes them back.
    extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, kw_only=True)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""

    # ---- config.json ---------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """Build from a config dict: another family's model_type is an error; unknown keys are kept in `extra` and
        named in one warning (transformers' bookkeeping keys silently)."""
        data = dict(data)
        model_type = data.get("model_type", cls.model_type)
        if model_type != cls.model_type and model_type not in cls.other_model_types:
            raise ConfigError(f"config is for model_type {model_type!r}, not a {cls.family} model ({cls.model_type!r})")
        data = cls._read(data)
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: data.pop(k) for k in list(data) if k in names}
        unknown = sorted(k for k in data if k not in HF_BOOKKEEPING and k not in cls.ignored_keys)
        if unknown:
            warnings.warn(f"config keys not used by bertkit (kept as they are): {', '.join(unknown)}", stacklevel=3)
        data.pop("model_type", None)
        try:
            return cls(**known, extra=data)
        except TypeError as err:  # e.g. a string where a number belongs
            raise ConfigError(f"invalid config: {err}") from None

    @classmethod
    def _read(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A family's own reading of config.json keys before the fields are filled (labels, older formats)."""
        return data

    def to_dict(self) -> dict[str, Any]:
        """config.json's content: the kept unknown keys, then the fields, then `model_type`."""
        out = dict(self.extra)
        out.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"})
        out["model_type"] = self.model_type
        return out

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike):
        """Read `config.json` from a model directory (or the file itself)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist (expected a model directory with {CONFIG_NAME})")
        return cls.from_json_file(path / CONFIG_NAME if path.is_dir() else path)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike):
        """Read a config JSON file."""
        return cls.from_dict(read_config_json(path))

    def to_json_string(self, **additions: Any) -> str:
        """The config as JSON, with `additions` (e.g. `architectures`) written over it; the config is unchanged."""
        return json.dumps({**self.to_dict(), **additions}, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def save_pretrained(self, directory: str | os.PathLike, **additions: Any) -> Path:
        """Write `config.json` into `directory` atomically; `additions` go into the file only."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        return atomic_write_text(directory / CONFIG_NAME, self.to_json_string(**additions))

    def replace(self, **changes: Any):
        return dataclasses.replace(self, **changes)

    @property
    def architectures(self) -> list[str]:
        """The class names config.json says the weights were saved from (empty when it does not say)."""
        return list(self.extra.get("architectures") or [])

    def summary(self) -> list[tuple[str, str]]:
        """(label, value) rows that describe the model for people (`bertkit info`)."""
        return []

    # ---- value checks: each raises a ConfigError naming the value (the families' validate() use them) ----------

    def check_positive(self, names: tuple[str, ...]) -> None:
        """The first of `names` that is not a positive integer is an error."""
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")

    def check_probabilities(self, names: tuple[str, ...]) -> None:
        """The first of `names` outside [0, 1) is an error."""
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {value!r}")

    def check_divisible(self, width: str, heads: str) -> None:
        """The model width `width` must split into `heads` heads of equal size."""
        if getattr(self, width) % getattr(self, heads):
            raise ConfigError(f"{width} ({getattr(self, width)}) is not divisible by {heads} "
                              f"({getattr(self, heads)}); each head needs {width} / {heads} dims")

    def check_choice(self, name: str, choices: tuple[str, ...]) -> None:
        """`name` must be one of `choices`."""
        value = getattr(self, name)
        if value not in choices:
            raise ConfigError(f"{name} {value!r} is not one of {', '.join(choices)}")

    def check_qa(self) -> None:
        """A reader's `qa` settings, where a config has them: None, or a dict of some of QA_KEYS."""
        qa = getattr(self, "qa", None)
        if qa is not None and (not isinstance(qa, dict) or not set(qa) <= set(QA_KEYS)):
            raise ConfigError(f"qa must be a dict with some of the keys {', '.join(QA_KEYS)}, got {qa!r}")

    def check_token_ids(self, names: tuple[str, ...], vocab_size: int, harmless: bool = False) -> None:
        """A token id outside [0, vocab_size) is an error, or with `harmless` (ids only generation reads, never a
        weight) one ConfigWarning naming them; a negative or non-integer id is always an error."""
        outside = []
        for name in names:
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} must be a token id (an integer from 0), got {value!r}")
            if value >= vocab_size:
                if not harmless:
                    raise ConfigError(f"{name} {value} is outside the vocabulary (size {vocab_size})")
                outside.append(f"{name} {value}")
        if outside:
            them = "it" if len(outside) == 1 else "them"
            warnings.warn(f"{' and '.join(outside)} {'is' if len(outside) == 1 else 'are'} outside the vocabulary "
                          f"(size {vocab_size}): generation cannot start from or stop at {them} (give a prompt; "
                          "continuations run to max_new_tokens)", ConfigWarning, stacklevel=5)


@dataclass
class EncoderConfig(PretrainedConfig):
    """The shape of a Transformer encoder, as BERT and the ViT (which runs BERT's blocks on patches) both name it;
    the families' configs add their own fields after these. Defaults are bert-base's."""

    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    position_embedding_type: str = "absolute"   # learned; or bertkit's fixed sinusoidal positions

    def validate(self) -> None:
        """Raise ConfigError naming the first value no encoder can be built from."""
        self.check_positive(("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"))
        self.check_divisible("hidden_size", "num_attention_heads")
        self.check_choice("hidden_act", ACTIVATIONS)
        self.check_choice("position_embedding_type", POSITION_EMBEDDING_TYPES)
        self.check_probabilities(("hidden_dropout_prob", "attention_probs_dropout_prob"))
        if self.layer_norm_eps <= 0:
            raise ConfigError(f"layer_norm_eps must be positive, got {self.layer_norm_eps!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def read_config_json(path: str | os.PathLike) -> dict[str, Any]:
    """A config.json file's object, or a clear error for a missing, unreadable or non-object file."""
    path = Path(path)
    try:
        data = jsonfiles.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no config file at {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


class LabelsMixin:
    """id2label and what follows from it, as transformers' configs keep them: config.json may give only
    num_labels (the names become LABEL_i); label2id is written for transformers and derived, never read."""

    id2label: dict[int, str] | None

    @property
    def num_labels(self) -> int:
        return len(self.id2label) if self.id2label else 2

    @property
    def label2id(self) -> dict[str, int]:
        return {v: k for k, v in (self.id2label or {}).items()}

    @staticmethod
    def read_labels(data: dict[str, Any]) -> dict[str, Any]:
        if "id2label" not in data and "num_labels" in data:
            data["id2label"] = {i: f"LABEL_{i}" for i in range(int(data["num_labels"]))}
        data.pop("num_labels", None)
        data.pop("label2id", None)
        return data

    def write_labels(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.id2label:
            out["id2label"] = {str(k): v for k, v in self.id2label.items()}
            out["label2id"] = self.label2id
        else:
            out.pop("id2label", None)
        return out

    def check_labels(self) -> None:
        if self.id2label is not None:
            self.id2label = {int(k): str(v) for k, v in self.id2label.items()}
            if not self.id2label or sorted(self.id2label) != list(range(len(self.id2label))):
                raise ConfigError(f"id2label keys must be 0..n-1, got {sorted(self.id2label)}")
