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

    def __init__(self, tokens: Sequence[AddedToken], normalize: Callable[[str], str] | None = None):
        words = [token.content for token in tokens if token.single_word]
        if words:  # where a "word" ends is Unicode's \w in Rust's regex crate, which bertkit does not hold
            raise InputError(f"added tokens with single_word are not implemented: {', '.join(map(repr, words))}")
        self.normalize = normalize or (lambda text: text)
        raw = [token for token in tokens if not token.normalized]
        # a normalised token is looked for as the normaliser writes it
        normalized = [token for token in tokens if token.normalized]
        self._raw = _Matcher({token.content: token for token in raw})
        self._normalized = _Matcher({self.normalize(token.content): token for token in normalized})

    def split(self, text: str) -> list[tuple[str, int | None]]:
        """(piece, None) for normalised text to tokenize, (match, id) for an added token, in text order; the match
        is the token with the whitespace it took (`tokenizers` spells the token so)."""
        pieces: list[tuple[str, int | None]] = []
        for piece, token_id in self._raw.split(text):
            if token_id is not None:
                pieces.append((piece, token_id))
            else:
                pieces += self._normalized.split(self.normalize(piece))
        return [(piece, token_id) for piece, token_id in pieces if piece or token_id is not None]


class _Matcher:
    """One pass: the tokens of one kind (raw or normalised) found in a text, whitespace stripped where asked."""

    def __init__(self, tokens: dict[str, AddedToken]):
        self.tokens = tokens
        # longest first, so that of the alternatives starting at one place the longest matches
        alternatives = sorted(tokens, key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, alternatives))) if alternatives else None

    def split(self, text: str) -> list[tuple[str, int | None]]:
        if self.pattern is None:
            return [(text, None)]
        pieces: list[tuple[str, int | None]] = []
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
                pieces.append((text[done:start], None))
            pieces.append((text[start:stop], token.id))
            done = stop
        if done < len(text):
            pieces.append((text[done:], None))
        return pieces
