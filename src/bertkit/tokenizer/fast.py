"""The "fast" backends: the same text -> ids (and offsets) step, done by Hugging Face's Rust `tokenizers`.

Only normalisation, word splitting and WordPiece or BPE run in Rust (batched, in parallel); truncation,
the special tokens and padding stay in `encoding`, shared with the pure-Python backends, so a fast
backend can only differ from its Python one where their tokenisation differs, and the tests check it
does not. `tokenizers` is an optional dependency (`pip install 'bertkit[fast]'`) imported only here.
"""

from __future__ import annotations

from bertkit.errors import InputError


def available() -> bool:
    """Whether the `tokenizers` package can be imported."""
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


class FastBackend:
    """Text -> ids and offsets (no special tokens added) with a `tokenizers.Tokenizer`."""

    name = "fast"

    def __init__(self, vocab: dict[str, int], *, unk_token: str, never_split: list[str], lowercase: bool,
                 strip_accents: bool | None, tokenize_chinese_chars: bool, clean_text: bool = True,
                 max_input_chars_per_word: int = 100):
        try:
            from tokenizers import AddedToken, Tokenizer, normalizers, pre_tokenizers
            from tokenizers.models import WordPiece
        except ImportError as err:
            raise ImportError("backend='fast' needs the tokenizers package: pip install 'bertkit[fast]' "
                              "(or use backend='python')") from err
        if unk_token not in vocab:
            raise InputError(f"the vocabulary has no unknown token {unk_token!r}")
        tokenizer = Tokenizer(WordPiece(vocab, unk_token=unk_token,
                                        max_input_chars_per_word=max_input_chars_per_word))
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=clean_text, handle_chinese_chars=tokenize_chinese_chars,
            strip_accents=strip_accents, lowercase=lowercase)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        # matched in the raw text and never split, like the special tokens of transformers' BertTokenizer
        tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True)
                                      for token in never_split if token in vocab])
        self._tokenizer = tokenizer

    def encode(self, texts: list[str], offsets: bool = False) -> list[tuple[list[int], list | None]]:
        """For each text, its ids and (when asked) its offsets."""
        return encode_batch(self._tokenizer, texts, offsets)


def encode_batch(tokenizer, texts: list[str], offsets: bool) -> list[tuple[list[int], list | None]]:
    """Each text's ids (no special tokens) and, when asked, offsets, by a `tokenizers.Tokenizer`. Without offsets
    through `encode_batch_fast` (tokenizers 0.21 on), which does not track them: the same ids, a fifth to a
    quarter sooner."""
    if offsets:
        encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
        return [(encoding.ids, encoding.offsets) for encoding in encodings]
    encodings = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)(texts, add_special_tokens=False)
    return [(encoding.ids, None) for encoding in encodings]


class FastBPEBackend:
    """Text -> ids and offsets (no special tokens added) with a `tokenizers.Tokenizer` read from a byte-level BPE
    tokenizer.json, the one `bpe_files.tokenizer_json` writes for the tokenizer, so both backends read the same
    pipeline."""

    name = "fast"

    def __init__(self, tokenizer_json: str):
        try:
            from tokenizers import Tokenizer
        except ImportError as err:
            raise ImportError("backend='fast' needs the tokenizers package: pip install 'bertkit[fast]' "
                              "(or use backend='python')") from err
        self._tokenizer = Tokenizer.from_str(tokenizer_json)

    def encode(self, texts: list[str], offsets: bool = False) -> list[tuple[list[int], list | None]]:
        """For each text, its ids and (when asked) its offsets."""
        return encode_batch(self._tokenizer, texts, offsets)

    def tokens(self, text: str) -> list[str]:
        """The tokens of `text` as strings, as `tokenizers` spells them."""
        return self._tokenizer.encode(text, add_special_tokens=False).tokens
