"""BertTokenizer: BERT's WordPiece tokenizer with Hugging Face transformers' API and exact output.

    tok = BertTokenizer.from_pretrained("model_dir")          # vocab.txt or tokenizer.json
    enc = tok(["今天天气很好", "a pair"], ["", "of texts"], padding=True, truncation=True, max_length=16,
              return_offsets_mapping=True, return_tensors="pt")
    tok.decode(enc["input_ids"][0], skip_special_tokens=True)

The ids, token types, attention masks and offsets are those of transformers' default (Rust-backed)
BertTokenizer for the same files and arguments. Text becomes ids in a backend, `basic`
(pure Python) or `fast` (Hugging Face `tokenizers`, used by "auto" when installed); rows,
truncation and padding are built in `encoding`, the call in `base`; this module holds the files,
the vocabulary and the decoding.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.errors import InputError
from bertkit.tokenizer import unicode_tables as uni
from bertkit.tokenizer.base import VERY_LARGE_INTEGER, BaseTokenizer, BatchEncoding, _to_list, choose_backend
from bertkit.tokenizer.basic import PythonBackend
from bertkit.tokenizer.files import (
    check_vocab_ids,
    load_vocab,
    read_tokenizer_files,
    write_tokenizer_files,
)

__all__ = ["BatchEncoding", "BertTokenizer", "clean_up_tokenization"]

# the white space that separates words whatever clean_text says (`word_boundary`)
_SEPARATORS = "".join(chr(code) for first, last in uni.WHITESPACE for code in range(first, last + 1)
                      if not uni.contains(uni.CONTROL, chr(code)))


class BertTokenizer(BaseTokenizer):
    """BERT tokenizer: basic split + WordPiece, pairs, padding, truncation, offsets, decoding."""

    def __init__(self, vocab: dict[str, int] | str | Path, *, do_lower_case: bool = True,
                 strip_accents: bool | None = None, tokenize_chinese_chars: bool = True, clean_text: bool = True,
                 unk_token: str = "[UNK]", sep_token: str = "[SEP]", pad_token: str | None = "[PAD]",
                 cls_token: str = "[CLS]", mask_token: str | None = "[MASK]",
                 additional_special_tokens: Sequence[str] = (), model_max_length: int = VERY_LARGE_INTEGER,
                 padding_side: str = "right", truncation_side: str = "right",
                 clean_up_tokenization_spaces: bool = False, max_input_chars_per_word: int = 100,
                 backend: str = "auto"):
        self.vocab = dict(load_vocab(vocab) if isinstance(vocab, (str, Path)) else vocab)
        check_vocab_ids(self.vocab)
        for name, token in (("unk_token", unk_token), ("cls_token", cls_token), ("sep_token", sep_token)):
            if token not in self.vocab:
                raise InputError(f"the vocabulary has no {token!r} ({name}); a BERT vocabulary needs its "
                                 f"unknown, [CLS] and [SEP] tokens")
        self.do_lower_case, self.strip_accents = do_lower_case, strip_accents
        self.tokenize_chinese_chars, self.clean_text = tokenize_chinese_chars, clean_text
        self.unk_token, self.sep_token, self.pad_token = unk_token, sep_token, pad_token
        self.cls_token, self.mask_token = cls_token, mask_token
        self.additional_special_tokens = list(additional_special_tokens)
        self.model_max_length = model_max_length
        self.padding_side, self.truncation_side = padding_side, truncation_side
        self.clean_up_tokenization_spaces = clean_up_tokenization_spaces
        self.max_input_chars_per_word = max_input_chars_per_word
        # special tokens are never split; one missing from vocab.txt gets the next free id, as in tokenizers
        self.added_vocab: dict[str, int] = {}
        next_id = len(self.vocab)
        for token in self.all_special_tokens:
            if token not in self.vocab:
                self.added_vocab[token], next_id = next_id, next_id + 1
            else:
                self.added_vocab[token] = self.vocab[token]
        self.ids_to_tokens = {index: token for token, index in {**self.vocab, **self.added_vocab}.items()}
        self._warned_long = False
        self._backend = self._make_backend(backend)
        self._boundary = self._find_boundary()  # from the settings the backend was built with

    def word_boundary(self) -> re.Pattern | None:
        return self._boundary

    def _find_boundary(self) -> re.Pattern | None:
        """White space always ends a word (the characters both backends split at, with clean_text or without: not
        U+0085 or U+000B, which clean_text drops), and so does a CJK ideograph where each is a word
        (`tokenize_chinese_chars`). None when a special token holds one of them: a text cut inside it would not
        find it."""
        cjk = uni.char_class(uni.CJK) if self.tokenize_chinese_chars else ""
        boundary = re.compile(f"[{re.escape(_SEPARATORS)}{cjk}]")
        return None if any(boundary.search(token) for token in self.added_vocab) else boundary

    def _make_backend(self, backend: str):
        from bertkit.tokenizer import fast as tokenizer_fast

        backend = choose_backend(backend)
        kind = tokenizer_fast.FastBackend if backend == "fast" else PythonBackend
        vocab = {**self.vocab, **self.added_vocab}
        return kind(vocab, unk_token=self.unk_token, never_split=list(self.added_vocab),
                    lowercase=self.do_lower_case, strip_accents=self.strip_accents,
                    tokenize_chinese_chars=self.tokenize_chinese_chars, clean_text=self.clean_text,
                    max_input_chars_per_word=self.max_input_chars_per_word)

    # ---- files -----------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | Path, backend: str = "auto", **overrides: Any) -> BertTokenizer:
        """Load from a local directory with vocab.txt or tokenizer.json (+ tokenizer_config.json)."""
        vocab, settings = read_tokenizer_files(path)
        return cls(vocab, backend=backend, **{**settings, **overrides})

    def save_pretrained(self, path: str | Path) -> list[Path]:
        """Write vocab.txt, tokenizer_config.json and special_tokens_map.json (loadable by transformers)."""
        return write_tokenizer_files(self, path)

    # ---- vocabulary ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Size of the vocabulary with added tokens."""
        return len({**self.vocab, **self.added_vocab})

    def get_vocab(self) -> dict[str, int]:
        """{token: id} including added tokens."""
        return {**self.vocab, **self.added_vocab}

    def __repr__(self) -> str:
        return (f"BertTokenizer(vocab_size={self.vocab_size}, do_lower_case={self.do_lower_case}, "
                f"backend={self.backend!r}, model_max_length={self.model_max_length})")

    # ---- decoding --------------------------------------------------------------------------------

    def decode(self, token_ids: Any, skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool | None = None) -> str | list[str]:
        """Ids -> text: "##" pieces joined to their word, other tokens separated by spaces."""
        token_ids = _to_list(token_ids)
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if token_ids and isinstance(token_ids[0], list):
            return [self.decode(ids, skip_special_tokens, clean_up_tokenization_spaces) for ids in token_ids]
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        tokens = [self._token(i) for i in token_ids if i not in skip]
        text = "".join(_decode_piece(token, first=i == 0) for i, token in enumerate(tokens))
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        if clean_up_tokenization_spaces:  # transformers' extra pass over the joined text
            text = clean_up_tokenization(text)
        return text


def _decode_piece(token: str, first: bool) -> str:
    """The WordPiece decoder of tokenizers, one token: glue "##" pieces, space others, light clean-up."""
    if not first:
        token = token[2:] if token.startswith("##") else " " + token
    for dirty, clean in _DECODER_CLEANUP:
        token = token.replace(dirty, clean)
    return token


_DECODER_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                    (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def clean_up_tokenization(text: str) -> str:
    """transformers' clean_up_tokenization_spaces: no space before punctuation and English clitics."""
    for dirty, clean in _DECODER_CLEANUP:
        if dirty != " do not":
            text = text.replace(dirty, clean)
    return text

