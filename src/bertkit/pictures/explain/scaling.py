"""Why attention divides by √d_k: unscaled dot products grow with d_k and saturate the softmax.

For q, k with unit-variance entries, q·k has variance d_k. Without the scale the softmax over T keys sees
logits of spread √d_k: rows collapse onto one key (entropy → 0) and its gradient vanishes. Divided by √d_k the
logits keep unit variance and the row entropy stays the same at any d_k.
"""

from __future__ import annotations

import math
import os

import torch

from bertkit.models.functional import attention
from bertkit.pictures.explain.base import Explanation, PictureWriter, table

CLAIM = "without 1/√d_k the softmax saturates as d_k grows: attention rows collapse onto one key"


def _entropy(probs: torch.Tensor) -> torch.Tensor:
    return -(probs * probs.clamp_min(1e-30).log()).sum(-1)                   # nats, per row


def explain(out: str | os.PathLike | None = None, fmt: str = "png", dims: tuple[int, ...] = (4, 16, 64, 256, 1024),
            keys: int = 32, queries: int = 256, seed: int = 0) -> Explanation:
    """Mean attention-row entropy and largest weight, with and without the 1/√d_k scale, for growing d_k."""
    g = torch.Generator().manual_seed(seed)
    rows, numbers = [], {"log_keys": math.log(keys), "dims": list(dims)}
    for d_k in dims:
        q = torch.randn(1, 1, queries, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(1, 1, keys, d_k, generator=g, dtype=torch.float64)
        _, scaled = attention(q, k, k)                                        # the model's maths, with 1/√d_k
        unscaled = (q @ k.transpose(-2, -1)).softmax(-1)                      # the same without it
        # softmax Jacobian diag(p) - ppᵀ: its size is how much gradient flows back into the scores
        grad = {name: float((p * (1 - p)).sum(-1).mean()) for name, p in (("scaled", scaled), ("unscaled", unscaled))}
        row = {"entropy_scaled": float(_entropy(scaled).mean()), "entropy_unscaled": float(_entropy(unscaled).mean()),
               "max_weight_scaled": float(scaled.max(-1).values.mean()),
               "max_weight_unscaled": float(unscaled.max(-1).values.mean()),
               "score_std_unscaled": float((q @ k.transpose(-2, -1)).std()),
               "softmax_grad_scaled": grad["scaled"], "softmax_grad_unscaled": grad["unscaled"]}
        numbers[d_k] = row
        rows.append((d_k, row["score_std_unscaled"], row["entropy_scaled"], row["entropy_unscaled"],
                     row["max_weight_scaled"], row["max_weight_unscaled"], row["softmax_grad_unscaled"]))
    text = "\n".join([
        f"{queries} queries × {keys} keys, entries N(0, 1); entropy in nats "
        f"(uniform = log {keys} = {math.log(keys):.3f}):",
        table(["d_k", "std(q·k)", "entropy /√d_k", "entropy raw", "max weight /√d_k", "max weight raw",
               "Σ p(1-p) raw"], rows, 3),
        "",
        "Unscaled, the logits' spread grows as √d_k and each row puts nearly all its weight on one key, where",
        "the softmax's gradient p(1-p) is near 0. Scaled, the rows look the same at every d_k.",
    ])

    pictures = PictureWriter(out, fmt)
    pictures.plot("scaling_entropy", "line_plot", list(dims),
                  {"softmax(QKᵀ/√d_k)": [numbers[d]["entropy_scaled"] for d in dims],
                   "softmax(QKᵀ), no scaling": [numbers[d]["entropy_unscaled"] for d in dims]},
                  xlabel="d_k", ylabel="mean attention-row entropy (nats)", logx=True,
                  reference={f"uniform over {keys} keys": math.log(keys)}, title="Softmax saturation without 1/√d_k")
    return Explanation("scaling", CLAIM, numbers, text, pictures.paths)
