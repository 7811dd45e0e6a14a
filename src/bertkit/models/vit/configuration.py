"""The Vision Transformer's configuration, as transformers' ViTConfig, with bertkit's fixed 2-D positions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.models.configuration import ACTIVATIONS, ConfigError, EncoderConfig, LabelsMixin

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
class ViTConfig(EncoderConfig, LabelsMixin):
    """Vision Transformer hyper-parameters (Dosovitskiy et al., 2020), as transformers' ViTConfig: the same field
    names and defaults (ViT-Base/16 at 224 × 224). bertkit adds `position_embedding_type="sinusoidal"`: fixed 2-D
    sine/cosine positions instead of learned ones, saved as model_type "bertkit-vit" (transformers has no such
    option, so its Auto classes refuse the directory by name)."""

    model_type = "vit"
    family = "ViT"
    other_model_types = (VIT_SINUSOIDAL_MODEL_TYPE,)

    # the encoder's shape is EncoderConfig's (hidden_size, num_hidden_layers, ...); a ViT trains without dropout
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    image_size: int | list[int] = 224            # pixels, or [height, width]
    patch_size: int | list[int] = 16             # pixels, or [height, width]
    num_channels: int = 3
    qkv_bias: bool = True                        # biases of the query, key and value projections
    encoder_stride: int = 16                     # transformers' masked-image-modelling decoder; unused here
    pooler_output_size: int | None = None        # None = hidden_size
    pooler_act: str = "tanh"
    id2label: dict[int, str] | None = None       # class names in id order (ViTForImageClassification)

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""
        super().validate()
        self.check_positive(("num_channels",))
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
        self.check_choice("pooler_act", POOLER_ACTIVATIONS)
        if self.pooler_output_size is not None:
            self.check_positive(("pooler_output_size",))
        self.check_labels()

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
    def _read(cls, data: dict[str, Any]) -> dict[str, Any]:
        return cls.read_labels(data)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        self.write_labels(out)
        if self.position_embedding_type == "absolute":
            del out["position_embedding_type"]  # transformers' own (and only) kind: its config.json has no such key
        else:
            out["model_type"] = VIT_SINUSOIDAL_MODEL_TYPE
        return out

    def summary(self) -> list[tuple[str, str]]:
        rows, columns = self.grid
        out = [("layers", f"{self.num_hidden_layers}  hidden {self.hidden_size}  heads {self.num_attention_heads}  mlp "
                          f"{self.intermediate_size}  ({self.hidden_act}, pre-LN)"),
               ("images", f"{self.num_channels} channel(s), {self.image_hw[0]} × {self.image_hw[1]} pixels in {rows} × "
                          f"{columns} patches of {self.patch_hw[0]} × {self.patch_hw[1]} + the class token; positions "
                          f"{'learned' if self.position_embedding_type == 'absolute' else 'fixed 2-D sinusoidal'}")]
        if self.id2label:
            out.append(("labels", ", ".join(self.id2label[i] for i in sorted(self.id2label))))
        return out
