"""What different heads attend to: each head's distance profile over a few real sentences.

For every head the weight of each (non-special) token is sorted into buckets: [CLS], [SEP], or the key's offset
from the query (… -2, -1 previous, 0 self, +1 next, +2 …). Averaged over tokens and sentences, the profile shows
each head's habit: some look at the previous or next token, some at [SEP] or [CLS], some spread widely.
"""

from __future__ import annotations

import os

import numpy as np

from bertkit.pictures.attention_view import sentence_attentions
from bertkit.pictures.explain import real_model
from bertkit.pictures.explain.base import Explanation, PictureWriter, table

CLAIM = "different heads learn different habits: previous token, next token, self, [CLS]/[SEP], or broad context"
SENTENCES = (
    "北京是中国的首都，也是一座历史悠久的城市。",
    "我今天很开心，因为天气很好。",
    "这家餐厅的菜很好吃，但是价格有点贵。",
    "科学家们发现了一种新的治疗方法。",
    "他每天早上跑步，然后去公司上班。",
)
BUCKETS = ("[CLS]", "≤-3", "-2", "-1", "0", "+1", "+2", "≥+3", "[SEP]")
HABITS = {"[CLS]": "[CLS]", "≤-3": "earlier tokens", "-2": "two back", "-1": "previous token", "0": "self",
          "+1": "next token", "+2": "two ahead", "≥+3": "later tokens", "[SEP]": "[SEP]"}
HABIT_THRESHOLD = 0.4   # a head "has a habit" when at least this share of its weight goes to one bucket


def distance_profile(attentions: np.ndarray, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(L, H, buckets) share of each head's weight per bucket, and (L, H) mean |offset| to content tokens."""
    T = len(tokens)
    special = np.array([t in real_model.SPECIAL_TOKENS for t in tokens])
    queries = ~special
    offset = np.arange(T)[None, :] - np.arange(T)[:, None]                    # (T, T): key - query
    bucket = np.clip(offset, -3, 3) + 4                                       # 1..7 for ≤-3 .. ≥+3
    bucket[:, np.array(tokens) == "[CLS]"] = 0
    bucket[:, np.array(tokens) == "[SEP]"] = len(BUCKETS) - 1
    bucket[:, np.array(tokens) == "[PAD]"] = -1
    profile = np.zeros(attentions.shape[:2] + (len(BUCKETS),))
    for b in range(len(BUCKETS)):
        profile[..., b] = (attentions[..., queries, :] * (bucket[queries] == b)).sum(-1).mean(-1)
    content = attentions[..., queries, :][..., ~special]                      # (L, H, Q, K) content keys only
    distance = np.abs(offset[queries][:, ~special])
    mean_distance = (content * distance).sum((-1, -2)) / content.sum((-1, -2))
    return profile, mean_distance


def explain(out: str | os.PathLike | None = None, fmt: str = "png", model_dir: str | os.PathLike | None = None,
            sentences: tuple[str, ...] = SENTENCES, device: str | None = None) -> Explanation:
    """Average every head's distance profile over `sentences` and name each head's habit."""
    model, tokenizer = real_model.load(model_dir, device)
    profiles, distances = [], []
    for text in sentences:
        s = sentence_attentions(model, tokenizer, text)
        profile, distance = distance_profile(s.attentions, s.tokens)
        profiles.append(profile)
        distances.append(distance)
    profile, distance = np.mean(profiles, 0), np.mean(distances, 0)          # (L, H, buckets), (L, H)
    L, H, _ = profile.shape
    heads, rows = [], []
    for layer in range(L):
        for head in range(H):
            best = int(profile[layer, head].argmax())
            share = float(profile[layer, head, best])
            habit = HABITS[BUCKETS[best]] if share >= HABIT_THRESHOLD else "broad"
            heads.append({"layer": layer, "head": head, "habit": habit, "share": share,
                          "mean_distance": float(distance[layer, head]),
                          "profile": dict(zip(BUCKETS, profile[layer, head].round(4).tolist()))})
            rows.append((f"{layer}.{head}", habit, share, float(distance[layer, head]),
                         *profile[layer, head].tolist()))
    counts = {habit: sum(h["habit"] == habit for h in heads) for habit in (*HABITS.values(), "broad")}
    numbers = {"heads": heads, "habit_counts": counts, "profile": profile.tolist(), "mean_distance": distance.tolist(),
               "sentences": len(sentences)}
    text = "\n".join([
        f"{len(sentences)} sentences; share of each head's weight by key position relative to the query token",
        f"(content tokens as queries), its largest bucket if ≥ {HABIT_THRESHOLD} (else 'broad'), "
        "and its mean distance to content keys:",
        table(["head", "habit", "share", "mean dist", *BUCKETS], rows, 2, sci=False),
        "",
        "heads per habit: " + ", ".join(f"{habit} {n}" for habit, n in counts.items() if n),
    ])

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        labels = [f"L{h['layer']} H{h['head']} {h['habit']}" for h in heads]
        pictures.save("multihead_profile", lambda: figures.matrix_plot(
            profile.reshape(L * H, -1), labels, BUCKETS, xlabel="key relative to the query token",
            ylabel="layer, head, habit", title="Where each head looks (share of attention weight)", cmap="Blues"))
        pictures.save("multihead_distance", lambda: figures.bar_plot(
            [f"L{layer}" for layer in range(L)],
            {f"head {head}": distance[:, head].tolist() for head in range(H)},
            ylabel="mean |query - key| (content tokens)", title="How far each head looks, by layer"))
    return Explanation("multihead", CLAIM, numbers, text, pictures.paths)
