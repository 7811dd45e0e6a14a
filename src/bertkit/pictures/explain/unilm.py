"""One BERT, three masks: the same weights fill blanks, write left to right, or read a source and write a target.

A BERT's layers do not know whether they read or write: the attention mask decides what each token may see.
Bidirectional (BERT's masked LM): every token sees every token, so a blank is filled from both sides. Causal
(GPT): a token sees only those before it, so the next token can be predicted from what is written. UniLM's
sequence-to-sequence mask: `[CLS] source [SEP]` is read bidirectionally, and each target token sees the source and
the target up to itself. Writing needs exactly this: the vector from which target token t+1 is predicted must not
depend on tokens not written yet.

The experiment runs one small random BERT (the same weights) under each mask on `[CLS] 今 天 下 雨 [SEP] 带 伞 [SEP]`
and measures how much the vector of the first target token moves when (a) a later target token changes, (b) a
source token changes, and how much a source token's vector moves when (c) the target changes, (d) a later source
token changes.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.models.functional import unilm_mask
from bertkit.pictures.explain.base import Explanation, PictureWriter, table

CLAIM = "one BERT reads both ways, writes left to right, or reads a source and writes a target: only the mask changes"
SOURCE, TARGET = ("今", "天", "下", "雨"), ("带", "伞")
TOKENS = ("[CLS]", *SOURCE, "[SEP]", *TARGET, "[SEP]")
MASKS = {"bidirectional": "BERT: fills blanks", "causal": "GPT: writes", "unilm": "UniLM: reads, then writes"}


def masks(segments: torch.Tensor) -> dict[str, torch.Tensor]:
    """The three (1, T, T) masks of a sequence whose segment ids are `segments` (1, T)."""
    T = segments.size(1)
    return {"bidirectional": torch.ones(1, T, T, dtype=torch.bool),
            "causal": torch.ones(T, T, dtype=torch.bool).tril()[None],
            "unilm": unilm_mask(segments)}


def _tiny_bert(seed: int) -> BertModel:
    config = BertConfig(vocab_size=len(TOKENS) + 8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, initializer_range=0.5)  # wide weights: peaked attention
    torch.manual_seed(seed)
    return BertModel(config).eval()


def explain(out: str | os.PathLike | None = None, fmt: str = "png", seed: int = 0) -> Explanation:
    """Run the same BERT under each mask and measure who can see whom."""
    model = _tiny_bert(seed)
    ids = torch.arange(1, len(TOKENS) + 1)[None]                        # one id per position; [SEP]s differ: fine
    segments = torch.tensor([[0] * (len(SOURCE) + 2) + [1] * (len(TARGET) + 1)])
    first_target, source_token = len(SOURCE) + 2, 2                      # 带, and 天
    later_target = ids.clone()
    later_target[0, first_target + 1] = len(TOKENS) + 3                  # 伞 -> another token
    other_source = ids.clone()
    other_source[0, source_token] = len(TOKENS) + 5                      # 天 -> another token
    later_source = ids.clone()
    later_source[0, source_token + 2] = len(TOKENS) + 7                  # 雨 -> another token

    def moved(mask: torch.Tensor, changed: torch.Tensor, position: int) -> float:
        with torch.no_grad():
            before = model(ids, mask, segments).last_hidden_state[0, position]
            after = model(changed, mask, segments).last_hidden_state[0, position]
        return float((after - before).norm() / before.norm())

    rows, numbers = [], {}
    for name, mask in masks(segments).items():
        numbers[name] = {"target_by_later_target": moved(mask, later_target, first_target),
                         "target_by_source": moved(mask, other_source, first_target),
                         "source_by_target": moved(mask, later_target, source_token),
                         "source_by_later_source": moved(mask, later_source, source_token)}
        rows.append((name, *numbers[name].values()))
    text = "\n".join([
        f"sequence: {' '.join(TOKENS)}   (segment 0: [CLS] {' '.join(SOURCE)} [SEP]; segment 1: the target)",
        "relative change of a token's last-layer vector, one random 2-layer BERT, the same weights under each mask:",
        table(["mask", f"(a) {TARGET[0]} when {TARGET[1]} changes", f"(b) {TARGET[0]} when {SOURCE[1]} changes",
               f"(c) {SOURCE[1]} when {TARGET[1]} changes", f"(d) {SOURCE[1]} when {SOURCE[3]} changes"], rows, 3),
        "",
        f"(a) Writing needs 0: {TARGET[1]} is predicted from the vector at {TARGET[0]}, before {TARGET[1]} is "
        "written. Bidirectional",
        "    attention fails it (a blank filled from both sides); the causal and UniLM masks pass it.",
        "(b) Conditioning needs more than 0: the target reads the source. All three pass.",
        "(c) UniLM and GPT keep the source blind to the target.",
        f"(d) GPT also keeps {SOURCE[1]} blind to the source after it; UniLM reads the source both ways, as BERT was",
        "    pretrained to read. So a pretrained BERT, its weights as they are, is fine-tuned to write:",
        "    `bertkit summarize-train` (UniLM is its default architecture).",
    ])

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        stacked = np.stack([m[0].float().numpy() for m in masks(segments).values()])[None]  # (1, 3, T, T)
        pictures.save("unilm_masks", lambda: figures.attention_grid(
            stacked, list(TOKENS), columns=3, titles=list(MASKS.values()),
            title="Who may see whom (dark: may attend), rows attend to columns"))
    return Explanation("unilm", CLAIM, numbers, text, pictures.paths)
