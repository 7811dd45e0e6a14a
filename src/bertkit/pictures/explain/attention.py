"""Attention maps of a real sentence in a real model (m3e-small), layer by layer and head by head.

Each map's row t is the softmax distribution of token t over all tokens. The numbers summarise each layer:
how spread the rows are (entropy) and how much weight goes to [CLS], [SEP], the token itself and its neighbours.
"""

from __future__ import annotations

import math
import os

import numpy as np

from bertkit.pictures.attention_view import SentenceAttention, sentence_attentions, write_attention_html
from bertkit.pictures.explain import real_model
from bertkit.pictures.explain.base import Explanation, PictureWriter, table

CLAIM = "each head of each layer spreads every token's attention differently over the sentence"
SENTENCE = "北京是中国的首都，也是一座历史悠久的城市。"


def layer_summary(sentence: SentenceAttention) -> list[dict[str, float]]:
    """Per layer, averaged over heads and query tokens: row entropy and the weight on [CLS], [SEP], self, ±1."""
    attn = sentence.attentions                                               # (L, H, T, T)
    T = attn.shape[-1]
    tokens = np.array(sentence.tokens)
    eye = np.eye(T, dtype=bool)
    summary = []
    for layer in attn:
        entropy = -(layer * np.log(np.clip(layer, 1e-30, None))).sum(-1)     # (H, T)
        summary.append({
            "entropy": float(entropy.mean()),
            "to_cls": float(layer[..., tokens == "[CLS]"].sum(-1).mean()),
            "to_sep": float(layer[..., tokens == "[SEP]"].sum(-1).mean()),
            "to_self": float(layer[:, eye].mean()),
            # the diagonal just below (above) the main one: query t's weight on token t - 1 (t + 1)
            "to_previous": float(layer[:, np.eye(T, k=-1, dtype=bool)].mean()) if T > 1 else 0.0,
            "to_next": float(layer[:, np.eye(T, k=1, dtype=bool)].mean()) if T > 1 else 0.0,
            "row_sum_error": float(np.abs(layer.sum(-1) - 1).max()),
        })
    return summary


def explain(out: str | os.PathLike | None = None, fmt: str = "png", model_dir: str | os.PathLike | None = None,
            text: str = SENTENCE, text_pair: str | None = None, device: str | None = None) -> Explanation:
    """Run `text` through the model, summarise each layer's attention, draw every head, write the HTML viewer."""
    model, tokenizer = real_model.load(model_dir, device)
    sentence = sentence_attentions(model, tokenizer, text, text_pair)
    L, H, T, _ = sentence.attentions.shape
    summary = layer_summary(sentence)
    numbers = {"tokens": sentence.tokens, "layers": summary, "shape": [L, H, T, T]}
    rows = [(layer, s["entropy"], s["to_cls"], s["to_sep"], s["to_self"], s["to_previous"], s["to_next"])
            for layer, s in enumerate(summary)]
    text_out = "\n".join([
        f"{' '.join(sentence.tokens)}",
        f"{L} layers × {H} heads, {T} tokens; mean over heads and tokens "
        f"(uniform entropy = log {T} = {math.log(T):.3f}):",
        table(["layer", "entropy", "→ [CLS]", "→ [SEP]", "→ self", "→ previous", "→ next"], rows, 3),
    ])

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        for layer in range(L):
            pictures.save(f"attention_layer{layer}", lambda layer=layer: figures.attention_grid(
                sentence.attentions, sentence.tokens, layers=[layer],
                title=f"layer {layer}, every head: {text}"))
        pictures.save("attention_mean_per_layer", lambda: figures.attention_grid(
            sentence.attentions.mean(1, keepdims=True).transpose(1, 0, 2, 3), sentence.tokens, layers=[0],
            titles=[f"layer {layer} · mean of heads" for layer in range(L)], title=text))
        pictures.paths.append(write_attention_html(pictures.out / "attention.html", sentence))
    return Explanation("attention", CLAIM, numbers, text_out, pictures.paths)
