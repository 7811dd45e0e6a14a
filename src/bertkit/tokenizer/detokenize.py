"""Decoded WordPiece text back to running text: what generated translations and continuations show people
and what BLEU scores."""

from __future__ import annotations

import re

from bertkit.tokenizer.bert import clean_up_tokenization

_SPACE_NEAR_WIDE = re.compile(r"\s+(?=[^\x00-\x7f])|(?<=[^\x00-\x7f])\s+")
_INNER_PUNCTUATION = re.compile(r"(?<=\w) ([-'’/]) (?=\w)")


def detokenize(text: str, lang: str) -> str:
    """WordPiece output ("he said , \" it ' s mine \" .") back to running text for people and for BLEU."""
    if lang in ("zh", "ja"):
        return _SPACE_NEAR_WIDE.sub("", text)
    text = _INNER_PUNCTUATION.sub(r"\1", clean_up_tokenization(text))
    text = re.sub(r" ([;:)\]}%])", r"\1", text)
    return re.sub(r"([(\[{$]) ", r"\1", text)
