"""ModernBERT's configuration (Warner et al., 2024), as transformers' ModernBertConfig: the same field names and
defaults (ModernBERT-base), so a config.json either library writes reads unchanged in the other.

What changed from BERT's, field by field: no position table (`rope_parameters`: rotary positions, one base for the
global layers and another for the local ones), `layer_types` (each layer attends to every token, "full_attention",
or to the `local_attention` tokens around it, "sliding_attention"), a gated feed-forward (`intermediate_size` is
the width of each half of its input projection), pre-norm without biases (`norm_bias`, `attention_bias`,
`mlp_bias`). Older config.json files (transformers before 5) say `global_attn_every_n_layers`, `global_rope_theta`
and `local_rope_theta` instead; they are read into the new fields.

bertkit adds four switches of its own, each turning one change back to BERT's (or, for the norm, to NeoBERT's
RMSNorm), so that what each change buys can be measured (docs/modern-encoder.md): `position_embedding_type`,
`gated_mlp`, `normalize_before`, `norm_type`. Their defaults are ModernBERT's and are not written; a config that
changes one is written with model_type "bertkit-modernbert", which transformers refuses by name instead of
building ModernBERT's layers from it and computing another function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bertkit.models.configuration import ACTIVATIONS, ConfigError, LabelsMixin, PretrainedConfig
from bertkit.models.sentence_files import CLS, MEAN

FULL, SLIDING = "full_attention", "sliding_attention"
LAYER_TYPES = (FULL, SLIDING)
VARIANT_MODEL_TYPE = "bertkit-modernbert"  # a config with one of bertkit's switches changed
ROTARY, ABSOLUTE = "rotary", "absolute"
POSITION_TYPES = (ROTARY, ABSOLUTE)
LAYER_NORM, RMS_NORM = "layer_norm", "rms_norm"
NORM_TYPES = (LAYER_NORM, RMS_NORM)
# bertkit's switches and ModernBERT's setting of each (what transformers' ModernBERT computes)
MODERN_SETTINGS = {"position_embedding_type": ROTARY, "gated_mlp": True, "normalize_before": True,
                   "norm_type": LAYER_NORM}
CLASSIFIER_POOLINGS = (CLS, MEAN)  # the vector a classifier reads: [CLS]'s, or the mean of the tokens'


def _layer_types(layers: int, every: int) -> list[str]:
    """ModernBERT's pattern: global attention in layer 0 and every `every`-th after it, local in the rest."""
    return [FULL if i % every == 0 else SLIDING for i in range(layers)]


def _rope(global_theta: float = 160_000.0, local_theta: float = 10_000.0) -> dict[str, dict[str, Any]]:
    return {SLIDING: {"rope_type": "default", "rope_theta": local_theta},
            FULL: {"rope_type": "default", "rope_theta": global_theta}}


@dataclass
class ModernBertConfig(PretrainedConfig, LabelsMixin):
    """ModernBERT hyper-parameters, transformers' names and ModernBERT-base's defaults (22 layers × 768)."""

    model_type = "modernbert"
    family = "ModernBERT"
    other_model_types = (VARIANT_MODEL_TYPE,)
    ignored_keys = frozenset({"reference_compile", "deterministic_flash_attn", "repad_logits_with_grad",
                              "initializer_cutoff_factor", "sparse_prediction", "sparse_pred_ignore_index"})

    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    norm_eps: float = 1e-5
    norm_bias: bool = False
    pad_token_id: int | None = 50283
    attention_bias: bool = False
    attention_dropout: float = 0.0
    layer_types: list[str] = field(default_factory=lambda: _layer_types(22, 3))
    rope_parameters: dict[str, dict[str, Any]] = field(default_factory=_rope)
    local_attention: int = 128                   # tokens a local layer sees: local_attention / 2 each side
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True
    classifier_pooling: str = CLS
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    id2label: dict[int, str] | None = None
    text_pairs: bool | None = None               # bertkit's: what a classifier reads: pairs, single texts, both (None)
    # bertkit's, for a reader (ModernBertForQuestionAnswering): how it was fine-tuned to read questions, so that
    # predictions read them the same way: {"max_length", "doc_stride", "max_answer_length", "impossible"}
    qa: dict[str, Any] | None = None
    # bertkit's switches (MODERN_SETTINGS): each of ModernBERT's changes can be turned back to BERT's
    position_embedding_type: str = ROTARY        # or "absolute": a learned table added to the token embeddings
    gated_mlp: bool = True                       # False: Wo(act(Wi(x))), Wi C -> intermediate_size
    normalize_before: bool = True                # False: post-LN, x = LN(x + f(x)), no final LayerNorm
    norm_type: str = LAYER_NORM                  # or "rms_norm": x / rms(x) · weight (NeoBERT's), no mean, no bias

    def validate(self) -> None:
        self.check_positive(("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                             "num_attention_heads", "max_position_embeddings", "local_attention"))
        self.check_divisible("hidden_size", "num_attention_heads")
        if self.head_dim % 2:
            raise ConfigError(f"a head's {self.head_dim} dims must be even: rotary positions turn them in pairs")
        self.check_choice("hidden_activation", ACTIVATIONS)
        self.check_choice("classifier_activation", ACTIVATIONS)
        self.check_choice("classifier_pooling", CLASSIFIER_POOLINGS)
        self.check_choice("position_embedding_type", POSITION_TYPES)
        self.check_choice("norm_type", NORM_TYPES)
        self.check_probabilities(("attention_dropout", "embedding_dropout", "mlp_dropout", "classifier_dropout"))
        if len(self.layer_types) != self.num_hidden_layers or not set(self.layer_types) <= set(LAYER_TYPES):
            raise ConfigError(f"layer_types must give each of the {self.num_hidden_layers} layers one of "
                              f"{', '.join(LAYER_TYPES)}, got {self.layer_types!r}")
        for kind in set(self.layer_types):
            rope = (self.rope_parameters or {}).get(kind) or {}
            if rope.get("rope_type", "default") != "default" or not rope.get("rope_theta", 0) > 0:
                raise ConfigError(f"rope_parameters[{kind!r}] must be the default rotary positions with a "
                                  f"rope_theta above 0, got {rope!r}")
        self.check_token_ids(("pad_token_id",), self.vocab_size)
        self.check_labels()
        if self.text_pairs is not None and not isinstance(self.text_pairs, bool):
            raise ConfigError(f"text_pairs must be true, false or null, got {self.text_pairs!r}")
        self.check_qa()

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def rotary(self) -> bool:
        return self.position_embedding_type == ROTARY

    @property
    def changed_settings(self) -> dict[str, Any]:
        """bertkit's switches this config turns away from ModernBERT's settings."""
        return {name: getattr(self, name) for name, modern in MODERN_SETTINGS.items() if getattr(self, name) != modern}

    @property
    def sliding_window(self) -> int:
        """How far a local layer's token sees on each side: tokens i and j attend when |i - j| <= this."""
        return self.local_attention // 2

    def rope_theta(self, layer_type: str) -> float:
        return float(self.rope_parameters[layer_type]["rope_theta"])

    @classmethod
    def _read(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Older files' keys (transformers before 5) as the new ones; label names as every family reads them."""
        every = data.pop("global_attn_every_n_layers", None)
        if data.get("layer_types") is None:  # the pattern for as many layers as there are (every third global)
            data["layer_types"] = _layer_types(int(data.get("num_hidden_layers", 22)), int(every or 3))
        global_theta, local_theta = data.pop("global_rope_theta", None), data.pop("local_rope_theta", None)
        if "rope_parameters" not in data and (global_theta is not None or local_theta is not None):
            data["rope_parameters"] = _rope(global_theta or 160_000.0, local_theta or 10_000.0)
        return cls.read_labels(data)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        for optional in ("text_pairs", "qa"):  # bertkit's own keys, written only where they say something
            if out[optional] is None:
                del out[optional]
        for name in MODERN_SETTINGS.keys() - self.changed_settings.keys():
            del out[name]
        if self.changed_settings:
            out["model_type"] = VARIANT_MODEL_TYPE
        return self.write_labels(out)

    def summary(self) -> list[tuple[str, str]]:
        local = sum(kind == SLIDING for kind in self.layer_types)
        positions = (f"rotary positions, bases {self.rope_theta(FULL):g} global"
                     + (f", {self.rope_theta(SLIDING):g} local" if local else "")) if self.rotary else \
            "learned absolute positions"
        norm = ("pre-norm" if self.normalize_before else "post-norm") + (", RMSNorm" if self.norm_type == RMS_NORM
                                                                            else "")
        rows = [("layers", f"{self.num_hidden_layers}  hidden {self.hidden_size}  heads {self.num_attention_heads}  "
                           f"{'GLU' if self.gated_mlp else 'ffn'} {self.intermediate_size} ({self.hidden_activation}), "
                           f"{norm}"),
                ("attention", f"{self.num_hidden_layers - local} global, {local} local ({self.local_attention} "
                              f"tokens); {positions}")]
        if self.qa:
            rows.append(("qa", "  ".join(f"{key} {value}" for key, value in self.qa.items())))
        return rows
