"""What the tokenizers here share: transformers' call (a text, a pair or a batch of either -> rows -> padding ->
lists or tensors), its padding and truncation rules, and tokens and ids looked up both ways.

A tokenizer class adds its files, its backend (text -> ids, no special tokens), its vocabulary and its decoding:
`BertTokenizer` (WordPiece) and `BPETokenizer` (byte-level BPE). Whatever the backend, the rows, truncation and
padding are built by `encoding`, so both tokenizers follow transformers' rules in one place.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from typing import Any

from bertkit.errors import InputError
from bertkit.tokenizer.beginnings import encode_beginnings
from bertkit.tokenizer.encoding import Row, Specials, build_row, pad_rows
from bertkit.tokenizer.files import SPECIAL_TOKEN_NAMES

VERY_LARGE_INTEGER = int(1e30)  # transformers' "no model_max_length"
LARGE_INTEGER = int(1e20)
PADDING = ("longest", "max_length", "do_not_pad")
TRUNCATION = ("longest_first", "only_first", "only_second", "do_not_truncate")


class BatchEncoding(dict):
    """The model inputs, a dict (`input_ids`, `token_type_ids`, `attention_mask`, ...) with attribute access."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device: Any) -> BatchEncoding:
        """Move the tensors to `device` (for return_tensors="pt")."""
        return BatchEncoding({k: v.to(device) if hasattr(v, "to") else v for k, v in self.items()})


def choose_backend(backend: str) -> str:
    """"auto", "python" or "fast" -> the backend to build: "auto" is "fast" where `tokenizers` is installed."""
    from bertkit.tokenizer import fast as tokenizer_fast

    if backend not in ("auto", "python", "fast"):
        raise InputError(f"backend must be 'auto', 'python' or 'fast', not {backend!r}")
    if backend == "auto":
        return "fast" if tokenizer_fast.available() else "python"
    return backend


class BaseTokenizer:
    """transformers' tokenizer call and look-ups over a subclass's backend and vocabulary.

    A subclass sets `_backend` (its `encode(texts, offsets)` gives each text's ids and offsets, no special tokens),
    `vocab` (the model's tokens -> ids), `added_vocab` (tokens added beside them -> ids), `ids_to_tokens`, the
    special tokens (`unk_token`, ..., `additional_special_tokens`), `model_max_length`, `padding_side`,
    `truncation_side` and `_warned_long`, and defines `__len__` and `decode`."""

    @property
    def backend(self) -> str:
        """Which backend turns text into ids: "python" or "fast"."""
        return self._backend.name

    # ---- special tokens and vocabulary -----------------------------------------------------------

    def _id(self, token: str | None) -> int | None:
        # an added token wins over a vocabulary entry of the same spelling, as in `tokenizers`
        return None if token is None else self.added_vocab.get(token, self.vocab.get(token))

    @property
    def vocab_size(self) -> int:
        """Size of the model's vocabulary (without added tokens), like transformers'."""
        return len(self.vocab)

    @property
    def all_special_tokens(self) -> list[str]:
        """The special tokens, each once."""
        tokens = [getattr(self, name) for name in SPECIAL_TOKEN_NAMES] + self.additional_special_tokens
        return list(dict.fromkeys(t for t in tokens if t is not None))

    @property
    def all_special_ids(self) -> list[int]:
        """The ids of the special tokens."""
        return [self._id(token) for token in self.all_special_tokens]

    unk_token_id = property(lambda self: self._id(self.unk_token))
    sep_token_id = property(lambda self: self._id(self.sep_token))
    pad_token_id = property(lambda self: self._id(self.pad_token))
    cls_token_id = property(lambda self: self._id(self.cls_token))
    mask_token_id = property(lambda self: self._id(self.mask_token))

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Token(s) -> id(s); unknown tokens give the unknown token's id."""
        if isinstance(tokens, str):
            found = self._id(tokens)
            return self.unk_token_id if found is None else found
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int], skip_special_tokens: bool = False):
        """Id(s) -> token(s); an id outside the vocabulary is a ValueError naming it."""
        ids = _to_list(ids)
        if isinstance(ids, int):
            return self._token(ids)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._token(int(i)) for i in ids if int(i) not in skip]

    def _token(self, index: int) -> str:
        token = self.ids_to_tokens.get(index)
        if token is None:
            hint = "labels mark positions that are not predicted with -100" if index < 0 else \
                "were these ids made by another tokenizer?"
            raise InputError(f"id {index} is not in the vocabulary (ids 0..{len(self) - 1}); {hint}")
        return token

    # ---- encoding --------------------------------------------------------------------------------

    def __call__(self, text: str | Sequence[str], text_pair: str | Sequence[str] | None = None,
                 add_special_tokens: bool = True, padding: bool | str = False,
                 truncation: bool | str | None = None, max_length: int | None = None, stride: int = 0,
                 pad_to_multiple_of: int | None = None, padding_side: str | None = None,
                 return_tensors: str | None = None, return_token_type_ids: bool | None = None,
                 return_attention_mask: bool | None = None, return_overflowing_tokens: bool = False,
                 return_special_tokens_mask: bool = False, return_offsets_mapping: bool = False,
                 return_length: bool = False, verbose: bool = True) -> BatchEncoding:
        """Encode a text, a pair, or a batch of either, as transformers' tokenizer call does."""
        texts, pairs, batched = _check_inputs(text, text_pair)
        padding, truncation, max_length = self._strategies(padding, truncation, max_length,
                                                           pad_to_multiple_of, verbose)
        # transformers lets truncation to nothing pass (its rows then keep their length): refused here
        if truncation and max_length < 1:
            raise InputError(f"max_length must be a positive integer, got {max_length}")
        specials = (2 if pairs is None else 3) if add_special_tokens else 0
        if truncation and max_length < specials:
            raise InputError(f"max_length {max_length} leaves no room: the {specials} special tokens ([CLS], [SEP]) "
                             f"of a {'pair' if pairs else 'text'} alone take {specials}")
        if truncation and max_length >= 2 and max_length - 2 < stride:  # checked by tokenizers up front
            raise InputError(f"stride ({stride}) must be smaller than max_length ({max_length}) minus the 2 "
                             f"special tokens of a single text")
        rows = self.encode_rows(texts, pairs, add_special_tokens=add_special_tokens, truncation=truncation,
                                max_length=max_length, stride=stride, offsets=return_offsets_mapping)
        if padding:
            length = max(len(row.input_ids) for row in rows) if padding == "longest" else max_length
            if pad_to_multiple_of and length % pad_to_multiple_of:
                length += pad_to_multiple_of - length % pad_to_multiple_of
            pad_rows(rows, length, self._specials(), padding_side or self.padding_side)

        flat, sample = [], []
        for index, row in enumerate(rows):
            for one in [row, *row.overflow] if return_overflowing_tokens else [row]:
                flat.append(one)
                sample.append(index)
        for row in flat:
            self._warn_if_too_long(row.input_ids, max_length, verbose)
        out: dict[str, list] = {"input_ids": [row.input_ids for row in flat]}
        if return_token_type_ids is not False:
            out["token_type_ids"] = [row.token_type_ids for row in flat]
        if return_attention_mask is not False:
            out["attention_mask"] = [row.attention_mask for row in flat]
        if return_special_tokens_mask:
            out["special_tokens_mask"] = [row.special_tokens_mask for row in flat]
        if return_offsets_mapping:
            out["offset_mapping"] = [row.offsets for row in flat]
        if return_length:
            out["length"] = [len(row.input_ids) for row in flat]
        if return_overflowing_tokens:
            out["overflow_to_sample_mapping"] = sample
        if return_tensors is not None:
            return BatchEncoding(_to_tensors(out, return_tensors))
        if not batched and not return_overflowing_tokens:
            out = {key: value[0] if value and isinstance(value[0], list) else value for key, value in out.items()}
        return BatchEncoding(out)

    def encode_rows(self, texts: list[str], pairs: list[str] | None = None, *, add_special_tokens: bool = True,
                    truncation: str | None = None, max_length: int | None = None, stride: int = 0,
                    offsets: bool = False) -> list[Row]:
        """The rows (ids, token types, masks, offsets, overflow) of texts and optional pairs, unpadded."""
        encoded_a = self._backend.encode(texts, offsets=offsets)
        encoded_b = self._backend.encode(pairs, offsets=offsets) if pairs is not None else [None] * len(texts)
        specials = self._specials()
        return [build_row(a, b, specials, add_special_tokens, truncation, max_length, stride, self.truncation_side)
                for a, b in zip(encoded_a, encoded_b)]

    def encode_cut(self, texts: list[str], pairs: list[str] | None = None, *, max_length: int | None,
                   offsets: bool = False) -> tuple[list[Row], list[int | None]]:
        """Rows with special tokens, those over `max_length` cut as `truncation=True` cuts them (None: none cut),
        and each row's length uncut (None for a text found too long from its beginning alone), from one pass of the
        backend: a caller that says which texts were cut need not tokenize them twice. A long text on its own, cut
        on the right by a tokenizer with word boundaries (`word_boundary`), is tokenized only as far as its kept
        tokens reach (`beginnings`): long documents are most of the work."""
        boundary = self.word_boundary()
        longer = [False] * len(texts)
        if pairs is None and max_length is not None and max_length >= 2 and self.truncation_side == "right" \
                and boundary is not None:
            encoded_a, longer = encode_beginnings(self._backend.encode, texts, max_length - 2, boundary, offsets)
        else:
            encoded_a = self._backend.encode(texts, offsets=offsets)
        encoded_b = self._backend.encode(pairs, offsets=offsets) if pairs is not None else [None] * len(texts)
        specials = self._specials()
        rows, lengths = [], []
        for a, b, long in zip(encoded_a, encoded_b, longer):
            length = None if long else len(a[0]) + (2 if b is None else len(b[0]) + 3)
            cut = long or (max_length is not None and length > max_length)
            rows.append(build_row(a, b, specials, True, "longest_first" if cut else None, max_length, 0,
                                  self.truncation_side))
            lengths.append(length)
        return rows, lengths

    def word_boundary(self) -> re.Pattern | None:
        """The characters at which this tokenizer always ends a word, whatever surrounds them (the text before one
        then tokenizes as the whole text does up to there), as a one-character pattern; None where it has none
        (`beginnings`)."""
        return None

    def batch_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text as the backend makes them: no special tokens, no truncation, no rows (what
        `self(texts, add_special_tokens=False)["input_ids"]` gives, at corpus scale without its per-row work)."""
        return [ids for ids, _ in self._backend.encode(list(texts))]

    def _specials(self) -> Specials:
        return Specials(self.cls_token_id, self.sep_token_id, self.pad_token_id)

    def _strategies(self, padding: bool | str | None, truncation: bool | str | None, max_length: int | None,
                    pad_to_multiple_of: int | None, verbose: bool) -> tuple[str | None, str | None, int | None]:
        """transformers' rules for padding/truncation/max_length defaults (None means off)."""
        if max_length is not None and padding is False and truncation is None:
            truncation = "longest_first"  # max_length alone asks for truncation
        if padding is True:
            if verbose and max_length is not None and truncation in (None, False, "do_not_truncate"):
                warnings.warn("`max_length` is ignored when `padding`=`True` and there is no truncation "
                              "strategy. To pad to max length, use `padding='max_length'`.", stacklevel=3)
            padding = "longest"
        if padding not in (False, None, *PADDING):
            raise InputError(f"padding must be True, False or one of {PADDING}, not {padding!r}")
        if truncation is True:
            truncation = "longest_first"
        if truncation not in (False, None, *TRUNCATION):
            raise InputError(f"truncation must be True, False or one of {TRUNCATION}, not {truncation!r}")
        padding = None if padding in (False, None, "do_not_pad") else padding
        truncation = None if truncation in (False, None, "do_not_truncate") else truncation
        if max_length is None:
            if padding == "max_length":
                if self.model_max_length > LARGE_INTEGER:
                    padding = None
                else:
                    max_length = self.model_max_length
            if truncation:
                if self.model_max_length > LARGE_INTEGER:
                    truncation = None
                else:
                    max_length = self.model_max_length
        if padding and self.pad_token_id is None:
            raise InputError("asked to pad, but the tokenizer has no padding token (pad_token)")
        if truncation and padding and pad_to_multiple_of and max_length and max_length % pad_to_multiple_of:
            raise InputError(f"truncation length ({max_length}) is not a multiple of pad_to_multiple_of "
                             f"({pad_to_multiple_of})")
        return padding, truncation, max_length

    def _warn_if_too_long(self, ids: list[int], max_length: int | None, verbose: bool) -> None:
        if max_length is None and verbose and 0 < self.model_max_length < len(ids) and not self._warned_long:
            warnings.warn(f"Token indices sequence length is longer than the specified maximum sequence length "
                          f"for this model ({len(ids)} > {self.model_max_length}). Running this sequence through "
                          f"the model will result in indexing errors", stacklevel=4)
            self._warned_long = True

    def encode(self, text: str | Sequence[str], text_pair: str | Sequence[str] | None = None,
               add_special_tokens: bool = True, padding: bool | str = False, truncation: bool | str | None = None,
               max_length: int | None = None, stride: int = 0, return_tensors: str | None = None) -> Any:
        """The input ids of a text (or pair), with special tokens by default."""
        return self(text, text_pair, add_special_tokens=add_special_tokens, padding=padding,
                    truncation=truncation, max_length=max_length, stride=stride,
                    return_tensors=return_tensors)["input_ids"]

    def tokenize(self, text: str, pair: str | None = None, add_special_tokens: bool = False) -> list[str]:
        """The tokens of a text or pair, as the vocabulary spells them (WordPiece's "##" inside words, byte-level
        BPE's bytes as characters)."""
        ids = self(text, pair, add_special_tokens=add_special_tokens, verbose=False)["input_ids"]
        return [self.ids_to_tokens[i] for i in ids]

    # ---- decoding --------------------------------------------------------------------------------

    def batch_decode(self, sequences: Any, skip_special_tokens: bool = False,
                     clean_up_tokenization_spaces: bool | None = None) -> list[str]:
        """`decode` for each sequence of a batch."""
        sequences = _to_list(sequences)
        if sequences and not isinstance(sequences[0], list):
            sequences = [sequences]
        return [self.decode(ids, skip_special_tokens, clean_up_tokenization_spaces) for ids in sequences]



def _to_list(values: Any) -> Any:
    """Tensors and arrays -> (nested) lists of ints."""
    if hasattr(values, "tolist"):
        return values.tolist()
    if isinstance(values, (list, tuple)):
        return [_to_list(v) for v in values]
    return int(values) if not isinstance(values, int) else values


def _check_inputs(text: Any, text_pair: Any) -> tuple[list[str], list[str] | None, bool]:
    """(texts, pairs or None, batched) with clear errors for anything that is not text."""
    if isinstance(text, str):
        if text_pair is not None and not isinstance(text_pair, str):
            raise InputError(f"text is one string, so text_pair must be one string too, not "
                             f"{type(text_pair).__name__}")
        # as transformers: an empty text_pair means no pair for a single text
        return [text], [text_pair] if text_pair else None, False
    if not isinstance(text, (list, tuple)):
        raise InputError(f"text must be a str or a list of str, not {type(text).__name__}")
    if not text:
        raise InputError("text is an empty batch (a list with no texts)")
    for name, values in (("text", text), ("text_pair", text_pair)):
        if values is None:
            continue
        if not isinstance(values, (list, tuple)):
            raise InputError(f"text is a batch, so {name} must be a list of str of the same length, "
                             f"not {type(values).__name__}")
        bad = next((i for i, value in enumerate(values) if not isinstance(value, str)), None)
        if bad is not None:
            raise InputError(f"{name}[{bad}] is {type(values[bad]).__name__}, not str: every item of a "
                             f"batch must be a text")
    if text_pair is not None and len(text_pair) != len(text):
        raise InputError(f"text has {len(text)} items but text_pair has {len(text_pair)}")
    return list(text), None if text_pair is None else list(text_pair), True


def _to_tensors(batch: dict[str, list], kind: str) -> dict[str, Any]:
    """Lists of equal-length rows -> torch tensors ("pt") or NumPy arrays ("np")."""
    if kind not in ("pt", "np"):
        raise InputError(f"return_tensors must be 'pt', 'np' or None, not {kind!r}")
    for key, rows in batch.items():
        if rows and isinstance(rows[0], list) and len({len(row) for row in rows}) > 1:
            raise InputError(f"cannot make a tensor of {key}: rows have different lengths; "
                             f"pass padding=True (and truncation=True) for a batch of tensors")
    if kind == "np":
        import numpy as np

        return {key: np.array(rows, dtype=np.int64) for key, rows in batch.items()}
    import torch

    return {key: torch.tensor(rows, dtype=torch.long) for key, rows in batch.items()}
