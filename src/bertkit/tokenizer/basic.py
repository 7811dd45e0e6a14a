"""BERT's tokenisation in pure Python: normalise, split into words, WordPiece; the "python" backend.

The steps and their order are those of Hugging Face `tokenizers` (BertNormalizer, BertPreTokenizer,
WordPiece), which is the reference bertkit matches id for id and offset for offset:

    clean text       drop control/format characters, NUL and U+FFFD; any whitespace becomes " "
    Chinese chars    put spaces around every CJK ideograph, so each is a word of its own
    strip accents    NFD, then drop non-spacing marks (default: on when lowercasing)
    lowercase        character by character (so a final sigma stays σ)
    split            on whitespace; every punctuation character is a word of its own
    WordPiece        greedy longest match first, "##" marks a piece inside a word; too long -> [UNK]

Speed comes from doing as little per character as possible. Most text (ASCII, CJK, CJK punctuation,
already-unaccented letters) needs no normalisation beyond `str.lower()`, so one regular expression
finds its words directly in the original string, whose positions are then the offsets. Only chunks
with a character that changes (a control character to drop, an accent to strip, an unusual case
mapping) go through the per-character path, which keeps each normalised character's position in
the original text. WordPiece results are cached per word, so frequent words cost one dict lookup.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import chain

from bertkit.errors import InputError
from bertkit.tokenizer import unicode_tables as uni

# a word's alignment: its start in the original text when it was not changed by normalisation,
# else the original position of each of its characters
Alignment = int | list[int]

_WHITESPACE = uni.char_class(uni.WHITESPACE)
_PUNCTUATION = uni.char_class(uni.PUNCTUATION)
_CJK = uni.char_class(uni.CJK)


def _codes(ranges: tuple[tuple[int, int], ...]) -> list[int]:
    return [code for first, last in ranges for code in range(first, last + 1)]


class _Cache(dict):
    """key -> computed value, remembered while there is room; indexing it is the hot path."""

    def __init__(self, compute, capacity: int = 1 << 17):
        super().__init__()
        self.compute, self.capacity = compute, capacity

    def __missing__(self, key):
        value = self.compute(key)
        if len(self) < self.capacity:
            self[key] = value
        return value


def _decomposed(char: str) -> tuple[tuple[str, int], ...]:
    """NFD of one character as (character, change): 0 replaces the original, 1 is inserted after it."""
    return tuple((part, 0 if k == 0 else 1) for k, part in enumerate(uni.decompose(char)))


_DECOMPOSED = _Cache(_decomposed)
_COMBINING_CLASS = _Cache(uni.combining_class)
_LOWERCASE = _Cache(uni.lowercase)
_NONSPACING = _Cache(lambda char: uni.contains(uni.NONSPACING_MARK, char))


class BasicTokenizer:
    """Normalise text and split it into words exactly as Hugging Face's Rust BERT tokenizer does."""

    def __init__(self, lowercase: bool = True, strip_accents: bool | None = None,
                 tokenize_chinese_chars: bool = True, clean_text: bool = True):
        self.lowercase = lowercase
        self.strip_accents = lowercase if strip_accents is None else strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.clean_text = clean_text
        isolated = _PUNCTUATION + (_CJK if tokenize_chinese_chars else "")
        self._prepared = _Cache(self._prepare)
        self._word = re.compile(f"[{isolated}]|[^{_WHITESPACE}{isolated}]+")
        # chunks that normalise independently: split on whitespace that clean_text keeps as a space
        separators = "".join(c for c in map(chr, _codes(uni.WHITESPACE))
                             if not (clean_text and uni.contains(uni.CONTROL, c)))
        self._chunk = re.compile(f"[^{re.escape(separators)}]+")
        # Characters that rule out the fast paths. `_changing`: normalisation would do more to them than
        # str.lower() (decomposable characters are found by unicodedata.is_normalized, in C). `_before_nfd`:
        # Python's NFD differs from tokenizers' on them, or they are dropped; `_special_case`: str.lower()
        # differs from tokenizers' per-character lowercase (İ, a final Σ, letters newer than Python's Unicode).
        control = uni.char_class(uni.CONTROL) if clean_text else ""
        special_case = "\u0130\u03a3" + "".join(re.escape(chr(c)) for c in uni.LOWERCASE) if lowercase else ""
        marks = uni.char_class(uni.NONSPACING_MARK) if self.strip_accents else ""
        self._changing = re.compile(f"[{control}{marks}{special_case}]") if control or marks or special_case else None
        differs = uni.char_class(uni.starters() + uni.NO_DECOMPOSITION)
        self._before_nfd = re.compile(f"[{control}{differs}]")
        self._special_case = re.compile(f"[{special_case}]") if special_case else None
        self._nonspacing = re.compile(f"[{uni.char_class(uni.NONSPACING_MARK)}]+")

    def _is_simple(self, text: str) -> bool:
        """True when normalising `text` does nothing but what str.lower() does (if lowercasing)."""
        if self._changing is not None and self._changing.search(text):
            return False
        return not self.strip_accents or unicodedata.is_normalized("NFD", text)

    def split(self, text: str) -> list[str]:
        """The normalised words of `text`."""
        if self._is_simple(text):
            return self._word.findall(text.lower() if self.lowercase else text)
        if self.strip_accents and not self._before_nfd.search(text):
            # without offsets to keep, strip accents over the whole text: NFD, then delete the marks
            stripped = self._nonspacing.sub("", unicodedata.normalize("NFD", text))
            if self._special_case is None or not self._special_case.search(stripped):
                return self._word.findall(stripped.lower() if self.lowercase else stripped)
        return [word for word, _ in self.split_with_alignment(text)]

    def split_with_alignment(self, text: str) -> list[tuple[str, Alignment]]:
        """The normalised words with where they came from (see `Alignment`)."""
        if self._is_simple(text):
            lowered = text.lower() if self.lowercase else text
            return [(match.group(), match.start()) for match in self._word.finditer(lowered)]
        words: list[tuple[str, Alignment]] = []
        for chunk in self._chunk.finditer(text):
            start, piece = chunk.start(), chunk.group()
            if self._is_simple(piece):
                lowered = piece.lower() if self.lowercase else piece
                words += [(m.group(), start + m.start()) for m in self._word.finditer(lowered)]
                continue
            normalized, positions = self.normalize(piece)
            for m in self._word.finditer(normalized):
                words.append((m.group(), [start + p for p in positions[m.start():m.end()]]))
        return words

    def _prepare(self, char: str) -> str:
        """clean_text and the spaces around CJK for one character: "" when it is dropped."""
        if self.clean_text:
            if uni.contains(uni.CONTROL, char):
                return ""
            if uni.contains(uni.WHITESPACE, char):
                return " "
        if self.tokenize_chinese_chars and uni.contains(uni.CJK, char):
            return f" {char} "
        return char

    def normalize(self, text: str) -> tuple[str, list[int]]:
        """The normalised text and, for each of its characters, the index of its source character."""
        prepared = list(map(self._prepared.__getitem__, text))
        chars = list("".join(prepared))
        positions = [i for i, part in enumerate(prepared) for _ in part]
        if self.strip_accents:
            chars, positions = _strip_accents(chars, positions)
        if self.lowercase:
            lowered = list(map(_LOWERCASE.__getitem__, chars))
            if len(lowered) != sum(map(len, lowered)):  # İ becomes i + a combining dot
                positions = [p for p, part in zip(positions, lowered) for _ in part]
            chars = lowered
        return "".join(chars), positions


def _strip_accents(chars: list[str], positions: list[int]) -> tuple[list[str], list[int]]:
    """NFD, then drop non-spacing marks, keeping positions the way `tokenizers` does."""
    pairs = [pair for char in chars for pair in _DECOMPOSED[char]]
    classes = list(map(_COMBINING_CLASS.__getitem__, (char for char, _ in pairs)))
    if any(classes):
        # canonical ordering: a run of combining marks is sorted (stably) by combining class; each
        # character carries its change along, as in tokenizers' alignment-tracking NFD
        i = 0
        while i < len(pairs):
            if classes[i] == 0:
                i += 1
                continue
            end = i
            while end < len(pairs) and classes[end] > 0:
                end += 1
            pairs[i:end] = sorted(pairs[i:end], key=lambda pair: _COMBINING_CLASS[pair[0]])
            i = end
    # a replacing character takes the next source position, an inserted one repeats the previous
    out_chars, out_positions = [], []
    source = 0
    previous = positions[0] if positions else 0
    for char, change in pairs:
        if change == 0:
            previous = positions[source]
            source += 1
        if not _NONSPACING[char]:
            out_chars.append(char)
            out_positions.append(previous)
    return out_chars, out_positions


class WordPiece:
    """Greedy longest-match-first WordPiece over a vocabulary, with a per-word cache."""

    def __init__(self, vocab: dict[str, int], unk_token: str = "[UNK]", max_input_chars_per_word: int = 100,
                 prefix: str = "##", cache_size: int = 200_000):
        if unk_token not in vocab:
            raise InputError(f"the vocabulary has no unknown token {unk_token!r}")
        self.vocab = vocab
        self.unk_id = vocab[unk_token]
        self.max_input_chars_per_word = max_input_chars_per_word
        self.prefix = prefix
        # no vocab entry is longer than these, so longer substrings need not be looked up
        self._longest_first = max((len(t) for t in vocab if not t.startswith(prefix)), default=0)
        self._longest_inner = max((len(t) - len(prefix) for t in vocab if t.startswith(prefix)), default=0)
        # (id, start, end) of each piece, and the ids alone: indexing these is the hot path
        self.pieces = _Cache(self._split, cache_size)
        self.ids = _Cache(self._ids, cache_size)

    def _ids(self, word: str) -> tuple[int, ...]:
        return tuple(piece[0] for piece in self.pieces[word])

    def _split(self, word: str) -> tuple[tuple[int, int, int], ...]:
        n = len(word)
        if n > self.max_input_chars_per_word:
            return ((self.unk_id, 0, n),)
        vocab, prefix = self.vocab, self.prefix
        pieces = []
        start = 0
        while start < n:
            end = min(n, start + (self._longest_inner if start else self._longest_first))
            while end > start:
                token = word[start:end] if start == 0 else prefix + word[start:end]
                token_id = vocab.get(token)
                if token_id is not None:
                    pieces.append((token_id, start, end))
                    break
                end -= 1
            else:  # no piece fits: the whole word is unknown
                return ((self.unk_id, 0, n),)
            start = end
        return tuple(pieces)


class PythonBackend:
    """Text -> ids and offsets (no special tokens added) in pure Python: added tokens, words, pieces."""

    name = "python"

    def __init__(self, vocab: dict[str, int], *, unk_token: str, never_split: list[str], lowercase: bool,
                 strip_accents: bool | None, tokenize_chinese_chars: bool, clean_text: bool = True,
                 max_input_chars_per_word: int = 100):
        self.basic = BasicTokenizer(lowercase, strip_accents, tokenize_chinese_chars, clean_text)
        self.wordpiece = WordPiece(vocab, unk_token, max_input_chars_per_word)
        self._added = {token: vocab[token] for token in never_split if token in vocab}
        # leftmost match, and the longest one where several start at the same place (as Aho-Corasick)
        alternatives = sorted(self._added, key=len, reverse=True)
        self._added_re = re.compile("|".join(map(re.escape, alternatives))) if alternatives else None

    def _segments(self, text: str) -> list[tuple[str, int, int | None]]:
        """(segment, start, added-token id or None): the text cut around added tokens."""
        if self._added_re is None or not self._added_re.search(text):
            return [(text, 0, None)]
        segments: list[tuple[str, int, int | None]] = []
        position = 0
        for match in self._added_re.finditer(text):
            if match.start() > position:
                segments.append((text[position:match.start()], position, None))
            segments.append((match.group(), match.start(), self._added[match.group()]))
            position = match.end()
        if position < len(text):
            segments.append((text[position:], position, None))
        return segments

    def encode_ids(self, text: str) -> list[int]:
        """The token ids of `text`."""
        ids_of, split = self.wordpiece.ids.__getitem__, self.basic.split
        if self._added_re is None or not self._added_re.search(text):
            return list(chain.from_iterable(map(ids_of, split(text))))
        ids: list[int] = []
        for segment, _, added in self._segments(text):
            if added is None:
                ids += chain.from_iterable(map(ids_of, split(segment)))
            else:
                ids.append(added)
        return ids

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """The token ids of `text` and each token's (start, end) in it."""
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        pieces_of = self.wordpiece.pieces.__getitem__
        for segment, base, added in self._segments(text):
            if added is not None:
                ids.append(added)
                offsets.append((base, base + len(segment)))
                continue
            for word, where in self.basic.split_with_alignment(segment):
                for token_id, start, end in pieces_of(word):
                    ids.append(token_id)
                    if isinstance(where, int):
                        offsets.append((base + where + start, base + where + end))
                    else:
                        offsets.append((base + where[start], base + where[end - 1] + 1))
        return ids, offsets

    def encode(self, texts: list[str], offsets: bool = False) -> list[tuple[list[int], list | None]]:
        """For each text, its ids and (when asked) its offsets."""
        if offsets:
            return [self.encode_offsets(text) for text in texts]
        return [(self.encode_ids(text), None) for text in texts]
