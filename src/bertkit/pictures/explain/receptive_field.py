"""Receptive fields: a convolution needs ceil((n-1)/(k-1)) layers to connect two tokens, self-attention one.

A kernel of k tokens lets each layer reach k - 1 tokens further, so after L layers an output depends on a window
of L(k-1) + 1 inputs, and the first and last of n tokens meet in one output once L(k-1) + 1 >= n. One attention
layer mixes every token into every output. Both claims are checked by gradients: d output_i / d input_j is exactly
zero outside the receptive field, so its non-zero pattern is the field itself.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from torch import nn

from bertkit.errors import InputError
from bertkit.pictures.explain.base import Explanation, PictureWriter, one_thread, table

CLAIM = "a kernel-k convolution needs ceil((n-1)/(k-1)) layers to connect tokens n apart; one attention layer does it"
CHANNELS = 4


def layers_needed(n: int, k: int) -> int:
    """Convolution layers of kernel k before the first and last of n tokens reach one output: ceil((n-1)/(k-1))."""
    if k < 2 or n < 1:
        raise InputError(f"need a kernel of at least 2 tokens and at least 1 token, got k={k}, n={n}")
    return math.ceil((n - 1) / (k - 1))


def dependence(layers: nn.Module, tokens: int, seed: int) -> list[np.ndarray]:
    """After each layer of `layers` (each maps (B, C, T) to (B, C, T), one sequence at a time): the (T, T) mask
    d output_i / d input_j != 0."""
    x = torch.randn(1, CHANNELS, tokens, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    x = x.expand(tokens, -1, -1).clone().requires_grad_()  # copy i of the sentence answers for output i
    rows = torch.arange(tokens)
    masks, h = [], x
    for layer in layers:
        h = torch.tanh(layer(h))                            # a non-linearity that never zeroes a gradient
        (grad,) = torch.autograd.grad(h[rows, :, rows].sum(), x, retain_graph=True)   # (T copies, C, T inputs)
        masks.append((grad.abs().sum(1) > 0).numpy())
    return masks


def same_length_conv(k: int) -> nn.Module:
    """A kernel-k convolution that keeps the length: zeros padded (k-1)//2 before and k//2 after the tokens."""
    return nn.Sequential(nn.ConstantPad1d(((k - 1) // 2, k // 2), 0.0),
                         nn.Conv1d(CHANNELS, CHANNELS, k, dtype=torch.float64))


class SelfAttention(nn.Module):
    """One head of scaled dot-product attention over the token axis of a (1, C, T) input."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(channels, 3 * channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x.transpose(1, 2)).chunk(3, dim=-1)                     # (1, T, C) each
        weights = torch.softmax(q @ k.transpose(1, 2) / q.size(-1) ** 0.5, dim=-1)
        return (weights @ v).transpose(1, 2)


def connected(mask: np.ndarray, first: int, last: int) -> bool:
    """Whether some output depends on both input `first` and input `last`."""
    return bool((mask[:, first] & mask[:, last]).any())


def measured_layers(masks: list[np.ndarray], n: int) -> int | None:
    """The fewest layers after which two tokens n apart (in the middle of the sequence) share an output."""
    first = (len(masks[0]) - n) // 2
    return next((depth for depth, mask in enumerate(masks, 1) if connected(mask, first, first + n - 1)), None)


def explain(out: str | os.PathLike | None = None, fmt: str = "png", kernels: tuple[int, ...] = (3, 5, 7),
            tokens: int = 33, seed: int = 0) -> Explanation:
    """For each kernel, stack enough convolutions to span `tokens` and find where gradients are non-zero."""
    if not kernels or min(kernels) < 2:
        raise InputError(f"kernels must be sizes of at least 2 tokens, got {kernels}")
    if not 2 <= tokens <= 129:
        raise InputError(f"tokens must be 2..129, got {tokens}")
    torch.manual_seed(seed)
    conv_masks = {}
    with one_thread():
        for k in kernels:
            depth = layers_needed(tokens, k) + 1           # one more than needed: the last shows nothing is left
            stack = nn.ModuleList(same_length_conv(k) for _ in range(depth))
            conv_masks[k] = dependence(stack, tokens, seed)
        attention_mask = dependence(nn.ModuleList([SelfAttention(CHANNELS).double()]), tokens, seed)[0]

    distances = range(2, tokens + 1)
    formula = {k: {n: layers_needed(n, k) for n in distances} for k in kernels}
    measured = {k: {n: measured_layers(conv_masks[k], n) or 0 for n in distances} for k in kernels}
    centre = tokens // 2
    numbers = {
        "tokens": tokens,
        "formula": formula,
        "measured": measured,
        "agree": all(formula[k][n] == measured[k][n] for k in kernels for n in distances),
        # the width of output `centre`'s receptive field after each layer: L(k-1) + 1 until the edges cut it
        "field_width": {k: [int(mask[centre].sum()) for mask in masks] for k, masks in conv_masks.items()},
        "attention_field_width": int(attention_mask[centre].sum()),
        "attention_all_connected": bool(attention_mask.all()),
    }
    shown = [n for n in (2, 3, 5, 9, 17, 33, 65, 129) if n <= tokens]
    rows = [(n, *(f"{formula[k][n]} / {measured[k][n]}" for k in kernels), 1 if attention_mask.all() else "-")
            for n in shown]
    text = "\n".join([
        f"layers to connect the first and last of n tokens: ceil((n-1)/(k-1)) / measured by gradients "
        f"({tokens} tokens, {CHANNELS} channels, seed {seed}):",
        table(["n", *(f"conv k={k}" for k in kernels), "attention"], rows),
        f"formula and gradients agree for every n = 2..{tokens} and every k: {numbers['agree']}",
        "",
        f"width of output {centre}'s receptive field after each conv layer (L(k-1) + 1, cut at the edges):",
        *(f"  k={k}: {' '.join(map(str, widths))}" for k, widths in numbers["field_width"].items()),
        f"one attention layer: {numbers['attention_field_width']} of {tokens} inputs for output {centre}; "
        f"every output depends on every input: {numbers['attention_all_connected']}",
    ])

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        k = kernels[0]
        depths = [d for d in (1, 2, 4, 8) if d <= len(conv_masks[k])]
        panels = {f"conv k={k}, {d} layer{'s' * (d > 1)}": conv_masks[k][d - 1] for d in depths}
        panels["attention, 1 layer"] = attention_mask
        pictures.save("receptive_field_masks", lambda: _masks_figure(panels))
        pictures.save("receptive_field_layers", lambda: figures.line_plot(
            list(distances), {f"conv k={k}": [measured[k][n] for n in distances] for k in kernels},
            xlabel="n: tokens from the first to the last (inclusive)", ylabel="layers needed",
            reference={"self-attention: 1 layer": 1.0},
            title="Layers before two tokens n apart meet in one output"))
    return Explanation("receptive-field", CLAIM, numbers, text, pictures.paths)


def _masks_figure(panels: dict[str, np.ndarray]):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2.6 * len(panels), 3.0), layout="constrained")
    for ax, (title, mask) in zip(fig.subplots(1, len(panels)), panels.items()):
        ax.imshow(mask, cmap="Blues", vmin=0, vmax=1.3, interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("input j", fontsize=8)
        ax.set_ylabel("output i", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle("where d output_i / d input_j is not zero: the receptive field", fontsize=10)
    return fig
