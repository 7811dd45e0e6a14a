"""BERT's configuration (Hugging Face `BertConfig` names), with bertkit's ALBERT, pre-LN and prompt options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.models.configuration import (
    ACTIVATIONS,
    POSITION_EMBEDDING_TYPES,
    ConfigError,
    LabelsMixin,
    PretrainedConfig,
)

# A pre-LN BERT's config.json says this, not "bert", so that transformers' AutoModel refuses it.
PRE_LN_MODEL_TYPE = "bertkit-bert-pre-ln"
QA_KEYS = ("max_length", "doc_stride", "max_answer_length", "impossible")


@dataclass
class BertConfig(PretrainedConfig, LabelsMixin):
    """BERT hyper-parameters (Hugging Face `BertConfig` names) plus bertkit's ALBERT and positional options."""

    model_type = "bert"
    family = "BERT"
    other_model_types = (PRE_LN_MODEL_TYPE,)

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
    # Extractive QA (BertForQuestionAnswering): how it was fine-tuned to read questions, so that predictions read
    # them the same way: {"max_length", "doc_stride", "max_answer_length", "impossible"} (bertkit.inference.qa).
    qa: dict[str, Any] | None = None

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
        self.check_labels()
        if self.prompt is not None:
            self._validate_prompt()
        if self.qa is not None and (not isinstance(self.qa, dict) or not set(self.qa) <= set(QA_KEYS)):
            raise ConfigError(f"qa must be a dict with some of the keys {', '.join(QA_KEYS)}, got {self.qa!r}")

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
    def _read(cls, data: dict[str, Any]) -> dict[str, Any]:
        if data.get("model_type") == PRE_LN_MODEL_TYPE:
            data.setdefault("normalize_before", True)
        return cls.read_labels(data)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        for optional in ("embedding_size", "classifier_dropout", "prompt", "qa"):
            if out[optional] is None:
                del out[optional]
        for option, default in (("share_layers", False), ("normalize_before", False), ("use_bias", True)):
            if out[option] == default:
                del out[option]
        self.write_labels(out)
        if self.normalize_before:
            # transformers' BERT is post-LN: it would load these weights and compute another function
            out["model_type"] = PRE_LN_MODEL_TYPE
        return out



    def summary(self) -> list[tuple[str, str]]:
        variants = ("  pre-LN" if self.normalize_before else "") + ("" if self.use_bias else "  no biases")
        rows = [("layers", f"{self.num_hidden_layers}  hidden {self.hidden_size}  heads {self.num_attention_heads} "
                           f"(head size {self.head_dim})  ffn {self.intermediate_size}"),
                ("vocab", f"{self.vocab_size}  positions {self.max_position_embeddings} "
                          f"({self.position_embedding_type})  token types {self.type_vocab_size}"),
                ("activation", f"{self.hidden_act}  layer_norm_eps {self.layer_norm_eps}{variants}")]
        if self.embedding_size or self.share_layers:
            rows.append(("albert", f"embedding_size {self.embedding_size}  share_layers {self.share_layers}"))
        if self.id2label:
            rows.append(("labels", ", ".join(self.id2label[i] for i in sorted(self.id2label))))
        if self.qa:
            rows.append(("qa", "  ".join(f"{key} {value}" for key, value in self.qa.items())))
        if self.prompt:
            rows.append(("prompt", f"{self.prompt['template']}  label words {', '.join(self.prompt['label_words'])}"))
        return rows
