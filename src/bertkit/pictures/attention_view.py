"""The attention of a sentence: computed by a model, and shown in one self-contained HTML page.

The page (template `assets/attention.html`) has layer and head pickers, a head view in the manner of
bertviz (hover a token to see its attention lines) and the attention matrix. Its data is inlined as JSON and
its content-security policy forbids any network request, so the file can be mailed or opened offline.
A page holds one or more kinds of attention (`AttentionMap`s: a BERT's self-attention, a GPT's causal
self-attention, a translation Transformer's encoder, decoder and cross-attention), each with its own query
and key tokens; with several, the page has a picker for the kind too.

Dimension letters: L layers, H heads, T query tokens, S key tokens.
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
# kind -> how the viewer's picker and the pictures name it
KINDS = {"self": "self-attention",
         "causal": "masked (causal) self-attention",
         "encoder": "encoder self-attention (source × source)",
         "decoder": "decoder masked self-attention (target × target)",
         "cross": "cross-attention (target × source)",
         "alignment": "alignment (translation × source)",
         "unilm": "UniLM self-attention (source × source, target × source and its past)"}


class _Layered:
    """Weights of every layer and head, `attentions` (L, H, ...): how many of each there are."""

    attentions: np.ndarray

    @property
    def num_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def num_heads(self) -> int:
        return self.attentions.shape[1]


@dataclass
class AttentionMap(_Layered):
    """One kind of attention over one input: every layer's and head's weights from query to key tokens."""

    kind: str                       # a key of KINDS
    query_tokens: list[str]         # rows
    key_tokens: list[str]           # columns
    attentions: np.ndarray          # (L, H, T, S); row t sums to 1
    query_token_types: list[int] | None = None  # segments (0/1) of a BERT pair: the viewer colours segment B
    key_token_types: list[int] | None = None

    @property
    def label(self) -> str:
        return KINDS[self.kind]


@dataclass
class SentenceAttention(_Layered):
    """One sentence (or pair) through a model: its tokens and every layer's and head's self-attention weights."""

    tokens: list[str]
    token_type_ids: list[int]
    attentions: np.ndarray          # (L, H, T, T); row t sums to 1
    text: str
    text_pair: str | None = None
    kind: str = "self"              # "causal" for a GPT: token t sees tokens 0..t only

    @property
    def maps(self) -> list[AttentionMap]:
        """What the viewer shows: the one self-attention, tokens on both sides."""
        return [AttentionMap(self.kind, list(self.tokens), list(self.tokens), self.attentions,
                             list(self.token_type_ids), list(self.token_type_ids))]


def load_model_and_tokenizer(model_dir: str | os.PathLike):
    """The encoder of a text model directory (eval mode), as its family's registry entry names it (a BERT's
    BertModel, a ModernBERT's ModernBertModel), and its tokenizer (WordPiece or byte-level BPE, as its files hold)."""
    from bertkit.data.quality import check_tokenizer_fits
    from bertkit.models.registry import family_of
    from bertkit.tokenizer import load_tokenizer

    encoder = family_of(model_dir).head("encoder")
    model, tokenizer = encoder.from_pretrained(model_dir), load_tokenizer(model_dir)
    check_tokenizer_fits(len(tokenizer), model.config.vocab_size, str(model_dir))
    return model, tokenizer


def load_gpt_and_tokenizer(model_dir: str | os.PathLike):
    """A GPT-2 (eval mode, the class its config.json names) and its BertTokenizer from a `bertkit lm-train` run."""
    from bertkit.data.quality import check_tokenizer_fits
    from bertkit.models.registry import family_for
    from bertkit.tokenizer import BertTokenizer

    model, tokenizer = family_for("gpt2").load(model_dir), BertTokenizer.from_pretrained(model_dir)
    check_tokenizer_fits(len(tokenizer), model.config.vocab_size, str(model_dir))
    return model.eval(), tokenizer


def sentence_attentions(model, tokenizer, text: str, text_pair: str | None = None,
                        max_length: int | None = None) -> SentenceAttention:
    """Run `text` (and `text_pair`) through `model`, on the device it is on, and collect the attention weights of
    every layer and head."""
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
    device = next(model.parameters()).device
    on = lambda tensor: None if tensor is None else tensor.to(device)
    with torch.no_grad():
        out = model(on(input_ids), attention_mask=on(encoding.get("attention_mask")),
                    token_type_ids=on(token_type_ids), output_attentions=True)
    attentions = stack_layers(out.attentions)
    types = token_type_ids[0].tolist() if token_type_ids is not None else [0] * input_ids.size(1)
    return SentenceAttention(tokens=tokenizer.convert_ids_to_tokens(input_ids[0].tolist()), token_type_ids=types,
                             attentions=attentions, text=text, text_pair=text_pair)


def causal_attentions(model, tokenizer, text: str, max_length: int | None = None) -> SentenceAttention:
    """Run `text` through a GPT as `bertkit lm-train` reads a document ([CLS] first, no [SEP] yet) and collect its
    masked self-attention: token t attends to tokens 0..t, so every row's weights above the diagonal are 0."""
    import torch

    if is_blank(text):
        raise InputError("text is empty (it has no visible character): there is nothing to attend to")
    max_length = min(max_length or model.config.n_positions, model.config.n_positions)
    ids = [tokenizer.cls_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) > max_length:
        warnings.warn(f"the text has {len(ids)} tokens, more than max_length {max_length}: it is cut to "
                      f"{max_length} tokens, and the attention shown is that of the cut text", stacklevel=2)
        ids = ids[:max_length]
    with torch.no_grad():
        out = model(torch.tensor([ids], device=next(model.parameters()).device), output_attentions=True)
    return SentenceAttention(tokens=tokenizer.convert_ids_to_tokens(ids), token_type_ids=[0] * len(ids),
                             attentions=stack_layers(out.attentions), text=text, kind="causal")


def unilm_attentions(model, tokenizer, text: str, target: str, max_length: int | None = None) -> SentenceAttention:
    """Run `[CLS] text [SEP] target [SEP]` through a UniLM writer (`bertkit summarize-train`) and collect the
    attention of every layer and head under UniLM's mask: a source token attends to the source only, a target
    token to the source and the target up to itself. The source is cut to `max_length` tokens, the target to the
    positions left."""
    import torch

    from bertkit.models.functional import unilm_mask

    if is_blank(text):
        raise InputError("text is empty (it has no visible character): there is nothing to attend to")
    positions = model.config.max_position_embeddings
    source = tokenizer(text, truncation=True, max_length=min(max_length or positions // 2, positions - 2))["input_ids"]
    written = tokenizer(target, add_special_tokens=False)["input_ids"][: positions - len(source) - 1]
    written.append(tokenizer.sep_token_id)
    ids = torch.tensor([source + written], device=next(model.parameters()).device)
    segments = torch.tensor([[0] * len(source) + [1] * len(written)], device=ids.device)
    with torch.no_grad():
        out = model.bert(ids, unilm_mask(segments), segments, output_attentions=True)
    return SentenceAttention(tokens=tokenizer.convert_ids_to_tokens(ids[0].tolist()),
                             token_type_ids=segments[0].tolist(), attentions=stack_layers(out.attentions), text=text,
                             text_pair=target, kind="unilm")


def stack_layers(attentions) -> np.ndarray:
    """A model's per-layer attentions (each (1, H, T, S)) as one float array (L, H, T, S), checked to be finite."""
    import torch

    stacked = torch.stack([a[0] for a in attentions]).float().cpu().numpy()
    if not np.isfinite(stacked).all():
        raise DataError("the model's attention weights are not finite (NaN or infinite values): its weights or "
                        "activations overflowed, so there is nothing true to show")
    return stacked


def attention_html(sentence, title: str | None = None, digits: int | None = None) -> str:
    """The viewer page for `sentence` (a SentenceAttention, a TranslationAttention: anything with `maps`, `text`
    and `text_pair`), as one HTML string with the data inlined (weights to `digits` decimals)."""
    maps = sentence.maps
    kinds = []
    for one in maps:
        attn = np.asarray(one.attentions, dtype=np.float64)
        T, S = len(one.query_tokens), len(one.key_tokens)
        if attn.ndim != 4 or attn.shape[2:] != (T, S) or 0 in attn.shape:
            raise InputError(f"{one.kind} attentions must be (layers, heads, T, S) with T = {T} query and S = {S} "
                             f"key tokens, got shape {attn.shape}")
        kinds.append((one, attn))
    if not kinds:
        raise InputError("no attention to show: give at least one kind of attention")
    first = kinds[0][1]
    title = title or (f"Attention: {first.shape[0]} layers × {first.shape[1]} heads, {first.shape[2]} tokens"
                      if len(kinds) == 1 else f"Attention: {', '.join(one.label for one, _ in kinds)}")
    if digits is None:  # a big model on a long input has millions of weights; 3 decimals keep the file smaller
        digits = 4 if sum(attn.size for _, attn in kinds) <= 1_000_000 else 3
    ints = lambda values: None if values is None else [int(v) for v in values]
    data = {"title": title, "text": sentence.text, "text_pair": sentence.text_pair,
            "kinds": [{"name": one.kind, "label": one.label, "query_tokens": list(one.query_tokens),
                       "key_tokens": list(one.key_tokens), "query_types": ints(one.query_token_types),
                       "key_types": ints(one.key_token_types), "attentions": np.round(attn, digits).tolist()}
                      for one, attn in kinds]}
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # Inside <script>, "</" could close the element early; JSON allows these escapes, HTML then sees no tags.
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    payload = payload.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    template = resources.files("bertkit").joinpath(TEMPLATE).read_text(encoding="utf-8")
    return template.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload)


def write_attention_html(path: str | os.PathLike, sentence, title: str | None = None) -> Path:
    """Write the viewer page for `sentence` to `path` (folders created); returns the path."""
    return atomic_write_text(path, attention_html(sentence, title))
