"""Residual connections let the gradient reach the first layer of a deep stack.

Two stacks share the same feed-forward blocks f (Linear → GELU → Linear): the plain one computes
x ← f(x), the residual one x ← x + f(x). The gradient of a fixed random read-out of the top reaches the
first block through a product of Jacobians; the identity path of x + f(x) keeps that product near 1.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from bertkit.pictures.explain.base import Explanation, PictureWriter, table

CLAIM = "with residual connections the gradient reaching the first layer does not vanish with depth"
FINDING = ("Each plain block shrinks the backward signal by a roughly constant factor, so it decays geometrically\n"
           "with depth; the residual stack's identity path carries it down unchanged.")


def _first_layer_grad_norm(blocks: nn.ModuleList, x: torch.Tensor, readout: torch.Tensor, residual: bool) -> float:
    blocks.zero_grad()
    h = x
    for block in blocks:
        h = h + block(h) if residual else block(h)
    (h * readout).sum().div(x.size(0)).backward()          # a read-out whose gradient is O(1) whatever h's size
    return float(blocks[0][0].weight.grad.norm())


def explain(out: str | os.PathLike | None = None, fmt: str = "png", depths: tuple[int, ...] = (1, 2, 4, 8, 12, 16, 24),
            hidden: int = 64, batch: int = 32, seed: int = 0) -> Explanation:
    """Gradient norm at the first block's weight for plain and residual stacks of growing depth."""
    rows, numbers = [], {}
    for depth in depths:
        torch.manual_seed(seed)                             # the same blocks for both stacks at each depth
        blocks = nn.ModuleList(nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
                               for _ in range(depth))
        x = torch.randn(batch, hidden)
        readout = torch.randn(batch, hidden)
        plain = _first_layer_grad_norm(blocks, x, readout, residual=False)
        res = _first_layer_grad_norm(blocks, x, readout, residual=True)
        numbers[depth] = {"plain": plain, "residual": res, "ratio": res / plain}
        rows.append((depth, plain, res, res / plain))
    header = (f"|∂loss/∂W| at the first block; blocks Linear({hidden},{4 * hidden}) → GELU → Linear, "
              "PyTorch's default init:")
    columns = ["depth", "plain x ← f(x)", "residual x ← x + f(x)", "residual / plain"]
    text = f"{header}\n{table(columns, rows, 3)}\n\n{FINDING}"

    pictures = PictureWriter(out, fmt)
    pictures.plot("residual_gradients", "line_plot", list(depths),
                  {"plain: x ← f(x)": [numbers[d]["plain"] for d in depths],
                   "residual: x ← x + f(x)": [numbers[d]["residual"] for d in depths]},
                  xlabel="depth (blocks)", ylabel="gradient norm at the first block", logy=True,
                  title="Gradient reaching the first layer")
    return Explanation("residual", CLAIM, numbers, text, pictures.paths)
