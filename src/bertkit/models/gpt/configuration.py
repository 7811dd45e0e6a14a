"""GPT-2's configuration, as transformers' GPT2Config, with bertkit's post-LN and sinusoidal options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.models.configuration import ACTIVATIONS, POSITION_EMBEDDING_TYPES, ConfigError, PretrainedConfig


@dataclass
class GPT2Config(PretrainedConfig):
    """GPT-2 (Radford et al., 2019), as transformers' GPT2Config: the same field names and defaults (gpt2-small).

    bertkit adds two options transformers' GPT-2 does not have: GPT-1's post-LN blocks without a final
    LayerNorm (`normalize_before=False`) and fixed sinusoidal positions (`position_embedding_type`). A model
    with either is saved as model_type "bertkit-gpt2", which transformers' Auto classes refuse by name and its
    GPT2LMHeadModel warns about (its weights would not fit). Untied output weights, ReLU or GELU and `n_inner`
    are transformers' options too. Checkpoints of bertkit's earlier GPT (model_type "bertkit-gpt") still load.
    """

    model_type = "gpt2"
    family = "GPT-2"
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

    @property
    def inner_size(self) -> int:
        return self.n_inner or 4 * self.n_embd

    @property
    def loads_in_transformers(self) -> bool:
        """Whether transformers' GPT2LMHeadModel computes what this model computes."""
        return self.normalize_before and self.position_embedding_type == "absolute"

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""
        self.check_positive(("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "inner_size"))
        self.check_divisible("n_embd", "n_head")
        self.check_choice("activation_function", ACTIVATIONS)
        self.check_choice("position_embedding_type", POSITION_EMBEDDING_TYPES)
        if self.add_cross_attention:
            raise ConfigError("add_cross_attention: bertkit's GPT-2 has no cross-attention (use Seq2SeqTransformer)")
        self.check_probabilities(("resid_pdrop", "embd_pdrop", "attn_pdrop"))
        # transformers' GPT2Config keeps GPT-2's 50256 as bos/eos whatever the vocabulary, and its models load and
        # run: these ids are read only by generation (gpt.py and generation.py check them where they are used)
        self.check_token_ids(("pad_token_id", "bos_token_id", "eos_token_id"), self.vocab_size, harmless=True)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if not self.loads_in_transformers:
            out["model_type"] = "bertkit-gpt2"
        return out



    def summary(self) -> list[tuple[str, str]]:
        blocks = "pre-LN (GPT-2)" if self.normalize_before else "post-LN (GPT-1)"
        output = "tied to" if self.tie_word_embeddings else "apart from"
        return [("layers", f"{self.n_layer}  hidden {self.n_embd}  heads {self.n_head}  ffn {self.inner_size}"),
                ("vocab", f"{self.vocab_size}  positions {self.n_positions} ({self.position_embedding_type})"),
                ("blocks", f"{blocks}, {self.activation_function}, output {output} the token embedding"),
                ("special ids", f"bos {self.bos_token_id}  eos {self.eos_token_id}  pad {self.pad_token_id}")]
