"""BERT's configuration (Hugging Face `BertConfig` names), with bertkit's ALBERT, pre-LN and prompt options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.models.configuration import ConfigError, EncoderConfig, LabelsMixin

# A pre-LN BERT's config.json says this, not "bert", so that transformers' AutoModel refuses it.
PRE_LN_MODEL_TYPE = "bertkit-bert-pre-ln"


@dataclass
class BertConfig(EncoderConfig, LabelsMixin):
    """BERT hyper-parameters (Hugging Face `BertConfig` names) plus bertkit's ALBERT and positional options."""

    model_type = "bert"
    family = "BERT"
    other_model_types = (PRE_LN_MODEL_TYPE,)

    # the encoder's shape (hidden_size, num_hidden_layers, ..., position_embedding_type) is EncoderConfig's
    vocab_size: int = 30522
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    pad_token_id: int = 0
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
    # Sequence classification: fine-tuned on text pairs (true) or on single texts (false). Predictions refuse the
    # other form, which the model never learnt to read and would still label; None: not known (a model from
    # elsewhere, or from before bertkit wrote it) or fine-tuned on both, and either form is taken.
    text_pairs: bool | None = None

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""
        super().validate()
        self.check_positive(("vocab_size", "max_position_embeddings", "type_vocab_size"))
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        if self.embedding_size is not None and (
                not isinstance(self.embedding_size, int) or self.embedding_size <= 0):
            raise ConfigError(f"embedding_size must be a positive integer or None, got {self.embedding_size!r}")
        self.check_labels()
        if self.prompt is not None:
            self._validate_prompt()
        self.check_qa()
        if self.text_pairs is not None and not isinstance(self.text_pairs, bool):
            raise ConfigError(f"text_pairs must be true, false or null, got {self.text_pairs!r}")

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

    # ---- config.json ---------------------------------------------------------------------------

    @classmethod
    def _read(cls, data: dict[str, Any]) -> dict[str, Any]:
        if data.get("model_type") == PRE_LN_MODEL_TYPE:
            data.setdefault("normalize_before", True)
        return cls.read_labels(data)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        for optional in ("embedding_size", "classifier_dropout", "prompt", "qa", "text_pairs"):
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
