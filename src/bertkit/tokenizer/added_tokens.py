"""Added tokens: strings found in the text before anything else touches it, each becoming one id, never split.

A tokenizer.json lists them under "added_tokens" ([CLS], [SEP], [MASK], ... and whatever else was added), each with
flags that decide where it matches. `tokenizers` finds them in two passes, and so does `AddedTokens.split`:

    raw text            the tokens with normalized=false are found in the text as given
    normalised pieces   what is left is normalised (NFC), and the tokens with normalized=true are found in that
    the rest            goes on to the split and the merges

Where several tokens could match, the leftmost wins, and of those starting there the longest (Aho-Corasick's
leftmost-longest, as `tokenizers` matches). lstrip / rstrip let a token take the whitespace beside it with it: a
[MASK] with lstrip (ModernBERT's has it) makes "Paris is [MASK]." the tokens of "Paris is", then [MASK], then ".",
with no token for the space, which belongs to the word [MASK] stands for ("Ġcity" is one token, space and all).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bertkit.errors import InputError
from bertkit.tokenizer import unicode_tables as uni

# Rust's char::is_whitespace, the test `tokenizers` uses for lstrip and rstrip
_SPACES = frozenset(chr(code) for first, last in uni.WHITESPACE for code in range(first, last + 1))


@dataclass(frozen=True)
class AddedToken:
    """One of tokenizer.json's "added_tokens", with its id and the flags that decide where it matches."""

    id: int
    content: str
    special: bool = False       # left out by decode(skip_special_tokens=True)
    lstrip: bool = False        # takes the whitespace on its left with it
    rstrip: bool = False        # ... and on its right
    single_word: bool = False   # matches only as a word of its own (not implemented here: refused)
    normalized: bool = True     # matched in the normalised text rather than the raw text

    def as_json(self) -> dict:
        """The token as tokenizer.json writes it."""
        return {"id": self.id, "content": self.content, "single_word": self.single_word, "lstrip": self.lstrip,
                "rstrip": self.rstrip, "normalized": self.normalized, "special": self.special}


class AddedTokens:
    """Cuts a text into pieces to tokenize and added tokens, in `tokenizers`' two passes."""

    def __init__(self, tokens: Sequence[AddedToken], normalize: Callable[[str], str] | None = None,
                 normalize_aligned: Callable[[str], tuple[str, Sequence[int]]] | None = None):
        """`normalize` is the normaliser (None: none); `normalize_aligned` the same with, for each character it
        writes, the index of the character of its input it is aligned with (needed for offsets only)."""
        words = [token.content for token in tokens if token.single_word]
        if words:  # where a "word" ends is Unicode's \w in Rust's regex crate, which bertkit does not hold
            raise InputError(f"added tokens with single_word are not implemented: {', '.join(map(repr, words))}")
        self.normalize = normalize or (lambda text: text)
        self.normalize_aligned = normalize_aligned or (lambda text: (text, range(len(text))))
        raw = [token for token in tokens if not token.normalized]
        # a normalised token is looked for as the normaliser writes it
        normalized = [token for token in tokens if token.normalized]
        self._raw = _Matcher({token.content: token for token in raw})
        self._normalized = _Matcher({self.normalize(token.content): token for token in normalized})

    def split(self, text: str) -> list[tuple[str, int | None]]:
        """(piece, None) for normalised text to tokenize, (match, id) for an added token, in text order; the match
        is the token with the whitespace it took (`tokenizers` spells the token so)."""
        pieces: list[tuple[str, int | None]] = []
        for start, stop, token_id in self._raw.spans(text):
            if token_id is not None:
                pieces.append((text[start:stop], token_id))
            else:
                normalized = self.normalize(text[start:stop])
                pieces += ((normalized[a:b], found) for a, b, found in self._normalized.spans(normalized))
        return [(piece, token_id) for piece, token_id in pieces if piece or token_id is not None]

    def split_aligned(self, text: str) -> list[tuple[str, int | None, Sequence[int]]]:
        """`split` with, for each piece, the index in `text` of each of its characters: an added token's span in the
        original text runs from its first character's index to its last one's, and so does a token's."""
        pieces: list[tuple[str, int | None, Sequence[int]]] = []
        for start, stop, token_id in self._raw.spans(text):
            if token_id is not None:
                pieces.append((text[start:stop], token_id, range(start, stop)))
                continue
            normalized, origin = self.normalize_aligned(text[start:stop])
            for a, b, found in self._normalized.spans(normalized):
                if a < b:
                    pieces.append((normalized[a:b], found, [start + index for index in origin[a:b]]))
        return pieces


class _Matcher:
    """One pass: the tokens of one kind (raw or normalised) found in a text, whitespace stripped where asked."""

    def __init__(self, tokens: dict[str, AddedToken]):
        self.tokens = tokens
        # longest first, so that of the alternatives starting at one place the longest matches
        alternatives = sorted(tokens, key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, alternatives))) if alternatives else None

    def spans(self, text: str) -> list[tuple[int, int, int | None]]:
        """(start, stop, None) for the text between tokens, (start, stop, id) for a token with what it stripped."""
        if self.pattern is None:
            return [(0, len(text), None)]
        pieces: list[tuple[int, int, int | None]] = []
        done = 0  # where the text not yet handed out begins
        for match in self.pattern.finditer(text):
            token = self.tokens[match.group()]
            start, stop = match.span()
            if token.lstrip:  # the whitespace before it, but none that a token before it already took
                while start > done and text[start - 1] in _SPACES:
                    start -= 1
            if token.rstrip:
                while stop < len(text) and text[stop] in _SPACES:
                    stop += 1
            if done < start:
                pieces.append((done, start, None))
            pieces.append((start, stop, token.id))
            done = stop
        if done < len(text):
            pieces.append((done, len(text), None))
        return pieces
