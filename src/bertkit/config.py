"""Model configurations. Field names are Hugging Face's, so a `config.json` reads and writes unchanged."""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.atomic import atomic_write_text

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
POSITION_EMBEDDING_TYPES = ("absolute", "sinusoidal")
CONFIG_NAME = "config.json"

# Keys Hugging Face writes into every config.json that carry no model maths; read silently.
_HF_BOOKKEEPING = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "classifier_dropout", "gradient_checkpointing", "output_past", "directionality",
    "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers", "pooler_size_per_head",
    "pooler_type", "_name_or_path", "is_decoder", "add_cross_attention", "chunk_size_feed_forward",
    "tie_word_embeddings", "return_dict", "output_hidden_states", "output_attentions",
    "problem_type", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id", "tokenizer_class",
    # sentence-embedding libraries' notes in a model's config.json: how to pool, not what to compute
    "uniem_embedding_strategy",
}


class ConfigError(ValueError):
    """A configuration value that no model can be built from."""


class ConfigWarning(UserWarning):
    """A configuration value a model can be built from, but that limits what it can do."""


class _JsonConfig:
    """config.json reading and writing for the dataclass configs below; `model_type` names the class."""

    model_type = ""
    other_model_types: tuple[str, ...] = ()      # also read: earlier bertkit formats of the same model
    ignored_keys: frozenset[str] = frozenset()   # keys of this family's config.json read silently, unused

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": self.model_type, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """Build from a config dict; a different model_type is an error, unknown keys a warning."""
        data = dict(data)
        model_type = data.pop("model_type", cls.model_type)
        if model_type != cls.model_type and model_type not in cls.other_model_types:
            raise ConfigError(f"config is for model_type {model_type!r}, not {cls.model_type!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in data if k not in names and k not in _HF_BOOKKEEPING and k not in cls.ignored_keys)
        if unknown:
            warnings.warn(f"config keys not used by bertkit (ignored): {', '.join(unknown)}", stacklevel=2)
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as err:
            raise ConfigError(f"invalid config: {err}") from None

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
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"no config file at {path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path} is not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must hold a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)

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


# A pre-LN BERT's config.json says this, not "bert", so that transformers' AutoModel refuses it.
PRE_LN_MODEL_TYPE = "bertkit-bert-pre-ln"


class _Labels:
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
    def _read_labels(data: dict[str, Any]) -> None:
        if "id2label" not in data and "num_labels" in data:
            data["id2label"] = {i: f"LABEL_{i}" for i in range(int(data["num_labels"]))}
        data.pop("num_labels", None)
        data.pop("label2id", None)

    def _write_labels(self, out: dict[str, Any]) -> None:
        if self.id2label:
            out["id2label"] = {str(k): v for k, v in self.id2label.items()}
            out["label2id"] = self.label2id
        else:
            out.pop("id2label", None)


@dataclass
class BertConfig(_JsonConfig, _Labels):
    """BERT hyper-parameters (Hugging Face `BertConfig` names) plus bertkit's ALBERT and positional options."""

    model_type = "bert"

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    # ALBERT: factorised embeddings (E < H, projected up) and one layer's weights reused N times.
    embedding_size: int | None = None
    share_layers: bool = False
    # Pretraining-recipe options (Cramming, Geiping & Goldstein 2022). transformers' BERT is post-LN, so a
    # pre-LN config names another model_type (see to_dict); a bias-free model loads there as it is, its
    # missing biases initialised to zero.
    normalize_before: bool = False      # pre-LN blocks: x + f(LN(x)), one LayerNorm after the last block
    use_bias: bool = True               # biases of the attention and feed-forward Linear layers
    # Task heads (Hugging Face names): label names in id order, and the classifier's dropout.
    id2label: dict[int, str] | None = None
    classifier_dropout: float | None = None
    # Classification as a cloze (BertForPromptClassification): {"template": "[MASK][MASK]新闻：{text}",
    # "label_words": [a word per label, in id order], "label_word_ids": [[token id per [MASK]], ...],
    # "mask_token_id": id}. The weights are BertForMaskedLM's; this says how to read a class off them.
    prompt: dict[str, Any] | None = None
    # Keys of a config.json that bertkit does not use; kept so a save writes them back.
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                f"({self.num_attention_heads}); each head needs hidden_size / num_attention_heads dims")
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(f"hidden_act {self.hidden_act!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ConfigError(f"position_embedding_type {self.position_embedding_type!r} is not one of "
                              f"{', '.join(POSITION_EMBEDDING_TYPES)}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {value!r}")
        if self.layer_norm_eps <= 0:
            raise ConfigError(f"layer_norm_eps must be positive, got {self.layer_norm_eps!r}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        if self.embedding_size is not None and (
                not isinstance(self.embedding_size, int) or self.embedding_size <= 0):
            raise ConfigError(f"embedding_size must be a positive integer or None, got {self.embedding_size!r}")
        if self.id2label is not None:
            self.id2label = {int(k): str(v) for k, v in self.id2label.items()}
            if sorted(self.id2label) != list(range(len(self.id2label))):
                raise ConfigError(f"id2label keys must be 0..n-1, got {sorted(self.id2label)}")
        if self.prompt is not None:
            self._validate_prompt()

    def _validate_prompt(self) -> None:
        prompt = self.prompt
        keys = {"template", "label_words", "label_word_ids", "mask_token_id"}
        if not isinstance(prompt, dict) or set(prompt) != keys:
            raise ConfigError(f"prompt must be a dict with the keys {', '.join(sorted(keys))}")
        ids = prompt["label_word_ids"]
        if not ids or not all(isinstance(row, list) and len(row) == len(ids[0]) > 0 for row in ids):
            raise ConfigError("prompt label_word_ids must be one non-empty list of token ids per label, all as "
                              "long as the template has [MASK]s")
        if len(ids) != len(prompt["label_words"]) or (self.id2label and len(ids) != len(self.id2label)):
            raise ConfigError(f"prompt has {len(ids)} label words for {self.num_labels} labels")
        for token in [t for row in ids for t in row] + [prompt["mask_token_id"]]:
            if not isinstance(token, int) or not 0 <= token < self.vocab_size:
                raise ConfigError(f"prompt token id {token!r} is outside the vocabulary (size {self.vocab_size})")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    # ---- config.json ---------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BertConfig:
        """Build from a Hugging Face config dict; unknown keys are kept in `extra` and warned about."""
        data = dict(data)
        if data.get("model_type") in (ViTConfig.model_type, VIT_SINUSOIDAL_MODEL_TYPE):
            raise ConfigError(f"config is for an image model (model_type {data['model_type']!r}), not BERT: it reads "
                              "image files (bertkit predict, attention), not text")
        if data.get("model_type") == PRE_LN_MODEL_TYPE:
            data["model_type"] = "bert"
            data.setdefault("normalize_before", True)
        if data.get("model_type", "bert") != "bert":  # e.g. a GPT-2 or a translation model's directory
            raise ConfigError(f"config is for model_type {data['model_type']!r}, not a BERT model ('bert')")
        cls._read_labels(data)
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: data.pop(k) for k in list(data) if k in names}
        unknown = sorted(k for k in data if k not in _HF_BOOKKEEPING)
        if unknown:
            warnings.warn(f"config keys not used by bertkit (kept as they are): {', '.join(unknown)}",
                          stacklevel=2)
        try:
            return cls(**known, extra=data)
        except TypeError as err:  # e.g. a string where a number belongs
            raise ConfigError(f"invalid config: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.extra)
        out.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"})
        for optional in ("embedding_size", "classifier_dropout", "prompt"):
            if out[optional] is None:
                del out[optional]
        for option, default in (("share_layers", False), ("normalize_before", False), ("use_bias", True)):
            if out[option] == default:
                del out[option]
        self._write_labels(out)
        out.setdefault("model_type", "bert")
        if self.normalize_before:
            # transformers' BERT is post-LN: it would load these weights and compute another function
            out["model_type"] = PRE_LN_MODEL_TYPE
        return out


# Named sizes for `bertkit pretrain --config NAME`; vocab_size is filled in from the vocabulary.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512),
    "mini": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "small": dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}

# `bertkit translate-train --model NAME` -> the Seq2SeqConfig fields that make it
TRANSLATION_MODELS: dict[str, dict[str, Any]] = {
    "transformer": dict(architecture="transformer"),
    "gru-attention": dict(architecture="rnn", rnn_cell="gru", rnn_attention=True),
    "gru": dict(architecture="rnn", rnn_cell="gru", rnn_attention=False),
    "lstm-attention": dict(architecture="rnn", rnn_cell="lstm", rnn_attention=True),
    "lstm": dict(architecture="rnn", rnn_cell="lstm", rnn_attention=False),
}
# `--size NAME` -> (Transformer sizes, RNN sizes); the RNNs are one layer each way, as Bahdanau et al.'s
TRANSLATION_SIZES: dict[str, tuple[dict[str, int], dict[str, int]]] = {
    "tiny": (dict(d_model=128, encoder_layers=2, decoder_layers=2, attention_heads=4, ffn_dim=512),
             dict(d_model=128, encoder_layers=1, decoder_layers=1)),
    "mini": (dict(d_model=256, encoder_layers=2, decoder_layers=2, attention_heads=4, ffn_dim=1024),
             dict(d_model=256, encoder_layers=1, decoder_layers=1)),
    "small": (dict(d_model=256, encoder_layers=3, decoder_layers=3, attention_heads=4, ffn_dim=1024),
              dict(d_model=256, encoder_layers=1, decoder_layers=1)),
    "base": (dict(d_model=512, encoder_layers=6, decoder_layers=6, attention_heads=8, ffn_dim=2048),
             dict(d_model=512, encoder_layers=2, decoder_layers=2)),
}

# `translate-train --tune-length-penalty`: the beam-search length penalties α scored on dev
TRANSLATION_LENGTH_PENALTIES = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8)

# Named sizes for `bertkit lm-train --size NAME`.
GPT_PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(n_embd=128, n_layer=2, n_head=4),
    "small": dict(n_embd=256, n_layer=4, n_head=4),
    "base": dict(n_embd=512, n_layer=6, n_head=8),
}


# ==== Seq2SeqConfig and GPT2Config: the encoder–decoder models and the decoder-only LM =================
# Names follow Hugging Face's Marian/BART (seq2seq) and GPT-2 (GPT) configs where they have one.

SEQ2SEQ_ARCHITECTURES = ("transformer", "rnn")
RNN_CELLS = ("rnn", "lstm", "gru")


def _check_positive(config: Any, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def _check_probabilities(config: Any, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise ConfigError(f"{name} must be in [0, 1), got {value!r}")


def _check_token_ids(config: Any, names: tuple[str, ...], vocab_size: int, harmless: bool = False) -> None:
    """A token id outside [0, vocab_size) is a ConfigError, or with `harmless` (ids only generation reads, never a
    weight) one ConfigWarning naming them; a negative or non-integer id is always an error."""
    outside = []
    for name in names:
        value = getattr(config, name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{name} must be a token id (an integer from 0), got {value!r}")
        if value >= vocab_size:
            if not harmless:
                raise ConfigError(f"{name} {value} is outside the vocabulary (size {vocab_size})")
            outside.append(f"{name} {value}")
    if outside:
        warnings.warn(f"{' and '.join(outside)} {'is' if len(outside) == 1 else 'are'} outside the vocabulary (size "
                      f"{vocab_size}): generation cannot start from or stop at {'it' if len(outside) == 1 else 'them'} "
                      "(give a prompt; continuations run to max_new_tokens)", ConfigWarning, stacklevel=5)


@dataclass
class Seq2SeqConfig(_JsonConfig):
    """An encoder–decoder translation model: the Transformer (Vaswani et al.) or an RNN with/without attention."""

    model_type = "bertkit-seq2seq"

    architecture: str = "transformer"           # "transformer" | "rnn"
    vocab_size: int = 8000                      # source vocabulary
    decoder_vocab_size: int | None = None       # target vocabulary; None = the source's
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    attention_heads: int = 8
    ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0             # inside the feed-forward; the paper has none there
    max_position_embeddings: int = 512
    normalize_before: bool = False              # pre-LN blocks; the paper's post-LN when False
    scale_embedding: bool = True                # embeddings × √d_model before adding positions (paper 3.4)
    share_encoder_decoder_embeddings: bool = False
    tie_word_embeddings: bool = True            # output projection = decoder input embeddings
    label_smoothing: float = 0.1
    layer_norm_eps: float = 1e-5
    # the RNN baselines: cell type, Bahdanau attention on/off
    rnn_cell: str = "gru"
    rnn_attention: bool = True
    pad_token_id: int = 0
    bos_token_id: int = 2                       # also the decoder's start token
    eos_token_id: int = 3

    def __post_init__(self) -> None:
        self.validate()

    @property
    def target_vocab_size(self) -> int:
        return self.decoder_vocab_size or self.vocab_size

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""
        if self.architecture not in SEQ2SEQ_ARCHITECTURES:
            raise ConfigError(f"architecture {self.architecture!r} is not one of {', '.join(SEQ2SEQ_ARCHITECTURES)}")
        _check_positive(self, ("vocab_size", "target_vocab_size", "d_model", "encoder_layers", "decoder_layers",
                               "attention_heads", "ffn_dim", "max_position_embeddings"))
        if self.d_model % self.attention_heads:
            raise ConfigError(f"d_model ({self.d_model}) is not divisible by attention_heads ({self.attention_heads})")
        if self.activation_function not in ACTIVATIONS:
            raise ConfigError(f"activation_function {self.activation_function!r} is not one of "
                              f"{', '.join(ACTIVATIONS)}")
        if self.rnn_cell not in RNN_CELLS:
            raise ConfigError(f"rnn_cell {self.rnn_cell!r} is not one of {', '.join(RNN_CELLS)}")
        _check_probabilities(self, ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"))
        if self.share_encoder_decoder_embeddings and self.target_vocab_size != self.vocab_size:
            raise ConfigError(f"shared source/target embeddings need one vocabulary, got sizes {self.vocab_size} "
                              f"and {self.target_vocab_size}")
        _check_token_ids(self, ("pad_token_id",), min(self.vocab_size, self.target_vocab_size))
        _check_token_ids(self, ("bos_token_id", "eos_token_id"), self.target_vocab_size)


@dataclass
class GPT2Config(_JsonConfig):
    """GPT-2 (Radford et al., 2019), as transformers' GPT2Config: the same field names and defaults (gpt2-small).

    bertkit adds two options transformers' GPT-2 does not have: GPT-1's post-LN blocks without a final
    LayerNorm (`normalize_before=False`) and fixed sinusoidal positions (`position_embedding_type`). A model
    with either is saved as model_type "bertkit-gpt2", which transformers' Auto classes refuse by name and its
    GPT2LMHeadModel warns about (its weights would not fit). Untied output weights, ReLU or GELU and `n_inner`
    are transformers' options too. Checkpoints of bertkit's earlier GPT (model_type "bertkit-gpt") still load.
    """

    model_type = "gpt2"
    other_model_types = ("bertkit-gpt2", "bertkit-gpt")
    ignored_keys = frozenset({"n_ctx", "summary_type", "summary_use_proj", "summary_activation",
                              "summary_proj_to_labels", "summary_first_dropout", "task_specific_params"})

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None                  # feed-forward size; None = 4 × n_embd
    activation_function: str = "gelu_new"
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    scale_attn_weights: bool = True             # scores / √head_dim, as every Transformer
    scale_attn_by_inverse_layer_idx: bool = False  # and / (layer index + 1)
    reorder_and_upcast_attn: bool = False       # transformers' mixed-precision detail; the same maths
    add_cross_attention: bool = False           # not supported: GPT-2 as a decoder of an encoder
    tie_word_embeddings: bool = True
    bos_token_id: int | None = 50256
    eos_token_id: int | None = 50256
    pad_token_id: int | None = None
    # bertkit's options, outside transformers' GPT-2 (see the class docstring)
    normalize_before: bool = True               # GPT-2's pre-LN + final LayerNorm; False = GPT-1's post-LN
    position_embedding_type: str = "absolute"   # learned, or "sinusoidal"

    def __post_init__(self) -> None:
        self.validate()

    @property
    def inner_size(self) -> int:
        return self.n_inner or 4 * self.n_embd

    @property
    def loads_in_transformers(self) -> bool:
        """Whether transformers' GPT2LMHeadModel computes what this model computes."""
        return self.normalize_before and self.position_embedding_type == "absolute"

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""
        _check_positive(self, ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "inner_size"))
        if self.n_embd % self.n_head:
            raise ConfigError(f"n_embd ({self.n_embd}) is not divisible by n_head ({self.n_head})")
        if self.activation_function not in ACTIVATIONS:
            raise ConfigError(f"activation_function {self.activation_function!r} is not one of "
                              f"{', '.join(ACTIVATIONS)}")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ConfigError(f"position_embedding_type {self.position_embedding_type!r} is not one of "
                              f"{', '.join(POSITION_EMBEDDING_TYPES)}")
        if self.add_cross_attention:
            raise ConfigError("add_cross_attention: bertkit's GPT-2 has no cross-attention (use Seq2SeqTransformer)")
        _check_probabilities(self, ("resid_pdrop", "embd_pdrop", "attn_pdrop"))
        # transformers' GPT2Config keeps GPT-2's 50256 as bos/eos whatever the vocabulary, and its models load and
        # run: these ids are read only by generation (gpt.py and generation.py check them where they are used)
        _check_token_ids(self, ("pad_token_id", "bos_token_id", "eos_token_id"), self.vocab_size, harmless=True)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if not self.loads_in_transformers:
            out["model_type"] = "bertkit-gpt2"
        return out


# ==== ViTConfig: images as patch sequences ==============================================================

# A ViT with fixed 2-D sinusoidal positions says this, not "vit": transformers' ViT has learned positions only,
# so its Auto classes must refuse the directory rather than load it with random ones.
VIT_SINUSOIDAL_MODEL_TYPE = "bertkit-vit"
POOLER_ACTIVATIONS = ("tanh", *ACTIVATIONS)


def _pair(value: Any) -> tuple[int, int]:
    """An image or patch size as (height, width): an int is square, a list or tuple gives both."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    return int(value), int(value)


@dataclass
class ViTConfig(_JsonConfig, _Labels):
    """Vision Transformer hyper-parameters (Dosovitskiy et al., 2020), as transformers' ViTConfig: the same field
    names and defaults (ViT-Base/16 at 224 × 224). bertkit adds `position_embedding_type="sinusoidal"`: fixed 2-D
    sine/cosine positions instead of learned ones, saved as model_type "bertkit-vit" (transformers has no such
    option, so its Auto classes refuse the directory by name)."""

    model_type = "vit"
    other_model_types = (VIT_SINUSOIDAL_MODEL_TYPE,)

    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    image_size: int | list[int] = 224            # pixels, or [height, width]
    patch_size: int | list[int] = 16             # pixels, or [height, width]
    num_channels: int = 3
    qkv_bias: bool = True                        # biases of the query, key and value projections
    encoder_stride: int = 16                     # transformers' masked-image-modelling decoder; unused here
    pooler_output_size: int | None = None        # None = hidden_size
    pooler_act: str = "tanh"
    id2label: dict[int, str] | None = None       # class names in id order (ViTForImageClassification)
    position_embedding_type: str = "absolute"    # learned; or bertkit's fixed 2-D "sinusoidal"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""
        _check_positive(self, ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                               "num_channels"))
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                              f"({self.num_attention_heads})")
        for name in ("image_size", "patch_size"):
            value = getattr(self, name)
            sides = value if isinstance(value, (list, tuple)) else [value]
            if len(sides) not in (1, 2) or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0
                                                   for s in sides):
                raise ConfigError(f"{name} must be a positive integer or [height, width], got {value!r}")
        for side, image, patch in zip(("height", "width"), self.image_hw, self.patch_hw):
            if image % patch:
                raise ConfigError(f"image {side} {image} is not a multiple of the patch {side} {patch}: "
                                  f"the last {image % patch} pixels would never be seen")
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(f"hidden_act {self.hidden_act!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.pooler_act not in POOLER_ACTIVATIONS:
            raise ConfigError(f"pooler_act {self.pooler_act!r} is not one of {', '.join(POOLER_ACTIVATIONS)}")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ConfigError(f"position_embedding_type {self.position_embedding_type!r} is not one of "
                              f"{', '.join(POSITION_EMBEDDING_TYPES)}")
        _check_probabilities(self, ("hidden_dropout_prob", "attention_probs_dropout_prob"))
        if self.layer_norm_eps <= 0:
            raise ConfigError(f"layer_norm_eps must be positive, got {self.layer_norm_eps!r}")
        if self.pooler_output_size is not None:
            _check_positive(self, ("pooler_output_size",))
        if self.id2label is not None:
            self.id2label = {int(k): str(v) for k, v in self.id2label.items()}
            if sorted(self.id2label) != list(range(len(self.id2label))) or not self.id2label:
                raise ConfigError(f"id2label keys must be 0..n-1, got {sorted(self.id2label)}")

    @property
    def image_hw(self) -> tuple[int, int]:
        return _pair(self.image_size)

    @property
    def patch_hw(self) -> tuple[int, int]:
        return _pair(self.patch_size)

    @property
    def grid(self) -> tuple[int, int]:
        """Patches per column and per row: the image as a (rows, columns) grid of patches."""
        (h, w), (ph, pw) = self.image_hw, self.patch_hw
        return h // ph, w // pw

    @property
    def num_patches(self) -> int:
        rows, columns = self.grid
        return rows * columns

    @property
    def use_bias(self) -> bool:
        """The query/key/value biases, under the name BertSelfAttention (which ViT reuses) reads them by."""
        return self.qkv_bias

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ViTConfig:
        """Build from a config dict; `num_labels` without names becomes LABEL_0..; label2id is derived."""
        data = dict(data)
        cls._read_labels(data)
        return super().from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        self._write_labels(out)
        if self.position_embedding_type == "absolute":
            del out["position_embedding_type"]  # transformers' own (and only) kind: its config.json has no such key
        else:
            out["model_type"] = VIT_SINUSOIDAL_MODEL_TYPE
        return out
