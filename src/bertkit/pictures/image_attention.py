"""Where a Vision Transformer's class token looks: per head, and rolled out over the layers, on the image itself.

The class token's attention row in a layer is a distribution over the class token and the N patches; reshaped to
the rows × columns patch grid, it is a map the size of the image's patches. One layer's row ignores that each
block adds its input back (the residual) and that the patches it attends to have themselves mixed in earlier
layers; attention rollout (Abnar & Zuidema, 2020) accounts for both: per layer Â = ½·(mean of the heads) + ½·I,
and the product Â_L ··· Â_1 says how much of each input patch reaches each output token.

Dimension letters: L layers, H heads, T = 1 + N tokens (class token first), N patches in a rows × columns grid.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from bertkit.pictures.attention_view import SentenceAttention


def attention_rollout(attentions: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """(L, H, T, T) -> (T, T): Â_L ··· Â_1 with Â_l = (1 - residual)·mean_h(A_l) + residual·I; rows sum to 1."""
    attentions = np.asarray(attentions, dtype=np.float64)
    T = attentions.shape[-1]
    rollout = np.eye(T)
    for layer in attentions:
        mixed = (1.0 - residual) * layer.mean(0) + residual * np.eye(T)
        rollout = (mixed / mixed.sum(-1, keepdims=True)) @ rollout
    return rollout


def class_token_maps(attentions: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """(L, H, T, T) -> (L, H, rows, columns): each layer's and head's class-token attention on the patches."""
    L, H = attentions.shape[:2]
    return np.asarray(attentions)[:, :, 0, 1:].reshape(L, H, *grid)


def rollout_map(attentions: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """(rows, columns): the share of each patch in the class token's output, by attention rollout."""
    return attention_rollout(attentions)[0, 1:].reshape(grid)


@dataclass
class ImageAttention:
    """One image through a ViT: the picture shown, every layer's and head's attention, the patch grid, the guess."""

    image: np.ndarray               # (h, w) grey or (h, w, 3) RGB, uint8, as the model read it
    attentions: np.ndarray          # (L, H, T, T)
    grid: tuple[int, int]           # patch rows, columns
    label: str | None = None
    score: float | None = None
    name: str = "image"

    @property
    def patch(self) -> tuple[int, int]:
        return self.image.shape[0] // self.grid[0], self.image.shape[1] // self.grid[1]

    def tokens(self) -> list[str]:
        """[CLS], then each patch by its grid place (row, column), row by row."""
        return ["[CLS]"] + [f"r{r}c{c}" for r in range(self.grid[0]) for c in range(self.grid[1])]

    def as_sentence(self) -> SentenceAttention:
        """The same attentions for the HTML viewer, one "token" per patch."""
        return SentenceAttention(tokens=self.tokens(), token_type_ids=[0] * (1 + self.grid[0] * self.grid[1]),
                                 attentions=self.attentions, text=self.name)


def image_attentions(model, processor, path: str | os.PathLike) -> ImageAttention:
    """Run the image file at `path` through a ViT (bare or classifier) and keep every attention map."""
    import torch

    from bertkit.data.images import image_to_array, open_image

    array = image_to_array(open_image(path), processor.size, processor.num_channels)         # (K, h, w)
    pixels = processor.normalize(array[None]).to(next(model.parameters()).device)
    with torch.no_grad():
        out = model(pixels, output_attentions=True)
    attentions = np.stack([a[0].float().cpu().numpy() for a in out.attentions])            # (L, H, T, T)
    label = score = None
    if getattr(out, "logits", None) is not None:
        probabilities = out.logits[0].float().softmax(-1)
        index = int(probabilities.argmax())
        label = (model.config.id2label or {}).get(index, f"LABEL_{index}")
        score = float(probabilities[index])
    image = array[0] if array.shape[0] == 1 else array.transpose(1, 2, 0)
    return ImageAttention(image, attentions, model.config.grid, label, score, Path(path).name)


# ---- pictures ------------------------------------------------------------------------------------

def draw_image(ax, image: np.ndarray, patch: tuple[int, int] | None = None, attention: np.ndarray | None = None,
               title: str | None = None) -> None:
    """The image (grey or RGB), optionally a patch grid over it and a (rows, columns) attention map laid on it."""
    h, w = image.shape[:2]
    ax.imshow(image, cmap="gray" if image.ndim == 2 else None, vmin=0, vmax=255, extent=(0, w, h, 0),
              interpolation="nearest")
    if attention is not None:
        shown = attention / max(float(attention.max()), 1e-12)
        ax.imshow(shown, cmap="inferno", alpha=0.6, vmin=0, vmax=1, extent=(0, w, h, 0), interpolation="nearest")
    if patch is not None:
        for y in range(0, h + 1, patch[0]):
            ax.axhline(y, color="#2a9df4", linewidth=0.8)
        for x in range(0, w + 1, patch[1]):
            ax.axvline(x, color="#2a9df4", linewidth=0.8)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)


def image_attention_figure(attention: ImageAttention, layer: int = -1, columns: int = 4) -> Figure:
    """The image with its patch grid, the rollout over all layers, `layer`'s mean over heads, then each head of it."""
    L, H = attention.attentions.shape[:2]
    layer = layer % L
    maps = class_token_maps(attention.attentions, attention.grid)
    panels = [("the image and its patches", None, True), ("rollout over all layers",
                                                           rollout_map(attention.attentions, attention.grid), False),
              (f"layer {layer}: mean of heads", maps[layer].mean(0), False)]
    panels += [(f"layer {layer} · head {h}", maps[layer, h], False) for h in range(H)]
    rows = -(-len(panels) // columns)
    fig = Figure(figsize=(2.3 * columns, 2.4 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    for ax, (title, shown, grid) in zip(axes.flat, panels):
        draw_image(ax, attention.image, attention.patch if grid else None, shown, title)
    guess = f" — predicted {attention.label} ({attention.score:.3f})" if attention.label is not None else ""
    fig.suptitle(f"Where the class token looks: {attention.name}{guess}", fontsize=10)
    return fig
