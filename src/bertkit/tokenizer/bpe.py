"""BPETokenizer: byte-level BPE (ModernBERT's, OLMo's kind) with Hugging Face transformers' API and exact ids.

    tok = BPETokenizer.from_pretrained("modernbert_dir")     # tokenizer.json (+ tokenizer_config.json)
    enc = tok(["The capital of France is [MASK].", "a pair"], ["", "of texts"], padding=True, truncation=True,
              max_length=16, return_tensors="pt")
    tok.decode(enc["input_ids"][0], skip_special_tokens=True)

The ids, token types, attention masks and offsets are those of transformers' PreTrainedTokenizerFast for the same
tokenizer.json and arguments, rows [CLS] A [SEP] B [SEP] as ModernBERT's post-processor builds them. Text becomes
ids in a backend, `bytelevel` (pure Python) or `fast` (Hugging Face `tokenizers`, used by "auto" when installed),
with each token's character span in the original text where return_offsets_mapping asks (transformers' offsets);
the call, truncation and padding are `base`'s and `encoding`'s, shared with `BertTokenizer`; this module holds the
vocabulary, the special tokens and the decoding.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.errors import InputError
from bertkit.tokenizer.added_tokens import AddedToken
from bertkit.tokenizer.base import VERY_LARGE_INTEGER, BaseTokenizer, _to_list, choose_backend
from bertkit.tokenizer.bert import clean_up_tokenization
from bertkit.tokenizer.bpe_files import read_bpe_files, tokenizer_json, write_bpe_files
from bertkit.tokenizer.bytelevel import CHAR_TO_BYTE, PythonBPEBackend
from bertkit.tokenizer.files import check_vocab_ids


class BPETokenizer(BaseTokenizer):
    """Byte-level BPE tokenizer: added tokens, NFC, GPT-2's split, merges; pairs, padding, truncation, decoding."""

    def __init__(self, vocab: dict[str, int], merges: Sequence[tuple[str, str]], *,
                 added_tokens: Sequence[AddedToken] = (), nfc: bool = False, add_prefix_space: bool = False,
                 bpe_unk_token: str | None = None, fuse_unk: bool = False, ignore_merges: bool = False,
                 unk_token: str | None = "[UNK]", sep_token: str = "[SEP]", pad_token: str | None = "[PAD]",
                 cls_token: str = "[CLS]", mask_token: str | None = "[MASK]",
                 additional_special_tokens: Sequence[str] = (), model_max_length: int = VERY_LARGE_INTEGER,
                 padding_side: str = "right", truncation_side: str = "right", backend: str = "auto"):
        """`vocab` and `merges` are the BPE model's (tokens spelled in byte characters, merges in rank order);
        `added_tokens` the tokens matched before the split. `bpe_unk_token` is the model's own unknown token (none in
        byte-level vocabularies, which hold every byte); `unk_token` and the others name the special tokens."""
        self.vocab = dict(vocab)
        self.merges = [tuple(merge) for merge in merges]
        self.nfc, self.add_prefix_space = nfc, add_prefix_space
        self.bpe_unk_token, self.fuse_unk, self.ignore_merges = bpe_unk_token, fuse_unk, ignore_merges
        self.unk_token, self.sep_token, self.pad_token = unk_token, sep_token, pad_token
        self.cls_token, self.mask_token = cls_token, mask_token
        self.additional_special_tokens = list(additional_special_tokens)
        self.model_max_length = model_max_length
        self.padding_side, self.truncation_side = padding_side, truncation_side
        if cls_token is None or sep_token is None:
            raise InputError("a BPETokenizer needs its [CLS] and [SEP] tokens (cls_token, sep_token): every row is "
                             "[CLS] A [SEP]")
        # a special token the files lack is added after the last id, never split, as transformers adds it
        self.added_tokens = list(added_tokens)
        known = {**self.vocab, **{token.content: token.id for token in self.added_tokens}}
        for token in self.all_special_tokens:
            if token not in known:
                known[token] = max(known.values(), default=-1) + 1
                self.added_tokens.append(AddedToken(known[token], token, special=True, normalized=False))
        check_vocab_ids(known)
        self.added_vocab = {token.content: token.id for token in self.added_tokens}
        self.ids_to_tokens = {index: token for token, index in known.items()}
        self._special_added = {token.id for token in self.added_tokens if token.special}
        self._warned_long = False
        self._backend = self._make_backend(backend)

    def _make_backend(self, backend: str):
        from bertkit.tokenizer import fast as tokenizer_fast

        backend = choose_backend(backend)
        if backend == "fast":
            return tokenizer_fast.FastBPEBackend(json.dumps(tokenizer_json(self), ensure_ascii=False))
        return PythonBPEBackend(self.vocab, self.merges, self.added_tokens, nfc=self.nfc,
                                add_prefix_space=self.add_prefix_space, unk_token=self.bpe_unk_token,
                                fuse_unk=self.fuse_unk, ignore_merges=self.ignore_merges)

    # ---- files -----------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | Path, backend: str = "auto", **overrides: Any) -> BPETokenizer:
        """Load from a local directory with tokenizer.json (+ tokenizer_config.json, special_tokens_map.json)."""
        settings = read_bpe_files(path)
        return cls(**{**settings, **overrides}, backend=backend)

    def save_pretrained(self, path: str | Path) -> list[Path]:
        """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json (loadable by transformers)."""
        return write_bpe_files(self, path)

    # ---- vocabulary ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Size of the vocabulary with added tokens."""
        return len(self.ids_to_tokens)

    def get_vocab(self) -> dict[str, int]:
        """{token: id} including added tokens."""
        return {**self.vocab, **self.added_vocab}

    def __repr__(self) -> str:
        return (f"BPETokenizer(vocab_size={self.vocab_size}, added_tokens={len(self.added_tokens)}, nfc={self.nfc}, "
                f"backend={self.backend!r}, model_max_length={self.model_max_length})")

    # ---- encoding --------------------------------------------------------------------------------

    def tokenize(self, text: str, pair: str | None = None, add_special_tokens: bool = False) -> list[str]:
        """The tokens of a text or pair as strings (BPE's in byte characters, "Ġ" for a space), an added token as it
        stands in the text: ModernBERT's [MASK] takes the space before it, so "is [MASK]" gives "Ġis", " [MASK]"."""
        first = self._backend.tokens(text)
        second = self._backend.tokens(pair) if pair else None  # an empty pair is no pair, as in the call
        if not add_special_tokens:
            return first + (second or [])
        return [self.cls_token, *first, self.sep_token, *([] if second is None else [*second, self.sep_token])]

    # ---- decoding --------------------------------------------------------------------------------

    def decode(self, token_ids: Any, skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool | None = None) -> str | list[str]:
        """Ids -> text: each token's byte characters back to bytes, all of them read as UTF-8 (a sequence cut
        inside a character gives U+FFFD there, as `tokenizers` does). skip_special_tokens leaves out the added
        tokens flagged special. The text comes back as written, so WordPiece's clean-up (no space before
        punctuation) is off unless clean_up_tokenization_spaces=True asks for it."""
        token_ids = _to_list(token_ids)
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if token_ids and isinstance(token_ids[0], list):
            return [self.decode(ids, skip_special_tokens, clean_up_tokenization_spaces) for ids in token_ids]
        skip = self._special_added if skip_special_tokens else set()
        data = b"".join(_token_bytes(self._token(i)) for i in token_ids if i not in skip)
        text = data.decode("utf-8", errors="replace")
        return clean_up_tokenization(text) if clean_up_tokenization_spaces else text


def _token_bytes(token: str) -> bytes:
    """A token's bytes: its characters read through GPT-2's table, or, for a token outside that alphabet (an added
    token such as "[CLS]" in Latin-1 letters stands for itself either way; a run of spaces does not), its UTF-8."""
    try:
        return bytes(CHAR_TO_BYTE[char] for char in token)
    except KeyError:
        return token.encode("utf-8")
