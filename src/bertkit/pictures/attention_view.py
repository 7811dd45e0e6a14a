"""The attention of a sentence: computed by a model, and shown in one self-contained HTML page.

The page (template `assets/attention.html`) has layer and head pickers, a head view in the manner of
bertviz (hover a token to see its attention lines) and the attention matrix. Its data is inlined as JSON and
its content-security policy forbids any network request, so the file can be mailed or opened offline.

Dimension letters: L layers, H heads, T tokens.
"""

from __future__ import annotations

import html
import json
import os
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from bertkit.errors import DataError, InputError
from bertkit.utils.atomic import atomic_write_text
from bertkit.utils.visible import is_blank

TEMPLATE = "assets/attention.html"


@dataclass
class SentenceAttention:
    """One sentence (or pair) through a model: its tokens and every layer's and head's attention weights."""

    tokens: list[str]
    token_type_ids: list[int]
    attentions: np.ndarray          # (L, H, T, T); row t sums to 1
    text: str
    text_pair: str | None = None

    @property
    def num_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def num_heads(self) -> int:
        return self.attentions.shape[1]


def load_model_and_tokenizer(model_dir: str | os.PathLike):
    """A BertModel (eval mode) and its BertTokenizer from one Hugging Face model directory."""
    from bertkit.data.quality import check_tokenizer_fits
    from bertkit.models.bert.modeling import BertModel
    from bertkit.tokenizer import BertTokenizer

    model, tokenizer = BertModel.from_pretrained(model_dir), BertTokenizer.from_pretrained(model_dir)
    check_tokenizer_fits(len(tokenizer), model.config.vocab_size, str(model_dir))
    return model, tokenizer


def sentence_attentions(model, tokenizer, text: str, text_pair: str | None = None,
                        max_length: int | None = None) -> SentenceAttention:
    """Run `text` (and `text_pair`) through `model` and collect the attention weights of every layer and head."""
    import torch

    if is_blank(text):
        raise InputError("text is empty (it has no visible character): there is nothing to attend to")
    max_length = max_length or model.config.max_position_embeddings
    encoding = tokenizer(text, text_pair=text_pair, truncation=True, max_length=max_length, return_tensors="pt")
    length = len(tokenizer(text, text_pair=text_pair, verbose=False)["input_ids"])
    if length > max_length:
        warnings.warn(f"the text has {length} tokens, more than max_length {max_length}: it is cut to {max_length} "
                      f"tokens, and the attention shown is that of the cut text", stacklevel=2)
    input_ids = encoding["input_ids"]
    token_type_ids = encoding.get("token_type_ids")
    with torch.no_grad():
        out = model(input_ids, attention_mask=encoding.get("attention_mask"), token_type_ids=token_type_ids,
                    output_attentions=True)
    attentions = torch.stack([a[0] for a in out.attentions]).float().numpy()    # (L, H, T, T)
    if not np.isfinite(attentions).all():
        raise DataError("the model's attention weights are not finite (NaN or infinite values): its weights or "
                        "activations overflowed, so there is nothing true to show")
    types = token_type_ids[0].tolist() if token_type_ids is not None else [0] * input_ids.size(1)
    return SentenceAttention(tokens=tokenizer.convert_ids_to_tokens(input_ids[0].tolist()), token_type_ids=types,
                             attentions=attentions, text=text, text_pair=text_pair)


def attention_html(sentence: SentenceAttention, title: str | None = None, digits: int | None = None) -> str:
    """The viewer page for `sentence`, as one HTML string with the data inlined (weights to `digits` decimals)."""
    attn = np.asarray(sentence.attentions, dtype=np.float64)
    L, H, T, _ = attn.shape if attn.ndim == 4 else (0, 0, 0, 0)
    if attn.ndim != 4 or attn.shape[-1] != T or T != len(sentence.tokens) or L == 0 or H == 0:
        raise InputError(f"attentions must be (layers, heads, T, T) with T = {len(sentence.tokens)} tokens, "
                         f"got shape {attn.shape}")
    title = title or f"Attention: {L} layers × {H} heads, {T} tokens"
    if digits is None:  # a big model on a long input has millions of weights; 3 decimals keep the file smaller
        digits = 4 if attn.size <= 1_000_000 else 3
    data = {"title": title, "text": sentence.text, "text_pair": sentence.text_pair, "tokens": list(sentence.tokens),
            "token_type_ids": [int(t) for t in sentence.token_type_ids], "attentions": np.round(attn, digits).tolist()}
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # Inside <script>, "</" could close the element early; JSON allows these escapes, HTML then sees no tags.
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    payload = payload.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    template = resources.files("bertkit").joinpath(TEMPLATE).read_text(encoding="utf-8")
    return template.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload)


def write_attention_html(path: str | os.PathLike, sentence: SentenceAttention, title: str | None = None) -> Path:
    """Write the viewer page for `sentence` to `path` (folders created); returns the path."""
    return atomic_write_text(path, attention_html(sentence, title))
