"""The Vision Transformer (Dosovitskiy et al., 2020): an image read as a sequence of patches by a Transformer encoder.

Cut the image into equal P × P patches, map each flattened patch to the hidden width with one linear layer (a
convolution whose kernel and stride are the patch size computes exactly that, for every patch at once), prepend a
learned class token, add position embeddings, and run N encoder blocks; the class token's final vector is the
image's. The blocks are pre-LN (x + Attn(LN(x)), x + MLP(LN(x)), a LayerNorm after the last) and their
self-attention is BERT's (`BertSelfAttention`): the encoder does not care where its sequence came from.

Module and weight names are those of transformers' ViT checkpoints (`embeddings.patch_embeddings.projection`,
`embeddings.cls_token`, `embeddings.position_embeddings`, `encoder.layer.N.attention.attention.query`,
`...attention.output.dense`, `layernorm_before`, `layernorm_after`, `intermediate.dense`, `output.dense`,
`layernorm`, `pooler.dense`, `classifier`, and `vit.` in the classifier), so a directory written by either
library loads in the other.

Dimension letters: B batch, K image channels, h × w pixels, N patches (a rows × columns grid), T = N + 1 tokens,
C hidden, H heads.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.models.bert.modeling import BertSelfAttention
from bertkit.models.dropout import Dropout
from bertkit.models.functional import ACT2FN, sinusoidal_positions
from bertkit.models.outputs import BertModelOutput, ClassifierOutput
from bertkit.models.pretrained import PreTrainedModel, classification_loss
from bertkit.models.vit.configuration import ViTConfig

POOLER_ACT = {"tanh": torch.tanh, **ACT2FN}


def sinusoidal_positions_2d(rows: int, columns: int, dim: int) -> Tensor:
    """(rows · columns, dim) fixed positions of a patch grid, row-major: the first dim/2 dimensions are the 1-D
    sinusoidal encoding of the patch's row, the other dim/2 that of its column (as MAE's 2-D sin-cos table)."""
    half = dim // 2
    row = sinusoidal_positions(rows, half) if half else torch.zeros(rows, 0)           # (rows, dim/2)
    column = sinusoidal_positions(columns, dim - half)                                  # (columns, dim - dim/2)
    return torch.cat([row.repeat_interleave(columns, 0), column.repeat(rows, 1)], dim=1)


class ViTPatchEmbeddings(nn.Module):
    """(B, K, h, w) pixels -> (B, N, C): each P × P patch, flattened, through one linear map (as a strided conv)."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.projection = nn.Conv2d(config.num_channels, config.hidden_size, kernel_size=config.patch_hw,
                                    stride=config.patch_hw)

    def forward(self, pixel_values: Tensor) -> Tensor:
        return self.projection(pixel_values).flatten(2).transpose(1, 2)   # (B, C, rows, columns) -> (B, N, C)


class ViTEmbeddings(nn.Module):
    """[class token; patch embeddings] + position embeddings (learned, or fixed 2-D sinusoidal), then dropout."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        C, N = config.hidden_size, config.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, C))
        self.patch_embeddings = ViTPatchEmbeddings(config)
        fixed = config.position_embedding_type == "sinusoidal"
        # fixed positions are a buffer (neither trained nor saved; the class token has no place, so no position),
        # learned ones a parameter; the other is None
        table = torch.cat([torch.zeros(1, C), sinusoidal_positions_2d(*config.grid, C)]).unsqueeze(0) if fixed else None
        self.register_buffer("sinusoidal_table", table, persistent=False)                     # (1, T, C)
        self.position_embeddings = None if fixed else nn.Parameter(torch.zeros(1, N + 1, C))
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, pixel_values: Tensor) -> Tensor:
        patches = self.patch_embeddings(pixel_values)                                       # (B, N, C)
        cls = self.cls_token.expand(patches.size(0), -1, -1).to(patches.dtype)              # (B, 1, C)
        positions = self.sinusoidal_table if self.position_embeddings is None else self.position_embeddings
        return self.dropout(torch.cat([cls, patches], dim=1) + positions)                   # (B, T, C)


class ViTSelfOutput(nn.Module):
    """The attention's output projection W_O and dropout; the block adds the residual."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.dense(x))


class ViTAttention(nn.Module):
    """Multi-head self-attention (BERT's, under transformers' ViT name `attention.attention`) and W_O."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.output = ViTSelfOutput(config)

    def forward(self, x: Tensor, output_attentions: bool) -> tuple[Tensor, Tensor | None]:
        context, probs = self.attention(x, None, output_attentions)  # an image has no padding: no mask
        return self.output(context), probs


class ViTIntermediate(nn.Module):
    """The MLP's first half: Linear C -> intermediate_size and the activation."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACT2FN[config.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.dense(x))


class ViTOutput(nn.Module):
    """The MLP's second half: Linear intermediate_size -> C, dropout, residual add."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, hidden: Tensor, residual: Tensor) -> Tensor:
        return self.dropout(self.dense(hidden)) + residual


class ViTLayer(nn.Module):
    """One pre-LN block: x = x + Attn(LN_before(x)); x = x + MLP(LN_after(x))."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.attention = ViTAttention(config)
        self.intermediate = ViTIntermediate(config)
        self.output = ViTOutput(config)
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor, output_attentions: bool) -> tuple[Tensor, Tensor | None]:
        attended, probs = self.attention(self.layernorm_before(x), output_attentions)
        x = x + attended
        return self.output(self.intermediate(self.layernorm_after(x)), x), probs


class ViTEncoder(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(ViTLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x: Tensor, output_attentions: bool = False,
                output_hidden_states: bool = False) -> tuple[Tensor, tuple | None, tuple | None]:
        hidden_states, attentions = ((x,) if output_hidden_states else None), (() if output_attentions else None)
        for layer in self.layer:
            x, probs = layer(x, output_attentions)
            if output_hidden_states:
                hidden_states += (x,)
            if output_attentions:
                attentions += (probs,)
        return x, hidden_states, attentions


class ViTPooler(nn.Module):
    """activation(Linear(class token's final vector)), tanh by default, as BERT's pooler."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.pooler_output_size or config.hidden_size)
        self.activation = POOLER_ACT[config.pooler_act]

    def forward(self, hidden: Tensor) -> Tensor:
        return self.activation(self.dense(hidden[:, 0]))


class ViTPreTrainedModel(PreTrainedModel):
    """The ViT family: ViTConfig, transformers' ViT initialisation, task models hold the encoder as `vit`."""

    config_class = ViTConfig
    base_model_prefix = "vit"

    def _init_weights(self, module: nn.Module) -> None:
        """Linear and patch projections, class token and learned positions ~ truncated N(0, initializer_range)."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.trunc_normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, ViTEmbeddings):
            nn.init.trunc_normal_(module.cls_token, std=std)
            if module.position_embeddings is not None:
                nn.init.trunc_normal_(module.position_embeddings, std=std)


class ViTModel(ViTPreTrainedModel):
    """The ViT encoder: pixels (B, K, h, w) -> token vectors (B, T, C), class token first, and the pooled (B, C)."""

    head_prefixes = ("pooler.",)  # classification checkpoints have no pooler
    other_head_prefixes = ("classifier.", "embeddings.mask_token", "decoder.")  # transformers' other ViT heads

    def __init__(self, config: ViTConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self.embeddings = ViTEmbeddings(config)
        self.encoder = ViTEncoder(config)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.pooler = ViTPooler(config) if add_pooling_layer else None
        self.init_weights()

    def forward(self, pixel_values: Tensor, output_attentions: bool = False,
                output_hidden_states: bool = False) -> BertModelOutput:
        """pixel_values (B, K, h, w) float, normalised as the model was trained; hidden_states are the embeddings
        and each block's output (before the final LayerNorm), attentions each block's (B, H, T, T)."""
        self._check_pixels(pixel_values)
        x = self.embeddings(pixel_values.to(self.embeddings.patch_embeddings.projection.weight.dtype))
        x, hidden_states, attentions = self.encoder(x, output_attentions, output_hidden_states)
        x = self.layernorm(x)
        pooled = self.pooler(x) if self.pooler is not None else None
        return BertModelOutput(x, pooled, hidden_states, attentions)

    def _check_pixels(self, pixel_values: Tensor) -> None:
        """Clear errors for images the model cannot read, instead of a failure deep inside a convolution."""
        cfg = self.config
        expected = f"(batch, {cfg.num_channels}, {cfg.image_hw[0]}, {cfg.image_hw[1]})"
        if not isinstance(pixel_values, Tensor) or pixel_values.dim() != 4:
            got = tuple(pixel_values.shape) if isinstance(pixel_values, Tensor) else type(pixel_values).__name__
            raise InputError(f"pixel_values must be a {expected} tensor of images, got {got}")
        if not pixel_values.is_floating_point():
            raise InputError(f"pixel_values must be floating point (normalised pixels), got {pixel_values.dtype}; "
                             "scale and normalise the image as the model was trained (bertkit.data.images)")
        B, K, h, w = pixel_values.shape
        if B == 0:
            raise InputError(f"empty batch: pixel_values has shape {tuple(pixel_values.shape)}")
        if K != cfg.num_channels:
            raise InputError(f"pixel_values has {K} channels, the model reads {cfg.num_channels}: expected {expected}")
        if (h, w) != cfg.image_hw:
            raise InputError(f"images of {h} × {w} pixels, the model reads {cfg.image_hw[0]} × {cfg.image_hw[1]}: "
                             f"resize them first (expected {expected})")
        if self.checks_values(pixel_values) and not bool(torch.isfinite(pixel_values).all()):
            raise InputError("pixel_values holds NaN or infinite values")


class ViTForImageClassification(ViTPreTrainedModel):
    """ViT with a Linear on the class token's final vector: logits over `config.id2label`'s classes."""

    head_prefixes = ("classifier.",)
    other_head_prefixes = ("vit.pooler.", "vit.embeddings.mask_token", "decoder.")

    def __init__(self, config: ViTConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.vit = ViTModel(config, add_pooling_layer=False)
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        self.init_weights()

    def forward(self, pixel_values: Tensor, labels: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> ClassifierOutput:
        """labels (B,): class ids (cross-entropy), or target values when num_labels == 1 (mean squared error)."""
        out = self.vit(pixel_values, output_attentions, output_hidden_states)
        logits = self.classifier(out.last_hidden_state[:, 0])                      # (B, num_labels)
        loss = None
        if labels is not None:
            loss = classification_loss(logits, labels, self.num_labels, self.checks_values(labels))
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)


MODEL_CLASSES = {cls.__name__: cls for cls in (ViTModel, ViTForImageClassification)}


def vit_class_for(config: ViTConfig) -> type[ViTPreTrainedModel]:
    """The class a ViT directory was saved from (config.json's `architectures`), ViTModel when unknown."""
    return next((MODEL_CLASSES[name] for name in config.architectures if name in MODEL_CLASSES), ViTModel)
