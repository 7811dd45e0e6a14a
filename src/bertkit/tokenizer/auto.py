"""One loader for a model directory's tokenizer, whichever kind its files hold.

    tokenizer = load_tokenizer("runs/ft/best")     # a BertTokenizer or a BPETokenizer

A tokenizer.json whose model is BPE (ModernBERT's own checkpoints') gives a `BPETokenizer`; a vocab.txt or a
WordPiece tokenizer.json gives a `BertTokenizer`, as before. Both answer the same calls (`base.BaseTokenizer`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.tokenizer.bert import BertTokenizer
from bertkit.tokenizer.bpe import BPETokenizer
from bertkit.tokenizer.bpe_files import is_bpe


def load_tokenizer(path: str | Path, backend: str = "auto", **overrides: Any) -> BertTokenizer | BPETokenizer:
    """The tokenizer in `path` (a directory, or its tokenizer.json or vocab.txt): byte-level BPE where its
    tokenizer.json holds a BPE model, WordPiece otherwise (a tokenizer.json of another kind is refused, naming it)."""
    kind = BPETokenizer if is_bpe(path) else BertTokenizer
    return kind.from_pretrained(path, backend=backend, **overrides)
