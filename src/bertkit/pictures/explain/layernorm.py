"""LayerNorm against BatchNorm on a padded batch: why Transformers normalise each token over its features.

BatchNorm averages each feature over the batch and the positions, so the padding (zero vectors) and the other
sentences enter every token's statistics: a sentence's output depends on what it was batched with. LayerNorm
normalises each token over its own hidden vector: the same sentence gives the same output in any batch.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from bertkit.pictures.explain.base import Explanation, PictureWriter, table

CLAIM = "LayerNorm normalises each token over its features, so padding and batch-mates cannot change its output"
HIDDEN = 16


def _padded_batch(lengths: list[int], generator: torch.Generator, feature_mean: torch.Tensor) -> torch.Tensor:
    """(B, T, C) token vectors with per-feature means (as real embeddings have), zero vectors on padding."""
    T = max(lengths)
    x = feature_mean + torch.randn(len(lengths), T, HIDDEN, generator=generator)
    keep = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]                # (B, T)
    return x * keep[..., None], keep


def _batchnorm(x: torch.Tensor) -> torch.Tensor:
    bn = nn.BatchNorm1d(HIDDEN, affine=False).train()                               # batch statistics
    return bn(x.reshape(-1, HIDDEN)).reshape(x.shape)


def explain(out: str | os.PathLike | None = None, fmt: str = "png", seed: int = 0) -> Explanation:
    """Normalise one sentence inside two different padded batches with BatchNorm and with LayerNorm."""
    g = torch.Generator().manual_seed(seed)
    feature_mean = 2.0 * torch.randn(HIDDEN, generator=g)
    sentence = feature_mean + torch.randn(6, HIDDEN, generator=g)                   # the sentence we follow
    batch_a, keep_a = _padded_batch([6, 3, 2, 5], g, feature_mean)
    batch_b, keep_b = _padded_batch([6, 12, 9, 4], g, feature_mean)
    batch_a[0, :6], batch_b[0, :6] = sentence, sentence
    layernorm = nn.LayerNorm(HIDDEN, elementwise_affine=False)

    real_a = batch_a[keep_a]                                                        # (tokens, C)
    stats = {
        "padding_fraction_a": float(1 - keep_a.float().mean()),
        "padding_fraction_b": float(1 - keep_b.float().mean()),
        # the mean BatchNorm subtracts (over every position) against the mean of the real tokens
        "bn_mean_shift_by_padding": float((batch_a.reshape(-1, HIDDEN).mean(0) - real_a.mean(0)).abs().mean()),
    }
    rows = []
    for name, norm in (("BatchNorm", _batchnorm), ("LayerNorm", layernorm)):
        with torch.no_grad():
            out_a, out_b = norm(batch_a), norm(batch_b)
        real = out_a[keep_a]
        key = "bn" if name == "BatchNorm" else "ln"
        stats[f"{key}_sentence_change"] = float((out_a[0, :6] - out_b[0, :6]).abs().max())
        stats[f"{key}_token_mean"] = float(real.mean(-1).abs().max())              # per token, over features
        stats[f"{key}_token_std_error"] = float((real.std(-1, unbiased=False) - 1).abs().max())
        stats[f"{key}_feature_mean_real"] = float(real.mean(0).abs().mean())       # per feature, real tokens only
        rows.append((name, stats[f"{key}_sentence_change"], stats[f"{key}_token_mean"],
                     stats[f"{key}_token_std_error"]))

    text = "\n".join([
        f"one 6-token sentence in batch A (lengths 6,3,2,5: {stats['padding_fraction_a']:.0%} padding) and in "
        f"batch B (lengths 6,12,9,4: {stats['padding_fraction_b']:.0%} padding), hidden {HIDDEN}:",
        table(["", "sentence output A vs B (max diff)", "max |token mean|", "max |token std - 1|"], rows, 3),
        "",
        f"BatchNorm's per-feature mean counts the padding: it is off the real tokens' mean by "
        f"{stats['bn_mean_shift_by_padding']:.3f} on average,",
        f"so after it the real tokens' features are not centred (mean |feature mean| "
        f"{stats['bn_feature_mean_real']:.3f}, not 0) and a",
        "sentence's output depends on its batch-mates. LayerNorm centres and scales each token on its own:",
        "the same output in any batch, at any length, and at inference one sentence at a time.",
    ])

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        with torch.no_grad():
            bn_a, bn_b = _batchnorm(batch_a)[0, :6], _batchnorm(batch_b)[0, :6]
            ln_a, ln_b = layernorm(batch_a)[0, :6], layernorm(batch_b)[0, :6]
        features = [str(f) for f in range(HIDDEN)]
        pictures.save("layernorm_vs_batchnorm", lambda: figures.bar_plot(
            features, {"BatchNorm, batch A": bn_a[0].tolist(), "BatchNorm, batch B": bn_b[0].tolist(),
                       "LayerNorm, batch A": ln_a[0].tolist(), "LayerNorm, batch B": ln_b[0].tolist()},
            ylabel="normalised value",
            title="The first token's normalised features, same sentence in two batches"))
    return Explanation("layernorm", CLAIM, stats, text, pictures.paths)
