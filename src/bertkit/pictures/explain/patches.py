"""An image as a sequence: cut it into P × P patches and map each flattened patch to a vector with one linear layer.

That linear layer is a convolution whose kernel and stride are the patch size: the kernel visits each patch once,
without overlap, and its C filters are the C rows of the linear layer's weight, reshaped to (K, P, P). Both are
computed here from the same weights, on a real MNIST digit and on a random colour image, and the outputs agree to
float precision. The pictures show the patch grid over the digit and the patches in the order the encoder reads
them, after the class token.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.pictures.explain.base import Explanation, PictureWriter, table

CLAIM = "a linear layer on flattened patches is a convolution whose kernel and stride are the patch size"
HIDDEN = 16   # vector width of the experiment's patch embedding


def flatten_patches(images: Tensor, patch: int) -> Tensor:
    """(B, K, h, w) -> (B, N, K·P·P): the patches in reading order (row by row), each flattened channel-first."""
    B, K, h, w = images.shape
    grid = images.unfold(2, patch, patch).unfold(3, patch, patch)            # (B, K, rows, columns, P, P)
    return grid.permute(0, 2, 3, 1, 4, 5).reshape(B, (h // patch) * (w // patch), K * patch * patch)


def linear_from_conv(conv: nn.Conv2d) -> nn.Linear:
    """The Linear(K·P·P -> C) whose weight rows are the convolution's C filters, flattened (K, P, P) -> K·P·P."""
    C = conv.out_channels
    linear = nn.Linear(conv.weight[0].numel(), C)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.reshape(C, -1))
        linear.bias.copy_(conv.bias)
    return linear


def compare(images: Tensor, patch: int, seed: int = 0) -> dict[str, float]:
    """Patch embeddings by the strided convolution and by the linear layer on flattened patches, same weights."""
    torch.manual_seed(seed)
    conv = nn.Conv2d(images.size(1), HIDDEN, kernel_size=patch, stride=patch)
    linear = linear_from_conv(conv)
    with torch.no_grad():
        by_conv = conv(images).flatten(2).transpose(1, 2)                      # (B, N, C): ViT's patch embedding
        by_linear = linear(flatten_patches(images, patch))                     # (B, N, C)
    return {"patches": by_conv.size(1), "vector_length": int(linear.in_features),
            "max_abs_difference": float((by_conv - by_linear).abs().max()),
            "max_abs_output": float(by_conv.abs().max())}


def _first_test_digit() -> tuple[np.ndarray, int]:
    from bertkit.data.images import load_mnist

    image, label = load_mnist()["test"][0]
    return image[0], label


def explain(out: str | os.PathLike | None = None, fmt: str = "png", digit: np.ndarray | None = None,
            seed: int = 0) -> Explanation:
    """Compare the two computations for several patch sizes; draw the grid over `digit` (default: MNIST's first
    test digit, fetched once) and its patches as a sequence."""
    label = None
    if digit is None:
        digit, label = _first_test_digit()
    digit = np.asarray(digit, dtype=np.uint8)
    if digit.shape != (28, 28):
        raise InputError(f"digit must be a 28 × 28 grey image, got shape {digit.shape}")
    pixels = torch.from_numpy(digit.astype(np.float32) / 255.0)[None, None]   # (1, 1, 28, 28)
    colour = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
    cases = {f"digit 28 × 28, patch {p}": compare(pixels, p, seed) for p in (4, 7, 14)}
    cases.update({f"colour 3 × 32 × 32, patch {p}": compare(colour, p, seed) for p in (4, 8)})
    rows = [(name, c["patches"], c["vector_length"], c["max_abs_output"], c["max_abs_difference"])
            for name, c in cases.items()]
    worst = max(c["max_abs_difference"] for c in cases.values())
    text = "\n".join([
        f"patch embedding of width {HIDDEN}: Conv2d(kernel = stride = P) against Linear(K·P·P -> {HIDDEN}) on the "
        "flattened patches, the Linear's weight = the filters reshaped:",
        table(["image, patch size P", "patches N", "vector K·P·P", "max |output|", "max |conv - linear|"], rows, 3),
        "",
        f"The two agree to {worst:.1e} (float32 rounding): a ViT's patch embedding is one matrix applied to each",
        "patch, and the convolution is only the fast way to apply it to every patch at once. The 28 × 28 digit",
        "becomes 16 tokens of 49 pixels (P = 7) or 49 tokens of 16 pixels (P = 4), read after the class token.",
    ])
    numbers = {"cases": cases, "max_abs_difference": worst, "digit_label": label}

    pictures = PictureWriter(out, fmt)
    if pictures:
        pictures.save("patches_grid", lambda: _grid_figure(digit, label))
        pictures.save("patches_sequence", lambda: _sequence_figure(digit, 7))
    return Explanation("patches", CLAIM, numbers, text, pictures.paths)


def _grid_figure(digit: np.ndarray, label: int | None):
    from matplotlib.figure import Figure

    from bertkit.pictures.image_attention import draw_image

    fig = Figure(figsize=(7.5, 2.9), layout="constrained")
    axes = fig.subplots(1, 3)
    draw_image(axes[0], digit, title="a digit, 28 × 28 pixels" if label is None else f"the digit {label}, 28 × 28")
    draw_image(axes[1], digit, (7, 7), title="patch 7: 4 × 4 = 16 tokens")
    draw_image(axes[2], digit, (4, 4), title="patch 4: 7 × 7 = 49 tokens")
    return fig


def _sequence_figure(digit: np.ndarray, patch: int):
    from matplotlib.figure import Figure

    grid = digit.shape[0] // patch
    fig = Figure(figsize=(11, 2.3), layout="constrained")
    axes = fig.subplots(1, grid * grid + 1)
    axes[0].text(0.5, 0.5, "[CLS]", ha="center", va="center", fontsize=9)
    axes[0].set_axis_off()
    for n, ax in enumerate(axes[1:]):
        r, c = divmod(n, grid)
        ax.imshow(digit[r * patch:(r + 1) * patch, c * patch:(c + 1) * patch], cmap="gray", vmin=0, vmax=255)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(str(n + 1), fontsize=8)
    fig.suptitle(f"the sequence the encoder reads: the class token, then the {grid * grid} patches of "
                 f"{patch} × {patch} pixels row by row, each flattened to {patch * patch} numbers", fontsize=9)
    return fig
